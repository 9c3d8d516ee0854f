//! PNG figures with plotters (bitmap backend, embedded DejaVu Sans font: no system font
//! libraries): a run's energy history and spectra (`energy.png`, `spectra.png` of both solvers),
//! with the other solver's curves beside them where a comparison ran, and the comparison of
//! the two solvers (`vortex compare`: energy, enstrophy, E(k)).
//!
//! Every axis has labelled ticks ([`ticks`]): a log axis over several decades is labelled at
//! each decade with the mantissas 2..9 as light lines, a narrower one at 1, 2, 5 (or every
//! mantissa) times the decades; the grids are light; the axes say what they show, and a footer
//! the units (nondimensional: the box `[-pi, pi)^3` of length `2 pi`, the viscosity `nu`).

pub mod ticks;

use crate::io::IoError;
use plotters::coord::combinators::{BindKeyPoints, WithKeyPoints};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;
use ticks::{label, log_ticks, Axis};

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

/// The history of one solver: rows `(t, energy, enstrophy)` and its viscosity (the dissipation
/// is `2 nu Z`).
#[derive(Clone, Copy, Debug)]
pub struct History<'a> {
    /// Name in the legend (`vortex method`, `spectral`).
    pub label: &'a str,
    pub rows: &'a [(f64, f64, f64)],
    pub nu: f64,
}

/// The energy spectra of one solver: `(t, [(k, E(k))])`.
#[derive(Clone, Copy, Debug)]
pub struct Spectra<'a> {
    pub label: &'a str,
    pub spectra: &'a [(f64, Vec<(f64, f64)>)],
}

/// One line of a panel.
struct Curve {
    label: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    dashed: bool,
}

/// The colours of the first solver, the other's, and of successive spectra.
const MAIN: RGBColor = RGBColor(31, 90, 180);
const OTHER: RGBColor = RGBColor(200, 60, 30);

fn spectrum_color(i: usize, n: usize) -> RGBColor {
    let hue = 0.72 * i as f64 / n.max(2).saturating_sub(1) as f64;
    let (r, g, b) = HSLColor(hue, 0.75, 0.42).rgb();
    RGBColor(r, g, b)
}

/// A panel of curves on `area`: linear x, linear or log y (log x too with `log_x`).
struct Panel<'a> {
    caption: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    log_x: bool,
    log_y: bool,
    curves: Vec<Curve>,
    /// Where the legend goes (away from the curves).
    legend: SeriesLabelPosition,
}

/// Positive finite values of the curves' coordinate `c` (0: x, 1: y).
fn values(curves: &[Curve], c: usize, positive: bool) -> impl Iterator<Item = f64> + '_ {
    curves
        .iter()
        .flat_map(|cv| cv.points.iter())
        .map(move |p| if c == 0 { p.0 } else { p.1 })
        .filter(move |v| v.is_finite() && (!positive || *v > 0.0))
        // an axis near the ends of the double range (1e308, a denormal energy) cannot be
        // stepped: such values are left out of the range
        .filter(|v| v.abs() <= AXIS_MAX && (*v == 0.0 || v.abs() >= 1.0 / AXIS_MAX))
}

/// The largest magnitude an axis may span (beyond, values are left out of the range).
const AXIS_MAX: f64 = 1e200;

/// The range of an axis over `vals`: a log axis padded by a factor 1.15 (at most 10 decades
/// below the top: round-off tails of spectra are left out), a linear one from its lowest value
/// (or 0 when that is near) by 5 %.
fn axis_range(vals: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() || !hi.is_finite() {
        return if log { (0.1, 1.0) } else { (0.0, 1.0) };
    }
    if log {
        let lo = lo.max(hi * 1e-10);
        if hi <= lo {
            return (lo / 2.0, hi * 2.0);
        }
        (lo / 1.15, hi * 1.15)
    } else {
        // a width below 1e-9 of the magnitude cannot carry ticks: widened around the values
        if hi - lo <= 1e-9 * lo.abs().max(hi.abs()) {
            let d = if lo == 0.0 && hi == 0.0 {
                1.0
            } else {
                0.1 * lo.abs().max(hi.abs())
            };
            return (lo - d, hi + d);
        }
        let lo = if lo > 0.0 && lo < 0.3 * hi { 0.0 } else { lo };
        let pad = 0.05 * (hi - lo);
        (if lo == 0.0 { 0.0 } else { lo - pad }, hi + pad)
    }
}

/// The coordinate of one axis: its key points labelled, the others light.
fn axis_coord(lo: f64, hi: f64, log: bool) -> WithKeyPoints<Axis> {
    let (bold, light) = if log {
        log_ticks(lo, hi)
    } else {
        ticks::linear_ticks(lo, hi, 6)
    };
    let inner = if log {
        Axis::Log((lo..hi).log_scale().into())
    } else {
        Axis::Linear(RangedCoordf64::from(lo..hi))
    };
    inner.with_key_points(bold).with_light_points(light)
}

impl Panel<'_> {
    fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
        path: &Path,
    ) -> Result<(), IoError> {
        let (x0, x1) = axis_range(values(&self.curves, 0, self.log_x), self.log_x);
        let (y0, y1) = axis_range(values(&self.curves, 1, self.log_y), self.log_y);
        let mut ch = ChartBuilder::on(area)
            .caption(self.caption, ("sans-serif", 21))
            .margin(14)
            .x_label_area_size(48)
            .y_label_area_size(76)
            .build_cartesian_2d(
                axis_coord(x0, x1, self.log_x),
                axis_coord(y0, y1, self.log_y),
            )
            .map_err(perr(path))?;
        ch.configure_mesh()
            .x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .x_label_formatter(&label)
            .y_label_formatter(&label)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .bold_line_style(BLACK.mix(0.16))
            .light_line_style(BLACK.mix(0.06))
            .draw()
            .map_err(perr(path))?;
        let (ylo, yhi) = (y0, y1);
        let keep = |p: &&(f64, f64)| {
            p.0.is_finite()
                && p.1.is_finite()
                && (!self.log_x || p.0 > 0.0)
                && (!self.log_y || (p.1 >= ylo && p.1 <= yhi))
        };
        for c in &self.curves {
            let pts: Vec<(f64, f64)> = c.points.iter().filter(keep).copied().collect();
            let style = c.color.stroke_width(2);
            let anno = if c.dashed {
                ch.draw_series(DashedLineSeries::new(pts, 9, 5, style))
            } else {
                ch.draw_series(LineSeries::new(pts, style))
            }
            .map_err(perr(path))?;
            let dashed = c.dashed;
            anno.label(c.label.clone()).legend(move |(x, y)| {
                let seg = if dashed {
                    vec![(x, y), (x + 8, y)]
                } else {
                    vec![(x, y), (x + 22, y)]
                };
                PathElement::new(seg, style)
            });
        }
        ch.configure_series_labels()
            .position(self.legend.clone())
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(perr(path))?;
        Ok(())
    }
}

/// A figure of `panels` side by side, `height` pixels high, with a footer line (units).
fn figure(path: &Path, panels: &[Panel], width: u32, footer: &str) -> Result<(), IoError> {
    register_font();
    let root = BitMapBackend::new(path, (width, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(perr(path))?;
    let (body, foot) = root.split_vertically(530);
    let areas = body.split_evenly((1, panels.len()));
    for (p, a) in panels.iter().zip(&areas) {
        p.draw(a, path)?;
    }
    foot.draw_text(
        footer,
        &("sans-serif", 15).into_font().color(&BLACK.mix(0.7)),
        (14, 6),
    )
    .map_err(perr(path))?;
    root.present().map_err(perr(path))?;
    Ok(())
}

/// The footer of the units.
fn units(nu: f64) -> String {
    format!(
        "Nondimensional units: periodic box [-pi, pi)^3 (length 2 pi), viscosity nu = {nu}; \
         E = <|u|^2>/2, Z = <|omega|^2>/2 per unit volume."
    )
}

fn energy_curves(h: &History, color: RGBColor, dashed: bool) -> (Curve, Curve) {
    let e = Curve {
        label: h.label.to_string(),
        points: h.rows.iter().map(|r| (r.0, r.1)).collect(),
        color,
        dashed,
    };
    let d = Curve {
        label: h.label.to_string(),
        points: h.rows.iter().map(|r| (r.0, 2.0 * h.nu * r.2)).collect(),
        color,
        dashed,
    };
    (e, d)
}

/// `energy.png`: the kinetic energy (log axis) and the dissipation `2 nu Z` against time, of
/// `main` and, where a comparison ran, of `other` (dashed) beside it.
pub fn plot_energy(path: &Path, main: &History, other: Option<&History>) -> Result<(), IoError> {
    let (mut e, mut d) = (vec![], vec![]);
    let (a, b) = energy_curves(main, MAIN, false);
    e.push(a);
    d.push(b);
    if let Some(o) = other {
        let (a, b) = energy_curves(o, OTHER, true);
        e.push(a);
        d.push(b);
    }
    let panels = [
        Panel {
            caption: "Kinetic energy",
            x_desc: "time t",
            y_desc: "energy E(t)",
            log_x: false,
            log_y: true,
            curves: e,
            legend: SeriesLabelPosition::UpperRight,
        },
        Panel {
            caption: "Dissipation rate",
            x_desc: "time t",
            y_desc: "epsilon = 2 nu Z",
            log_x: false,
            log_y: false,
            curves: d,
            legend: SeriesLabelPosition::UpperRight,
        },
    ];
    figure(path, &panels, 1300, &units(main.nu))
}

/// At most `max` of `n` indices, evenly spread, first and last included.
fn spread(n: usize, max: usize) -> Vec<usize> {
    if n <= max {
        return (0..n).collect();
    }
    let mut v: Vec<usize> = (0..max)
        .map(|i| (i as f64 * (n - 1) as f64 / (max - 1) as f64).round() as usize)
        .collect();
    v.dedup();
    v
}

/// The spectrum of `s` at time `t` (to 1e-6 relative), if it has one.
fn at_time<'a>(s: &'a Spectra, t: f64) -> Option<&'a [(f64, f64)]> {
    s.spectra
        .iter()
        .find(|(u, _)| (u - t).abs() <= 1e-6 * t.abs().max(1.0))
        .map(|(_, v)| v.as_slice())
}

/// The curves of the spectra at up to `max` times of `main` (each with `other`'s at the same
/// time, dashed, where it has one), coloured by time.
fn spectrum_curves(main: &Spectra, other: Option<&Spectra>, max: usize) -> Vec<Curve> {
    let times: Vec<f64> = match other {
        // the times both have
        Some(o) => main
            .spectra
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| at_time(o, *t).is_some())
            .collect(),
        None => main.spectra.iter().map(|(t, _)| *t).collect(),
    };
    let pick = spread(times.len(), max);
    let nonzero = |s: &[(f64, f64)]| -> Vec<(f64, f64)> {
        s.iter()
            .filter(|p| p.0 >= 1.0 && p.1 > 1e-30)
            .copied()
            .collect()
    };
    let mut out = vec![];
    for (j, &i) in pick.iter().enumerate() {
        let t = times[i];
        let color = spectrum_color(j, pick.len());
        let main_s = at_time(main, t).unwrap_or(&[]);
        out.push(Curve {
            label: format!("{}, t = {}", main.label, label(&t)),
            points: nonzero(main_s),
            color,
            dashed: false,
        });
        if let Some(o) = other.and_then(|o| at_time(o, t).map(|s| (o.label, s))) {
            out.push(Curve {
                label: format!("{}, t = {}", o.0, label(&t)),
                points: nonzero(o.1),
                color,
                dashed: true,
            });
        }
    }
    out
}

/// `spectra.png`: energy spectra on log-log axes at up to six times of `main`, with `other`'s
/// at the same times (dashed) where a comparison ran. `nu` for the footer.
pub fn plot_spectra(
    path: &Path,
    main: &Spectra,
    other: Option<&Spectra>,
    nu: f64,
) -> Result<(), IoError> {
    let panel = Panel {
        caption: "Energy spectra",
        x_desc: "wavenumber k",
        y_desc: "E(k)",
        log_x: true,
        log_y: true,
        curves: spectrum_curves(main, other, 6),
        legend: SeriesLabelPosition::LowerLeft,
    };
    figure(path, &[panel], 900, &units(nu))
}

/// The comparison of two solvers from the same initial field (`vortex compare`):
/// energy and enstrophy against time, and E(k) at up to three common times. `title` names
/// the case.
pub fn plot_comparison(
    path: &Path,
    title: &str,
    runs: [(&History, &Spectra); 2],
) -> Result<(), IoError> {
    let [(ha, sa), (hb, sb)] = runs;
    // one quantity of both histories against time (c: 1 energy, 2 enstrophy)
    let history = |caption, y_desc, c: usize| {
        let line = |h: &History, color, dashed| Curve {
            label: h.label.to_string(),
            points: h
                .rows
                .iter()
                .map(|r| (r.0, if c == 1 { r.1 } else { r.2 }))
                .collect(),
            color,
            dashed,
        };
        Panel {
            caption,
            x_desc: "time t",
            y_desc,
            log_x: false,
            log_y: false,
            curves: vec![line(ha, MAIN, false), line(hb, OTHER, true)],
            legend: SeriesLabelPosition::UpperRight,
        }
    };
    let panels = [
        history("Kinetic energy", "energy E(t)", 1),
        history("Enstrophy", "enstrophy Z(t)", 2),
        Panel {
            caption: "Energy spectra",
            x_desc: "wavenumber k",
            y_desc: "E(k)",
            log_x: true,
            log_y: true,
            curves: spectrum_curves(sa, Some(sb), 3),
            legend: SeriesLabelPosition::LowerLeft,
        },
    ];
    let footer = format!("{title}. {}", units(ha.nu));
    figure(path, &panels, 1800, &footer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_keeps_first_and_last() {
        assert_eq!(spread(3, 6), vec![0, 1, 2]);
        assert_eq!(spread(11, 3), vec![0, 5, 10]);
        let s = spread(40, 6);
        assert_eq!((s.len(), s[0], s[5]), (6, 0, 39));
    }

    #[test]
    fn figures_are_written_with_and_without_the_other_solver() {
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<(f64, f64, f64)> = (0..40)
            .map(|i| {
                let t = 0.05 * i as f64;
                (t, 0.125 * (-0.3 * t).exp(), 0.375 * (1.0 + t))
            })
            .collect();
        let other: Vec<(f64, f64, f64)> =
            rows.iter().map(|r| (r.0, r.1 * 1.02, r.2 * 1.1)).collect();
        let spec = |a: f64| -> Vec<(f64, Vec<(f64, f64)>)> {
            (0..4)
                .map(|i| {
                    let t = 0.5 * i as f64;
                    let s = (0..16)
                        .map(|k| {
                            (
                                k as f64,
                                a * (k as f64).powi(4) * (-(k as f64) / 2.0 - t).exp(),
                            )
                        })
                        .collect();
                    (t, s)
                })
                .collect()
        };
        let (sa, sb) = (spec(1.0), spec(1.1));
        let h = History {
            label: "vortex method",
            rows: &rows,
            nu: 0.01,
        };
        let g = History {
            label: "spectral",
            rows: &other,
            nu: 0.01,
        };
        let s = Spectra {
            label: "vortex method",
            spectra: &sa,
        };
        let r = Spectra {
            label: "spectral",
            spectra: &sb,
        };
        for (name, f) in [
            ("e1.png", plot_energy(&dir.path().join("e1.png"), &h, None)),
            (
                "e2.png",
                plot_energy(&dir.path().join("e2.png"), &h, Some(&g)),
            ),
            (
                "s1.png",
                plot_spectra(&dir.path().join("s1.png"), &s, None, 0.01),
            ),
            (
                "s2.png",
                plot_spectra(&dir.path().join("s2.png"), &s, Some(&r), 0.01),
            ),
            (
                "c.png",
                plot_comparison(&dir.path().join("c.png"), "test", [(&h, &s), (&g, &r)]),
            ),
        ] {
            f.unwrap();
            let bytes = std::fs::read(dir.path().join(name)).unwrap();
            assert_eq!(&bytes[1..4], b"PNG", "{name}");
        }
    }
}
