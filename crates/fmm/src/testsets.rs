//! Reproducible particle sets for tests and benchmarks.
//!
//! * [`standard`]: the standard set of `docs/CONVENTIONS.md` (core paper Section 4.2): `N` points
//!   uniform in `[-pi, pi]^3`, strength components uniform in `[0, 1/N)`,
//!   `sigma = 2 pi / N^(1/3)`; `zero_mean` subtracts the mean strength (periodic tests).
//! * [`vortex_ring`]: a strongly clustered set, points in the Gaussian core of a thin ring.
//! * [`clumps`]: a few tight Gaussian clumps of very different sizes.

use crate::Sources;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::f64::consts::PI;

/// Which distribution to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    Uniform,
    Ring,
    Clumps,
}

impl std::str::FromStr for Distribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(Self::Uniform),
            "ring" => Ok(Self::Ring),
            "clumps" => Ok(Self::Clumps),
            _ => Err(format!(
                "unknown distribution '{s}' (expected uniform, ring or clumps)"
            )),
        }
    }
}

/// Draws `n` elements of the given distribution.
pub fn generate(dist: Distribution, n: usize, seed: u64, zero_mean: bool) -> Sources {
    let mut s = match dist {
        Distribution::Uniform => standard(n, seed),
        Distribution::Ring => vortex_ring(n, seed),
        Distribution::Clumps => clumps(n, seed),
    };
    if zero_mean {
        subtract_mean_strength(&mut s);
    }
    s
}

/// The standard test set (see the module doc).
pub fn standard(n: usize, seed: u64) -> Sources {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sigma = 2.0 * PI / (n.max(1) as f64).cbrt();
    let mut s = Sources::default();
    for _ in 0..n {
        s.position
            .push(std::array::from_fn(|_| rng.gen_range(-PI..PI)));
        s.strength
            .push(std::array::from_fn(|_| rng.gen::<f64>() / n as f64));
        s.sigma.push(sigma);
    }
    s
}

/// `n` elements in the core of a vortex ring of radius 1 and core radius 0.05 in the xy-plane,
/// strength along the azimuth (a realistic, strongly clustered set).
pub fn vortex_ring(n: usize, seed: u64) -> Sources {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (big_r, core) = (1.0, 0.05);
    // spacing of n points spread over the core volume 2 pi R * pi core^2
    let h = (2.0 * PI * big_r * PI * core * core / n.max(1) as f64).cbrt();
    let mut s = Sources::default();
    for _ in 0..n {
        let phi = rng.gen_range(0.0..2.0 * PI);
        let (a, b) = (gaussian(&mut rng) * core, gaussian(&mut rng) * core);
        let rr = big_r + a;
        s.position.push([rr * phi.cos(), rr * phi.sin(), b]);
        let w = rng.gen_range(0.5..1.0) / n as f64;
        s.strength.push([-w * phi.sin(), w * phi.cos(), 0.0]);
        s.sigma.push(h);
    }
    s
}

/// `n` elements in five Gaussian clumps whose widths span two decades.
pub fn clumps(n: usize, seed: u64) -> Sources {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centers: Vec<[f64; 3]> = (0..5)
        .map(|_| std::array::from_fn(|_| rng.gen_range(-2.0..2.0)))
        .collect();
    let widths = [0.5, 0.2, 0.05, 0.02, 0.005];
    let mut s = Sources::default();
    for i in 0..n {
        let k = i % 5;
        let w = widths[k];
        s.position.push(std::array::from_fn(|c| {
            centers[k][c] + w * gaussian(&mut rng)
        }));
        s.strength
            .push(std::array::from_fn(|_| rng.gen_range(-1.0..1.0) / n as f64));
        // core radius of the order of the local spacing within the clump
        s.sigma.push(2.0 * w * (5.0 / n.max(1) as f64).cbrt());
    }
    s
}

/// Removes the mean strength so that the total circulation is zero.
pub fn subtract_mean_strength(s: &mut Sources) {
    let n = s.len().max(1) as f64;
    let mean: [f64; 3] = std::array::from_fn(|c| s.strength.iter().map(|a| a[c]).sum::<f64>() / n);
    for a in &mut s.strength {
        for c in 0..3 {
            a[c] -= mean[c];
        }
    }
}

fn gaussian(rng: &mut ChaCha8Rng) -> f64 {
    // Box-Muller
    let u1: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()
}

/// `4 quads` particles for periodic tests: quadruples `(x, a), (-x, a), (x + e, -a),
/// (-x - e, -a)` with `x` uniform in `[-half, half)^3`, `e` in `[-0.3, 0.3)^3`, `a` in
/// `[-1, 1)^3` and core radius `sigma`. The total strength and every first moment
/// `sum a_c x_l` vanish, so the plain image sum converges absolutely (no surface term).
pub fn moment_free(quads: usize, seed: u64, half: f64, sigma: f64) -> Sources {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut s = Sources::default();
    for _ in 0..quads {
        let x: [f64; 3] = std::array::from_fn(|_| rng.gen_range(-half..half));
        let e: [f64; 3] = std::array::from_fn(|_| rng.gen_range(-0.3..0.3));
        let a: [f64; 3] = std::array::from_fn(|_| rng.gen_range(-1.0..1.0));
        for (p, sign) in [
            (x, 1.0),
            (x.map(|c| -c), 1.0),
            (std::array::from_fn(|c| x[c] + e[c]), -1.0),
            (std::array::from_fn(|c| -x[c] - e[c]), -1.0),
        ] {
            s.position.push(p);
            s.strength.push(a.map(|c| sign * c));
            s.sigma.push(sigma);
        }
    }
    s
}
