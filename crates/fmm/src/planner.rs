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
    /// Adaptive octree; tree, lists and packing on the host (every method, periodic, any
    /// targets, every backend).
    #[default]
    Adaptive,
    /// Uniform grid sorted and evaluated on the GPU (CUDA, FMM, free space or periodic,
    /// targets at the sources; for nearly uniform particle sets).
    Uniform,
}

impl std::str::FromStr for GridChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "adaptive" => Ok(Self::Adaptive),
            "uniform" => Ok(Self::Uniform),
            _ => Err(format!("unknown grid '{s}' (expected adaptive or uniform)")),
        }
    }
}

impl std::fmt::Display for GridChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
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
}

/// Chooses the engine for `req` on a machine with `caps` (see the module documentation).
pub fn choose(req: &Request, caps: &Capabilities) -> Result<Choice, Refusal> {
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
    let refuse = |reason: String| Refusal {
        what: what.clone(),
        reason,
    };
    if req.ranks == 0 {
        return Err(refuse("no ranks".into()));
    }
    let mut reasons = Vec::new();
    let mut device = device(req.backend, caps).map_err(refuse)?;
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
            return Err(refuse(format!("{WHY} (backend cpu or auto runs it)")));
        }
        reasons.push(format!("{WHY}: the CPU"));
        device = Device::Cpu;
    }
    let engine = match req.grid {
        GridChoice::Uniform => uniform(req, device, &mut reasons).map_err(refuse)?,
        GridChoice::Adaptive if req.ranks > 1 => {
            reasons.push(format!(
                "{} ranks: locally essential trees over the ranks",
                req.ranks
            ));
            Engine::Distributed(device)
        }
        GridChoice::Adaptive if req.method == Method::Direct => {
            reasons.push("method direct: the f64 direct sum on the CPU".into());
            Engine::Direct
        }
        GridChoice::Adaptive => {
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

/// The uniform grid's conditions; the error is the reason of the refusal.
fn uniform(req: &Request, device: Device, reasons: &mut Vec<String>) -> Result<Engine, String> {
    if device != Device::Cuda {
        return Err(
            "the uniform grid runs on the GPU only and the backend is the CPU \
             (grid adaptive runs anywhere)"
                .into(),
        );
    }
    if req.method != Method::Fmm {
        return Err(format!(
            "the uniform grid evaluates the FMM only, not the {} (grid adaptive has every method)",
            req.method
        ));
    }
    if req.targets == TargetKind::Points {
        return Err(
            "the uniform grid evaluates at the particles: drop the separate targets \
             (grid adaptive takes any targets)"
                .into(),
        );
    }
    if req.targets == TargetKind::SourcesWith {
        return Err(
            "the uniform grid's P2P reads the stretching strengths from the sources' rows: \
             other strengths at the sources need grid adaptive"
                .into(),
        );
    }
    if req.ranks > 1 {
        reasons.push(format!(
            "uniform grid asked for, {} ranks: z slabs, one GPU per rank ({})",
            req.ranks,
            if req.periodic {
                "periodic box: halo and multipole windows wrap around the seam"
            } else {
                "free space"
            }
        ));
        Ok(Engine::UniformSlabs)
    } else {
        reasons.push(format!(
            "uniform grid asked for: sorted and evaluated on the GPU ({})",
            if req.periodic {
                "periodic box, far images from the lattice operator"
            } else {
                "free space"
            }
        ));
        Ok(Engine::UniformGrid)
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
