//! `vortex`: vortex particle method with a fast multipole method, on CPUs and GPUs.
//!
//! Subcommands: `eval` (one velocity + stretching evaluation), `particles` (test sets),
//! `bench` (timings and accuracy), `spectral` (the pseudo-spectral reference solver).

mod commands;
mod io;
mod planner;
mod ranks;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "vortex", version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("VORTEX_GIT_COMMIT"), ")"),
          about = "Vortex particle method with a fast multipole method (FMM)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Velocity and stretching of a particle file (direct, treecode or FMM).
    Eval(commands::eval::EvalArgs),
    /// Write a reproducible random particle set (.npy, N x 7).
    Particles(commands::particles::ParticlesArgs),
    /// Benchmarks: time per phase and accuracy.
    Bench(commands::bench::BenchArgs),
    /// A vortex-method simulation from a configuration file.
    Run(commands::run::RunArgs),
    /// Pseudo-spectral Navier-Stokes solver (the reference for decaying turbulence).
    Spectral(commands::spectral::SpectralArgs),
}

/// A rayon pool with `threads` threads (all cores when `None`).
pub fn thread_pool(threads: Option<usize>) -> Result<rayon::ThreadPool> {
    Ok(engine::thread_pool(threads)?)
}

/// Sizes rayon's global pool (all cores when `None`); for commands whose work runs beside
/// MPI calls on the main thread.
pub fn set_global_threads(threads: Option<usize>) -> Result<()> {
    if let Some(t) = threads {
        if t == 0 {
            anyhow::bail!("--threads must be at least 1");
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .map_err(|e| anyhow::anyhow!("setting the thread count: {e}"))?;
    }
    Ok(())
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Eval(a) => commands::eval::run(a),
        Command::Particles(a) => commands::particles::run(a),
        Command::Bench(a) => commands::bench::run(a),
        Command::Spectral(a) => commands::spectral::run(a),
        Command::Run(a) => commands::run::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
