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
#[cfg(test)]
mod test_rng;
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

/// The largest distance in source core radii that any cutoff of a Gaussian core may be
/// (`core_cutoff` of the far field, `reinterpolation.cutoff` of the Gaussian sums, the
/// programs' `--core-cutoff`): at 12 core radii `exp(-rho^2 / 2) = 5e-32` and `1 - q(rho) <
/// 1e-29`, far below double-precision round-off, so a larger cutoff changes no result and
/// only multiplies the near-field work (by `cutoff^3`). The one bound of every path, checked
/// by [`check_cutoff`].
pub const MAX_CUTOFF: f64 = 12.0;

/// The one range check of a cutoff in core radii: finite and in `[min, MAX_CUTOFF]`; the
/// reason as text (the caller names its key or flag and the value).
pub fn check_cutoff(cutoff: f64, min: f64) -> Result<(), String> {
    if (min..=MAX_CUTOFF).contains(&cutoff) {
        Ok(())
    } else {
        let shown = if cutoff.abs() >= 1e6 {
            format!("{cutoff:e}")
        } else {
            format!("{cutoff}")
        };
        Err(format!(
            "{shown} core radii is outside [{min}, {MAX_CUTOFF}]: beyond {MAX_CUTOFF} the \
             Gaussian core is below double-precision round-off (exp(-{MAX_CUTOFF}^2/2) = 5e-32), \
             so a larger cutoff changes nothing but the work"
        ))
    }
}

/// The default expansion order `p` of every evaluator ([`EvalParams::default`], the uniform
/// grid's parameters, `vortex eval --order`, the Python `evaluate`): the one place it is set.
/// Measured (N = 1e5 and 1e6, 2 threads): `p = 8` with theta 0.55 gives velocity / stretching
/// errors 5e-7 / 3e-5 on the uniform set, 2e-5 / 7e-5 on the clumps and 4e-6 / 1.1e-4 on the
/// ring, at about 0.7 of the cost of `p = 10`, theta 0.6.
pub const DEFAULT_ORDER: usize = 8;
