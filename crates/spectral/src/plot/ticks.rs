//! Tick positions and labels that a reader can read values off.
//!
//! * A log axis over three or more decades: a labelled tick at every decade (every second,
//!   third ... when there are more than ten), light lines at the mantissas 2..9.
//! * A narrower log axis: labelled ticks at 1, 2 and 5 times the decades, or at every mantissa
//!   1..9 when those give fewer than three; the others (and the halves) light.
//! * Less than a factor of about 1.5, and every linear axis: evenly spaced ticks of a step
//!   1, 2, 2.5 or 5 times a power of ten, with four light lines between two of them.
//!
//! Labels ([`label`]) carry up to three significant digits: `0.065`, `20`, `1e-6`, `2.5e-5`.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::LogCoord;
use std::ops::Range;

/// A linear or a log coordinate of `f64` (one chart type for both kinds of axis).
pub enum Axis {
    Linear(RangedCoordf64),
    Log(LogCoord<f64>),
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        match self {
            Axis::Linear(a) => a.map(value, limit),
            Axis::Log(a) => a.map(value, limit),
        }
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match self {
            Axis::Linear(a) => a.key_points(hint),
            Axis::Log(a) => a.key_points(hint),
        }
    }

    fn range(&self) -> Range<f64> {
        match self {
            Axis::Linear(a) => a.range(),
            Axis::Log(a) => a.range(),
        }
    }
}

/// Whether `v` lies in `[lo, hi]` up to a relative 1e-9.
fn inside(v: f64, lo: f64, hi: f64) -> bool {
    v >= lo - 1e-9 * lo.abs() && v <= hi + 1e-9 * hi.abs()
}

/// `m 10^k` for the mantissas `m` and every decade `k` that reaches `[lo, hi]`, in order.
fn at_mantissas(lo: f64, hi: f64, mantissas: &[f64]) -> Vec<f64> {
    let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    (k0..=k1)
        .flat_map(|k| mantissas.iter().map(move |&m| m * 10f64.powi(k)))
        .filter(|&v| inside(v, lo, hi))
        .collect()
}

/// Labelled and light tick positions of a log axis over `[lo, hi]` (`0 < lo < hi`).
pub fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let minor: Vec<f64> = (2..=9).map(f64::from).collect();
    let decades = at_mantissas(lo, hi, &[1.0]);
    if decades.len() >= 3 {
        let step = decades.len().div_ceil(10);
        let bold: Vec<f64> = decades.iter().copied().step_by(step).collect();
        let mut light = at_mantissas(lo, hi, &minor);
        light.extend(decades.iter().filter(|d| !bold.contains(d)));
        return (bold, light);
    }
    let all: Vec<f64> = (1..=9).map(f64::from).collect();
    for m in [&[1.0, 2.0, 5.0][..], &all] {
        let bold = at_mantissas(lo, hi, m);
        if bold.len() >= 3 {
            let halves: Vec<f64> = (2..=19).map(|h| 0.5 * h as f64).collect();
            let light = at_mantissas(lo, hi, &halves)
                .into_iter()
                .filter(|v| !bold.iter().any(|b| (b - v).abs() <= 1e-9 * v))
                .collect();
            return (bold, light);
        }
    }
    linear_ticks(lo, hi, 5)
}

/// Labelled and light tick positions of a linear axis over `[lo, hi]`: about `n` labelled
/// ticks of a step 1, 2, 2.5 or 5 times a power of ten, four light lines between two.
pub fn linear_ticks(lo: f64, hi: f64, n: usize) -> (Vec<f64>, Vec<f64>) {
    if hi <= lo || !lo.is_finite() || !hi.is_finite() {
        return (vec![lo], vec![]);
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * p);
    let grid = |s: f64| -> Vec<f64> {
        let (i0, i1) = ((lo / s).ceil() as i64, (hi / s).floor() as i64);
        // values at integer multiples (exact zero, no 0.30000000000000004)
        (i0..=i1)
            .map(|i| i as f64 * s)
            .filter(|&v| inside(v, lo, hi))
            .collect()
    };
    let bold = grid(step);
    let light = grid(step / 5.0)
        .into_iter()
        .filter(|v| !bold.iter().any(|b| (b - v).abs() <= 1e-6 * step))
        .collect();
    (bold, light)
}

/// A tick label with up to three significant digits: plain between 0.001 and 10^5 (`0.065`,
/// `0.5`, `20`, `12500`), otherwise in scientific form (`1e-6`, `2.5e-5`, `3e5`).
pub fn label(v: &f64) -> String {
    let a = v.abs();
    if *v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let trim = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if (1e-3..1e5).contains(&a) {
        let decimals = (2 - a.log10().floor() as i32).max(0) as usize;
        trim(format!("{v:.decimals$}"))
    } else {
        let s = format!("{v:.2e}");
        let (m, e) = s.split_once('e').expect("scientific form");
        format!("{}e{e}", trim(m.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_short_and_exact_to_three_digits() {
        let cases = [
            (1e-6, "1e-6"),
            (1.0000000000000002e-6, "1e-6"),
            (5e-4, "5e-4"),
            (2.5e-5, "2.5e-5"),
            (0.065, "0.065"),
            (0.5, "0.5"),
            (0.25, "0.25"),
            (1.0, "1"),
            (20.0, "20"),
            (12500.0, "12500"),
            (3e5, "3e5"),
            (-0.3, "-0.3"),
            (0.30000000000000004, "0.3"),
        ];
        for (v, want) in cases {
            assert_eq!(label(&v), want, "{v:e}");
        }
    }

    #[test]
    fn wide_log_axes_are_labelled_per_decade() {
        let (bold, light) = log_ticks(3e-9, 0.2);
        let want: Vec<f64> = (-8..=-1).map(|k| 10f64.powi(k)).collect();
        assert_eq!(bold.len(), want.len());
        for (b, w) in bold.iter().zip(&want) {
            assert!((b / w - 1.0).abs() < 1e-12, "{bold:?}");
        }
        assert!(light.iter().any(|v| (v / 2e-5 - 1.0).abs() < 1e-12));
        // twenty decades: every third decade labelled, the rest light
        let (bold, light) = log_ticks(1e-20, 1.0);
        assert!(bold.len() <= 10 && bold.len() >= 5, "{bold:?}");
        assert!(light.iter().any(|v| (v / 1e-19 - 1.0).abs() < 1e-12));
    }

    #[test]
    fn narrow_log_axes_get_three_or_more_labels() {
        // the energy of a decaying run: 0.125 down to 0.06 (the single `0.1` label)
        for (lo, hi) in [
            (0.06, 0.13),
            (0.3, 2.0),
            (0.08, 0.125),
            (0.1, 0.11),
            (5.0, 40.0),
        ] {
            let (bold, light) = log_ticks(lo, hi);
            assert!(bold.len() >= 3, "[{lo}, {hi}]: {bold:?}");
            assert!(bold.iter().all(|v| inside(*v, lo, hi)), "{bold:?}");
            assert!(light.iter().all(|v| inside(*v, lo, hi)), "{light:?}");
            let labels: Vec<String> = bold.iter().map(label).collect();
            assert!(labels.iter().all(|l| l.len() <= 6), "{labels:?}");
        }
        let (bold, _) = log_ticks(0.06, 0.13);
        let got: Vec<String> = bold.iter().map(label).collect();
        assert_eq!(got, ["0.06", "0.07", "0.08", "0.09", "0.1"]);
    }

    #[test]
    fn linear_ticks_are_round_numbers() {
        let (bold, light) = linear_ticks(0.0, 2.1, 6);
        let got: Vec<String> = bold.iter().map(label).collect();
        assert_eq!(got, ["0", "0.5", "1", "1.5", "2"]);
        assert_eq!(light.len(), 4 * 4 + 1);
        let (bold, _) = linear_ticks(0.0712, 0.1288, 6);
        let got: Vec<String> = bold.iter().map(label).collect();
        assert_eq!(got, ["0.08", "0.09", "0.1", "0.11", "0.12"]);
    }
}
