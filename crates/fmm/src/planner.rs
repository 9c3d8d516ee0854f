//! The planner: which evaluation engine serves a request (in the spirit of rustfft's
//! `FftPlanner`). It decides from the method, the backend, the grid, periodicity, the number
//! of ranks, the kind of targets and the particle count, says why (logged at `info`), and
//! refuses impossible combinations with the reason. It only decides; the crates that own the
//! engines build them (`crates/engine/src/planner.rs`, for the binary and the Python package:
//! [`crate::PlanEvaluator`], [`crate::DirectEvaluator`], `vortex_gpu::UniformEvaluator`,
//! `vortex_gpu::UniformSlabEvaluator`, `vortex_domain::DistributedEvaluator`).

use crate::evaluator::TargetKind;
use crate::Method;
use serde::{Deserialize, Serialize};

/// Where the kernels run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// The GPU when every rank has a usable one, else the CPU.
    #[default]
    Auto,
    /// The f64 CPU reference (rayon threads).
    Cpu,
    /// The CUDA backend (fp32 kernels compiled with NVRTC at first use).
    Cuda,
}

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda),
            _ => Err(format!(
                "unknown backend '{s}' (expected auto, cpu or cuda)"
            )),
        }
    }
}

impl std::fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
        })
    }
}

/// Which octree the particles are sorted into.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GridChoice {
    /// The uniform grid where it can run (a GPU, the FMM, targets at the sources, a set that
    /// is not clustered: [`Layout`]), else the adaptive octree; the planner says which and why.
    Auto,
    /// Adaptive octree; tree, lists and packing on the host (every method, periodic, any
    /// targets, every backend).
    #[default]
    Adaptive,
    /// Uniform grid sorted and evaluated on the GPU (CUDA, FMM, free space or periodic,
    /// targets at the sources; for nearly uniform particle sets).
    Uniform,
}

/// Where the particle state of a run lives (`evaluation.state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatePlace {
    #[default]
    Auto,
    /// The ranks' memory (`vortex_method::parallel::DistSimulation`).
    Host,
    /// The GPUs: one, or a z slab per rank (the `vortex-resident` crate).
    Device,
}

impl std::str::FromStr for GridChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "adaptive" => Ok(Self::Adaptive),
            "uniform" => Ok(Self::Uniform),
            _ => Err(format!(
                "unknown grid '{s}' (expected auto, adaptive or uniform)"
            )),
        }
    }
}

impl std::fmt::Display for GridChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Adaptive => "adaptive",
            Self::Uniform => "uniform",
        })
    }
}

/// What an evaluation is asked to do.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    pub method: Method,
    pub backend: BackendChoice,
    pub grid: GridChoice,
    pub periodic: bool,
    /// Ranks taking part (1 without MPI).
    pub ranks: usize,
    pub targets: TargetKind,
    /// Sources over all ranks.
    pub n: usize,
}

/// What this build and machine offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The binary was built with the CUDA backend.
    pub cuda_built: bool,
    /// Every rank found a usable GPU (agreed over the ranks before planning).
    pub gpu_on_every_rank: bool,
}

/// The compute backend an adaptive engine drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda,
}

/// The engine the planner chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The f64 direct sum on the CPU (one rank).
    Direct,
    /// The adaptive plan driving a backend (one rank).
    Adaptive(Device),
    /// The adaptive plan over the ranks (locally essential trees, `domain`).
    Distributed(Device),
    /// The GPU uniform grid, one rank (free space or periodic).
    UniformGrid,
    /// The GPU uniform grid split into z slabs, one GPU per rank (free space or periodic).
    UniformSlabs,
}

/// The planner's answer: the engine and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub engine: Engine,
    pub reasons: Vec<String>,
}

/// Why a request cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot evaluate {what}: {reason}")]
pub struct Refusal {
    /// The request in words.
    pub what: String,
    pub reason: String,
    /// What stands in the way: the machine or the request.
    pub cause: Cause,
}

/// What stands in the way of a refused request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// This machine or build: no GPU on every rank, the `cuda` feature not built.
    Machine,
    /// The request itself: a combination the engines do not evaluate (the uniform grid for
    /// another method, separate targets, a clustered set), or no ranks.
    Request,
}

/// What the caller measured of the particle set before planning.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layout {
    /// Not measured (a run's lattice, a benchmark): the grid follows the request alone.
    Unmeasured,
    /// The crowding of the set ([`crate::layout`]: the uniform grid's near-field pair work on
    /// it against an even set's; above [`crate::layout::MAX_CROWDING`] the set is clustered).
    Crowding(f64),
}

impl Layout {
    /// Why the uniform grid does not suit this set, if it is clustered.
    fn clustered(self) -> Option<String> {
        match self {
            Layout::Crowding(c) if c > crate::layout::MAX_CROWDING => Some(format!(
                "the particle set is clustered: a uniform grid's near field would do {c:.1} \
                 times the pair work of an even set (at most {} allowed; grid adaptive \
                 follows the clustering)",
                crate::layout::MAX_CROWDING
            )),
            _ => None,
        }
    }
}

/// Chooses the engine for `req` on a machine with `caps` without a measure of the set
/// ([`Layout::Unmeasured`]; see [`choose_for`]).
pub fn choose(req: &Request, caps: &Capabilities) -> Result<Choice, Refusal> {
    choose_for(req, caps, Layout::Unmeasured)
}

/// Chooses the engine for `req` on a machine with `caps` for a set of `layout` (see the module
/// documentation): `grid` uniform is refused where the uniform grid cannot run (the CPU, a
/// method other than the FMM, separate targets or other strengths, a clustered set), `grid`
/// auto takes it where it can and the adaptive octree elsewhere, saying why.
pub fn choose_for(req: &Request, caps: &Capabilities, layout: Layout) -> Result<Choice, Refusal> {
    let what = format!(
        "{} ({} grid, backend {}, {}, {} rank(s), N = {}, at {})",
        req.method,
        req.grid,
        req.backend,
        if req.periodic {
            "periodic"
        } else {
            "free space"
        },
        req.ranks,
        req.n,
        req.targets
    );
    let refuse = |cause: Cause| {
        let what = what.clone();
        move |reason: String| Refusal {
            what,
            reason,
            cause,
        }
    };
    if req.ranks == 0 {
        return Err(refuse(Cause::Request)("no ranks".into()));
    }
    let mut reasons = Vec::new();
    let mut device = device(req.backend, caps).map_err(refuse(Cause::Machine))?;
    reasons.push(match (req.backend, device) {
        (BackendChoice::Auto, Device::Cuda) => "backend auto: every rank has a usable GPU".into(),
        (BackendChoice::Auto, Device::Cpu) => {
            "backend auto: no usable GPU on every rank, so the CPU".into()
        }
        (b, _) => format!("backend {b} asked for"),
    });
    if req.method == Method::Treecode && req.periodic && device == Device::Cuda {
        const WHY: &str = "the periodic treecode needs a local-expansion pass for the far images, \
                           which the CUDA backend does not have";
        if req.backend != BackendChoice::Auto {
            return Err(refuse(Cause::Request)(format!(
                "{WHY} (backend cpu or auto runs it)"
            )));
        }
        reasons.push(format!("{WHY}: the CPU"));
        device = Device::Cpu;
    }
    let grid = match req.grid {
        GridChoice::Uniform => {
            let why = uniform_unsuited(req, device, layout);
            if let Some((cause, why)) = why {
                return Err(refuse(cause)(why));
            }
            GridChoice::Uniform
        }
        GridChoice::Auto => match uniform_unsuited(req, device, layout) {
            None => {
                reasons.push(match layout {
                    Layout::Crowding(c) => format!(
                        "grid auto: the uniform grid runs here and the set is even enough \
                         (crowding {c:.2})"
                    ),
                    Layout::Unmeasured => {
                        "grid auto: the uniform grid runs here (the set was not measured)".into()
                    }
                });
                GridChoice::Uniform
            }
            Some((_, why)) => {
                reasons.push(format!("grid auto: the adaptive octree, because {why}"));
                GridChoice::Adaptive
            }
        },
        GridChoice::Adaptive => GridChoice::Adaptive,
    };
    let engine = match grid {
        GridChoice::Uniform => uniform(req, &mut reasons),
        GridChoice::Adaptive | GridChoice::Auto if req.ranks > 1 => {
            reasons.push(format!(
                "{} ranks: locally essential trees over the ranks",
                req.ranks
            ));
            Engine::Distributed(device)
        }
        GridChoice::Adaptive | GridChoice::Auto if req.method == Method::Direct => {
            reasons.push("method direct: the f64 direct sum on the CPU".into());
            Engine::Direct
        }
        GridChoice::Adaptive | GridChoice::Auto => {
            reasons.push(format!(
                "adaptive octree (trees and lists on the host) for the {}",
                req.method
            ));
            Engine::Adaptive(device)
        }
    };
    Ok(Choice { engine, reasons })
}

/// The backend `backend` resolves to on a machine with `caps`; the error is the reason.
pub fn device(backend: BackendChoice, caps: &Capabilities) -> Result<Device, String> {
    match backend {
        BackendChoice::Cpu => Ok(Device::Cpu),
        BackendChoice::Cuda if !caps.cuda_built => {
            Err("backend cuda: this binary was built without the `cuda` feature".into())
        }
        BackendChoice::Cuda if !caps.gpu_on_every_rank => {
            Err("backend cuda: no usable GPU on every rank (backend cpu runs anywhere)".into())
        }
        BackendChoice::Cuda => Ok(Device::Cuda),
        BackendChoice::Auto if caps.cuda_built && caps.gpu_on_every_rank => Ok(Device::Cuda),
        BackendChoice::Auto => Ok(Device::Cpu),
    }
}

/// Why the uniform grid cannot serve `req` on `device` for a set of `layout`, and whether the
/// machine or the request stands in the way; `None` when it can. What no machine would run
/// (another method, separate targets, a clustered set) is said before a missing GPU.
fn uniform_unsuited(req: &Request, device: Device, layout: Layout) -> Option<(Cause, String)> {
    let why = if req.method != Method::Fmm {
        format!(
            "the uniform grid evaluates the FMM only, not the {} (grid adaptive has every method)",
            req.method
        )
    } else if req.targets == TargetKind::Points {
        "the uniform grid evaluates at the particles: drop the separate targets \
         (grid adaptive takes any targets)"
            .into()
    } else if req.targets == TargetKind::SourcesWith {
        "the uniform grid's P2P reads the stretching strengths from the sources' rows: \
         other strengths at the sources need grid adaptive"
            .into()
    } else if let Some(why) = layout.clustered() {
        why
    } else if device != Device::Cuda {
        // backend cpu asked for is a request the grid cannot serve; auto without a GPU, the machine
        let cause = if req.backend == BackendChoice::Cpu {
            Cause::Request
        } else {
            Cause::Machine
        };
        return Some((
            cause,
            "the uniform grid runs on the GPU only and the backend is the CPU \
             (grid adaptive runs anywhere)"
                .into(),
        ));
    } else {
        return None;
    };
    Some((Cause::Request, why))
}

/// The uniform grid's engine for `req` (one GPU or z slabs over the ranks), its reason pushed.
fn uniform(req: &Request, reasons: &mut Vec<String>) -> Engine {
    if req.ranks > 1 {
        reasons.push(format!(
            "uniform grid, {} ranks: z slabs, one GPU per rank ({})",
            req.ranks,
            if req.periodic {
                "periodic box: halo and multipole windows wrap around the seam"
            } else {
                "free space"
            }
        ));
        Engine::UniformSlabs
    } else {
        reasons.push(format!(
            "uniform grid: sorted and evaluated on the GPU ({})",
            if req.periodic {
                "periodic box, far images from the lattice operator"
            } else {
                "free space"
            }
        ));
        Engine::UniformGrid
    }
}

/// Logs the choice and its reasons at `info`.
pub fn log_choice(req: &Request, choice: &Choice) {
    log::info!(
        "planner: {:?} for {} (N = {}, {} rank(s), at {}): {}",
        choice.engine,
        req.method,
        req.n,
        req.ranks,
        req.targets,
        choice.reasons.join("; ")
    );
}
