// Uniform-grid FMM built on the device (crates/gpu/src/uniform). Compiled by NVRTC with
// kernels/p2p.cu and kernels/fmm.cu included (named headers, kernels/lib.rs; one
// module, -DORDER=p -DEVAL_BLOCK=32): it reuses their device functions and the kernels p2m,
// l2p and p2p_near, fed with task arrays built here.
// Every kernel below has a host emulation in crates/gpu/src/uniform/sort.rs (sort, scan, tasks)
// or a CPU f64 reference (crates/gpu/src/uniform/reference.rs: translations).
//
// Grid: level l has nl = m 2^l cells per side, local index i + nl (j + nl k), global index
// level_off + local; multipoles / locals 3 NC float2 per global cell (layout of fmm.cu).
// Rotation records: one per integer vector v in [-R, R]^3 (v = target - source centre in
// cells of the level; M2M / L2L use (+-1, +-1, +-1)), record index
// (vx + R) + D ((vy + R) + D (vz + R)), D = 2R + 1.

#include "p2p.cu"
#include "fmm.cu"

#define SCAN_THREADS 256
#define SCAN_ITEMS 4
#define SCAN_BLOCK (SCAN_THREADS * SCAN_ITEMS)
#define FREE_IMAGE 13

// ---- sort ---------------------------------------------------------------------------------

// Leaf cell of every particle, floor((x - lo) * inv_w) clamped to the grid, and its arrival
// slot in the cell (the atomic's return value; made irrelevant by u_sort_cells).
extern "C" __global__ void u_cell_index(
    const float4* __restrict__ pos, int np, float lox, float loy, float loz, float inv_w, int n,
    int* __restrict__ cell, int* __restrict__ slot, int* __restrict__ counts)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= np) return;
    const float4 p = pos[i];
    const int ix = min(max((int)floorf((p.x - lox) * inv_w), 0), n - 1);
    const int iy = min(max((int)floorf((p.y - loy) * inv_w), 0), n - 1);
    const int iz = min(max((int)floorf((p.z - loz) * inv_w), 0), n - 1);
    const int c = ix + n * (iy + n * iz);
    cell[i] = c;
    slot[i] = atomicAdd(&counts[c], 1);
}

// Exclusive scan of one value per thread over the block; *total gets the block's sum.
__device__ __forceinline__ int block_exclusive(int x, int* s_warp, int* total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int inc = x;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
    }
    if (lane == 31) s_warp[warp] = inc;
    __syncthreads();
    if (threadIdx.x == 0) {
        int acc = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {
            const int t = s_warp[w];
            s_warp[w] = acc;
            acc += t;
        }
        s_warp[32] = acc;
    }
    __syncthreads();
    const int r = s_warp[warp] + inc - x;
    *total = s_warp[32];
    __syncthreads();
    return r;
}

// Scan step 1: exclusive scan inside blocks of SCAN_BLOCK elements, block sums out.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) u_scan_blocks(
    const int* __restrict__ in, int len, int* __restrict__ out, int* __restrict__ sums)
{
    __shared__ int s_warp[33];
    const int base = blockIdx.x * SCAN_BLOCK + threadIdx.x * SCAN_ITEMS;
    int v[SCAN_ITEMS];
    int sum = 0;
#pragma unroll
    for (int q = 0; q < SCAN_ITEMS; ++q) {
        v[q] = base + q < len ? in[base + q] : 0;
        sum += v[q];
    }
    int total;
    int run = block_exclusive(sum, s_warp, &total);
#pragma unroll
    for (int q = 0; q < SCAN_ITEMS; ++q) {
        if (base + q < len) out[base + q] = run;
        run += v[q];
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

// Scan step 2 (one block): exclusive scan of the block sums in place; the total to out[len].
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) u_scan_sums(
    int* __restrict__ sums, int nb, int* __restrict__ out, int len)
{
    __shared__ int s_warp[33];
    int carry = 0;
    for (int base = 0; base < nb; base += SCAN_THREADS) {
        const int i = base + threadIdx.x;
        const int v = i < nb ? sums[i] : 0;
        int total;
        const int e = block_exclusive(v, s_warp, &total);
        if (i < nb) sums[i] = carry + e;
        carry += total;
    }
    if (threadIdx.x == 0) out[len] = carry;
}

// Scan step 3: add the scanned block sums.
extern "C" __global__ void u_scan_add(int* __restrict__ out, int len, const int* __restrict__ sums)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len) out[i] += sums[i / SCAN_BLOCK];
}

// perm[start[cell] + slot] = i.
extern "C" __global__ void u_scatter(
    const int* __restrict__ cell, const int* __restrict__ slot, const int* __restrict__ starts,
    int np, int* __restrict__ perm)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < np) perm[starts[cell[i]] + slot[i]] = i;
}

// One warp per cell: element x goes to start + #{y in the cell : y < x} (indices are
// distinct), i.e. the cell's input indices in increasing order. O(count^2) per cell, the
// order of the cell's P2P work.
extern "C" __global__ void u_sort_cells(
    const int* __restrict__ starts, int ncells, const int* __restrict__ in, int* __restrict__ out)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= ncells) return;
    const int s = starts[warp], e = starts[warp + 1];
    for (int t = s + lane; t < e; t += 32) {
        const int x = in[t];
        int r = 0;
        for (int k = s; k < e; ++k) r += in[k] < x;
        out[s + r] = x;
    }
}

// Sorted particle buffers: out[k] = in[perm[k]].
extern "C" __global__ void u_gather(
    const int* __restrict__ perm, int np, const float4* __restrict__ pos_in,
    const float4* __restrict__ str_in, float4* __restrict__ pos, float4* __restrict__ str)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= np) return;
    const int i = perm[k];
    pos[k] = pos_in[i];
    str[k] = str_in[i];
}

// Slices of SLICE targets per leaf: ceil(count / slice).
extern "C" __global__ void u_slices(const int* __restrict__ starts, int ncells, int slice, int* __restrict__ out)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < ncells) out[c] = (starts[c + 1] - starts[c] + slice - 1) / slice;
}

// Tasks of the leaves c0 .. c0 + ncells - 1 (one thread per leaf, u = c - c0; the whole grid
// on one GPU, the target leaves of a rank's slab otherwise): P2M (first, count, global cell,
// 0); per slice the p2p_near task (first, count, 9 u, 9 u + 9) with its source count and the
// L2P task (first, count, global cell, 0); free space: 9 runs per leaf, one per neighbour row
// (y, z), covering the cells i-1..i+1 (contiguous in the sorted order; `starts` spans the whole
// grid); periodic: 18 runs, two per neighbour row (crates/gpu/src/uniform/periodic.rs
// `leaf_runs_periodic`).
// The runs and source counts come from `src_starts` (the targets' own `starts`, or on a rank
// the starts of the separately sorted halo particles, for the P2P from the halo).
// slice_starts is indexed by u. *pairs += count * sources.
extern "C" __global__ void u_leaf_tasks(
    const int* __restrict__ starts, const int* __restrict__ src_starts,
    const int* __restrict__ slice_starts, int n, int leaf_base,
    int slice, int c0, int ncells, int periodic, int4* __restrict__ p2m_tasks,
    int4* __restrict__ near_tasks, int* __restrict__ near_nsrc, int4* __restrict__ l2p_tasks,
    int4* __restrict__ runs, unsigned long long* __restrict__ pairs)
{
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= ncells) return;
    const int c = c0 + u;
    const int i = c % n, j = (c / n) % n, k = c / (n * n);
    const int first = starts[c], cnt = starts[c + 1] - first;
    const int g = leaf_base + c;
    p2m_tasks[u] = make_int4(first, cnt, g, 0);
    const int rpl = periodic ? 18 : 9;
    int nsrc = 0, r = 0;
    if (periodic) {
        // n >= 3; two runs per neighbour row (dy, dz): the unwrapped cells of i-1..i+1 and
        // the wrapped one (empty unless the row crosses the x face); rows across a y or z
        // face carry their image shift (periodic.rs `leaf_runs_periodic`)
        for (int dz = -1; dz <= 1; ++dz)
            for (int dy = -1; dy <= 1; ++dy) {
                int jj = j + dy, kk = k + dz;
                const int ty = jj < 0 ? -1 : (jj >= n ? 1 : 0);
                const int tz = kk < 0 ? -1 : (kk >= n ? 1 : 0);
                jj -= ty * n;
                kk -= tz * n;
                const int row = n * (jj + n * kk);
                const int code0 = 9 + 3 * (ty + 1) + (tz + 1);
                int a0, a1, b0 = 0, b1 = -1, tx = 0;
                if (i == 0) {
                    a0 = 0; a1 = 1; b0 = n - 1; b1 = n - 1; tx = -1;
                } else if (i == n - 1) {
                    a0 = n - 2; a1 = n - 1; b0 = 0; b1 = 0; tx = 1;
                } else {
                    a0 = i - 1; a1 = i + 1;
                }
                const int sa = src_starts[row + a0], ea = src_starts[row + a1 + 1];
                runs[rpl * u + r] = make_int4(sa, ea - sa, code0, 0);
                nsrc += ea - sa;
                int4 wrapped = make_int4(0, 0, code0, 0);
                if (b1 >= b0) {
                    const int sb = src_starts[row + b0], eb = src_starts[row + b1 + 1];
                    wrapped = make_int4(sb, eb - sb, code0 + 9 * tx, 0);
                    nsrc += eb - sb;
                }
                runs[rpl * u + r + 1] = wrapped;
                r += 2;
            }
    } else {
        const int i0 = max(i - 1, 0), i1 = min(i + 1, n - 1);
        for (int dz = -1; dz <= 1; ++dz)
            for (int dy = -1; dy <= 1; ++dy) {
                const int jj = j + dy, kk = k + dz;
                int4 run = make_int4(0, 0, FREE_IMAGE, 0);
                if (jj >= 0 && kk >= 0 && jj < n && kk < n) {
                    const int row = n * (jj + n * kk);
                    const int a = src_starts[i0 + row], b = src_starts[i1 + row + 1];
                    run = make_int4(a, b - a, FREE_IMAGE, 0);
                    nsrc += b - a;
                }
                runs[rpl * u + r] = run;
                ++r;
            }
    }
    const int t0 = slice_starts[u];
    for (int q = 0; q * slice < cnt; ++q) {
        const int f = first + q * slice, cn = min(slice, cnt - q * slice);
        near_tasks[t0 + q] = make_int4(f, cn, rpl * u, rpl * u + rpl);
        near_nsrc[t0 + q] = nsrc;
        l2p_tasks[t0 + q] = make_int4(f, cn, g, 0);
    }
    if (cnt > 0) atomicAdd(pairs, (unsigned long long)cnt * (unsigned long long)nsrc);
}

// P2M tasks (first, count, global cell, 0) of the leaves c0 .. c0 + ncells - 1 (the halo
// leaves of a rank: sources only).
extern "C" __global__ void u_p2m_tasks(
    const int* __restrict__ starts, int c0, int ncells, int leaf_base, int4* __restrict__ out)
{
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= ncells) return;
    const int c = c0 + u;
    out[u] = make_int4(starts[c], starts[c + 1] - starts[c], leaf_base + c, 0);
}

// Cell centres of one level (float4, w unused).
extern "C" __global__ void u_centers(int level_off, int nl, double lox, double loy, double loz, double w, float4* __restrict__ centers)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nl * nl * nl) return;
    const int i = c % nl, j = (c / nl) % nl, k = c / (nl * nl);
    centers[level_off + c] = make_float4((float)(lox + (i + 0.5) * w), (float)(loy + (j + 0.5) * w),
                                         (float)(loz + (k + 0.5) * w), 0.f);
}

// Fields back to input order, interleaved: out[6 i .. 6 i + 6] = (u, s) of input particle i.
extern "C" __global__ void u_scatter_fields(
    const int* __restrict__ perm, int np, const float* __restrict__ vel,
    const float* __restrict__ str, float* __restrict__ out)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= np) return;
    const size_t i = (size_t)perm[k] * 6;
    out[i + 0] = vel[3 * k + 0];
    out[i + 1] = vel[3 * k + 1];
    out[i + 2] = vel[3 * k + 2];
    out[i + 3] = str[3 * k + 0];
    out[i + 4] = str[3 * k + 1];
    out[i + 5] = str[3 * k + 2];
}

// ---- translations with implicit lists -------------------------------------------------------
// Each block calls tr_entry<KIND> of fmm.cu (rotate, shift along z, rotate back) per source.

__device__ __forceinline__ int rot_index(int vx, int vy, int vz, int R)
{
    const int D = 2 * R + 1;
    return (vx + R) + D * ((vy + R) + D * (vz + R));
}

// Thread setup shared by the translation kernels.
#define TR_SETUP(ZTAB)                                                                   \
    __shared__ float2 s_in[3 * NC];                                                      \
    __shared__ float2 s_a[3 * NC];                                                       \
    __shared__ float2 s_b[3 * NC];                                                       \
    const int t = threadIdx.x;                                                           \
    const bool live = t < 3 * NC;                                                        \
    const int tt = live ? t : 0;                                                         \
    const int comp = tt / NC, ci = tt % NC;                                              \
    int n, m;                                                                            \
    decode(ci, n, m);                                                                    \
    const int cb = comp * NC;                                                            \
    const float* zrow = ZTAB + toff[m] + (n - m) * (P + 1 - m);                          \
    float2 acc = make_float2(0.f, 0.f);

// M2M into the parents c0 + blockIdx.x of level l (one block per parent): its 8 children of level l + 1,
// v = parent - child = (1 - 2a, 1 - 2b, 1 - 2c) (child offsets a, b, c), |v| = sqrt(3) w_{l+1} / 2.
extern "C" __global__ void __launch_bounds__(TR_THREADS) u_m2m(
    float2* mult, const float* __restrict__ rots, const float* __restrict__ ztab,
    const int* __restrict__ toff, int R, int parent_off, int nl, int child_off, float dist, int c0)
{
    TR_SETUP(ztab)
    const int c = c0 + blockIdx.x;
    const int i = c % nl, j = (c / nl) % nl, k = c / (nl * nl);
    const int nc = 2 * nl;
    for (int o = 0; o < 8; ++o) {
        const int a = o & 1, b = (o >> 1) & 1, d = o >> 2;
        const int child = child_off + (2 * i + a) + nc * ((2 * j + b) + nc * (2 * k + d));
        const float* rot = rots + (size_t)rot_index(1 - 2 * a, 1 - 2 * b, 1 - 2 * d, R) * ROT_STRIDE;
        tr_entry<0>(mult + (size_t)child * 3 * NC, rot, dist, zrow, t, live, cb, n, m, s_in, s_a, s_b, acc);
    }
    if (live) {
        float2* out = mult + (size_t)(parent_off + c) * 3 * NC + t;
        *out = cadd(*out, acc);
    }
}

// M2L into the cells c0 + blockIdx.x of level l (one block per target cell): the classical list over the
// stencil (top level: every non-adjacent cell), v = target - source in cells, |v| w_l.
// Periodic: the same ranges unclamped (top level: the 3 x 3 x 3 box images, -nl .. 2 nl - 1),
// the source multipole that of the wrapped cell, v the unwrapped offset
// (crates/gpu/src/uniform/stencil.rs `m2l_sources_periodic`).
__device__ __forceinline__ int wrap_cell(int s, int nl)
{
    const int r = s % nl;
    return r < 0 ? r + nl : r;
}

extern "C" __global__ void __launch_bounds__(TR_THREADS) u_m2l(
    const float2* __restrict__ mult, float2* __restrict__ loc, const float* __restrict__ rots,
    const float* __restrict__ ztab, const int* __restrict__ toff, int R, int level_off, int nl,
    int top, int periodic, float w, int c0)
{
    TR_SETUP(ztab)
    const int c = c0 + blockIdx.x;
    const int ci_[3] = {c % nl, (c / nl) % nl, c / (nl * nl)};
    int lo[3], hi[3];
#pragma unroll
    for (int d = 0; d < 3; ++d) {
        if (top) {
            lo[d] = periodic ? -nl : 0;
            hi[d] = periodic ? 2 * nl - 1 : nl - 1;
        } else {
            const int p2 = 2 * (ci_[d] / 2);
            lo[d] = periodic ? p2 - 2 : max(p2 - 2, 0);
            hi[d] = periodic ? p2 + 3 : min(p2 + 3, nl - 1);
        }
    }
    for (int sz = lo[2]; sz <= hi[2]; ++sz)
        for (int sy = lo[1]; sy <= hi[1]; ++sy)
            for (int sx = lo[0]; sx <= hi[0]; ++sx) {
                const int vx = ci_[0] - sx, vy = ci_[1] - sy, vz = ci_[2] - sz;
                if (abs(vx) <= 1 && abs(vy) <= 1 && abs(vz) <= 1) continue;
                const int src = level_off + wrap_cell(sx, nl) + nl * (wrap_cell(sy, nl) + nl * wrap_cell(sz, nl));
                const float* rot = rots + (size_t)rot_index(vx, vy, vz, R) * ROT_STRIDE;
                const float dist = w * sqrtf((float)(vx * vx + vy * vy + vz * vz));
                tr_entry<1>(mult + (size_t)src * 3 * NC, rot, dist, zrow, t, live, cb, n, m, s_in, s_a, s_b, acc);
            }
    if (live) {
        float2* out = loc + (size_t)(level_off + c) * 3 * NC + t;
        *out = cadd(*out, acc);
    }
}

// L2L into the cells c0 + blockIdx.x of level l >= 1 (one block per child) from its parent of level l - 1,
// v = child - parent = (2a - 1, 2b - 1, 2c - 1), |v| = sqrt(3) w_l / 2.
extern "C" __global__ void __launch_bounds__(TR_THREADS) u_l2l(
    float2* loc, const float* __restrict__ rots, const float* __restrict__ ztab,
    const int* __restrict__ toff, int R, int child_off, int nl, int parent_off, float dist, int c0)
{
    TR_SETUP(ztab)
    const int c = c0 + blockIdx.x;
    const int i = c % nl, j = (c / nl) % nl, k = c / (nl * nl);
    const int np_ = nl / 2;
    const int parent = parent_off + i / 2 + np_ * (j / 2 + np_ * (k / 2));
    const float* rot = rots + (size_t)rot_index(2 * (i & 1) - 1, 2 * (j & 1) - 1, 2 * (k & 1) - 1, R) * ROT_STRIDE;
    tr_entry<2>(loc + (size_t)parent * 3 * NC, rot, dist, zrow, t, live, cb, n, m, s_in, s_a, s_b, acc);
    if (live) {
        float2* out = loc + (size_t)(child_off + c) * 3 * NC + t;
        *out = cadd(*out, acc);
    }
}

// ---- M2L as dense per-offset matrices (crates/gpu/src/uniform/dense_m2l.rs) -----------------
// Below the top every target cell t of level l >= 1 (nl even) has the sources t - v with
// v_d in [-3 + pi_d, 2 + pi_d] (pi = t mod 2 per axis, the parity class), |v|_inf >= 2: 189
// offsets, the same for every cell of a class. The M2L of one offset at unit cell width is a
// fixed real DP x DP matrix A_v acting on the DD = (P+1)^2 real degrees of freedom of one
// component (compact order: per degree n, Re c(n,0), then Re c(n,m), Im c(n,m) for m = 1..n;
// dmap[j] = its float index in the 2 NC floats of the component, -1 for padding), stored
// transposed, column-major: mats[(o DP + j) DP + r] = A_v[r][j], o = rot_index(v, 3). At width
// w: L_r += w^{-(deg r + 1)} sum_j A_v[r][j] w^{-deg j} M_j (I_n(w v) = w^{-(n+1)} I_n(v)).
// One block: DT_TARGETS targets of one class (blockIdx.y) x 3 components = 96 columns, the
// DP x 96 product of every offset accumulated in registers (thread tile DTM rows x 8 columns,
// 16 x 12 threads), A and the gathered, scaled source columns staged through shared memory in
// chunks of DKC rows of A^T. f32 throughout; accumulation order fixed (repeatable).
#define DD ((P + 1) * (P + 1))
#define DP ((DD + 63) / 64 * 64)
#define DTM (DP / 16)
#define DT_TARGETS 32
#define DCOLS (3 * DT_TARGETS)
#define DXS (DCOLS + 4)
#define DKC (DP > 256 ? 16 : 32)
#define DTHREADS 192

// The slot map of the dense M2L (dmap: the expansion slot of each of the DP rows, -1 for
// padding) into s_map, and each row's scaling w^-n (degree n of the row, 0 for padding) into
// s_scale, in T (float or double); `threads` threads from `tid`.
template <typename T>
__device__ __forceinline__ void dense_slots(
    const int* __restrict__ dmap, T inv_w, int tid, int threads, int* s_map, T* s_scale)
{
    for (int r = tid; r < DP; r += threads) {
        const int f = dmap[r];
        int n = 0;
        while ((n + 1) * (n + 1) <= r) ++n;
        T sc = 1;
        for (int q = 0; q < n; ++q) sc *= inv_w;
        s_map[r] = f;
        s_scale[r] = f >= 0 ? sc : T(0);
    }
}

// The block's DT_TARGETS target cells of class (px, py, pz) into s_tgt (the cell of sublattice
// index q, h = nl / 2, or -1 where q is past the launch or the cell's z outside [zlo, zhi)),
// the block synchronized after; whether any of them is a target.
__device__ __forceinline__ bool dense_targets(
    int* s_tgt, int tid, int px, int py, int pz, int nl, int q0, int qcount, int zlo, int zhi)
{
    if (tid < DT_TARGETS) {
        const int h = nl / 2;
        const int q = q0 + (int)blockIdx.x * DT_TARGETS + tid;
        int c = -1;
        if (q < q0 + qcount) {
            const int x = 2 * (q % h) + px, y = 2 * ((q / h) % h) + py, z = 2 * (q / (h * h)) + pz;
            if (z >= zlo && z < zhi) c = x + nl * (y + nl * z);
        }
        s_tgt[tid] = c;
    }
    __syncthreads();
    bool any = false;
    for (int j = 0; j < DT_TARGETS; ++j) any = any || s_tgt[j] >= 0;
    return any;
}

// The source cell at offset -(vx, vy, vz) from target cell c (-1: none): wrapped when periodic,
// -1 outside the grid in free space.
__device__ __forceinline__ int dense_source(int c, int vx, int vy, int vz, int nl, int periodic)
{
    int s = -1;
    if (c >= 0) {
        int sx = c % nl - vx, sy = (c / nl) % nl - vy, sz = c / (nl * nl) - vz;
        if (periodic) {
            sx = wrap_cell(sx, nl);
            sy = wrap_cell(sy, nl);
            sz = wrap_cell(sz, nl);
            s = sx + nl * (sy + nl * sz);
        } else if (sx >= 0 && sy >= 0 && sz >= 0 && sx < nl && sy < nl && sz < nl) {
            s = sx + nl * (sy + nl * sz);
        }
    }
    return s;
}

// Targets: class sublattice index q = qx + h (qy + h qz), h = nl / 2, cell (2 qx + px, ...);
// this launch covers q0 .. q0 + qcount - 1 (whole z planes of the sublattice) and stores only
// into cells with z in [zlo, zhi). Sources outside the grid (free space) are zero columns;
// periodic sources wrap (the offset stays the unwrapped one).
extern "C" __global__ void __launch_bounds__(DTHREADS) u_m2l_dense(
    const float* __restrict__ mult, float* __restrict__ loc, const float* __restrict__ mats,
    const int* __restrict__ dmap, int level_off, int nl, int periodic, float w, int zlo, int zhi,
    int q0, int qcount)
{
    __shared__ __align__(16) float s_a[DKC * DP];
    __shared__ __align__(16) float s_x[DKC * DXS];
    __shared__ int s_map[DP];
    __shared__ float s_scale[DP];
    __shared__ int s_tgt[DT_TARGETS];
    __shared__ int s_src[DT_TARGETS];
    const int tid = threadIdx.x;
    const int ty = tid / 12, tx = tid % 12;
    const int cls = blockIdx.y;
    const int px = cls & 1, py = (cls >> 1) & 1, pz = cls >> 2;
    const float inv_w = 1.0f / w;
    dense_slots(dmap, inv_w, tid, DTHREADS, s_map, s_scale);
    if (!dense_targets(s_tgt, tid, px, py, pz, nl, q0, qcount, zlo, zhi)) return;
    float acc[DTM][8];
#pragma unroll
    for (int i = 0; i < DTM; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
    for (int vz = -3 + pz; vz <= 2 + pz; ++vz)
        for (int vy = -3 + py; vy <= 2 + py; ++vy)
            for (int vx = -3 + px; vx <= 2 + px; ++vx) {
                if (abs(vx) <= 1 && abs(vy) <= 1 && abs(vz) <= 1) continue;
                // s_src was last read before the previous chunk's second barrier
                if (tid < DT_TARGETS) s_src[tid] = dense_source(s_tgt[tid], vx, vy, vz, nl, periodic);
                const float* a = mats + (size_t)rot_index(vx, vy, vz, 3) * DP * DP;
                for (int k0 = 0; k0 < DP; k0 += DKC) {
                    __syncthreads();  // the previous chunk is consumed; s_src written
                    const float4* ag = (const float4*)(a + (size_t)k0 * DP);
                    float4* as = (float4*)s_a;
                    for (int i = tid; i < DKC * DP / 4; i += DTHREADS) as[i] = ag[i];
                    for (int i = tid; i < DKC * DCOLS; i += DTHREADS) {
                        const int k = i % DKC, col = i / DKC;
                        const int comp = col / DT_TARGETS, j = col % DT_TARGETS;
                        const int s = s_src[j], f = s_map[k0 + k];
                        float x = 0.f;
                        if (s >= 0 && f >= 0)
                            x = mult[((size_t)(level_off + s) * 3 + comp) * (2 * NC) + f] * s_scale[k0 + k];
                        s_x[k * DXS + col] = x;
                    }
                    __syncthreads();
#pragma unroll 4
                    for (int k = 0; k < DKC; ++k) {
                        float av[DTM], xv[8];
#pragma unroll
                        for (int q = 0; q < DTM / 4; ++q) {
                            const float4 t4 = *(const float4*)&s_a[k * DP + q * 64 + ty * 4];
                            av[4 * q] = t4.x; av[4 * q + 1] = t4.y; av[4 * q + 2] = t4.z; av[4 * q + 3] = t4.w;
                        }
#pragma unroll
                        for (int q = 0; q < 2; ++q) {
                            const float4 t4 = *(const float4*)&s_x[k * DXS + q * 48 + tx * 4];
                            xv[4 * q] = t4.x; xv[4 * q + 1] = t4.y; xv[4 * q + 2] = t4.z; xv[4 * q + 3] = t4.w;
                        }
#pragma unroll
                        for (int i = 0; i < DTM; ++i)
#pragma unroll
                            for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], xv[j], acc[i][j]);
                    }
                }
            }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int col = (j / 4) * 48 + tx * 4 + (j % 4);
        const int comp = col / DT_TARGETS, c = s_tgt[col % DT_TARGETS];
        if (c < 0) continue;
        float* out = loc + ((size_t)(level_off + c) * 3 + comp) * (2 * NC);
#pragma unroll
        for (int i = 0; i < DTM; ++i) {
            const int r = (i / 4) * 64 + ty * 4 + (i % 4);
            const int f = s_map[r];
            if (f >= 0) out[f] += acc[i][j] * s_scale[r] * inv_w;
        }
    }
}
// ---- M2L as dense per-offset matrices on the FP64 tensor cores ------------------------------
// The product of u_m2l_dense (same targets, classes, offsets, gathers and scalings; the
// matrices in f64, mats64[(o DP + j) DP + r] = A_v[r][j]) with mma.sync m8n8k4 f64 (DMMA, PTX
// ISA "Matrix multiply-accumulate operation using mma instruction", shape .m8n8k4 .f64):
// per k step of 4 a warp holds one element of A (row lane/4, column lane%4), one of B (row
// lane%4, column lane/4) and two of the accumulator (row lane/4, columns 2 (lane%4) + 0, 1).
// 8 warps; warp w owns the output rows 8 MT w .. 8 MT (w + 1) (MT = DP / 64 row tiles of 8)
// and all 96 columns (12 column tiles of 8): 2 MT x 12 doubles of accumulator per thread. A
// chunk of DKT input slots of A (DKT x DP) and of the gathered, scaled sources (96 x DKT)
// is staged in shared memory as f64, rows padded by 4 doubles (no bank conflicts on the
// fragment loads). f64 products and sums: the locals are rounded to f32 once, at the store.
// A level of few targets (fewer blocks than the GPU holds) splits the 189 offsets into
// `groups` contiguous ranges (blockIdx.z; the i-th of the class's offsets in loop order goes
// to group floor(i groups / 189)); each group then stores its f64 sums into `part` (per group,
// level cell, component and slot: groups nl^3 3 DP doubles) and u_m2l_tensor_sum adds the
// groups in their order (repeatable) into the locals.
#define MT (DP / 64)
#ifndef DKT
#define DKT (DP > 128 ? 8 : 16)
#endif
#ifndef TENSOR_MINB
#define TENSOR_MINB 1
#endif
#define APAD (DP + 4)
#define XPAD (DKT + 4)
#define TTHREADS 256
#define TAPER (DKT * DP / 2 / TTHREADS)  /* double2 of A per thread and chunk */
#define TXPER (DKT * DCOLS / TTHREADS)   /* source values per thread and chunk */

__device__ __forceinline__ void dmma_884(double a, double b, double& c0, double& c1)
{
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
                 : "+d"(c0), "+d"(c1)
                 : "d"(a), "d"(b));
}

extern "C" __global__ void __launch_bounds__(TTHREADS, TENSOR_MINB) u_m2l_tensor(
    const float* __restrict__ mult, float* __restrict__ loc, const double* __restrict__ mats,
    const int* __restrict__ dmap, double* __restrict__ part, int level_off, int nl, int periodic,
    float w, int zlo, int zhi, int q0, int qcount, int groups)
{
    __shared__ __align__(16) double s_a[DKT * APAD];
    __shared__ __align__(16) double s_x[DCOLS * XPAD];
    __shared__ int s_map[DP];
    __shared__ double s_scale[DP];
    __shared__ int s_tgt[DT_TARGETS];
    __shared__ int s_src[DT_TARGETS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q4 = lane & 3;
    const int cls = blockIdx.y;
    const int px = cls & 1, py = (cls >> 1) & 1, pz = cls >> 2;
    const double inv_w = 1.0 / (double)w;
    dense_slots(dmap, inv_w, tid, TTHREADS, s_map, s_scale);
    if (!dense_targets(s_tgt, tid, px, py, pz, nl, q0, qcount, zlo, zhi)) return;
    double acc[MT][12][2];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < 12; ++j) acc[i][j][0] = acc[i][j][1] = 0.0;
    const int row0 = warp * 8 * MT;
    const int g0 = (int)blockIdx.z;
    int oi = -1;  // index of the offset among the class's 189
    for (int vz = -3 + pz; vz <= 2 + pz; ++vz)
        for (int vy = -3 + py; vy <= 2 + py; ++vy)
            for (int vx = -3 + px; vx <= 2 + px; ++vx) {
                if (abs(vx) <= 1 && abs(vy) <= 1 && abs(vz) <= 1) continue;
                ++oi;
                if ((oi * groups) / 189 != g0) continue;
                // s_src was last read before the previous chunk's second barrier
                if (tid < DT_TARGETS) s_src[tid] = dense_source(s_tgt[tid], vx, vy, vz, nl, periodic);
                const double* a = mats + (size_t)rot_index(vx, vy, vz, 3) * DP * DP;
                for (int k0 = 0; k0 < DP; k0 += DKT) {
                    __syncthreads();  // the previous chunk is consumed; s_src written
                    // every global load of the chunk issued before the first store (one
                    // memory latency per chunk, not one per element)
                    double2 av[TAPER];
                    float xv[TXPER];
#pragma unroll
                    for (int u = 0; u < TAPER; ++u) {
                        const int i = tid + u * TTHREADS;
                        const int k = i / (DP / 2), r2 = i % (DP / 2);
                        av[u] = __ldg((const double2*)(a + (size_t)(k0 + k) * DP) + r2);
                    }
#pragma unroll
                    for (int u = 0; u < TXPER; ++u) {
                        const int i = tid + u * TTHREADS;
                        const int k = i % DKT, col = i / DKT;
                        const int comp = col / DT_TARGETS, j = col % DT_TARGETS;
                        const int s = s_src[j], f = s_map[k0 + k];
                        xv[u] = (s >= 0 && f >= 0)
                            ? __ldg(mult + ((size_t)(level_off + s) * 3 + comp) * (2 * NC) + f)
                            : 0.f;
                    }
#pragma unroll
                    for (int u = 0; u < TAPER; ++u) {
                        const int i = tid + u * TTHREADS;
                        const int k = i / (DP / 2), r2 = i % (DP / 2);
                        *(double2*)&s_a[k * APAD + 2 * r2] = av[u];
                    }
#pragma unroll
                    for (int u = 0; u < TXPER; ++u) {
                        const int i = tid + u * TTHREADS;
                        const int k = i % DKT, col = i / DKT;
                        s_x[col * XPAD + k] = (double)xv[u] * s_scale[k0 + k];
                    }
                    __syncthreads();
#pragma unroll
                    for (int kk = 0; kk < DKT; kk += 4) {
                        double af[MT];
#pragma unroll
                        for (int i = 0; i < MT; ++i) af[i] = s_a[(kk + q4) * APAD + row0 + 8 * i + g];
#pragma unroll
                        for (int j = 0; j < 12; ++j) {
                            const double bf = s_x[(8 * j + g) * XPAD + kk + q4];
#pragma unroll
                            for (int i = 0; i < MT; ++i) dmma_884(af[i], bf, acc[i][j][0], acc[i][j][1]);
                        }
                    }
                }
            }
#pragma unroll
    for (int j = 0; j < 12; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int col = 8 * j + 2 * q4 + e;
            const int comp = col / DT_TARGETS, c = s_tgt[col % DT_TARGETS];
            if (c < 0) continue;
            float* out = loc + ((size_t)(level_off + c) * 3 + comp) * (2 * NC);
            double* pt = part + (((size_t)g0 * nl * nl * nl + c) * 3 + comp) * DP;
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int r = row0 + 8 * i + g;
                const int f = s_map[r];
                if (f < 0) continue;
                const double v = acc[i][j][e] * s_scale[r] * inv_w;
                if (groups == 1)
                    out[f] += (float)v;
                else
                    pt[r] = v;
            }
        }
}

// The offset groups of u_m2l_tensor added in their order into the locals: one thread per
// (target cell with z in zlo..zhi, component, slot r < DD).
extern "C" __global__ void u_m2l_tensor_sum(
    const double* __restrict__ part, float* __restrict__ loc, const int* __restrict__ dmap,
    int level_off, int nl, int zlo, int zhi, int groups)
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long per = (long long)(zhi - zlo) * nl * nl * 3 * DD;
    if (t >= per) return;
    const int r = (int)(t % DD);
    const int comp = (int)((t / DD) % 3);
    const long long c = (long long)zlo * nl * nl + t / (3 * DD);
    const int f = dmap[r];
    if (f < 0) return;
    const size_t cells = (size_t)nl * nl * nl;
    double s = 0.0;
    for (int g = 0; g < groups; ++g) s += part[(((size_t)g * cells + c) * 3 + comp) * DP + r];
    loc[((size_t)(level_off + c) * 3 + comp) * (2 * NC) + f] += (float)s;
}
