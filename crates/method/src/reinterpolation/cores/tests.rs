use super::*;
use crate::reinterpolation::{solve, RbfSettings, RbfSolver};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn rel(a: &[f64], b: &[f64]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    let n: f64 = b.iter().map(|y| y * y).sum();
    (d / n).sqrt()
}

fn lattice(dims: [usize; 3], h: f64, periodic: bool) -> Lattice {
    Lattice {
        origin: [-0.4, 0.1, -0.2],
        h,
        dims,
        periodic,
    }
}

/// The terms reproduce `P_m(sx + sy + sz)` at random points.
#[test]
fn the_terms_sum_to_the_core_polynomial() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for core in CoreOrder::ALL {
        assert_eq!(
            terms(core).len(),
            core.m() * (core.m() + 1) * (core.m() + 2) / 6
        );
        for _ in 0..20 {
            let s: [f64; 3] = std::array::from_fn(|_| rng.gen_range(0.0..9.0));
            let sum: f64 = terms(core)
                .iter()
                .map(|t| {
                    t.coefficient
                        * (0..3)
                            .map(|c| s[c].powi(t.powers[c] as i32))
                            .product::<f64>()
                })
                .sum();
            let want = core.poly(s[0] + s[1] + s[2]);
            assert!((sum - want).abs() < 1e-12 * (1.0 + want.abs()), "{core:?}");
        }
    }
}

/// `apply_core` against the pairwise sum of `zeta` over the points within the cube of
/// `cutoff` core radii (with the periodic images), free space and periodic.
#[test]
fn the_lattice_operator_is_the_pairwise_sum_of_the_core() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for core in [CoreOrder::Fourth, CoreOrder::Sixth] {
        for periodic in [false, true] {
            let lat = lattice([6, 5, 7], 0.25, periodic);
            let x: Vec<f64> = (0..lat.len()).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let (sigma, cut) = (0.3, 4.0);
            let y = apply_core(&lat, core, sigma, cut, &x);
            let pts = lat.points();
            let lim = (cut * sigma / lat.h).floor() * lat.h + 1e-12;
            for i in (0..lat.len()).step_by(5) {
                let mut s = 0.0;
                for j in 0..lat.len() {
                    let shifts = |c: usize| -> Vec<f64> {
                        let l = lat.dims[c] as f64 * lat.h;
                        if periodic {
                            (-3..=3).map(|k| k as f64 * l).collect()
                        } else {
                            vec![0.0]
                        }
                    };
                    for sx in shifts(0) {
                        for sy in shifts(1) {
                            for sz in shifts(2) {
                                let d = [
                                    pts[i][0] - pts[j][0] - sx,
                                    pts[i][1] - pts[j][1] - sy,
                                    pts[i][2] - pts[j][2] - sz,
                                ];
                                if d.iter().all(|v| v.abs() <= lim) {
                                    let r2 = d.iter().map(|v| v * v).sum::<f64>();
                                    s += x[j] * core.zeta(r2 / (sigma * sigma)) / sigma.powi(3);
                                }
                            }
                        }
                    }
                }
                assert!(
                    (s - y[i]).abs() < 1e-10 * (1.0 + s.abs()),
                    "{core:?} periodic {periodic}: {s} vs {}",
                    y[i]
                );
            }
        }
    }
}

/// The periodic Fourier solve inverts `apply_core` (odd, even and unequal sizes, overlaps
/// 0.8 .. 1.2), and the Gaussian through it equals the separable solve.
#[test]
fn the_fourier_solve_inverts_the_periodic_operator() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for core in CoreOrder::ALL {
        for (dims, overlap) in [
            ([9usize, 7, 12], 1.0),
            ([16, 16, 16], 0.8),
            ([11, 10, 6], 1.2),
        ] {
            let h = 0.3;
            let sigma = overlap * h;
            let lat = lattice(dims, h, true);
            let f = FourierSolver::new(dims, h, sigma, 6.0, core).unwrap();
            let b: Vec<f64> = (0..lat.len()).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let x = f.solve(&b);
            let e = rel(&apply_core(&lat, core, sigma, 6.0, &x), &b);
            assert!(e < 1e-9, "{core:?} {dims:?} {overlap}: {e:.2e}");
            if core == CoreOrder::Second {
                let s = crate::reinterpolation::separable::SeparableSolver::new(
                    dims, h, sigma, 6.0, true,
                )
                .unwrap();
                assert!(rel(&x, &s.solve(&b)) < 1e-9, "{dims:?}");
            }
        }
    }
}

/// The run's solve with a core of order 4 and 6: periodic direct and conjugate gradients
/// agree; free space takes conjugate gradients (the direct solve is refused with the reason).
#[test]
fn the_run_solve_takes_every_core() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for core in [CoreOrder::Fourth, CoreOrder::Sixth] {
        for periodic in [true, false] {
            let lat = lattice([8, 9, 10], 0.2, periodic);
            let sigma = 0.2;
            let omega: Vec<[f64; 3]> = (0..lat.len())
                .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
                .collect();
            let settings = |solver| RbfSettings {
                solver,
                tolerance: 1e-10,
                core,
                ..Default::default()
            };
            let (cg, rep) = solve(&lat, sigma, &omega, &settings(RbfSolver::Cg)).unwrap();
            assert!(rep.residual <= 1e-10 && rep.iterations[0] > 0, "{core:?}");
            if periodic {
                let (direct, rep) =
                    solve(&lat, sigma, &omega, &settings(RbfSolver::Direct)).unwrap();
                assert!(rep.residual <= 1e-10);
                for c in 0..3 {
                    let a: Vec<f64> = cg.iter().map(|b| b[c]).collect();
                    let d: Vec<f64> = direct.iter().map(|b| b[c]).collect();
                    assert!(rel(&a, &d) < 1e-7, "{core:?} component {c}");
                }
            } else {
                let e = solve(&lat, sigma, &omega, &settings(RbfSolver::Direct)).unwrap_err();
                assert!(e.to_string().contains("solver = \"cg\""), "{e}");
            }
        }
    }
}

/// A Fourier mode of the lattice through the solve with `diffusion = nu tau` comes back as the
/// mode times `exp(-nu |k|^2 tau)`: `A beta` equals the decayed mode (every core).
#[test]
fn the_heat_kernel_decays_each_mode_exactly() {
    let n = 12;
    let l = 2.0 * PI;
    let lat = Lattice::periodic_box(n, l);
    let kv = [2i64, -3, 1];
    let mode: Vec<f64> = (0..lat.len())
        .map(|i| {
            let p = lat.point(i);
            (kv[0] as f64 * p[0] + kv[1] as f64 * p[1] + kv[2] as f64 * p[2] + 0.4).cos()
        })
        .collect();
    let omega: Vec<[f64; 3]> = mode.iter().map(|&v| [v, 0.0, -v]).collect();
    let diffusion = 0.013;
    let decay = (-diffusion * (kv.iter().map(|k| k * k).sum::<i64>()) as f64).exp();
    for core in CoreOrder::ALL {
        let s = RbfSettings {
            core,
            diffusion,
            tolerance: 1e-10,
            ..Default::default()
        };
        let (beta, _) = solve(&lat, lat.h, &omega, &s).unwrap();
        let b0: Vec<f64> = beta.iter().map(|b| b[0]).collect();
        let got = apply_core(&lat, core, lat.h, s.cutoff, &b0);
        let want: Vec<f64> = mode.iter().map(|v| v * decay).collect();
        assert!(
            rel(&got, &want) < 1e-9,
            "{core:?}: {:.2e}",
            rel(&got, &want)
        );
        assert!(decay < 0.9);
    }
}

/// The half-spectrum factor of a device solve equals the host route (filter and heat kernel
/// first, then the exact solve): a random field through `Fft3`, the factor, the inverse.
#[test]
fn the_half_spectrum_factor_is_the_host_solve() {
    use crate::reinterpolation::LatticeFilter;
    use vortex_spectral::fft::Fft3;
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let n = 12;
    let lat = Lattice::periodic_box(n, 2.0 * PI);
    let filter = LatticeFilter::Exponential {
        strength: 36.0,
        order: 8.0,
    };
    for core in CoreOrder::ALL {
        let b: Vec<f64> = (0..lat.len()).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let s = RbfSettings {
            core,
            filter,
            diffusion: 0.02,
            tolerance: 1e-10,
            ..Default::default()
        };
        let omega: Vec<[f64; 3]> = b.iter().map(|&v| [v, 0.0, 0.0]).collect();
        let (beta, _) = solve(&lat, lat.h, &omega, &s).unwrap();
        let host: Vec<f64> = beta.iter().map(|v| v[0]).collect();
        let g = inverse_symbol_half(n, lat.h, lat.h, s.cutoff, core, &filter, 0.02).unwrap();
        let fft = Fft3::new(n);
        let mut w = vec![Complex64::default(); fft.complex_len()];
        fft.forward(&b, &mut w);
        for (v, f) in w.iter_mut().zip(&g) {
            *v *= f / (n * n * n) as f64;
        }
        let mut dev = vec![0.0; n * n * n];
        fft.inverse(&mut w, &mut dev);
        assert!(
            rel(&dev, &host) < 1e-9,
            "{core:?}: {:.2e}",
            rel(&dev, &host)
        );
    }
}
