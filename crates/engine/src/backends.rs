//! Choosing the compute backend at the command line: `--backend auto|cpu|cuda` and `--device N`.
//!
//! `auto` takes the GPU when a CUDA driver and a device exist (probed without touching the
//! driver first, so machines without CUDA never panic) and the CPU otherwise. `cuda` fails with
//! the probe's reason when no GPU can be used.

use crate::{EngineError, Result};
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

/// Which octree a GPU evaluation uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum GridChoice {
    /// Adaptive octree; tree, lists and packing on the host (every method, periodic, any
    /// targets, every backend).
    #[default]
    Adaptive,
    /// Uniform grid sorted and evaluated on the GPU (CUDA, FMM, free space or periodic,
    /// targets = sources; for nearly uniform particle sets).
    Uniform,
}

/// Default gap of a far interaction for `--grid uniform`, in core radii (leaf width >= this
/// times the largest core radius; see `gpu::UniformParams::core_cutoff`).
pub fn uniform_core_cutoff() -> f64 {
    #[cfg(feature = "cuda")]
    return gpu::UniformParams::default().core_cutoff;
    #[cfg(not(feature = "cuda"))]
    return 4.4;
}

/// The uniform-grid GPU FMM, kept across evaluations (kernels, rotation tables and page-locked
/// buffers are reused).
pub struct UniformRunner {
    #[cfg(feature = "cuda")]
    fmm: gpu::UniformFmm,
}

impl UniformRunner {
    /// Checks that `--grid uniform` applies to these options and opens the device.
    pub fn new(choice: BackendChoice, device: usize, params: &EvalParams) -> Result<Self> {
        if resolve(choice) != BackendChoice::Cuda {
            return Err(EngineError::Backend(
                "--grid uniform runs on the GPU only: no usable GPU (or --backend cpu)".into(),
            ));
        }
        if params.method != fmm::Method::Fmm {
            return Err(EngineError::Backend(format!(
                "--grid uniform evaluates the FMM only, not --method {}",
                params.method
            )));
        }
        #[cfg(feature = "cuda")]
        {
            let fmm = gpu::UniformFmm::on_device(device)
                .map_err(|e| EngineError::Backend(format!("--grid uniform: {e}")))?;
            fmm.warm_up(params.order)
                .map_err(|e| EngineError::Backend(format!("--grid uniform: {e}")))?;
            Ok(Self { fmm })
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = device;
            Err(EngineError::Backend(
                "--grid uniform: this binary was built without the `cuda` feature".into(),
            ))
        }
    }

    /// Velocity and stretching of every source at every source. Phase times: `tree` = sort on
    /// the device, `P2M` = P2M + M2M, `L2L` = L2L + L2P, `transfer` = host packing, upload and
    /// download; far pairs = M2L translations.
    pub fn evaluate(&self, params: &EvalParams, sources: &Sources) -> Result<BackendRun> {
        #[cfg(feature = "cuda")]
        {
            let up = gpu::UniformParams {
                order: params.order,
                core_cutoff: params.core_cutoff,
                ..Default::default()
            };
            let run = match &params.periodic {
                None => self.fmm.evaluate(sources, &up),
                Some(q) => self.fmm.evaluate_periodic(sources, &up, q),
            };
            let (fields, t) =
                run.map_err(|e| EngineError::Backend(format!("--grid uniform: {e}")))?;
            let (times, stats) = (t.phase_times(), t.plan_stats());
            Ok(BackendRun {
                evaluation: Evaluation {
                    fields,
                    times,
                    stats,
                },
                backend: format!("{} (uniform grid {}^3 leaves)", self.fmm.device().name(), t.n),
                kernel_report: Some(format!(
                    "{:.4} s of kernels (sort {:.4}, P2M {:.4}, M2M {:.4}, M2L {:.4}, L2L {:.4}, L2P {:.4}, P2P {:.4}, scatter {:.4}), {:.1} MB on the device",
                    t.kernels(), t.k_sort, t.k_p2m, t.k_m2m, t.k_m2l, t.k_l2l, t.k_l2p, t.k_p2p,
                    t.k_scatter, t.device_bytes as f64 / 1e6
                )),
            })
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (params, sources);
            unreachable!("UniformRunner::new fails without the cuda feature")
        }
    }
}

impl UniformRunner {
    /// Under MPI (collective): opens GPU `local_rank % gpus on the node` on every rank, and
    /// fails on every rank, with the reason of each failing rank in its own log, when one
    /// cannot.
    pub fn for_rank(
        choice: BackendChoice,
        comm: &dyn domain::Comm,
        local_rank: usize,
        params: &EvalParams,
    ) -> Result<Self> {
        #[cfg(feature = "cuda")]
        let device = local_rank % gpu::device_count().unwrap_or(1).max(1);
        #[cfg(not(feature = "cuda"))]
        let device = local_rank;
        let r = Self::new(choice, device, params);
        if let Err(e) = &r {
            log::error!("rank {}: {e}", comm.rank());
        }
        let mut bad = [if r.is_err() { 1.0 } else { 0.0 }];
        comm.allreduce_f64(&mut bad, domain::ReduceOp::Max);
        match r {
            Err(e) => Err(e),
            Ok(_) if bad[0] > 0.0 => Err(EngineError::Backend(
                "--grid uniform: another rank could not open its GPU (see its message)".into(),
            )),
            Ok(x) => Ok(x),
        }
    }

    /// Collective: the uniform grid split into z slabs over the ranks of `comm`, one GPU per
    /// rank (`gpu::uniform::evaluate_distributed`): fields of this rank's `sources` in their
    /// order. Phase times as [`UniformRunner::evaluate`]; halo and coarse-multipole bytes as
    /// P2Pcomm and M2Lcomm.
    pub fn evaluate_distributed(
        &self,
        comm: &dyn domain::Comm,
        params: &EvalParams,
        sources: &Sources,
    ) -> Result<(domain::DistributedEvaluation, String)> {
        if params.periodic.is_some() {
            return Err(EngineError::Backend(
                "--grid uniform --periodic runs on one rank (the slab decomposition is free-space)"
                    .into(),
            ));
        }
        #[cfg(feature = "cuda")]
        {
            let up = gpu::UniformParams {
                order: params.order,
                core_cutoff: params.core_cutoff,
                ..Default::default()
            };
            let (fields, t) = gpu::uniform::evaluate_distributed(comm, &self.fmm, sources, &up)
                .map_err(|e| {
                    EngineError::Backend(format!("--grid uniform on rank {}: {e}", comm.rank()))
                })?;
            let d = &t.device;
            let mut times = d.phase_times();
            times.transfer += t.plan;
            times.total = t.total;
            let stats = domain::CommStats {
                bytes_redistribute: t.bytes_redistribute as u64,
                bytes_p2p: t.bytes_halo as u64,
                bytes_m2l: t.bytes_coarse as u64,
                halo_particles: t.halo_particles as u64,
                t_redistribute: t.redistribute,
                t_p2pcomm: t.halo,
                t_m2lcomm: t.coarse,
                ..Default::default()
            };
            let mut work = vec![0.0; comm.size()];
            work[comm.rank()] = t.owned as f64;
            comm.allreduce_f64(&mut work, domain::ReduceOp::Sum);
            let ev = domain::DistributedEvaluation {
                fields,
                times,
                stats,
                work: work.iter().map(|&w| 2 * w as u64).collect(),
            };
            let name = format!(
                "{} (uniform grid {}^3 leaves, slabs of {} planes on rank {})",
                self.fmm.device().name(),
                d.n,
                t.planes.1 - t.planes.0,
                comm.rank()
            );
            Ok((ev, name))
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (comm, sources);
            unreachable!("UniformRunner::new fails without the cuda feature")
        }
    }
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
    let b = gpu::CudaBackend::new(device)
        .map_err(|e| EngineError::Backend(format!("--backend cuda: {e}")))?;
    let evaluation = evaluate(&b, params, sources, targets)?;
    Ok(BackendRun {
        evaluation,
        backend: b.name(),
        kernel_report: Some(format!("{:?}", b.last_kernel_times())),
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda(_: usize, _: &EvalParams, _: &Sources, _: &Targets) -> Result<BackendRun> {
    Err(EngineError::Backend(
        "--backend cuda: this binary was built without the `cuda` feature".into(),
    ))
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
                let b = gpu::CudaBackend::new(device).map_err(|e| {
                    EngineError::Backend(format!("--backend cuda on rank {}: {e}", comm.rank()))
                })?;
                let e = domain::evaluate_distributed(comm, &b, params, &dp, sources, targets)?;
                Ok((e, b.name()))
            }
            #[cfg(not(feature = "cuda"))]
            {
                let _ = (device, local_rank);
                Err(EngineError::Backend(
                    "--backend cuda: this binary was built without the `cuda` feature".into(),
                ))
            }
        }
    }
}
