//! The kernels of `kernels/uniform.cu`: the uniform-grid FMM built on the device
//! (`vortex_gpu::uniform`): counting sort of the particles into the leaves, the task lists
//! of the leaves by stencil, the cell centres, the level-by-level M2M / M2L / L2L of the
//! grid (rotation-based, and the dense M2L of the finest levels, on the FP32 pipes or the FP64
//! tensor cores) and the fields back in the
//! input order. The module also holds `p2p.cu` and `fmm.cu` (included), whose `p2p_near`,
//! `p2m` and `l2p` it reuses ([`UniformModule`]). Every kernel has a host emulation in
//! `vortex_gpu::uniform` (`sort`, `stencil`, `dense_m2l`).

use super::{Fmm, P2p};
use crate::{GpuDevice, GpuResult};

crate::kernel_set! {
    /// The own kernels of `kernels/uniform.cu`, compiled with `-DORDER` and `-DEVAL_BLOCK`
    /// (those of `fmm.cu`, which it includes) and `-DCORE_M` (that of `p2p.cu`).
    pub struct Uniform(crate::kernels::UNIFORM) {
        defines(order = "ORDER", eval_block = "EVAL_BLOCK", core_m = "CORE_M")
    }

    /// The leaf of each of `np` particles (`pos`: `np` `float4`) on the `n^3` grid of
    /// corner `lo`, inverse width `inv_w` (clamped to the grid): `cell` and `slot` (its rank
    /// in the leaf) `np` ints, `counts` `n^3` ints (added to).
    fn cell_index = u_cell_index(
        pos: *const float4, np: int, lox: float, loy: float, loz: float, inv_w: float, n: int,
        cell: *mut int, slot: *mut int, counts: *mut int,
    );

    /// Scan, step 1: `in[..len]` scanned per block into `out` (`len + 1` ints), the block
    /// sums into `sums` (`nb = ceil(len / SCAN_BLOCK)`, `SCAN_BLOCK` = 1024); `nb` blocks of
    /// `SCAN_THREADS` = 256.
    fn scan_blocks = u_scan_blocks(r#in: *const int, len: int, out: *mut int, sums: *mut int);

    /// Scan, step 2: the `nb` block sums scanned in place and the total into `out[len]`; one
    /// block of `SCAN_THREADS`.
    fn scan_sums = u_scan_sums(sums: *mut int, nb: int, out: *mut int, len: int);

    /// Scan, step 3: each block's offset added to `out[..len]`.
    fn scan_add = u_scan_add(out: *mut int, len: int, sums: *const int);

    /// Each particle's place in the sorted order: `perm[starts[cell] + slot] = i` (`cell`,
    /// `slot`, `perm`: `np` ints; `starts` the scanned counts).
    fn scatter = u_scatter(
        cell: *const int, slot: *const int, starts: *const int, np: int, perm: *mut int,
    );

    /// Each leaf's particles in input order, one warp per leaf (`32 ncells` threads):
    /// `starts` `ncells + 1` ints, `in` and `out` the permutation.
    fn sort_cells = u_sort_cells(starts: *const int, ncells: int, r#in: *const int, out: *mut int);

    /// Rows in sorted order: `pos`/`str` (`np` `float4` each) from `pos_in`/`str_in` by
    /// `perm` (`np` indices below `np`).
    fn gather = u_gather(
        perm: *const int, np: int, pos_in: *const float4, str_in: *const float4,
        pos: *mut float4, str: *mut float4,
    );

    /// The P2P / L2P slices of `slice` targets of each of `ncells` leaves (`starts`: `ncells
    /// + 1` ints) into `out` (`ncells` ints).
    fn slices = u_slices(starts: *const int, ncells: int, slice: int, out: *mut int);

    /// The task lists of the leaves `c0 .. c0 + ncells` of the `n^3` grid (both starts
    /// `n^3 + 1` ints, the slice offsets `ncells + 1`): P2M per leaf, P2P and L2P per slice,
    /// the runs of source cells per leaf (9, or 18 when `periodic`), and the pair count into
    /// `pairs` (one value, added to).
    fn leaf_tasks = u_leaf_tasks(
        starts: *const int, src_starts: *const int, slice_starts: *const int, n: int,
        leaf_base: int, slice: int, c0: int, ncells: int, periodic: int,
        p2m_tasks: *mut int4, near_tasks: *mut int4, near_nsrc: *mut int,
        l2p_tasks: *mut int4, runs: *mut int4, pairs: *mut ull,
    );

    /// The P2M tasks of the leaves `c0 .. c0 + ncells` (`out`: `ncells` `int4`).
    fn p2m_tasks = u_p2m_tasks(
        starts: *const int, c0: int, ncells: int, leaf_base: int, out: *mut int4,
    );

    /// The centres of the `nl^3` cells of a level, at `level_off` of `centers`.
    fn centers = u_centers(
        level_off: int, nl: int, lox: double, loy: double, loz: double, w: double,
        centers: *mut float4,
    );

    /// The sorted fields back in input order: `out` (`6 np` floats) from `vel`, `str`
    /// (`3 np` each) by `perm`.
    fn scatter_fields = u_scatter_fields(
        perm: *const int, np: int, vel: *const float, str: *const float, out: *mut float,
    );

    /// M2M of a level, one block of `TR_THREADS` per parent `c0 ..`; the rotation records
    /// cover the offsets up to `R`.
    fn m2m = u_m2m(
        mult: *mut float2, rots: *const float, ztab: *const float, toff: *const int, R: int,
        parent_off: int, nl: int, child_off: int, dist: float, c0: int,
    );

    /// M2L of a level by stencil, one block of `TR_THREADS` per target cell `c0 ..`; the
    /// stencil's offsets are at most `R`.
    fn m2l = u_m2l(
        mult: *const float2, loc: *mut float2, rots: *const float, ztab: *const float,
        toff: *const int, R: int, level_off: int, nl: int, top: int, periodic: int, w: float,
        c0: int,
    );

    /// L2L of a level, one block of `TR_THREADS` per child `c0 ..`.
    fn l2l = u_l2l(
        loc: *mut float2, rots: *const float, ztab: *const float, toff: *const int, R: int,
        child_off: int, nl: int, parent_off: int, dist: float, c0: int,
    );

    /// Dense M2L of a level (`nl` even): `mats` the 343 padded matrices of the module's
    /// order, `dmap` its padded map; grid `(ceil(qcount / 32), 8)` of `DTHREADS` = 192,
    /// targets beyond `qcount` or outside `zlo .. zhi` masked.
    fn m2l_dense = u_m2l_dense(
        mult: *const float, loc: *mut float, mats: *const float, dmap: *const int,
        level_off: int, nl: int, periodic: int, w: float, zlo: int, zhi: int, q0: int,
        qcount: int,
    );

    /// Dense M2L of a level on the FP64 tensor cores: the targets, offsets and scalings of
    /// `m2l_dense`, `mats` the same matrices in f64; grid `(ceil(qcount / 32), 8, groups)` of
    /// `TTHREADS` = 256. One group adds into `loc` (`part` unused, one element); several
    /// store their sums into `part` (`groups nl^3 3 DP` doubles), for `m2l_tensor_sum`.
    fn m2l_tensor = u_m2l_tensor(
        mult: *const float, loc: *mut float, mats: *const double, dmap: *const int,
        part: *mut double, level_off: int, nl: int, periodic: int, w: float, zlo: int,
        zhi: int, q0: int, qcount: int, groups: int,
    );

    /// The `groups` partial sums of `m2l_tensor` (`part`) added into the locals of the
    /// level's cells with z in `zlo .. zhi`: one thread per (cell, component, slot `< DD`).
    fn m2l_tensor_sum = u_m2l_tensor_sum(
        part: *const double, loc: *mut float, dmap: *const int, level_off: int, nl: int,
        zlo: int, zhi: int, groups: int,
    );
}

/// The module of `kernels/uniform.cu`, which includes `p2p.cu` and `fmm.cu`: its own kernels
/// and those of the two it reuses, from one compilation.
#[derive(Clone, Debug)]
pub struct UniformModule {
    pub uniform: Uniform,
    pub p2p: P2p,
    pub fmm: Fmm,
}

impl UniformModule {
    /// Compiles (once per device and defines) and loads the module of order `order` with
    /// `eval_block` targets per L2P block and the core of order `2 core_m`.
    pub fn load(
        dev: &GpuDevice,
        order: usize,
        eval_block: usize,
        core_m: usize,
    ) -> GpuResult<Self> {
        let m = Uniform::module(dev, order, eval_block, core_m)?;
        Ok(Self {
            uniform: Uniform::from_module(&m)?,
            p2p: P2p::from_module(&m)?,
            fmm: Fmm::from_module(&m)?,
        })
    }
}
