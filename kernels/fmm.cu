// FMM expansion kernels: P2M, M2M / M2L / L2L (rotation-based O(p^3)), plain O(p^4) M2L,
// L2P and M2P, fp32, compiled by NVRTC with -DORDER=p (all sizes static) and --use_fast_math.
//
// Storage and normalization are those of crates/fmm/src/expansions (Racah-normalized
// coefficients, three scalar expansions component-major, m >= 0 only, index(n, m) =
// n(n+1)/2 + m), complex as float2. The translation and evaluation formulas are ports of
// crates/fmm/src/operators/mod.rs (see there for the derivations); the rotation matrices and
// z-axis tables are computed on the host in f64 (crates/gpu/src/tables.rs) and read here.
//
// Layouts: one output cell per thread block for the translations (thread = (component,
// coefficient), the three rotation steps separated by __syncthreads, accumulation in registers,
// one store per block); one leaf per block for P2M (thread = coefficient, particles streamed
// through shared memory); one slice of <= EVAL_BLOCK targets of a leaf per block for L2P / M2P
// (thread = target, the expansion expanded to +-m in shared memory, the solid harmonics streamed
// column by column with their recurrences: no per-thread arrays).

#ifndef ORDER
#error "compile with -DORDER=p (the expansion order; vortex-gpu passes the evaluator's order)"
#endif
#define P ORDER
#define NC ((P + 1) * (P + 2) / 2)
#define NF ((P + 1) * (P + 1))
#define SQ ((P + 1) * (P + 2) * (2 * P + 3) / 6) /* sum_{n<=p} (n+1)^2 */
#define ROT_STRIDE (2 * (P + 1) + 4 * SQ)
#define TR_THREADS (((3 * NC) + 31) / 32 * 32)
#define P2M_THREADS ((NC + 31) / 32 * 32)
#ifndef EVAL_BLOCK
#error "compile with -DEVAL_BLOCK=n (targets per L2P / M2P block, set by vortex-gpu)"
#endif

__device__ __forceinline__ int idx(int n, int m) { return n * (n + 1) / 2 + m; }
__device__ __forceinline__ int fidx(int n, int m) { return n * n + n + m; }
__device__ __forceinline__ int sqoff(int n) { return n * (n + 1) * (2 * n + 1) / 6; }
__device__ __forceinline__ float2 cmul(float2 a, float2 b)
{
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
__device__ __forceinline__ float2 cconj(float2 a) { return make_float2(a.x, -a.y); }
__device__ __forceinline__ float2 cadd(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 cscale(float2 a, float s) { return make_float2(a.x * s, a.y * s); }

__device__ __forceinline__ void decode(int i, int& n, int& m)
{
    n = 0;
    while ((n + 1) * (n + 2) / 2 <= i) ++n;
    m = i - n * (n + 1) / 2;
}

// ------------------------------------------------------------------------------------------
// P2M: M[c][(n,m)] = K_n^m sum_j a_jc conj(R_n^m(x_j - center)).
// tasks[b] = (first source, count, cell, 0); knm[i] = K_n^m.
extern "C" __global__ void __launch_bounds__(P2M_THREADS) p2m(
    const float4* __restrict__ spos, const float4* __restrict__ sstr,
    const int4* __restrict__ tasks, const float4* __restrict__ centers,
    const float* __restrict__ knm, float2* __restrict__ mult)
{
    __shared__ float4 sh_p[P2M_THREADS];
    __shared__ float4 sh_a[P2M_THREADS];
    const int4 task = tasks[blockIdx.x];
    const float4 ctr = centers[task.z];
    const int i = threadIdx.x;
    int n, m;
    decode(min(i, NC - 1), n, m);
    float2 acc0 = make_float2(0.f, 0.f), acc1 = acc0, acc2 = acc0;
    for (int base = 0; base < task.y; base += P2M_THREADS) {
        int j = base + threadIdx.x;
        if (j < task.y) {
            float4 p = spos[task.x + j];
            sh_p[threadIdx.x] = make_float4(p.x - ctr.x, p.y - ctr.y, p.z - ctr.z, 0.f);
            sh_a[threadIdx.x] = sstr[task.x + j];
        }
        __syncthreads();
        const int cnt = min(P2M_THREADS, task.y - base);
        for (int k = 0; k < cnt; ++k) {
            float4 d = sh_p[k];
            float r2 = d.x * d.x + d.y * d.y + d.z * d.z;
            // R_m^m = prod_{q<=m} -(x + i y) / (2q)
            float2 r = make_float2(1.f, 0.f);
            for (int q = 1; q <= m; ++q) {
                r = cmul(r, make_float2(-d.x, -d.y));
                r = cscale(r, 0.5f / (float)q);
            }
            float2 prev2 = r, prev1 = cscale(r, d.z);
            if (n > m) r = prev1;
            for (int nn = m + 2; nn <= n; ++nn) {
                float inv = 1.0f / (float)((nn + m) * (nn - m));
                float2 cur = make_float2(((2 * nn - 1) * d.z * prev1.x - r2 * prev2.x) * inv,
                                         ((2 * nn - 1) * d.z * prev1.y - r2 * prev2.y) * inv);
                prev2 = prev1;
                prev1 = cur;
                r = cur;
            }
            float4 a = sh_a[k];
            float2 rc = cconj(r);
            acc0 = cadd(acc0, cscale(rc, a.x));
            acc1 = cadd(acc1, cscale(rc, a.y));
            acc2 = cadd(acc2, cscale(rc, a.z));
        }
        __syncthreads();
    }
    if (i < NC) {
        float k = knm[i];
        float2* out = mult + (size_t)task.z * 3 * NC;
        out[i] = cscale(acc0, k);
        out[NC + i] = cscale(acc1, k);
        out[2 * NC + i] = cscale(acc2, k);
    }
}

// ------------------------------------------------------------------------------------------
// Rotation-based translations. KIND 0: M2M (z-table lower, powers of -d), 1: M2L (full,
// powers of 1/d), 2: L2L (upper, powers of d). tasks[b] = (output cell, first entry, end
// entry, 0), entries[e] = (input cell, rotation, distance as float bits, 0). Rotation r at
// rots + r * ROT_STRIDE: phases e^{i m phi} (P+1 float2), then fwd_re, fwd_im, bwd_re, bwd_im
// (each SQ floats, degree n block at sqoff(n), row-major (n+1) x (n+1)). ztab: the z-axis
// table of this kind, per m a (P+1-m)^2 block at toff(m) (row i = n - m, column j = k - m).
// One translation (rotate, shift along z, rotate back) of the input expansion `in` (3 NC float2)
// with the rotation record `rot` and distance `dist`, accumulated into the thread's
// (component, coefficient) `acc`. Every thread of the block calls it (it synchronizes).
template <int KIND>
__device__ __forceinline__ void tr_entry(
    const float2* __restrict__ in, const float* __restrict__ rot, float dist,
    const float* __restrict__ zrow, int t, bool live, int cb, int n, int m,
    float2* s_in, float2* s_a, float2* s_b, float2& acc)
{
    const float2* ph = (const float2*)rot;
    if (live) s_in[t] = in[t];
    __syncthreads();
    if (live) {
        const float* fr = rot + 2 * (P + 1) + sqoff(n) + m * (n + 1);
        const float* fi = fr + SQ;
        float re = 0.f, im = 0.f;
        for (int k = 0; k <= n; ++k) {
            float2 g = cmul(ph[k], s_in[cb + idx(n, k)]);
            re += fr[k] * g.x;
            im += fi[k] * g.y;
        }
        s_a[t] = make_float2(re, im);
    }
    __syncthreads();
    if (live) {
        const int side = P + 1 - m, ii = n - m;
        float2 s = make_float2(0.f, 0.f);
        if (KIND == 0) {
            const float tau = -dist;
            float pw = 1.f;
            for (int j = ii; j >= 0; --j) {
                s = cadd(s, cscale(s_a[cb + idx(m + j, m)], zrow[j] * pw));
                pw *= tau;
            }
        } else if (KIND == 1) {
            const float inv = 1.0f / dist;
            float pw = 1.f;
            for (int q = 0; q < m; ++q) pw *= inv;
            float post = pw * inv;
            for (int q = 0; q < ii; ++q) post *= inv;
            for (int j = 0; j < side; ++j) {
                s = cadd(s, cscale(s_a[cb + idx(m + j, m)], zrow[j] * pw));
                pw *= inv;
            }
            s = cscale(s, post);
        } else {
            float pw = 1.f;
            for (int j = ii; j < side; ++j) {
                s = cadd(s, cscale(s_a[cb + idx(m + j, m)], zrow[j] * pw));
                pw *= dist;
            }
        }
        s_b[t] = s;
    }
    __syncthreads();
    if (live) {
        const float* br = rot + 2 * (P + 1) + 2 * SQ + sqoff(n) + m * (n + 1);
        const float* bi = br + SQ;
        float re = 0.f, im = 0.f;
        for (int k = 0; k <= n; ++k) {
            float2 b = s_b[cb + idx(n, k)];
            re += br[k] * b.x;
            im += bi[k] * b.y;
        }
        acc = cadd(acc, cmul(cconj(ph[m]), make_float2(re, im)));
    }
}

template <int KIND>
__device__ __forceinline__ void translate(
    const float2* __restrict__ in, float2* __restrict__ out, const int4* __restrict__ tasks,
    const int4* __restrict__ entries, const float* __restrict__ rots,
    const float* __restrict__ ztab, const int* __restrict__ toff, int task_offset)
{
    __shared__ float2 s_in[3 * NC];
    __shared__ float2 s_a[3 * NC];
    __shared__ float2 s_b[3 * NC];
    const int4 task = tasks[task_offset + blockIdx.x];
    const int t = threadIdx.x;
    const bool live = t < 3 * NC;
    const int tt = live ? t : 0;
    const int c = tt / NC, i = tt % NC;
    int n, m;
    decode(i, n, m);
    const int cb = c * NC;
    float2 acc = make_float2(0.f, 0.f);
    const float* zrow = ztab + toff[m] + (n - m) * (P + 1 - m);
    for (int e = task.y; e < task.z; ++e) {
        const int4 ent = entries[e];
        const float* rot = rots + (size_t)ent.y * ROT_STRIDE;
        const float dist = __int_as_float(ent.z);
        tr_entry<KIND>(in + (size_t)ent.x * 3 * NC, rot, dist, zrow, t, live, cb, n, m, s_in, s_a,
                       s_b, acc);
    }
    if (live) {
        float2* o = out + (size_t)task.x * 3 * NC + t;
        *o = cadd(*o, acc);
    }
}

extern "C" __global__ void __launch_bounds__(TR_THREADS) m2m_rot(
    const float2* in, float2* out, const int4* tasks, const int4* entries, const float* rots,
    const float* ztab, const int* toff, int task_offset)
{
    translate<0>(in, out, tasks, entries, rots, ztab, toff, task_offset);
}
extern "C" __global__ void __launch_bounds__(TR_THREADS) m2l_rot(
    const float2* in, float2* out, const int4* tasks, const int4* entries, const float* rots,
    const float* ztab, const int* toff, int task_offset)
{
    translate<1>(in, out, tasks, entries, rots, ztab, toff, task_offset);
}
extern "C" __global__ void __launch_bounds__(TR_THREADS) l2l_rot(
    const float2* in, float2* out, const int4* tasks, const int4* entries, const float* rots,
    const float* ztab, const int* toff, int task_offset)
{
    translate<2>(in, out, tasks, entries, rots, ztab, toff, task_offset);
}

// ------------------------------------------------------------------------------------------
// Plain O(p^4) M2L (reference): Lhat_k^l = (-1)^k sum_{n, |m| <= n} Mhat_n^m I_{n+k}^{m+l}(v),
// v = target - source centre, L = conj(Lhat) / K. entries as for m2l_rot, the rotation slot
// unused; the centres come from tcenters / scenters.
extern "C" __global__ void __launch_bounds__(TR_THREADS) m2l_plain(
    const float2* __restrict__ in, float2* __restrict__ out, const int4* __restrict__ tasks,
    const int4* __restrict__ entries, const float4* __restrict__ tcenters,
    const float4* __restrict__ scenters, const float* __restrict__ knm, int task_offset)
{
    __shared__ float2 s_mf[3 * NF];                  // Mhat, full
    __shared__ float2 s_i[(2 * P + 1) * (2 * P + 1)]; // I up to degree 2p, full
    const int4 task = tasks[task_offset + blockIdx.x];
    const float4 tc = tcenters[task.x];
    const int t = threadIdx.x;
    const bool live = t < 3 * NC;
    const int tt = live ? t : 0;
    const int c = tt / NC, i = tt % NC;
    int k, l;
    decode(i, k, l);
    float2 acc = make_float2(0.f, 0.f);
    for (int e = task.y; e < task.z; ++e) {
        const int4 ent = entries[e];
        const float4 sc = scenters[ent.x];
        const float vx = tc.x - sc.x, vy = tc.y - sc.y, vz = tc.z - sc.z;
        // expand the multipole: Mhat = M / K, Mhat_n^{-m} = (-1)^m conj(Mhat_n^m)
        if (live) {
            int n, m;
            decode(i, n, m);
            float2 v = cscale(in[(size_t)ent.x * 3 * NC + t], 1.0f / knm[i]);
            s_mf[c * NF + fidx(n, m)] = v;
            if (m > 0) {
                float2 w = cconj(v);
                s_mf[c * NF + fidx(n, -m)] = (m & 1) ? make_float2(-w.x, -w.y) : w;
            }
        }
        // irregular harmonics I_n^m(v), one column m >= 0 per thread (recurrence in n)
        if (t <= 2 * P) {
            const int mm = t;
            float r2 = vx * vx + vy * vy + vz * vz;
            float ir2 = 1.0f / r2;
            float2 w = make_float2(vx * ir2, vy * ir2);
            float zr = vz * ir2;
            float2 im = make_float2(sqrtf(ir2), 0.f);
            for (int q = 1; q <= mm; ++q) im = cscale(cmul(make_float2(-w.x, -w.y), im), (float)(2 * q - 1));
            float2 prev2 = im, prev1 = cscale(im, (float)(2 * mm + 1) * zr);
            for (int n = mm; n <= 2 * P; ++n) {
                float2 v;
                if (n == mm) v = prev2;
                else if (n == mm + 1) v = prev1;
                else {
                    float a = (float)(2 * n - 1) * zr;
                    float b = (float)((n - 1) * (n - 1) - mm * mm) * ir2;
                    v = make_float2(prev1.x * a - prev2.x * b, prev1.y * a - prev2.y * b);
                    prev2 = prev1;
                    prev1 = v;
                }
                s_i[fidx(n, mm)] = v;
                if (mm > 0) {
                    float2 cw = cconj(v);
                    s_i[fidx(n, -mm)] = (mm & 1) ? make_float2(-cw.x, -cw.y) : cw;
                }
            }
        }
        __syncthreads();
        if (live) {
            float2 s = make_float2(0.f, 0.f);
            for (int n = 0; n <= P; ++n)
                for (int m = -n; m <= n; ++m)
                    s = cadd(s, cmul(s_mf[c * NF + fidx(n, m)], s_i[fidx(n + k, m + l)]));
            if (k & 1) s = make_float2(-s.x, -s.y);
            acc = cadd(acc, cscale(cconj(s), 1.0f / knm[i]));
        }
        __syncthreads();
    }
    if (live) {
        float2* o = out + (size_t)task.x * 3 * NC + t;
        *o = cadd(*o, acc);
    }
}

// ------------------------------------------------------------------------------------------
// Field evaluation from the 5 Taylor coefficients (Lhat_1^0, Lhat_1^1, Lhat_2^0, Lhat_2^1,
// Lhat_2^2) of each component's potential about the target (port of accumulate_fields).
__device__ __forceinline__ void fields_from_taylor(const float2 tay[3][5], float4 a, float3& u, float3& s)
{
    float g[3][3], h[3][3][3];
    for (int c = 0; c < 3; ++c) {
        g[c][0] = -tay[c][1].x;
        g[c][1] = -tay[c][1].y;
        g[c][2] = tay[c][0].x;
        float l20 = tay[c][2].x;
        float2 l21 = tay[c][3], l22 = tay[c][4];
        float hxy = 0.5f * l22.y;
        h[c][0][0] = 0.5f * (l22.x - l20); h[c][0][1] = hxy; h[c][0][2] = -l21.x;
        h[c][1][0] = hxy; h[c][1][1] = -0.5f * (l22.x + l20); h[c][1][2] = -l21.y;
        h[c][2][0] = -l21.x; h[c][2][1] = -l21.y; h[c][2][2] = l20;
    }
    u.x += g[2][1] - g[1][2];
    u.y += g[0][2] - g[2][0];
    u.z += g[1][0] - g[0][1];
    const float al[3] = {a.x, a.y, a.z};
    for (int l = 0; l < 3; ++l) {
        s.x += al[l] * (h[2][l][1] - h[1][l][2]);
        s.y += al[l] * (h[0][l][2] - h[2][l][0]);
        s.z += al[l] * (h[1][l][0] - h[0][l][1]);
    }
}

__device__ __forceinline__ void store_fields(float* vel, float* str, int ti, float3 u, float3 s)
{
    vel[3 * ti + 0] += u.x;
    vel[3 * ti + 1] += u.y;
    vel[3 * ti + 2] += u.z;
    str[3 * ti + 0] += s.x;
    str[3 * ti + 1] += s.y;
    str[3 * ti + 2] += s.z;
}

// L2P: tasks[b] = (first target, count <= EVAL_BLOCK, cell, 0).
// tay[q] = sum_{j < p, |i| <= j} Lf_{j+a}^{i+b} conj(R_j^i(x - c)), Lf = conj(L) K (full).
extern "C" __global__ void __launch_bounds__(EVAL_BLOCK) l2p(
    const float4* __restrict__ tpos, const float4* __restrict__ tstr,
    const int4* __restrict__ tasks, const float4* __restrict__ centers,
    const float2* __restrict__ locals, const float* __restrict__ knm,
    float* __restrict__ vel, float* __restrict__ str)
{
    __shared__ float2 s_lf[3 * NF];
    const int4 task = tasks[blockIdx.x];
    for (int q = threadIdx.x; q < 3 * NC; q += EVAL_BLOCK) {
        int c = q / NC, i = q % NC, n, m;
        decode(i, n, m);
        float2 v = cscale(cconj(locals[(size_t)task.z * 3 * NC + q]), knm[i]);
        s_lf[c * NF + fidx(n, m)] = v;
        if (m > 0) {
            float2 w = cconj(v);
            s_lf[c * NF + fidx(n, -m)] = (m & 1) ? make_float2(-w.x, -w.y) : w;
        }
    }
    __syncthreads();
    const int ti = task.x + min((int)threadIdx.x, task.y - 1);
    const float4 ctr = centers[task.z];
    const float4 x = tpos[ti];
    const float dx = x.x - ctr.x, dy = x.y - ctr.y, dz = x.z - ctr.z;
    const float r2 = dx * dx + dy * dy + dz * dz;
    float2 tay[3][5];
#pragma unroll
    for (int c = 0; c < 3; ++c)
#pragma unroll
        for (int q = 0; q < 5; ++q) tay[c][q] = make_float2(0.f, 0.f);
    const int A[5] = {1, 1, 2, 2, 2}, B[5] = {0, 1, 0, 1, 2};
    float2 rmm = make_float2(1.f, 0.f);
    for (int m = 0; m < P; ++m) {
        if (m > 0) rmm = cscale(cmul(make_float2(-dx, -dy), rmm), 0.5f / (float)m);
        float2 prev2 = rmm, prev1 = rmm;
        for (int j = m; j < P; ++j) {
            float2 r;
            if (j == m) r = rmm;
            else if (j == m + 1) { r = cscale(rmm, dz); prev1 = r; }
            else {
                float inv = 1.0f / (float)((j + m) * (j - m));
                r = make_float2(((2 * j - 1) * dz * prev1.x - r2 * prev2.x) * inv,
                                ((2 * j - 1) * dz * prev1.y - r2 * prev2.y) * inv);
                prev2 = prev1;
                prev1 = r;
            }
            // rf(j, m) = conj(R_j^m); rf(j, -m) = (-1)^m R_j^m
            const float2 rp = cconj(r);
            const float2 rn = (m & 1) ? make_float2(-r.x, -r.y) : r;
            const int na = (j + 2 <= P) ? 5 : 2;
#pragma unroll
            for (int q = 0; q < 5; ++q) {
                if (q >= na) break;
#pragma unroll
                for (int c = 0; c < 3; ++c) {
                    const float2* lf = s_lf + c * NF;
                    tay[c][q] = cadd(tay[c][q], cmul(lf[fidx(j + A[q], m + B[q])], rp));
                    if (m > 0) tay[c][q] = cadd(tay[c][q], cmul(lf[fidx(j + A[q], -m + B[q])], rn));
                }
            }
            if (j == m) prev2 = rmm;
        }
    }
    float3 u = make_float3(0.f, 0.f, 0.f), s = make_float3(0.f, 0.f, 0.f);
    fields_from_taylor(tay, tstr[ti], u, s);
    if ((int)threadIdx.x < task.y) store_fields(vel, str, ti, u, s);
}

// M2P (treecode): tasks[b] = (first target, count, first entry, end entry), entries[e] =
// (source cell, periodic image, 0, 0). For every far source cell of the leaf and its ancestors:
// tay[q] += sign_q sum_{n<=p, |m|<=n} Mf_n^m I_{n+a}^{m+b}(x - c), Mf = M / K (full),
// signs (-, -, +, +, +). Streamed over the harmonic I_k^l instead: each I_k^l (k <= p+2)
// contributes Mf_{k-a}^{l-b} to tay[q].
extern "C" __global__ void __launch_bounds__(EVAL_BLOCK) m2p(
    const float4* __restrict__ tpos, const float4* __restrict__ tstr,
    const int4* __restrict__ tasks, const int4* __restrict__ entries,
    const float4* __restrict__ centers, const float2* __restrict__ mult,
    const float* __restrict__ knm, float period,
    float* __restrict__ vel, float* __restrict__ str)
{
    __shared__ float2 s_mf[3 * NF];
    const int4 task = tasks[blockIdx.x];
    const int ti = task.x + min((int)threadIdx.x, task.y - 1);
    const float4 x = tpos[ti];
    float2 tay[3][5];
#pragma unroll
    for (int c = 0; c < 3; ++c)
#pragma unroll
        for (int q = 0; q < 5; ++q) tay[c][q] = make_float2(0.f, 0.f);
    const int A[5] = {1, 1, 2, 2, 2}, B[5] = {0, 1, 0, 1, 2};
    const float SG[5] = {-1.f, -1.f, 1.f, 1.f, 1.f};
    for (int e = task.z; e < task.w; ++e) {
        const int4 ent = entries[e];
        __syncthreads();
        for (int q = threadIdx.x; q < 3 * NC; q += EVAL_BLOCK) {
            int c = q / NC, i = q % NC, n, m;
            decode(i, n, m);
            float2 v = cscale(mult[(size_t)ent.x * 3 * NC + q], 1.0f / knm[i]);
            s_mf[c * NF + fidx(n, m)] = v;
            if (m > 0) {
                float2 w = cconj(v);
                s_mf[c * NF + fidx(n, -m)] = (m & 1) ? make_float2(-w.x, -w.y) : w;
            }
        }
        __syncthreads();
        const float4 ctr = centers[ent.x];
        const int img = ent.y;
        const float dx = x.x - (ctr.x + (float)(img / 9 - 1) * period);
        const float dy = x.y - (ctr.y + (float)((img / 3) % 3 - 1) * period);
        const float dz = x.z - (ctr.z + (float)(img % 3 - 1) * period);
        const float ir2 = 1.0f / (dx * dx + dy * dy + dz * dz);
        const float2 w = make_float2(dx * ir2, dy * ir2);
        const float zr = dz * ir2;
        float2 imm = make_float2(sqrtf(ir2), 0.f);
        for (int l = 0; l <= P + 2; ++l) {
            if (l > 0) imm = cscale(cmul(make_float2(-w.x, -w.y), imm), (float)(2 * l - 1));
            float2 prev2 = imm, prev1 = imm;
            for (int k = l; k <= P + 2; ++k) {
                float2 v;
                if (k == l) v = imm;
                else if (k == l + 1) { v = cscale(imm, (float)(2 * l + 1) * zr); prev1 = v; }
                else {
                    float a = (float)(2 * k - 1) * zr;
                    float b = (float)((k - 1) * (k - 1) - l * l) * ir2;
                    v = make_float2(prev1.x * a - prev2.x * b, prev1.y * a - prev2.y * b);
                    prev2 = prev1;
                    prev1 = v;
                }
                // I_k^l = v, I_k^{-l} = (-1)^l conj(v)
                const float2 vn = (l & 1) ? make_float2(-v.x, v.y) : cconj(v);
#pragma unroll
                for (int q = 0; q < 5; ++q) {
                    const int n = k - A[q];
                    if (n < 0 || n > P) continue;
                    const int mp = l - B[q], mn = -l - B[q];
#pragma unroll
                    for (int c = 0; c < 3; ++c) {
                        const float2* mf = s_mf + c * NF;
                        if (mp >= -n && mp <= n)
                            tay[c][q] = cadd(tay[c][q], cscale(cmul(mf[fidx(n, mp)], v), SG[q]));
                        if (l > 0 && mn >= -n && mn <= n)
                            tay[c][q] = cadd(tay[c][q], cscale(cmul(mf[fidx(n, mn)], vn), SG[q]));
                    }
                }
            }
        }
    }
    float3 u = make_float3(0.f, 0.f, 0.f), s = make_float3(0.f, 0.f, 0.f);
    fields_from_taylor(tay, tstr[ti], u, s);
    if ((int)threadIdx.x < task.y) store_fields(vel, str, ti, u, s);
}
