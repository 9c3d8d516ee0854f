//! From a request to an evaluation engine, for the `vortex` binary and the Python package
//! alike: asks `vortex_fmm::planner::choose` which engine serves the request (method, `--backend`,
//! `--grid`, periodicity, ranks, targets, N), logs its reasons, and builds it as a
//! `Box<dyn vortex_fmm::Evaluator>`: the direct sum, the adaptive
//! plan on the CPU or the CUDA backend, the GPU uniform grid, or their distributed forms over
//! the ranks. Every rank uses GPU `local_rank % gpus on the node` under MPI
//! ([`device_for_rank`]); whether every rank has a GPU is agreed once ([`capabilities`]).

use crate::{EngineError, Result};
use vortex_domain::Comm;
use vortex_fmm::planner::{
    choose_for, log_choice, Capabilities, Choice, Device, Engine, Layout, Request,
};
use vortex_fmm::{BackendChoice, DirectEvaluator, EvalParams, Evaluator, PlanEvaluator};

/// Whether this binary was built with the CUDA backend and a GPU is usable here (probed
/// without touching the driver first, so machines without CUDA never panic).
pub fn gpu_here() -> bool {
    #[cfg(feature = "cuda")]
    return vortex_gpu::available();
    #[cfg(not(feature = "cuda"))]
    return false;
}

/// What this build and the ranks of `comm` offer (collective: every rank has a GPU or not).
pub fn capabilities(comm: &dyn Comm) -> Capabilities {
    let mut gpu = [if gpu_here() { 1.0 } else { 0.0 }];
    comm.allreduce_f64(&mut gpu, vortex_domain::ReduceOp::Min);
    Capabilities {
        cuda_built: cfg!(feature = "cuda"),
        gpu_on_every_rank: gpu[0] == 1.0,
    }
}

/// Resolves `auto` on this process alone (one rank: `bench`); `cuda` without a GPU stays
/// `cuda` (the planner refuses it with the reason).
pub fn resolve(choice: BackendChoice) -> Device {
    let caps = Capabilities {
        cuda_built: cfg!(feature = "cuda"),
        gpu_on_every_rank: gpu_here(),
    };
    vortex_fmm::planner::device(choice, &caps).unwrap_or(Device::Cuda)
}

/// The GPU of this rank: `device` on one rank, `local_rank % gpus on the node` under MPI.
pub fn device_for_rank(comm: &dyn Comm, local_rank: usize, device: usize) -> usize {
    if comm.size() == 1 {
        return device;
    }
    #[cfg(feature = "cuda")]
    return local_rank % vortex_gpu::device_count().unwrap_or(1).max(1);
    #[cfg(not(feature = "cuda"))]
    return local_rank;
}

/// Chooses, logs (rank 0) and builds the engine for `req` with `params` (collective: fails on
/// every rank, each with its reason in its log, when one rank cannot open its engine).
pub fn plan<'c>(
    comm: &'c dyn Comm,
    local_rank: usize,
    device: usize,
    req: &Request,
    params: &EvalParams,
) -> Result<Box<dyn Evaluator + 'c>> {
    plan_for(comm, local_rank, device, req, params, Layout::Unmeasured).map(|(e, _)| e)
}

/// [`plan`] for a set of `layout` (`vortex_fmm::planner::choose_for`), with the choice.
pub fn plan_for<'c>(
    comm: &'c dyn Comm,
    local_rank: usize,
    device: usize,
    req: &Request,
    params: &EvalParams,
    layout: Layout,
) -> Result<(Box<dyn Evaluator + 'c>, Choice)> {
    let choice = choose_for(req, &capabilities(comm), layout)?;
    if comm.rank() == 0 {
        log_choice(req, &choice);
    }
    let device = device_for_rank(comm, local_rank, device);
    let built = build(comm, choice.engine, device, params);
    if let Err(e) = &built {
        log::error!("rank {}: {e}", comm.rank());
    }
    let mut bad = [if built.is_err() { 1.0 } else { 0.0 }];
    comm.allreduce_f64(&mut bad, vortex_domain::ReduceOp::Max);
    match built {
        Err(e) => Err(e),
        Ok(_) if bad[0] > 0.0 => Err(EngineError::Backend(
            "another rank could not open its engine (see its message)".into(),
        )),
        Ok(ev) => Ok((ev, choice)),
    }
}

/// Builds `engine` on this rank (GPU `device`).
pub fn build<'c>(
    comm: &'c dyn Comm,
    engine: Engine,
    device: usize,
    params: &EvalParams,
) -> Result<Box<dyn Evaluator + 'c>> {
    let p = params.clone();
    Ok(match engine {
        Engine::Direct => Box::new(DirectEvaluator::new(p)),
        Engine::Adaptive(Device::Cpu) => Box::new(PlanEvaluator::new(vortex_fmm::CpuBackend, p)?),
        Engine::Distributed(Device::Cpu) => Box::new(vortex_domain::DistributedEvaluator::new(
            comm,
            vortex_fmm::CpuBackend,
            p,
        )?),
        #[cfg(feature = "cuda")]
        Engine::Adaptive(Device::Cuda) => Box::new(PlanEvaluator::new(cuda(device)?, p)?),
        #[cfg(feature = "cuda")]
        Engine::Distributed(Device::Cuda) => Box::new(vortex_domain::DistributedEvaluator::new(
            comm,
            cuda(device)?,
            p,
        )?),
        #[cfg(feature = "cuda")]
        Engine::UniformGrid => Box::new(
            vortex_gpu::UniformEvaluator::new(device, p)
                .map_err(|e| EngineError::Backend(format!("uniform grid: {e}")))?,
        ),
        #[cfg(feature = "cuda")]
        Engine::UniformSlabs => Box::new(
            vortex_gpu::UniformSlabEvaluator::new(comm, device, p).map_err(|e| {
                EngineError::Backend(format!("uniform grid on rank {}: {e}", comm.rank()))
            })?,
        ),
        #[cfg(not(feature = "cuda"))]
        _ => {
            let _ = device;
            return Err(EngineError::Backend(format!(
                "{engine:?}: built without the `cuda` feature"
            )));
        }
    })
}

/// The CUDA backend of the adaptive plan on GPU `device`: the one place a program opens it
/// (a run's right-hand side drives it through `vortex_method::parallel::DistRhs`).
#[cfg(feature = "cuda")]
pub fn cuda(device: usize) -> Result<vortex_gpu::CudaBackend> {
    vortex_gpu::CudaBackend::new(device)
        .map_err(|e| EngineError::Backend(format!("backend cuda (device {device}): {e}")))
}

/// The engine of a run's particles at themselves on one rank, from the planner's `engine`:
/// the GPU uniform grid, with the adaptive plan on the same GPU where the grid refuses a set
/// (a box too small for the cores, a grid too large for the device: `WithFallback`); `None`
/// for every other engine (the run's right-hand side then evaluates the adaptive plan on its
/// backend, or the distributed forms over the ranks).
pub fn build_at_sources<'c>(
    comm: &'c dyn Comm,
    engine: Engine,
    device: usize,
    params: &EvalParams,
) -> Result<Option<Box<dyn Evaluator + 'c>>> {
    if engine != Engine::UniformGrid {
        return Ok(None);
    }
    let grid = build(comm, Engine::UniformGrid, device, params)?;
    let adaptive = build(comm, Engine::Adaptive(Device::Cuda), device, params)?;
    Ok(Some(Box::new(vortex_fmm::WithFallback::new(
        grid, adaptive,
    ))))
}

/// The engine of particles kept on the device between evaluations (the resident time step) on
/// this rank, GPU `device`: the device twin of [`build`] for the planner's uniform-grid
/// engines ([`Engine::UniformGrid`] on one GPU, [`Engine::UniformSlabs`] over the ranks of
/// `comm`, periodic boxes); every other engine is refused with the reason.
#[cfg(feature = "cuda")]
pub fn build_device<'c>(
    comm: &'c dyn Comm,
    engine: Engine,
    device: usize,
    params: &EvalParams,
    periodic: Option<vortex_fmm::periodic::Periodic>,
) -> Result<Box<dyn vortex_gpu::uniform::DeviceEvaluator + 'c>> {
    use vortex_gpu::uniform::{evaluator::grid_params, UniformDevice, UniformSlabDevice};
    let backend = |e: vortex_gpu::GpuError| EngineError::Backend(format!("uniform grid: {e}"));
    let fmm = vortex_gpu::UniformFmm::on_device(device).map_err(backend)?;
    let params = grid_params(params);
    fmm.warm_up(params.order, params.core).map_err(backend)?;
    Ok(match engine {
        Engine::UniformGrid => Box::new(UniformDevice {
            fmm,
            params,
            periodic,
        }),
        Engine::UniformSlabs => Box::new(UniformSlabDevice {
            comm,
            fmm,
            params,
            periodic: vortex_gpu::uniform::device_evaluator::check_slab_box(periodic.as_ref())
                .map_err(backend)?,
        }),
        other => {
            return Err(EngineError::Backend(format!(
                "{other:?} does not evaluate device buffers: particles kept on the GPU need the \
                 uniform grid (evaluation.grid = \"uniform\")"
            )))
        }
    })
}

/// Default gap of a far interaction for `--grid uniform`, in core radii (leaf width >= this
/// times the largest core radius; see `vortex_gpu::UniformParams::core_cutoff`).
pub fn uniform_core_cutoff() -> f64 {
    #[cfg(feature = "cuda")]
    return vortex_gpu::UniformParams::default().core_cutoff;
    #[cfg(not(feature = "cuda"))]
    return 4.4;
}

/// The request of an evaluation of `n` sources at themselves on one rank (`bench`).
pub fn request_at_sources(
    params: &EvalParams,
    backend: BackendChoice,
    grid: vortex_fmm::GridChoice,
    n: usize,
) -> Request {
    Request {
        method: params.method,
        backend,
        grid,
        periodic: params.periodic.is_some(),
        ranks: 1,
        targets: vortex_fmm::TargetKind::Sources,
        n,
    }
}
