//! [`UniformFmm`]: the uniform-grid FMM on one CUDA device (kernels of `kernels/uniform.cu`
//! plus `p2m`, `l2p` of `kernels/fmm.cu` and `p2p_near` of `kernels/p2p.cu`, one module).
//!
//! Phases (each ends with a synchronization, so the wall times are device times; the kernel
//! times come from CUDA events):
//! 1. host: bounding cube and largest core radius (parallel reduction), grid choice, f32
//!    packing (`layout::pack_sources`, parallel); the rotation records and z tables of the
//!    order are built and uploaded once and kept by the [`UniformFmm`];
//! 2. upload of the packed particles (two `float4` arrays);
//! 3. sort: cell index + histogram (atomics), exclusive scan, scatter, in-cell ordering by
//!    input index, gather into sorted buffers, leaf tasks (P2M, P2P slices of 32 targets with 9
//!    source runs, L2P); the slice offsets are the only mid-way download;
//! 4. upward: cell centres, P2M per leaf, M2M level by level (on a rank, the multipoles other
//!    ranks need are then copied on a second stream into page-locked memory, overlapping the
//!    P2P);
//! 5. P2P: `p2p_near` over the 9 runs of each leaf (on a rank: among the own particles, while
//!    the host exchanges the halo particles, leaf and coarse multipoles; then the halo particles
//!    are sorted apart, their leaves get P2M, and a second `p2p_near` adds the halo sources
//!    to the own planes next to them);
//! 6. M2L per level over the implicit stencil (one block per target cell);
//! 7. downward: L2L level by level, L2P (slices of 32 targets);
//! 8. scatter of the fields to input order (interleaved `(u, s)` per particle), one download
//!    (in 8 pieces into page-locked memory, each converted to f64 with `1/(4 pi)` on the host,
//!    in parallel, while the next piece is copied).
//!
//! In the code (`UniformFmm::run_region` for 1-2 and 8's download, `run_device` for the
//! device phases) each phase is a method: `leaf_tasks` (3: `sort`, `leaf_slices`,
//! `launch_leaf_tasks`), `upward_pass` and `start_rank_copies` (4), `own_p2p`,
//! `far_image_locals` and `exchange` (5), `halo_tasks` and `halo_p2m_p2p` (5, a rank's halo),
//! `m2l_pass` (6), `downward_pass` (7), `scatter_fields` and `download` (8); the fixed
//! quantities of a pass are a `Pass`, the buffers they hand on `LeafTasks`, `Expansions`,
//! `RawFields`.

use super::grid::{Extent, UniformGrid};
use super::periodic::{far_image_locals, far_images_for, pack_sources_periodic_into};
use super::slab::{Parts, Ranges};
use super::sort::SCAN_BLOCK;
use super::stencil::RotationTable;
use super::{UniformParams, UniformTimes};
use crate::backend::{blocks, tr_threads, P2P_TARGETS, P2P_THREADS};
use crate::device::{GpuDevice, GpuError, GpuResult, UNIFORM};
use crate::tables::{knm_table, toff, z_tables};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED;
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig,
    PinnedHostSlice, PushKernelArg,
};
use rayon::prelude::*;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use vortex_fmm::expansions::ncoef;
use vortex_fmm::expansions::{expansion_len, Complex64};
use vortex_fmm::kernel::INV_4PI;
use vortex_fmm::periodic::{FarImages, Periodic};
use vortex_fmm::{Fields, Sources};

/// Targets per L2P block in this module (`-DEVAL_BLOCK`): the P2P slice, so both kernels
/// share one task list.
pub const UNIFORM_EVAL_BLOCK: usize = P2P_TARGETS;
/// Pieces of the download, each converted on the host while the next one is copied.
const DOWNLOAD_CHUNKS: usize = 8;
/// Threads per block of the element-wise kernels.
const THREADS: usize = 256;

/// NVRTC defines of the module for order `p`.
pub fn uniform_defines(p: usize) -> [(&'static str, usize); 2] {
    [("ORDER", p), ("EVAL_BLOCK", UNIFORM_EVAL_BLOCK)]
}

/// Tables of one order on the device (built once, reused across evaluations).
struct Tables {
    order: usize,
    r: usize,
    rots: CudaSlice<f32>,
    z_m2m: CudaSlice<f32>,
    z_m2l: CudaSlice<f32>,
    z_l2l: CudaSlice<f32>,
    toff: CudaSlice<i32>,
    knm: CudaSlice<f32>,
}

/// Page-locked host buffers of the upload (`float4` positions then strengths, written by the
/// packing: write-combined) and of the download (6 floats per particle, read by the host:
/// cached), kept between evaluations and grown when too small.
#[derive(Default)]
struct Staging {
    up: Option<PinnedHostSlice<f32>>,
    down: Option<PinnedHostSlice<f32>>,
}

/// The uniform-grid FMM on one device; keeps the tables of the last order used and the
/// page-locked staging buffers (so transfers run at full PCIe speed from the second call on).
pub struct UniformFmm {
    dev: Arc<GpuDevice>,
    tables: Mutex<Option<Tables>>,
    staging: Mutex<Staging>,
    /// The far-image operator of the last periodic grid: (order, m, k, box length bits,
    /// image levels) and the operator.
    far: Mutex<Option<FarKey>>,
    /// A second stream, created at first use.
    copy: OnceLock<Arc<CudaStream>>,
}

type FarKey = ((usize, usize, usize, u64, usize), Arc<FarImages>);

/// A coarse window of `.0` floats and its parts downloaded into page-locked memory (offset in
/// the window, data).
type WindowCopy<'a> = (usize, Vec<(usize, &'a [f32])>);

/// The periodic part of one evaluation: box, far images, and the surface correction that the
/// packing computes.
pub(crate) struct PeriodicRun {
    pub box_length: f64,
    pub far: Arc<FarImages>,
    pub receiver_level: usize,
    /// Subtracted from every velocity (set by the packing).
    pub correction: OnceLock<[f64; 3]>,
}

impl PeriodicRun {
    /// The far-image locals of the receiver level (f32 pairs, grid order) from the top
    /// cells' multipoles `top` (f32 pairs, as downloaded).
    fn far_locals_f32(&self, g: &UniformGrid, top: &[f32]) -> Vec<f32> {
        let ops = self.far.operators();
        let top64: Vec<Complex64> = top
            .chunks_exact(2)
            .map(|c| Complex64::new(c[0] as f64, c[1] as f64))
            .collect();
        let nl = g.n_at(self.receiver_level);
        let mut locals = vec![Complex64::new(0.0, 0.0); nl.pow(3) * expansion_len(ops.order())];
        far_image_locals(&self.far, ops, g, &top64, &mut locals);
        locals
            .iter()
            .flat_map(|c| [c.re as f32, c.im as f32])
            .collect()
    }
}

/// Packs the sources into `out` (`8 N` floats): `float4 (x, y, z, 1/sigma)` rows, then
/// `float4 (ax, ay, az, 0)` rows ([`crate::layout::pack_sources_into`]).
pub fn pack_sources_into(s: &Sources, out: &mut [f32]) {
    let np = s.len();
    let (p, a) = out[..8 * np].split_at_mut(4 * np);
    crate::layout::pack_sources_into(s, p, a);
}

/// A pinned buffer of at least `len` floats in `slot` (reallocated when smaller).
fn pinned<'a>(
    dev: &GpuDevice,
    slot: &'a mut Option<PinnedHostSlice<f32>>,
    len: usize,
    flags: u32,
) -> GpuResult<&'a mut [f32]> {
    if slot.as_ref().map(|b| b.len() < len).unwrap_or(true) {
        *slot = None;
        // SAFETY: the contents are written before they are read (packing / download).
        *slot = Some(unsafe { dev.context().alloc_pinned_with_flags::<f32>(len, flags) }?);
    }
    Ok(&mut slot.as_mut().expect("allocated above").as_mut_slice()?[..len])
}

impl std::fmt::Debug for UniformFmm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UniformFmm")
            .field("device", &self.dev)
            .finish()
    }
}

/// One evaluation on a fresh [`UniformFmm`] (tables built for this call; keep a
/// [`UniformFmm`] to reuse them).
pub fn evaluate_uniform(
    dev: &Arc<GpuDevice>,
    sources: &Sources,
    params: &UniformParams,
) -> GpuResult<(Fields, UniformTimes)> {
    UniformFmm::new(dev.clone()).evaluate(sources, params)
}

fn grid1(n: usize, threads: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(threads).max(1) as u32, 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `[[i32; 4]]`-shaped device buffers are `int4` arrays: 4 `i32` per element.
fn i4(n: usize) -> usize {
    4 * n.max(1)
}

/// Sums the bytes of the buffers it is shown.
#[derive(Default)]
struct Bytes(usize);
impl Bytes {
    fn add<T>(&mut self, s: &CudaSlice<T>) {
        self.0 += s.len() * std::mem::size_of::<T>();
    }
}

/// The part of the grid one device evaluates: every leaf on one GPU; on a rank, the leaf
/// planes `own` (targets) inside `halo` (planes whose particles are present as sources).
/// Upward pass, M2L and L2L run over the cells overlapping the own planes at each level.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Region {
    pub grid: UniformGrid,
    pub own: (usize, usize),
    pub halo: (usize, usize),
}

impl Region {
    pub fn whole(grid: UniformGrid) -> Self {
        let n = grid.n();
        Region {
            grid,
            own: (0, n),
            halo: (0, n),
        }
    }
    pub fn is_whole(&self) -> bool {
        self.own == (0, self.grid.n())
    }
    /// First cell (level-local index) and count of the cells of level `l` overlapping the
    /// own planes (one contiguous range: z is the slowest index).
    pub fn level_cells(&self, l: usize) -> (usize, usize) {
        let s = self.grid.k - l;
        let nl = self.grid.n_at(l);
        let (a, b) = (self.own.0 >> s, ((self.own.1 - 1) >> s) + 1);
        (a * nl * nl, (b - a) * nl * nl)
    }
}

/// What a rank adds to the pipeline of its [`Region`] (`super::distributed`): the halo
/// particles and the coarse multipoles of the other ranks. The pipeline calls
/// `coarse_ranges` after the M2M (and downloads those ranges of the multipoles), then, with
/// the P2P among the own particles queued on the device, `halo_count` and `coarse` (the
/// host-side exchanges), `pack_halo`, and uploads the completed coarse windows.
pub(crate) trait RankExchange {
    /// Float ranges of the multipole array holding the coarse windows (levels `< k`).
    fn coarse_ranges(&self) -> Vec<(usize, usize)>;
    /// Per window, the float ranges (relative to its start) that `coarse` reads (downloaded;
    /// the rest of the window is left zero) and those it changes (uploaded).
    fn coarse_parts(&self) -> Vec<(Ranges, Ranges)>;
    /// Float ranges of the multipole array holding the leaf multipoles other ranks need
    /// (downloaded after the P2M, in this order, and handed to `leaf_multipoles`).
    fn leaf_ranges(&self) -> Vec<(usize, usize)>;
    /// Exchanges the leaf multipoles: this rank's parts (of `leaf_ranges`) in, the float
    /// ranges of the multipole array with the received leaf multipoles out.
    fn leaf_multipoles(&mut self, parts: &[&[f32]]) -> GpuResult<Parts<f32>>;
    /// Receives the halo particles; returns their count.
    fn halo_count(&mut self) -> GpuResult<usize>;
    /// Writes the halo particles into `out` (`8 nh` floats: position rows, then strength rows).
    fn pack_halo(&self, out: &mut [f32]);
    /// Completes the coarse windows (this rank's partial multipoles in, sums out).
    fn coarse(&mut self, windows: &mut [Vec<f32>]) -> GpuResult<()>;
    /// Adds to the time of the coarse exchange (copies between device and host).
    fn add_seconds(&mut self, s: f64);
}

/// Particles sorted into the leaves on the device.
struct Sorted {
    /// Input index of each sorted particle.
    perm: CudaSlice<i32>,
    /// `n^3 + 1` leaf offsets.
    starts: CudaSlice<i32>,
    pos: CudaSlice<f32>,
    str: CudaSlice<f32>,
}

/// The fixed quantities of one device pass over a [`Region`] (phases 3-9).
struct Pass<'a> {
    p: usize,
    np: usize,
    region: &'a Region,
    g: UniformGrid,
    per: Option<&'a PeriodicRun>,
    s: Arc<CudaStream>,
    /// Leaves per z plane (`n^2`).
    plane: usize,
    /// First own leaf (index in the leaf level) and the number of own leaves.
    c_own: usize,
    nown: usize,
    /// Global cell index of the first leaf.
    leaf_base: i32,
    /// Runs of source cells per leaf in the P2P tasks: 9, or 18 when periodic.
    runs_per_leaf: usize,
}

impl<'a> Pass<'a> {
    fn new(
        p: usize,
        np: usize,
        region: &'a Region,
        per: Option<&'a PeriodicRun>,
        s: Arc<CudaStream>,
    ) -> Self {
        let g = region.grid;
        let plane = g.n() * g.n();
        Pass {
            p,
            np,
            region,
            g,
            per,
            s,
            plane,
            c_own: region.own.0 * plane,
            nown: (region.own.1 - region.own.0) * plane,
            leaf_base: g.level_offset(g.k) as i32,
            runs_per_leaf: if per.is_some() { 18 } else { 9 },
        }
    }

    /// The `periodic` flag of the kernels.
    fn periodic_i(&self) -> i32 {
        self.per.is_some() as i32
    }

    /// The box length as `p2p_near` takes it (0: free space).
    fn period(&self) -> f32 {
        self.per.map(|q| q.box_length as f32).unwrap_or(0.0)
    }
}

/// The sorted particles and the task lists of the own leaves (phase 3); `[[i32; 4]]`-shaped
/// arrays are `int4` on the device.
struct LeafTasks {
    sorted: Sorted,
    /// `nown + 1` offsets of the first P2P / L2P slice of each own leaf, and their host copy.
    slice_starts: CudaSlice<i32>,
    ss: Vec<i32>,
    /// Number of slices (P2P and L2P tasks).
    ntasks: usize,
    /// P2M per own leaf `(first, count, global cell, 0)`.
    p2m: CudaSlice<i32>,
    /// P2P per slice `(first, count, first run, end run)` and its source count.
    near: CudaSlice<i32>,
    near_nsrc: CudaSlice<i32>,
    /// L2P per slice `(first, count, global cell, 0)`.
    l2p: CudaSlice<i32>,
    /// Runs of source particles per own leaf `(first, count, image, 0)`.
    runs: CudaSlice<i32>,
    /// P2P pairs, summed by the task kernels.
    pairs: CudaSlice<u64>,
}

/// Multipoles and locals (`3 NC` complex per cell of every level) and the cell centres.
struct Expansions {
    mult: CudaSlice<f32>,
    loc: CudaSlice<f32>,
    centers: CudaSlice<f32>,
}

/// Raw fields of the sorted particles (`3 np` floats each, no `1/(4 pi)`).
struct RawFields {
    vel: CudaSlice<f32>,
    strf: CudaSlice<f32>,
}

/// The P2P among the own particles queued on the device (phase 5).
struct OwnP2p {
    fields: RawFields,
    /// Periodic: the top cells' multipoles, downloaded before the P2P was queued.
    top: Option<Vec<f32>>,
    start: CudaEvent,
    end: CudaEvent,
}

/// The copies of phase 4 on a rank into page-locked memory: per coarse window its length and
/// downloaded parts, the leaf multipoles other ranks need, and the event that ends them.
struct RankCopies<'b> {
    windows: Vec<WindowCopy<'b>>,
    leaves: Vec<&'b [f32]>,
    done: CudaEvent,
}

/// The task arrays one `u_leaf_tasks` launch writes (`int4` arrays as `i32` quadruples).
struct TaskOutputs<'x> {
    p2m: CudaViewMut<'x, i32>,
    near: CudaViewMut<'x, i32>,
    nsrc: CudaViewMut<'x, i32>,
    l2p: CudaViewMut<'x, i32>,
    runs: CudaViewMut<'x, i32>,
}

/// The tasks of the halo leaves on a rank (phase 6).
struct HaloTasks {
    /// P2M per halo leaf, and their count.
    p2m: CudaSlice<i32>,
    count: usize,
    /// Own planes next to the halo (z ranges of leaf planes).
    ranges: Vec<(usize, usize)>,
    /// P2P from the halo per own slice, source counts, 9 runs per own leaf of `ranges`.
    near: CudaSlice<i32>,
    nsrc: CudaSlice<i32>,
    runs: CudaSlice<i32>,
}

impl UniformFmm {
    pub fn new(dev: Arc<GpuDevice>) -> Self {
        Self {
            dev,
            tables: Mutex::new(None),
            staging: Mutex::new(Staging::default()),
            far: Mutex::new(None),
            copy: OnceLock::new(),
        }
    }

    /// The device on visible index `index` (an error, never a panic, without a GPU).
    pub fn on_device(index: usize) -> GpuResult<Self> {
        Ok(Self::new(GpuDevice::get(index)?))
    }

    pub fn device(&self) -> &Arc<GpuDevice> {
        &self.dev
    }

    /// Compiles the module of order `p` now (otherwise at the first evaluation).
    pub fn warm_up(&self, p: usize) -> GpuResult<()> {
        self.dev.module(&UNIFORM, &uniform_defines(p))?;
        Ok(())
    }

    fn func(&self, p: usize, name: &str) -> GpuResult<CudaFunction> {
        self.dev.function(&UNIFORM, &uniform_defines(p), name)
    }

    /// The second stream of the device (copies that overlap the kernels of the first).
    fn copy_stream(&self) -> GpuResult<Arc<CudaStream>> {
        if let Some(c) = self.copy.get() {
            return Ok(c.clone());
        }
        let c = self.dev.context().new_stream()?;
        Ok(self.copy.get_or_init(|| c).clone())
    }

    /// Runs `f` between two CUDA events ([`GpuDevice::event_timed`]).
    fn event_timed(&self, f: impl FnOnce() -> GpuResult<()>) -> GpuResult<f64> {
        self.dev.event_timed(f)
    }

    /// Makes sure the tables of order `p` with offsets up to `r` are on the device.
    fn ensure_tables(&self, p: usize, r: usize) -> GpuResult<()> {
        let mut t = self.tables.lock().expect("tables poisoned");
        if matches!(&*t, Some(x) if x.order == p && x.r >= r) {
            return Ok(());
        }
        let s = self.dev.stream();
        let t0 = Instant::now();
        let rt = RotationTable::new(p, r);
        let (a, b, c) = z_tables(p);
        *t = Some(Tables {
            order: p,
            r,
            rots: s.clone_htod(&rt.records)?,
            z_m2m: s.clone_htod(&a)?,
            z_m2l: s.clone_htod(&b)?,
            z_l2l: s.clone_htod(&c)?,
            toff: s.clone_htod(&toff(p))?,
            knm: s.clone_htod(&knm_table(p))?,
        });
        log::debug!(
            "uniform FMM: rotation table p = {p}, r = {r} built in {:.0} ms",
            t0.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Exclusive scan of `input[..len]` into `out[..=len]` (`out[len]` = total): the three
    /// kernels emulated by `sort::exclusive_scan`.
    fn scan(
        &self,
        p: usize,
        input: &CudaSlice<i32>,
        len: usize,
        out: &mut CudaSlice<i32>,
    ) -> GpuResult<()> {
        let s = self.dev.stream();
        let nb = len.div_ceil(SCAN_BLOCK).max(1);
        let mut sums = s.alloc_zeros::<i32>(nb)?;
        let (len_i, nb_i) = (len as i32, nb as i32);
        let f = self.func(p, "u_scan_blocks")?;
        let mut b = s.launch_builder(&f);
        b.arg(input).arg(&len_i).arg(&mut *out).arg(&mut sums);
        // SAFETY: u_scan_blocks(const int* in, int len, int* out, int* sums): the arguments in this
        // order and of these types; input holds len ints, out len + 1, sums nb = ceil(len /
        // SCAN_BLOCK); nb blocks of SCAN_THREADS = 256 threads (its launch bounds), SCAN_ITEMS
        // elements each, elements >= len skipped.
        unsafe { b.launch(blocks(nb, 256)) }?;
        let f = self.func(p, "u_scan_sums")?;
        let mut b = s.launch_builder(&f);
        b.arg(&mut sums).arg(&nb_i).arg(&mut *out).arg(&len_i);
        // SAFETY: u_scan_sums(int* sums, int nb, int* out, int len): the arguments in this order
        // and of these types; sums holds nb ints, out len + 1 (out[len] gets the total); one block
        // of SCAN_THREADS = 256 threads.
        unsafe { b.launch(blocks(1, 256)) }?;
        let f = self.func(p, "u_scan_add")?;
        let mut b = s.launch_builder(&f);
        b.arg(&mut *out).arg(&len_i).arg(&sums);
        // SAFETY: u_scan_add(int* out, int len, const int* sums): the arguments in this order and
        // of these types; out holds len + 1 ints, sums nb = ceil(len / SCAN_BLOCK); threads i >=
        // len do nothing.
        unsafe { b.launch(grid1(len, THREADS)) }?;
        Ok(())
    }

    /// Counting sort of `np` particles (`input`: `float4` position rows, then strength rows)
    /// into the leaves of `g`, in-cell order by input index; kernel time added to `k_time`.
    fn sort(
        &self,
        p: usize,
        input: &CudaSlice<f32>,
        np: usize,
        g: &UniformGrid,
        k_time: &mut f64,
        bytes: &mut Bytes,
    ) -> GpuResult<Sorted> {
        let s = self.dev.stream();
        let (pos_in, str_in) = (input.slice(..4 * np), input.slice(4 * np..8 * np));
        let (n, nleaf) = (g.n(), g.leaves());
        let (np_i, n_i, nleaf_i) = (np as i32, n as i32, nleaf as i32);
        let (lo, inv_w) = g.f32_params();
        let mut cell = s.alloc_zeros::<i32>(np)?;
        let mut slot = s.alloc_zeros::<i32>(np)?;
        let mut counts = s.alloc_zeros::<i32>(nleaf)?;
        let mut starts = s.alloc_zeros::<i32>(nleaf + 1)?;
        let mut perm0 = s.alloc_zeros::<i32>(np)?;
        let mut perm = s.alloc_zeros::<i32>(np)?;
        let mut spos = s.alloc_zeros::<f32>(4 * np)?;
        let mut sstr = s.alloc_zeros::<f32>(4 * np)?;
        for b in [&cell, &slot, &perm0, &perm, &counts, &starts] {
            bytes.add(b);
        }
        bytes.add(&spos);
        bytes.add(&sstr);
        *k_time += self.event_timed(|| {
            let f = self.func(p, "u_cell_index")?;
            let mut b = s.launch_builder(&f);
            b.arg(&pos_in).arg(&np_i);
            b.arg(&lo[0]).arg(&lo[1]).arg(&lo[2]).arg(&inv_w).arg(&n_i);
            b.arg(&mut cell).arg(&mut slot).arg(&mut counts);
            // SAFETY: u_cell_index(const float4* pos, int np, float lox, loy, loz, float inv_w, int
            // n, int* cell, int* slot, int* counts): the arguments in this order and of these
            // types; pos_in holds np float4, cell and slot np ints, counts n^3 = nleaf (the cell
            // index is clamped to the grid); threads i >= np return.
            unsafe { b.launch(grid1(np, THREADS)) }?;
            self.scan(p, &counts, nleaf, &mut starts)?;
            let f = self.func(p, "u_scatter")?;
            let mut b = s.launch_builder(&f);
            b.arg(&cell)
                .arg(&slot)
                .arg(&starts)
                .arg(&np_i)
                .arg(&mut perm0);
            // SAFETY: u_scatter(const int* cell, const int* slot, const int* starts, int np, int*
            // perm): the arguments in this order and of these types; cell and slot hold np ints,
            // starts nleaf + 1 (the scan of the counts, so starts[c] + slot < starts[c + 1]), perm0
            // np; threads i >= np do nothing.
            unsafe { b.launch(grid1(np, THREADS)) }?;
            let f = self.func(p, "u_sort_cells")?;
            let mut b = s.launch_builder(&f);
            b.arg(&starts).arg(&nleaf_i).arg(&perm0).arg(&mut perm);
            // SAFETY: u_sort_cells(const int* starts, int ncells, const int* in, int* out): the
            // arguments in this order and of these types; starts holds nleaf + 1 ints, perm0 and
            // perm np; one warp per leaf (32 nleaf threads), warps >= nleaf return.
            unsafe { b.launch(grid1(32 * nleaf, THREADS)) }?;
            let f = self.func(p, "u_gather")?;
            let mut b = s.launch_builder(&f);
            b.arg(&perm).arg(&np_i).arg(&pos_in).arg(&str_in);
            b.arg(&mut spos).arg(&mut sstr);
            // SAFETY: u_gather(const int* perm, int np, const float4* pos_in, str_in, float4* pos,
            // float4* str): the arguments in this order and of these types; perm holds np indices
            // (< np), pos_in, str_in, spos and sstr np float4 each; threads k >= np return.
            unsafe { b.launch(grid1(np, THREADS)) }?;
            Ok(())
        })?;
        Ok(Sorted {
            perm,
            starts,
            pos: spos,
            str: sstr,
        })
    }

    /// Velocity and stretching of every source at every source (free space, input order,
    /// `1/(4 pi)` applied) and the phase times.
    pub fn evaluate(
        &self,
        sources: &Sources,
        params: &UniformParams,
    ) -> GpuResult<(Fields, UniformTimes)> {
        let mut f = Fields::default();
        let tm = self.evaluate_into(sources, params, &mut f)?;
        Ok((f, tm))
    }

    /// [`UniformFmm::evaluate`] into `out` (resized to the sources): a time-stepping caller
    /// that keeps `out` saves the first-touch page faults of fresh output arrays (~0.5 GB at
    /// N = 1e7).
    pub fn evaluate_into(
        &self,
        sources: &Sources,
        params: &UniformParams,
        out: &mut Fields,
    ) -> GpuResult<UniformTimes> {
        params.validate()?;
        let np = sources.len();
        let t = Instant::now();
        let ext = Extent::of(&sources.position, &sources.sigma).ok_or_else(|| {
            GpuError::Unsupported(
                "sources with a non-finite value or a non-positive core radius".into(),
            )
        })?;
        if sources.strength.len() != np || sources.sigma.len() != np {
            return Err(GpuError::Unsupported("sources of unequal lengths".into()));
        }
        let region = Region::whole(params.grid_for(&ext, np));
        let host = t.elapsed().as_secs_f64();
        let pack = |up: &mut [f32]| {
            pack_sources_into(sources, up);
            Ok(())
        };
        let mut tm = self.run_region(params.order, np, &pack, &region, None, None, out)?;
        tm.host_prepare += host;
        tm.total += host;
        Ok(tm)
    }

    /// Periodic velocity and stretching of every source at every source (input order,
    /// `1/(4 pi)` applied; zero-mean velocity) in the box `[-L/2, L/2)^3` of `periodic`
    /// (positions are wrapped): the lists of [`super::stencil`] cover the `3 x 3 x 3` box
    /// images, the far images come from `vortex_fmm::periodic::FarImages` (see [`super::periodic`]).
    /// Errors: a total strength that is not zero, a box too small for the cores, bad values.
    pub fn evaluate_periodic(
        &self,
        sources: &Sources,
        params: &UniformParams,
        periodic: &Periodic,
    ) -> GpuResult<(Fields, UniformTimes)> {
        super::periodic::check_call(sources, params, periodic)?;
        let np = sources.len();
        let t = Instant::now();
        // the largest core radius fixes the grid (the other sums come with the packing)
        let (_, _, sigma_max, ok) = super::grid::bounds(&sources.position, &sources.sigma);
        if !ok {
            return Err(GpuError::Unsupported(
                "sources with a non-finite value or a non-positive core radius".into(),
            ));
        }
        let g = params.grid_for_periodic(&Extent::periodic(periodic, sigma_max), np)?;
        let far = self.far_images(&g, params.order, periodic)?;
        let run = PeriodicRun {
            box_length: periodic.box_length,
            far,
            receiver_level: g.receiver_level(),
            correction: OnceLock::new(),
        };
        let host = t.elapsed().as_secs_f64();
        let pack = |up: &mut [f32]| {
            let (p, a) = up[..8 * np].split_at_mut(4 * np);
            let sums = pack_sources_periodic_into(sources, periodic, p, a);
            sums.check(periodic)?;
            let _ = run
                .correction
                .set(sums.surface_correction(periodic.box_length));
            Ok(())
        };
        let region = Region::whole(g);
        let mut f = Fields::default();
        let mut tm = self.run_region(params.order, np, &pack, &region, None, Some(&run), &mut f)?;
        tm.host_prepare += host;
        tm.total += host;
        Ok((f, tm))
    }

    /// The far-image operator of a periodic grid, order and box (its lattice sums take
    /// ~0.1 s: built once and kept for the next evaluation with the same key).
    fn far_images(
        &self,
        g: &UniformGrid,
        p: usize,
        periodic: &Periodic,
    ) -> GpuResult<Arc<FarImages>> {
        let key = (
            p,
            g.m,
            g.k,
            periodic.box_length.to_bits(),
            periodic.image_levels,
        );
        let mut slot = self.far.lock().expect("far images poisoned");
        if let Some((k, f)) = slot.as_ref() {
            if *k == key {
                return Ok(f.clone());
            }
        }
        let t = Instant::now();
        let f = Arc::new(far_images_for(g, p, periodic));
        log::debug!(
            "uniform FMM: far images (p = {p}, K = {}, {} receivers) built in {:.0} ms",
            periodic.image_levels,
            f.receivers().len(),
            t.elapsed().as_secs_f64() * 1e3
        );
        *slot = Some((key, f.clone()));
        Ok(f)
    }

    /// The pipeline over a [`Region`] of the grid for the `np` particles of its own leaves
    /// (`pack` writes them into the `8 np` floats of the upload buffer: `float4` position
    /// rows, then strength rows). On a rank, `ex` brings the halo particles (sorted apart:
    /// sources only) and completes the coarse multipoles; both exchanges run on the host
    /// while the device computes the P2P among the own particles. Fields of the `np`
    /// particles in their input order.
    #[allow(clippy::too_many_arguments)] // the one internal driver behind three entry points
    pub(crate) fn run_region(
        &self,
        p: usize,
        np: usize,
        pack: &dyn Fn(&mut [f32]) -> GpuResult<()>,
        region: &Region,
        ex: Option<&mut dyn RankExchange>,
        per: Option<&PeriodicRun>,
        fields: &mut Fields,
    ) -> GpuResult<UniformTimes> {
        check_region(p, np, region, ex.is_some(), per.is_some())?;
        let mut tm = UniformTimes::default();
        let mut bytes = Bytes::default();
        let s = self.dev.stream().clone();

        // ---- 1. host: packing, tables
        let t = Instant::now();
        let mut staging_guard = self.staging.lock().expect("staging poisoned");
        let staging: &mut Staging = &mut staging_guard;
        let up = pinned(
            &self.dev,
            &mut staging.up,
            8 * np,
            CU_MEMHOSTALLOC_WRITECOMBINED,
        )?;
        pack(up)?;
        tm.host_prepare = t.elapsed().as_secs_f64();

        // ---- 2. upload
        let t = Instant::now();
        // SAFETY: every element is written by the copy below before any kernel reads it.
        let mut input = unsafe { s.alloc::<f32>(8 * np) }?;
        s.memcpy_htod(&*up, &mut input)?;
        s.synchronize()?;
        bytes.add(&input);
        tm.upload = t.elapsed().as_secs_f64();

        let out6 = self.run_device(p, np, &input, region, ex, per, staging, &mut tm, &mut bytes)?;
        drop(input);
        self.download(&out6, np, per, staging, fields, &mut tm)?;
        tm.total = tm.host_prepare
            + tm.upload
            + tm.sort
            + tm.upward
            + tm.m2l
            + tm.downward
            + tm.p2p
            + tm.download;
        Ok(tm)
    }

    /// Velocity and stretching of `np` particles at themselves from their packed rows already
    /// on the device (`input`: `8 np` floats, the layout of [`pack_sources_into`]; periodic:
    /// positions inside the box), for a caller that keeps the particles on the device between
    /// evaluations: the fields stay on the device, `6 np` floats `(u, s)` per particle in input
    /// order, **without** the factor `1/(4 pi)` and (periodic) without the surface correction
    /// (both are the caller's: it has the sums of its particles). `sigma_max` is the largest
    /// core radius, `lo`/`hi` the bounds of the positions (free space; ignored when periodic).
    #[allow(clippy::too_many_arguments)]
    pub fn evaluate_device(
        &self,
        input: &CudaSlice<f32>,
        np: usize,
        bounds: ([f64; 3], [f64; 3]),
        sigma_max: f64,
        params: &UniformParams,
        periodic: Option<&Periodic>,
    ) -> GpuResult<(CudaSlice<f32>, UniformTimes)> {
        params.validate()?;
        if input.len() < 8 * np {
            return Err(GpuError::Unsupported(format!(
                "a device input of {} floats for {np} particles (need {})",
                input.len(),
                8 * np
            )));
        }
        let t = Instant::now();
        let (region, run) = match periodic {
            None => {
                let ext = Extent::from_bounds(bounds.0, bounds.1, sigma_max);
                (Region::whole(params.grid_for(&ext, np)), None)
            }
            Some(per) => {
                per.validate()
                    .map_err(|e| GpuError::Unsupported(e.to_string()))?;
                let g = params.grid_for_periodic(&Extent::periodic(per, sigma_max), np)?;
                let far = self.far_images(&g, params.order, per)?;
                let run = PeriodicRun {
                    box_length: per.box_length,
                    far,
                    receiver_level: g.receiver_level(),
                    correction: OnceLock::new(),
                };
                (Region::whole(g), Some(run))
            }
        };
        check_region(params.order, np, &region, false, run.is_some())?;
        let mut tm = UniformTimes {
            host_prepare: t.elapsed().as_secs_f64(),
            ..Default::default()
        };
        let mut bytes = Bytes::default();
        let mut staging_guard = self.staging.lock().expect("staging poisoned");
        let out6 = self.run_device(
            params.order,
            np,
            input,
            &region,
            None,
            run.as_ref(),
            &mut staging_guard,
            &mut tm,
            &mut bytes,
        )?;
        tm.total =
            tm.host_prepare + tm.sort + tm.upward + tm.m2l + tm.downward + tm.p2p + tm.download;
        Ok((out6, tm))
    }

    /// Phases 3-9 of the pipeline on particles already on the device (`input`, `8 np`
    /// floats): sort, upward pass, P2P (with the rank exchanges of `ex`), M2L, downward pass,
    /// and the fields scattered back to input order (`6 np` floats, raw sums: no `1/(4 pi)`).
    /// Each phase is a method below; the wall time of each lands in `tm`.
    #[allow(clippy::too_many_arguments)]
    fn run_device(
        &self,
        p: usize,
        np: usize,
        input: &CudaSlice<f32>,
        region: &Region,
        mut ex: Option<&mut dyn RankExchange>,
        per: Option<&PeriodicRun>,
        staging: &mut Staging,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<CudaSlice<f32>> {
        let ps = Pass::new(p, np, region, per, self.dev.stream().clone());
        (tm.n, tm.m, tm.k) = (ps.g.n(), ps.g.m, ps.g.k);
        self.ensure_tables(p, ps.g.max_offset())?;
        self.warm_up(p)?; // compiled at the first call only (not part of the times after it)

        // ---- 3. sort and tasks
        let t = Instant::now();
        let mut tasks = self.leaf_tasks(&ps, input, tm, bytes)?;
        tm.sort = t.elapsed().as_secs_f64();

        // ---- 4. upward (own particles); on a rank, the copies for the exchanges start
        let t = Instant::now();
        let guard = self.tables.lock().expect("tables poisoned");
        let tb = guard.as_ref().expect("tables built above");
        let mut xp = self.upward_pass(&ps, &tasks, tb, tm, bytes)?;
        let Staging { up, down } = staging;
        let copies = match ex.as_deref_mut() {
            Some(e) => Some(self.start_rank_copies(&ps, e, &xp.mult, down)?),
            None => None,
        };
        tm.upward = t.elapsed().as_secs_f64();

        // ---- 5. P2P among the own particles, queued; the exchanges run on the host meanwhile
        let t = Instant::now();
        let own = self.own_p2p(&ps, &tasks, &xp.mult, bytes)?;
        let mut fl = own.fields;
        if let (Some(q), Some(top)) = (per, own.top) {
            self.far_image_locals(&ps, q, &top, &mut xp.loc, tm)?;
        }
        let halo = match (ex, copies) {
            (Some(e), Some(c)) => self.exchange(&ps, e, c, &mut xp.mult, up, tm, bytes)?,
            _ => None,
        };
        own.end.synchronize()?;
        tm.k_p2p = own.start.elapsed_ms(&own.end)? as f64 * 1e-3;
        tm.p2p = t.elapsed().as_secs_f64();

        // ---- 6. halo leaves: P2M (never summed into parents: their owners did that) and
        // the P2P from the halo to the own planes next to it
        if let Some(h) = &halo {
            let t = Instant::now();
            let ht = self.halo_tasks(&ps, h, &mut tasks, tm)?;
            self.halo_p2m_p2p(&ps, h, &ht, &tasks, &mut xp, &mut fl, tb, tm)?;
            tm.p2p += t.elapsed().as_secs_f64();
        }
        tm.p2p_pairs = ps.s.clone_dtoh(&tasks.pairs)?[0];

        // ---- 7. M2L
        let t = Instant::now();
        self.m2l_pass(&ps, &mut xp, tb, tm)?;
        tm.m2l = t.elapsed().as_secs_f64();
        drop(halo);

        // ---- 8. downward: L2L, L2P
        let t = Instant::now();
        self.downward_pass(&ps, &tasks, &mut xp, &mut fl, tb, tm)?;
        tm.downward = t.elapsed().as_secs_f64();
        drop(guard);

        // ---- 9. back to input order
        let t = Instant::now();
        let out6 = self.scatter_fields(&ps, tasks, xp, fl, tm, bytes)?;
        tm.download = t.elapsed().as_secs_f64();
        Ok(out6)
    }

    /// Phase 3: the particles sorted into the leaves ([`Self::sort`]), the P2P / L2P slices
    /// of the own leaves ([`Self::leaf_slices`]), and the task lists of the own leaves (P2M per
    /// leaf, P2P and L2P per slice, the runs of source cells per leaf).
    fn leaf_tasks(
        &self,
        ps: &Pass,
        input: &CudaSlice<f32>,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<LeafTasks> {
        let s = &ps.s;
        let sorted = self.sort(ps.p, input, ps.np, &ps.g, &mut tm.k_sort, bytes)?;
        let (slice_starts, ss) = self.leaf_slices(ps, &sorted.starts, &mut tm.k_sort)?;
        let nown = ps.nown;
        let ntasks = ss[nown] as usize;
        let mut p2m = s.alloc_zeros::<i32>(i4(nown))?;
        let mut near = s.alloc_zeros::<i32>(i4(ntasks))?;
        let mut near_nsrc = s.alloc_zeros::<i32>(ntasks.max(1))?;
        let mut l2p = s.alloc_zeros::<i32>(i4(ntasks))?;
        let mut runs = s.alloc_zeros::<i32>(i4(ps.runs_per_leaf * nown))?;
        let mut pairs = s.alloc_zeros::<u64>(1)?;
        for b in [&p2m, &near, &near_nsrc, &l2p, &runs] {
            bytes.add(b);
        }
        tm.k_sort += self.event_timed(|| {
            let f = self.func(ps.p, "u_leaf_tasks")?;
            let out = TaskOutputs {
                p2m: p2m.as_view_mut(),
                near: near.as_view_mut(),
                nsrc: near_nsrc.as_view_mut(),
                l2p: l2p.as_view_mut(),
                runs: runs.as_view_mut(),
            };
            let sources = (&sorted.starts, &slice_starts.as_view());
            let leaves = (ps.c_own, nown, ps.periodic_i());
            self.launch_leaf_tasks(ps, &f, &sorted.starts, sources, leaves, out, &mut pairs)
        })?;
        Ok(LeafTasks {
            sorted,
            slice_starts,
            ss,
            ntasks,
            p2m,
            near,
            near_nsrc,
            l2p,
            runs,
            pairs,
        })
    }

    /// Phase 3: the number of P2P / L2P slices of `P2P_TARGETS` targets of each own leaf,
    /// scanned into `nown + 1` offsets on the device, and downloaded (the only mid-way
    /// download: the task count sizes the task arrays).
    fn leaf_slices(
        &self,
        ps: &Pass,
        starts: &CudaSlice<i32>,
        k_time: &mut f64,
    ) -> GpuResult<(CudaSlice<i32>, Vec<i32>)> {
        let s = &ps.s;
        let (c_own, nown) = (ps.c_own, ps.nown);
        let mut nslices = s.alloc_zeros::<i32>(nown.max(1))?;
        let mut slice_starts = s.alloc_zeros::<i32>(nown + 1)?;
        let (nown_i, slice_i) = (nown as i32, P2P_TARGETS as i32);
        *k_time += self.event_timed(|| {
            let f = self.func(ps.p, "u_slices")?;
            let mut b = s.launch_builder(&f);
            let own_starts = starts.slice(c_own..c_own + nown + 1);
            b.arg(&own_starts)
                .arg(&nown_i)
                .arg(&slice_i)
                .arg(&mut nslices);
            // SAFETY: u_slices(const int* starts, int ncells, int slice, int* out): the
            // arguments in this order and of these types; own_starts holds nown + 1 ints,
            // nslices nown (at least one); threads c >= nown do nothing.
            unsafe { b.launch(grid1(nown, THREADS)) }?;
            self.scan(ps.p, &nslices, nown, &mut slice_starts)?;
            Ok(())
        })?;
        drop(nslices);
        let ss = s.clone_dtoh(&slice_starts)?;
        Ok((slice_starts, ss))
    }

    /// Queues `u_leaf_tasks` for the `cnt` leaves from `c0` (index in the leaf level; `leaves`
    /// = `(c0, cnt, periodic flag)`): the targets in `starts`, the sources of the runs in
    /// `sources.0`, the slice offsets (`cnt + 1`, indexed from the first leaf) in `sources.1`;
    /// the P2P pairs added to `pairs`.
    #[allow(clippy::too_many_arguments)]
    fn launch_leaf_tasks(
        &self,
        ps: &Pass,
        f: &CudaFunction,
        starts: &CudaSlice<i32>,
        sources: (&CudaSlice<i32>, &CudaView<'_, i32>),
        (c0, cnt, periodic): (usize, usize, i32),
        mut out: TaskOutputs<'_>,
        pairs: &mut CudaSlice<u64>,
    ) -> GpuResult<()> {
        let (n_i, slice_i) = (ps.g.n() as i32, P2P_TARGETS as i32);
        let (c0_i, cnt_i) = (c0 as i32, cnt as i32);
        let mut b = ps.s.launch_builder(f);
        b.arg(starts)
            .arg(sources.0)
            .arg(sources.1)
            .arg(&n_i)
            .arg(&ps.leaf_base)
            .arg(&slice_i)
            .arg(&c0_i)
            .arg(&cnt_i)
            .arg(&periodic);
        b.arg(&mut out.p2m)
            .arg(&mut out.near)
            .arg(&mut out.nsrc)
            .arg(&mut out.l2p)
            .arg(&mut out.runs)
            .arg(pairs);
        // SAFETY: u_leaf_tasks(const int* starts, src_starts, slice_starts, int n, leaf_base,
        // slice, c0, ncells, periodic, int4* p2m_tasks, near_tasks, int* near_nsrc, int4*
        // l2p_tasks, runs, u64* pairs): the arguments in this order and of these types; both
        // starts hold n^3 + 1 ints (c0 + cnt <= n^3), the slice offsets cnt + 1 (their last
        // at most the task count), p2m cnt int4 at least, near, nsrc and l2p the task count,
        // runs 9 (18 when periodic: the kernel's rpl) int4 per leaf; threads u >= cnt return.
        unsafe { b.launch(grid1(cnt, 128)) }?;
        Ok(())
    }

    /// Phase 4: cell centres of every level, P2M at the own leaves, M2M level by level
    /// upwards over the cells overlapping the own planes.
    fn upward_pass(
        &self,
        ps: &Pass,
        tasks: &LeafTasks,
        tb: &Tables,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<Expansions> {
        let (s, g, p) = (&ps.s, &ps.g, ps.p);
        let k = g.k;
        let r_i = tb.r as i32;
        let len = g.total_cells() * 2 * 3 * ncoef(p);
        let mut mult = s.alloc_zeros::<f32>(len)?;
        let loc = s.alloc_zeros::<f32>(len)?;
        let mut centers = s.alloc_zeros::<f32>(4 * g.total_cells())?;
        bytes.add(&mult);
        bytes.add(&loc);
        bytes.add(&centers);
        let trt = tr_threads(p);
        tm.k_p2m = self.event_timed(|| {
            let f = self.func(p, "u_centers")?;
            for l in 0..=k {
                let (off, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let w = g.width(l);
                let mut b = s.launch_builder(&f);
                b.arg(&off)
                    .arg(&nl)
                    .arg(&g.lo[0])
                    .arg(&g.lo[1])
                    .arg(&g.lo[2])
                    .arg(&w);
                b.arg(&mut centers);
                // SAFETY: u_centers(int level_off, int nl, double lox, loy, loz, double w,
                // float4* centers): the arguments in this order and of these types; centers
                // holds one float4 per cell of every level, level l at level_off .. level_off
                // + nl^3; threads c >= nl^3 return.
                unsafe { b.launch(grid1(g.n_at(l).pow(3), THREADS)) }?;
            }
            let f = self.func(p, "p2m")?;
            let mut b = s.launch_builder(&f);
            b.arg(&tasks.sorted.pos)
                .arg(&tasks.sorted.str)
                .arg(&tasks.p2m)
                .arg(&centers)
                .arg(&tb.knm);
            b.arg(&mut mult);
            // SAFETY: p2m(const float4* spos, sstr, const int4* tasks, const float4* centers,
            // const float* knm, float2* mult) of fmm.cu: the arguments in this order and of
            // these types; one block per own leaf (nown tasks), P2M_THREADS = NC rounded up to
            // a warp threads; the tasks index the np sorted particles and the global cells
            // of mult (3 NC complex each) and centers.
            unsafe { b.launch(blocks(ps.nown, ncoef(p).div_ceil(32) * 32)) }?;
            Ok(())
        })?;
        tm.k_m2m = self.event_timed(|| {
            let f = self.func(p, "u_m2m")?;
            for l in (0..k).rev() {
                let (poff, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let coff = g.level_offset(l + 1) as i32;
                let dist = (0.5 * 3f64.sqrt() * g.width(l + 1)) as f32;
                let (c0, cnt) = ps.region.level_cells(l);
                let c0_i = c0 as i32;
                let mut b = s.launch_builder(&f);
                b.arg(&mut mult)
                    .arg(&tb.rots)
                    .arg(&tb.z_m2m)
                    .arg(&tb.toff)
                    .arg(&r_i);
                b.arg(&poff).arg(&nl).arg(&coff).arg(&dist).arg(&c0_i);
                // SAFETY: u_m2m(float2* mult, const float* rots, ztab, const int* toff, int R,
                // parent_off, nl, child_off, float dist, int c0): the arguments in this order
                // and of these types; one block per parent c0 .. c0 + cnt of level l (inside
                // the level), tr_threads(p) = TR_THREADS threads; the rotation records cover
                // offsets up to R = tb.r >= the grid's largest (ensure_tables).
                unsafe { b.launch(blocks(cnt, trt)) }?;
            }
            Ok(())
        })?;
        Ok(Expansions { mult, loc, centers })
    }

    /// Phase 4 on a rank: the partial coarse multipoles and the leaf multipoles other ranks
    /// need leave through the (idle) page-locked download buffer, copied on a second stream
    /// after the M2M, so that the P2P starts at once and the copies overlap it.
    fn start_rank_copies<'b>(
        &self,
        ps: &Pass,
        e: &mut dyn RankExchange,
        mult: &CudaSlice<f32>,
        down: &'b mut Option<PinnedHostSlice<f32>>,
    ) -> GpuResult<RankCopies<'b>> {
        let coarse: Vec<_> = e
            .coarse_ranges()
            .into_iter()
            .zip(e.coarse_parts())
            .collect();
        let ranges = e.leaf_ranges();
        let total: usize = coarse
            .iter()
            .flat_map(|(_, (down, _))| down.iter().map(|&(x, y)| y - x))
            .chain(ranges.iter().map(|&(a, b)| b - a))
            .sum();
        let copy = self.copy_stream()?;
        copy.wait(&ps.s.record_event(None)?)?;
        let mut rest = pinned(&self.dev, down, total, 0)?;
        let mut windows: Vec<WindowCopy> = Vec::new();
        for ((a, b), (down, _)) in coarse {
            let mut parts = Vec::new();
            for (x, y) in down {
                let (h, r) = rest.split_at_mut(y - x);
                copy.memcpy_dtoh(&mult.slice(a + x..a + y), &mut *h)?;
                parts.push((x, &*h));
                rest = r;
            }
            windows.push((b - a, parts));
        }
        let mut leaves = Vec::new();
        for (a, b) in ranges {
            let (h, r) = rest.split_at_mut(b - a);
            copy.memcpy_dtoh(&mult.slice(a..b), &mut *h)?;
            leaves.push(&*h);
            rest = r;
        }
        Ok(RankCopies {
            windows,
            leaves,
            done: copy.record_event(None)?,
        })
    }

    /// Phase 5, queued on the device: the P2P among the own particles between two events
    /// (periodic: the top multipoles downloaded first, for the far images on the host).
    fn own_p2p(
        &self,
        ps: &Pass,
        tasks: &LeafTasks,
        mult: &CudaSlice<f32>,
        bytes: &mut Bytes,
    ) -> GpuResult<OwnP2p> {
        let (s, np, m) = (&ps.s, ps.np, ps.g.m);
        let mut vel = s.alloc_zeros::<f32>(3 * np)?;
        let mut strf = s.alloc_zeros::<f32>(3 * np)?;
        bytes.add(&vel);
        bytes.add(&strf);
        let period = ps.period();
        let top = match ps.per {
            Some(_) => Some(s.clone_dtoh(&mult.slice(0..m * m * m * 2 * 3 * ncoef(ps.p)))?),
            None => None,
        };
        let start = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        if tasks.ntasks > 0 {
            let (spos, sstr) = (&tasks.sorted.pos, &tasks.sorted.str);
            let f = self.func(ps.p, "p2p_near")?;
            let mut b = s.launch_builder(&f);
            b.arg(spos).arg(sstr).arg(spos).arg(sstr);
            b.arg(&tasks.near)
                .arg(&tasks.near_nsrc)
                .arg(&tasks.runs)
                .arg(&period);
            b.arg(&mut vel).arg(&mut strf);
            // SAFETY: p2p_near(const float4* tpos, tstr, spos, sstr, const int4* tasks, const
            // int* task_nsrc, const int4* runs, float period, float* vel, float* str) of
            // p2p.cu: the arguments in this order and of these types; one block of
            // P2P_THREADS = NEAR_THREADS per task (ntasks), at most P2P_TARGETS = NEAR_TARGETS
            // targets each; tasks and runs index the np sorted particles, vel and strf hold
            // 3 np floats.
            unsafe { b.launch(blocks(tasks.ntasks, P2P_THREADS)) }?;
        }
        let end = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        Ok(OwnP2p {
            fields: RawFields { vel, strf },
            top,
            start,
            end,
        })
    }

    /// Phase 5, periodic: the far images on the host (f64) from the top multipoles `top`,
    /// while the P2P runs, into the (still zero) locals of the receiver level.
    fn far_image_locals(
        &self,
        ps: &Pass,
        q: &PeriodicRun,
        top: &[f32],
        loc: &mut CudaSlice<f32>,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let t = Instant::now();
        let host = q.far_locals_f32(&ps.g, top);
        let a = ps.g.level_offset(q.receiver_level) * 2 * 3 * ncoef(ps.p);
        ps.s.memcpy_htod(&host, &mut loc.slice_mut(a..a + host.len()))?;
        tm.far_images = t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Phase 5 on a rank, on the host while the own P2P runs: the copies of phase 4 into the
    /// coarse windows; the halo particles, leaf and coarse multipoles exchanged; the halo
    /// particles uploaded and sorted apart (returned); the received multipoles uploaded.
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &self,
        ps: &Pass,
        e: &mut dyn RankExchange,
        copies: RankCopies<'_>,
        mult: &mut CudaSlice<f32>,
        staging_up: &mut Option<PinnedHostSlice<f32>>,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<Option<Sorted>> {
        let s = &ps.s;
        let t_copy = Instant::now();
        copies.done.synchronize()?;
        let mut windows = Vec::new();
        for (len, parts) in copies.windows {
            let mut w = vec![0.0f32; len];
            for (x, h) in parts {
                w[x..x + h.len()].copy_from_slice(h);
            }
            windows.push(w);
        }
        e.add_seconds(t_copy.elapsed().as_secs_f64());
        let nh = e.halo_count()?;
        let leaf_up = e.leaf_multipoles(&copies.leaves)?;
        e.coarse(&mut windows)?;
        // multipoles to upload (received leaves, completed coarse cells): float ranges of
        // the multipole array and their data
        let mut mult_up: Vec<(usize, &[f32])> =
            leaf_up.iter().map(|((a, _), w)| (*a, &w[..])).collect();
        for (((a, _), (_, up)), w) in e
            .coarse_ranges()
            .into_iter()
            .zip(e.coarse_parts())
            .zip(&windows)
        {
            mult_up.extend(up.into_iter().map(|(x, y)| (a + x, &w[x..y])));
        }
        let nm: usize = mult_up.iter().map(|(_, w)| w.len()).sum();
        // the own upload finished long ago: the staging buffer is free (one buffer for
        // the halo particles and the multipoles, so the copies run asynchronously)
        let up = pinned(
            &self.dev,
            staging_up,
            8 * nh + nm,
            CU_MEMHOSTALLOC_WRITECOMBINED,
        )?;
        let (hup, mut mup) = up.split_at_mut(8 * nh);
        let mut halo = None;
        if nh > 0 {
            e.pack_halo(hup);
            // SAFETY: every element is written by the copy below before any kernel reads it.
            let mut hin = unsafe { s.alloc::<f32>(8 * nh) }?;
            s.memcpy_htod(&*hup, &mut hin)?;
            let hs = self.sort(ps.p, &hin, nh, &ps.g, &mut tm.k_sort, bytes)?;
            halo = Some(hs);
        }
        let t = Instant::now();
        for (a, w) in mult_up {
            let (dst, r) = mup.split_at_mut(w.len());
            dst.copy_from_slice(w);
            s.memcpy_htod(&*dst, &mut mult.slice_mut(a..a + w.len()))?;
            mup = r;
        }
        e.add_seconds(t.elapsed().as_secs_f64());
        Ok(halo)
    }

    /// Phase 6 on a rank: the P2M tasks of the halo leaves and the P2P tasks from the halo
    /// particles `h` to the own planes next to the halo (one range when they coincide or
    /// touch), with their slices and source runs.
    fn halo_tasks(
        &self,
        ps: &Pass,
        h: &Sorted,
        tasks: &mut LeafTasks,
        tm: &mut UniformTimes,
    ) -> GpuResult<HaloTasks> {
        let (s, region, plane) = (&ps.s, ps.region, ps.plane);
        let (n_lo, n_hi) = (
            (region.own.0 - region.halo.0) * plane,
            (region.halo.1 - region.own.1) * plane,
        );
        let ntasks = tasks.ntasks;
        let mut p2m = s.alloc_zeros::<i32>(i4(n_lo + n_hi))?;
        let (z0, z1) = region.own;
        let mut ranges = Vec::new();
        if region.halo.0 < z0 {
            ranges.push((z0, z0 + 1));
        }
        if z1 < region.halo.1 {
            match ranges.last_mut() {
                Some(last) if last.1 >= z1 - 1 => last.1 = z1,
                _ => ranges.push((z1 - 1, z1)),
            }
        }
        let nr: usize = ranges.iter().map(|r| (r.1 - r.0) * plane).sum();
        let mut near = s.alloc_zeros::<i32>(i4(ntasks))?;
        let mut nsrc = s.alloc_zeros::<i32>(ntasks.max(1))?;
        let mut runs = s.alloc_zeros::<i32>(i4(9 * nr))?;
        let mut scratch = s.alloc_zeros::<i32>(i4(nr.max(ntasks)))?;
        let mut scratch2 = s.alloc_zeros::<i32>(i4(ntasks))?;
        tm.k_sort += self.event_timed(|| {
            let f = self.func(ps.p, "u_p2m_tasks")?;
            for (c0, cnt, at) in [
                (region.halo.0 * plane, n_lo, 0),
                (region.own.1 * plane, n_hi, n_lo),
            ] {
                if cnt == 0 {
                    continue;
                }
                let (c0_i, cnt_i) = (c0 as i32, cnt as i32);
                let mut out = p2m.slice_mut(4 * at..4 * (at + cnt));
                let mut b = s.launch_builder(&f);
                b.arg(&h.starts).arg(&c0_i).arg(&cnt_i).arg(&ps.leaf_base);
                b.arg(&mut out);
                // SAFETY: u_p2m_tasks(const int* starts, int c0, int ncells, int leaf_base,
                // int4* out): the arguments in this order and of these types; the halo's
                // starts hold n^3 + 1 ints (c0 + cnt <= n^3), out cnt int4; threads u >= cnt
                // return.
                unsafe { b.launch(grid1(cnt, 128)) }?;
            }
            let f = self.func(ps.p, "u_leaf_tasks")?;
            let mut at = 0;
            for &(za, zb) in &ranges {
                let u0 = (za - region.own.0) * plane;
                let cnt = (zb - za) * plane;
                // the P2M and L2P tasks of the own leaves again: written to scratch
                let out = TaskOutputs {
                    p2m: scratch.as_view_mut(),
                    near: near.as_view_mut(),
                    nsrc: nsrc.as_view_mut(),
                    l2p: scratch2.as_view_mut(),
                    runs: runs.slice_mut(4 * 9 * at..4 * 9 * (at + cnt)),
                };
                let sl = tasks.slice_starts.slice(u0..u0 + cnt + 1);
                let starts = &tasks.sorted.starts;
                let leaves = (za * plane, cnt, 0);
                self.launch_leaf_tasks(
                    ps,
                    &f,
                    starts,
                    (&h.starts, &sl),
                    leaves,
                    out,
                    &mut tasks.pairs,
                )?;
                at += cnt;
            }
            Ok(())
        })?;
        Ok(HaloTasks {
            p2m,
            count: n_lo + n_hi,
            ranges,
            near,
            nsrc,
            runs,
        })
    }

    /// Phase 6 on a rank: P2M at the halo leaves (never summed into parents: their owners
    /// did that) and the P2P from the halo particles `h` to the own planes next to them.
    #[allow(clippy::too_many_arguments)]
    fn halo_p2m_p2p(
        &self,
        ps: &Pass,
        h: &Sorted,
        ht: &HaloTasks,
        tasks: &LeafTasks,
        xp: &mut Expansions,
        fl: &mut RawFields,
        tb: &Tables,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let (s, p, plane) = (&ps.s, ps.p, ps.plane);
        let period = ps.period();
        tm.k_p2m += self.event_timed(|| {
            let f = self.func(p, "p2m")?;
            let mut b = s.launch_builder(&f);
            b.arg(&h.pos)
                .arg(&h.str)
                .arg(&ht.p2m)
                .arg(&xp.centers)
                .arg(&tb.knm);
            b.arg(&mut xp.mult);
            // SAFETY: p2m (signature at its launch in `upward_pass`): the arguments in this
            // order and of these types; one block of P2M_THREADS per halo leaf (ht.count
            // tasks indexing the halo's sorted particles and the global leaf cells).
            unsafe { b.launch(blocks(ht.count, ncoef(p).div_ceil(32) * 32)) }?;
            Ok(())
        })?;
        tm.k_p2p += self.event_timed(|| {
            let f = self.func(p, "p2p_near")?;
            let mut at = 0;
            for &(za, zb) in &ht.ranges {
                let u0 = (za - ps.region.own.0) * plane;
                let cnt = (zb - za) * plane;
                let (ta, te) = (tasks.ss[u0] as usize, tasks.ss[u0 + cnt] as usize);
                if te > ta {
                    let near = ht.near.slice(4 * ta..4 * te);
                    let nsrc = ht.nsrc.slice(ta..te);
                    let hr = ht.runs.slice(4 * 9 * at..4 * 9 * (at + cnt));
                    let mut b = s.launch_builder(&f);
                    b.arg(&tasks.sorted.pos)
                        .arg(&tasks.sorted.str)
                        .arg(&h.pos)
                        .arg(&h.str);
                    b.arg(&near).arg(&nsrc).arg(&hr).arg(&period);
                    b.arg(&mut fl.vel).arg(&mut fl.strf);
                    // SAFETY: p2p_near (signature at its launch in `own_p2p`): the arguments
                    // in this order and of these types; one block of P2P_THREADS per task ta ..
                    // te of these planes; the tasks index the own sorted particles, the runs
                    // (9 per leaf, relative to hr) the halo's; vel and strf hold 3 np floats.
                    unsafe { b.launch(blocks(te - ta, P2P_THREADS)) }?;
                }
                at += cnt;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Phase 7: M2L per level over the implicit stencil, one block per target cell of the
    /// cells overlapping the own planes (level 0 skipped when every top cell is a neighbour
    /// of every other).
    fn m2l_pass(
        &self,
        ps: &Pass,
        xp: &mut Expansions,
        tb: &Tables,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let (s, g, p) = (&ps.s, &ps.g, ps.p);
        let (r_i, trt, periodic_i) = (tb.r as i32, tr_threads(p), ps.periodic_i());
        if ps.region.is_whole() {
            tm.m2l_translations = super::m2l_count(g);
        }
        tm.k_m2l = self.event_timed(|| {
            let f = self.func(p, "u_m2l")?;
            for l in 0..=g.k {
                if l == 0 && g.m < 3 {
                    continue; // every top cell is a neighbour of every other
                }
                let (off, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let top = (l == 0) as i32;
                let w = g.width(l) as f32;
                let (c0, cnt) = ps.region.level_cells(l);
                let c0_i = c0 as i32;
                let mut b = s.launch_builder(&f);
                b.arg(&xp.mult)
                    .arg(&mut xp.loc)
                    .arg(&tb.rots)
                    .arg(&tb.z_m2l)
                    .arg(&tb.toff);
                b.arg(&r_i).arg(&off).arg(&nl).arg(&top).arg(&periodic_i);
                b.arg(&w).arg(&c0_i);
                // SAFETY: u_m2l(const float2* mult, float2* loc, const float* rots, ztab,
                // const int* toff, int R, level_off, nl, top, periodic, float w, int c0): the
                // arguments in this order and of these types; one block of TR_THREADS per
                // target cell c0 .. c0 + cnt of level l (inside the level); the stencil's
                // offsets are at most R = tb.r (ensure_tables).
                unsafe { b.launch(blocks(cnt, trt)) }?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Phase 8: L2L level by level downwards over the cells overlapping the own planes, then
    /// L2P at the own particles (slices of `UNIFORM_EVAL_BLOCK` targets).
    fn downward_pass(
        &self,
        ps: &Pass,
        tasks: &LeafTasks,
        xp: &mut Expansions,
        fl: &mut RawFields,
        tb: &Tables,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let (s, g, p) = (&ps.s, &ps.g, ps.p);
        let (r_i, trt) = (tb.r as i32, tr_threads(p));
        tm.k_l2l = self.event_timed(|| {
            let f = self.func(p, "u_l2l")?;
            for l in 1..=g.k {
                let (coff, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let poff = g.level_offset(l - 1) as i32;
                let dist = (0.5 * 3f64.sqrt() * g.width(l)) as f32;
                let (c0, cnt) = ps.region.level_cells(l);
                let c0_i = c0 as i32;
                let mut b = s.launch_builder(&f);
                b.arg(&mut xp.loc)
                    .arg(&tb.rots)
                    .arg(&tb.z_l2l)
                    .arg(&tb.toff)
                    .arg(&r_i);
                b.arg(&coff).arg(&nl).arg(&poff).arg(&dist).arg(&c0_i);
                // SAFETY: u_l2l(float2* loc, const float* rots, ztab, const int* toff, int R,
                // child_off, nl, parent_off, float dist, int c0): the arguments in this order
                // and of these types; one block of TR_THREADS per child c0 .. c0 + cnt of
                // level l (inside the level).
                unsafe { b.launch(blocks(cnt, trt)) }?;
            }
            Ok(())
        })?;
        tm.k_l2p = self.event_timed(|| {
            if tasks.ntasks == 0 {
                return Ok(());
            }
            let f = self.func(p, "l2p")?;
            let mut b = s.launch_builder(&f);
            b.arg(&tasks.sorted.pos)
                .arg(&tasks.sorted.str)
                .arg(&tasks.l2p)
                .arg(&xp.centers)
                .arg(&xp.loc);
            b.arg(&tb.knm).arg(&mut fl.vel).arg(&mut fl.strf);
            // SAFETY: l2p(const float4* tpos, tstr, const int4* tasks, const float4* centers,
            // const float2* locals, const float* knm, float* vel, float* str) of fmm.cu: the
            // arguments in this order and of these types; one block of EVAL_BLOCK =
            // UNIFORM_EVAL_BLOCK threads per task (ntasks, at most that many targets each);
            // vel and strf hold 3 np floats.
            unsafe { b.launch(blocks(tasks.ntasks, UNIFORM_EVAL_BLOCK)) }?;
            Ok(())
        })?;
        Ok(())
    }

    /// Phase 9 on the device: the fields of the sorted particles scattered to input order,
    /// `6 np` floats `(u, s)` per particle (the expansions and sorted rows freed first).
    fn scatter_fields(
        &self,
        ps: &Pass,
        tasks: LeafTasks,
        xp: Expansions,
        fl: RawFields,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<CudaSlice<f32>> {
        let (s, np) = (&ps.s, ps.np);
        let np_i = np as i32;
        let mut out6 = s.alloc_zeros::<f32>(6 * np)?;
        bytes.add(&out6);
        tm.device_bytes = bytes.0;
        let Sorted {
            perm,
            pos,
            str: sstr,
            ..
        } = tasks.sorted;
        drop((xp.mult, xp.loc, pos, sstr));
        tm.k_scatter = self.event_timed(|| {
            let f = self.func(ps.p, "u_scatter_fields")?;
            let mut b = s.launch_builder(&f);
            b.arg(&perm)
                .arg(&np_i)
                .arg(&fl.vel)
                .arg(&fl.strf)
                .arg(&mut out6);
            // SAFETY: u_scatter_fields(const int* perm, int np, const float* vel, str, float*
            // out): the arguments in this order and of these types; perm holds np input
            // indices (< np), vel and strf 3 np floats, out6 6 np; threads k >= np return.
            unsafe { b.launch(grid1(np, THREADS)) }?;
            Ok(())
        })?;
        Ok(out6)
    }

    /// Phase 9 on the host: the fields `out6` (device, `6 np` raw floats) into `fields` (f64, `1/(4 pi)`,
    /// periodic: minus the surface correction), downloaded in pieces, each converted on the
    /// host while the next one is copied.
    fn download(
        &self,
        out6: &CudaSlice<f32>,
        np: usize,
        per: Option<&PeriodicRun>,
        staging: &mut Staging,
        fields: &mut Fields,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let t = Instant::now();
        let s = self.dev.stream().clone();
        let host = pinned(&self.dev, &mut staging.down, 6 * np, 0)?;
        // every element is overwritten below: kept arrays of the right length are reused
        // as they are, others replaced by zeroed allocations (pages mapped lazily, at the
        // parallel writes, not by a serial fill)
        if fields.velocity.len() != np || fields.stretching.len() != np {
            fields.velocity = vec![[0.0; 3]; np];
            fields.stretching = vec![[0.0; 3]; np];
        }
        let chunk = np.div_ceil(DOWNLOAD_CHUNKS).max(1);
        // periodic: the zero-mean velocity (minus the surface term of cubic summation)
        let u0 = per
            .and_then(|q| q.correction.get().copied())
            .unwrap_or([0.0; 3]);
        let mut pending = Vec::with_capacity(DOWNLOAD_CHUNKS);
        for (c, h) in host.chunks_mut(6 * chunk).enumerate() {
            let a = 6 * c * chunk;
            s.memcpy_dtoh(&out6.slice(a..a + h.len()), &mut *h)?;
            pending.push((h, s.record_event(None)?));
        }
        for ((h, ev), (u, st)) in pending.into_iter().zip(
            fields
                .velocity
                .chunks_mut(chunk)
                .zip(fields.stretching.chunks_mut(chunk)),
        ) {
            ev.synchronize()?;
            u.par_iter_mut()
                .zip(st.par_iter_mut())
                .zip(h.par_chunks(6))
                .for_each(|((u, st), h)| {
                    *u = std::array::from_fn(|d| h[d] as f64 * INV_4PI - u0[d]);
                    *st = std::array::from_fn(|d| h[3 + d] as f64 * INV_4PI);
                });
        }
        s.synchronize()?;
        tm.download += t.elapsed().as_secs_f64();
        Ok(())
    }
}

/// Refuses what the pipeline cannot run: slabs or rank exchanges with a periodic box, no
/// particles or too many for i32 indices, a grid too large for the order.
fn check_region(p: usize, np: usize, region: &Region, ex: bool, per: bool) -> GpuResult<()> {
    if per && (ex || !region.is_whole()) {
        return Err(GpuError::Unsupported(
            "the periodic uniform grid runs on one device (no slabs)".into(),
        ));
    }
    if np == 0 || np > i32::MAX as usize / 8 {
        return Err(GpuError::Unsupported(format!(
            "{np} particles: need 1..={} for i32 indices",
            i32::MAX / 8
        )));
    }
    let g = region.grid;
    let (ncell, nleaf, nc3) = (g.total_cells(), g.leaves(), 3 * ncoef(p));
    if ncell.saturating_mul(2 * nc3) > i32::MAX as usize * 2 || nleaf > i32::MAX as usize / 16 {
        return Err(GpuError::Unsupported(format!(
            "grid of {}^3 leaves too large for order {p}",
            g.n()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uniform::evaluate_reference;
    use vortex_fmm::relative_l2_error;

    #[test]
    fn packing_into_staging_equals_the_layout_packing() {
        let s = vortex_fmm::testsets::standard(10_000, 3);
        let (p, a) = crate::layout::pack_sources(&s);
        let mut out = vec![0.0f32; 8 * s.len() + 5];
        pack_sources_into(&s, &mut out);
        assert_eq!(&out[..4 * s.len()], &p[..]);
        assert_eq!(&out[4 * s.len()..8 * s.len()], &a[..]);
    }

    #[test]
    fn bad_parameters_are_errors_not_panics() {
        let s = vortex_fmm::testsets::standard(100, 3);
        for params in [
            UniformParams {
                order: 0,
                ..Default::default()
            },
            UniformParams {
                grid: Some((9, 1)),
                ..Default::default()
            },
            UniformParams {
                grid: Some((0, 1)),
                ..Default::default()
            },
        ] {
            assert!(params.validate().is_err());
            assert!(evaluate_reference(&s, &params).is_err());
        }
    }

    /// On a GPU: the device path against the CPU f64 uniform-grid FMM (same grid and lists;
    /// the difference is the f32 arithmetic) and bitwise repeatable.
    #[test]
    #[cfg_attr(
        not(feature = "gpu-tests"),
        ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
    )]
    fn device_matches_the_f64_reference() {
        let fmm_ = UniformFmm::on_device(0).unwrap();
        let mut s = vortex_fmm::testsets::standard(20_000, 5);
        s.sigma.iter_mut().for_each(|v| *v *= 0.5);
        for (p, grid) in [(6, None), (8, Some((3, 1))), (8, Some((1, 3)))] {
            let params = UniformParams {
                order: p,
                grid,
                ..Default::default()
            };
            let want = evaluate_reference(&s, &params).unwrap();
            let (got, tm) = fmm_.evaluate(&s, &params).unwrap();
            let (again, _) = fmm_.evaluate(&s, &params).unwrap();
            assert_eq!(got, again, "not repeatable");
            let eu = relative_l2_error(&got.velocity, &want.velocity);
            let es = relative_l2_error(&got.stretching, &want.stretching);
            println!(
                "p {p} grid {grid:?} (n {}): GPU vs CPU f64 {eu:.2e} / {es:.2e}",
                tm.n
            );
            assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
        }
    }

    /// On a GPU: the periodic device path against the periodic f64 twin (same grid, lists,
    /// far images and surface correction), repeatable, and refusing a non-zero total
    /// strength.
    #[test]
    #[cfg_attr(
        not(feature = "gpu-tests"),
        ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
    )]
    fn periodic_device_matches_the_f64_reference() {
        use crate::uniform::reference::evaluate_reference_periodic;
        let fmm_ = UniformFmm::on_device(0).unwrap();
        let per = Periodic::default();
        let mut s = vortex_fmm::testsets::generate(
            vortex_fmm::testsets::Distribution::Uniform,
            20_000,
            7,
            true,
        );
        s.sigma.iter_mut().for_each(|v| *v *= 0.5);
        // a few particles outside the box: wrapped on both paths
        s.position[3][0] += 2.0 * per.box_length;
        s.position[11][2] -= per.box_length;
        for (p, grid) in [
            (8, None),
            (10, Some((3, 1))),
            (8, Some((1, 3))),
            (6, Some((1, 2))),
        ] {
            let params = UniformParams {
                order: p,
                grid,
                ..Default::default()
            };
            let want = evaluate_reference_periodic(&s, &params, &per).unwrap();
            let (got, tm) = fmm_.evaluate_periodic(&s, &params, &per).unwrap();
            let (again, _) = fmm_.evaluate_periodic(&s, &params, &per).unwrap();
            assert_eq!(got, again, "not repeatable");
            let eu = relative_l2_error(&got.velocity, &want.velocity);
            let es = relative_l2_error(&got.stretching, &want.stretching);
            println!(
                "periodic p {p} grid {grid:?} (n {}): GPU vs CPU f64 {eu:.2e} / {es:.2e}, far images {:.2} ms",
                tm.n,
                tm.far_images * 1e3
            );
            assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
        }
        let mut bad = s.clone();
        bad.strength[0][1] += 1.0;
        let e = fmm_
            .evaluate_periodic(&bad, &UniformParams::default(), &per)
            .unwrap_err();
        assert!(e.to_string().contains("total strength"), "{e}");
    }
}
