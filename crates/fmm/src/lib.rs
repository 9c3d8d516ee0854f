//! CPU reference fast multipole engine for the regularized Biot-Savart law.
//!
//! Given vortex elements (position, vector strength, Gaussian core radius) and targets, computes
//! velocity and classical vortex stretching (`docs/CONVENTIONS.md`, core paper Eq. 3-9) by direct
//! summation, a Barnes-Hut treecode (M2P) or the fast multipole method (M2L), all in f64.
//!
//! Module tree, in the order of the algorithm:
//! * [`particles`], [`kernel`]: inputs, outputs and the pair kernel (P2P);
//! * [`tree`]: adaptive octree over Morton-sorted points;
//! * [`lists`]: dual tree traversal producing near (P2P) and far (M2L / M2P) interaction lists;
//! * [`expansions`]: solid harmonics and Wigner rotations;
//! * [`operators`]: P2M, M2M, M2L (rotation O(p^3) and plain O(p^4)), L2L, L2P, M2P, P2P;
//! * [`far`]: the far-field methods (FMM, PPM, treecode) behind one interface: the typed
//!   expansions a backend hands out and takes ([`Expansions`]), their layout and operators;
//! * [`plan`]: the [`Plan`] of one evaluation (trees, lists, order) and its [`FarField`];
//! * [`backend`]: the trait a compute backend (CPU here, CUDA in `vortex-gpu`) implements;
//! * [`evaluators`]: the direct sum, the treecode, the FMM and the PPM driven through the phases
//!   of a backend;
//! * [`evaluator`]: the object-safe [`Evaluator`] every engine implements, and [`planner`],
//!   which chooses the engine ([`layout`]: how evenly a set fills its cube, which keeps
//!   clustered sets off the uniform grid).

pub mod backend;
pub mod error;
pub mod evaluator;
pub mod evaluators;
pub mod expansions;
pub mod far;
pub mod kernel;
pub mod layout;
pub mod lists;
pub mod operators;
pub mod particles;
pub mod periodic;
pub mod plan;
pub mod planner;
pub mod ppm;
pub mod testsets;
pub mod tree;

pub use backend::{cpu::CpuBackend, Backend, FarField, PhaseTimes, Plan};
pub use error::FmmError;
pub use evaluator::{
    CommStats, DirectEvaluator, Evaluator, PlanEvaluator, TargetKind, TargetSpec, WithFallback,
};
pub use evaluators::{evaluate, EvalParams, Evaluation, Method};
pub use far::{Expansions, FarMethod, FarOps, M2lKernel};
pub use particles::{relative_l2_error, Fields, Sources, Targets};
pub use planner::{BackendChoice, GridChoice};

/// Largest supported expansion order on the CPU (f64 tables; the PPM's spherical designs go up
/// to it). The CUDA kernels' own maximum is `vortex_gpu::MAX_GPU_ORDER` (static shared-memory
/// sizes), which is at most this one.
pub const MAX_ORDER: usize = 20;

/// The one range check of an expansion order: `order` in `1..=max` (`max`: [`MAX_ORDER`] on
/// the CPU, `vortex_gpu::MAX_GPU_ORDER` on the device), else
/// [`FmmError::OrderOutOfRange`]. Used by the evaluators' parameters, the operators, the
/// pseudo-particles, the GPU engines and the programs' inputs.
pub fn check_order(order: usize, max: usize) -> Result<(), FmmError> {
    if (1..=max).contains(&order) {
        Ok(())
    } else {
        Err(FmmError::OrderOutOfRange { order, max })
    }
}

/// The default expansion order `p` of every evaluator ([`EvalParams::default`], the uniform
/// grid's parameters, `vortex eval --order`, the Python `evaluate`): the one place it is set.
/// Measured (N = 1e5 and 1e6, 2 threads): `p = 8` with theta 0.55 gives velocity / stretching
/// errors 5e-7 / 3e-5 on the uniform set, 2e-5 / 7e-5 on the clumps and 4e-6 / 1.1e-4 on the
/// ring, at about 0.7 of the cost of `p = 10`, theta 0.6.
pub const DEFAULT_ORDER: usize = 8;
