// The vortex-method time step on the device (crates/resident): the particle state in f64
// (positions, strengths, core radii, the AB2 history, all [N][3] or [N]), its updates, the
// deterministic reductions the method needs, the packing for the uniform-grid FMM, and the
// lattice operations of the RBF re-interpolation and of the diagnostics (binning of the
// particles into lattice cells, truncated Gaussian sums at lattice points, the Fourier
// factors of the lattice solve and of the Biot-Savart law).
//
// Every sum is reduced in a fixed order (per-block tree, then one block over the blocks in
// block order), so results do not depend on scheduling: the block-wide tree and scan are those
// of common.cuh. Host emulations of the binning and of the lattice sums are in
// crates/resident/src/emulate.rs.

#include "common.cuh"

#define RTHREADS 256
#define RED_THREADS 128
#define RED_PER_THREAD 8
// slots of r_moments: 0-2 sum a, 3 sum |a_c|, 4-12 D[c][l] = sum a_c x_l (wrapped x),
// 13-15 sum x cross a, 16-18 sum |a| x, 19 sum |a|, 20 non-finite count,
// 21 max sigma, 22 max |a|, 23 max sigma / sigma0, 24-26 max x, 27-29 max -x
#define NSUM 21
#define NEG_INF (-__longlong_as_double(0x7ff0000000000000LL))
#define NSLOT 30

// Slot q of two partial moments combined: a sum for q < NSUM, a maximum above.
__device__ __forceinline__ double moment_combine(int q, double acc, double o) {
    return (q < NSUM) ? acc + o : fmax(acc, o);
}

// The moments v[NSLOT] of every thread of the block combined (a tree, in a fixed order) into
// sh[q][0]; the block synchronized after.
__device__ __forceinline__ void block_moments(const double* v, double (*sh)[RED_THREADS]) {
    for (int q = 0; q < NSLOT; ++q) sh[q][threadIdx.x] = v[q];
    __syncthreads();
    block_tree_reduce(RED_THREADS, [&](unsigned d, unsigned s) {
        for (int q = 0; q < NSLOT; ++q) {
            double o = sh[q][s];
            sh[q][d] = moment_combine(q, sh[q][d], o);
        }
    });
}

__device__ __forceinline__ double wrap1(double c, double l) {
    double w = c - l * floor(c / l + 0.5);
    return (w >= 0.5 * l) ? w - l : w;
}

// Per-block partial moments of the particles (slots above), block b covers
// [b * RED_THREADS * RED_PER_THREAD, ...). `box_length` > 0: positions wrapped for the dipole.
extern "C" __global__ void r_moments(const double* __restrict__ pos, const double* __restrict__ a,
                                     const double* __restrict__ sigma,
                                     const double* __restrict__ sigma0, int n, double box_length,
                                     double* __restrict__ partial) {
    __shared__ double sh[NSLOT][RED_THREADS];
    double v[NSLOT];
    for (int q = 0; q < NSLOT; ++q) v[q] = (q < NSUM) ? 0.0 : NEG_INF;
    int base = blockIdx.x * RED_THREADS * RED_PER_THREAD + threadIdx.x;
    for (int j = 0; j < RED_PER_THREAD; ++j) {
        int i = base + j * RED_THREADS;
        if (i >= n) break;
        double x[3], w[3], al[3];
        for (int c = 0; c < 3; ++c) {
            x[c] = pos[3 * i + c];
            al[c] = a[3 * i + c];
            w[c] = box_length > 0.0 ? wrap1(x[c], box_length) : x[c];
        }
        double s = sigma[i], s0 = sigma0[i];
        bool finite = isfinite(s) && s > 0.0;
        for (int c = 0; c < 3; ++c) finite = finite && isfinite(x[c]) && isfinite(al[c]);
        double na = sqrt(al[0] * al[0] + al[1] * al[1] + al[2] * al[2]);
        for (int c = 0; c < 3; ++c) {
            v[c] += al[c];
            v[3] += fabs(al[c]);
            for (int l = 0; l < 3; ++l) v[4 + 3 * c + l] += al[c] * w[l];
            v[16 + c] += na * x[c];
        }
        v[13] += x[1] * al[2] - x[2] * al[1];
        v[14] += x[2] * al[0] - x[0] * al[2];
        v[15] += x[0] * al[1] - x[1] * al[0];
        v[19] += na;
        v[20] += finite ? 0.0 : 1.0;
        v[21] = fmax(v[21], s);
        v[22] = fmax(v[22], na);
        v[23] = fmax(v[23], s / s0);
        for (int c = 0; c < 3; ++c) {
            v[24 + c] = fmax(v[24 + c], x[c]);
            v[27 + c] = fmax(v[27 + c], -x[c]);
        }
    }
    block_moments(v, sh);
    if (threadIdx.x < NSLOT) partial[blockIdx.x * NSLOT + threadIdx.x] = sh[threadIdx.x][0];
}

// One block of RED_THREADS: the partials of `nblocks` blocks reduced in block order (each
// thread a strided set in order, then a tree), into out[NSLOT].
extern "C" __global__ void r_moments_finish(const double* __restrict__ partial, int nblocks,
                                            double* __restrict__ out) {
    __shared__ double sh[NSLOT][RED_THREADS];
    double v[NSLOT];
    for (int q = 0; q < NSLOT; ++q) v[q] = (q < NSUM) ? 0.0 : NEG_INF;
    for (int b = threadIdx.x; b < nblocks; b += RED_THREADS)
        for (int q = 0; q < NSLOT; ++q) {
            double o = partial[b * NSLOT + q];
            v[q] = moment_combine(q, v[q], o);
        }
    block_moments(v, sh);
    if (threadIdx.x < NSLOT) out[threadIdx.x] = sh[threadIdx.x][0];
}

// The packed rows of the uniform-grid FMM: float4 (x, y, z, 1/sigma) (wrapped when
// box_length > 0), then float4 (ax, ay, az, 0).
extern "C" __global__ void r_pack(const double* __restrict__ pos, const double* __restrict__ a,
                                  const double* __restrict__ sigma, int n, double box_length,
                                  float* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float4 p, s;
    double x = pos[3 * i], y = pos[3 * i + 1], z = pos[3 * i + 2];
    if (box_length > 0.0) {
        x = wrap1(x, box_length);
        y = wrap1(y, box_length);
        z = wrap1(z, box_length);
    }
    p.x = (float)x;
    p.y = (float)y;
    p.z = (float)z;
    p.w = (float)(1.0 / sigma[i]);
    s.x = (float)a[3 * i];
    s.y = (float)a[3 * i + 1];
    s.z = (float)a[3 * i + 2];
    s.w = 0.0f;
    reinterpret_cast<float4*>(out)[i] = p;
    reinterpret_cast<float4*>(out)[n + i] = s;
}

// The FMM's raw fields (6 floats per particle) as f64 velocity and stretching: times
// 1/(4 pi), minus the constant u0 from the velocity (periodic surface term).
extern "C" __global__ void r_fields(const float* __restrict__ out6, int n, double inv4pi,
                                    double u0x, double u0y, double u0z, double* __restrict__ vel,
                                    double* __restrict__ str) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float* h = out6 + 6 * i;
    vel[3 * i] = (double)h[0] * inv4pi - u0x;
    vel[3 * i + 1] = (double)h[1] * inv4pi - u0y;
    vel[3 * i + 2] = (double)h[2] * inv4pi - u0z;
    str[3 * i] = (double)h[3] * inv4pi;
    str[3 * i + 1] = (double)h[4] * inv4pi;
    str[3 * i + 2] = (double)h[5] * inv4pi;
}

// The lowest index whose velocity or stretching is not finite (atomicMin into *first).
extern "C" __global__ void r_first_nonfinite(const double* __restrict__ vel,
                                             const double* __restrict__ str, int n,
                                             int* __restrict__ first) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    bool ok = true;
    for (int c = 0; c < 3; ++c) ok = ok && isfinite(vel[3 * i + c]) && isfinite(str[3 * i + c]);
    if (!ok) atomicMin(first, i);
}

// Stability measures of the step: per-block max |u| and max |s| / |a| (into partial[2 b]).
extern "C" __global__ void r_rates(const double* __restrict__ vel, const double* __restrict__ str,
                                   const double* __restrict__ a, int n,
                                   double* __restrict__ partial) {
    __shared__ double su[RTHREADS], sr[RTHREADS];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    double u = 0.0, r = 0.0;
    if (i < n) {
        double u2 = 0.0, s2 = 0.0, a2 = 0.0;
        for (int c = 0; c < 3; ++c) {
            u2 += vel[3 * i + c] * vel[3 * i + c];
            s2 += str[3 * i + c] * str[3 * i + c];
            a2 += a[3 * i + c] * a[3 * i + c];
        }
        u = sqrt(u2);
        r = a2 > 0.0 ? sqrt(s2 / a2) : 0.0;
    }
    su[threadIdx.x] = u;
    sr[threadIdx.x] = r;
    __syncthreads();
    block_tree_reduce(RTHREADS, [&](unsigned d, unsigned s) {
        su[d] = fmax(su[d], su[s]);
        sr[d] = fmax(sr[d], sr[s]);
    });
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = su[0];
        partial[2 * blockIdx.x + 1] = sr[0];
    }
}

// y += dt (3/2 f - 1/2 g) over m doubles (AB2).
extern "C" __global__ void r_ab2(double* __restrict__ y, const double* __restrict__ f,
                                 const double* __restrict__ g, int m, double dt) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m) y[i] += dt * (1.5 * f[i] - 0.5 * g[i]);
}

// y += a x over m doubles.
extern "C" __global__ void r_axpy(double* __restrict__ y, double a, const double* __restrict__ x,
                                  int m) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m) y[i] += a * x[i];
}

// Core spreading (core paper Eq. 11): sigma = sqrt(sigma0^2 + 2 nu elapsed).
extern "C" __global__ void r_spread(double* __restrict__ sigma, const double* __restrict__ sigma0,
                                    int n, double nu, double elapsed) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) sigma[i] = sqrt(sigma0[i] * sigma0[i] + 2.0 * nu * elapsed);
}

// Periodic tidy-up: positions wrapped into [-L/2, L/2), the mean strength m subtracted.
extern "C" __global__ void r_tidy(double* __restrict__ pos, double* __restrict__ a, int n,
                                  double box_length, double m0, double m1, double m2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (int c = 0; c < 3; ++c) pos[3 * i + c] = wrap1(pos[3 * i + c], box_length);
    a[3 * i] -= m0;
    a[3 * i + 1] -= m1;
    a[3 * i + 2] -= m2;
}

// ---- binning into the cells of a lattice (cell (i,j,k) = [o + i h, o + (i+1) h) per axis,
// index (i * ny + j) * nz + k; periodic: wrapped; free space: clamped to the lattice)

__device__ __forceinline__ int cell_axis(double x, double o, double h, int nc, int periodic) {
    int c = (int)floor((x - o) / h);
    if (periodic) {
        c %= nc;
        if (c < 0) c += nc;
    } else {
        c = c < 0 ? 0 : (c >= nc ? nc - 1 : c);
    }
    return c;
}

extern "C" __global__ void r_bin_count(const double* __restrict__ pos, int n, double ox, double oy,
                                       double oz, double h, int nx, int ny, int nz, int periodic,
                                       int* __restrict__ cell, int* __restrict__ counts) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int cx = cell_axis(pos[3 * i], ox, h, nx, periodic & 1);
    int cy = cell_axis(pos[3 * i + 1], oy, h, ny, periodic & 2);
    int cz = cell_axis(pos[3 * i + 2], oz, h, nz, periodic & 4);
    int c = (cx * ny + cy) * nz + cz;
    cell[i] = c;
    atomicAdd(&counts[c], 1);
}

// Exclusive scan of counts[0..m) into starts[0..m] (starts[m] = total), in three launches:
// per-block sums, one block scanning the block sums in order, per-block scans plus offsets.
#define SCAN_THREADS 1024
extern "C" __global__ void r_scan_blocks(const int* __restrict__ counts, int m,
                                         int* __restrict__ block_sums) {
    __shared__ int sh[SCAN_THREADS];
    int i = blockIdx.x * SCAN_THREADS + threadIdx.x;
    sh[threadIdx.x] = i < m ? counts[i] : 0;
    __syncthreads();
    block_tree_reduce(SCAN_THREADS, [&](unsigned d, unsigned s) { sh[d] += sh[s]; });
    if (threadIdx.x == 0) block_sums[blockIdx.x] = sh[0];
}

// One block of SCAN_THREADS: the exclusive scan of the nb block sums in place (each thread a
// contiguous chunk, a scan over the chunk totals, then the chunks), bs[nb] = the total.
extern "C" __global__ void r_scan_sums(int* __restrict__ bs, int nb) {
    __shared__ int sh[SCAN_THREADS];
    int per = (nb + SCAN_THREADS - 1) / SCAN_THREADS;
    int a = threadIdx.x * per, b = min(a + per, nb);
    int acc = 0;
    for (int i = a; i < b; ++i) acc += bs[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    block_inclusive_scan<SCAN_THREADS>(sh);
    int run = sh[threadIdx.x] - acc;
    for (int i = a; i < b; ++i) {
        int v = bs[i];
        bs[i] = run;
        run += v;
    }
    if (threadIdx.x == SCAN_THREADS - 1) bs[nb] = sh[threadIdx.x];
}

extern "C" __global__ void r_scan_apply(const int* __restrict__ counts, int m,
                                        const int* __restrict__ block_sums,
                                        int* __restrict__ starts) {
    __shared__ int sh[SCAN_THREADS];
    int i = blockIdx.x * SCAN_THREADS + threadIdx.x;
    int v = i < m ? counts[i] : 0;
    sh[threadIdx.x] = v;
    __syncthreads();
    block_inclusive_scan<SCAN_THREADS>(sh);
    if (i < m) starts[i] = block_sums[blockIdx.x] + sh[threadIdx.x] - v;
    if (i == m - 1) starts[m] = block_sums[gridDim.x];
}

extern "C" __global__ void r_bin_scatter(const int* __restrict__ cell, int n,
                                         const int* __restrict__ starts, int* __restrict__ fill,
                                         int* __restrict__ order) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int c = cell[i];
    order[starts[c] + atomicAdd(&fill[c], 1)] = i;
}

// Within each cell the particles in increasing index (insertion sort: a few per cell), then
// their rows gathered: sp = (x, y, z, sigma), sa = (ax, ay, az, 0) in cell order.
extern "C" __global__ void r_bin_sort(const int* __restrict__ starts, int ncell,
                                      int* __restrict__ order) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ncell) return;
    int a = starts[c], b = starts[c + 1];
    for (int i = a + 1; i < b; ++i) {
        int v = order[i];
        int j = i - 1;
        while (j >= a && order[j] > v) {
            order[j + 1] = order[j];
            --j;
        }
        order[j + 1] = v;
    }
}

// sp = (x, y, z, 1 / sigma^2), sa = (ax, ay, az, (2 pi)^(-3/2) / sigma^3) in cell order: the
// per-particle factors of the Gaussian computed once, not per pair.
extern "C" __global__ void r_bin_gather(const int* __restrict__ order, int n,
                                        const double* __restrict__ pos,
                                        const double* __restrict__ a,
                                        const double* __restrict__ sigma, double4* __restrict__ sp,
                                        double4* __restrict__ sa) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    int i = order[j];
    double s = sigma[i];
    const double c3 = 0.063493635934240970;  // (2 pi)^(-3/2)
    sp[j] = make_double4(pos[3 * i], pos[3 * i + 1], pos[3 * i + 2], 1.0 / (s * s));
    sa[j] = make_double4(a[3 * i], a[3 * i + 1], a[3 * i + 2], c3 / (s * s * s));
}

// Point t of the planes k in [z_first, z_first + z_count) of an nx x ny x nz lattice: k fastest
// (the lattice order), or with `xfast` i fastest (`((k - z_first) ny + j) nx + i`, the layout
// of the slab transforms).
__device__ __forceinline__ void plane_point(long long t, int nx, int ny, int z_first,
                                            int z_count, int xfast, int* i, int* j, int* k) {
    if (xfast) {
        *i = (int)(t % nx);
        *j = (int)((t / nx) % ny);
        *k = z_first + (int)(t / ((long long)nx * ny));
    } else {
        *k = z_first + (int)(t % z_count);
        *j = (int)((t / z_count) % ny);
        *i = (int)(t / ((long long)ny * z_count));
    }
}

// omega(y) = sum_j a_j zeta_{sigma_j}(y - x_j), truncated at |y - x_j| < cutoff sigma_j, at the
// lattice points y = o + h (i, j, k) of the planes k in [z_first, z_first + z_count) (one thread
// each, output [3] per point: k fastest, or with `xfast` i fastest, `((k - z_first) ny + j) nx
// + i`, the layout of the slab transforms; the threads walk k fastest either way, so that the
// threads of a warp read one window of the same cell rows), from the particles binned into the cells of the same
// lattice: the cells within `reach` cells of the point's own along each axis, row by row along z
// (one or two contiguous runs), rows and z ranges beyond the largest truncation radius
// sqrt(rmax2) skipped. `periodic`: bit 0, 1, 2 for x, y, z; a periodic axis takes
// minimum-image differences (the caller ensures 2 reach + 1 <= n along it); along an open axis
// the cells beyond the lattice are absent (a slab's lattice carries its halo planes as cells).
extern "C" __global__ void r_gauss_lattice(const double4* __restrict__ sp,
                                           const double4* __restrict__ sa,
                                           const int* __restrict__ starts, double ox, double oy,
                                           double oz, double h, int nx, int ny, int nz,
                                           int periodic, int reach, double cutoff,
                                           double box_length, double rmax2, int z_first,
                                           int z_count, int xfast,
                                           double* __restrict__ omega) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long npts = (long long)nx * ny * z_count;
    if (t >= npts) return;
    int i, j, k;
    plane_point(t, nx, ny, z_first, z_count, 0, &i, &j, &k);
    const long long out = xfast ? ((long long)(k - z_first) * ny + j) * nx + i : t;
    const int px = periodic & 1, py = periodic & 2, pz = periodic & 4;
    double y0 = ox + h * i, y1 = oy + h * j, y2 = oz + h * k;
    const double cut2 = cutoff * cutoff;
    double w0 = 0.0, w1 = 0.0, w2 = 0.0;
    for (int dx = -reach; dx <= reach; ++dx) {
        int cx = i + dx;
        if (px) cx = (cx + nx) % nx;
        else if (cx < 0 || cx >= nx) continue;
        // a particle of cell offset d lies at least (|d| - 1) h away along that axis
        double ex = (abs(dx) - 1 > 0 ? abs(dx) - 1 : 0) * h;
        if (ex * ex > rmax2) continue;
        for (int dy = -reach; dy <= reach; ++dy) {
            int cy = j + dy;
            if (py) cy = (cy + ny) % ny;
            else if (cy < 0 || cy >= ny) continue;
            double ey = (abs(dy) - 1 > 0 ? abs(dy) - 1 : 0) * h;
            double rest = rmax2 - ex * ex - ey * ey;
            if (rest < 0.0) continue;
            int zr = (int)floor(sqrt(rest) / h) + 1;
            zr = zr < reach ? zr : reach;
            int row = (cx * ny + cy) * nz;
            int za = k - zr, zb = k + zr;  // inclusive cell range along z
            int runs[4];
            int nr = 0;
            if (pz) {
                if (za < 0) {
                    runs[nr++] = za + nz; runs[nr++] = nz - 1; za = 0;
                }
                if (zb >= nz) {
                    runs[nr++] = 0; runs[nr++] = zb - nz; zb = nz - 1;
                }
            } else {
                za = za < 0 ? 0 : za;
                zb = zb >= nz ? nz - 1 : zb;
            }
            runs[nr++] = za; runs[nr++] = zb;
            for (int r = 0; r < nr; r += 2) {
                int pa = starts[row + runs[r]], pb = starts[row + runs[r + 1] + 1];
                for (int p = pa; p < pb; ++p) {
                    double4 x = sp[p];
                    double d0 = y0 - x.x, d1 = y1 - x.y, d2 = y2 - x.z;
                    if (px) d0 -= box_length * rint(d0 / box_length);
                    if (py) d1 -= box_length * rint(d1 / box_length);
                    if (pz) d2 -= box_length * rint(d2 / box_length);
                    // the exponent in f64, the exponential in f32 (relative error ~1e-7, the
                    // level of the f32 FMM), the sums in f64
                    double q = (d0 * d0 + d1 * d1 + d2 * d2) * x.w;
                    if (q < cut2) {
                        double4 al = sa[p];
                        double z = al.w * (double)__expf((float)(-0.5 * q));
                        w0 += al.x * z;
                        w1 += al.y * z;
                        w2 += al.z * z;
                    }
                }
            }
        }
    }
    omega[3 * out] = w0;
    omega[3 * out + 1] = w1;
    omega[3 * out + 2] = w2;
}

// The slab layout of the transforms (`slab[((k - z_first) n + j) n + i][3]`, i fastest) of the
// planes z_first.. of an n^3 lattice into the lattice order over the same planes (`out[t][3]`,
// t = (i n + j) z_count + k - z_first, k fastest: the order of the fresh particles and of the
// global ids), one thread per point.
extern "C" __global__ void r_lattice_order(const double* __restrict__ slab, int n, int z_count,
                                           double* __restrict__ out) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long m = (long long)n * n * z_count;
    if (t >= m) return;
    int i, j, k;
    plane_point(t, n, n, 0, z_count, 0, &i, &j, &k);
    const long long src = ((long long)k * n + j) * n + i;
    out[3 * t] = slab[3 * src];
    out[3 * t + 1] = slab[3 * src + 1];
    out[3 * t + 2] = slab[3 * src + 2];
}

// The fresh particles of a periodic re-interpolation at the lattice points of the planes k in
// [z_first, z_first + z_count) of an n^3 lattice (the order of r_gauss_lattice's output: k
// fastest, or i fastest with `xfast`): positions and cores sigma0 (the strengths are the solved
// field; the mean is subtracted by r_tidy afterwards).
extern "C" __global__ void r_lattice_particles(int n, double o, double h, double sigma0,
                                               int z_first, int z_count, int xfast,
                                               double* __restrict__ pos,
                                               double* __restrict__ sigma,
                                               double* __restrict__ s0) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long m = (long long)n * n * z_count;
    if (t >= m) return;
    int i, j, k;
    plane_point(t, n, n, z_first, z_count, xfast, &i, &j, &k);
    pos[3 * t] = o + h * i;
    pos[3 * t + 1] = o + h * j;
    pos[3 * t + 2] = o + h * k;
    sigma[t] = sigma0;
    s0[t] = sigma0;
}

// ---- z slabs over ranks (crates/resident/src/slab)

// The rank owning each particle: its leaf plane computed from the packed f32 position exactly
// as the uniform grid's sort does (`floor((z - lo) inv_w)` clamped to the grid), looked up in
// `plane_owner` (nleaf entries).
extern "C" __global__ void r_slab_owner(const float4* __restrict__ packed, int n, float lo,
                                        float inv_w, int nleaf,
                                        const int* __restrict__ plane_owner,
                                        int* __restrict__ owner) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = floorf((packed[i].z - lo) * inv_w);
    int z = v < 0.0f ? 0 : (int)v;
    z = z < nleaf ? z : nleaf - 1;
    owner[i] = plane_owner[z];
}

// dst[r][c] = src[idx[r]][c] for rows of `width` doubles, r < m.
extern "C" __global__ void r_gather_rows(const double* __restrict__ src, int width,
                                         const int* __restrict__ idx, int m,
                                         double* __restrict__ dst) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)m * width) return;
    int r = (int)(t / width), c = (int)(t % width);
    dst[t] = src[(long long)idx[r] * width + c];
}

// The halo of the slab Gaussian sums on the device (crates/resident/src/slab/halo.rs), the
// rule of the host twin slab::owners::halo_sends: flag[i] = 1 when particle i's periodic z
// cell c = floor((z + half) / h) mod nz, shifted by shift nz, lies in [lo, hi) (a rank's
// planes widened by the reach), else 0.
extern "C" __global__ void r_halo_flag(const double* __restrict__ pos, int n, double half,
                                       double h, int nz, int shift, int lo, int hi,
                                       int* __restrict__ flag) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long c = (long long)floor((pos[3 * i + 2] + half) / h);
    c %= nz;
    if (c < 0) c += nz;
    long long cs = c + (long long)shift * nz;
    flag[i] = (cs >= lo && cs < hi) ? 1 : 0;
}

// Row starts[i] of out for every flagged particle: (x, y, z + dz, ax, ay, az, sigma).
extern "C" __global__ void r_halo_rows(const double* __restrict__ pos,
                                       const double* __restrict__ a,
                                       const double* __restrict__ sigma, int n,
                                       const int* __restrict__ flag,
                                       const int* __restrict__ starts, double dz,
                                       double* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || !flag[i]) return;
    double* r = out + 7LL * starts[i];
    r[0] = pos[3 * i];
    r[1] = pos[3 * i + 1];
    r[2] = pos[3 * i + 2] + dz;
    r[3] = a[3 * i];
    r[4] = a[3 * i + 1];
    r[5] = a[3 * i + 2];
    r[6] = sigma[i];
}

// The m received rows of 7 doubles into the particle arrays (pointers at the first halo row).
extern "C" __global__ void r_halo_split(const double* __restrict__ rows, int m,
                                        double* __restrict__ pos, double* __restrict__ a,
                                        double* __restrict__ sigma) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    const double* r = rows + 7LL * i;
    pos[3 * i] = r[0];
    pos[3 * i + 1] = r[1];
    pos[3 * i + 2] = r[2];
    a[3 * i] = r[3];
    a[3 * i + 1] = r[4];
    a[3 * i + 2] = r[5];
    sigma[i] = r[6];
}

// The migration lists on the device (crates/resident/src/slab/exchange.rs, the rule of the
// host twin slab::owners::migration_lists): flag[i] = (owner[i] == q); then, after the scan,
// idx[starts[i]] = i for every flagged i (the indices in increasing order).
extern "C" __global__ void r_flag_owner(const int* __restrict__ owner, int n, int q,
                                        int* __restrict__ flag) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    flag[i] = owner[i] == q ? 1 : 0;
}

extern "C" __global__ void r_compact_index(const int* __restrict__ flag,
                                           const int* __restrict__ starts, int n,
                                           int* __restrict__ idx) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || !flag[i]) return;
    idx[starts[i]] = i;
}
