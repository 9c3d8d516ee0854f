//! Announced durations, calibrated from the first steps (both solvers and the benchmarks of
//! the binary).
//!
//! Before a long job starts, [`crate::outdir::announce_steps`] logs its step count and a
//! duration from a rough model of the step (or nothing where the count is not known: adaptive
//! steps). [`Estimate`] then measures: after the first step (which carries the warm-up: plans,
//! kernels, the initial solve) it takes the rate of the steps since its last look, projects the
//! total from the fraction of the work done, and announces it again when the projection differs from
//! the last announcement by more than a factor 1.5 at the first calibration and 2 afterwards
//! (looked at at geometrically spaced times, so a run of any length checks a few dozen times).
//! The last announcement is thus within a factor 2 of the projection at each look, and a job
//! whose rate does not change by more than that ends within 3 times its announced duration.

use std::time::Instant;

/// Seconds of measurement after the first step before the first projection.
const CALIBRATE_S: f64 = 1.0;

/// Remaining seconds below which a changed projection is not announced (the job is about to
/// end).
const QUIET_S: f64 = 5.0;

/// The factor between the projection and the last announcement above which the projection is
/// announced, at the first calibration and afterwards.
const OFF_FIRST: f64 = 1.5;
/// See [`OFF_FIRST`].
const OFF_LATER: f64 = 2.0;

/// The projected duration of a job from its progress (see the module documentation).
#[derive(Debug)]
pub struct Estimate {
    what: String,
    start: Instant,
    /// The last announced total duration in seconds (`None`: none yet).
    announced: Option<f64>,
    /// Wall seconds and fraction done at the last look (the first: after the first step).
    base: Option<(f64, f64)>,
    /// Wall seconds of the next look.
    next_look: f64,
    calibrated: bool,
}

impl Estimate {
    /// Starts measuring a job named `what` (e.g. "spectral run") whose duration was announced
    /// as `announced_s` seconds (`None`: not announced, adaptive steps).
    pub fn new(what: &str, announced_s: Option<f64>) -> Self {
        Estimate {
            what: what.to_string(),
            start: Instant::now(),
            announced: announced_s.filter(|s| s.is_finite()),
            base: None,
            next_look: 0.0,
            calibrated: false,
        }
    }

    /// The last announced total duration in seconds, if any.
    pub fn announced(&self) -> Option<f64> {
        self.announced
    }

    /// Records that the fraction `done` of the job (in `[0, 1]`) is complete, and announces the
    /// projected duration when it differs from the last announcement (see the module
    /// documentation). Returns the new projection in seconds when it was announced.
    pub fn progress(&mut self, done: f64) -> Option<f64> {
        self.progress_at(self.start.elapsed().as_secs_f64(), done)
    }

    /// [`Estimate::progress`] at `wall` seconds after the start.
    fn progress_at(&mut self, wall: f64, done: f64) -> Option<f64> {
        if !(done.is_finite() && done > 0.0) {
            return None;
        }
        let Some((w1, f1)) = self.base else {
            self.base = Some((wall, done));
            self.next_look = wall + CALIBRATE_S;
            return None;
        };
        if wall < self.next_look || done <= f1 || done >= 1.0 {
            return None;
        }
        self.next_look = wall * 1.25 + CALIBRATE_S;
        // the rate since the last look (a quarter of the time so far, or the calibration):
        // a job that slows down or speeds up is followed
        let rate = (wall - w1) / (done - f1);
        self.base = Some((wall, done));
        let remaining = rate * (1.0 - done);
        let total = wall + remaining;
        let limit = if self.calibrated {
            OFF_LATER
        } else {
            OFF_FIRST
        };
        self.calibrated = true;
        let off = self
            .announced
            .map_or(f64::INFINITY, |a| (total / a).max(a / total));
        if off <= limit || remaining < QUIET_S {
            return None;
        }
        let text = format!(
            "{}: {:.1} % done after {}; now estimated {} in all, {} to go (measured; announced \
             {} before)",
            self.what,
            100.0 * done,
            crate::outdir::duration_text(wall),
            crate::outdir::duration_text(total),
            crate::outdir::duration_text(remaining),
            self.announced
                .map_or("nothing".to_string(), crate::outdir::duration_text)
        );
        if total > crate::outdir::LONG_RUN_S {
            log::warn!("{text}: a long run; check dt, t_end and the output intervals");
        } else {
            log::info!("{text}");
        }
        self.announced = Some(total);
        Some(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job of `steps` steps, step `k` taking `s(k)` seconds, announced as `announced`: the
    /// last announcement against the true duration.
    fn last_announcement(
        announced: Option<f64>,
        s: impl Fn(usize) -> f64,
        steps: usize,
    ) -> (f64, f64) {
        let mut e = Estimate::new("test", announced);
        let mut wall = 0.0;
        for k in 1..=steps {
            wall += s(k);
            e.progress_at(wall, k as f64 / steps as f64);
        }
        (e.announced().unwrap_or(f64::NAN), wall)
    }

    #[test]
    fn announcements_end_within_3x_of_the_duration() {
        let steady = |s: f64, first: f64| move |k: usize| if k == 1 { first } else { s };
        // models 100 times too low and too high, none at all, a slow first step
        type Case = (Option<f64>, Box<dyn Fn(usize) -> f64>, usize);
        let cases: Vec<Case> = vec![
            (Some(9.0), Box::new(steady(0.9, 0.9)), 1000),
            (Some(5000.0), Box::new(steady(0.01, 0.01)), 5000),
            (None, Box::new(steady(0.2, 0.5)), 300),
            (Some(30.0), Box::new(steady(0.05, 60.0)), 2000),
            // a step that slows down tenfold over the run (particles multiply)
            (
                Some(1.0),
                Box::new(|k| 0.1 * (1.0 + 9.0 * k as f64 / 400.0)),
                400,
            ),
            // every tenth step ten times slower (re-interpolation)
            (
                Some(1.0),
                Box::new(|k| if k % 10 == 0 { 1.0 } else { 0.1 }),
                500,
            ),
        ];
        for (announced, s, steps) in cases {
            let (a, total) = last_announcement(announced, s, steps);
            let off = (a / total).max(total / a);
            assert!(off < 3.0, "{announced:?}: announced {a}, took {total}");
        }
    }

    #[test]
    fn a_good_model_is_not_announced_again() {
        let mut e = Estimate::new("test", Some(100.0));
        for k in 1..=100 {
            assert_eq!(e.progress_at(k as f64, k as f64 / 100.0), None);
        }
        assert_eq!(e.announced(), Some(100.0));
    }
}
