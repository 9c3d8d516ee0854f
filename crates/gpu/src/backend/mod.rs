//! [`CudaBackend`]: the [`vortex_fmm::Backend`] on one CUDA device.
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
//!
//! The submodules hold the operator families and the host work around them: [`multipole`] (P2M,
//! M2M, M2L, L2L, L2P of the multipole method), [`ppm`] (the pseudo-particle operators),
//! [`treecode`] (M2P), [`direct`] (P2P over the near lists and the all-pairs sum),
//! [`packing`] (interaction lists packed in the kernels' layout) and [`exchange`] (expansions
//! read from and written to the device for the periodic far images and the MPI exchange).

mod direct;
mod exchange;
mod multipole;
mod packing;
mod ppm;
mod treecode;

pub use packing::{pack_m2l, pack_m2l_into, pack_m2p, M2lBuffers, M2lPacking};

use crate::device::{GpuDevice, GpuError, GpuResult};
use crate::layout::{pack_sources, pack_targets};
use crate::ppm::{cell_geometry, cell_octants, PpmHost, PpmTables};
use crate::tables::knm_table;
use cudarc::driver::{CudaSlice, LaunchConfig};
use std::sync::{Arc, Mutex};
use vortex_cuda::launch::{Fmm, P2p, Ppm};
use vortex_fmm::backend::{Backend, FarField, PhaseTimes, Plan};
use vortex_fmm::expansions::ncoef;
use vortex_fmm::kernel::INV_4PI;
use vortex_fmm::{Expansions, Fields, FmmError, Sources, Targets};

/// Targets per near-field task and threads per near-field block (`NEAR_TARGETS`,
/// `NEAR_THREADS` of `kernels/p2p.cu`).
pub const P2P_TARGETS: usize = 32;
pub const P2P_THREADS: usize = 128;
/// Targets per L2P / M2P block (`EVAL_BLOCK` of `kernels/fmm.cu`).
pub const EVAL_BLOCK: usize = 64;
/// Largest order the GPU kernels are built for (shared-memory sizes are static): the one place
/// this maximum is set (the CPU's is [`vortex_fmm::MAX_ORDER`], never below it).
pub const MAX_GPU_ORDER: usize = 16;
const _: () = assert!(MAX_GPU_ORDER <= vortex_fmm::MAX_ORDER);

/// Which M2L kernel the FMM's downward pass uses (the PPM has its own, `ppm_m2l`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum M2lKind {
    /// Rotation-based O(p^3) (default).
    #[default]
    Rotation,
    /// Plain O(p^4) (reference).
    Plain,
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
    /// The kernels of `kernels/ppm.cu` for this order.
    fn kernels(&self, dev: &GpuDevice) -> GpuResult<Ppm> {
        Ppm::load(dev, self.k, self.p)
    }
}

/// Threads of the PPM P2M / M2M / L2L / L2P blocks (`PPM_OPS` of `kernels/ppm.cu`).
const PPM_OPS: usize = 128;
/// Most blocks of the PPM L2P (each owns a scratch slice; they loop over the leaves).
const PPM_L2P_BLOCKS: usize = 4096;

/// The kernels of `kernels/fmm.cu` for order `p` (this backend's [`EVAL_BLOCK`]).
pub(crate) fn fmm_kernels(dev: &GpuDevice, p: usize) -> GpuResult<Fmm> {
    Fmm::load(dev, p, EVAL_BLOCK)
}

/// The pseudo-particles of the order-`p` sphere rule: the `k` of [`Ppm::load`].
pub(crate) fn ppm_count(p: usize) -> usize {
    vortex_fmm::ppm::PseudoParticles::new(p).count()
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

fn centers(tree: &vortex_fmm::tree::Tree) -> Vec<f32> {
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
fn leaf_tasks(tree: &vortex_fmm::tree::Tree) -> Vec<[i32; 4]> {
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

    /// Compiles every module for order `p` and the core `core` now (otherwise done at first
    /// use).
    pub fn warm_up(&self, p: usize, core: vortex_fmm::kernel::CoreOrder) -> GpuResult<()> {
        P2p::module(&self.dev, core.m())?;
        Fmm::module(&self.dev, p, EVAL_BLOCK)?;
        if p <= vortex_fmm::MAX_ORDER {
            Ppm::module(&self.dev, ppm_count(p), p)?;
        }
        Ok(())
    }

    /// Runs `f` between two CUDA events ([`GpuDevice::event_timed`]).
    pub(super) fn event_timed(&self, f: impl FnOnce() -> GpuResult<()>) -> GpuResult<f64> {
        self.dev.event_timed(f)
    }

    pub(super) fn prepare_impl(
        &self,
        plan: &Plan,
        src: &Sources,
        tgt: &Targets,
    ) -> GpuResult<CudaState> {
        let p = plan.order;
        vortex_fmm::check_order(p, MAX_GPU_ORDER)
            .map_err(|e| GpuError::Unsupported(format!("{e} in the CUDA kernels")))?;
        if src.len() > i32::MAX as usize / 4 || tgt.len() > i32::MAX as usize / 4 {
            return Err(GpuError::Unsupported(
                "too many particles for i32 indices".into(),
            ));
        }
        let is_ppm = plan.far_field.pseudo_particles();
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
            // the PPM's locals are potentials at its sphere points (`ppm`, `ppm_dev`)
            locals: if plan.far_field.has_locals() && !is_ppm {
                Some(s.alloc_zeros::<f32>(plan.target_tree.cells.len() * len)?)
            } else {
                None
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

    pub(super) fn downward_impl(
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

    pub(super) fn fields_impl(&self, st: CudaState) -> GpuResult<Fields> {
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

    /// FMM coefficients (from fp32) or PPM pseudo-particle strengths, as the CPU backend.
    fn multipoles(
        &self,
        plan: &Plan,
        st: &CudaState,
        cells: &[usize],
    ) -> Result<Expansions, FmmError> {
        self.multipoles_impl(plan, st, cells)
    }

    fn set_multipoles(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        cells: &[usize],
        data: &Expansions,
    ) -> Result<(), FmmError> {
        self.set_multipoles_impl(plan, st, cells, data)
    }

    /// Host round trip of the local expansions (periodic far images, MPI remote parts):
    /// simple, and small next to the rest of an evaluation.
    fn add_locals(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        cells: &[usize],
        data: &Expansions,
    ) -> Result<(), FmmError> {
        self.add_locals_impl(plan, st, cells, data)
    }
}
