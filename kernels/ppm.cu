// Pseudo-particle method (PPM) M2L, fp32, compiled by NVRTC with -DPPM_K=K (the number of
// pseudo-particles of the order's sphere rule; all shared sizes static).
//
// The M2L of the PPM is a singular-kernel sum between two sets of K points (core paper
// Sec. 3.3, Eq. 38): the potentials of the source cell's pseudo-particles (strengths q_i at
// c_s + a s_i) at the target cell's sphere points c_t + b s_t. It is the regular shape of a
// tiled P2P: one target cell per thread block, one target sphere point per thread, the source
// cells of the far list streamed through shared memory one at a time (their K positions and
// strengths, a float4 each, broadcast to every thread), K pairs per thread and source cell,
// accumulated in fp32 registers per source cell and in fp64 across source cells (the local
// representation g_k is a potential whose gradient is taken later: fp64 storage keeps the
// cancellation of its constant part out of the velocity).
//
// Layouts: `mult` 3K doubles per source cell (k * 3 + c; rounded to fp32 when staged in shared
// memory); `loc` 3K doubles per target cell;
// `tasks` int4 (target cell, first entry, end entry, b as float bits); `entries` int4
// (source cell, t_centre - s_centre (periodic image applied) as float bits);
// `srad` per source cell the sphere radius a; `unit` the K unit vectors s_k as float4.

#if !defined(PPM_K) || !defined(PPM_P)
#error "compile with -DPPM_K=K -DPPM_P=p (pseudo-particles and order, set by vortex-gpu)"
#endif
#define PPM_THREADS ((PPM_K + 31) / 32 * 32)
// monomials z^a of degree <= p, <= p-1, <= p-2 (ordered by degree: the first NM1 are those of
// degree <= p-1)
#define PPM_NM ((PPM_P + 1) * (PPM_P + 2) * (PPM_P + 3) / 6)
#define PPM_NM1 (PPM_P * (PPM_P + 1) * (PPM_P + 2) / 6)
#define PPM_NM2 ((PPM_P - 1) * PPM_P * (PPM_P + 1) / 6)
// threads of the P2M, M2M, L2L and L2P blocks
#define PPM_OPS 128
#define PPM_PER_THREAD(n) (((n) + PPM_OPS - 1) / PPM_OPS)

extern "C" __global__ void __launch_bounds__(PPM_THREADS)
ppm_m2l(const double* __restrict__ mult, double* __restrict__ loc,
        const int4* __restrict__ tasks, const int4* __restrict__ entries,
        const float* __restrict__ srad, const float4* __restrict__ unit)
{
    __shared__ float4 su[PPM_K];
    __shared__ float4 sp[PPM_K];
    __shared__ float4 sq[PPM_K];
    const int4 task = tasks[blockIdx.x];
    const float b = __int_as_float(task.w);
    for (int i = threadIdx.x; i < PPM_K; i += blockDim.x) su[i] = unit[i];
    __syncthreads();
    const int t = threadIdx.x;
    const bool active = t < PPM_K;
    const float4 ut = su[active ? t : 0];
    double g0 = 0.0, g1 = 0.0, g2 = 0.0;
    for (int e = task.y; e < task.z; ++e) {
        const int4 en = entries[e];
        const int c = en.x;
        const float a = srad[c];
        const double* __restrict__ q = mult + (size_t)c * (3 * PPM_K);
        for (int i = threadIdx.x; i < PPM_K; i += blockDim.x) {
            const float4 u = su[i];
            sp[i] = make_float4(a * u.x, a * u.y, a * u.z, 0.f);
            sq[i] = make_float4((float)q[3 * i], (float)q[3 * i + 1], (float)q[3 * i + 2], 0.f);
        }
        __syncthreads();
        const float xx = fmaf(b, ut.x, __int_as_float(en.y));
        const float xy = fmaf(b, ut.y, __int_as_float(en.z));
        const float xz = fmaf(b, ut.z, __int_as_float(en.w));
        float h0 = 0.f, h1 = 0.f, h2 = 0.f;
#pragma unroll 4
        for (int i = 0; i < PPM_K; ++i) {
            const float4 y = sp[i];
            const float4 w = sq[i];
            const float dx = xx - y.x, dy = xy - y.y, dz = xz - y.z;
            const float ir = rsqrtf(fmaf(dx, dx, fmaf(dy, dy, dz * dz)));
            h0 = fmaf(w.x, ir, h0);
            h1 = fmaf(w.y, ir, h1);
            h2 = fmaf(w.z, ir, h2);
        }
        g0 += (double)h0;
        g1 += (double)h1;
        g2 += (double)h2;
        __syncthreads();
    }
    if (active) {
        double* l = loc + (size_t)task.x * (3 * PPM_K) + 3 * t;
        l[0] += g0;
        l[1] += g1;
        l[2] += g2;
    }
}

// ---------------------------------------------------------------------------------------------
// The other PPM operators, in f64 (they are O(K p^3) per particle or K^2 per cell, cheap next to
// the M2L; f64 keeps them equal to the CPU reference `fmm::ppm` to round-off of the fp32 inputs).
// Same algebra as `PseudoParticles::{p2m, l2l, m2m, l2p}` (core paper Sec. 3.3, Eq. 36-39):
//   P2M  q_k = sum_a W[k][a] m_a,   m_a = sum_i z_i^a alpha_i,   z = (x - c) / (f h)
//   M2M  q_parent += M_o q_child    (K x K matrix per child octant o, exact for a 2p-design)
//   L2L  g_child  += L_o g_parent
//   L2P  c_a = sum_k W[k][a] g_k;   u = curl phi,   s = (alpha . grad) curl phi
// `cells`: 4 doubles per cell (centre, half width); `rf`: sphere radius factor f;
// `expo`: a0 | a1 << 8 | a2 << 16 per monomial; `up`: index of a + e_d (3 per monomial, -1 if
// the degree exceeds p); `w`: W row-major (K x NM); `wt`: W transposed (NM x K);
// `mt`: 8 matrices, transposed, mt[(o K + j) K + r] = M_o[r][j].

__device__ __forceinline__ double ppm_monomial(int e, double z0, double z1, double z2)
{
    double v = 1.0;
    for (int i = 0; i < (e & 255); ++i) v *= z0;
    for (int i = 0; i < ((e >> 8) & 255); ++i) v *= z1;
    for (int i = 0; i < (e >> 16); ++i) v *= z2;
    return v;
}

// P2M: one non-empty source leaf per block; tasks int4 (first particle, count, cell, 0).
// Writes (=) the leaf's 3K strengths.
extern "C" __global__ void __launch_bounds__(PPM_OPS)
ppm_p2m(const float4* __restrict__ pos, const float4* __restrict__ str,
        const int4* __restrict__ tasks, const double* __restrict__ cells, double rf,
        const int* __restrict__ expo, const double* __restrict__ wt, double* __restrict__ mult)
{
    __shared__ double sz[PPM_OPS][3];
    __shared__ double sa[PPM_OPS][3];
    __shared__ double mom[PPM_NM][3];
    const int4 task = tasks[blockIdx.x];
    const double* cc = cells + 4 * (size_t)task.z;
    const double inv_a = 1.0 / (rf * cc[3]);
    double acc[PPM_PER_THREAD(PPM_NM)][3];
    int ex[PPM_PER_THREAD(PPM_NM)];
#pragma unroll
    for (int j = 0; j < PPM_PER_THREAD(PPM_NM); ++j) {
        const int a = threadIdx.x + j * PPM_OPS;
        ex[j] = a < PPM_NM ? expo[a] : 0;
        acc[j][0] = acc[j][1] = acc[j][2] = 0.0;
    }
    for (int t0 = 0; t0 < task.y; t0 += PPM_OPS) {
        const int i = t0 + threadIdx.x;
        if (i < task.y) {
            const float4 x = pos[task.x + i];
            const float4 q = str[task.x + i];
            sz[threadIdx.x][0] = ((double)x.x - cc[0]) * inv_a;
            sz[threadIdx.x][1] = ((double)x.y - cc[1]) * inv_a;
            sz[threadIdx.x][2] = ((double)x.z - cc[2]) * inv_a;
            sa[threadIdx.x][0] = q.x;
            sa[threadIdx.x][1] = q.y;
            sa[threadIdx.x][2] = q.z;
        }
        __syncthreads();
        const int n = min(PPM_OPS, task.y - t0);
        for (int i = 0; i < n; ++i) {
#pragma unroll
            for (int j = 0; j < PPM_PER_THREAD(PPM_NM); ++j) {
                const double v = ppm_monomial(ex[j], sz[i][0], sz[i][1], sz[i][2]);
                acc[j][0] = fma(v, sa[i][0], acc[j][0]);
                acc[j][1] = fma(v, sa[i][1], acc[j][1]);
                acc[j][2] = fma(v, sa[i][2], acc[j][2]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < PPM_PER_THREAD(PPM_NM); ++j) {
        const int a = threadIdx.x + j * PPM_OPS;
        if (a < PPM_NM) {
            mom[a][0] = acc[j][0];
            mom[a][1] = acc[j][1];
            mom[a][2] = acc[j][2];
        }
    }
    __syncthreads();
    double* m = mult + (size_t)task.z * (3 * PPM_K);
    for (int k = threadIdx.x; k < PPM_K; k += PPM_OPS) {
        double q0 = 0.0, q1 = 0.0, q2 = 0.0;
        for (int a = 0; a < PPM_NM; ++a) {
            const double w = wt[(size_t)a * PPM_K + k];
            q0 = fma(w, mom[a][0], q0);
            q1 = fma(w, mom[a][1], q1);
            q2 = fma(w, mom[a][2], q2);
        }
        m[3 * k] = q0;
        m[3 * k + 1] = q1;
        m[3 * k + 2] = q2;
    }
}

// K x K matrix products of M2M (children -> parent) and L2L (parent -> child) in one array
// `data` (3K doubles per cell; inputs and outputs are different cells), one output cell per
// block. tasks int4 (output cell, first input cell, input count, 0). The matrix is that of the
// octant oct[c] of each input child c (M2M, l2l = 0) or of the output child (L2L, l2l = 1).
// Accumulates (+=) into the output cell.
extern "C" __global__ void __launch_bounds__(PPM_OPS)
ppm_apply_octant(const int4* __restrict__ tasks, const int* __restrict__ oct,
                 const double* __restrict__ mt, double* data, int l2l)
{
    __shared__ double sq[PPM_K][3];
    const int4 task = tasks[blockIdx.x];
    double acc[PPM_PER_THREAD(PPM_K)][3];
#pragma unroll
    for (int j = 0; j < PPM_PER_THREAD(PPM_K); ++j) acc[j][0] = acc[j][1] = acc[j][2] = 0.0;
    for (int c = task.y; c < task.y + task.z; ++c) {
        const double* q = data + (size_t)c * (3 * PPM_K);
        for (int i = threadIdx.x; i < 3 * PPM_K; i += PPM_OPS) sq[i / 3][i % 3] = q[i];
        __syncthreads();
        const int o = l2l ? oct[task.x] : oct[c];
        const double* m = mt + (size_t)o * PPM_K * PPM_K;
#pragma unroll
        for (int j = 0; j < PPM_PER_THREAD(PPM_K); ++j) {
            const int r = threadIdx.x + j * PPM_OPS;
            if (r < PPM_K) {
                for (int i = 0; i < PPM_K; ++i) {
                    const double v = m[(size_t)i * PPM_K + r];
                    acc[j][0] = fma(v, sq[i][0], acc[j][0]);
                    acc[j][1] = fma(v, sq[i][1], acc[j][1]);
                    acc[j][2] = fma(v, sq[i][2], acc[j][2]);
                }
            }
        }
        __syncthreads();
    }
    double* g = data + (size_t)task.x * (3 * PPM_K);
#pragma unroll
    for (int j = 0; j < PPM_PER_THREAD(PPM_K); ++j) {
        const int r = threadIdx.x + j * PPM_OPS;
        if (r < PPM_K) {
            g[3 * r] += acc[j][0];
            g[3 * r + 1] += acc[j][1];
            g[3 * r + 2] += acc[j][2];
        }
    }
}

// L2P: velocity curl(phi) and stretching (alpha . grad) curl(phi) of each non-empty target
// leaf's local representation at its targets, no 1/(4 pi), added to vel / strf (fp32, the
// P2P adds there too). Blocks loop over the tasks int4 (first target, count, cell, 0) with a
// grid stride; each block builds its leaf's gradient and Hessian coefficient tables in its own
// slice of `scratch` (9 NM1 + 18 NM2 doubles) and then evaluates them at the targets.
extern "C" __global__ void __launch_bounds__(PPM_OPS)
ppm_l2p(const float4* __restrict__ tpos, const float4* __restrict__ tstr,
        const int4* __restrict__ tasks, int ntasks, const double* __restrict__ cells, double rf,
        const int* __restrict__ expo, const int* __restrict__ up, const double* __restrict__ w,
        const double* __restrict__ loc, double* __restrict__ scratch,
        float* __restrict__ vel, float* __restrict__ strf)
{
    __shared__ double sg[PPM_K][3];
    __shared__ double coef[PPM_NM][3];
    double* grad = scratch + (size_t)blockIdx.x * (9 * PPM_NM1 + 18 * PPM_NM2);  // [d][a][c]
    double* hess = grad + 9 * PPM_NM1;                                             // [e][a][c]
    for (int ti = blockIdx.x; ti < ntasks; ti += gridDim.x) {
        const int4 task = tasks[ti];
        const double* cc = cells + 4 * (size_t)task.z;
        const double inv_b = 1.0 / (rf * cc[3]);
        const double* g = loc + (size_t)task.z * (3 * PPM_K);
        for (int i = threadIdx.x; i < 3 * PPM_K; i += PPM_OPS) sg[i / 3][i % 3] = g[i];
        __syncthreads();
        for (int a = threadIdx.x; a < PPM_NM; a += PPM_OPS) {
            double c0 = 0.0, c1 = 0.0, c2 = 0.0;
            for (int k = 0; k < PPM_K; ++k) {
                const double x = w[(size_t)k * PPM_NM + a];
                c0 = fma(x, sg[k][0], c0);
                c1 = fma(x, sg[k][1], c1);
                c2 = fma(x, sg[k][2], c2);
            }
            coef[a][0] = c0;
            coef[a][1] = c1;
            coef[a][2] = c2;
        }
        __syncthreads();
        // grad[d][a] = (a_d + 1) / (f h) coef[a + e_d], degree(a) <= p - 1
        for (int i = threadIdx.x; i < 3 * PPM_NM1; i += PPM_OPS) {
            const int d = i / PPM_NM1, a = i % PPM_NM1;
            const int e = expo[a];
            const int ad = (e >> (8 * d)) & 255;
            const int b = up[3 * a + d];
            const double f = (ad + 1) * inv_b;
            for (int c = 0; c < 3; ++c) grad[(d * PPM_NM1 + a) * 3 + c] = f * coef[b][c];
        }
        __syncthreads();
        // hess[(d1, d2)][a] = (a_d2 + 1) / (f h) grad[d1][a + e_d2], degree(a) <= p - 2;
        // e = xx, yy, zz, xy, xz, yz
        for (int i = threadIdx.x; i < 6 * PPM_NM2; i += PPM_OPS) {
            const int e = i / PPM_NM2, a = i % PPM_NM2;
            const int d1 = e < 3 ? e : (e < 5 ? 0 : 1);
            const int d2 = e < 3 ? e : (e == 3 ? 1 : 2);
            const int ad = (expo[a] >> (8 * d2)) & 255;
            const int b = up[3 * a + d2];
            const double f = (ad + 1) * inv_b;
            for (int c = 0; c < 3; ++c)
                hess[(e * PPM_NM2 + a) * 3 + c] = f * grad[(d1 * PPM_NM1 + b) * 3 + c];
        }
        __syncthreads();
        for (int t = threadIdx.x; t < task.y; t += PPM_OPS) {
            const int i = task.x + t;
            const float4 x = tpos[i];
            const float4 al = tstr[i];
            double pw[3][PPM_P + 1];
            const double z[3] = {((double)x.x - cc[0]) * inv_b, ((double)x.y - cc[1]) * inv_b,
                                 ((double)x.z - cc[2]) * inv_b};
#pragma unroll
            for (int d = 0; d < 3; ++d) {
                pw[d][0] = 1.0;
#pragma unroll
                for (int k = 1; k <= PPM_P; ++k) pw[d][k] = pw[d][k - 1] * z[d];
            }
            double gd[3][3] = {{0.0}};
            double hh[6][3] = {{0.0}};
            for (int a = 0; a < PPM_NM1; ++a) {
                const int e = expo[a];
                const double v = pw[0][e & 255] * pw[1][(e >> 8) & 255] * pw[2][e >> 16];
#pragma unroll
                for (int d = 0; d < 3; ++d)
#pragma unroll
                    for (int c = 0; c < 3; ++c) gd[d][c] = fma(v, grad[(d * PPM_NM1 + a) * 3 + c], gd[d][c]);
                if (a < PPM_NM2) {
#pragma unroll
                    for (int q = 0; q < 6; ++q)
#pragma unroll
                        for (int c = 0; c < 3; ++c) hh[q][c] = fma(v, hess[(q * PPM_NM2 + a) * 3 + c], hh[q][c]);
                }
            }
            // u = curl phi (gd[d][c] = d phi_c / d x_d)
            vel[3 * i] += (float)(gd[1][2] - gd[2][1]);
            vel[3 * i + 1] += (float)(gd[2][0] - gd[0][2]);
            vel[3 * i + 2] += (float)(gd[0][1] - gd[1][0]);
            // v(l, m) = sum_k alpha_k d_k d_l phi_m; hessian index of the pair (k, l)
            const double alpha[3] = {al.x, al.y, al.z};
            const int he[3][3] = {{0, 3, 4}, {3, 1, 5}, {4, 5, 2}};
            double v[3][3];
#pragma unroll
            for (int l = 0; l < 3; ++l)
#pragma unroll
                for (int m = 0; m < 3; ++m)
                    v[l][m] = alpha[0] * hh[he[0][l]][m] + alpha[1] * hh[he[1][l]][m] +
                              alpha[2] * hh[he[2][l]][m];
            strf[3 * i] += (float)(v[1][2] - v[2][1]);
            strf[3 * i + 1] += (float)(v[2][0] - v[0][2]);
            strf[3 * i + 2] += (float)(v[0][1] - v[1][0]);
        }
        __syncthreads();
    }
}
