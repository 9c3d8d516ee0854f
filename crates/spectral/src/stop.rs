//! A signal stops a run in bounded time (`docs/CONVENTIONS.md`, "Exit status"): the run loops
//! of both solvers mark the boundary of every step ([`step_boundary`]) and every checkpoint
//! that is complete on disk ([`checkpoint_complete`]); from these the binary's signal watcher
//! decides, when a signal arrives, whether the current step ends within the grace
//! ([`grace`], `VORTEX_STOP_GRACE_SECONDS`, default [`DEFAULT_GRACE_S`]: below the 30 s
//! between Slurm's SIGTERM and its SIGKILL, `KillWait`) by the measured length of the last
//! step ([`Progress::ends_within`]). If so the run stops at the end of its step with a fresh
//! checkpoint; if not, or when the grace has passed, it stops at once, naming the last
//! complete checkpoint ([`last_checkpoint`]).
//!
//! Durations a user types (this grace, the MPI watchdog's timeout) follow one rule,
//! [`parse_seconds`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The default grace of a signal: a run whose current step ends within it stops there with a
/// checkpoint. Below Slurm's usual `KillWait` of 30 s, with room for the checkpoint's write.
pub const DEFAULT_GRACE_S: f64 = 20.0;

/// The environment variable of the grace, in seconds (0: always stop at once).
pub const GRACE_VAR: &str = "VORTEX_STOP_GRACE_SECONDS";

/// The longest duration a user may give (about 116 days): longer than any batch job, far from
/// the overflow of the clocks' arithmetic.
pub const MAX_SECONDS: f64 = 1e7;

/// The one rule of a duration in seconds typed by a user: a number, finite, in `[0,
/// MAX_SECONDS]`; the error names the variable and the value.
pub fn parse_seconds(var: &str, text: &str) -> Result<f64, String> {
    let s: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{var}={text:?}: not a number of seconds"))?;
    if !(0.0..=MAX_SECONDS).contains(&s) {
        return Err(format!(
            "{var}={text}: must be a number of seconds in [0, {MAX_SECONDS:e}] (about 116 days)"
        ));
    }
    Ok(s)
}

/// The duration of environment variable `var` by [`parse_seconds`], `default` when unset.
pub fn seconds_from_env(var: &str, default: f64) -> Result<f64, String> {
    match std::env::var(var) {
        Ok(v) => parse_seconds(var, &v),
        Err(std::env::VarError::NotPresent) => Ok(default),
        Err(e) => Err(format!("{var}: {e}")),
    }
}

/// The grace of a signal ([`GRACE_VAR`], [`DEFAULT_GRACE_S`] when unset).
pub fn grace() -> Result<Duration, String> {
    seconds_from_env(GRACE_VAR, DEFAULT_GRACE_S).map(Duration::from_secs_f64)
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since [`epoch`] (at least 1, so that 0 means "never").
fn now_ns() -> u64 {
    (epoch().elapsed().as_nanos() as u64).max(1)
}

static STEP_START: AtomicU64 = AtomicU64::new(0);
static STEP_LEN: AtomicU64 = AtomicU64::new(0);
static LAST_CHECKPOINT: Mutex<Option<String>> = Mutex::new(None);

/// Marks the start of a step (the end of the one before, whose length becomes the measure of
/// the next). Called once per step by the run loops.
pub fn step_boundary() {
    let now = now_ns();
    let prev = STEP_START.swap(now, Ordering::Relaxed);
    if prev != 0 {
        STEP_LEN.store(now - prev, Ordering::Relaxed);
    }
}

/// Marks the end of the steps (the run writes its last outputs): no step is in progress, a
/// signal now waits for the end or the grace.
pub fn steps_ended() {
    STEP_START.store(0, Ordering::Relaxed);
}

/// Records `name` (the file and its step or time) as the newest checkpoint complete on disk.
pub fn checkpoint_complete(name: impl Into<String>) {
    *LAST_CHECKPOINT.lock().unwrap_or_else(|e| e.into_inner()) = Some(name.into());
}

/// The newest checkpoint complete on disk, if any (of this run or the one it restarted from).
pub fn last_checkpoint() -> Option<String> {
    LAST_CHECKPOINT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Where the current step stands: how long ago it began and how long the last one took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Seconds since the current step began.
    pub elapsed: f64,
    /// Seconds of the last complete step (`None`: no step measured yet).
    pub step: Option<f64>,
}

impl Progress {
    /// Whether the current step is expected to end within `secs` from now: the last step's
    /// length less what has passed (a margin of a quarter of a step for the checkpoint and
    /// the spread of step times); `None` while no step was measured.
    pub fn ends_within(&self, secs: f64) -> Option<bool> {
        self.step
            .map(|len| (1.25 * len - self.elapsed).max(0.0) <= secs)
    }
}

/// The current step's progress (`None` before the first step).
pub fn progress() -> Option<Progress> {
    let start = STEP_START.load(Ordering::Relaxed);
    if start == 0 {
        return None;
    }
    let len = STEP_LEN.load(Ordering::Relaxed);
    Some(Progress {
        elapsed: now_ns().saturating_sub(start) as f64 * 1e-9,
        step: (len > 0).then_some(len as f64 * 1e-9),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_follow_one_rule() {
        assert_eq!(parse_seconds("V", "2.5"), Ok(2.5));
        assert_eq!(parse_seconds("V", " 0 "), Ok(0.0));
        for bad in ["1e20", "-1", "nan", "inf", "ten", ""] {
            let e = parse_seconds("VORTEX_X", bad).unwrap_err();
            assert!(e.contains("VORTEX_X"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_step_ends_within_the_grace_by_its_measured_length() {
        let p = Progress {
            elapsed: 1.0,
            step: Some(10.0),
        };
        assert_eq!(p.ends_within(20.0), Some(true));
        assert_eq!(p.ends_within(5.0), Some(false));
        let long = Progress {
            elapsed: 5.0,
            step: Some(100.0),
        };
        assert_eq!(long.ends_within(20.0), Some(false));
        let first = Progress {
            elapsed: 5.0,
            step: None,
        };
        assert_eq!(first.ends_within(20.0), None);
    }

    #[test]
    fn boundaries_measure_the_last_step() {
        step_boundary();
        std::thread::sleep(Duration::from_millis(20));
        step_boundary();
        let p = progress().unwrap();
        assert!(p.step.unwrap() >= 0.019, "{p:?}");
        assert!(p.elapsed < 1.0, "{p:?}");
        checkpoint_complete("out/checkpoint.bin (step 3)");
        assert_eq!(
            last_checkpoint().as_deref(),
            Some("out/checkpoint.bin (step 3)")
        );
    }
}
