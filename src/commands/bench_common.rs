//! What every benchmark of `vortex bench` shares: the refusal of a count that would do no
//! work, the announcement of a long benchmark's estimated duration (and the refusal of one
//! longer than a week), numbers as a user writes them.

use anyhow::{bail, Result};

/// Refuses a count of zero for `flag`: no work would be done, and a table of numbers (an error
/// of 0, a median of nothing) would be printed anyway.
pub fn need_work(flag: &str, count: usize, what: &str) -> Result<()> {
    if count == 0 {
        bail!("{flag} 0: {what}; give at least 1");
    }
    Ok(())
}

/// A number as a user would write it: plain between 1e-4 and 1e6, else in exponent notation
/// (`1e308`, not its 309 digits).
pub fn show(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e6).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// The longest a benchmark may be estimated to take: a week (a table that long is a typing
/// error, as a run of more than `vortex_method::config::MAX_STEPS` steps is).
pub const MAX_BENCH_S: f64 = 7.0 * 24.0 * 3600.0;

/// Logs the estimated duration of `what` when it is above 10 s (before the work starts,
/// measured from a first part of it), and refuses it above [`MAX_BENCH_S`], naming `flag`.
pub fn announce(flag: &str, what: &str, secs: f64) -> Result<()> {
    let text = format!(
        "{what}: estimated {} (measured on the first of them)",
        vortex_spectral::durable::duration_text(secs)
    );
    if secs.is_nan() || secs > MAX_BENCH_S {
        bail!(
            "{text}, more than the {} a benchmark may take: lower {flag}",
            vortex_spectral::durable::duration_text(MAX_BENCH_S)
        );
    }
    if secs > vortex_spectral::outdir::LONG_RUN_S {
        log::warn!("{text}: a long benchmark");
    } else if secs > 10.0 {
        log::info!("{text}");
    }
    Ok(())
}

/// Seconds of CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): unlike the
/// wall time, not stretched by other processes sharing the cores.
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec the call writes; the clock id is a constant of libc
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The share of one core a single-threaded benchmark can expect while the machine is as
/// loaded as now: `cores / (load + 1)` of the 1-minute load average of `/proc/loadavg` (the
/// benchmark itself one more runnable thread), at most 1; 1 when the load is not known.
pub fn expected_share() -> (f64, Option<f64>) {
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .filter(|l| l.is_finite() && *l >= 0.0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    (load.map_or(1.0, |l| (cores / (l + 1.0)).min(1.0)), load)
}
