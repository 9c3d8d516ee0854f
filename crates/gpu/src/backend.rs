//! [`CudaBackend`]: the [`fmm::Backend`] on one CUDA device.
//!
//! `prepare` uploads the sorted particles once (fp32 `float4`), the tables of the order and the
//! cell centres; `upward` runs P2M (one leaf per block) and M2M level by level; `downward` runs
//! M2L (rotation-based O(p^3), or the plain O(p^4) kernel, or the PPM hook), L2L level by level
//! and L2P, or M2P for the treecode; `near_field` runs P2P; `fields` downloads the fields once
//! and applies `1/(4 pi)` in f64. Particles and expansions stay on the device between phases.
//! Interaction lists come from the CPU plan and are packed on the host in each phase (that cost
//! is inside the phase's wall time). Every phase synchronizes at its end so that the wall-clock
//! phase times are the device times; the kernel-only times (CUDA events) are kept in
//! [`KernelTimes`] (see [`CudaBackend::last_kernel_times`]).

use crate::device::{GpuDevice, GpuError, GpuResult, FMM, P2P};
use crate::layout::{pack_sources, pack_targets, NearLayout};
use crate::tables::{direction_key, knm_table, rot_stride, toff, z_tables, RotationBuilder};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use fmm::backend::{timed, Backend, FarField, PhaseTimes, Plan};
use fmm::expansions::ncoef;
use fmm::kernel::INV_4PI;
use fmm::lists::NO_SHIFT;
use fmm::{Fields, FmmError, Sources, Targets};
use std::collections::HashMap;
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
    /// Pseudo-particle method: not implemented yet (its own issue); hook for `m2l_ppm`.
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
    times: KernelTimes,
}

fn defines(p: usize) -> [(&'static str, usize); 1] {
    [("ORDER", p)]
}

fn flat4(v: &[[i32; 4]]) -> Vec<i32> {
    v.iter().flatten().copied().collect()
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

fn blocks(n: usize, threads: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn tr_threads(p: usize) -> usize {
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
        Ok(())
    }

    /// Runs `f` between two CUDA events and returns its result and the elapsed seconds.
    fn event_timed(&self, f: impl FnOnce() -> GpuResult<()>) -> GpuResult<f64> {
        let s = self.dev.stream();
        let e0 = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        f()?;
        let e1 = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        e1.synchronize()?;
        Ok(e0.elapsed_ms(&e1)? as f64 * 1e-3)
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
        if plan.far_field == FarField::Ppm {
            return Err(GpuError::Unsupported(
                "the PPM far field is not implemented on the GPU yet (hook: M2lKind::Ppm)".into(),
            ));
        }
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
            multipoles: Some(s.alloc_zeros::<f32>(plan.source_tree.cells.len() * len)?),
            locals: match plan.far_field {
                FarField::Treecode => None,
                _ => Some(s.alloc_zeros::<f32>(plan.target_tree.cells.len() * len)?),
            },
            rots: None,
            times: KernelTimes::default(),
        };
        self.dev.synchronize()?;
        Ok(state)
    }

    fn upward_impl(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        let p = st.p;
        let dev = &self.dev;
        let s = dev.stream().clone();
        let tree = &plan.source_tree;
        // P2M
        let f = dev.function(&FMM, &defines(p), "p2m")?;
        let p2m_threads = ncoef(p).div_ceil(32) * 32;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let tasks: Vec<[i32; 4]> = tree
                .leaves()
                .filter(|&l| !tree.cells[l].is_empty())
                .map(|l| {
                    let r = &tree.cells[l].range;
                    [r.start as i32, r.len() as i32, l as i32, 0]
                })
                .collect();
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(&flat4(&tasks))?;
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
            let mut keys: HashMap<[i64; 3], i32> = HashMap::new();
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
            let d_tasks = s.clone_htod(&flat4(&tasks))?;
            let d_entries = s.clone_htod(&flat4(&entries))?;
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
            FarField::Ppm => Err(GpuError::Unsupported(
                "the PPM far field is not implemented on the GPU yet".into(),
            )),
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
        let r: GpuResult<()> = timed(&mut wall, || {
            if self.m2l == M2lKind::Plain
                && plan.lists.far.sources.iter().any(|s| s.image != NO_SHIFT)
            {
                return Err(GpuError::Unsupported(
                    "plain M2L kernel: periodic images not supported".into(),
                ));
            }
            let (tasks, entries, recs, ndirs) = pack_m2l(plan, p, self.m2l == M2lKind::Rotation);
            let keys_len = ndirs;
            st.times.m2l_translations = entries.len() as u64;
            st.times.m2l_directions = keys_len;
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(&flat4(&tasks))?;
            let d_entries = s.clone_htod(&flat4(&entries))?;
            let mult = st.multipoles.as_ref().unwrap();
            let loc = st.locals.as_mut().unwrap();
            let zero = 0i32;
            match self.m2l {
                M2lKind::Rotation => {
                    let d_rots = s.clone_htod(&recs)?;
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
                M2lKind::Ppm => {
                    return Err(GpuError::Unsupported(
                        "PPM M2L on the GPU is not implemented yet (hook: M2lKind::Ppm)".into(),
                    ))
                }
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
            let mut keys: HashMap<[i64; 3], i32> = HashMap::new();
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
            let d_tasks = s.clone_htod(&flat4(&tasks))?;
            let d_entries = s.clone_htod(&flat4(&entries))?;
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
            let d_tasks = s.clone_htod(&flat4(&tasks))?;
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

    fn treecode_far(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        let p = st.p;
        let s = self.dev.stream().clone();
        let tt = &plan.target_tree;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let mut tasks: Vec<[i32; 4]> = Vec::new();
            let mut entries: Vec<[i32; 4]> = Vec::new();
            let mut evals = 0u64;
            for l in tt.leaves() {
                let e0 = entries.len();
                let mut cell = Some(l);
                while let Some(c) = cell {
                    entries.extend(
                        plan.lists
                            .far
                            .row(c)
                            .iter()
                            .map(|s| [s.cell as i32, s.image as i32, 0, 0]),
                    );
                    cell = tt.cells[c].parent;
                }
                let e1 = entries.len();
                if e1 == e0 {
                    continue;
                }
                let r = tt.cells[l].range.clone();
                evals += (r.len() * (e1 - e0)) as u64;
                let mut first = r.start;
                while first < r.end {
                    let n = EVAL_BLOCK.min(r.end - first);
                    tasks.push([first as i32, n as i32, e0 as i32, e1 as i32]);
                    first += n;
                }
            }
            st.times.m2p_evaluations = evals;
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(&flat4(&tasks))?;
            let d_entries = s.clone_htod(&flat4(&entries))?;
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
            let d_tasks = s.clone_htod(&flat4(&lay.tasks))?;
            let d_nsrc = s.clone_htod(&lay.task_nsrc)?;
            let d_runs = s.clone_htod(&flat4(&lay.runs))?;
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
        let conv = |x: &[f32]| -> Vec<[f64; 3]> {
            x.chunks_exact(3)
                .map(|c| {
                    [
                        c[0] as f64 * INV_4PI,
                        c[1] as f64 * INV_4PI,
                        c[2] as f64 * INV_4PI,
                    ]
                })
                .collect()
        };
        debug_assert_eq!(v.len(), 3 * st.nt);
        Ok(Fields {
            velocity: conv(&v),
            stretching: conv(&w),
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
            times: self.last_kernel_times(),
        };
        Ok((self.fields_impl(st)?, secs))
    }
}

/// `(tasks, entries, rotation records, number of directions)` of [`pack_m2l`].
pub type M2lPacking = (Vec<[i32; 4]>, Vec<[i32; 4]>, Vec<f32>, usize);

/// M2L work in the kernel's layout, packed in parallel: tasks `(target cell, first entry, end
/// entry, 0)` (the far list's CSR rows), entries `(source cell, rotation, distance bits, 0)`,
/// rotation records of the distinct directions (if `with_rot`) and their number.
pub fn pack_m2l(plan: &Plan, p: usize, with_rot: bool) -> M2lPacking {
    use rayon::prelude::*;
    let (tt, stree, far) = (&plan.target_tree, &plan.source_tree, &plan.lists.far);
    let tasks: Vec<[i32; 4]> = (0..tt.cells.len())
        .filter(|&t| far.offsets[t + 1] > far.offsets[t])
        .map(|t| {
            [
                t as i32,
                far.offsets[t] as i32,
                far.offsets[t + 1] as i32,
                0,
            ]
        })
        .collect();
    // (key, distance) per entry, parallel over target cells
    let mut keyed: Vec<([i64; 3], f32, [f64; 3])> = vec![([0; 3], 0.0, [0.0; 3]); far.len()];
    let mut rest = &mut keyed[..];
    let mut chunks = Vec::with_capacity(tasks.len());
    for t in &tasks {
        let (a, b) = std::mem::take(&mut rest).split_at_mut((t[2] - t[1]) as usize);
        chunks.push((t[0] as usize, t[1] as usize, a));
        rest = b;
    }
    chunks.into_par_iter().for_each(|(t, e0, out)| {
        let tc = &tt.cells[t];
        for (k, sref) in far.sources[e0..e0 + out.len()].iter().enumerate() {
            let sc = plan.source_center(sref.cell as usize, sref.image);
            let v: [f64; 3] = std::array::from_fn(|k| tc.center[k] - sc[k]);
            let h = tc
                .half_width
                .min(stree.cells[sref.cell as usize].half_width);
            let d = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt() as f32;
            out[k] = (direction_key(v, h), d, v);
        }
    });
    let (recs, uniq) = if with_rot {
        // distinct directions: per-thread hash maps merged (a handful of thousands of keys)
        let map = keyed
            .par_iter()
            .fold(HashMap::new, |mut m: HashMap<[i64; 3], [f64; 3]>, k| {
                m.entry(k.0).or_insert(k.2);
                m
            })
            .reduce(HashMap::new, |mut a, b| {
                for (k, v) in b {
                    a.entry(k).or_insert(v);
                }
                a
            });
        let mut uniq: Vec<([i64; 3], [f64; 3])> = map.into_iter().collect();
        uniq.sort_unstable_by_key(|u| u.0);
        let stride = rot_stride(p);
        let recs: Vec<f32> = uniq
            .par_iter()
            .map_init(
                || RotationBuilder::new(p),
                |rb, u| {
                    let mut r = Vec::with_capacity(stride);
                    rb.push(u.1, &mut r);
                    r
                },
            )
            .flatten_iter()
            .collect();
        (recs, uniq.into_iter().map(|u| u.0).collect::<Vec<_>>())
    } else {
        (Vec::new(), Vec::new())
    };
    let entries: Vec<[i32; 4]> = keyed
        .par_iter()
        .zip(far.sources.par_iter())
        .map(|(k, sref)| {
            let ri = if with_rot {
                uniq.binary_search(&k.0).expect("direction key") as i32
            } else {
                0
            };
            [sref.cell as i32, ri, k.1.to_bits() as i32, 0]
        })
        .collect();
    let n = uniq.len();
    (tasks, entries, recs, n)
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
            }
        }
    }
}
