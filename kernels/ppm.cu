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
// Layouts: `mult` 3K floats per source cell (k * 3 + c); `loc` 3K doubles per target cell;
// `tasks` int4 (target cell, first entry, end entry, b as float bits); `entries` int4
// (source cell, t_centre - s_centre (periodic image applied) as float bits);
// `srad` per source cell the sphere radius a; `unit` the K unit vectors s_k as float4.

#ifndef PPM_K
#define PPM_K 144
#endif
#define PPM_THREADS ((PPM_K + 31) / 32 * 32)

extern "C" __global__ void __launch_bounds__(PPM_THREADS)
ppm_m2l(const float* __restrict__ mult, double* __restrict__ loc,
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
        const float* __restrict__ q = mult + (size_t)c * (3 * PPM_K);
        for (int i = threadIdx.x; i < PPM_K; i += blockDim.x) {
            const float4 u = su[i];
            sp[i] = make_float4(a * u.x, a * u.y, a * u.z, 0.f);
            sq[i] = make_float4(q[3 * i], q[3 * i + 1], q[3 * i + 2], 0.f);
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
