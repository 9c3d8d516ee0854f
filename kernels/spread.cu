// The Gaussian sums of the periodic re-interpolation as a type-1 non-uniform FFT on the device
// (crates/resident/src/spreading/; the formulas and the host twin:
// crates/method/src/reinterpolation/spreading/). The particles are binned by tile of the fine
// periodic m^3 grid (s_tile_cells, then the counting sort of resident.cu); one block per tile
// spreads their strengths with the "exponential of semicircle" kernel (Barnett, Magland & af
// Klinteberg, SIAM J. Sci. Comput. 41 (2019) C479) into a shared-memory copy of the tile and
// its halo of w points, then adds that copy to the grid (atomics: the halos overlap the
// neighbouring tiles); after cuFFT, s_fold divides every fine mode by the kernel's transform,
// multiplies it by the core's Gaussian (both in the per-axis factors d(q)) and adds it to the
// lattice mode it aliases to. The grid is float or double (the _f and _d kernels); positions,
// kernel arguments and the folded spectrum are double.
//
// Atomic additions in floating point depend on their order: results agree between runs to the
// round-off of the grid's precision, not bit for bit.

#include "common.cuh"

// Coordinate of x on the fine grid of m points (spacing hf from origin), wrapped into [0, m):
// the tile of a particle and its footprint come from this one function.
__device__ __forceinline__ double fine_coordinate(double x, double origin, double hf, int m) {
    double u = (x - origin) / hf;
    u -= (double)m * floor(u / (double)m);
    return (u >= 0.0 && u < (double)m) ? u : 0.0;  // a rounding up to m, or not finite
}

__device__ __forceinline__ int wrap_index(int i, int m) {
    i %= m;
    return i < 0 ? i + m : i;
}

// The ES kernel exp(beta (sqrt(1 - z^2) - 1)), zero for |z| > 1.
__device__ __forceinline__ double es_kernel(double z, double beta) {
    return fabs(z) > 1.0 ? 0.0 : exp(beta * (sqrt(1.0 - z * z) - 1.0));
}

// Tile (cube of `tile` fine points) of every particle, cell = (tx nt + ty) nt + tz with
// nt = m / tile, and the particles per tile.
extern "C" __global__ void s_tile_cells(const double* __restrict__ pos, int n, double origin,
                                        double hf, int m, int tile, int* __restrict__ cell,
                                        int* __restrict__ counts) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int nt = m / tile;
    int t[3];
    for (int c = 0; c < 3; ++c) {
        double u = fine_coordinate(pos[3 * i + c], origin, hf, m);
        t[c] = min((int)(u / (double)tile), nt - 1);
    }
    int cl = (t[0] * nt + t[1]) * nt + t[2];
    cell[i] = cl;
    atomicAdd(&counts[cl], 1);
}

// Particles whose kernel values a block holds at once.
#define SPREAD_CHUNK 32

// Shared memory of s_spread_tiles: the tile with its halo, P^3 values (P = tile + w), then per
// particle of a chunk 3 w kernel values, its strength and 3 start offsets.
//
// WINDOW = false: the whole periodic grid, nt^3 tiles, grid index (x m + y) m + z, every axis
// wrapped. WINDOW = true: a window of wl z planes from plane zs (crates/resident/src/spreading/
// slabs.rs): nt^2 ntz tiles (ntz = ceil(wl / tile)), z counted from zs (wrapped), grid index
// (j m + y) m + x with j the window plane; a window of fewer than m planes does not wrap, and
// the binning (s_window_cells) has checked that every footprint lies in it, so the halo's
// planes outside it hold zeros and are skipped; a window of all m planes wraps.
template <typename T, bool WINDOW>
__device__ void spread_tiles(const double4* __restrict__ sp, const double4* __restrict__ sa,
                             const int* __restrict__ starts, int m, int tile, int w, double beta,
                             double origin, double hf, int comp, int zs, int wl,
                             T* __restrict__ grid) {
    extern __shared__ double smem[];
    const int nt = m / tile, ntz = WINDOW ? (wl + tile - 1) / tile : nt;
    const int P = tile + w, P3 = P * P * P, H = w / 2;
    T* sh = reinterpret_cast<T*>(smem);
    T* kv = sh + P3;                         // SPREAD_CHUNK * 3 * w
    T* val = kv + SPREAD_CHUNK * 3 * w;      // SPREAD_CHUNK
    int* off = reinterpret_cast<int*>(val + SPREAD_CHUNK);  // SPREAD_CHUNK * 3
    const int b = blockIdx.x;
    const int t0[3] = {b / (nt * ntz), (b / ntz) % nt, b % ntz};
    for (int i = threadIdx.x; i < P3; i += blockDim.x) sh[i] = (T)0;
    const int p0 = starts[b], p1 = starts[b + 1];
    const double half = 0.5 * w;
    // the grid index of tile-relative point (a, bb, c) of the halo, or -1 outside a window
    auto index = [&](int a, int bb, int c) -> long long {
        const long long gx = wrap_index(t0[0] * tile + a - H, m);
        const long long gy = wrap_index(t0[1] * tile + bb - H, m);
        if (!WINDOW) return (gx * m + gy) * m + wrap_index(t0[2] * tile + c - H, m);
        int j = t0[2] * tile + c - H;
        if (wl == m) j = wrap_index(j, m);  // a window of the whole grid wraps as it
        return (j < 0 || j >= wl) ? -1 : ((long long)j * m + gy) * m + gx;
    };
    for (int base = p0; base < p1; base += SPREAD_CHUNK) {
        const int cnt = min(SPREAD_CHUNK, p1 - base);
        __syncthreads();  // the halo zeroed, or the previous chunk's values used
        for (int i = threadIdx.x; i < 3 * cnt; i += blockDim.x) {
            const int q = i / 3, c = i % 3;
            const double4 x = sp[base + q];
            const double xc = c == 0 ? x.x : (c == 1 ? x.y : x.z);
            double u = fine_coordinate(xc, origin, hf, m);
            if (WINDOW && c == 2) u = u >= (double)zs ? u - zs : u - zs + m;
            const double d = u - (double)(t0[c] * tile);
            const double l0 = ceil(d - half);
            off[i] = (int)l0 + H;
            for (int a = 0; a < w; ++a) kv[i * w + a] = (T)es_kernel((l0 + a - d) / half, beta);
            if (c == 0) {
                const double4 s = sa[base + q];
                val[q] = (T)(comp == 0 ? s.x : (comp == 1 ? s.y : s.z));
            }
        }
        __syncthreads();
        // one thread per (particle, x offset, y offset): a run of w points along z
        for (int i = threadIdx.x; i < cnt * w * w; i += blockDim.x) {
            const int q = i / (w * w), a = (i / w) % w, bb = i % w;
            const T v = val[q] * kv[(3 * q) * w + a] * kv[(3 * q + 1) * w + bb];
            const T* kz = kv + (3 * q + 2) * w;
            const int ox = off[3 * q] + a, oy = off[3 * q + 1] + bb, oz = off[3 * q + 2];
            if (ox >= 0 && ox < P && oy >= 0 && oy < P && oz >= 0 && oz + w <= P) {
                T* row = sh + (ox * P + oy) * P + oz;
                for (int c = 0; c < w; ++c) atomicAdd(row + c, v * kz[c]);
            } else {
                // beyond the halo (not reached: the tile and the footprint come from the same
                // coordinate), straight into the grid
                for (int c = 0; c < w; ++c) {
                    const long long g = index(ox, oy, oz + c);
                    if (g >= 0) atomicAdd(grid + g, v * kz[c]);
                }
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < P3; i += blockDim.x) {
        const T v = sh[i];
        if (v == (T)0) continue;
        const long long g = index(i / (P * P), (i / P) % P, i % P);
        if (g >= 0) atomicAdd(grid + g, v);
    }
}

// grid (m^3, z fastest) += the spread of component `comp` of the strengths sa of the particles
// sp binned by tile (starts: m^3 / tile^3 + 1 offsets); one block per tile, dynamic shared
// memory shared_bytes(tile, w, precision) (crates/resident/src/spreading/mod.rs).
extern "C" __global__ void s_spread_f(const double4* __restrict__ sp,
                                      const double4* __restrict__ sa,
                                      const int* __restrict__ starts, int m, int tile, int w,
                                      double beta, double origin, double hf, int comp,
                                      float* __restrict__ grid) {
    spread_tiles<float, false>(sp, sa, starts, m, tile, w, beta, origin, hf, comp, 0, m, grid);
}

extern "C" __global__ void s_spread_d(const double4* __restrict__ sp,
                                      const double4* __restrict__ sa,
                                      const int* __restrict__ starts, int m, int tile, int w,
                                      double beta, double origin, double hf, int comp,
                                      double* __restrict__ grid) {
    spread_tiles<double, false>(sp, sa, starts, m, tile, w, beta, origin, hf, comp, 0, m, grid);
}

// The window's tile of every particle, cell = (tx nt + ty) ntz + tz (nt = m / tile, ntz =
// ceil(wl / tile), z counted from plane zs, wrapped), the particles per tile, and in *bad the
// number of particles whose footprint of w planes is not inside the window's wl planes.
extern "C" __global__ void s_window_cells(const double* __restrict__ pos, int n, double origin,
                                          double hf, int m, int tile, int w, int zs, int wl,
                                          int* __restrict__ cell, int* __restrict__ counts,
                                          int* __restrict__ bad) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int nt = m / tile, ntz = (wl + tile - 1) / tile;
    int t[3];
    for (int c = 0; c < 3; ++c) {
        double u = fine_coordinate(pos[3 * i + c], origin, hf, m);
        if (c == 2) {
            u = u >= (double)zs ? u - zs : u - zs + m;
            const double l0 = ceil(u - 0.5 * w);
            if (wl < m && (l0 < 0.0 || l0 + w > (double)wl)) atomicAdd(bad, 1);
        }
        t[c] = min((int)(u / (double)tile), (c == 2 ? ntz : nt) - 1);
    }
    int cl = (t[0] * nt + t[1]) * ntz + t[2];
    cell[i] = cl;
    atomicAdd(&counts[cl], 1);
}

// The window grid (wl planes [j][y][x] of doubles) += the spread of component `comp`: the
// blocks of s_spread_d over the window's nt^2 ntz tiles (binned by s_window_cells).
extern "C" __global__ void s_spread_window_d(const double4* __restrict__ sp,
                                             const double4* __restrict__ sa,
                                             const int* __restrict__ starts, int m, int tile,
                                             int w, double beta, double origin, double hf,
                                             int comp, int zs, int wl,
                                             double* __restrict__ grid) {
    spread_tiles<double, true>(sp, sa, starts, m, tile, w, beta, origin, hf, comp, zs, wl, grid);
}

// floor(a / b) for b > 0.
__device__ __forceinline__ int floor_div(int a, int b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// out[3 t] = W(k) = sum over the fine modes q = k mod n, -m/2 < q <= m/2, of
// d(qx) d(qy) d(qz) B(q), B the half spectrum (m, m, m/2 + 1) of the spread grid (a mode with
// qz < 0 the conjugate of -q), for every mode k of the lattice's pencil spectrum on one rank
// (the slab transforms' layout with planes of constant z: t = (kz n + ky) (n/2 + 1) + kx, the
// half axis x, three components interleaved: the caller offsets `out` to its component), one
// thread each; d holds m factors indexed by q mod m.
template <typename T2>
__device__ void fold_modes(const T2* __restrict__ spec, int m, const double* __restrict__ d,
                           int n, double2* __restrict__ out) {
    const int nh = n / 2 + 1, mh = m / 2 + 1, half = m / 2;
    const long long clen = (long long)n * n * nh;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= clen) return;
    const int k[3] = {(int)(t % nh), (int)((t / nh) % n), (int)(t / ((long long)n * nh))};
    int jlo[3], jhi[3];
    for (int c = 0; c < 3; ++c) {
        jlo[c] = floor_div(-half - k[c], n) + 1;
        jhi[c] = floor_div(half - k[c], n);
    }
    double sr = 0.0, si = 0.0;
    for (int jx = jlo[0]; jx <= jhi[0]; ++jx) {
        const int qx = k[0] + jx * n;
        const double dx = d[wrap_index(qx, m)];
        for (int jy = jlo[1]; jy <= jhi[1]; ++jy) {
            const int qy = k[1] + jy * n;
            const double dxy = dx * d[wrap_index(qy, m)];
            for (int jz = jlo[2]; jz <= jhi[2]; ++jz) {
                const int qz = k[2] + jz * n;
                const double f = dxy * d[wrap_index(qz, m)];
                T2 v;
                double sign = 1.0;
                if (qz >= 0) {
                    v = spec[((long long)wrap_index(qx, m) * m + wrap_index(qy, m)) * mh + qz];
                } else {
                    v = spec[((long long)wrap_index(-qx, m) * m + wrap_index(-qy, m)) * mh - qz];
                    sign = -1.0;
                }
                sr += f * (double)v.x;
                si += f * sign * (double)v.y;
            }
        }
    }
    out[3 * t] = make_double2(sr, si);
}

extern "C" __global__ void s_fold_f(const float2* __restrict__ spec, int m,
                                    const double* __restrict__ d, int n,
                                    double2* __restrict__ out) {
    fold_modes<float2>(spec, m, d, n, out);
}

extern "C" __global__ void s_fold_d(const double2* __restrict__ spec, int m,
                                    const double* __restrict__ d, int n,
                                    double2* __restrict__ out) {
    fold_modes<double2>(spec, m, d, n, out);
}

// The alias range of lattice mode k: jlo..=jhi such that q = k + j n lies in (-m/2, m/2].
__device__ __forceinline__ void alias_range(int k, int n, int m, int* jlo, int* jhi) {
    *jlo = floor_div(-(m / 2) - k, n) + 1;
    *jhi = floor_div(m / 2 - k, n);
}

// Over slabs (crates/resident/src/spreading/slabs.rs), per own fine plane i: out[3 t + comp],
// t = (i n + ky) (n/2 + 1) + kx (the slab spectrum of the fine layout, three components
// interleaved) = sum over the fine modes q = k mod n in (-m/2, m/2] of d(qx) d(qy) B_i(qx, qy),
// B_i the plane's 2-D half spectrum (m rows of m/2 + 1, half axis x; a mode with qx < 0 the
// conjugate of (-qx, -qy)). One thread per (plane, ky, kx).
extern "C" __global__ void s_fold_xy_d(const double2* __restrict__ spec, int planes, int m,
                                       const double* __restrict__ d, int n, int comp,
                                       double2* __restrict__ out) {
    const int nh = n / 2 + 1, mh = m / 2 + 1;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)planes * n * nh) return;
    const int kx = (int)(t % nh), ky = (int)((t / nh) % n);
    const long long i = t / ((long long)n * nh);
    int xlo, xhi, ylo, yhi;
    alias_range(kx, n, m, &xlo, &xhi);
    alias_range(ky, n, m, &ylo, &yhi);
    double sr = 0.0, si = 0.0;
    for (int jy = ylo; jy <= yhi; ++jy) {
        const int qy = ky + jy * n;
        const double dy = d[wrap_index(qy, m)];
        for (int jx = xlo; jx <= xhi; ++jx) {
            const int qx = kx + jx * n;
            const double f = dy * d[wrap_index(qx, m)];
            if (qx >= 0) {
                const double2 v = spec[(i * m + wrap_index(qy, m)) * mh + qx];
                sr += f * v.x;
                si += f * v.y;
            } else {
                const double2 v = spec[(i * m + wrap_index(-qy, m)) * mh - qx];
                sr += f * v.x;
                si -= f * v.y;
            }
        }
    }
    out[3 * t + comp] = make_double2(sr, si);
}

// Over slabs, after the transpose and the transforms along z: out[kz cols + c] = sum over the
// fine modes qz = kz mod n in (-m/2, m/2] of d(qz) fine[(qz mod m) cols + c], for the cols
// columns (three components of each (ky, kx) of the rank's pencil) and every lattice kz < n:
// the lattice's pencil spectrum. One thread per (kz, column).
extern "C" __global__ void s_fold_z(const double2* __restrict__ fine, int m, long long cols,
                                    const double* __restrict__ d, int n,
                                    double2* __restrict__ out) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)n * cols) return;
    const int kz = (int)(t / cols);
    const long long c = t % cols;
    int lo, hi;
    alias_range(kz, n, m, &lo, &hi);
    double sr = 0.0, si = 0.0;
    for (int j = lo; j <= hi; ++j) {
        const int q = wrap_index(kz + j * n, m);
        const double2 v = fine[(long long)q * cols + c];
        sr += d[q] * v.x;
        si += d[q] * v.y;
    }
    out[t] = make_double2(sr, si);
}

// Per block, the smallest and largest of x[0..n) (grid-stride), into part[2 b], part[2 b + 1];
// blockDim.x = RANGE_THREADS.
#define RANGE_THREADS 256
extern "C" __global__ void s_range(const double* __restrict__ x, int n,
                                   double* __restrict__ part) {
    __shared__ double lo[RANGE_THREADS], hi[RANGE_THREADS];
    const double inf = __longlong_as_double(0x7ff0000000000000LL);
    double a = inf, b = -inf;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        a = fmin(a, x[i]);
        b = fmax(b, x[i]);
    }
    lo[threadIdx.x] = a;
    hi[threadIdx.x] = b;
    __syncthreads();
    block_tree_reduce(RANGE_THREADS, [&](unsigned d, unsigned s) {
        lo[d] = fmin(lo[d], lo[s]);
        hi[d] = fmax(hi[d], hi[s]);
    });
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = lo[0];
        part[2 * blockIdx.x + 1] = hi[0];
    }
}
