//! `vortex run CONFIG.toml [--out DIR] [--restart FILE] [--steps K] [--backend B] [--grid G]`: a
//! vortex-method simulation, in one process or as `mpirun -np R vortex run ...` (built with the
//! `mpi` feature). All the logic lives in the `vortex-method` crate (`vortex_method::run::run`);
//! this is argument glue: rank 0 reads the configuration and broadcasts it, the options are
//! checked to be the same on every rank, one call plans the run
//! (`vortex_engine::run_plan::plan_run`: the engine of the particles at themselves, the device
//! of every rank, where the particle state lives) and the plan is carried out.
//! Only rank 0 prints an error; every rank exits with status 1.

use anyhow::{anyhow, Result};
use clap::Args;
use std::path::PathBuf;
use vortex_domain::Comm;
#[cfg(feature = "cuda")]
use vortex_engine::run_plan::at_sources;
use vortex_engine::run_plan::{plan_run, Placement, RunPlan, RunRequest};
use vortex_fmm::planner::Device;
use vortex_fmm::{BackendChoice, GridChoice};

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
    let r = crate::ranks::with_comm_into(Some(&out_dir(args)), |comm, local_rank| {
        // rank 0 owns the output directory from here to the end (its lock, agreed)
        let lock = if comm.rank() == 0 {
            let out = out_dir(args);
            let mode =
                vortex_spectral::durable::OutMode::of(args.restart.is_some(), args.overwrite);
            crate::run_info::begin(
                &out,
                mode,
                args.restart.as_deref(),
                &[&args.config],
                "run",
                start,
            )
            .map(Some)
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
                log::warn!("{}", crate::error_text(&e));
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
    let plan = plan_run(
        comm,
        local_rank,
        &RunRequest {
            method: e.method,
            backend: e.backend,
            grid: e.grid,
            periodic: config.periodic().is_some(),
            device: e.device,
            state: e.state,
            device_state_refused: device_state_refused(&config),
        },
    )
    .map_err(|r| anyhow!("{}: {r}", args.config.display()))?;
    let config_json = serde_json::to_value(&config)?;
    let opts = vortex_method::run::RunOptions {
        max_steps: args.steps,
        overwrite: args.overwrite,
    };
    let summary = match (plan.placement, plan.device) {
        (Placement::Device, _) => run_resident(comm, config, args, plan.gpu, &opts)?,
        (Placement::Host, Device::Cuda) => run_host_cuda(comm, config, args, &plan, &opts)?,
        (Placement::Host, Device::Cpu) => {
            let build = vortex_method::run::host_build(comm, vortex_fmm::CpuBackend, None);
            run_and_report(comm, config, args, &opts, build)?
        }
    };
    Ok((summary, config_json))
}

/// The run with its particle state on the host ranks and the CUDA backend on this rank's GPU
/// (with the planner's engine of the particles at themselves, when it chose one).
fn run_host_cuda(
    comm: &dyn Comm,
    config: vortex_method::Config,
    args: &RunArgs,
    plan: &RunPlan,
    opts: &vortex_method::run::RunOptions,
) -> Result<vortex_method::run::RunSummary> {
    #[cfg(feature = "cuda")]
    {
        let what = |e: vortex_engine::EngineError| {
            vortex_method::Error::Other(format!(
                "backend \"cuda\" (device {}) for {}: {e}",
                plan.gpu,
                args.config.display()
            ))
        };
        let cuda = crate::planner::cuda(plan.gpu).map_err(what);
        let b = vortex_method::parallel::agree(comm, cuda)?;
        let at = at_sources(comm, plan, &config.eval_params()).map_err(what);
        let at = vortex_method::parallel::agree(comm, at)?;
        let build = vortex_method::run::host_build(comm, b, at);
        run_and_report(comm, config, args, opts, build)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (comm, config, args, plan, opts);
        unreachable!("the planner refuses cuda without the `cuda` feature")
    }
}

/// Why this configuration cannot keep its particles on the GPUs (`None`: it can): what the
/// device-resident step does not cover, or a grid velocity it does not compute.
fn device_state_refused(config: &vortex_method::Config) -> Option<String> {
    let core = config.evaluation.core;
    if core != vortex_fmm::kernel::CoreOrder::Second {
        return Some(format!(
            "evaluation.core = {core}: the resident step's lattice sums and solve are the \
             Gaussian's (the host state evaluates every core)"
        ));
    }
    #[cfg(feature = "cuda")]
    if let Some(why) = vortex_resident::unsupported(config) {
        return Some(why);
    }
    #[cfg(not(feature = "cuda"))]
    return Some("this binary was built without the `cuda` feature".into());
    #[cfg(feature = "cuda")]
    (config.output.grid_velocity == Some(vortex_method::config::GridVelocity::Fmm)).then(|| {
        "output.grid_velocity = \"fmm\" needs the particles on the host (the resident step \
         computes the grid velocity from the vorticity)"
            .to_string()
    })
}

/// The run with its particle state on GPU `index` (`vortex_resident::ResidentSimulation`; on
/// several ranks each rank's slab on its own GPU).
fn run_resident(
    comm: &dyn Comm,
    config: vortex_method::Config,
    args: &RunArgs,
    index: usize,
    opts: &vortex_method::run::RunOptions,
) -> Result<vortex_method::run::RunSummary> {
    #[cfg(feature = "cuda")]
    {
        vortex_resident::check_one_gpu_per_rank(comm, index)?;
        let build: vortex_method::run::Build<'_> = Box::new(move |config, start| {
            let sim = vortex_resident::ResidentSimulation::new(comm, config, index, start)?;
            Ok(vortex_method::run::Simulation::Gathered(Box::new(sim)))
        });
        run_and_report(comm, config, args, opts, build)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (comm, config, args, index, opts);
        unreachable!("without the `cuda` feature the plan keeps the state on the host")
    }
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
