//! How evenly a particle set fills its bounding cube, the measure by which the planner keeps
//! clustered sets off the uniform grid ([`crate::planner::Layout`]).
//!
//! A uniform grid's near field (P2P) costs `sum_c n_c^2` pair evaluations over its cells `c`
//! (`n_c` particles in cell `c`); on an even set of `N` particles in `C` cells that is about
//! `N^2 / C`. The *crowding* of a set is the ratio of the two on a coarse grid of `C = m^3`
//! cells over the set's bounding cube, `m = (N / 64)^(1/3)` clamped to `1..=32` (about 64
//! particles a cell, the uniform grid's own leaf size):
//!
//! ```text
//! crowding = C sum_c n_c^2 / N^2
//! ```
//!
//! 1 for a perfectly even set, `1 + C / N` in expectation for uniform random positions (the
//! Poisson variance: about 1.02), and the factor by which the uniform grid's near field would
//! exceed its even-set cost on a clustered one (1e5 elements of `vortex particles`: a vortex
//! ring 16, the clumps 118).
//! The counts are per cell, so ranks add their histograms and agree on the value.

use rayon::prelude::*;

/// Largest crowding the uniform grid accepts: its near field may do at most this many times the
/// pair work of an even set of the same size.
pub const MAX_CROWDING: f64 = 4.0;

/// Cells per side of the coarse grid over `n` particles: about 64 particles a cell, at least
/// 1 and at most 32 per side.
pub fn cells_per_side(n: usize) -> usize {
    ((n as f64 / 64.0).cbrt().floor() as usize).clamp(1, 32)
}

/// The cube `(lower corner, side)` around the component-wise bounds `lo`, `hi` (the side
/// enlarged by a relative 1e-9 so that the upper bound falls inside; never zero).
pub fn cube(lo: [f64; 3], hi: [f64; 3]) -> ([f64; 3], f64) {
    let width = (0..3).map(|c| hi[c] - lo[c]).fold(0.0, f64::max);
    let side = if width > 0.0 {
        width * (1.0 + 1e-9)
    } else {
        1.0
    };
    (lo, side)
}

/// Component-wise bounds of `position` (infinite when empty).
pub fn bounds(position: &[[f64; 3]]) -> ([f64; 3], [f64; 3]) {
    let id = || ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]);
    position
        .par_iter()
        .fold(id, |(mut lo, mut hi), x| {
            for c in 0..3 {
                lo[c] = lo[c].min(x[c]);
                hi[c] = hi[c].max(x[c]);
            }
            (lo, hi)
        })
        .reduce(id, |a, b| {
            (
                std::array::from_fn(|c| a.0[c].min(b.0[c])),
                std::array::from_fn(|c| a.1[c].max(b.1[c])),
            )
        })
}

/// Particles per cell of the `m^3` grid over the cube `(lo, side)` (x fastest; a point on the
/// upper face counts in the last cell), as `f64` so that ranks can add them.
pub fn histogram(position: &[[f64; 3]], lo: [f64; 3], side: f64, m: usize) -> Vec<f64> {
    let cell = |x: &[f64; 3]| -> usize {
        let i = |c: usize| (((x[c] - lo[c]) / side * m as f64) as usize).min(m - 1);
        i(0) + m * (i(1) + m * i(2))
    };
    position
        .par_chunks(1 << 14)
        .fold(
            || vec![0.0; m * m * m],
            |mut h, chunk| {
                for x in chunk {
                    h[cell(x)] += 1.0;
                }
                h
            },
        )
        .reduce(
            || vec![0.0; m * m * m],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        )
}

/// The crowding `C sum_c n_c^2 / N^2` of a histogram of `C` cells (1 when empty).
pub fn crowding(histogram: &[f64]) -> f64 {
    let n: f64 = histogram.iter().sum();
    if n == 0.0 {
        return 1.0;
    }
    let squares: f64 = histogram.iter().map(|c| c * c).sum();
    histogram.len() as f64 * squares / (n * n)
}

/// The crowding of the positions of one process (all of a set's particles).
pub fn crowding_of(position: &[[f64; 3]]) -> f64 {
    let (lo, hi) = bounds(position);
    if position.is_empty() {
        return 1.0;
    }
    let (lo, side) = cube(lo, hi);
    crowding(&histogram(
        position,
        lo,
        side,
        cells_per_side(position.len()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testsets::{generate, Distribution};

    #[test]
    fn an_even_lattice_has_crowding_one() {
        let m = 16;
        let h = 2.0 * std::f64::consts::PI / m as f64;
        let x: Vec<[f64; 3]> = (0..m * m * m)
            .map(|i| {
                let (a, b, c) = (i % m, (i / m) % m, i / (m * m));
                [a as f64 * h, b as f64 * h, c as f64 * h]
            })
            .collect();
        // 4096 points, 4^3 cells of 64 each
        assert_eq!(cells_per_side(x.len()), 4);
        assert!((crowding_of(&x) - 1.0).abs() < 1e-12, "{}", crowding_of(&x));
    }

    #[test]
    fn random_sets_are_even_and_rings_and_clumps_are_crowded() {
        for seed in [1, 2, 3] {
            let even = generate(Distribution::Uniform, 20_000, seed, false);
            let c = crowding_of(&even.position);
            // the Poisson expectation 1 + C / N = 1 + 343 / 20000, within its spread
            assert!((c - 1.017).abs() < 0.05, "uniform, seed {seed}: {c}");
            for dist in [Distribution::Ring, Distribution::Clumps] {
                let s = generate(dist, 20_000, seed, false);
                let c = crowding_of(&s.position);
                assert!(c > 2.0 * MAX_CROWDING, "{dist:?}, seed {seed}: {c}");
            }
        }
    }

    #[test]
    fn the_histogram_counts_every_point_once_and_two_halves_add_up() {
        let s = generate(Distribution::Clumps, 5000, 7, false);
        let (lo, hi) = bounds(&s.position);
        let (lo, side) = cube(lo, hi);
        let m = cells_per_side(s.len());
        let whole = histogram(&s.position, lo, side, m);
        assert_eq!(whole.iter().sum::<f64>(), 5000.0);
        let (a, b) = s.position.split_at(1234);
        let mut parts = histogram(a, lo, side, m);
        parts
            .iter_mut()
            .zip(histogram(b, lo, side, m))
            .for_each(|(x, y)| *x += y);
        assert_eq!(parts, whole);
        // a point on the upper faces falls in the last cell
        let h = histogram(&[[lo[0] + side, lo[1] + side, lo[2] + side]], lo, side, m);
        assert_eq!(h[m * m * m - 1], 1.0);
    }
}
