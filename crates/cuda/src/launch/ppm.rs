//! The kernels of `kernels/ppm.cu`: the pseudo-particle method's operators (core paper
//! Sec. 3.3, Eq. 36-39): the M2L in fp32 (a tiled sum between two sets of `K` sphere points),
//! P2M, M2M / L2L (`K x K` octant matrices) and L2P in f64. Strengths and locals are `3 K`
//! doubles per cell; `cells` 4 doubles per cell (centre, half width); `expo`, `up`, `w`, `wt`
//! and `mt` the tables of `vortex_gpu::ppm::PpmTables`, in the layouts the source spells out.

crate::kernel_set! {
    /// The kernels of `kernels/ppm.cu`, compiled with the pseudo-particle count `-DPPM_K`
    /// and the order `-DPPM_P`.
    pub struct Ppm(crate::kernels::PPM) { defines(k = "PPM_K", p = "PPM_P") }

    /// M2L, one target cell per block of `PPM_THREADS` (`K` rounded up to a warp): `tasks[b]`
    /// = (target cell, first entry, end entry, sphere radius as float bits), `entries[e]` =
    /// (source cell, centre offset as float bits) inside `mult` and `loc` (added to); `srad`
    /// the sphere radius per source cell, `unit` the `K` unit vectors.
    fn ppm_m2l = ppm_m2l(
        mult: *const double, loc: *mut double, tasks: *const int4, entries: *const int4,
        srad: *const float, unit: *const float4,
    );

    /// P2M, one non-empty leaf per block of `PPM_OPS` (128): `tasks[b]` = (first particle,
    /// count, cell, 0) inside `pos`/`str`, `cells` and `mult` (written, `=`); `rf` the sphere
    /// radius factor.
    fn ppm_p2m = ppm_p2m(
        pos: *const float4, str: *const float4, tasks: *const int4, cells: *const double,
        rf: double, expo: *const int, wt: *const double, mult: *mut double,
    );

    /// M2M (`l2l = 0`) or L2L (`l2l = 1`), one output cell per block of `PPM_OPS`: `tasks[b]`
    /// = (output cell, first input cell, input count, 0), `oct` the octant of each cell, `mt`
    /// the 8 transposed octant matrices; inputs and outputs are different cells of `data`
    /// (added to).
    fn ppm_apply_octant = ppm_apply_octant(
        tasks: *const int4, oct: *const int, mt: *const double, data: *mut double, l2l: int,
    );

    /// L2P, blocks of `PPM_OPS` looping over `ntasks` tasks (first target, count, cell, 0)
    /// with a grid stride; each block owns `9 NM1 + 18 NM2` doubles of `scratch`; `vel` and
    /// `strf` (3 floats per target) are added to, without `1/(4 pi)`.
    fn ppm_l2p = ppm_l2p(
        tpos: *const float4, tstr: *const float4, tasks: *const int4, ntasks: int,
        cells: *const double, rf: double, expo: *const int, up: *const int, w: *const double,
        loc: *const double, scratch: *mut double, vel: *mut float, strf: *mut float,
    );
}
