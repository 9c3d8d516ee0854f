//! `vortex run CONFIG.toml [--out DIR] [--restart FILE] [--steps K] [--backend B] [--grid G]`: a
//! vortex-method simulation, in one process or as `mpirun -np R vortex run ...` (built with the
//! `mpi` feature). All the logic lives in the `method` crate (`method::run::run_loaded_on`);
//! this is argument glue: rank 0 reads the configuration and broadcasts it, the options are
//! checked to be the same on every rank, and each rank builds the backend named by the
//! configuration or `--backend` (under MPI, rank `r` uses GPU `local_rank % gpus_per_node`).
//! Only rank 0 prints an error; every rank exits with status 1.

use crate::backends::{resolve, BackendChoice, GridChoice};
use anyhow::Result;
use clap::Args;
use domain::Comm;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Configuration file (TOML; see runs/vortex-*.toml).
    pub config: PathBuf,
    /// Output directory (default: runs/out/<config file stem>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue from this checkpoint (DIR/checkpoint.bin of an earlier run, any number of ranks).
    #[arg(long)]
    pub restart: Option<PathBuf>,
    /// Replace the files of an earlier run in --out (a non-empty --out is otherwise refused
    /// unless restarting into it).
    #[arg(long)]
    pub overwrite: bool,
    /// Stop after this many steps (a checkpoint is written there), e.g. to time a few steps.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Compute backend, overriding `evaluation.backend` of the configuration.
    #[arg(long, value_enum)]
    pub backend: Option<BackendChoice>,
    /// Grid of the particles' FMM, overriding `evaluation.grid`: adaptive (octree built on the
    /// host) or uniform (built and evaluated on the GPU; one rank).
    #[arg(long, value_enum)]
    pub grid: Option<GridChoice>,
    /// GPU index, overriding `evaluation.device` (one rank; under MPI the node-local rank
    /// chooses).
    #[arg(long)]
    pub device: Option<usize>,
    /// Number of threads per rank (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Runs the command; returns the signal that stopped it early (after its checkpoint), if any.
pub fn run(args: &RunArgs) -> Result<Option<usize>> {
    crate::set_global_threads(args.threads)?;
    let start = std::time::SystemTime::now();
    let mut several = false;
    let r = crate::ranks::with_comm(|comm, local_rank| {
        let r = run_ranks(args, comm, local_rank).and_then(|(s, config)| {
            if comm.rank() == 0 {
                crate::run_info::record(
                    &s.out,
                    &crate::run_info::Invocation {
                        command: "run",
                        start,
                        config,
                        backend: s.backend.clone(),
                        ranks: s.ranks,
                        threads: rayon::current_num_threads(),
                        outcome: match s.interrupted {
                            Some(sig) => format!("interrupted by signal {sig}"),
                            None => "completed".into(),
                        },
                    },
                )?;
            }
            Ok(s.interrupted)
        });
        if let Err(e) = &r {
            if comm.size() > 1 {
                // every rank has the same outcome: rank 0 prints it before any rank exits (mpirun
                // stops the job at the first non-zero exit)
                several = true;
                if comm.rank() == 0 {
                    eprintln!("error: {e:#}");
                }
                comm.barrier();
            }
        }
        r
    });
    if r.is_err() && several {
        std::process::exit(1);
    }
    r
}

fn run_ranks(
    args: &RunArgs,
    comm: &dyn Comm,
    local_rank: usize,
) -> Result<(method::run::RunSummary, serde_json::Value)> {
    let root = comm.rank() == 0;
    method::parallel::check_same(comm, "command-line options", &format!("{args:?}"))?;
    let text = if root {
        std::fs::read_to_string(&args.config)
            .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))
    } else {
        Ok(String::new())
    };
    let text = crate::ranks::agree(comm, text)?.unwrap_or_default();
    let text = String::from_utf8(method::parallel::broadcast_bytes(comm, text.as_bytes()))?;
    let mut config = method::Config::from_str_named(&text, &args.config.display().to_string())?;
    if let Some(b) = args.backend {
        config.evaluation.backend = match b {
            BackendChoice::Auto => "auto",
            BackendChoice::Cpu => "cpu",
            BackendChoice::Cuda => "cuda",
        }
        .into();
    }
    if let Some(d) = args.device {
        config.evaluation.device = d;
    }
    if let Some(g) = args.grid {
        config.evaluation.grid = match g {
            GridChoice::Adaptive => "adaptive",
            GridChoice::Uniform => "uniform",
        }
        .into();
    }
    let uniform = config.evaluation.grid == "uniform";
    if uniform && comm.size() > 1 {
        anyhow::bail!(
            "{}: evaluation.grid = \"uniform\" runs on one rank (under MPI the adaptive octree is \
             distributed)",
            args.config.display()
        );
    }
    let choice = match config.evaluation.backend.as_str() {
        "cpu" => BackendChoice::Cpu,
        "cuda" => BackendChoice::Cuda,
        _ => BackendChoice::Auto,
    };
    // every rank runs the same backend: `auto` takes the GPU only when every rank has one
    let mut gpu = [if resolve(choice) == BackendChoice::Cuda {
        1.0
    } else {
        0.0
    }];
    comm.allreduce_f64(&mut gpu, domain::ReduceOp::Min);
    let config_json = serde_json::to_value(&config)?;
    let opts = method::run::RunOptions {
        max_steps: args.steps,
        overwrite: args.overwrite,
    };
    let (out, restart) = (args.out.as_deref(), args.restart.as_deref());
    if gpu[0] == 1.0 {
        #[cfg(feature = "cuda")]
        {
            let device = if comm.size() > 1 {
                local_rank % gpu::device_count().unwrap_or(1).max(1)
            } else {
                config.evaluation.device
            };
            let what = |e: gpu::GpuError| {
                anyhow::anyhow!(
                    "backend \"cuda\" (device {device}) for {}: {e}",
                    args.config.display()
                )
            };
            if uniform {
                let b = gpu::UniformBackend::new(device).map_err(what);
                let b = method::parallel::agree(
                    comm,
                    b.map_err(|e| method::Error::Other(e.to_string())),
                )?;
                Ok((
                    method::run::run_loaded_on(comm, config, &args.config, out, restart, b, &opts)?,
                    config_json,
                ))
            } else {
                let b = gpu::CudaBackend::new(device).map_err(what);
                let b = method::parallel::agree(
                    comm,
                    b.map_err(|e| method::Error::Other(e.to_string())),
                )?;
                Ok((
                    method::run::run_loaded_on(comm, config, &args.config, out, restart, b, &opts)?,
                    config_json,
                ))
            }
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = local_rank;
            anyhow::bail!("backend = \"cuda\": this binary was built without the `cuda` feature");
        }
    } else {
        if uniform {
            anyhow::bail!(
                "evaluation.grid = \"uniform\" for {}: the uniform grid is built on the GPU and \
                 no GPU is usable (grid = \"adaptive\" runs anywhere)",
                args.config.display()
            );
        }
        if choice == BackendChoice::Cuda {
            anyhow::bail!(
                "backend \"cuda\" for {}: no usable GPU on every rank (`--backend cpu` runs on the CPU)",
                args.config.display()
            );
        }
        let _ = local_rank;
        Ok((
            method::run::run_loaded_on(
                comm,
                config,
                &args.config,
                out,
                restart,
                fmm::CpuBackend,
                &opts,
            )?,
            config_json,
        ))
    }
}
