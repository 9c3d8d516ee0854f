//! When an output is due ([`Schedule`]): every `output.*_every` steps and at the first step at or
//! after each multiple of `output.*_interval` in simulation time; the schedules of the diagnostics,
//! snapshots and checkpoints of a run ([`Schedules`]).

use super::*;

/// When an output is due: every `every` steps (0: not by steps) and at the first step at or
/// after each multiple of the simulation-time `interval` (`t = step dt`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Schedule {
    pub(super) every: u64,
    pub(super) interval: Option<f64>,
    pub(super) dt: f64,
}

impl Schedule {
    pub(super) fn any(&self) -> bool {
        self.every > 0 || self.interval.is_some()
    }

    pub(super) fn due(&self, step: u64) -> bool {
        // the multiples of the interval reached by a step, a relative 1e-9 below each counted
        let reached = |iv: f64, s: u64| (s as f64 * self.dt / iv * (1.0 + 1e-9)).floor();
        (self.every > 0 && step % self.every == 0)
            || self
                .interval
                .is_some_and(|iv| step == 0 || reached(iv, step) > reached(iv, step - 1))
    }
}

/// The schedules of the outputs of `vortex run` (`output.*_every` in steps, `output.*_interval`
/// in simulation time).
pub(super) struct Schedules {
    pub(super) diagnostics: Schedule,
    pub(super) snapshot: Schedule,
    pub(super) checkpoint: Schedule,
}

impl Schedules {
    pub(super) fn new(cfg: &Config) -> Self {
        let o = &cfg.output;
        let s = |every, interval| Schedule {
            every,
            interval,
            dt: cfg.dt,
        };
        Schedules {
            diagnostics: s(o.diagnostics_every, o.diagnostics_interval),
            snapshot: s(o.snapshot_every, o.snapshot_interval),
            checkpoint: s(o.checkpoint_every, o.checkpoint_interval),
        }
    }
}
