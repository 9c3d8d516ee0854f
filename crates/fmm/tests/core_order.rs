//! The smoothing error of each core measured as `sigma` shrinks: its order is the core's (2, 4,
//! 6; Beale & Majda, J. Comput. Phys. 58 (1985) 188).
//!
//! The field is the ABC flow `u = (sin z + cos y, sin x + cos z, sin y + cos x)` in the periodic
//! box of length `2 pi`, a Beltrami field (`omega = u`) of the single shell `|k| = 1`. Blobs of
//! strength `omega(x_j) h^3` on a lattice fine against `sigma` (the quadrature's aliasing,
//! the core's transform at `|k| = 2 pi / h`, below 1e-8) induce the velocity `T(sigma) u`,
//! `T` the core's transform, so the relative velocity error is the smoothing error `1 - T ~
//! (sigma^2 / 2)^m / m!`. The periodic direct sum in f64 (the reference of every fast method)
//! evaluates it at random targets; the order is the slope of the error against `sigma`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::f64::consts::PI;
use vortex_fmm::evaluators::direct::direct_periodic_core;
use vortex_fmm::kernel::CoreOrder;
use vortex_fmm::periodic::Periodic;
use vortex_fmm::{Sources, Targets};

fn abc(x: [f64; 3]) -> [f64; 3] {
    [
        x[2].sin() + x[1].cos(),
        x[0].sin() + x[2].cos(),
        x[1].sin() + x[0].cos(),
    ]
}

/// The velocity of the blobs of `core` with radius `sigma` (strengths `omega(x_j) h^3` on the
/// `n^3` lattice) at `targets`, by the periodic direct sum.
fn blob_velocity(core: CoreOrder, sigma: f64, n: usize, targets: &Targets) -> Vec<[f64; 3]> {
    let l = 2.0 * PI;
    let h = l / n as f64;
    let mut s = Sources::default();
    for i in 0..n {
        for j in 0..n {
            for k in 0..n {
                let x = [i, j, k].map(|c| -PI + c as f64 * h);
                let w = abc(x);
                s.position.push(x);
                s.strength.push(w.map(|c| c * h * h * h));
                s.sigma.push(sigma);
            }
        }
    }
    let per = Periodic {
        box_length: l,
        image_levels: 2,
    };
    direct_periodic_core(core, &s, targets, &per).velocity
}

/// `|a - b| / |ABC|` over the targets.
fn relative_difference(a: &[[f64; 3]], b: &[[f64; 3]], targets: &Targets) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for ((u, v), y) in a.iter().zip(b).zip(&targets.position) {
        let want = abc(*y);
        for c in 0..3 {
            num += (u[c] - v[c]).powi(2);
            den += want[c] * want[c];
        }
    }
    (num / den).sqrt()
}

/// The smoothing error `(T(sigma) - 1) u` is measured through the differences of the blob
/// velocities at successive `sigma` (`(T(sigma_2) - T(sigma_1)) u`): the reference's own error
/// (its far images come from a multipole of the box at order 16, about 2e-4 of the velocity
/// here) is the same for every core and `sigma` (the far field is singular) and cancels. With
/// `sigma` in the ratio 1.4 and an error `c sigma^p`, successive differences fall by `1.4^p`.
#[test]
fn the_smoothing_error_has_the_order_of_the_core() {
    let seed: u64 = rand::random();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let targets = Targets::points(
        (0..24)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-PI..PI)))
            .collect(),
    );
    // 28^3 blobs: the aliasing of the smallest core (T at |k| = 28, 3e-9) far below the
    // sixth-order core's difference there (3.6e-5)
    let n = 28;
    let ratio = 1.4;
    let sigmas = [0.5, 0.5 / ratio, 0.5 / (ratio * ratio)];
    for core in CoreOrder::ALL {
        let u: Vec<Vec<[f64; 3]>> = sigmas
            .iter()
            .map(|&s| blob_velocity(core, s, n, &targets))
            .collect();
        let t = |s: f64| core.transform(0.5 * s * s);
        let mut d = Vec::new();
        for i in 0..2 {
            let got = relative_difference(&u[i], &u[i + 1], &targets);
            // the transform's prediction at |k| = 1
            let want = t(sigmas[i + 1]) - t(sigmas[i]);
            assert!(
                (got - want).abs() < 0.01 * want,
                "{core:?} sigma {} -> {} (seed {seed}): {got:.4e}, T difference {want:.4e}",
                sigmas[i],
                sigmas[i + 1]
            );
            d.push(got);
        }
        let order = (d[0] / d[1]).ln() / ratio.ln();
        let want = core.order() as f64;
        assert!(
            (order - want).abs() < 0.25,
            "{core:?} (seed {seed}): measured order {order:.2} (differences {:.3e}, {:.3e})",
            d[0],
            d[1]
        );
        eprintln!(
            "{core:?}: smoothing-error differences {:.3e}, {:.3e} at sigma {sigmas:.3?}, order {order:.2}",
            d[0], d[1]
        );
    }
}
