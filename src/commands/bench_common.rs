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
