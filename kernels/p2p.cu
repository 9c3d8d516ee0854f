// Near-field P2P and all-pairs kernels: Gaussian-cored Biot-Savart velocity and classical
// stretching (CONVENTIONS.md, core paper Eq. 3-9), fp32, compiled by NVRTC with
// --use_fast_math. No libc headers (NVRTC has none): only CUDA built-ins are used.
//
// Data layout (see crates/gpu/src/layout.rs):
//   target position  float4 (x, y, z, 0)          target strength float4 (ax, ay, az, 0)
//   source position  float4 (x, y, z, 1/sigma)    source strength float4 (ax, ay, az, 0)
//   fields           float  [3 n] velocity, [3 n] stretching, accumulated (+=), no 1/(4 pi).
//
// Near field: one task (<= NEAR_TARGETS targets of one target leaf) per thread block. The
// task's source cells are merged into contiguous runs on the host; the block streams the
// concatenation of its runs through shared-memory tiles of NEAR_THREADS sources (full tiles
// across run boundaries; the periodic image shift is added to the sources while loading), so
// the inner loop has no branches. Lanes past the task's target count work on a clamped copy
// of a valid target and do not store.

#define ALL_BLOCK 128

#define SQRT_2_OVER_PI 0.7978845608028654f
#define INV_SQRT2 0.7071067811865476f

// Beyond rho^2 = FAR_RHO2 the core is invisible in fp32: there 1 - q(rho) < 2e-9 and the
// dq/dr term of K' is 2e-8 of the singular term (q(rho) = erf(rho / sqrt 2) - sqrt(2 / pi)
// rho exp(-rho^2 / 2), rho = 6.63), so K = 1 / r^3 and K'/r = -3 / r^5 to fp32 rounding. A
// core of another order that converges to the singular kernel as fast may keep it; one that
// does not defines its own before including this file.
#ifndef FAR_RHO2
#define FAR_RHO2 44.0f
#endif

// K and K'/r of one pair from r^2 and 1/sigma, on three branches by rho^2 (each lane takes its
// own: a warp whose lanes agree runs one branch; where they differ, the warp runs each branch
// taken, as many instructions as one evaluation of all three):
// * rho^2 >= FAR_RHO2: the singular kernel (above);
// * 1 <= rho^2 < FAR_RHO2: the closed form;
// * rho^2 < 1: the Taylor series in rho^2 (the closed form cancels there; the series is exact
//   to fp32 for rho^2 < 1 and gives the analytic limit at r = 0).
__device__ __forceinline__ void kernel_factors(float r2, float is, float& k, float& kp_over_r)
{
    const float is2 = is * is;
    const float rho2 = r2 * is2;
    if (rho2 >= FAR_RHO2) {
        const float rinv = rsqrtf(r2);
        const float rinv2 = rinv * rinv;
        k = rinv2 * rinv;
        kp_over_r = -3.0f * k * rinv2;
    } else if (rho2 >= 1.0f) {
        const float rinv = rsqrtf(r2);
        const float rho = r2 * rinv * is;
        const float g = __expf(-0.5f * rho2);
        const float q = erff(rho * INV_SQRT2) - SQRT_2_OVER_PI * rho * g;
        const float rinv2 = rinv * rinv;
        k = q * rinv2 * rinv;
        // K'/r = (dq/dr - 3 q / r) / r^4, dq/dr = sqrt(2/pi) rho^2 g / sigma
        kp_over_r = (SQRT_2_OVER_PI * rho2 * g * is - 3.0f * q * rinv) * rinv2 * rinv2;
    } else {
        // K = c/s^3 sum a_k x^k, K'/r = c/s^5 sum b_k x^k, x = rho^2,
        // a_k = (-1)^k / (2^k k! (2k+3)), b_k = 2 (k+1) a_{k+1}
        const float x = rho2;
        const float fa = 1.0f / 3.0f + x * (-1.0f / 10.0f + x * (1.0f / 56.0f + x * (-1.0f / 432.0f
                 + x * (1.0f / 4224.0f + x * (-1.0f / 49920.0f + x * (1.0f / 691200.0f))))));
        const float fb = -1.0f / 5.0f + x * (1.0f / 14.0f + x * (-1.0f / 72.0f + x * (1.0f / 528.0f
                 + x * (-1.0f / 4992.0f + x * (1.0f / 57600.0f + x * (-1.0f / 783360.0f))))));
        const float c3 = SQRT_2_OVER_PI * is2 * is;
        k = c3 * fa;
        kp_over_r = c3 * is2 * fb;
    }
}

// Adds the contribution of source (sp, sa) to target (x, a): u += K a_j x d,
// s += K a_j x a_i + (K'/r)(a_i . d) a_j x d.
__device__ __forceinline__ void pair(float3 x, float3 a, float4 sp, float4 sa, float3& u, float3& s)
{
    float dx = x.x - sp.x, dy = x.y - sp.y, dz = x.z - sp.z;
    float r2 = dx * dx + dy * dy + dz * dz;
    float k, kp;
    kernel_factors(r2, sp.w, k, kp);
    float cx = sa.y * dz - sa.z * dy;
    float cy = sa.z * dx - sa.x * dz;
    float cz = sa.x * dy - sa.y * dx;
    float ad = (a.x * dx + a.y * dy + a.z * dz) * kp;
    u.x += k * cx;
    u.y += k * cy;
    u.z += k * cz;
    s.x += k * (sa.y * a.z - sa.z * a.y) + ad * cx;
    s.y += k * (sa.z * a.x - sa.x * a.z) + ad * cy;
    s.z += k * (sa.x * a.y - sa.y * a.x) + ad * cz;
}

__device__ __forceinline__ float3 image_shift(int image, float period)
{
    return make_float3((float)(image / 9 - 1) * period, (float)((image / 3) % 3 - 1) * period,
                       (float)(image % 3 - 1) * period);
}

// tasks[b]  = (first target, target count <= NEAR_TARGETS, first run, end run)
// task_nsrc[b] = total sources of the task's runs
// runs[r]   = (first source, source count, periodic image, 0)
//
// NEAR_THREADS threads (4 warps) per task. A leaf slice has T <= 32 targets, often far fewer
// (leaves of an adaptive octree hold leaf_size/8 .. leaf_size points), so each warp is split
// into 32/tp groups of tp = next_pow2(T) lanes: lane = target, group = a slice of every source
// tile; the groups are reduced with warp shuffles and the 4 warps through shared memory.
// Every lane does useful work unless T is not a power of two.
#define NEAR_THREADS 128
#define NEAR_TARGETS 32
extern "C" __global__ void __launch_bounds__(NEAR_THREADS) p2p_near(
    const float4* __restrict__ tpos, const float4* __restrict__ tstr,
    const float4* __restrict__ spos, const float4* __restrict__ sstr,
    const int4* __restrict__ tasks, const int* __restrict__ task_nsrc,
    const int4* __restrict__ runs, float period,
    float* __restrict__ vel, float* __restrict__ str)
{
    __shared__ float4 sh_p[NEAR_THREADS];
    __shared__ float4 sh_a[NEAR_THREADS];
    __shared__ float sh_r[NEAR_THREADS / 32][NEAR_TARGETS][6];
    const int4 task = tasks[blockIdx.x];
    const int nsrc = task_nsrc[blockIdx.x];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int tp = 1;
    while (tp < task.y) tp <<= 1;
    const int groups = 32 / tp;
    const int t = lane & (tp - 1), g = lane / tp;
    const int slot = warp * groups + g, stride = (NEAR_THREADS / 32) * groups;
    const int ti = task.x + min(t, task.y - 1);
    const float4 tq = tpos[ti];
    const float4 ta = tstr[ti];
    const float3 x = make_float3(tq.x, tq.y, tq.z);
    const float3 a = make_float3(ta.x, ta.y, ta.z);
    float3 u = make_float3(0.f, 0.f, 0.f), s = make_float3(0.f, 0.f, 0.f);

    // per-thread cursor into the runs for the tile loads: run r, offset off within it
    int r = task.z, off = tid;
    int4 run = r < task.w ? runs[r] : make_int4(0, 0, 13, 0);
    while (r < task.w && off >= run.y) {
        off -= run.y;
        ++r;
        if (r < task.w) run = runs[r];
    }
    for (int base = 0; base < nsrc; base += NEAR_THREADS) {
        if (r < task.w) {
            float4 p = spos[run.x + off];
            float3 sh = image_shift(run.z, period);
            sh_p[tid] = make_float4(p.x + sh.x, p.y + sh.y, p.z + sh.z, p.w);
            sh_a[tid] = sstr[run.x + off];
        } else {
            sh_p[tid] = make_float4(0.f, 0.f, 0.f, 1.f);
            sh_a[tid] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        __syncthreads();
        const int n = min(NEAR_THREADS, nsrc - base);
#pragma unroll 4
        for (int k = slot; k < n; k += stride) pair(x, a, sh_p[k], sh_a[k], u, s);
        __syncthreads();
        off += NEAR_THREADS;
        while (r < task.w && off >= run.y) {
            off -= run.y;
            ++r;
            if (r < task.w) run = runs[r];
        }
    }
    for (int o = tp; o < 32; o <<= 1) {
        u.x += __shfl_xor_sync(0xffffffffu, u.x, o);
        u.y += __shfl_xor_sync(0xffffffffu, u.y, o);
        u.z += __shfl_xor_sync(0xffffffffu, u.z, o);
        s.x += __shfl_xor_sync(0xffffffffu, s.x, o);
        s.y += __shfl_xor_sync(0xffffffffu, s.y, o);
        s.z += __shfl_xor_sync(0xffffffffu, s.z, o);
    }
    if (g == 0) {
        sh_r[warp][t][0] = u.x;
        sh_r[warp][t][1] = u.y;
        sh_r[warp][t][2] = u.z;
        sh_r[warp][t][3] = s.x;
        sh_r[warp][t][4] = s.y;
        sh_r[warp][t][5] = s.z;
    }
    __syncthreads();
    if (tid < task.y) {
        float acc[6];
#pragma unroll
        for (int q = 0; q < 6; ++q) {
            float v = 0.f;
#pragma unroll
            for (int w = 0; w < NEAR_THREADS / 32; ++w) v += sh_r[w][tid][q];
            acc[q] = v;
        }
        const int i = task.x + tid;
        vel[3 * i + 0] += acc[0];
        vel[3 * i + 1] += acc[1];
        vel[3 * i + 2] += acc[2];
        str[3 * i + 0] += acc[3];
        str[3 * i + 1] += acc[4];
        str[3 * i + 2] += acc[5];
    }
}

// All pairs: every target against every source, one target per thread, sources tiled through
// shared memory (ns need not be a multiple of the block: the last tile is padded with
// zero-strength sources, which contribute exactly zero).
extern "C" __global__ void __launch_bounds__(ALL_BLOCK) p2p_all(
    const float4* __restrict__ tpos, const float4* __restrict__ tstr, int nt,
    const float4* __restrict__ spos, const float4* __restrict__ sstr, int ns,
    float* __restrict__ vel, float* __restrict__ str)
{
    __shared__ float4 sh_p[ALL_BLOCK];
    __shared__ float4 sh_a[ALL_BLOCK];
    const int i = blockIdx.x * ALL_BLOCK + threadIdx.x;
    const int ti = min(i, nt - 1);
    const float4 tp = tpos[ti];
    const float4 ta = tstr[ti];
    const float3 x = make_float3(tp.x, tp.y, tp.z);
    const float3 a = make_float3(ta.x, ta.y, ta.z);
    float3 u = make_float3(0.f, 0.f, 0.f), s = make_float3(0.f, 0.f, 0.f);
    for (int base = 0; base < ns; base += ALL_BLOCK) {
        int j = base + threadIdx.x;
        if (j < ns) {
            sh_p[threadIdx.x] = spos[j];
            sh_a[threadIdx.x] = sstr[j];
        } else {
            sh_p[threadIdx.x] = make_float4(0.f, 0.f, 0.f, 1.f);
            sh_a[threadIdx.x] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < ALL_BLOCK; ++k) pair(x, a, sh_p[k], sh_a[k], u, s);
        __syncthreads();
    }
    if (i < nt) {
        vel[3 * i + 0] += u.x;
        vel[3 * i + 1] += u.y;
        vel[3 * i + 2] += u.z;
        str[3 * i + 0] += s.x;
        str[3 * i + 1] += s.y;
        str[3 * i + 2] += s.z;
    }
}
