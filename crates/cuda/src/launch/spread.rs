//! The kernels of `kernels/spread.cu`: the Gaussian sums of the periodic re-interpolation by
//! spreading and FFT (`vortex_resident::spreading`). The fine periodic grid has `m^3` points
//! (z fastest), its tiles `tile^3` points (`tile` divides `m`, `nt = m / tile` per axis); the
//! `_f` and `_d` kernels are the same on a `float` or `double` grid.

crate::kernel_set! {
    /// The kernels of `kernels/spread.cu` (no defines).
    pub struct Spread(crate::kernels::SPREAD) { defines() }

    /// The tile of every particle (`cell`: `n` ints, each below `nt^3`) and the particles per
    /// tile (`counts`: `nt^3` ints, added to); `pos` holds `3 n` doubles, `hf` the fine
    /// spacing. One thread per particle.
    fn tile_cells = s_tile_cells(
        pos: *const double, n: int, origin: double, hf: double, m: int, tile: int,
        cell: *mut int, counts: *mut int,
    );

    /// `grid` (`m^3` floats) `+=` the spread of component `comp` of the strengths `sa` of the
    /// particles `sp` (both `double4` rows) sorted by tile, `starts` their `nt^3 + 1` offsets;
    /// `w` points per kernel axis (ES kernel of parameter `beta`). One block per tile (`nt^3`
    /// blocks, a multiple of 32 threads) with the dynamic shared memory of
    /// `vortex_resident::spreading::shared_bytes`; every grid index wrapped below `m^3`.
    fn spread_f = s_spread_f(
        sp: *const double4, sa: *const double4, starts: *const int, m: int, tile: int, w: int,
        beta: double, origin: double, hf: double, comp: int, grid: *mut float,
    );

    /// [`Spread::spread_f`] on a grid of doubles.
    fn spread_d = s_spread_d(
        sp: *const double4, sa: *const double4, starts: *const int, m: int, tile: int, w: int,
        beta: double, origin: double, hf: double, comp: int, grid: *mut double,
    );

    /// `out[3 t]` (`t < n^2 (n/2 + 1)`: one component of the lattice's pencil spectrum on one
    /// rank, planes of constant z, `t = (kz n + ky) (n/2 + 1) + kx`, the caller's view offset
    /// to the component) `=` the fine half spectrum `spec` (`m^2 (m/2 + 1)` complex, cuFFT's
    /// R2C output) times the per-axis factors `d` (`m` doubles, indexed by the fine mode mod
    /// `m`), folded onto the lattice modes. One thread per lattice mode.
    fn fold_f = s_fold_f(
        spec: *const float2, m: int, d: *const double, n: int, out: *mut double2,
    );

    /// [`Spread::fold_f`] of a double spectrum (D2Z output).
    fn fold_d = s_fold_d(
        spec: *const double2, m: int, d: *const double, n: int, out: *mut double2,
    );

    /// Over slabs (`vortex_resident::spreading::slabs`): the window tile of every particle
    /// (`cell`: `n` ints below `nt^2 ntz`, `ntz = ceil(wl / tile)`, z counted from fine plane
    /// `zs`), the particles per tile (`counts`, added to) and in `bad[0]` the count of particles
    /// whose footprint of `w` planes leaves the window's `wl` planes. One thread per particle.
    fn window_cells = s_window_cells(
        pos: *const double, n: int, origin: double, hf: double, m: int, tile: int, w: int,
        zs: int, wl: int, cell: *mut int, counts: *mut int, bad: *mut int,
    );

    /// The window grid (`wl` planes of `m^2` doubles, `[j][y][x]`) `+=` the spread of
    /// component `comp` of the particles binned by [`Spread::window_cells`] (`starts`: `nt^2
    /// ntz + 1` offsets); blocks and shared memory as [`Spread::spread_d`].
    fn spread_window_d = s_spread_window_d(
        sp: *const double4, sa: *const double4, starts: *const int, m: int, tile: int, w: int,
        beta: double, origin: double, hf: double, comp: int, zs: int, wl: int,
        grid: *mut double,
    );

    /// Component `comp` of the fine layout's slab spectrum `out` (`planes n (n/2 + 1)` triples
    /// of complex, `[i][ky][kx][3]`) `=` the 2-D half spectra `spec` of the own fine planes
    /// (`planes` blocks of `m (m/2 + 1)` complex, half axis x) times `d(qx) d(qy)`, folded onto
    /// the lattice's `(kx, ky)`. One thread per `(plane, ky, kx)`.
    fn fold_xy_d = s_fold_xy_d(
        spec: *const double2, planes: int, m: int, d: *const double, n: int, comp: int,
        out: *mut double2,
    );

    /// The lattice's pencil spectrum `out` (`n cols` complex, `[kz][column]`) `=` the fine
    /// pencil `fine` (`m cols` complex, transformed along z) times `d(qz)`, folded onto `kz`.
    /// One thread per `(kz, column)`.
    fn fold_z = s_fold_z(
        fine: *const double2, m: int, cols: long_long, d: *const double, n: int, out: *mut double2,
    );

    /// Per block `b`, the smallest and largest of `x[..n]` (a grid-stride loop) into
    /// `part[2 b]` and `part[2 b + 1]` (`2` doubles per block); blocks of `RANGE_THREADS`
    /// (256) threads.
    fn range = s_range(x: *const double, n: int, part: *mut double);
}
