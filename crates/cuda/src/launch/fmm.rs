//! The kernels of `kernels/fmm.cu`: P2M, the rotation-based M2M / M2L / L2L (O(p^3)), the
//! plain M2L (O(p^4)), L2P and M2P, fp32 (core paper Eq. 12-35; the ports of
//! `vortex_fmm::operators`). Expansions are `3 NC` complex (`float2`) per cell, `NC = (p+1)(p+2)/2`
//! (three components, `m >= 0`, index `n(n+1)/2 + m`); cell centres `float4`; `knm` the
//! `K_n^m` factors; the rotation records and z-axis tables are built on the host
//! (`vortex_gpu::tables`). The layouts are spelled out above each kernel in the source.

crate::kernel_set! {
    /// The kernels of `kernels/fmm.cu`, compiled with the expansion order `-DORDER` and the
    /// targets per L2P / M2P block `-DEVAL_BLOCK`.
    pub struct Fmm(crate::kernels::FMM) { defines(order = "ORDER", eval_block = "EVAL_BLOCK") }

    /// P2M, one leaf per block of `P2M_THREADS` (`NC` rounded up to a warp): `tasks[b]` =
    /// (first source, count, cell, 0) inside `spos`/`sstr` and the cells of `centers` and
    /// `mult` (which it writes, `=`).
    fn p2m = p2m(
        spos: *const float4, sstr: *const float4, tasks: *const int4, centers: *const float4,
        knm: *const float, mult: *mut float2,
    );

    /// M2M, one output cell per block of `TR_THREADS` (`3 NC` rounded up to a warp):
    /// `tasks[task_offset + b]` = (output cell, first entry, end entry, 0), `entries[e]` =
    /// (input cell, rotation record, distance as float bits, 0); `rots` the records, `ztab`
    /// the z table of M2M, `toff` its offsets. `in` and `out` may be one buffer (an
    /// [`InPlace`](super::InPlace)) when a launch reads and writes different cells.
    fn m2m_rot = m2m_rot(
        r#in: *const float2, out: *mut float2, tasks: *const int4, entries: *const int4,
        rots: *const float, ztab: *const float, toff: *const int, task_offset: int,
    );

    /// M2L, rotation-based: as [`Self::m2m_rot`] with the z table of M2L; `in` the
    /// multipoles, `out` the locals (added to).
    fn m2l_rot = m2l_rot(
        r#in: *const float2, out: *mut float2, tasks: *const int4, entries: *const int4,
        rots: *const float, ztab: *const float, toff: *const int, task_offset: int,
    );

    /// L2L: as [`Self::m2m_rot`] with the z table of L2L (parents' locals into children's).
    fn l2l_rot = l2l_rot(
        r#in: *const float2, out: *mut float2, tasks: *const int4, entries: *const int4,
        rots: *const float, ztab: *const float, toff: *const int, task_offset: int,
    );

    /// M2L, plain O(p^4) reference: tasks and entries as [`Self::m2l_rot`] (the rotation
    /// slot unused), the centres from `tcenters` / `scenters`.
    fn m2l_plain = m2l_plain(
        r#in: *const float2, out: *mut float2, tasks: *const int4, entries: *const int4,
        tcenters: *const float4, scenters: *const float4, knm: *const float, task_offset: int,
    );

    /// L2P, one slice of at most `EVAL_BLOCK` targets per block of `EVAL_BLOCK` threads:
    /// `tasks[b]` = (first target, count, cell, 0) inside `tpos`/`tstr` and the cells of
    /// `centers` and `locals`; `vel` and `str` (3 floats per target) are added to.
    fn l2p = l2p(
        tpos: *const float4, tstr: *const float4, tasks: *const int4, centers: *const float4,
        locals: *const float2, knm: *const float, vel: *mut float, str: *mut float,
    );

    /// M2P (treecode), blocks of `EVAL_BLOCK` threads: `tasks[b]` = (first target, count,
    /// first entry, end entry), `entries[e]` = (source cell, periodic image, 0, 0) inside
    /// `centers` and `mult`; `period` the box length (0 in free space); `vel` and `str` are
    /// added to.
    fn m2p = m2p(
        tpos: *const float4, tstr: *const float4, tasks: *const int4, entries: *const int4,
        centers: *const float4, mult: *const float2, knm: *const float, period: float,
        vel: *mut float, str: *mut float,
    );
}
