//! Signals end `run`, `spectral` and `compare` in bounded time (`docs/CONVENTIONS.md`, "Exit
//! status"; the measures in `vortex_spectral::stop`).
//!
//! SIGINT, SIGTERM, SIGHUP (a closed terminal or ssh session), SIGUSR1, SIGUSR2 and SIGXCPU
//! (batch systems' warnings before a time or CPU limit) set the run loops' interrupt flag
//! (`vortex_spectral::durable`): a run whose current step ends within the grace
//! (`VORTEX_STOP_GRACE_SECONDS`, default 20 s, below Slurm's 30 s `KillWait`) by the measured
//! length of its last step finishes that step, writes a checkpoint, flushes its outputs and
//! exits with [`vortex_spectral::durable::EXIT_INTERRUPTED`]. Otherwise (the step would end
//! later, or the grace passed) the watcher thread of this module stops the process at once:
//! `run.json` records the stop and the last complete checkpoint, the message names it, and
//! the status is 75 when there is one to continue from (1 when none was completed). Under
//! mpirun every rank decides by the same rule; the ranks other than 0 wait two seconds more,
//! so that rank 0 records the stop, and the job ends through `MPI_Abort` with the same status.
//! A second signal ends the process at once (status 130), `run.json` recording it.

use anyhow::Result;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use vortex_spectral::durable::{interrupted, EXIT_INTERRUPTED};
use vortex_spectral::stop;

/// How the process ends at once: `std::process::exit` (one process), `MPI_Abort` with the
/// status (set by `crate::ranks` for a job of several ranks).
static EXIT: OnceLock<fn(i32) -> !> = OnceLock::new();

/// Makes `f` the way this process ends at once (`MPI_Abort` under mpirun).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn set_exit(f: fn(i32) -> !) {
    let _ = EXIT.set(f);
}

fn exit_now(code: i32) -> ! {
    match EXIT.get() {
        Some(f) => f(code),
        None => std::process::exit(code),
    }
}

/// Installs the handlers and starts the watcher; the grace is read (and a bad value refused)
/// here, before anything runs.
pub fn install() -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGXCPU};
    const STOPPING: [i32; 6] = [SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGXCPU];
    let grace = stop::grace().map_err(|e| anyhow::anyhow!(e))?;
    let flag = vortex_spectral::durable::interrupt_flag();
    for sig in STOPPING {
        // the flag keeps the first signal's number (the one the run reports)
        let first = flag.clone();
        // SAFETY: the action only loads and stores an atomic (async-signal-safe)
        unsafe {
            signal_hook::low_level::register(sig, move || {
                let _ = first.compare_exchange(
                    0,
                    sig as usize,
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                );
            })?;
        }
    }
    // the watcher wakes at the signal itself (a pipe written by the handler), not at a poll
    let signals = signal_hook::iterator::Signals::new(STOPPING)?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || watch(signals, grace))?;
    Ok(())
}

/// The watcher: waits for a signal, acknowledges it at once (whatever the run is doing: a
/// step can take minutes) and stops the process at once when its step will not end within
/// the grace, or when the grace has passed (looked at every 50 ms).
fn watch(mut signals: signal_hook::iterator::Signals, grace: Duration) {
    let tick = Duration::from_millis(50);
    let sig = loop {
        if let Some(sig) = signals.forever().next() {
            break sig as usize;
        }
        std::thread::sleep(tick);
        if let Some(sig) = interrupted() {
            break sig;
        }
    };
    let t0 = Instant::now();
    let progress = stop::progress();
    acknowledge(sig, grace, progress);
    // the other ranks let rank 0 record the stop first
    let extra = if crate::ranks::launched_rank() == 0 {
        Duration::ZERO
    } else {
        Duration::from_secs(2)
    };
    loop {
        // a second signal: at once, recorded, status 130
        if let Some(second) = signals.pending().next() {
            stop_on_second(sig, second as usize);
        }
        let left = grace.saturating_sub(t0.elapsed());
        let late = stop::progress().and_then(|p| p.ends_within(left.as_secs_f64()));
        if late == Some(false) || left.is_zero() {
            std::thread::sleep(extra);
            stop_at_once(sig, grace, left.is_zero());
        }
        std::thread::sleep(tick);
    }
}

/// Says once (rank 0) that signal `sig` was seen and what will happen.
fn acknowledge(sig: usize, grace: Duration, progress: Option<stop::Progress>) {
    if crate::ranks::launched_rank() != 0 {
        return;
    }
    let step = match progress.and_then(|p| p.step) {
        Some(s) => format!(
            "a step takes {}",
            vortex_spectral::durable::duration_text(s)
        ),
        None => "no step measured yet".into(),
    };
    log::warn!(
        "signal {sig} received: the run stops at the end of its current step and writes a \
         checkpoint (exit status {EXIT_INTERRUPTED}) if that step ends within {:.0} s ({}; \
         {step}), else at once, naming the last complete checkpoint; a second signal stops it \
         at once without one (exit status 130)",
        grace.as_secs_f64(),
        stop::GRACE_VAR
    );
}

/// A second signal `second` after `first`: says it (rank 0), records it in `run.json` with
/// the last complete checkpoint and ends the process with status 130.
fn stop_on_second(first: usize, second: usize) -> ! {
    let what = match stop::last_checkpoint() {
        Some(ck) => format!(
            "a second signal ({second}) stopped the run at once, without a checkpoint of its \
             own; the last complete checkpoint is {ck}: continue with --restart on it (or on \
             the output directory)"
        ),
        None => format!(
            "a second signal ({second}) stopped the run at once; no checkpoint was completed, \
             nothing to continue"
        ),
    };
    if crate::ranks::launched_rank() == 0 {
        log::error!("signal {first}: {what}");
        crate::run_info::end_abruptly(crate::run_info::Outcome::StoppedAtOnce(first, what));
    }
    exit_now(130)
}

/// Says it on stderr (rank 0), records it in `run.json` and ends the process: status 75 with
/// a checkpoint to continue from, 1 without one.
fn stop_at_once(sig: usize, grace: Duration, passed: bool) -> ! {
    let why = if passed {
        format!(
            "the grace of {:.0} s ({}) passed before the step ended",
            grace.as_secs_f64(),
            stop::GRACE_VAR
        )
    } else {
        let p = stop::progress();
        format!(
            "the current step (begun {:.1} s ago; the last one took {:.1} s) would not end \
             within the grace of {:.0} s ({})",
            p.map_or(0.0, |p| p.elapsed),
            p.and_then(|p| p.step).unwrap_or(0.0),
            grace.as_secs_f64(),
            stop::GRACE_VAR
        )
    };
    let (what, code) = match stop::last_checkpoint() {
        Some(ck) => (
            format!(
                "stopped at once: {why}; the last complete checkpoint is {ck}: continue with \
                 --restart on it (or on the output directory)"
            ),
            EXIT_INTERRUPTED,
        ),
        None => (
            format!("stopped at once: {why}; no checkpoint was completed, nothing to continue"),
            1,
        ),
    };
    if crate::ranks::launched_rank() == 0 {
        log::error!("signal {sig}: {what}");
        crate::run_info::end_abruptly(crate::run_info::Outcome::StoppedAtOnce(sig, what));
    }
    exit_now(code)
}
