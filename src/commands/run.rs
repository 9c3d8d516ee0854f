//! `vortex run CONFIG.toml [--out DIR] [--restart FILE] [--steps K] [--backend B] [--grid G]`: a
//! vortex-method simulation, in one process or as `mpirun -np R vortex run ...` (built with the
//! `mpi` feature). All the logic lives in the `vortex-method` crate (`vortex_method::run::run`);
//! this is argument glue: rank 0 reads the configuration and broadcasts it, the options are
//! checked to be the same on every rank, the planner (`vortex_fmm::planner`) chooses the engine of the
//! particles at themselves, and each rank builds the backend named by the configuration or
//! `--backend` (under MPI GPU `local_rank % gpus_per_node`, `crate::planner::device_for_rank`).
//! Only rank 0 prints an error; every rank exits with status 1.

use anyhow::{anyhow, Result};
use clap::Args;
use std::path::PathBuf;
use vortex_domain::Comm;
#[cfg(feature = "cuda")]
use vortex_fmm::planner::Engine;
use vortex_fmm::planner::{choose, log_choice, Device, Request};
use vortex_fmm::{BackendChoice, GridChoice, TargetKind};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Configuration file (TOML; see runs/vortex-*.toml).
    pub config: PathBuf,
    /// Output directory (default: runs/out/<config file stem>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue from this checkpoint, on any number of ranks: DIR/checkpoint.bin (one rank),
    /// DIR/checkpoint.manifest (several ranks: a manifest and one piece per rank), a kept
    /// older copy of either, or DIR itself (its current checkpoint).
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
    #[arg(long)]
    pub backend: Option<BackendChoice>,
    /// Grid of the particles' FMM, overriding `evaluation.grid`: adaptive (octree built on the
    /// host) or uniform (built and evaluated on the GPU; under MPI z slabs, one GPU per rank).
    #[arg(long)]
    pub grid: Option<GridChoice>,
    /// How the GPUs of a multi-GPU run exchange device buffers, overriding
    /// `evaluation.exchange`: auto (NCCL where it starts, else pinned), nccl, pinned.
    #[arg(long)]
    pub exchange: Option<vortex_domain::TransportChoice>,
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
        // rank 0 owns the output directory from here to the end (its lock, agreed)
        let lock = if comm.rank() == 0 {
            let out = out_dir(args);
            let mode =
                vortex_spectral::durable::OutMode::of(args.restart.is_some(), args.overwrite);
            crate::run_info::begin(&out, mode, args.restart.as_deref(), "run", start).map(Some)
        } else {
            Ok(None)
        };
        let claim = crate::ranks::agree(comm, lock)?.flatten();
        let r = run_ranks(args, comm, local_rank);
        if comm.rank() == 0 {
            record(args, start, claim.as_ref(), &r)?;
        }
        let r = r.map(|(s, _)| s.interrupted);
        if let Err(e) = &r {
            if comm.size() > 1 {
                // every rank has the same outcome: rank 0 prints it before any rank exits (mpirun
                // stops the job at the first non-zero exit)
                several = true;
                if comm.rank() == 0 {
                    crate::errln!("error: {}", crate::error_text(e));
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

/// The output directory of the run (`--out`, or the default from the configuration's name).
fn out_dir(args: &RunArgs) -> PathBuf {
    args.out
        .clone()
        .unwrap_or_else(|| vortex_method::run::default_out(&args.config))
}

/// Completes this invocation's entry of `run.json` in its output directory (rank 0):
/// completed, interrupted or failed with the error.
fn record(
    args: &RunArgs,
    start: std::time::SystemTime,
    claim: Option<&crate::run_info::Claim>,
    r: &Result<(vortex_method::run::RunSummary, serde_json::Value)>,
) -> Result<()> {
    let out = match r {
        Ok((s, _)) => s.out.clone(),
        Err(_) => out_dir(args),
    };
    let (config, backend, ranks) = match r {
        Ok((s, config)) => (config.clone(), s.backend.clone(), s.ranks),
        // the configuration as run, from the directory
        Err(_) => (
            crate::run_info::config_json(&out.join("config.toml")),
            args.backend.map_or("(from the configuration)".into(), |b| {
                format!("{b:?}").to_lowercase()
            }),
            0,
        ),
    };
    let rec = crate::run_info::record(
        &out,
        claim,
        &crate::run_info::Invocation {
            command: "run",
            start,
            config,
            backend,
            ranks,
            threads: rayon::current_num_threads(),
            outcome: crate::run_info::Outcome::of(r, |(s, _)| s.interrupted, crate::error_text),
        },
    );
    match r {
        Ok(_) => rec,
        Err(_) => {
            if let Err(e) = rec {
                log::warn!("{e:#}");
            }
            Ok(())
        }
    }
}

fn run_ranks(
    args: &RunArgs,
    comm: &dyn Comm,
    local_rank: usize,
) -> Result<(vortex_method::run::RunSummary, serde_json::Value)> {
    let root = comm.rank() == 0;
    vortex_method::parallel::check_same(comm, "command-line options", &format!("{args:?}"))?;
    let text = if root {
        vortex_spectral::inputs::read_config(&args.config).map_err(anyhow::Error::from)
    } else {
        Ok(String::new())
    };
    let text = crate::ranks::agree(comm, text)?.unwrap_or_default();
    let text = String::from_utf8(vortex_method::parallel::broadcast_bytes(
        comm,
        text.as_bytes(),
    ))?;
    let mut config =
        vortex_method::Config::from_str_named(&text, &args.config.display().to_string())?;
    if let Some(b) = args.backend {
        config.evaluation.backend = b;
    }
    if let Some(d) = args.device {
        config.evaluation.device = d;
    }
    if let Some(g) = args.grid {
        config.evaluation.grid = g;
    }
    if let Some(x) = args.exchange {
        config.evaluation.exchange = x;
    }
    let e = &config.evaluation;
    // the engine of the particles at themselves, chosen once for every rank
    let caps = crate::planner::capabilities(comm);
    let req = Request {
        method: e.method,
        backend: e.backend,
        grid: e.grid,
        periodic: config.periodic().is_some(),
        ranks: comm.size(),
        targets: TargetKind::Sources,
        n: 0,
    };
    let choice = choose(&req, &caps).map_err(|r| anyhow!("{}: {r}", args.config.display()))?;
    if comm.rank() == 0 {
        log_choice(&req, &choice);
    }
    let device = vortex_fmm::planner::device(e.backend, &caps).map_err(|r| anyhow!("{r}"))?;
    let config_json = serde_json::to_value(&config)?;
    let opts = vortex_method::run::RunOptions {
        max_steps: args.steps,
        overwrite: args.overwrite,
    };
    match device {
        Device::Cuda => {
            #[cfg(feature = "cuda")]
            {
                let index = crate::planner::device_for_rank(comm, local_rank, e.device);
                let what = |e: String| {
                    vortex_method::Error::Other(format!(
                        "backend \"cuda\" (device {index}) for {}: {e}",
                        args.config.display()
                    ))
                };
                if resident_state(&config, choice.engine, &args.config)? {
                    return run_resident(comm, config, args, index, &opts)
                        .map(|s| (s, config_json));
                }
                // the engines come from the engine crate: the backend of the adaptive plan and,
                // when the planner chose it, the uniform grid of the particles at themselves
                let b = crate::planner::cuda(index).map_err(|e| what(e.to_string()));
                let b = vortex_method::parallel::agree(comm, b)?;
                let params = config.eval_params();
                let at_sources =
                    crate::planner::build_at_sources(comm, choice.engine, index, &params)
                        .map_err(|e| what(e.to_string()));
                let at_sources = vortex_method::parallel::agree(comm, at_sources)?;
                let build = vortex_method::run::host_build(comm, b, at_sources);
                let summary = run_and_report(comm, config, args, &opts, build)?;
                Ok((summary, config_json))
            }
            #[cfg(not(feature = "cuda"))]
            {
                let _ = local_rank;
                unreachable!("the planner refuses cuda without the `cuda` feature");
            }
        }
        Device::Cpu => {
            let _ = local_rank;
            if config.evaluation.state == vortex_method::config::StatePlace::Device {
                anyhow::bail!(
                    "{}: evaluation.state = \"device\" needs the CUDA backend (backend = \"cuda\", \
                     grid = \"uniform\")",
                    args.config.display()
                );
            }
            let build = vortex_method::run::host_build(comm, vortex_fmm::CpuBackend, None);
            let summary = run_and_report(comm, config, args, &opts, build)?;
            Ok((summary, config_json))
        }
    }
}

/// Whether the run keeps its particles on the GPUs (`evaluation.state`; `auto`: when the
/// planner chose the uniform grid for a periodic box, on one rank or in slabs over several).
/// Refuses `device` where the resident step does not apply, with the reason.
#[cfg(feature = "cuda")]
fn resident_state(
    config: &vortex_method::Config,
    engine: Engine,
    path: &std::path::Path,
) -> Result<bool> {
    use vortex_method::config::{GridVelocity, StatePlace};
    let core = config.evaluation.core;
    let why = vortex_resident::unsupported(config)
        .or_else(|| {
            (core != vortex_fmm::kernel::CoreOrder::Second).then(|| {
                format!(
                    "evaluation.core = {core}: the resident step's lattice sums and solve are \
                     the Gaussian's (the host state evaluates every core)"
                )
            })
        })
        .or_else(|| {
            (config.output.grid_velocity == Some(GridVelocity::Fmm)).then(|| {
                "output.grid_velocity = \"fmm\" needs the particles on the host (the resident \
             step computes the grid velocity from the vorticity)"
                    .to_string()
            })
        });
    match (config.evaluation.state, why) {
        (StatePlace::Host, _) => Ok(false),
        (StatePlace::Device, None) => Ok(true),
        (StatePlace::Device, Some(why)) => {
            anyhow::bail!("{}: evaluation.state = \"device\": {why}", path.display())
        }
        (StatePlace::Auto, why) => Ok(matches!(engine, Engine::UniformGrid | Engine::UniformSlabs)
            && config.evaluation.grid != GridChoice::Adaptive
            && why.is_none()),
    }
}

/// The run with its particle state on GPU `index` (`vortex_resident::ResidentSimulation`; on
/// several ranks each rank's slab on its own GPU).
#[cfg(feature = "cuda")]
fn run_resident(
    comm: &dyn Comm,
    config: vortex_method::Config,
    args: &RunArgs,
    index: usize,
    opts: &vortex_method::run::RunOptions,
) -> Result<vortex_method::run::RunSummary> {
    vortex_resident::check_one_gpu_per_rank(comm, index)?;
    let build: vortex_method::run::Build<'_> = Box::new(move |config, start| {
        let sim = vortex_resident::ResidentSimulation::new(comm, config, index, start)?;
        Ok(vortex_method::run::Simulation::Gathered(Box::new(sim)))
    });
    run_and_report(comm, config, args, opts, build)
}

/// `vortex_method::run::run` into `--out` (default `runs/out/<config stem>`); rank 0 prints the
/// summary line (what ran, on how many ranks) and the shares of the phases. Collective.
fn run_and_report<'c>(
    comm: &'c dyn Comm,
    config: vortex_method::Config,
    args: &RunArgs,
    opts: &vortex_method::run::RunOptions,
    build: vortex_method::run::Build<'c>,
) -> Result<vortex_method::run::RunSummary> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| vortex_method::run::default_out(&args.config));
    let summary =
        vortex_method::run::run(comm, config, &out, args.restart.as_deref(), opts, build)?;
    if comm.rank() == 0 {
        crate::errln!(
            "{} [backend {}, {} rank(s)]",
            summary.report(),
            summary.backend,
            comm.size()
        );
        if summary.steps > 0 {
            crate::errln!("{}", summary.phases.report());
        }
    }
    Ok(summary)
}
