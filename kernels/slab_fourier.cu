// The pointwise Fourier-space steps of the slab-decomposed transform (crates/resident/src/
// slab_fourier), on one rank's pencil spectrum (one rank: the whole spectrum): the RBF lattice
// solve, the Biot-Savart law and the shell spectrum.
//
// Pencil spectrum of a rank: complex numbers [ks][km - m0][kf][3] (the three components
// interleaved), ks = 0..n along the slab axis s, km = m0..m0+nq along the middle axis m,
// kf = 0..n/2 the half axis f; element t = (ks nq + kml) nh + kf holds 3 complex numbers.
// slab_z = 0: (s, m, f) = (x, y, z); slab_z = 1: (s, m, f) = (z, y, x). The host twin is
// crates/resident/src/slab_fourier/host.rs.

#include "common.cuh"

#define SF_THREADS 256

struct PencilIndex {
    int s, m, f;
};

__device__ __forceinline__ PencilIndex pencil_index(long long t, int n, int nq, int m0) {
    int nh = n / 2 + 1;
    PencilIndex p;
    p.f = (int)(t % nh);
    p.m = m0 + (int)((t / nh) % nq);
    p.s = (int)(t / ((long long)nh * nq));
    return p;
}

// Wavenumber of index i: i <= n/2 positive (the solve), or i < n/2 positive (the spectrum,
// `strict`).
__device__ __forceinline__ double sf_wavenumber(int i, int n, bool strict) {
    bool pos = strict ? (i < n / 2) : (i <= n / 2);
    return pos ? (double)i : (double)(i - n);
}

// The physical wavevector (kx, ky, kz) of a pencil element.
__device__ __forceinline__ void sf_wavevector(PencilIndex p, int n, int slab_z, bool strict,
                                              double k[3]) {
    double ks = sf_wavenumber(p.s, n, strict), km = sf_wavenumber(p.m, n, strict);
    double kf = (double)p.f;
    k[0] = slab_z ? kf : ks;
    k[1] = km;
    k[2] = slab_z ? ks : kf;
}

// beta_hat = omega_hat * scale * inv_eig[ks] inv_eig[km] inv_eig[kf], scale = 1/(c n^3).
extern "C" __global__ void sf_solve(double2* __restrict__ spec, int n, int nq, int m0,
                                    long long count, const double* __restrict__ inv_eig,
                                    double scale) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= count) return;
    PencilIndex p = pencil_index(t, n, nq, m0);
    double g = scale * inv_eig[p.s] * inv_eig[p.m] * inv_eig[p.f];
    for (int c = 0; c < 3; ++c) {
        double2 v = spec[3 * t + c];
        v.x *= g;
        v.y *= g;
        spec[3 * t + c] = v;
    }
}

// u_hat = i (L / 2 pi) m x omega_hat / |m|^2 * scale (integer wavevector m, inv_kscale =
// L / 2 pi, scale = 1/n^3); the mean and the Nyquist planes (even n) set to zero.
extern "C" __global__ void sf_biot_savart(double2* __restrict__ spec, int n, int nq, int m0,
                                          long long count, int slab_z, double inv_kscale,
                                          double scale) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= count) return;
    PencilIndex p = pencil_index(t, n, nq, m0);
    double k[3];
    sf_wavevector(p, n, slab_z, false, k);
    bool nyq = (n % 2 == 0) && (p.s == n / 2 || p.m == n / 2 || p.f == n / 2);
    double k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
    double2 w0 = spec[3 * t], w1 = spec[3 * t + 1], w2 = spec[3 * t + 2];
    double2 u0, u1, u2;
    if (k2 == 0.0 || nyq) {
        u0 = u1 = u2 = make_double2(0.0, 0.0);
    } else {
        double g = scale * inv_kscale / k2;
        // (k x w) with complex w; times i: (re, im) -> (-im, re)
        double c0r = k[1] * w2.x - k[2] * w1.x, c0i = k[1] * w2.y - k[2] * w1.y;
        double c1r = k[2] * w0.x - k[0] * w2.x, c1i = k[2] * w0.y - k[0] * w2.y;
        double c2r = k[0] * w1.x - k[1] * w0.x, c2i = k[0] * w1.y - k[1] * w0.y;
        u0 = make_double2(-c0i * g, c0r * g);
        u1 = make_double2(-c1i * g, c1r * g);
        u2 = make_double2(-c2i * g, c2r * g);
    }
    spec[3 * t] = u0;
    spec[3 * t + 1] = u1;
    spec[3 * t + 2] = u2;
}

// Per-block partial shell spectrum, energy and enstrophy of a normalised velocity pencil
// spectrum (the conventions of vortex_spectral::diagnostics: weight 1 on kf = 0 and kf = n/2,
// 2 elsewhere; shell round(|k|) by shared-memory atomics; E and Z by a tree in a fixed order).
// partial[b] holds nshell shells, then E, then Z; grid-stride over the elements. blockDim.x
// must be SF_THREADS (a power of two); dynamic shared memory nshell doubles.
extern "C" __global__ void sf_spectrum_partial(const double2* __restrict__ spec, int n, int nq,
                                               int m0, long long count, int slab_z, int nshell,
                                               double* __restrict__ partial) {
    extern __shared__ double shells[];
    __shared__ double se[SF_THREADS], sz[SF_THREADS];
    for (int i = threadIdx.x; i < nshell; i += blockDim.x) shells[i] = 0.0;
    __syncthreads();
    double e_acc = 0.0, z_acc = 0.0;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < count;
         t += (long long)gridDim.x * blockDim.x) {
        PencilIndex p = pencil_index(t, n, nq, m0);
        double k[3];
        sf_wavevector(p, n, slab_z, true, k);
        double w = (p.f == 0 || p.f == n / 2) ? 1.0 : 2.0;
        double2 a = spec[3 * t], b = spec[3 * t + 1], c = spec[3 * t + 2];
        double e = a.x * a.x + a.y * a.y + b.x * b.x + b.y * b.y + c.x * c.x + c.y * c.y;
        double wxr = k[1] * c.x - k[2] * b.x, wxi = k[1] * c.y - k[2] * b.y;
        double wyr = k[2] * a.x - k[0] * c.x, wyi = k[2] * a.y - k[0] * c.y;
        double wzr = k[0] * b.x - k[1] * a.x, wzi = k[0] * b.y - k[1] * a.y;
        double z = wxr * wxr + wxi * wxi + wyr * wyr + wyi * wyi + wzr * wzr + wzi * wzi;
        int shell = (int)rint(sqrt(k[0] * k[0] + k[1] * k[1] + k[2] * k[2]));
        if (shell < nshell) atomicAdd(&shells[shell], 0.5 * w * e);
        e_acc += 0.5 * w * e;
        z_acc += 0.5 * w * z;
    }
    se[threadIdx.x] = e_acc;
    sz[threadIdx.x] = z_acc;
    __syncthreads();
    block_tree_reduce(SF_THREADS, [&](unsigned d, unsigned s) {
        se[d] += se[s];
        sz[d] += sz[s];
    });
    double* out = partial + (long long)blockIdx.x * (nshell + 2);
    for (int i = threadIdx.x; i < nshell; i += blockDim.x) out[i] = shells[i];
    if (threadIdx.x == 0) {
        out[nshell] = se[0];
        out[nshell + 1] = sz[0];
    }
}

// The strided blocks of the slab transposes (crates/resident/src/slab_fourier: SlabLayout::
// slab_rows): count = rows * width complex numbers, row r of the block from
// src[r src_stride + j] to dst[r dst_stride + j], j < width. Packs the slab spectrum's block
// of one pencil rank into its contiguous message (forward) and back (inverse).
extern "C" __global__ void sf_copy_rows(double2* __restrict__ dst, long long dst_stride,
                                        const double2* __restrict__ src, long long src_stride,
                                        long long width, long long count) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= count) return;
    long long r = t / width, j = t - r * width;
    dst[r * dst_stride + j] = src[r * src_stride + j];
}
