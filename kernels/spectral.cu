// Double-precision kernels of the pseudo-spectral Navier-Stokes solver (crates/spectral/src/gpu).
// One RK4 stage in Fourier space, the same algorithm and the same arithmetic as the CPU solver
// (crates/spectral/src/solver.rs); the FFTs are cuFFT D2Z / Z2D, called from the host.
//
// Layouts (identical to the CPU ones, so fields are copied without reordering):
//   spectral field on the n grid: 3 components one after the other, each n*n*nh complex
//     (double2), index (ix*n + iy)*nh + iz, nh = n/2 + 1;
//   factor arrays: n*n*nh doubles, same index;
//   work: 6 in-place transform buffers of mclen = m*m*mh complex each (mh = m/2 + 1), one after
//     the other. In spectral space entry (px*m + py)*mh + pz; in physical space (after the
//     in-place Z2D) the reals of grid point (i, j, k) sit at (i*m + j)*(2*mh) + k (cuFFT's padded
//     in-place layout). Buffers 0..2 hold u, 3..5 omega; u x omega overwrites u.
//
// Every product and sum that the CPU solver also computes goes through __dmul_rn / __dadd_rn /
// __dsub_rn / __ddiv_rn, which are never contracted into FMAs: these kernels give bit-for-bit
// the CPU's elementwise results (only the FFTs, and exp() in the factors, round differently).
// All loops are grid-stride loops over the fastest index, so accesses are coalesced.

typedef unsigned long long u64;

__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double dvd(double a, double b) { return __ddiv_rn(a, b); }

// Signed wavenumber of index i on an axis of length m (m even): i < m/2 ? i : i - m.
__device__ __forceinline__ long long wavenumber(long long i, long long m)
{
    return i < m / 2 ? i : i - m;
}

// Index of signed wavenumber k on an axis of length m: k mod m in [0, m).
__device__ __forceinline__ long long wrap(long long k, long long m)
{
    return k < 0 ? k + m : k;
}

__device__ __forceinline__ long long absll(long long k) { return k < 0 ? -k : k; }

// i * (a * fa - b * fb) for complex a, b and real fa, fb.
__device__ __forceinline__ double2 i_times_diff(double2 a, double fa, double2 b, double fb)
{
    double re = sub(mul(a.x, fa), mul(b.x, fb));
    double im = sub(mul(a.y, fa), mul(b.y, fb));
    return make_double2(-im, re);
}

// Zero padding from the n grid to the m grid (m = 3n/2 rounded up to even, or m = n for the 2/3
// rule) of the velocity u and of the vorticity i k x u, keeping only |kx|, |ky|, kz <= kcut.
// u: 3 components of nclen = n*n*nh complex. work: 6 buffers of mclen complex.
extern "C" __global__ void pad_velocity_vorticity(const double2* __restrict__ u, double2* __restrict__ work,
                                                  int n, int m, int kcut)
{
    const long long nh = n / 2 + 1, mh = m / 2 + 1;
    const long long nclen = (long long)n * n * nh;
    const long long mclen = (long long)m * m * mh;
    const long long lim = (kcut + 1 < mh) ? kcut + 1 : mh;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < mclen;
         idx += (long long)gridDim.x * blockDim.x) {
        long long pz = idx % mh;
        long long row = idx / mh;
        long long py = row % m;
        long long px = row / m;
        long long kx = wavenumber(px, m), ky = wavenumber(py, m);
        if (absll(kx) > kcut || absll(ky) > kcut || pz >= lim) {
            double2 z = make_double2(0.0, 0.0);
            for (int c = 0; c < 6; c++) work[c * mclen + idx] = z;
            continue;
        }
        long long ix = wrap(kx, n), iy = wrap(ky, n);
        long long src = (ix * n + iy) * nh + pz;
        double2 a = u[src], b = u[nclen + src], c = u[2 * nclen + src];
        double fx = (double)kx, fy = (double)ky, fz = (double)pz;
        work[idx] = a;
        work[mclen + idx] = b;
        work[2 * mclen + idx] = c;
        work[3 * mclen + idx] = i_times_diff(c, fy, b, fz);
        work[4 * mclen + idx] = i_times_diff(a, fz, c, fx);
        work[5 * mclen + idx] = i_times_diff(b, fx, a, fy);
    }
}

// u x omega on the m^3 product grid, in place of u (buffers 0..2), and max(|u|+|v|+|w|) over the
// grid (a non-finite sum counts as +inf). The maximum of non-negative doubles is their maximum as
// unsigned 64-bit patterns, so one atomicMax per block on *umax_bits (zeroed by the host) gives an
// order-independent, deterministic result. Launch with 256 threads per block.
extern "C" __global__ void cross_umax(double* __restrict__ work, int m, u64* __restrict__ umax_bits)
{
    const long long mh = m / 2 + 1;
    const long long rs = 2 * mh;              // reals per row in the in-place layout
    const long long stride = 2 * (long long)m * m * mh; // reals per buffer
    const long long total = (long long)m * m * m;
    double lmax = 0.0;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        long long k = idx % m;
        long long off = (idx / m) * rs + k;
        double a = work[off], b = work[stride + off], c = work[2 * stride + off];
        double wx = work[3 * stride + off], wy = work[4 * stride + off], wz = work[5 * stride + off];
        work[off] = sub(mul(b, wz), mul(c, wy));
        work[stride + off] = sub(mul(c, wx), mul(a, wz));
        work[2 * stride + off] = sub(mul(a, wy), mul(b, wx));
        double s = add(add(fabs(a), fabs(b)), fabs(c));
        if (!isfinite(s)) s = __longlong_as_double(0x7ff0000000000000LL);
        lmax = fmax(lmax, s);
    }
    __shared__ double red[32];
    for (int o = 16; o > 0; o >>= 1) lmax = fmax(lmax, __shfl_down_sync(0xffffffffu, lmax, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = lmax;
    __syncthreads();
    if (warp == 0) {
        int nw = (blockDim.x + 31) >> 5;
        lmax = lane < nw ? red[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) lmax = fmax(lmax, __shfl_down_sync(0xffffffffu, lmax, o));
        if (lane == 0) atomicMax(umax_bits, (u64)__double_as_longlong(lmax));
    }
}

// Truncation of the forward-transformed product (buffers 0..2, unnormalised) back to the n grid,
// times scale = 1/m^3, then the projection P = I - k k / k^2; modes with any |k_i| > kcut and the
// mean are zero. rhs: 3 components of n*n*nh complex.
extern "C" __global__ void unpad_project(const double2* __restrict__ work, double2* __restrict__ rhs,
                                         int n, int m, int kcut, double scale)
{
    const long long nh = n / 2 + 1, mh = m / 2 + 1;
    const long long nclen = (long long)n * n * nh;
    const long long mclen = (long long)m * m * mh;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < nclen;
         idx += (long long)gridDim.x * blockDim.x) {
        long long iz = idx % nh;
        long long row = idx / nh;
        long long iy = row % n;
        long long ix = row / n;
        long long kx = wavenumber(ix, n), ky = wavenumber(iy, n), kz = iz;
        if (absll(kx) > kcut || absll(ky) > kcut || kz > kcut || (kx == 0 && ky == 0 && kz == 0)) {
            double2 z = make_double2(0.0, 0.0);
            rhs[idx] = z;
            rhs[nclen + idx] = z;
            rhs[2 * nclen + idx] = z;
            continue;
        }
        long long p = (wrap(kx, m) * m + wrap(ky, m)) * mh + iz;
        double2 a = work[p], b = work[mclen + p], c = work[2 * mclen + p];
        a = make_double2(mul(a.x, scale), mul(a.y, scale));
        b = make_double2(mul(b.x, scale), mul(b.y, scale));
        c = make_double2(mul(c.x, scale), mul(c.y, scale));
        double fx = (double)kx, fy = (double)ky, fz = (double)kz;
        double k2 = add(add(mul(fx, fx), mul(fy, fy)), mul(fz, fz));
        double dx = dvd(add(add(mul(a.x, fx), mul(b.x, fy)), mul(c.x, fz)), k2);
        double dy = dvd(add(add(mul(a.y, fx), mul(b.y, fy)), mul(c.y, fz)), k2);
        rhs[idx] = make_double2(sub(a.x, mul(dx, fx)), sub(a.y, mul(dy, fx)));
        rhs[nclen + idx] = make_double2(sub(b.x, mul(dx, fy)), sub(b.y, mul(dy, fy)));
        rhs[2 * nclen + idx] = make_double2(sub(c.x, mul(dx, fz)), sub(c.y, mul(dy, fz)));
    }
}

// 2/3-rule (or any) truncation with projection of a spectral field in place: modes with any
// |k_i| > kcut and the mean are zeroed, the others projected onto k . v = 0.
extern "C" __global__ void project_truncate(double2* __restrict__ v, int n, int kcut)
{
    const long long nh = n / 2 + 1;
    const long long nclen = (long long)n * n * nh;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < nclen;
         idx += (long long)gridDim.x * blockDim.x) {
        long long iz = idx % nh;
        long long row = idx / nh;
        long long kx = wavenumber(row / n, n), ky = wavenumber(row % n, n), kz = iz;
        if (absll(kx) > kcut || absll(ky) > kcut || kz > kcut || (kx == 0 && ky == 0 && kz == 0)) {
            double2 z = make_double2(0.0, 0.0);
            v[idx] = z;
            v[nclen + idx] = z;
            v[2 * nclen + idx] = z;
            continue;
        }
        double2 a = v[idx], b = v[nclen + idx], c = v[2 * nclen + idx];
        double fx = (double)kx, fy = (double)ky, fz = (double)kz;
        double k2 = add(add(mul(fx, fx), mul(fy, fy)), mul(fz, fz));
        double dx = dvd(add(add(mul(a.x, fx), mul(b.x, fy)), mul(c.x, fz)), k2);
        double dy = dvd(add(add(mul(a.y, fx), mul(b.y, fy)), mul(c.y, fz)), k2);
        v[idx] = make_double2(sub(a.x, mul(dx, fx)), sub(a.y, mul(dy, fx)));
        v[nclen + idx] = make_double2(sub(b.x, mul(dx, fy)), sub(b.y, mul(dy, fy)));
        v[2 * nclen + idx] = make_double2(sub(c.x, mul(dx, fz)), sub(c.y, mul(dy, fz)));
    }
}

// Integrating factors e_half = exp(-nu k^2 dt / 2), e_full = exp(-nu k^2 dt) on the n grid.
extern "C" __global__ void factors(double* __restrict__ e_half, double* __restrict__ e_full, int n,
                                   double nu, double dt)
{
    const long long nh = n / 2 + 1;
    const long long nclen = (long long)n * n * nh;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < nclen;
         idx += (long long)gridDim.x * blockDim.x) {
        long long row = idx / nh;
        double kx = (double)wavenumber(row / n, n), ky = (double)wavenumber(row % n, n);
        double kz = (double)(idx % nh);
        double k2 = add(add(mul(kx, kx), mul(ky, ky)), mul(kz, kz));
        double e = mul(mul(-nu, k2), dt);
        e_half[idx] = exp(mul(e, 0.5));
        e_full[idx] = exp(e);
    }
}

// The RK4 combinations of the integrating-factor (Lawson) scheme, on 3 components of nclen
// complex; eh, ef are the factors (nclen doubles), k is the right-hand side of the stage just
// computed, h the step, h2 = h/2 and h6 = h/6 (computed on the host as the CPU solver does).
//   stage 1: acc = (u + h/6 k1) ef;     st = (u + h/2 k1) eh
//   stage 2: acc += (eh h / 3) k2;      st = u eh + h/2 k2
//   stage 3: acc += (eh h / 3) k3;      st = u ef + (eh h) k3
//   stage 4: u = acc + h/6 k4, and *nonfinite = 1 if a value of u is not finite.
extern "C" __global__ void rk_combine(int stage, double2* __restrict__ u, const double2* __restrict__ k,
                                      double2* __restrict__ acc, double2* __restrict__ st,
                                      const double* __restrict__ eh, const double* __restrict__ ef,
                                      long long nclen, double h, double h2, double h6,
                                      u64* __restrict__ nonfinite)
{
    const long long total = 3 * nclen;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        long long i = idx % nclen;
        double2 kk = k[idx];
        if (stage == 1) {
            double2 uu = u[idx];
            double f = ef[i], g = eh[i];
            acc[idx] = make_double2(mul(add(uu.x, mul(kk.x, h6)), f), mul(add(uu.y, mul(kk.y, h6)), f));
            st[idx] = make_double2(mul(add(uu.x, mul(kk.x, h2)), g), mul(add(uu.y, mul(kk.y, h2)), g));
        } else if (stage == 2) {
            double2 uu = u[idx], a = acc[idx];
            double g = eh[i];
            double c = dvd(mul(g, h), 3.0);
            acc[idx] = make_double2(add(a.x, mul(kk.x, c)), add(a.y, mul(kk.y, c)));
            st[idx] = make_double2(add(mul(uu.x, g), mul(kk.x, h2)), add(mul(uu.y, g), mul(kk.y, h2)));
        } else if (stage == 3) {
            double2 uu = u[idx], a = acc[idx];
            double f = ef[i], g = eh[i];
            double c = dvd(mul(g, h), 3.0);
            double gh = mul(g, h);
            acc[idx] = make_double2(add(a.x, mul(kk.x, c)), add(a.y, mul(kk.y, c)));
            st[idx] = make_double2(add(mul(uu.x, f), mul(kk.x, gh)), add(mul(uu.y, f), mul(kk.y, gh)));
        } else {
            double2 a = acc[idx];
            double2 v = make_double2(add(a.x, mul(kk.x, h6)), add(a.y, mul(kk.y, h6)));
            u[idx] = v;
            if (!isfinite(v.x) || !isfinite(v.y)) *nonfinite = 1ull;
        }
    }
}
