//! The kernels of `kernels/p2p.cu`: the near-field P2P over task lists and the all-pairs
//! direct sum (Biot-Savart velocity of the Gaussian-based cores of order 2, 4, 6 and classical stretching, core paper
//! Eq. 3-9), fp32. Positions are `float4 (x, y, z, 1/sigma)` for sources and `(x, y, z, 0)`
//! for targets, strengths `float4 (ax, ay, az, 0)`; the fields are `3 nt` velocity and
//! `3 nt` stretching floats, added to (`+=`), without `1/(4 pi)`.

crate::kernel_set! {
    /// The kernels of `kernels/p2p.cu`, compiled with `-DCORE_M=m` (the core of order `2 m`,
    /// `vortex_fmm::kernel::CoreOrder::m`).
    pub struct P2p(crate::kernels::P2P) { defines(core_m = "CORE_M") }

    /// Near field. One block of `NEAR_THREADS` (128) per task; `tasks[b]` = (first target,
    /// target count <= 32, first run, end run), `task_nsrc[b]` the sources of its runs,
    /// `runs[r]` = (first source, source count, periodic image, 0); `period` the box length
    /// (0 in free space). Every target and source index lies inside `tpos`/`tstr` and
    /// `spos`/`sstr`; `vel` and `str` hold 3 floats per target.
    fn p2p_near = p2p_near(
        tpos: *const float4, tstr: *const float4, spos: *const float4, sstr: *const float4,
        tasks: *const int4, task_nsrc: *const int, runs: *const int4, period: float,
        vel: *mut float, str: *mut float,
    );

    /// All pairs: `nt` targets against `ns` sources, one target per thread, blocks of
    /// `ALL_BLOCK` (128) threads, `ceil(nt / 128)` blocks; `vel` and `str` hold `3 nt` floats.
    fn p2p_all = p2p_all(
        tpos: *const float4, tstr: *const float4, nt: int, spos: *const float4,
        sstr: *const float4, ns: int, vel: *mut float, str: *mut float,
    );
}
