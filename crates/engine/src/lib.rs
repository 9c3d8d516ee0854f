//! One evaluation as the programs call it, shared by the `vortex` binary and the Python
//! package (`python/`): the engine the planner chooses and builds ([`planner`]: the request
//! to `vortex_fmm::planner`, the GPU probed without touching the driver first), the one evaluation
//! call of `vortex eval` and `pyvortex.evaluate` ([`evaluate`]), the defaults of
//! `vortex eval`, the plan of a run ([`run_plan`]: its engine, devices and where its particle
//! state lives, in one call), a thread pool, and the checks of input arrays with the messages
//! the command line gives ([`input`]).
//!
//! The velocity and stretching themselves are the Biot-Savart sums of `CONVENTIONS.md` (core
//! paper Eq. 3-9), computed by the `vortex_fmm::Evaluator` the planner hands out.

pub mod input;
pub mod planner;
pub mod run_plan;

use vortex_domain::Comm;
use vortex_fmm::kernel::CoreOrder;
use vortex_fmm::periodic::Periodic;
use vortex_fmm::planner::{Choice, Layout, Request};
use vortex_fmm::{BackendChoice, EvalParams, Evaluation, GridChoice, Method, Sources, TargetKind};
use vortex_fmm::{TargetSpec, Targets};

/// Errors of an evaluation as a program asks for it.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// An input array or value that cannot be used: the message names it, the row and the value.
    #[error("{0}")]
    Input(String),
    /// Invalid particles or parameters found by the engine.
    #[error(transparent)]
    Fmm(#[from] vortex_fmm::FmmError),
    /// A failure of the distributed evaluation.
    #[error(transparent)]
    Domain(#[from] vortex_domain::DomainError),
    /// A request the planner refuses (with the reason).
    #[error(transparent)]
    Refused(#[from] vortex_fmm::planner::Refusal),
    /// A backend that cannot run (no GPU, a feature not built, a device failure).
    #[error("{0}")]
    Backend(String),
    /// A placement of a run's particle state that does not apply (with the reason).
    #[error("{0}")]
    State(String),
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, EngineError>;

/// Default expansion order p of `vortex eval` and of the Python `evaluate`: set in one place,
/// [`vortex_fmm::DEFAULT_ORDER`].
pub use vortex_fmm::DEFAULT_ORDER;
/// Default largest number of particles in a leaf cell.
pub const DEFAULT_LEAF_SIZE: usize = 64;
/// Default levels of periodic images above the root (9 * 3^(K-1) boxes per dimension).
pub const DEFAULT_IMAGE_LEVELS: usize = 4;
/// Default periodic box length L (box `[-L/2, L/2)^3`), in length units of the positions.
pub const DEFAULT_BOX_LENGTH: f64 = 2.0 * std::f64::consts::PI;

/// Default opening angle of the multipole acceptance criterion.
pub fn default_theta() -> f64 {
    EvalParams::default().theta
}

/// The evaluation parameters of `vortex eval` from its options: `core_cutoff` (in source core
/// radii) defaults to the adaptive octree's or the uniform grid's value, raised to the least
/// gap of `core` ([`CoreOrder::default_cutoff`]; a smaller value given is refused by
/// `EvalParams::validate`); `periodic` is the box length L and the image levels.
#[allow(clippy::too_many_arguments)]
pub fn eval_params(
    method: Method,
    order: usize,
    theta: f64,
    leaf_size: usize,
    core: CoreOrder,
    core_cutoff: Option<f64>,
    grid: GridChoice,
    periodic: Option<(f64, usize)>,
) -> EvalParams {
    EvalParams {
        method,
        order,
        theta,
        leaf_size,
        // (grid auto: the octree's; the uniform grid never takes less than its own,
        // `vortex_gpu::uniform::evaluator::grid_params`)
        core_cutoff: core_cutoff.unwrap_or_else(|| {
            core.default_cutoff(match grid {
                GridChoice::Adaptive | GridChoice::Auto => EvalParams::default().core_cutoff,
                GridChoice::Uniform => planner::uniform_core_cutoff(),
            })
        }),
        core,
        periodic: periodic.map(|(box_length, image_levels)| Periodic {
            box_length,
            image_levels,
        }),
        m2l: vortex_fmm::M2lKernel::Auto,
    }
}

/// A rayon pool with `threads` threads (all cores when `None`).
pub fn thread_pool(threads: Option<usize>) -> Result<rayon::ThreadPool> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(t) = threads {
        if t == 0 {
            return Err(EngineError::Input(
                "threads must be at least 1 (got 0)".into(),
            ));
        }
        // more than 4 threads per core only add contention (a warning says so)
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        if t > 4 * cores {
            log::warn!(
                "{t} threads requested on {cores} cores: capped at {}",
                4 * cores
            );
        }
        b = b.num_threads(t.min(4 * cores));
    }
    b.build()
        .map_err(|e| EngineError::Backend(format!("building a thread pool: {e}")))
}

/// One evaluation and the engine that ran it.
pub struct Run {
    pub evaluation: Evaluation,
    /// What ran (`vortex_fmm::Evaluator::describe`).
    pub backend: String,
    /// The planner's choice: the engine and why.
    pub choice: Choice,
}

/// The crowding of the sources over all ranks of `comm` (`vortex_fmm::layout`: each rank's
/// histogram over the common bounding cube, summed). Collective.
pub fn measure_layout(comm: &dyn Comm, sources: &Sources) -> Layout {
    use vortex_domain::ReduceOp;
    use vortex_fmm::layout;
    let (mut lo, mut hi) = layout::bounds(&sources.position);
    comm.allreduce_f64(&mut lo, ReduceOp::Min);
    comm.allreduce_f64(&mut hi, ReduceOp::Max);
    let mut n = [sources.len() as f64];
    comm.allreduce_f64(&mut n, ReduceOp::Sum);
    if n[0] == 0.0 {
        return Layout::Crowding(1.0);
    }
    let (lo, side) = layout::cube(lo, hi);
    let m = layout::cells_per_side(n[0] as usize);
    let mut h = layout::histogram(&sources.position, lo, side, m);
    comm.allreduce_f64(&mut h, ReduceOp::Sum);
    Layout::Crowding(layout::crowding(&h))
}

/// The one evaluation of `vortex eval` (on every rank of `comm`) and of `pyvortex.evaluate`
/// (on `vortex_domain::SelfComm`): the planner chooses and builds the engine for `backend`, `grid`,
/// the ranks of `comm` and the targets (`None`: the sources themselves, velocity and
/// stretching; `Some`: separate points), which evaluates this rank's `sources`. `n` is the
/// number of sources over all ranks (for the planner's log). For `grid` auto or uniform with
/// the FMM at the sources the planner is given the crowding of the set ([`measure_layout`]:
/// a clustered set is refused the uniform grid). Collective under MPI.
#[allow(clippy::too_many_arguments)]
pub fn evaluate(
    comm: &dyn Comm,
    local_rank: usize,
    device: usize,
    backend: BackendChoice,
    grid: GridChoice,
    params: &EvalParams,
    n: usize,
    sources: &Sources,
    targets: Option<&Targets>,
) -> Result<Run> {
    let req = Request {
        method: params.method,
        backend,
        grid,
        periodic: params.periodic.is_some(),
        ranks: comm.size(),
        targets: if targets.is_some() {
            TargetKind::Points
        } else {
            TargetKind::Sources
        },
        n,
    };
    let layout =
        if grid != GridChoice::Adaptive && targets.is_none() && params.method == Method::Fmm {
            measure_layout(comm, sources)
        } else {
            Layout::Unmeasured
        };
    let (mut engine, choice) = planner::plan_for(comm, local_rank, device, &req, params, layout)?;
    let spec = match targets {
        Some(t) => TargetSpec::Points(t),
        None => TargetSpec::Sources,
    };
    let evaluation = engine.evaluate(sources, spec)?;
    Ok(Run {
        evaluation,
        backend: engine.describe(),
        choice,
    })
}
