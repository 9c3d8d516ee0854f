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

fn log_range(vals: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in vals {
        if v > 0.0 && v.is_finite() {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    if !lo.is_finite() || hi <= 0.0 {
        return (1e-3, 1.0);
    }
    if hi <= lo {
        hi = lo * 10.0;
    }
    (lo / 1.5, hi * 1.5)
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
    let t0 = rows.first().map(|r| r.0).unwrap_or(0.0);
    let mut t1 = rows.last().map(|r| r.0).unwrap_or(1.0);
    if t1 <= t0 {
        t1 = t0 + 1.0;
    }
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
        rows.iter().filter(|r| r.1 > 0.0).map(|r| (r.0, r.1)),
        &BLUE,
    ))
    .map_err(perr(path))?;
    let dmax = rows.iter().map(|r| r.2).fold(0.0f64, f64::max);
    let dmax = if dmax > 0.0 { dmax * 1.1 } else { 1.0 };
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
    ch.draw_series(LineSeries::new(rows.iter().map(|r| (r.0, r.2)), &RED))
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
        .filter(|p| p.1 > 1e-30)
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
                .filter(|p| p.0 >= 1.0 && p.1 >= elo)
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
