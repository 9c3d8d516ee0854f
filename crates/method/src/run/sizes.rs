//! The size of each kind of output of a run, announced before its first step (a particle
//! snapshot of 1e8 particles is ~10 GiB; the user should know before the disk fills).
//!
//! Bytes per item from the writers: a `.vtp` particle (`crate::vtp`): position, strength,
//! velocity (3 f64 each), `|alpha|` and `sigma` (f64) and its vertex cell (two i64) = 104 B; a
//! legacy ASCII `.vtk` particle about 330 B (13 numbers of ~25 characters); a grid point of
//! `grid_STEP.vtk` (`crate::diagnostics::write_vtk_grid`): velocity and vorticity (3 f64 each),
//! `|omega|` and `Q` = 64 B; a checkpointed particle (`crate::stepping::State`): position and
//! strength (3 f64 each), `sigma`, `sigma0`, its Adams-Bashforth rates (6 f64) and its id = 120 B.

use super::schedule::Schedule;
use crate::config::{Config, SnapshotFormat};
use vortex_spectral::outdir::bytes_text;

/// Bytes of one particle in a `.vtp` snapshot.
const VTP_PARTICLE: f64 = 104.0;
/// Bytes of one particle in a legacy ASCII `.vtk` snapshot (about).
const VTK_PARTICLE: f64 = 330.0;
/// Bytes of one point of a grid field file.
const GRID_POINT: f64 = 64.0;
/// Bytes of one particle in a checkpoint.
const CHECKPOINT_PARTICLE: f64 = 120.0;

/// How many times `s` is due over steps `start..=stop` (the initial state counted only when
/// `initial`; the last step always writes a scheduled output): stepped through up to a million
/// steps, estimated from the schedule's rates beyond.
pub(super) fn count_due(s: &Schedule, start: u64, stop: u64, initial: bool) -> u64 {
    if !s.any() || stop < start {
        return 0;
    }
    let due = |k: u64| (s.due(k) && (k > 0 || initial)) || k == stop;
    if stop - start <= 1_000_000 {
        return (start..=stop).filter(|&k| due(k)).count() as u64;
    }
    let by_steps = match (stop.checked_div(s.every), start.checked_div(s.every)) {
        (Some(b), Some(a)) => b - a,
        _ => 0,
    };
    let by_time = s.interval.map_or(0.0, |iv| {
        ((stop - start) as f64 * s.dt / iv).min((stop - start) as f64)
    });
    by_steps.max(by_time as u64) + u64::from(due(start)) + 1
}

/// The announcement: each output kind the run writes, its size and how many (`n` particles,
/// steps `start..stop`).
pub(super) fn outputs_text(cfg: &Config, n: usize, start: u64, stop: u64) -> String {
    let o = &cfg.output;
    let s = super::schedule::Schedules::new(cfg);
    let n = n as f64;
    let mut parts = Vec::new();
    let snaps = count_due(&s.snapshot, start, stop, o.snapshot_initial);
    if snaps > 0 {
        let (per, kind) = match o.snapshot_format {
            SnapshotFormat::Vtp => (VTP_PARTICLE, "vtp"),
            SnapshotFormat::Vtk => (VTK_PARTICLE, "legacy vtk"),
        };
        let mut text = format!(
            "{snaps} particle snapshot(s) ({kind}) of {} each{}",
            bytes_text(n * per),
            if o.snapshot_initial {
                ", the initial state included"
            } else {
                " (not of the initial state: output.snapshot_initial = true for it)"
            }
        );
        if let (true, Some(g)) = (cfg.domain.periodic, cfg.output.grid.or(cfg.lattice_n())) {
            let g = g as f64;
            text.push_str(&format!(
                " with a grid field of {}",
                bytes_text(g * g * g * GRID_POINT)
            ));
        }
        parts.push(text);
    }
    let kept = o.checkpoints_kept.max(1);
    parts.push(format!(
        "checkpoints of {} each, {kept} kept",
        bytes_text(n * CHECKPOINT_PARTICLE)
    ));
    let rows = count_due(&s.diagnostics, start, stop, true);
    let mut diag = format!("{rows} rows of diagnostics.csv");
    if let (true, true, Some(g)) = (
        cfg.domain.periodic,
        o.spectra,
        cfg.output.grid.or(cfg.lattice_n()),
    ) {
        // a spectrum of about 0.87 g shells, ~50 B a line, with each row
        diag.push_str(&format!(
            " with a spectrum of {} each",
            bytes_text(0.87 * g as f64 * 50.0)
        ));
    }
    parts.push(diag);
    parts.push(format!(
        "timing.csv {} (a row per step)",
        bytes_text(stop.saturating_sub(start) as f64 * 110.0)
    ));
    format!("outputs: {}", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Beyond a million steps the count from the rates is within a factor 1.5 of the stepped
    /// one (the initial state left out unless asked for).
    #[test]
    fn counts_from_the_rates_are_close() {
        for (every, interval, dt) in [
            (3, None, 0.1),
            (0, Some(0.25), 0.1),
            (4, Some(0.3), 0.05),
            (1000, None, 1.0),
        ] {
            let s = Schedule {
                every,
                interval,
                dt,
            };
            let exact = |a, b, init| {
                (a..=b)
                    .filter(|&k| (s.due(k) && (k > 0 || init)) || k == b)
                    .count() as f64
            };
            assert_eq!(count_due(&s, 0, 10, false) as f64, exact(0, 10, false));
            assert_eq!(count_due(&s, 0, 10, true) as f64, exact(0, 10, true));
            let (a, b) = (7, 2_000_007);
            let got = count_due(&s, a, b, false) as f64;
            let want = exact(a, b, false);
            assert!(
                got <= 1.5 * want && want <= 1.5 * got,
                "{every} {interval:?}: {got} {want}"
            );
        }
        let none = Schedule {
            every: 0,
            interval: None,
            dt: 0.1,
        };
        assert_eq!(count_due(&none, 0, 10, true), 0);
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(bytes_text(512.0), "512 B");
        assert_eq!(bytes_text(1.5 * 1024.0 * 1024.0), "1.5 MiB");
        // the 512^3 snapshot of the issue: 134 M particles
        assert_eq!(bytes_text(134_217_728.0 * VTP_PARTICLE), "13.0 GiB");
    }
}
