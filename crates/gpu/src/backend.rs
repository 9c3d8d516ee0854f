//! [`CudaBackend`]: the [`fmm::Backend`] on one CUDA device.
//!
//! `prepare` uploads the sorted particles once (fp32 `float4`), the tables of the order and the
//! cell centres; `upward` runs P2M (one leaf per block) and M2M level by level; `downward` runs
//! M2L (rotation-based O(p^3), or the plain O(p^4) kernel), L2L level by level and L2P, or M2P
//! for the treecode; `near_field` runs P2P; `fields` downloads the fields once and applies
//! `1/(4 pi)` in f64. Particles and expansions stay on the device between phases.
//! With `FarField::Ppm` (pseudo-particle method, [`crate::ppm`]) every operator is a kernel of
//! `kernels/ppm.cu`: P2M, M2M, L2L and L2P in f64 from the tables of [`crate::ppm::PpmTables`],
//! the M2L (`ppm_m2l`) with fp32 pairs summed in f64; multipoles and locals stay on the device.
//! (A tree whose children are not regular octants falls back to the f64 host operators for
//! P2M, M2M, L2L and L2P.)
//! Interaction lists come from the CPU plan and are packed on the host, in parallel (rayon), in
//! each phase (that cost is inside the phase's wall time); the M2L buffers and rotation records
//! are kept by the backend between evaluations. Every phase synchronizes at its end so that the wall-clock
//! phase times are the device times; the kernel-only times (CUDA events) are kept in
//! [`KernelTimes`] (see [`CudaBackend::last_kernel_times`]).

use crate::device::{GpuDevice, GpuError, GpuResult, FMM, P2P, PPM};
use crate::layout::{pack_sources, pack_targets, NearLayout};
use crate::ppm::{cell_geometry, cell_octants, pack_ppm_m2l, PpmHost, PpmTables};
use crate::tables::{direction_key, knm_table, rot_stride, toff, z_tables, RotationBuilder};
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use fmm::backend::{timed, Backend, FarField, PhaseTimes, Plan};
use fmm::expansions::ncoef;
use fmm::kernel::INV_4PI;
use fmm::lists::NO_SHIFT;
use fmm::{Fields, FmmError, Sources, Targets};
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::{Arc, Mutex};

/// Targets per near-field task and threads per near-field block (`NEAR_TARGETS`,
/// `NEAR_THREADS` of `kernels/p2p.cu`).
pub const P2P_TARGETS: usize = 32;
pub const P2P_THREADS: usize = 128;
/// Targets per L2P / M2P block (`EVAL_BLOCK` of `kernels/fmm.cu`).
pub const EVAL_BLOCK: usize = 64;
/// Largest order the GPU kernels are built for (shared-memory sizes are static).
pub const MAX_GPU_ORDER: usize = 16;

/// Which M2L kernel the downward pass uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum M2lKind {
    /// Rotation-based O(p^3) (default).
    #[default]
    Rotation,
    /// Plain O(p^4) (reference).
    Plain,
    /// Not an FMM M2L: the pseudo-particle M2L (`kernels/ppm.cu`) runs whenever the plan's far
    /// field is `FarField::Ppm`, whatever this field says; selecting it for an FMM plan is an
    /// error.
    Ppm,
}

/// Kernel-only times (seconds, CUDA events) and work counts of the last evaluation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelTimes {
    pub p2m: f64,
    pub m2m: f64,
    pub m2l: f64,
    pub m2p: f64,
    pub l2l: f64,
    pub l2p: f64,
    pub p2p: f64,
    /// Pair interactions computed by the P2P kernel.
    pub p2p_pairs: u64,
    /// M2L translations.
    pub m2l_translations: u64,
    /// M2P (cell, target) evaluations.
    pub m2p_evaluations: u64,
    /// Distinct M2L directions (rotations).
    pub m2l_directions: usize,
}

/// The CUDA backend.
pub struct CudaBackend {
    dev: Arc<GpuDevice>,
    pub m2l: M2lKind,
    last: Mutex<KernelTimes>,
    /// host buffers of the M2L packing, reused between evaluations
    m2l_bufs: Mutex<M2lBuffers>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.dev)
            .field("m2l", &self.m2l)
            .finish()
    }
}

/// Device data of one evaluation.
pub struct CudaState {
    p: usize,
    nt: usize,
    tpos: CudaSlice<f32>,
    tstr: CudaSlice<f32>,
    spos: CudaSlice<f32>,
    sstr: CudaSlice<f32>,
    vel: CudaSlice<f32>,
    strf: CudaSlice<f32>,
    /// per cell `float4` centres
    scenters: CudaSlice<f32>,
    tcenters: CudaSlice<f32>,
    knm: CudaSlice<f32>,
    multipoles: Option<CudaSlice<f32>>,
    locals: Option<CudaSlice<f32>>,
    /// rotations (records), directions key -> record index
    rots: Option<CudaSlice<f32>>,
    /// pseudo-particle method: host operators and data (`FarField::Ppm`)
    ppm: Option<Box<PpmHost>>,
    /// pseudo-particle method on the device (`None`: host P2M / M2M / L2L / L2P)
    ppm_dev: Option<PpmDevice>,
    times: KernelTimes,
}

/// Device data of the pseudo-particle method: multipoles (f64, `3K` per source cell), cell
/// geometry and octants of both trees, and the operator tables of the order.
struct PpmDevice {
    k: usize,
    p: usize,
    radius_factor: f64,
    scratch_len: usize,
    mult: CudaSlice<f64>,
    scells: CudaSlice<f64>,
    tcells: CudaSlice<f64>,
    soct: CudaSlice<i32>,
    toct: CudaSlice<i32>,
    expo: CudaSlice<i32>,
    up: CudaSlice<i32>,
    w: CudaSlice<f64>,
    wt: CudaSlice<f64>,
    m2m: CudaSlice<f64>,
    l2l: CudaSlice<f64>,
}

impl PpmDevice {
    fn defines(&self) -> [(&'static str, usize); 2] {
        [("PPM_K", self.k), ("PPM_P", self.p)]
    }
}

/// Threads of the PPM P2M / M2M / L2L / L2P blocks (`PPM_OPS` of `kernels/ppm.cu`).
const PPM_OPS: usize = 128;
/// Most blocks of the PPM L2P (each owns a scratch slice; they loop over the leaves).
const PPM_L2P_BLOCKS: usize = 4096;

fn defines(p: usize) -> [(&'static str, usize); 1] {
    [("ORDER", p)]
}

/// `[[i32; 4]]` viewed as `[i32]` (no copy).
fn flat4(v: &[[i32; 4]]) -> &[i32] {
    // SAFETY: `[i32; 4]` is four contiguous `i32` with the alignment of `i32`.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<i32>(), 4 * v.len()) }
}

/// Threads of a PPM M2L block for `k` pseudo-particles (`PPM_THREADS` of `kernels/ppm.cu`).
pub fn ppm_threads(k: usize) -> usize {
    k.div_ceil(32) * 32
}

fn centers(tree: &fmm::tree::Tree) -> Vec<f32> {
    tree.cells
        .iter()
        .flat_map(|c| {
            [
                c.center[0] as f32,
                c.center[1] as f32,
                c.center[2] as f32,
                0.0,
            ]
        })
        .collect()
}

/// One task per non-empty leaf: `(first point, point count, leaf cell, 0)` (P2M, PPM L2P).
fn leaf_tasks(tree: &fmm::tree::Tree) -> Vec<[i32; 4]> {
    tree.leaves()
        .filter(|&l| !tree.cells[l].is_empty())
        .map(|l| {
            let r = &tree.cells[l].range;
            [r.start as i32, r.len() as i32, l as i32, 0]
        })
        .collect()
}

pub(crate) fn blocks(n: usize, threads: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

pub(crate) fn tr_threads(p: usize) -> usize {
    (3 * ncoef(p)).div_ceil(32) * 32
}

impl CudaBackend {
    /// The backend on visible device `index` (after `CUDA_VISIBLE_DEVICES`). Returns an error,
    /// never panics, when there is no driver, no NVRTC or no such device.
    pub fn new(index: usize) -> GpuResult<Self> {
        Ok(Self {
            dev: GpuDevice::get(index)?,
            m2l: M2lKind::Rotation,
            last: Mutex::new(KernelTimes::default()),
            m2l_bufs: Mutex::new(M2lBuffers::default()),
        })
    }

    pub fn device(&self) -> &Arc<GpuDevice> {
        &self.dev
    }

    /// Kernel times of the last completed evaluation.
    pub fn last_kernel_times(&self) -> KernelTimes {
        self.last.lock().unwrap().clone()
    }

    /// Compiles every module for order `p` now (otherwise done at first use).
    pub fn warm_up(&self, p: usize) -> GpuResult<()> {
        self.dev.module(&P2P, &[])?;
        self.dev.module(&FMM, &defines(p))?;
        if p <= fmm::MAX_ORDER {
            let k = fmm::ppm::PseudoParticles::new(p).count();
            self.dev.module(&PPM, &[("PPM_K", k)])?;
        }
        Ok(())
    }

    /// Runs `f` between two CUDA events ([`GpuDevice::event_timed`]).
    fn event_timed(&self, f: impl FnOnce() -> GpuResult<()>) -> GpuResult<f64> {
        self.dev.event_timed(f)
    }

    fn prepare_impl(&self, plan: &Plan, src: &Sources, tgt: &Targets) -> GpuResult<CudaState> {
        let p = plan.order;
        if p > MAX_GPU_ORDER {
            return Err(GpuError::Unsupported(format!(
                "expansion order {p} > {MAX_GPU_ORDER} is not supported by the CUDA kernels"
            )));
        }
        if src.len() > i32::MAX as usize / 4 || tgt.len() > i32::MAX as usize / 4 {
            return Err(GpuError::Unsupported(
                "too many particles for i32 indices".into(),
            ));
        }
        let is_ppm = plan.far_field == FarField::Ppm;
        let s = self.dev.stream();
        let (sp, sa) = pack_sources(src);
        let (tp, ta) = pack_targets(tgt);
        let len = 2 * 3 * ncoef(p);
        let state = CudaState {
            p,
            nt: tgt.len(),
            tpos: s.clone_htod(&tp)?,
            tstr: s.clone_htod(&ta)?,
            spos: s.clone_htod(&sp)?,
            sstr: s.clone_htod(&sa)?,
            vel: s.alloc_zeros::<f32>(3 * tgt.len())?,
            strf: s.alloc_zeros::<f32>(3 * tgt.len())?,
            scenters: s.clone_htod(&centers(&plan.source_tree))?,
            tcenters: s.clone_htod(&centers(&plan.target_tree))?,
            knm: s.clone_htod(&knm_table(p))?,
            multipoles: if is_ppm {
                None
            } else {
                Some(s.alloc_zeros::<f32>(plan.source_tree.cells.len() * len)?)
            },
            locals: match plan.far_field {
                FarField::Treecode | FarField::Ppm => None,
                _ => Some(s.alloc_zeros::<f32>(plan.target_tree.cells.len() * len)?),
            },
            rots: None,
            ppm: is_ppm.then(|| Box::new(PpmHost::new(plan, src, tgt))),
            ppm_dev: None,
            times: KernelTimes::default(),
        };
        let mut state = state;
        if let Some(h) = state.ppm.as_ref() {
            if let (Some(so), Some(to)) = (
                cell_octants(&plan.source_tree),
                cell_octants(&plan.target_tree),
            ) {
                let tb = PpmTables::new(&h.ops);
                state.ppm_dev = Some(PpmDevice {
                    k: tb.k,
                    p: tb.p,
                    radius_factor: h.ops.radius_factor(),
                    scratch_len: tb.l2p_scratch_len(),
                    mult: s.alloc_zeros::<f64>(plan.source_tree.cells.len() * 3 * tb.k)?,
                    scells: s.clone_htod(&cell_geometry(&plan.source_tree))?,
                    tcells: s.clone_htod(&cell_geometry(&plan.target_tree))?,
                    soct: s.clone_htod(&so)?,
                    toct: s.clone_htod(&to)?,
                    expo: s.clone_htod(&tb.expo)?,
                    up: s.clone_htod(&tb.up)?,
                    w: s.clone_htod(&tb.w)?,
                    wt: s.clone_htod(&tb.wt)?,
                    m2m: s.clone_htod(&tb.m2m_t)?,
                    l2l: s.clone_htod(&tb.l2l_t)?,
                });
            } else {
                log::info!("PPM: irregular octree children, P2M/M2M/L2L/L2P run on the host");
            }
        }
        self.dev.synchronize()?;
        Ok(state)
    }

    fn upward_impl(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        if st.ppm_dev.is_some() {
            return self.ppm_upward(plan, st, times);
        }
        if let Some(h) = st.ppm.as_mut() {
            // PPM: P2M and M2M on the host (f64); the multipoles go up with the M2L
            let tree = &plan.source_tree;
            fmm::backend::timed(&mut times.p2m, || h.p2m(tree));
            fmm::backend::timed(&mut times.m2m, || h.m2m(tree));
            return Ok(());
        }
        let p = st.p;
        let dev = &self.dev;
        let s = dev.stream().clone();
        let tree = &plan.source_tree;
        // P2M
        let f = dev.function(&FMM, &defines(p), "p2m")?;
        let p2m_threads = ncoef(p).div_ceil(32) * 32;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let tasks = leaf_tasks(tree);
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let mult = st.multipoles.as_mut().unwrap();
            st.times.p2m += self.event_timed(|| {
                let mut b = s.launch_builder(&f);
                b.arg(&st.spos)
                    .arg(&st.sstr)
                    .arg(&d_tasks)
                    .arg(&st.scenters)
                    .arg(&st.knm);
                b.arg(mult);
                unsafe { b.launch(blocks(tasks.len(), p2m_threads)) }?;
                Ok(())
            })?;
            Ok(())
        });
        times.p2m += wall;
        r?;
        // M2M level by level (children -> parents), rotation-based; 8 directions
        let f = dev.function(&FMM, &defines(p), "m2m_rot")?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let mut rb = RotationBuilder::new(p);
            let mut recs = Vec::new();
            let mut keys: FxHashMap<[i64; 3], i32> = FxHashMap::default();
            let mut tasks: Vec<[i32; 4]> = Vec::new();
            let mut entries: Vec<[i32; 4]> = Vec::new();
            let mut level_ranges = Vec::new();
            for l in (0..tree.levels.len().saturating_sub(1)).rev() {
                let t0 = tasks.len();
                for pc in tree.levels[l].clone() {
                    let cell = &tree.cells[pc];
                    if cell.is_leaf() {
                        continue;
                    }
                    let e0 = entries.len();
                    for c in cell.children.clone() {
                        let cc = &tree.cells[c];
                        let v: [f64; 3] = std::array::from_fn(|k| cell.center[k] - cc.center[k]);
                        let key = direction_key(v, cc.half_width);
                        let ri = *keys.entry(key).or_insert_with(|| {
                            rb.push(v, &mut recs);
                            (recs.len() / rot_stride(p) - 1) as i32
                        });
                        let d = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt() as f32;
                        entries.push([c as i32, ri, d.to_bits() as i32, 0]);
                    }
                    tasks.push([pc as i32, e0 as i32, entries.len() as i32, 0]);
                }
                level_ranges.push((t0, tasks.len()));
            }
            if tasks.is_empty() {
                return Ok(());
            }
            let (zm2m, _, _) = z_tables(p);
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let d_entries = s.clone_htod(flat4(&entries))?;
            let d_rots = s.clone_htod(&recs)?;
            let d_z = s.clone_htod(&zm2m)?;
            let d_toff = s.clone_htod(&toff(p))?;
            let mult = st.multipoles.as_mut().unwrap();
            let threads = tr_threads(p);
            st.times.m2m += self.event_timed(|| {
                for &(a, b) in &level_ranges {
                    if b == a {
                        continue;
                    }
                    // in and out alias (children and parents are different cells)
                    let off = a as i32;
                    let mut lb = s.launch_builder(&f);
                    let (mp_in, _g) = raw_ptr(mult, &s);
                    lb.arg(&mp_in)
                        .arg(&mp_in)
                        .arg(&d_tasks)
                        .arg(&d_entries)
                        .arg(&d_rots);
                    lb.arg(&d_z).arg(&d_toff).arg(&off);
                    unsafe { lb.launch(blocks(b - a, threads)) }?;
                }
                Ok(())
            })?;
            Ok(())
        });
        times.m2m += wall;
        r
    }

    fn downward_impl(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        match plan.far_field {
            FarField::Fmm => self.fmm_downward(plan, st, times),
            FarField::Treecode => self.treecode_far(plan, st, times),
            FarField::Ppm => self.ppm_downward(plan, st, times),
        }
    }

    fn fmm_downward(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        let p = st.p;
        let dev = &self.dev;
        let s = dev.stream().clone();
        let tt = &plan.target_tree;
        let threads = tr_threads(p);
        let d_toff = s.clone_htod(&toff(p))?;
        let (_, zm2l, zl2l) = z_tables(p);
        // ---- M2L
        let mut wall = 0.0;
        let r: GpuResult<()> =
            timed(&mut wall, || {
                if self.m2l == M2lKind::Plain
                    && plan.lists.far.sources.iter().any(|s| s.image != NO_SHIFT)
                {
                    return Err(GpuError::Unsupported(
                        "plain M2L kernel: periodic images not supported".into(),
                    ));
                }
                let mut bufs = self.m2l_bufs.lock().unwrap();
                let ndirs = pack_m2l_into(plan, p, self.m2l == M2lKind::Rotation, &mut bufs);
                let (tasks, entries, recs) = (&bufs.tasks, &bufs.entries, &bufs.recs);
                let keys_len = ndirs;
                st.times.m2l_translations = entries.len() as u64;
                st.times.m2l_directions = keys_len;
                if tasks.is_empty() {
                    return Ok(());
                }
                let d_tasks = s.clone_htod(flat4(tasks))?;
                let d_entries = s.clone_htod(flat4(entries))?;
                let mult = st.multipoles.as_ref().unwrap();
                let loc = st.locals.as_mut().unwrap();
                let zero = 0i32;
                match self.m2l {
                    M2lKind::Rotation => {
                        let d_rots = s.clone_htod(&recs[..])?;
                        let d_z = s.clone_htod(&zm2l)?;
                        let f = dev.function(&FMM, &defines(p), "m2l_rot")?;
                        st.times.m2l += self.event_timed(|| {
                            let mut lb = s.launch_builder(&f);
                            lb.arg(mult)
                                .arg(&mut *loc)
                                .arg(&d_tasks)
                                .arg(&d_entries)
                                .arg(&d_rots);
                            lb.arg(&d_z).arg(&d_toff).arg(&zero);
                            unsafe { lb.launch(blocks(tasks.len(), threads)) }?;
                            Ok(())
                        })?;
                        st.rots = Some(d_rots);
                    }
                    M2lKind::Plain => {
                        let f = dev.function(&FMM, &defines(p), "m2l_plain")?;
                        st.times.m2l += self.event_timed(|| {
                            let mut lb = s.launch_builder(&f);
                            lb.arg(mult).arg(&mut *loc).arg(&d_tasks).arg(&d_entries);
                            lb.arg(&st.tcenters)
                                .arg(&st.scenters)
                                .arg(&st.knm)
                                .arg(&zero);
                            unsafe { lb.launch(blocks(tasks.len(), threads)) }?;
                            Ok(())
                        })?;
                    }
                    M2lKind::Ppm => return Err(GpuError::Unsupported(
                        "M2lKind::Ppm is not an FMM M2L: the PPM runs when the plan's far field \
                         is FarField::Ppm (Method::Ppm)"
                            .into(),
                    )),
                }
                Ok(())
            });
        times.m2l += wall;
        r?;
        // ---- L2L, level by level (parents -> children)
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let mut rb = RotationBuilder::new(p);
            let mut recs = Vec::new();
            let mut keys: FxHashMap<[i64; 3], i32> = FxHashMap::default();
            let mut tasks: Vec<[i32; 4]> = Vec::new();
            let mut entries: Vec<[i32; 4]> = Vec::new();
            let mut level_ranges = Vec::new();
            for l in 1..tt.levels.len() {
                let t0 = tasks.len();
                for c in tt.levels[l].clone() {
                    let cell = &tt.cells[c];
                    let pc = cell.parent.expect("non-root cell has a parent");
                    let parent = &tt.cells[pc];
                    let v: [f64; 3] = std::array::from_fn(|k| cell.center[k] - parent.center[k]);
                    let key = direction_key(v, cell.half_width);
                    let ri = *keys.entry(key).or_insert_with(|| {
                        rb.push(v, &mut recs);
                        (recs.len() / rot_stride(p) - 1) as i32
                    });
                    let d = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt() as f32;
                    let e0 = entries.len() as i32;
                    entries.push([pc as i32, ri, d.to_bits() as i32, 0]);
                    tasks.push([c as i32, e0, e0 + 1, 0]);
                }
                level_ranges.push((t0, tasks.len()));
            }
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let d_entries = s.clone_htod(flat4(&entries))?;
            let d_rots = s.clone_htod(&recs)?;
            let d_z = s.clone_htod(&zl2l)?;
            let f = dev.function(&FMM, &defines(p), "l2l_rot")?;
            let loc = st.locals.as_mut().unwrap();
            st.times.l2l += self.event_timed(|| {
                for &(a, b) in &level_ranges {
                    if b == a {
                        continue;
                    }
                    let off = a as i32;
                    let (lp, _g) = raw_ptr(loc, &s);
                    let mut lb = s.launch_builder(&f);
                    lb.arg(&lp)
                        .arg(&lp)
                        .arg(&d_tasks)
                        .arg(&d_entries)
                        .arg(&d_rots);
                    lb.arg(&d_z).arg(&d_toff).arg(&off);
                    unsafe { lb.launch(blocks(b - a, threads)) }?;
                }
                Ok(())
            })?;
            Ok(())
        });
        times.l2l += wall;
        r?;
        // ---- L2P
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let mut tasks: Vec<[i32; 4]> = Vec::new();
            for l in tt.leaves() {
                let r = tt.cells[l].range.clone();
                let mut first = r.start;
                while first < r.end {
                    let n = EVAL_BLOCK.min(r.end - first);
                    tasks.push([first as i32, n as i32, l as i32, 0]);
                    first += n;
                }
            }
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let f = dev.function(&FMM, &defines(p), "l2p")?;
            let loc = st.locals.as_ref().unwrap();
            st.times.l2p += self.event_timed(|| {
                let mut lb = s.launch_builder(&f);
                lb.arg(&st.tpos)
                    .arg(&st.tstr)
                    .arg(&d_tasks)
                    .arg(&st.tcenters)
                    .arg(loc);
                lb.arg(&st.knm).arg(&mut st.vel).arg(&mut st.strf);
                unsafe { lb.launch(blocks(tasks.len(), EVAL_BLOCK)) }?;
                Ok(())
            })?;
            Ok(())
        });
        times.l2p += wall;
        r
    }

    /// PPM upward pass on the device: P2M (`ppm_p2m`, one leaf per block), then M2M level by
    /// level (`ppm_apply_octant`, one parent per block).
    fn ppm_upward(&self, plan: &Plan, st: &mut CudaState, times: &mut PhaseTimes) -> GpuResult<()> {
        let s = self.dev.stream().clone();
        let CudaState {
            spos,
            sstr,
            ppm_dev,
            times: kt,
            ..
        } = st;
        let d = ppm_dev.as_mut().expect("device PPM");
        let tree = &plan.source_tree;
        let f = self.dev.function(&PPM, &d.defines(), "ppm_p2m")?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let tasks = leaf_tasks(tree);
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            kt.p2m += self.event_timed(|| {
                let mut b = s.launch_builder(&f);
                b.arg(&*spos).arg(&*sstr).arg(&d_tasks).arg(&d.scells);
                b.arg(&d.radius_factor)
                    .arg(&d.expo)
                    .arg(&d.wt)
                    .arg(&mut d.mult);
                unsafe { b.launch(blocks(tasks.len(), PPM_OPS)) }?;
                Ok(())
            })?;
            Ok(())
        });
        times.p2m += wall;
        r?;
        let f = self.dev.function(&PPM, &d.defines(), "ppm_apply_octant")?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            for l in (0..tree.levels.len().saturating_sub(1)).rev() {
                let tasks: Vec<[i32; 4]> = tree.levels[l]
                    .clone()
                    .filter(|&c| !tree.cells[c].is_leaf())
                    .map(|c| {
                        let ch = &tree.cells[c].children;
                        [c as i32, ch.start as i32, ch.len() as i32, 0]
                    })
                    .collect();
                if tasks.is_empty() {
                    continue;
                }
                let d_tasks = s.clone_htod(flat4(&tasks))?;
                kt.m2m += self.event_timed(|| {
                    let mut b = s.launch_builder(&f);
                    b.arg(&d_tasks)
                        .arg(&d.soct)
                        .arg(&d.m2m)
                        .arg(&mut d.mult)
                        .arg(&0i32);
                    unsafe { b.launch(blocks(tasks.len(), PPM_OPS)) }?;
                    Ok(())
                })?;
            }
            Ok(())
        });
        times.m2m += wall;
        r
    }

    /// PPM downward pass on the device: M2L (`ppm_m2l`) into f64 locals that start from what
    /// `add_locals` left on the host, L2L level by level and L2P into the fields.
    fn ppm_downward_device(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        let s = self.dev.stream().clone();
        let tt = &plan.target_tree;
        let CudaState {
            tpos,
            tstr,
            vel,
            strf,
            ppm,
            ppm_dev,
            times: kt,
            ..
        } = st;
        let h = ppm.as_mut().expect("PPM state");
        let d = ppm_dev.as_mut().expect("device PPM");
        let k = d.k;
        let mut d_loc = s.clone_htod(&h.locals)?;
        let f = self.dev.function(&PPM, &d.defines(), "ppm_m2l")?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let (tasks, entries, radii) = pack_ppm_m2l(plan, d.radius_factor);
            kt.m2l_translations = entries.len() as u64;
            kt.m2l_directions = 0;
            if tasks.is_empty() {
                return Ok(());
            }
            let unit: Vec<f32> = h
                .ops
                .unit_points()
                .iter()
                .flat_map(|u| [u[0] as f32, u[1] as f32, u[2] as f32, 0.0])
                .collect();
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let d_entries = s.clone_htod(flat4(&entries))?;
            let d_rad = s.clone_htod(&radii)?;
            let d_unit = s.clone_htod(&unit)?;
            kt.m2l += self.event_timed(|| {
                let mut lb = s.launch_builder(&f);
                lb.arg(&d.mult)
                    .arg(&mut d_loc)
                    .arg(&d_tasks)
                    .arg(&d_entries);
                lb.arg(&d_rad).arg(&d_unit);
                unsafe { lb.launch(blocks(tasks.len(), ppm_threads(k))) }?;
                Ok(())
            })?;
            Ok(())
        });
        times.m2l += wall;
        r?;
        let f = self.dev.function(&PPM, &d.defines(), "ppm_apply_octant")?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            for l in 1..tt.levels.len() {
                let tasks: Vec<[i32; 4]> = tt.levels[l]
                    .clone()
                    .map(|c| [c as i32, tt.cells[c].parent.unwrap_or(0) as i32, 1, 0])
                    .collect();
                if tasks.is_empty() {
                    continue;
                }
                let d_tasks = s.clone_htod(flat4(&tasks))?;
                kt.l2l += self.event_timed(|| {
                    let mut b = s.launch_builder(&f);
                    b.arg(&d_tasks)
                        .arg(&d.toct)
                        .arg(&d.l2l)
                        .arg(&mut d_loc)
                        .arg(&1i32);
                    unsafe { b.launch(blocks(tasks.len(), PPM_OPS)) }?;
                    Ok(())
                })?;
            }
            Ok(())
        });
        times.l2l += wall;
        r?;
        let f = self.dev.function(&PPM, &d.defines(), "ppm_l2p")?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let tasks = leaf_tasks(tt);
            if tasks.is_empty() {
                return Ok(());
            }
            let nb = tasks.len().min(PPM_L2P_BLOCKS);
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let mut scratch = s.alloc_zeros::<f64>(nb * d.scratch_len.max(1))?;
            let ntasks = tasks.len() as i32;
            kt.l2p += self.event_timed(|| {
                let mut b = s.launch_builder(&f);
                b.arg(&*tpos)
                    .arg(&*tstr)
                    .arg(&d_tasks)
                    .arg(&ntasks)
                    .arg(&d.tcells);
                b.arg(&d.radius_factor).arg(&d.expo).arg(&d.up).arg(&d.w);
                b.arg(&d_loc)
                    .arg(&mut scratch)
                    .arg(&mut *vel)
                    .arg(&mut *strf);
                unsafe { b.launch(blocks(nb, PPM_OPS)) }?;
                Ok(())
            })?;
            Ok(())
        });
        times.l2p += wall;
        r
    }

    /// PPM downward pass: M2L on the GPU (`ppm_m2l`), L2L and L2P on the host (or all on the
    /// device, see [`Self::ppm_downward_device`]).
    fn ppm_downward(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        use rayon::prelude::*;
        if st.ppm_dev.is_some() {
            return self.ppm_downward_device(plan, st, times);
        }
        let s = self.dev.stream().clone();
        let tt = &plan.target_tree;
        let h = st.ppm.as_mut().expect("PPM state");
        let k = h.ops.count();
        let f = self
            .dev
            .function(&PPM, &[("PPM_K", k), ("PPM_P", h.ops.order())], "ppm_m2l")?;
        let mut wall = 0.0;
        let kt = &mut st.times;
        let r: GpuResult<()> = timed(&mut wall, || {
            let (tasks, entries, radii) = pack_ppm_m2l(plan, h.ops.radius_factor());
            kt.m2l_translations = entries.len() as u64;
            kt.m2l_directions = 0;
            if tasks.is_empty() {
                return Ok(());
            }
            let unit: Vec<f32> = h
                .ops
                .unit_points()
                .iter()
                .flat_map(|u| [u[0] as f32, u[1] as f32, u[2] as f32, 0.0])
                .collect();
            let d_mult = s.clone_htod(&h.multipoles)?;
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let d_entries = s.clone_htod(flat4(&entries))?;
            let d_rad = s.clone_htod(&radii)?;
            let d_unit = s.clone_htod(&unit)?;
            let mut d_loc = s.alloc_zeros::<f64>(tt.cells.len() * 3 * k)?;
            kt.m2l += self.event_timed(|| {
                let mut lb = s.launch_builder(&f);
                lb.arg(&d_mult)
                    .arg(&mut d_loc)
                    .arg(&d_tasks)
                    .arg(&d_entries);
                lb.arg(&d_rad).arg(&d_unit);
                unsafe { lb.launch(blocks(tasks.len(), ppm_threads(k))) }?;
                Ok(())
            })?;
            let loc = s.clone_dtoh(&d_loc)?;
            s.synchronize()?;
            h.locals
                .par_iter_mut()
                .zip(loc.par_iter())
                .for_each(|(a, b)| *a += b);
            Ok(())
        });
        times.m2l += wall;
        r?;
        fmm::backend::timed(&mut times.l2l, || h.l2l(tt));
        fmm::backend::timed(&mut times.l2p, || h.l2p(tt));
        Ok(())
    }

    fn treecode_far(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        let p = st.p;
        let s = self.dev.stream().clone();
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let (tasks, entries, evals) = pack_m2p(plan);
            st.times.m2p_evaluations = evals;
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let d_entries = s.clone_htod(flat4(&entries))?;
            let f = self.dev.function(&FMM, &defines(p), "m2p")?;
            let mult = st.multipoles.as_ref().unwrap();
            let period = plan.periodic.map(|q| q.box_length).unwrap_or(0.0) as f32;
            st.times.m2p += self.event_timed(|| {
                let mut lb = s.launch_builder(&f);
                lb.arg(&st.tpos).arg(&st.tstr).arg(&d_tasks).arg(&d_entries);
                lb.arg(&st.scenters).arg(mult).arg(&st.knm).arg(&period);
                lb.arg(&mut st.vel).arg(&mut st.strf);
                unsafe { lb.launch(blocks(tasks.len(), EVAL_BLOCK)) }?;
                Ok(())
            })?;
            Ok(())
        });
        times.m2p += wall;
        r
    }

    fn near_impl(&self, plan: &Plan, st: &mut CudaState, times: &mut PhaseTimes) -> GpuResult<()> {
        let s = self.dev.stream().clone();
        let f = self.dev.function(&P2P, &[], "p2p_near")?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let lay = NearLayout::build(
                &plan.target_tree,
                &plan.source_tree,
                &plan.lists.near,
                P2P_TARGETS,
            );
            st.times.p2p_pairs = lay.pairs;
            if lay.tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(flat4(&lay.tasks))?;
            let d_nsrc = s.clone_htod(&lay.task_nsrc)?;
            let d_runs = s.clone_htod(flat4(&lay.runs))?;
            let period = plan.periodic.map(|q| q.box_length).unwrap_or(0.0) as f32;
            st.times.p2p += self.event_timed(|| {
                let mut lb = s.launch_builder(&f);
                lb.arg(&st.tpos).arg(&st.tstr).arg(&st.spos).arg(&st.sstr);
                lb.arg(&d_tasks).arg(&d_nsrc).arg(&d_runs).arg(&period);
                lb.arg(&mut st.vel).arg(&mut st.strf);
                unsafe { lb.launch(blocks(lay.tasks.len(), P2P_THREADS)) }?;
                Ok(())
            })?;
            Ok(())
        });
        times.p2p += wall;
        r
    }

    fn fields_impl(&self, st: CudaState) -> GpuResult<Fields> {
        let s = self.dev.stream();
        let v = s.clone_dtoh(&st.vel)?;
        let w = s.clone_dtoh(&st.strf)?;
        s.synchronize()?;
        *self.last.lock().unwrap() = st.times.clone();
        let host = st.ppm.and_then(|h| h.fields);
        let conv = |x: &[f32], add: Option<&Vec<[f64; 3]>>| -> Vec<[f64; 3]> {
            use rayon::prelude::*;
            x.par_chunks_exact(3)
                .enumerate()
                .map(|(i, c)| {
                    let a = add.map(|a| a[i]).unwrap_or([0.0; 3]);
                    [
                        (c[0] as f64 + a[0]) * INV_4PI,
                        (c[1] as f64 + a[1]) * INV_4PI,
                        (c[2] as f64 + a[2]) * INV_4PI,
                    ]
                })
                .collect()
        };
        debug_assert_eq!(v.len(), 3 * st.nt);
        Ok(Fields {
            velocity: conv(&v, host.as_ref().map(|f| &f.velocity)),
            stretching: conv(&w, host.as_ref().map(|f| &f.stretching)),
        })
    }

    /// Direct all-pairs sum on the device (free space): fields (with `1/(4 pi)`, in the given
    /// order) and the kernel time in seconds.
    pub fn all_pairs(&self, sources: &Sources, targets: &Targets) -> GpuResult<(Fields, f64)> {
        let s = self.dev.stream().clone();
        let f = self.dev.function(&P2P, &[], "p2p_all")?;
        let (sp, sa) = pack_sources(sources);
        let (tp, ta) = pack_targets(targets);
        let (d_sp, d_sa) = (s.clone_htod(&sp)?, s.clone_htod(&sa)?);
        let (d_tp, d_ta) = (s.clone_htod(&tp)?, s.clone_htod(&ta)?);
        let mut vel = s.alloc_zeros::<f32>(3 * targets.len())?;
        let mut strf = s.alloc_zeros::<f32>(3 * targets.len())?;
        let (nt, ns) = (targets.len() as i32, sources.len() as i32);
        let secs = self.event_timed(|| {
            let mut lb = s.launch_builder(&f);
            lb.arg(&d_tp)
                .arg(&d_ta)
                .arg(&nt)
                .arg(&d_sp)
                .arg(&d_sa)
                .arg(&ns);
            lb.arg(&mut vel).arg(&mut strf);
            unsafe { lb.launch(blocks(targets.len().div_ceil(128), 128)) }?;
            Ok(())
        })?;
        let st = CudaState {
            p: 0,
            nt: targets.len(),
            tpos: d_tp,
            tstr: d_ta,
            spos: d_sp,
            sstr: d_sa,
            vel,
            strf,
            scenters: s.alloc_zeros(1)?,
            tcenters: s.alloc_zeros(1)?,
            knm: s.alloc_zeros(1)?,
            multipoles: None,
            locals: None,
            rots: None,
            ppm: None,
            ppm_dev: None,
            times: self.last_kernel_times(),
        };
        Ok((self.fields_impl(st)?, secs))
    }
}

/// `(tasks, entries, rotation records, number of directions)` of [`pack_m2l`].
pub type M2lPacking = (Vec<[i32; 4]>, Vec<[i32; 4]>, Vec<f32>, usize);

/// Host buffers of the M2L packing, kept by the backend between evaluations (their capacity
/// is reused: no reallocation and no fresh page faults per call).
#[derive(Default)]
pub struct M2lBuffers {
    pub tasks: Vec<[i32; 4]>,
    pub entries: Vec<[i32; 4]>,
    pub recs: Vec<f32>,
    keys: Vec<u128>,
    /// rotation records of the directions met so far, for order `cache_order`
    rot_cache: FxHashMap<u128, Vec<f32>>,
    cache_order: usize,
}

const KEY_BIAS: i64 = 1 << 41;
const KEY_MASK: u128 = (1 << 42) - 1;

/// A reduced direction key in one `u128` (42 bits per component).
fn pack_key(k: [i64; 3]) -> u128 {
    let f = |x: i64| ((x + KEY_BIAS) as u128) & KEY_MASK;
    (f(k[0]) << 84) | (f(k[1]) << 42) | f(k[2])
}

fn unpack_key(k: u128) -> [f64; 3] {
    let f = |s: u32| (((k >> s) & KEY_MASK) as i64 - KEY_BIAS) as f64;
    [f(84), f(42), f(0)]
}

/// M2L work in the kernel's layout, packed in parallel: tasks `(target cell, first entry, end
/// entry, 0)` (the far list's CSR rows), entries `(source cell, rotation, distance bits, 0)`,
/// rotation records of the distinct directions (if `with_rot`) and their number.
pub fn pack_m2l(plan: &Plan, p: usize, with_rot: bool) -> M2lPacking {
    let mut b = M2lBuffers::default();
    let n = pack_m2l_into(plan, p, with_rot, &mut b);
    (b.tasks, b.entries, b.recs, n)
}

/// [`pack_m2l`] into reused buffers; returns the number of distinct directions. Entries are
/// filled in parallel over the far list's rows (one pass for cells, distances and direction
/// keys), the distinct keys collected by per-thread hash sets, and the rotation indices looked
/// up in parallel.
pub fn pack_m2l_into(plan: &Plan, p: usize, with_rot: bool, out: &mut M2lBuffers) -> usize {
    use rayon::prelude::*;
    let (tt, stree, far) = (&plan.target_tree, &plan.source_tree, &plan.lists.far);
    let tasks = &mut out.tasks;
    tasks.clear();
    tasks.par_extend(
        (0..tt.cells.len())
            .into_par_iter()
            .filter(|&t| far.offsets[t + 1] > far.offsets[t])
            .map(|t| {
                [
                    t as i32,
                    far.offsets[t] as i32,
                    far.offsets[t + 1] as i32,
                    0,
                ]
            }),
    );
    let n = far.len();
    out.entries.clear();
    out.entries.resize(n, [0; 4]);
    out.keys.clear();
    out.keys.resize(if with_rot { n } else { 0 }, 0);
    // rows of the far list are contiguous in CSR order: split the outputs by rows
    {
        let mut rows = Vec::with_capacity(tasks.len());
        let mut erest = &mut out.entries[..];
        let mut krest = &mut out.keys[..];
        let mut at = 0usize;
        for t in tasks.iter() {
            let (e0, e1) = (t[1] as usize, t[2] as usize);
            let (_, r) = std::mem::take(&mut erest).split_at_mut(e0 - at);
            let (er, r) = r.split_at_mut(e1 - e0);
            erest = r;
            let kr = if with_rot {
                let (_, r) = std::mem::take(&mut krest).split_at_mut(e0 - at);
                let (kr, r) = r.split_at_mut(e1 - e0);
                krest = r;
                kr
            } else {
                &mut []
            };
            rows.push((t[0] as usize, e0, er, kr));
            at = e1;
        }
        rows.into_par_iter().for_each(|(t, e0, er, kr)| {
            let tc = &tt.cells[t];
            for (k, sref) in far.sources[e0..e0 + er.len()].iter().enumerate() {
                let sc = plan.source_center(sref.cell as usize, sref.image);
                let v: [f64; 3] = std::array::from_fn(|k| tc.center[k] - sc[k]);
                let d = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt() as f32;
                er[k] = [sref.cell as i32, 0, d.to_bits() as i32, 0];
                if !kr.is_empty() {
                    // the unreduced integer vector (v / h): cheap per entry; reduced by
                    // the gcd once per distinct vector below
                    let h = tc
                        .half_width
                        .min(stree.cells[sref.cell as usize].half_width);
                    let ih = 1.0 / h;
                    kr[k] = pack_key(std::array::from_fn(|d| (v[d] * ih).round() as i64));
                }
            }
        });
    }
    out.recs.clear();
    if !with_rot {
        return 0;
    }
    // distinct integer vectors: per-thread hash sets merged (a few thousand keys)
    let set = out
        .keys
        .par_chunks(1 << 16)
        .fold(FxHashSet::<u128>::default, |mut m, ks| {
            m.extend(ks.iter().copied());
            m
        })
        .reduce(FxHashSet::<u128>::default, |mut a, b| {
            a.extend(b);
            a
        });
    // reduce each to its direction (gcd), number the distinct directions
    let raw: Vec<(u128, u128)> = set
        .into_iter()
        .map(|k| {
            let v = unpack_key(k);
            (k, pack_key(direction_key(v, 1.0)))
        })
        .collect();
    let mut uniq: Vec<u128> = raw.iter().map(|r| r.1).collect();
    uniq.sort_unstable();
    uniq.dedup();
    // rotation records: cached per (order, direction) across evaluations, the missing ones
    // computed in parallel
    if out.cache_order != p {
        out.rot_cache.clear();
        out.cache_order = p;
    }
    let missing: Vec<u128> = uniq
        .iter()
        .copied()
        .filter(|k| !out.rot_cache.contains_key(k))
        .collect();
    let fresh: Vec<(u128, Vec<f32>)> = missing
        .par_iter()
        .map_init(
            || RotationBuilder::new(p),
            |rb, &u| {
                let mut r = Vec::with_capacity(rot_stride(p));
                rb.push(unpack_key(u), &mut r);
                (u, r)
            },
        )
        .collect();
    out.rot_cache.extend(fresh);
    for u in &uniq {
        out.recs.extend_from_slice(&out.rot_cache[u]);
    }
    let index: FxHashMap<u128, i32> = raw
        .iter()
        .map(|(k, r)| (*k, uniq.binary_search(r).unwrap() as i32))
        .collect();
    out.entries
        .par_iter_mut()
        .zip(out.keys.par_iter())
        .for_each(|(e, k)| e[1] = index[k]);
    uniq.len()
}

/// M2P (treecode) work in the kernel's layout, packed in parallel over the target leaves:
/// tasks `(first target, count <= EVAL_BLOCK, first entry, end entry)`, entries `(source cell,
/// image, 0, 0)` (the far rows of the leaf and of its ancestors), and the number of (cell,
/// target) evaluations.
pub fn pack_m2p(plan: &Plan) -> (Vec<[i32; 4]>, Vec<[i32; 4]>, u64) {
    use rayon::prelude::*;
    let tt = &plan.target_tree;
    let far = &plan.lists.far;
    let leaves: Vec<usize> = tt.leaves().collect();
    // per leaf: number of entries (its far row and its ancestors') and of tasks
    let counts: Vec<(usize, usize)> = leaves
        .par_iter()
        .map(|&l| {
            let mut n = 0;
            let mut cell = Some(l);
            while let Some(c) = cell {
                n += far.row(c).len();
                cell = tt.cells[c].parent;
            }
            let nt = if n == 0 {
                0
            } else {
                tt.cells[l].range.len().div_ceil(EVAL_BLOCK)
            };
            (n, nt)
        })
        .collect();
    let (ne, nt) = counts.iter().fold((0, 0), |(a, b), &(x, y)| (a + x, b + y));
    let mut entries = vec![[0i32; 4]; ne];
    let mut tasks = vec![[0i32; 4]; nt];
    let mut work = Vec::with_capacity(leaves.len());
    {
        let (mut er, mut tr) = (&mut entries[..], &mut tasks[..]);
        let mut e0 = 0usize;
        for (&l, &(n, m)) in leaves.iter().zip(&counts) {
            let (e, r) = std::mem::take(&mut er).split_at_mut(n);
            let (t, r2) = std::mem::take(&mut tr).split_at_mut(m);
            er = r;
            tr = r2;
            if m > 0 {
                work.push((l, e0, e, t));
            }
            e0 += n;
        }
    }
    let evals: u64 = work
        .into_par_iter()
        .map(|(l, e0, e, t)| {
            let mut k = 0;
            let mut cell = Some(l);
            while let Some(c) = cell {
                for s in far.row(c) {
                    e[k] = [s.cell as i32, s.image as i32, 0, 0];
                    k += 1;
                }
                cell = tt.cells[c].parent;
            }
            let r = tt.cells[l].range.clone();
            let e1 = e0 + e.len();
            let mut first = r.start;
            for task in t.iter_mut() {
                let n = EVAL_BLOCK.min(r.end - first);
                *task = [first as i32, n as i32, e0 as i32, e1 as i32];
                first += n;
            }
            (r.len() * e.len()) as u64
        })
        .sum();
    (tasks, entries, evals)
}

/// Raw device pointer of a slice, for kernels that read and write the same buffer (M2M, L2L:
/// different cells of one array). The guard records the stream's use of the slice when dropped.
fn raw_ptr<'a>(
    x: &'a mut CudaSlice<f32>,
    s: &'a Arc<cudarc::driver::CudaStream>,
) -> (u64, impl Drop + 'a) {
    use cudarc::driver::DevicePtrMut;
    let (ptr, guard) = x.device_ptr_mut(s);
    (ptr, guard)
}

impl Backend for CudaBackend {
    type State = CudaState;

    fn name(&self) -> String {
        let (a, b) = self.dev.compute_capability();
        format!(
            "cuda ({}, sm_{a}{b}, device {})",
            self.dev.name(),
            self.dev.index()
        )
    }

    fn prepare(
        &self,
        plan: &Plan,
        sources: &Sources,
        targets: &Targets,
    ) -> Result<CudaState, FmmError> {
        Ok(self.prepare_impl(plan, sources, targets)?)
    }

    fn upward(
        &self,
        plan: &Plan,
        state: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        Ok(self.upward_impl(plan, state, times)?)
    }

    fn downward(
        &self,
        plan: &Plan,
        state: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        Ok(self.downward_impl(plan, state, times)?)
    }

    fn near_field(
        &self,
        plan: &Plan,
        state: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        Ok(self.near_impl(plan, state, times)?)
    }

    fn fields(&self, _plan: &Plan, state: CudaState) -> Result<Fields, FmmError> {
        Ok(self.fields_impl(state)?)
    }

    /// Interleaved `(re, im)` coefficients, as the CPU backend.
    fn multipoles(
        &self,
        plan: &Plan,
        st: &CudaState,
        cells: &[usize],
    ) -> Result<Vec<f64>, FmmError> {
        if let Some(d) = st.ppm_dev.as_ref() {
            let len = 3 * d.k;
            let s = self.dev.stream();
            let host = s.clone_dtoh(&d.mult).map_err(GpuError::from)?;
            s.synchronize().map_err(GpuError::from)?;
            return Ok(cells
                .iter()
                .flat_map(|&c| host[c * len..(c + 1) * len].iter().copied())
                .collect());
        }
        if let Some(h) = st.ppm.as_ref() {
            let len = h.len();
            return Ok(cells
                .iter()
                .flat_map(|&c| h.multipoles[c * len..(c + 1) * len].iter().copied())
                .collect());
        }
        let len = 2 * 3 * ncoef(plan.order);
        let m = st
            .multipoles
            .as_ref()
            .ok_or_else(|| FmmError::Backend("no multipoles".into()))?;
        let s = self.dev.stream();
        let host = s.clone_dtoh(m).map_err(GpuError::from)?;
        s.synchronize().map_err(GpuError::from)?;
        Ok(cells
            .iter()
            .flat_map(|&c| host[c * len..(c + 1) * len].iter().map(|&x| x as f64))
            .collect())
    }

    fn set_multipoles(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        cells: &[usize],
        data: &[f64],
    ) -> Result<(), FmmError> {
        if let Some(d) = st.ppm_dev.as_mut() {
            let len = 3 * d.k;
            let s = self.dev.stream().clone();
            let mut host = s.clone_dtoh(&d.mult).map_err(GpuError::from)?;
            s.synchronize().map_err(GpuError::from)?;
            for (k, &c) in cells.iter().enumerate() {
                host[c * len..(c + 1) * len].copy_from_slice(&data[k * len..(k + 1) * len]);
            }
            s.memcpy_htod(&host, &mut d.mult).map_err(GpuError::from)?;
            return Ok(());
        }
        if let Some(h) = st.ppm.as_mut() {
            let len = h.len();
            for (k, &c) in cells.iter().enumerate() {
                h.multipoles[c * len..(c + 1) * len].copy_from_slice(&data[k * len..(k + 1) * len]);
            }
            return Ok(());
        }
        let len = 2 * 3 * ncoef(plan.order);
        let s = self.dev.stream().clone();
        let m = st
            .multipoles
            .as_mut()
            .ok_or_else(|| FmmError::Backend("no multipoles".into()))?;
        let mut host = s.clone_dtoh(&*m).map_err(GpuError::from)?;
        s.synchronize().map_err(GpuError::from)?;
        for (k, &c) in cells.iter().enumerate() {
            for i in 0..len {
                host[c * len + i] = data[k * len + i] as f32;
            }
        }
        s.memcpy_htod(&host, m).map_err(GpuError::from)?;
        Ok(())
    }

    /// Host round trip of the local expansions (periodic far images, MPI remote parts):
    /// simple, and small next to the rest of an evaluation.
    fn add_locals(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        cells: &[usize],
        data: &[f64],
    ) -> Result<(), FmmError> {
        if let Some(h) = st.ppm.as_mut() {
            let len = h.len();
            for (k, &c) in cells.iter().enumerate() {
                h.locals[c * len..(c + 1) * len]
                    .iter_mut()
                    .zip(&data[k * len..(k + 1) * len])
                    .for_each(|(a, b)| *a += b);
            }
            return Ok(());
        }
        let len = 2 * 3 * ncoef(plan.order);
        let s = self.dev.stream().clone();
        if st.locals.is_none() {
            if plan.far_field == FarField::Treecode {
                return Err(GpuError::Unsupported(
                    "add_locals with the treecode (no L2L/L2P pass) is not supported on the GPU"
                        .into(),
                )
                .into());
            }
            st.locals = Some(
                s.alloc_zeros::<f32>(plan.target_tree.cells.len() * len)
                    .map_err(GpuError::from)?,
            );
        }
        let loc = st.locals.as_mut().unwrap();
        let mut host = s.clone_dtoh(&*loc).map_err(GpuError::from)?;
        s.synchronize().map_err(GpuError::from)?;
        for (k, &c) in cells.iter().enumerate() {
            for i in 0..len {
                host[c * len + i] += data[k * len + i] as f32;
            }
        }
        s.memcpy_htod(&host, loc).map_err(GpuError::from)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fmm::{EvalParams, Method};

    #[test]
    fn m2l_packing_follows_the_far_lists() {
        let s = fmm::testsets::standard(4000, 3);
        let params = EvalParams {
            method: Method::Fmm,
            order: 4,
            leaf_size: 16,
            ..Default::default()
        };
        let mut t = PhaseTimes::default();
        let (plan, _, _) = fmm::evaluators::plan(&params, &s, &s.as_targets(), &mut t).unwrap();
        let (tasks, entries, recs, ndirs) = pack_m2l(&plan, 4, true);
        assert_eq!(entries.len(), plan.lists.far.len());
        assert_eq!(recs.len(), ndirs * rot_stride(4));
        assert!(ndirs > 0 && ndirs < entries.len());
        for task in &tasks {
            let t = task[0] as usize;
            let row = plan.lists.far.row(t);
            assert_eq!((task[2] - task[1]) as usize, row.len());
            for (e, sref) in entries[task[1] as usize..task[2] as usize].iter().zip(row) {
                assert_eq!(e[0], sref.cell as i32);
                let v: [f64; 3] = std::array::from_fn(|k| {
                    plan.target_tree.cells[t].center[k]
                        - plan.source_tree.cells[sref.cell as usize].center[k]
                });
                let d = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt() as f32;
                assert_eq!(f32::from_bits(e[2] as u32), d);
                assert!((e[1] as usize) < ndirs);
                // the entry's rotation record is the rotation of its direction
                let stride = rot_stride(4);
                let mut r = Vec::new();
                RotationBuilder::new(4).push(v, &mut r);
                let got = &recs[e[1] as usize * stride..(e[1] as usize + 1) * stride];
                for (x, y) in got.iter().zip(&r) {
                    assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{x} {y}");
                }
            }
        }
    }

    #[test]
    fn m2p_packing_matches_sequential_walk() {
        let s = fmm::testsets::standard(5000, 4);
        let params = EvalParams {
            method: Method::Treecode,
            order: 4,
            leaf_size: 100,
            ..Default::default()
        };
        let mut t = PhaseTimes::default();
        let (plan, _, _) = fmm::evaluators::plan(&params, &s, &s.as_targets(), &mut t).unwrap();
        let (tasks, entries, evals) = pack_m2p(&plan);
        let tt = &plan.target_tree;
        let (mut et, mut ee, mut ev) = (Vec::new(), Vec::new(), 0u64);
        for l in tt.leaves() {
            let e0 = ee.len();
            let mut cell = Some(l);
            while let Some(c) = cell {
                ee.extend(
                    plan.lists
                        .far
                        .row(c)
                        .iter()
                        .map(|s| [s.cell as i32, s.image as i32, 0, 0]),
                );
                cell = tt.cells[c].parent;
            }
            let e1 = ee.len();
            if e1 == e0 {
                continue;
            }
            let r = tt.cells[l].range.clone();
            ev += (r.len() * (e1 - e0)) as u64;
            let mut first = r.start;
            while first < r.end {
                let n = EVAL_BLOCK.min(r.end - first);
                et.push([first as i32, n as i32, e0 as i32, e1 as i32]);
                first += n;
            }
        }
        assert!(!tasks.is_empty());
        assert_eq!(tasks, et);
        assert_eq!(entries, ee);
        assert_eq!(evals, ev);
    }
}
