//! What every benchmark of `vortex bench` shares: the refusal of a count that would do no
//! work, and the announcement of a long benchmark's estimated duration.

use anyhow::{bail, Result};

/// Refuses a count of zero for `flag`: no work would be done, and a table of numbers (an error
/// of 0, a median of nothing) would be printed anyway.
pub fn need_work(flag: &str, count: usize, what: &str) -> Result<()> {
    if count == 0 {
        bail!("{flag} 0: {what}; give at least 1");
    }
    Ok(())
}

/// Logs the estimated duration of `what` when it is above 10 s (before the work starts,
/// measured from a first part of it).
pub fn announce(what: &str, secs: f64) {
    if secs > 10.0 {
        let text = format!(
            "{what}: estimated {} (measured on the first of them)",
            vortex_spectral::durable::duration_text(secs)
        );
        if secs > vortex_spectral::outdir::LONG_RUN_S {
            log::warn!("{text}: a long benchmark");
        } else {
            log::info!("{text}");
        }
    }
}
