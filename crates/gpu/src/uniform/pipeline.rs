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
//! device phases, both in `entry`) each phase is a method in a file of its own: `leaf_tasks`
//! (3: `sort`, `leaf_slices`, `launch_leaf_tasks`; `tasks`), `upward_pass` and
//! `start_rank_copies` (4; `upward`), `own_p2p`, `far_image_locals` (5; `p2p`) and
//! `exchange` (5; `exchange`), `halo_tasks` and `halo_p2m_p2p` (5, a rank's halo; `p2p`),
//! `m2l_pass` (6; `m2l`), `downward_pass` (7), `scatter_fields` and `download` (8;
//! `downward`); the fixed quantities of a pass are a `Pass`, the buffers they hand on
//! `LeafTasks`, `Expansions`, `RawFields` (defined here).

mod downward;
mod entry;
mod exchange;
mod m2l;
mod p2p;
mod tasks;
mod upward;

use super::grid::{Extent, UniformGrid};
use super::periodic::{far_image_locals, far_images_for, pack_sources_periodic_into};
use super::profile::{self, Unit, Work};
use super::slab::{Parts, Ranges};
use super::sort::SCAN_BLOCK;
use super::stencil::RotationTable;
use super::{M2lKernel, UniformParams, UniformTimes};
use crate::backend::{blocks, tr_threads, P2P_TARGETS, P2P_THREADS};
use crate::device::{GpuDevice, GpuError, GpuResult};
use crate::tables::{knm_table, toff, z_tables};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED;
use cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig, PinnedHostSlice,
};
use rayon::prelude::*;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use vortex_cuda::launch::uniform::UniformModule;
use vortex_fmm::expansions::ncoef;
use vortex_fmm::expansions::{expansion_len, Complex64};
use vortex_fmm::kernel::CoreOrder;
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
    /// The M2L kernel of the evaluation under way (`UniformParams::m2l`, set by the entry
    /// points) and the dense matrices of the last order that used them (`m2l`).
    m2l: Mutex<M2lKernel>,
    dense: Mutex<Option<m2l::DenseTables>>,
    /// The core of the evaluation under way (`UniformParams::core`, set by the entry points
    /// with the M2L kernel).
    core: Mutex<CoreOrder>,
    /// The kernels of the last order and core evaluated (the module is cached per device; this
    /// keeps its function handles).
    kernels: Mutex<Option<ModuleKey>>,
}

/// The kernels of one (order, core) and that key.
type ModuleKey = ((usize, CoreOrder), Arc<UniformModule>);

type FarKey = ((usize, usize, usize, u64, usize), Arc<FarImages>);

/// Offset in the multipole array of the window float range `x..x + len` of a window made of
/// the array ranges `ranges` (concatenated); the range must lie in one of them.
fn window_to_array(ranges: &[(usize, usize)], x: usize, len: usize) -> usize {
    let mut at = 0;
    for &(a, b) in ranges {
        if x < at + (b - a) {
            assert!(
                x + len <= at + (b - a),
                "window part {x}+{len} across {ranges:?}"
            );
            return a + x - at;
        }
        at += b - a;
    }
    panic!("window part {x}+{len} outside {ranges:?}");
}

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
    /// The periodic part of an evaluation on `g` in the box of `periodic` with the far
    /// images of `fmm` (cached there); `correction`, when known, the surface correction.
    pub(crate) fn new(
        fmm: &UniformFmm,
        g: &UniformGrid,
        p: usize,
        periodic: &Periodic,
        correction: Option<[f64; 3]>,
    ) -> GpuResult<Self> {
        let run = PeriodicRun {
            box_length: periodic.box_length,
            far: fmm.far_images(g, p, periodic)?,
            receiver_level: g.receiver_level(),
            correction: OnceLock::new(),
        };
        if let Some(c) = correction {
            let _ = run.correction.set(c);
        }
        Ok(run)
    }

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

/// A pinned buffer of at least `len` floats in `slot` (reallocated when smaller; at least one
/// float, so that `len = 0`, a rank with nothing to copy, is an empty slice of a real buffer).
fn pinned<'a>(
    dev: &GpuDevice,
    slot: &'a mut Option<PinnedHostSlice<f32>>,
    len: usize,
    flags: u32,
) -> GpuResult<&'a mut [f32]> {
    if slot.as_ref().map(|b| b.len() < len).unwrap_or(true) {
        *slot = None;
        // at least one float: the driver answers a pinned allocation of zero bytes with a null
        // pointer, which cudarc refuses by panicking (a rank with no particles asks for none)
        // SAFETY: the contents are written before they are read (packing / download).
        let alloc = unsafe {
            dev.context()
                .alloc_pinned_with_flags::<f32>(len.max(1), flags)
        };
        *slot = Some(alloc?);
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
/// planes `own` (targets) and the planes `halo` outside them whose particles are present as
/// sources (sorted disjoint ranges; on a periodic grid they wrap around the seam).
/// Upward pass, M2L and L2L run over the cells overlapping the own planes at each level.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Region {
    pub grid: UniformGrid,
    pub own: (usize, usize),
    pub halo: Ranges,
}

impl Region {
    pub fn whole(grid: UniformGrid) -> Self {
        let n = grid.n();
        Region {
            grid,
            own: (0, n),
            halo: Vec::new(),
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
    /// Per coarse level (`< k`), the float ranges of the multipole array whose concatenation
    /// is its window (one range, or two where a periodic window wraps around the seam).
    fn coarse_ranges(&self) -> Vec<Ranges>;
    /// Per window, the float ranges (relative to its start) that `coarse` reads (downloaded;
    /// the rest of the window is left zero) and those it changes (uploaded); each lies in
    /// one range of `coarse_ranges`.
    fn coarse_parts(&self) -> Vec<(Ranges, Ranges)>;
    /// Float ranges of the multipole array holding the leaf multipoles other ranks need
    /// (downloaded after the P2M, in this order, and handed to `leaf_multipoles`).
    fn leaf_ranges(&self) -> Vec<(usize, usize)>;
    /// Exchanges the leaf multipoles: this rank's parts (of `leaf_ranges`) in, the float
    /// ranges of the multipole array with the received leaf multipoles out.
    fn leaf_multipoles(&mut self, parts: &[&[f32]]) -> GpuResult<Parts<f32>>;
    /// Collective, right after the sort: fails on every rank when a rank has `outside`
    /// particles outside its slab (a caller that assumed them in their slabs).
    fn check_slab(&mut self, outside: usize) -> GpuResult<()>;
    /// Exchanges the halo particles (this rank's taken from its host copy or from `rows`,
    /// the sorted particles on the device); returns the count received.
    fn halo_count(&mut self, rows: &dyn HaloRows) -> GpuResult<usize>;
    /// Writes the halo particles into `out` (`8 nh` floats: position rows, then strength rows).
    fn pack_halo(&self, out: &mut [f32]);
    /// Completes the coarse windows (this rank's partial multipoles in, sums out).
    fn coarse(&mut self, windows: &mut [Vec<f32>]) -> GpuResult<()>;
    /// Adds to the time of the coarse exchange (copies between device and host).
    fn add_seconds(&mut self, s: f64);
}

/// The own particles of a range of leaf planes, as the device holds them after the sort.
pub(crate) trait HaloRows {
    /// The particles of leaf planes `zr` (own planes), 8 floats each: `(x, y, z, 1/sigma,
    /// ax, ay, az, 0)`, in sorted order.
    fn rows(&self, zr: (usize, usize)) -> GpuResult<Vec<f32>>;
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
    /// P2P from the halo per own slice, source counts, 9 runs (18 when periodic) per own
    /// leaf of `ranges`.
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
            m2l: Mutex::new(M2lKernel::Auto),
            dense: Mutex::new(None),
            core: Mutex::new(CoreOrder::Second),
            kernels: Mutex::new(None),
        }
    }

    /// The device on visible index `index` (an error, never a panic, without a GPU).
    pub fn on_device(index: usize) -> GpuResult<Self> {
        Ok(Self::new(GpuDevice::get(index)?))
    }

    pub fn device(&self) -> &Arc<GpuDevice> {
        &self.dev
    }

    /// Compiles the module of order `p` and the core `core` now (otherwise at the first
    /// evaluation).
    pub fn warm_up(&self, p: usize, core: CoreOrder) -> GpuResult<()> {
        self.module(p, core)?;
        Ok(())
    }

    /// The kernels of the module of order `p` with the core of the evaluation under way.
    fn kernels(&self, p: usize) -> GpuResult<Arc<UniformModule>> {
        let core = *self.core.lock().expect("uniform core poisoned");
        self.module(p, core)
    }

    /// The kernels of the module of order `p` and core `core` (`uniform.cu` with the `p2p.cu`
    /// and `fmm.cu` it includes), compiled at the first use on the device.
    fn module(&self, p: usize, core: CoreOrder) -> GpuResult<Arc<UniformModule>> {
        let mut k = self.kernels.lock().expect("uniform kernels poisoned");
        match &*k {
            Some((key, m)) if *key == (p, core) => Ok(m.clone()),
            _ => {
                let m = Arc::new(UniformModule::load(
                    &self.dev,
                    p,
                    UNIFORM_EVAL_BLOCK,
                    core.m(),
                )?);
                *k = Some(((p, core), m.clone()));
                Ok(m)
            }
        }
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

    /// Runs `f`, the `launches` launches of kernel `name` doing `work`; while
    /// [`profile::enabled`], between two CUDA events, recorded in the profile.
    fn prof(
        &self,
        name: &str,
        launches: usize,
        work: Work,
        f: impl FnOnce() -> GpuResult<()>,
    ) -> GpuResult<()> {
        if !profile::enabled() {
            return f();
        }
        let t = self.dev.event_timed(f)?;
        profile::record(name, launches, t, work);
        Ok(())
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
}

/// Refuses what the pipeline cannot run: a slab without its rank exchange, a periodic
/// grid that is not periodic (or the reverse), no particles or too many for i32 indices, a
/// grid too large for the order.
fn check_region(p: usize, np: usize, region: &Region, ex: bool, per: bool) -> GpuResult<()> {
    if !ex && !region.is_whole() {
        return Err(GpuError::Unsupported(format!(
            "a slab of leaf planes {:?} needs the exchanges of its rank",
            region.own
        )));
    }
    if per != region.grid.periodic {
        return Err(GpuError::Unsupported(format!(
            "a {} grid for a {} evaluation",
            if region.grid.periodic {
                "periodic"
            } else {
                "free-space"
            },
            if per { "periodic" } else { "free-space" }
        )));
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
mod tests;
