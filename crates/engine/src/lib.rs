//! One evaluation as the programs call it, shared by the `vortex` binary and the Python
//! package (`python/`): the backend choice (`auto|cpu|cuda`, the GPU probed without touching
//! the driver first), the uniform GPU grid, the defaults of `vortex eval`, a thread pool, and
//! the checks of input arrays with the messages the command line gives.
//!
//! The velocity and stretching themselves are the Biot-Savart sums of `CONVENTIONS.md` (core
//! paper Eq. 3-9), computed by `fmm::evaluate` on the chosen backend.

pub mod backends;
pub mod input;

pub use backends::{
    evaluate_distributed_on, evaluate_on, resolve, uniform_core_cutoff, BackendChoice, BackendRun,
    GridChoice, UniformRunner,
};

use fmm::periodic::Periodic;
use fmm::{EvalParams, Method};

/// Errors of an evaluation as a program asks for it.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// An input array or value that cannot be used: the message names it, the row and the value.
    #[error("{0}")]
    Input(String),
    /// Invalid particles or parameters found by the engine.
    #[error(transparent)]
    Fmm(#[from] fmm::FmmError),
    /// A failure of the distributed evaluation.
    #[error(transparent)]
    Domain(#[from] domain::DomainError),
    /// A backend that cannot run (no GPU, a feature not built, a device failure).
    #[error("{0}")]
    Backend(String),
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, EngineError>;

/// Default expansion order p of `vortex eval` and of the Python `evaluate`.
pub const DEFAULT_ORDER: usize = 10;
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
/// radii) defaults to the adaptive octree's or the uniform grid's value; `periodic` is the box
/// length L and the image levels.
pub fn eval_params(
    method: Method,
    order: usize,
    theta: f64,
    leaf_size: usize,
    core_cutoff: Option<f64>,
    grid: GridChoice,
    periodic: Option<(f64, usize)>,
) -> EvalParams {
    EvalParams {
        method,
        order,
        theta,
        leaf_size,
        core_cutoff: core_cutoff.unwrap_or(match grid {
            GridChoice::Adaptive => EvalParams::default().core_cutoff,
            GridChoice::Uniform => uniform_core_cutoff(),
        }),
        periodic: periodic.map(|(box_length, image_levels)| Periodic {
            box_length,
            image_levels,
        }),
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
        b = b.num_threads(t);
    }
    b.build()
        .map_err(|e| EngineError::Backend(format!("building a thread pool: {e}")))
}
