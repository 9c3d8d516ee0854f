//! The smoothing error of each core measured as `sigma` shrinks: its order is the core's (2, 4,
//! 6; Beale & Majda, J. Comput. Phys. 58 (1985) 188).
//!
//! The field is the ABC flow `u = (sin z + cos y, sin x + cos z, sin y + cos x)` in the periodic
//! box of length `2 pi`, a Beltrami field (`omega = u`) of the single shell `|k| = 1`. Blobs of
//! strength `omega(x_j) h^3` on a lattice fine against `sigma` (the quadrature's aliasing,
//! the core's transform at `|k| = 2 pi / h`, below 1e-9) induce the velocity `T(sigma) u`,
//! `T` the core's transform, so the relative velocity error is the smoothing error `1 - T ~
//! (sigma^2 / 2)^m / m!`. The periodic direct sum in f64 (the reference of every fast method)
//! evaluates it at random targets; the order is the slope of `log error` against `log sigma`.

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

/// Relative L2 velocity error of the blobs of `core` with radius `sigma` at `targets`.
fn smoothing_error(core: CoreOrder, sigma: f64, n: usize, targets: &Targets) -> f64 {
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
    let f = direct_periodic_core(core, &s, targets, &per);
    let (mut num, mut den) = (0.0, 0.0);
    for (u, y) in f.velocity.iter().zip(&targets.position) {
        let want = abc(*y);
        for c in 0..3 {
            num += (u[c] - want[c]).powi(2);
            den += want[c] * want[c];
        }
    }
    (num / den).sqrt()
}

#[test]
fn the_smoothing_error_has_the_order_of_the_core() {
    let seed: u64 = rand::random();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let targets = Targets::points(
        (0..16)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-PI..PI)))
            .collect(),
    );
    let n = 20;
    let sigmas = [0.7, 0.5, 0.35];
    for core in CoreOrder::ALL {
        let e: Vec<f64> = sigmas
            .iter()
            .map(|&s| smoothing_error(core, s, n, &targets))
            .collect();
        // the transform's prediction, 1 - T(sigma^2 / 2) at |k| = 1
        for (&s, &ei) in sigmas.iter().zip(&e) {
            let want = 1.0 - core.transform(0.5 * s * s);
            assert!(
                (ei - want).abs() < 0.02 * want,
                "{core:?} sigma {s} (seed {seed}): error {ei:.3e}, 1 - T = {want:.3e}"
            );
        }
        let order = (e[1] / e[2]).ln() / (sigmas[1] / sigmas[2]).ln();
        let want = core.order() as f64;
        assert!(
            (order - want).abs() < 0.25,
            "{core:?} (seed {seed}): measured order {order:.2} (errors {e:.2e?})"
        );
        eprintln!("{core:?}: errors {e:.3e?}, order {order:.2}");
    }
}
