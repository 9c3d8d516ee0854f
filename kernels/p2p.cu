// Near-field P2P and all-pairs kernels: Biot-Savart velocity and classical stretching of the
// Gaussian-based cores of order 2 CORE_M (CONVENTIONS.md, core paper Eq. 3-9; the family of
// Beale & Majda, J. Comput. Phys. 58 (1985) 188, and Winckelmans & Leonard, J. Comput. Phys.
// 109 (1993) 247: crates/fmm/src/kernel/cores.rs), fp32, compiled by NVRTC with
// --use_fast_math. No libc headers (NVRTC has none): only CUDA built-ins are used.
//
// CORE_M (required): 1 the Gaussian (order 2), 2 the fourth-order core, 3 the sixth-order core.
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

#if !defined(CORE_M) || CORE_M < 1 || CORE_M > 3
#error "CORE_M must be 1, 2 or 3 (cores of order 2, 4, 6)"
#endif

// The polynomials of the core of order 2 CORE_M at x = rho^2 (cores.rs): zeta = (2 pi)^(-3/2)
// e^(-x/2) P(x), q = erf(rho / sqrt 2) - sqrt(2/pi) rho e^(-x/2) Q(x), dq/drho = sqrt(2/pi) x
// e^(-x/2) P(x).
__device__ __forceinline__ float core_p(float x)
{
#if CORE_M == 1
    return 1.0f;
#elif CORE_M == 2
    return 2.5f - 0.5f * x;
#else
    return 4.375f + x * (-1.75f + 0.125f * x);
#endif
}

__device__ __forceinline__ float core_q(float x)
{
#if CORE_M == 1
    return 1.0f;
#elif CORE_M == 2
    return 1.0f - 0.5f * x;
#else
    return 1.0f + x * (-1.125f + 0.125f * x);
#endif
}

// Beyond rho^2 = FAR_RHO2 the core is invisible in fp32: the Gaussian (CORE_M = 1) has there
// 1 - q(rho) < 2e-9 and a dq/dr term of K' 2e-8 of the singular one (rho = 6.63), so K = 1 / r^3
// and K'/r = -3 / r^5 to fp32 rounding; the cores of order 4 and 6 carry the polynomials Q and P
// that grow as x and x^2, so their threshold is rho^2 = 60 (there rho e^(-x/2) Q < 1e-9 and the
// dq/dr term < 5e-9 of the singular one for both). A core that needs another threshold defines
// its own before including this file.
#ifndef FAR_RHO2
#if CORE_M == 1
#define FAR_RHO2 44.0f
#else
#define FAR_RHO2 60.0f
#endif
#endif

// K and K'/r of one pair from r^2 and 1/sigma, on three branches by rho^2 (each lane takes its
// own: a warp whose lanes agree runs one branch; where they differ, the warp runs each branch
// taken, as many instructions as one evaluation of all three):
// * rho^2 >= FAR_RHO2: the singular kernel (above);
// * 1 <= rho^2 < FAR_RHO2: the closed form with the core's polynomials;
// * rho^2 < 1: the Taylor series in rho^2 (the closed form cancels there; the series is exact
//   to fp32 for rho^2 < 1 and gives the analytic limit at r = 0): K = c/s^3 sum a_k x^k,
//   K'/r = c/s^5 sum b_k x^k, x = rho^2, with e^(-x/2) P(x) = sum c_k x^k, a_k = c_k / (2k+3),
//   b_k = 2 (k+1) a_{k+1}.
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
        const float q = erff(rho * INV_SQRT2) - SQRT_2_OVER_PI * rho * g * core_q(rho2);
        const float rinv2 = rinv * rinv;
        k = q * rinv2 * rinv;
        // K'/r = (dq/dr - 3 q / r) / r^4, dq/dr = sqrt(2/pi) rho^2 g P / sigma
        kp_over_r =
            (SQRT_2_OVER_PI * rho2 * g * core_p(rho2) * is - 3.0f * q * rinv) * rinv2 * rinv2;
    } else {
        const float x = rho2;
#if CORE_M == 1
        const float fa = 1.0f / 3.0f + x * (-1.0f / 10.0f + x * (1.0f / 56.0f + x * (-1.0f / 432.0f
                 + x * (1.0f / 4224.0f + x * (-1.0f / 49920.0f + x * (1.0f / 691200.0f))))));
        const float fb = -1.0f / 5.0f + x * (1.0f / 14.0f + x * (-1.0f / 72.0f + x * (1.0f / 528.0f
                 + x * (-1.0f / 4992.0f + x * (1.0f / 57600.0f + x * (-1.0f / 783360.0f))))));
#elif CORE_M == 2
        const float fa = 8.333333333e-01f + x * (-3.500000000e-01f + x * (8.035714286e-02f
                 + x * (-1.273148148e-02f + x * (1.538825758e-03f + x * (-1.502403846e-04f
                 + x * (1.229745370e-05f + x * (-8.662319094e-07f + x * 5.353961075e-08f)))))));
        const float fb = -7.000000000e-01f + x * (3.214285714e-01f + x * (-7.638888889e-02f
                 + x * (1.231060606e-02f + x * (-1.502403846e-03f + x * (1.475694444e-04f
                 + x * (-1.212724673e-05f + x * (8.566337719e-07f + x * -5.305399069e-08f)))))));
#else
        const float fa = 1.458333333e+00f + x * (-7.875000000e-01f + x * (2.209821429e-01f
                 + x * (-4.137731481e-02f + x * (5.770596591e-03f + x * (-6.385216346e-04f
                 + x * (5.841290509e-05f + x * (-4.547717525e-06f + x * 3.078527618e-07f)))))));
        const float fb = -1.575000000e+00f + x * (8.839285714e-01f + x * (-2.482638889e-01f
                 + x * (4.616477273e-02f + x * (-6.385216346e-03f + x * (7.009548611e-04f
                 + x * (-6.366804534e-05f + x * (4.925644189e-06f + x * -3.315874418e-07f)))))));
#endif
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
