//! The kernels of `kernels/resident.cu`: the vortex-method step resident on the device
//! (`vortex_resident`), f64 unless said: updates, deterministic reductions (moments, rates,
//! spectra), packing for the evaluation, the counting sort of particles into lattice cells,
//! the Gaussian sums at lattice points and the Fourier-space factors of the lattice solve.
//! Particle rows are `3 n` positions, `3 n` strengths, `n` core radii; the element-wise
//! kernels take one thread per element (blocks of `RTHREADS` = 256), threads past the count
//! doing nothing.

crate::kernel_set! {
    /// The kernels of `kernels/resident.cu` (with `kernels/common.cuh`; no defines).
    pub struct Resident(crate::kernels::RESIDENT) { defines() }

    /// Moment partial sums: `NSLOT` (30) doubles of `partial` per block of `RED_THREADS`
    /// (128) threads, each block covering `RED_THREADS RED_PER_THREAD` (8) particles.
    fn moments = r_moments(
        pos: *const double, a: *const double, sigma: *const double, sigma0: *const double,
        n: int, box_length: double, partial: *mut double,
    );

    /// The `nblocks` partials (`NSLOT` each) summed into `out` (`NSLOT`), one block of
    /// `RED_THREADS`.
    fn moments_finish = r_moments_finish(partial: *const double, nblocks: int, out: *mut double);

    /// Positions and strengths into the evaluation's fp32 rows: `out` holds `8 n` floats.
    fn pack = r_pack(
        pos: *const double, a: *const double, sigma: *const double, n: int, box_length: double,
        out: *mut float,
    );

    /// The evaluation's `6 n` floats `out6`, scaled by `inv4pi`, plus the uniform velocity
    /// `u0`, into `vel` and `str` (`3 n` doubles each).
    fn fields = r_fields(
        out6: *const float, n: int, inv4pi: double, u0x: double, u0y: double, u0z: double,
        vel: *mut double, str: *mut double,
    );

    /// The first particle below `n` whose `vel` or `str` (`3 n` doubles each) is not
    /// finite, into `first` (one int, min-reduced).
    fn first_nonfinite = r_first_nonfinite(
        vel: *const double, str: *const double, n: int, first: *mut int,
    );

    /// Per-block partial sums of the rates: `partial` holds 2 doubles per block of
    /// `RTHREADS` threads.
    fn rates = r_rates(
        vel: *const double, str: *const double, a: *const double, n: int, partial: *mut double,
    );

    /// `y += dt (3/2 f - 1/2 g)` over `m` doubles (`f`, `g` as long as `y`).
    fn ab2 = r_ab2(y: *mut double, f: *const double, g: *const double, m: int, dt: double);

    /// `y += a x` over `m` doubles.
    fn axpy = r_axpy(y: *mut double, a: double, x: *const double, m: int);

    /// Core spreading: `sigma` from `sigma0` (`n` doubles each) after `elapsed` at `nu`.
    fn spread = r_spread(
        sigma: *mut double, sigma0: *const double, n: int, nu: double, elapsed: double,
    );

    /// Positions wrapped into the box and the strengths' mean `(m0, m1, m2)` removed.
    fn tidy = r_tidy(
        pos: *mut double, a: *mut double, n: int, box_length: double, m0: double, m1: double,
        m2: double,
    );

    /// Cell of each particle (`cell`: `n` ints) and the cell histogram (`counts`:
    /// `nx ny nz` ints) on the lattice of origin `o`, spacing `h`; the axes of the bits of
    /// `periodic` wrap, the others clamp.
    fn bin_count = r_bin_count(
        pos: *const double, n: int, ox: double, oy: double, oz: double, h: double, nx: int,
        ny: int, nz: int, periodic: int, cell: *mut int, counts: *mut int,
    );

    /// Scan, step 1: block sums of `counts[..m]` into `block_sums` (`nb + 1` ints for the
    /// `nb = ceil(m / 1024)` blocks of `SCAN_THREADS` = 1024 threads).
    fn scan_blocks = r_scan_blocks(counts: *const int, m: int, block_sums: *mut int);

    /// Scan, step 2: exclusive scan of the `nb` block sums in place (`bs[nb]` the total), one
    /// block of `SCAN_THREADS`.
    fn scan_sums = r_scan_sums(bs: *mut int, nb: int);

    /// Scan, step 3: `starts` (`m + 1` ints) from the counts and the scanned block sums, the
    /// same `nb` blocks as step 1.
    fn scan_apply = r_scan_apply(
        counts: *const int, m: int, block_sums: *const int, starts: *mut int,
    );

    /// Each particle into its cell's range: `starts` the scan (`ncell + 1`), `fill`
    /// (`ncell`, zeroed) the counters, `order` (`n`) the particle of each slot.
    fn bin_scatter = r_bin_scatter(
        cell: *const int, n: int, starts: *const int, fill: *mut int, order: *mut int,
    );

    /// Each cell's particles in index order (one thread per cell).
    fn bin_sort = r_bin_sort(starts: *const int, ncell: int, order: *mut int);

    /// The particles' rows in `order` into `sp = (x, y, z, sigma)` and `sa = (a, 0)`
    /// (`n` `double4` each).
    fn bin_gather = r_bin_gather(
        order: *const int, n: int, pos: *const double, a: *const double, sigma: *const double,
        sp: *mut double4, sa: *mut double4,
    );

    /// Gaussian sums at the lattice points of the planes `z_first .. z_first + z_count`
    /// (`omega`: 3 doubles per point, `xfast` chooses the order) from the binned particles
    /// within `reach` cells (wrapped axes: `2 reach + 1` at most the cells per side).
    fn gauss_lattice = r_gauss_lattice(
        sp: *const double4, sa: *const double4, starts: *const int, ox: double, oy: double,
        oz: double, h: double, nx: int, ny: int, nz: int, periodic: int, reach: int,
        cutoff: double, box_length: double, rmax2: double, z_first: int, z_count: int,
        xfast: int, omega: *mut double,
    );

    /// The slab layout `slab` (`3 m` doubles, `m = n^2 z_count`, i fastest) into the lattice
    /// order `out` (`3 m` doubles, k fastest) of the same planes.
    fn lattice_order = r_lattice_order(slab: *const double, n: int, z_count: int, out: *mut double);

    /// Fresh particles at the lattice points of planes `z_first ..` (`pos` `3 m`, `sigma` and
    /// `s0` `m` doubles, `m = n^2 z_count`).
    fn lattice_particles = r_lattice_particles(
        n: int, o: double, h: double, sigma0: double, z_first: int, z_count: int, xfast: int,
        pos: *mut double, sigma: *mut double, s0: *mut double,
    );

    /// The rank owning each particle's plane (`packed`: at least `n` `float4` positions,
    /// `plane_owner` `nleaf` ints, `owner` `n`).
    fn slab_owner = r_slab_owner(
        packed: *const float4, n: int, lo: float, inv_w: float, nleaf: int,
        plane_owner: *const int, owner: *mut int,
    );

    /// Rows `idx` (`m` indices below `src.len() / width`) of `src` into `dst` (`m width`).
    fn gather_rows = r_gather_rows(
        src: *const double, width: int, idx: *const int, m: int, dst: *mut double,
    );

    /// The halo of the slab Gaussian sums: `flag` (`n` ints) marks the particles whose
    /// periodic z cell, shifted by `shift nz`, lies in `[lo, hi)`.
    fn halo_flag = r_halo_flag(
        pos: *const double, n: int, half: double, h: double, nz: int, shift: int, lo: int,
        hi: int, flag: *mut int,
    );

    /// The 7-double rows (`z` shifted by `dz`) of the flagged particles at `starts[i]` of `out`.
    fn halo_rows = r_halo_rows(
        pos: *const double, a: *const double, sigma: *const double, n: int, flag: *const int,
        starts: *const int, dz: double, out: *mut double,
    );

    /// `m` received 7-double rows into the particle arrays.
    fn halo_split = r_halo_split(
        rows: *const double, m: int, pos: *mut double, a: *mut double, sigma: *mut double,
    );

    /// `flag[i] = (owner[i] == q)` for `n` particles.
    fn flag_owner = r_flag_owner(owner: *const int, n: int, q: int, flag: *mut int);

    /// `idx[starts[i]] = i` for every flagged `i < n` (`starts` the exclusive scan of `flag`).
    fn compact_index = r_compact_index(
        flag: *const int, starts: *const int, n: int, idx: *mut int,
    );
}
