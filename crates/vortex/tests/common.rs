#![allow(dead_code)]
use method::Particles;
use std::f64::consts::PI;

/// A coarse ring of `m` blobs (one per cross-section), circulation `gamma`, core `sigma`.
pub fn coarse_ring(m: usize, radius: f64, z: f64, gamma: f64, sigma: f64) -> Particles {
    let mut p = Particles::default();
    let ds = 2.0 * PI * radius / m as f64;
    for i in 0..m {
        let phi = 2.0 * PI * (i as f64 + 0.5) / m as f64;
        let (s, c) = phi.sin_cos();
        p.push(
            [radius * c, radius * s, z],
            [-gamma * ds * s, gamma * ds * c, 0.0],
            sigma,
        );
    }
    p
}

pub fn max_abs_diff(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| (0..3).map(move |c| (x[c] - y[c]).abs()))
        .fold(0.0, f64::max)
}
