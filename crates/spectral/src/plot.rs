//! PNG figures with plotters (bitmap backend, embedded DejaVu Sans font: no system font libraries).

use crate::io::IoError;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        if plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_err()
        {
            log::warn!("could not register the embedded font; plots may lack text");
        }
    });
}

fn perr<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> IoError + '_ {
    move |e| IoError::Plot {
        path: path.to_path_buf(),
        msg: format!("{e:?}"),
    }
}

/// The largest magnitude an axis may span: plotters steps its ticks in floating point, and an
/// axis bound near the ends of the double range (a denormal energy, 1e308) makes it loop
/// forever or draw nothing, so values beyond are left out of the range.
const AXIS_MAX: f64 = 1e200;

/// The most decades a log axis spans (below that fraction of its top, a line leaves the
/// figure: an energy decaying to 1e-300 shows its first 30 decades).
const LOG_DECADES: f64 = 30.0;

/// The range of a log axis over the positive values among `vals` in `[1/AXIS_MAX, AXIS_MAX]`,
/// at most [`LOG_DECADES`] decades below the largest; `(1e-3, 1)` when there is none.
fn log_range(vals: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in vals {
        if (1.0 / AXIS_MAX..=AXIS_MAX).contains(&v) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    if !lo.is_finite() || hi <= 0.0 {
        return (1e-3, 1.0);
    }
    lo = lo.max(hi * 10f64.powf(-LOG_DECADES));
    if hi <= lo * 1.000001 {
        hi = lo * 10.0;
    }
    (lo / 1.5, hi * 1.5)
}

/// A linear axis from `lo` to `hi` that plotters can draw: both finite and within
/// [`AXIS_MAX`], and a width of at least 1e-9 of their magnitude (and 1e-100): otherwise the
/// width is widened around the values, or `(0, 1)` where they are not usable.
fn linear_range(lo: f64, hi: f64) -> (f64, f64) {
    let usable = |v: f64| v.is_finite() && v.abs() <= AXIS_MAX;
    if !(usable(lo) && usable(hi)) || hi < lo {
        return (0.0, 1.0);
    }
    let min_width = (1e-9 * lo.abs().max(hi.abs())).max(1e-100);
    if hi - lo < min_width {
        let mid = 0.5 * (lo + hi);
        return (mid - min_width, mid + min_width);
    }
    (lo, hi)
}

/// A short tick label for a log axis (plotters prints the full decimal expansion, e.g.
/// `0.0000010000000000000002`, and the labels overlap): the plain number between 0.01 and 1000
/// (`0.5`, `20`), otherwise one significant digit in scientific form (`1e-6`, `5e4`).
fn log_label(v: &f64) -> String {
    let a = v.abs();
    if *v == 0.0 || !v.is_finite() {
        format!("{v}")
    } else if (0.01..1000.0).contains(&a) {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.0e}")
    }
}

/// Energy decay (log scale) and dissipation against time, side by side. `rows` are
/// `(t, energy, dissipation)`.
pub fn plot_energy(path: &Path, rows: &[(f64, f64, f64)]) -> Result<(), IoError> {
    register_font();
    let root = BitMapBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(perr(path))?;
    let areas = root.split_evenly((1, 2));
    let (t0, t1) = linear_range(
        rows.first().map_or(0.0, |r| r.0),
        rows.last().map_or(1.0, |r| r.0),
    );
    let (elo, ehi) = log_range(rows.iter().map(|r| r.1));
    let mut ch = ChartBuilder::on(&areas[0])
        .caption("Kinetic energy", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(t0..t1, (elo..ehi).log_scale())
        .map_err(perr(path))?;
    ch.configure_mesh()
        .x_desc("t")
        .y_desc("E")
        .y_labels(8)
        .y_label_formatter(&log_label)
        .draw()
        .map_err(perr(path))?;
    ch.draw_series(LineSeries::new(
        rows.iter()
            .filter(|r| r.1 >= elo && r.1 <= ehi && r.0 >= t0 && r.0 <= t1)
            .map(|r| (r.0, r.1)),
        &BLUE,
    ))
    .map_err(perr(path))?;
    let dmax = rows
        .iter()
        .map(|r| r.2)
        .filter(|d| d.abs() <= AXIS_MAX)
        .fold(0.0f64, f64::max);
    let (_, dmax) = linear_range(0.0, dmax * 1.1);
    let mut ch = ChartBuilder::on(&areas[1])
        .caption("Dissipation 2 nu Z", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(t0..t1, 0.0..dmax)
        .map_err(perr(path))?;
    ch.configure_mesh()
        .x_desc("t")
        .y_desc("epsilon")
        .draw()
        .map_err(perr(path))?;
    ch.draw_series(LineSeries::new(
        rows.iter()
            .filter(|r| r.2.is_finite() && r.2.abs() <= dmax && r.0 >= t0 && r.0 <= t1)
            .map(|r| (r.0, r.2)),
        &RED,
    ))
    .map_err(perr(path))?;
    root.present().map_err(perr(path))?;
    Ok(())
}

/// Energy spectra on log-log axes, one line per `(t, spectrum)`.
pub fn plot_spectra(path: &Path, spectra: &[(f64, Vec<(f64, f64)>)]) -> Result<(), IoError> {
    register_font();
    let root = BitMapBackend::new(path, (800, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(perr(path))?;
    let kmax = spectra
        .iter()
        .flat_map(|s| s.1.iter())
        .filter(|p| p.1 > 1e-30 && p.0 <= AXIS_MAX)
        .map(|p| p.0)
        .fold(2.0f64, f64::max);
    let (elo, ehi) = log_range(
        spectra
            .iter()
            .flat_map(|s| s.1.iter())
            .filter(|p| p.0 >= 1.0 && p.1 > 1e-30)
            .map(|p| p.1),
    );
    let elo = elo.max(ehi * 1e-14);
    let mut ch = ChartBuilder::on(&root)
        .caption("Energy spectra E(k)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0..kmax * 1.2).log_scale(), (elo..ehi).log_scale())
        .map_err(perr(path))?;
    ch.configure_mesh()
        .x_desc("k")
        .y_desc("E(k)")
        .x_labels(8)
        .y_labels(8)
        .x_label_formatter(&log_label)
        .y_label_formatter(&log_label)
        .draw()
        .map_err(perr(path))?;
    let ns = spectra.len().max(1);
    for (i, (t, s)) in spectra.iter().enumerate() {
        let color = HSLColor(0.7 * i as f64 / ns as f64, 0.8, 0.45);
        ch.draw_series(LineSeries::new(
            s.iter()
                .filter(|p| (1.0..=kmax).contains(&p.0) && (elo..=ehi).contains(&p.1))
                .map(|p| (p.0, p.1)),
            color.stroke_width(2),
        ))
        .map_err(perr(path))?
        .label(format!("t = {t:.3}"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(perr(path))?;
    root.present().map_err(perr(path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a thread; a failure (not a hang of the test run) when it does not return
    /// within a minute (each figure takes milliseconds).
    fn returns(what: &str, f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_secs(60)).is_ok(),
            "{what}: the figure never finished"
        );
    }

    #[test]
    fn figures_of_extreme_values_finish() {
        let dir = tempfile::tempdir().unwrap();
        let tiny = f64::from_bits(1); // the smallest denormal
        let cases: Vec<(&str, Vec<(f64, f64, f64)>)> = vec![
            (
                "energy decaying to 0",
                (0..50)
                    .map(|i| (0.02 * i as f64, (-15.0 * i as f64).exp(), 1e-300))
                    .collect(),
            ),
            (
                "denormal energies",
                vec![(0.0, tiny, tiny), (1.0, 2.0 * tiny, 0.0)],
            ),
            ("all zero", vec![(0.0, 0.0, 0.0), (1.0, 0.0, 0.0)]),
            ("huge", vec![(0.0, 1e308, f64::MAX), (1.0, 1e300, 1e308)]),
            (
                "non-finite",
                vec![
                    (0.0, f64::NAN, f64::INFINITY),
                    (f64::NAN, 1.0, f64::NEG_INFINITY),
                ],
            ),
            ("one row", vec![(0.5, 1.0, 1.0)]),
            ("no rows", vec![]),
            (
                "a time span of 1e-300",
                vec![(0.0, 1.0, 1.0), (1e-300, 0.5, 1.0)],
            ),
            (
                "times near 1e308",
                vec![(1e307, 1.0, 1.0), (1e308, 0.5, 1.0)],
            ),
        ];
        for (what, rows) in cases {
            let p = dir.path().join(format!("{}.png", what.replace(' ', "_")));
            returns(what, move || {
                plot_energy(&p, &rows).unwrap();
            });
        }
        let spectra = vec![
            (0.0, vec![(1.0, tiny), (2.0, 0.0), (3.0, 1e308)]),
            (1.0, vec![(1e300, 1.0), (f64::NAN, f64::INFINITY)]),
        ];
        let p = dir.path().join("spectra.png");
        returns("extreme spectra", move || {
            plot_spectra(&p, &spectra).unwrap();
        });
    }

    #[test]
    fn log_axis_labels_are_short() {
        let cases = [
            (1e-6, "1e-6"),
            (1.0000000000000002e-6, "1e-6"),
            (5e-4, "5e-4"),
            (0.5, "0.5"),
            (0.25, "0.25"),
            (1.0, "1"),
            (20.0, "20"),
            (3e4, "3e4"),
        ];
        for (v, want) in cases {
            assert_eq!(log_label(&v), want, "{v:e}");
        }
    }
}
