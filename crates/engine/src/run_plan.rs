//! The plan of a run, made in one call for `vortex run` ([`plan_run`]): the planner's engine of
//! the particles at themselves over the ranks of the communicator, the device of every rank
//! (the CPU, or this rank's GPU: `local_rank % gpus on the node` under MPI) and where the
//! particle state lives between steps (the host ranks, or the GPUs: the device-resident step),
//! from the run's evaluation settings. The binary only carries the answer out. The
//! device-resident step builds its engine on device buffers with [`plan_device`], the same
//! planner's choice for its case.

use crate::planner::{build_at_sources, capabilities, device_for_rank};
use crate::{EngineError, Result};
use vortex_domain::Comm;
use vortex_fmm::planner::{choose, log_choice, Choice, Device, Engine, Request, StatePlace};
use vortex_fmm::{BackendChoice, EvalParams, Evaluator, GridChoice, Method, TargetKind};

/// The evaluation settings of a run that decide its plan (`[evaluation]` of the configuration
/// with the command line's overrides).
#[derive(Clone, Debug, PartialEq)]
pub struct RunRequest {
    pub method: Method,
    pub backend: BackendChoice,
    pub grid: GridChoice,
    pub periodic: bool,
    /// The configured GPU (`evaluation.device`; on several ranks the node-local rank chooses).
    pub device: usize,
    /// Where the configuration wants the particle state (`evaluation.state`).
    pub state: StatePlace,
    /// Why this configuration cannot keep its particles on the GPUs (`None`: it can): what the
    /// device-resident step does not cover, or an output that needs them on the host.
    pub device_state_refused: Option<String>,
}

/// Where a run keeps its particles between steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The ranks' memory (`vortex_method::parallel::DistSimulation`).
    Host,
    /// The GPUs (`vortex_resident::ResidentSimulation`: one GPU, or a z slab per rank).
    Device,
}

/// The plan of a run on this rank.
#[derive(Clone, Debug, PartialEq)]
pub struct RunPlan {
    /// The planner's engine of the particles at themselves, with its reasons.
    pub choice: Choice,
    /// The CPU or the GPUs, the same on every rank.
    pub device: Device,
    /// This rank's GPU (used with [`Device::Cuda`]).
    pub gpu: usize,
    /// Where the particle state lives.
    pub placement: Placement,
}

/// The request of a run's particles at themselves.
fn request(req: &RunRequest, ranks: usize) -> Request {
    Request {
        method: req.method,
        backend: req.backend,
        grid: req.grid,
        periodic: req.periodic,
        ranks,
        targets: TargetKind::Sources,
        n: 0,
    }
}

/// Plans the run of `req` over the ranks of `comm` (collective: the capabilities are agreed;
/// rank 0 logs the planner's choice and its reasons). Refuses, with the reason, a request the
/// planner refuses, a backend this machine cannot run and a state placement that does not
/// apply.
pub fn plan_run(comm: &dyn Comm, local_rank: usize, req: &RunRequest) -> Result<RunPlan> {
    let caps = capabilities(comm);
    let planner_request = request(req, comm.size());
    let choice = choose(&planner_request, &caps)?;
    if comm.rank() == 0 {
        log_choice(&planner_request, &choice);
    }
    let device = vortex_fmm::planner::device(req.backend, &caps).map_err(EngineError::Backend)?;
    // the node's GPUs are counted only where they are used (no driver probe on the CPU)
    let gpu = match device {
        Device::Cuda => device_for_rank(comm, local_rank, req.device),
        Device::Cpu => req.device,
    };
    Ok(RunPlan {
        placement: placement(req, device, choice.engine)?,
        choice,
        device,
        gpu,
    })
}

/// Where the state of `req` lives with `device` and the planner's `engine`: `auto` keeps it on
/// the GPUs when the planner chose the uniform grid (one GPU, or slabs over the ranks) and the
/// configuration allows it; `device` where it does not apply is refused with the reason.
pub fn placement(req: &RunRequest, device: Device, engine: Engine) -> Result<Placement> {
    let refused = |why: &str| {
        Err(EngineError::State(format!(
            "evaluation.state = \"device\": {why}"
        )))
    };
    match (device, req.state, req.device_state_refused.as_deref()) {
        (_, StatePlace::Host, _) => Ok(Placement::Host),
        (Device::Cpu, StatePlace::Device, _) => {
            refused("needs the CUDA backend (backend = \"cuda\", grid = \"uniform\")")
        }
        (Device::Cpu, StatePlace::Auto, _) => Ok(Placement::Host),
        (Device::Cuda, StatePlace::Device, None) => Ok(Placement::Device),
        (Device::Cuda, StatePlace::Device, Some(why)) => refused(why),
        (Device::Cuda, StatePlace::Auto, why) => Ok(
            if matches!(engine, Engine::UniformGrid | Engine::UniformSlabs)
                && req.grid != GridChoice::Adaptive
                && why.is_none()
            {
                Placement::Device
            } else {
                Placement::Host
            },
        ),
    }
}

/// The engine of a run's particles at themselves on the host ranks, from the `plan`: on one
/// GPU the uniform grid when the planner chose it (with the adaptive plan as its fallback),
/// `None` for every other engine (the right-hand side then uses the adaptive plan on its
/// backend, or the distributed forms over the ranks).
pub fn at_sources<'c>(
    comm: &'c dyn Comm,
    plan: &RunPlan,
    params: &EvalParams,
) -> Result<Option<Box<dyn Evaluator + 'c>>> {
    match plan.device {
        Device::Cuda => build_at_sources(comm, plan.choice.engine, plan.gpu, params),
        Device::Cpu => Ok(None),
    }
}

/// The engine of the device-resident step on this rank's GPU `gpu`: the planner's choice for
/// particles at themselves kept on the GPUs (backend `cuda`, grid `uniform`, the periodic box
/// of `params`, every rank of `comm`), built on device buffers
/// (`crate::planner::build_device`: the uniform grid on one GPU, its z slabs over several
/// ranks). Collective (the capabilities are agreed); refuses, with the reason, what the
/// planner refuses.
#[cfg(feature = "cuda")]
pub fn plan_device<'c>(
    comm: &'c dyn Comm,
    gpu: usize,
    params: &EvalParams,
) -> Result<Box<dyn vortex_gpu::uniform::DeviceEvaluator + 'c>> {
    let req = RunRequest {
        method: params.method,
        backend: BackendChoice::Cuda,
        grid: GridChoice::Uniform,
        periodic: params.periodic.is_some(),
        device: gpu,
        state: StatePlace::Device,
        device_state_refused: None,
    };
    let choice = choose(&request(&req, comm.size()), &capabilities(comm))?;
    crate::planner::build_device(comm, choice.engine, gpu, params, params.periodic)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(state: StatePlace, grid: GridChoice, refused: Option<&str>) -> RunRequest {
        RunRequest {
            method: Method::Fmm,
            backend: BackendChoice::Auto,
            grid,
            periodic: true,
            device: 0,
            state,
            device_state_refused: refused.map(str::to_string),
        }
    }

    #[test]
    fn the_state_follows_the_configuration_and_the_planner() {
        use Placement::{Device as OnGpu, Host};
        let uniform = Engine::UniformGrid;
        let adaptive = Engine::Adaptive(Device::Cuda);
        let cases = [
            // (state, grid, refusal, device, engine, placement)
            (
                StatePlace::Auto,
                GridChoice::Auto,
                None,
                Device::Cuda,
                uniform,
                OnGpu,
            ),
            (
                StatePlace::Auto,
                GridChoice::Uniform,
                None,
                Device::Cuda,
                Engine::UniformSlabs,
                OnGpu,
            ),
            (
                StatePlace::Auto,
                GridChoice::Auto,
                None,
                Device::Cuda,
                adaptive,
                Host,
            ),
            (
                StatePlace::Auto,
                GridChoice::Adaptive,
                None,
                Device::Cuda,
                uniform,
                Host,
            ),
            (
                StatePlace::Auto,
                GridChoice::Auto,
                Some("free space"),
                Device::Cuda,
                uniform,
                Host,
            ),
            (
                StatePlace::Auto,
                GridChoice::Auto,
                None,
                Device::Cpu,
                Engine::Direct,
                Host,
            ),
            (
                StatePlace::Host,
                GridChoice::Uniform,
                None,
                Device::Cuda,
                uniform,
                Host,
            ),
            (
                StatePlace::Device,
                GridChoice::Uniform,
                None,
                Device::Cuda,
                uniform,
                OnGpu,
            ),
        ];
        for (state, grid, why, device, engine, want) in cases {
            let r = req(state, grid, why);
            assert_eq!(
                placement(&r, device, engine).unwrap(),
                want,
                "{r:?} on {device:?} with {engine:?}"
            );
        }
    }

    #[test]
    fn a_device_state_that_does_not_apply_is_refused_with_the_reason() {
        let r = req(StatePlace::Device, GridChoice::Uniform, Some("free space"));
        let e = placement(&r, Device::Cuda, Engine::UniformGrid).unwrap_err();
        assert_eq!(e.to_string(), "evaluation.state = \"device\": free space");
        let r = req(StatePlace::Device, GridChoice::Uniform, None);
        let e = placement(&r, Device::Cpu, Engine::Adaptive(Device::Cpu)).unwrap_err();
        assert!(e.to_string().contains("needs the CUDA backend"), "{e}");
    }

    #[test]
    fn one_rank_without_a_gpu_plans_the_host() {
        let mut r = req(StatePlace::Auto, GridChoice::Adaptive, None);
        r.backend = BackendChoice::Cpu;
        let plan = plan_run(&vortex_domain::SelfComm, 0, &r).unwrap();
        assert_eq!(
            (plan.device, plan.placement, plan.choice.engine),
            (Device::Cpu, Placement::Host, Engine::Adaptive(Device::Cpu))
        );
        r.method = Method::Ppm;
        r.grid = GridChoice::Uniform;
        let e = plan_run(&vortex_domain::SelfComm, 0, &r).unwrap_err();
        assert!(matches!(e, EngineError::Refused(_)), "{e}");
    }
}
