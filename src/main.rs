//! `vortex`: vortex particle method with a fast multipole method, on CPUs and GPUs.
//!
//! Subcommands: `eval` (one velocity + stretching evaluation), `particles` (test sets),
//! `bench` (timings and accuracy), `spectral` (the pseudo-spectral reference solver), `run`
//! (a vortex-method simulation), `compare` (a run and the spectral solver from the same field),
//! `status` (where runs stand, read from their output directories).
//!
//! Exit status: 0 success; 1 error (the message says why); 75 (`EX_TEMPFAIL`) `run` or
//! `spectral` stopped by SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 or SIGXCPU after finishing its step
//! and writing a checkpoint, or at once (a step longer than the grace, `signals`) with a
//! complete checkpoint named (continue with `--restart OUT`); 130 a second signal before the
//! checkpoint was written.

mod commands;
mod console;
mod io;
mod planner;
mod ranks;
mod run_info;
mod signals;

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
    /// A periodic vortex-method run and the spectral solver from the same initial field, and
    /// their comparison (energy, enstrophy, E(k); CSV and PNG).
    Compare(commands::compare::CompareArgs),
    /// Print a complete, commented configuration: `vortex config --defaults [vortex|spectral]`.
    Config(commands::config::ConfigArgs),
    /// Where runs stand (running, ended, interrupted, failed), their progress, last checkpoint,
    /// measured speed and time to go: `vortex status DIR... [--json]`; a directory of runs (a
    /// sweep) gives one line per run.
    Status(commands::status::StatusArgs),
}

/// The message of an error and its causes, `outer: cause: ...`, a cause left out where the
/// message before it already holds its text (the file errors of the libraries repeat their
/// cause in their own message); numbers of more than 24 characters (`1e308` written out by
/// `Display`) shown as `1e308` (`vortex_spectral::text::compact_numbers`).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    vortex_spectral::text::compact_numbers(&text)
}

/// A rayon pool with `threads` threads (all cores when `None`).
pub fn thread_pool(threads: Option<usize>) -> Result<rayon::ThreadPool> {
    Ok(vortex_engine::thread_pool(threads)?)
}

/// Sizes rayon's global pool (all cores when `None`); for commands whose work runs beside
/// MPI calls on the main thread.
pub fn set_global_threads(threads: Option<usize>) -> Result<()> {
    if let Some(t) = threads {
        if t == 0 {
            anyhow::bail!("--threads must be at least 1");
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(vortex_spectral::durable::cap_threads(t))
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
    if matches!(
        cli.command,
        Command::Run(_) | Command::Spectral(_) | Command::Compare(_)
    ) {
        if let Err(e) = signals::install() {
            crate::errln!("error: installing the signal handlers: {e:#}");
            std::process::exit(1);
        }
    }
    // Ok(Some(signal)): stopped by a signal after writing its checkpoint
    let result = match &cli.command {
        Command::Eval(a) => commands::eval::run(a).map(|_| None),
        Command::Particles(a) => commands::particles::run(a).map(|_| None),
        Command::Bench(a) => commands::bench::run(a).map(|_| None),
        Command::Config(a) => commands::config::run(a).map(|_| None),
        Command::Status(a) => commands::status::run(a).map(|_| None),
        Command::Spectral(a) => commands::spectral::run(a),
        Command::Run(a) => commands::run::run(a),
        Command::Compare(a) => commands::compare::run(a),
    };
    // stdout is the product of `config` and `bench`: a write that failed (a full disk, a
    // closed pipe) is an error, not a success (the runs' products are files; their summary
    // line on stdout is also in run.json)
    let stdout_is_product = matches!(cli.command, Command::Config(_) | Command::Bench(_));
    let result = result.and_then(|r| match console::stdout_error() {
        Some(e) if stdout_is_product => Err(anyhow::anyhow!(
            "writing to standard output failed ({e}): the output is incomplete"
        )),
        _ => Ok(r),
    });
    match result {
        Err(e) => {
            crate::errln!("error: {}", error_text(&e));
            std::process::exit(1);
        }
        Ok(Some(sig)) => {
            // once per job (every rank ends here); the checkpoint is OUT/checkpoint.bin on one
            // rank, OUT/checkpoint.manifest and its pieces on several: --restart OUT takes
            // either (its newest loadable checkpoint)
            if ranks::launched_rank() == 0 {
                crate::errln!(
                    "stopped by signal {sig} after writing a checkpoint; exit status {} \
                     (continue with --restart OUT)",
                    vortex_spectral::durable::EXIT_INTERRUPTED
                );
            }
            std::process::exit(vortex_spectral::durable::EXIT_INTERRUPTED);
        }
        Ok(None) => {}
    }
}
