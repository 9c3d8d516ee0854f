//! Choosing the compute backend at the command line: `--backend auto|cpu|cuda` and `--device N`.
//!
//! `auto` takes the GPU when a CUDA driver and a device exist (probed without touching the
//! driver first, so machines without CUDA never panic) and the CPU otherwise. `cuda` fails with
//! the probe's reason when no GPU can be used.

use anyhow::Result;
use clap::ValueEnum;
use fmm::{evaluate, CpuBackend, EvalParams, Evaluation, Sources, Targets};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// The GPU when one is usable, else the CPU.
    Auto,
    /// The f64 CPU reference (rayon threads).
    Cpu,
    /// The CUDA backend (fp32 kernels compiled with NVRTC at first use).
    Cuda,
}

/// An evaluation and the name of the backend that ran it.
pub struct BackendRun {
    pub evaluation: Evaluation,
    pub backend: String,
    /// Kernel-only times and counts of the GPU backend (seconds), if it ran.
    pub kernel_report: Option<String>,
}

/// Resolves `auto` to a concrete choice.
pub fn resolve(choice: BackendChoice) -> BackendChoice {
    match choice {
        BackendChoice::Auto => {
            #[cfg(feature = "cuda")]
            if gpu::available() {
                return BackendChoice::Cuda;
            }
            log::debug!("no usable GPU: using the CPU backend");
            BackendChoice::Cpu
        }
        c => c,
    }
}

/// Runs one evaluation on the chosen backend.
pub fn evaluate_on(
    choice: BackendChoice,
    device: usize,
    params: &EvalParams,
    sources: &Sources,
    targets: &Targets,
) -> Result<BackendRun> {
    use fmm::Backend;
    match resolve(choice) {
        BackendChoice::Cpu | BackendChoice::Auto => {
            let b = CpuBackend;
            Ok(BackendRun {
                evaluation: evaluate(&b, params, sources, targets)?,
                backend: b.name(),
                kernel_report: None,
            })
        }
        BackendChoice::Cuda => cuda(device, params, sources, targets),
    }
}

#[cfg(feature = "cuda")]
fn cuda(
    device: usize,
    params: &EvalParams,
    sources: &Sources,
    targets: &Targets,
) -> Result<BackendRun> {
    use fmm::Backend;
    let b = gpu::CudaBackend::new(device).map_err(|e| anyhow::anyhow!("--backend cuda: {e}"))?;
    let evaluation = evaluate(&b, params, sources, targets)?;
    Ok(BackendRun {
        evaluation,
        backend: b.name(),
        kernel_report: Some(format!("{:?}", b.last_kernel_times())),
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda(_: usize, _: &EvalParams, _: &Sources, _: &Targets) -> Result<BackendRun> {
    anyhow::bail!("--backend cuda: this binary was built without the `cuda` feature")
}

/// Runs one distributed evaluation (any number of ranks, `comm.size() == 1` included) on the
/// chosen backend; under MPI, rank `r` uses GPU `local_rank % device_count`.
pub fn evaluate_distributed_on(
    choice: BackendChoice,
    device: usize,
    comm: &dyn domain::Comm,
    local_rank: usize,
    params: &EvalParams,
    sources: &Sources,
    targets: &Targets,
) -> Result<(domain::DistributedEvaluation, String)> {
    use fmm::Backend;
    let dp = domain::DomainParams::default();
    match resolve(choice) {
        BackendChoice::Cpu | BackendChoice::Auto => {
            let b = CpuBackend;
            let e = domain::evaluate_distributed(comm, &b, params, &dp, sources, targets)?;
            Ok((e, b.name()))
        }
        BackendChoice::Cuda => {
            #[cfg(feature = "cuda")]
            {
                let device = if comm.size() > 1 {
                    local_rank % gpu::device_count().unwrap_or(1).max(1)
                } else {
                    device
                };
                let b = gpu::CudaBackend::new(device)
                    .map_err(|e| anyhow::anyhow!("--backend cuda on rank {}: {e}", comm.rank()))?;
                let e = domain::evaluate_distributed(comm, &b, params, &dp, sources, targets)?;
                Ok((e, b.name()))
            }
            #[cfg(not(feature = "cuda"))]
            {
                let _ = (device, local_rank);
                anyhow::bail!("--backend cuda: this binary was built without the `cuda` feature")
            }
        }
    }
}
