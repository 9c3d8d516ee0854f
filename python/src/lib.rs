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

use vortex_engine::{EngineError, Run};
use vortex_fmm::{BackendChoice, EvalParams, GridChoice, Sources, Targets};

/// The one call through which the package evaluates: `vortex_engine::evaluate`, the call of
/// `vortex eval`, on one rank (the planner chooses and builds the engine for `backend` and
/// `grid`; `targets: None` evaluates the sources themselves, velocity and stretching).
/// `threads` sizes a local rayon pool (all cores when `None`). Results do not depend on the
/// thread count.
pub fn evaluate(
    backend: BackendChoice,
    grid: GridChoice,
    device: usize,
    params: &EvalParams,
    sources: &Sources,
    targets: Option<&Targets>,
    threads: Option<usize>,
) -> Result<Run, EngineError> {
    params.validate()?;
    let pool = vortex_engine::thread_pool(threads)?;
    pool.install(|| {
        vortex_engine::evaluate(
            &vortex_domain::SelfComm,
            0,
            device,
            backend,
            grid,
            params,
            sources.len(),
            sources,
            targets,
        )
    })
}
