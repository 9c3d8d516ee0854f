//! The Python package `pyvortex` (module `pyvortex._native`, built by maturin from
//! `python/pyproject.toml`): the FMM evaluation of velocity and stretching (`CONVENTIONS.md`,
//! core paper Eq. 3-9) through the same entry point as `vortex eval`, the test particle sets,
//! and the checkpoints of both solvers.
//!
//! The bindings (`bindings`) are compiled only with the `python` feature, which maturin turns
//! on; without it this crate is plain Rust and `cargo test --workspace` needs no Python.

pub mod checkpoints;

#[cfg(feature = "python")]
mod bindings;

use engine::{BackendChoice, BackendRun, EngineError};
use fmm::{EvalParams, Sources, Targets};

/// The one call through which the package evaluates (the binary's `vortex eval` on one rank
/// calls the same `engine::evaluate_on`): `threads` sizes a local rayon pool (all cores when
/// `None`). Results do not depend on the thread count.
pub fn evaluate(
    backend: BackendChoice,
    device: usize,
    params: &EvalParams,
    sources: &Sources,
    targets: &Targets,
    threads: Option<usize>,
) -> Result<BackendRun, EngineError> {
    params.validate()?;
    let pool = engine::thread_pool(threads)?;
    pool.install(|| engine::evaluate_on(backend, device, params, sources, targets))
}
