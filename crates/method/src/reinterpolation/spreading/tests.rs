//! The spreading route against the exact periodic Gaussian sums on fresh random particles.

use super::*;
use crate::cells::gaussian_sum;
use crate::reinterpolation::{solve, RbfSettings};
use std::f64::consts::PI;

/// The exact periodic Gaussian sums at the lattice points (lattice order), by the
/// factorisation of the Gaussian over the axes: per particle, the 1-D image sums
/// `sum_j exp(-(y_i - x - j L)^2 / 2 sigma^2)` along each axis, then their outer product over
/// every lattice point (no truncation: images until they vanish in f64).
pub fn exact_sums(
    n: usize,
    l: f64,
    pos: &[[f64; 3]],
    alpha: &[[f64; 3]],
    cores: &[f64],
) -> Vec<[f64; 3]> {
    let lat = Lattice::periodic_box(n, l);
    let mut out = vec![[0.0; 3]; lat.len()];
    let mut g = [vec![0.0; n], vec![0.0; n], vec![0.0; n]];
    for ((x, a), &s) in pos.iter().zip(alpha).zip(cores) {
        let images = (12.0 * s / l).ceil() as i64 + 1;
        for c in 0..3 {
            for (i, gi) in g[c].iter_mut().enumerate() {
                let y = lat.origin[c] + lat.h * i as f64;
                *gi = (-images..=images)
                    .map(|j| {
                        let d = y - x[c] - j as f64 * l;
                        (-0.5 * d * d / (s * s)).exp()
                    })
                    .sum();
            }
        }
        let norm = (2.0 * PI * s * s).powf(-1.5);
        for i in 0..n {
            for j in 0..n {
                let gij = norm * g[0][i] * g[1][j];
                for k in 0..n {
                    let f = gij * g[2][k];
                    let o = &mut out[(i * n + j) * n + k];
                    for c in 0..3 {
                        o[c] += a[c] * f;
                    }
                }
            }
        }
    }
    out
}

/// Relative L2 difference of one component.
fn rel(a: &[[f64; 3]], b: &[[f64; 3]], c: usize) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| (x[c] - y[c]).powi(2)).sum();
    let r: f64 = b.iter().map(|y| y[c] * y[c]).sum();
    (d / r).sqrt()
}

/// The lattice values of the spectra (the inverse transform of `W`).
fn values_of(plan: &SpreadPlan, spectra: [Vec<Complex64>; 3]) -> Vec<[f64; 3]> {
    let fft = Fft3::new(plan.n);
    let mut out = vec![[0.0; 3]; plan.n.pow(3)];
    for (c, mut w) in spectra.into_iter().enumerate() {
        for (o, v) in out.iter_mut().zip(fold::lattice_values(&fft, &mut w)) {
            o[c] = v;
        }
    }
    out
}

/// The reference itself: the factorised image sums against the project's Gaussian sums
/// (`cells::gaussian_sum`) with a cutoff of 8 core radii (truncation `exp(-32)`).
#[test]
fn exact_sums_agree_with_the_cell_list_sums() {
    let (n, l) = (12, 2.0 * PI);
    let (pos, alpha) = jittered_lattice(n, l, 1);
    let h = l / n as f64;
    let cores: Vec<f64> = (0..pos.len())
        .map(|p| h * (0.8 + 0.1 * (p % 3) as f64))
        .collect();
    let want = exact_sums(n, l, &pos, &alpha, &cores);
    let got = gaussian_sum(
        &pos,
        &alpha,
        &cores,
        &Lattice::periodic_box(n, l).points(),
        8.0,
        Some(l),
    );
    for c in 0..3 {
        assert!(
            rel(&got, &want, c) < 1e-12,
            "{c}: {:e}",
            rel(&got, &want, c)
        );
    }
}

/// The acceptance test of the spreading route: the lattice values of the spread spectra
/// against the exact sums, relative L2 per component within the tolerance 1e-9, for one core
/// (the exact factorisation), two cores (two bins) and cores of the lattice's overlap 0.8 to
/// 1.2, on fresh random particles displaced up to `h / 2` from the lattice.
#[test]
fn spread_sums_match_the_exact_sums() {
    let (n, l, tol) = (16, 2.0 * PI, 1e-9);
    let h = l / n as f64;
    let sigma0 = 0.8 * h;
    let plan = SpreadPlan::new(n, l, sigma0, tol).unwrap();
    for (seed, cores_of) in [
        (2u64, &(|_p: usize| 0.8) as &dyn Fn(usize) -> f64),
        (3, &|p: usize| if p % 2 == 0 { 0.8 } else { 1.2 }),
        (4, &|_p: usize| 0.96),
    ] {
        let (pos, alpha) = jittered_lattice(n, l, seed);
        let cores: Vec<f64> = (0..pos.len()).map(|p| cores_of(p) * h).collect();
        let want = exact_sums(n, l, &pos, &alpha, &cores);
        let got = values_of(&plan, plan.lattice_spectra(&pos, &alpha, &cores).unwrap());
        for c in 0..3 {
            let e = rel(&got, &want, c);
            eprintln!("seed {seed} component {c}: relative L2 {e:.2e} (tolerance {tol:e})");
            assert!(e < tol, "seed {seed} component {c}: {e:e}");
        }
    }
}

/// A looser tolerance gives a cheaper plan whose error is still within it (and the test can
/// tell: it exceeds the tight one's by orders of magnitude).
#[test]
fn a_loose_tolerance_is_met_and_not_exceeded_by_much() {
    let (n, l) = (16, 2.0 * PI);
    let h = l / n as f64;
    let (pos, alpha) = jittered_lattice(n, l, 5);
    let cores = vec![0.9 * h; pos.len()];
    let want = exact_sums(n, l, &pos, &alpha, &cores);
    let plan = SpreadPlan::new(n, l, 0.8 * h, 1e-4).unwrap();
    let got = values_of(&plan, plan.lattice_spectra(&pos, &alpha, &cores).unwrap());
    let e = (0..3).map(|c| rel(&got, &want, c)).fold(0.0, f64::max);
    eprintln!(
        "tolerance 1e-4: relative L2 {e:.2e}, w = {}, m = {}",
        plan.design.kernel.width, plan.design.fine
    );
    assert!(e < 1e-4 && e > 1e-9, "{e:e}");
}

/// The strengths of the Fourier solve on the spread spectra against the host's direct solve
/// (the separable factors with the untruncated weights, the default filter, its residual
/// checked) of the exact lattice values: the same system, so the difference is the tolerance
/// of the sums.
#[test]
fn strengths_match_the_direct_solve_of_the_exact_sums() {
    let (n, l) = (16, 2.0 * PI);
    let h = l / n as f64;
    let sigma0 = 0.8 * h;
    let (pos, alpha) = jittered_lattice(n, l, 6);
    let cores = vec![0.9 * h; pos.len()];
    let lat = Lattice::periodic_box(n, l);
    let s = RbfSettings {
        filter: LatticeFilter::default(),
        cutoff: UNTRUNCATED,
        ..Default::default()
    };
    let exact = exact_sums(n, l, &pos, &alpha, &cores);
    let (want, _) = solve(&lat, sigma0, &exact, &s).unwrap();
    let plan = SpreadPlan::new(n, l, sigma0, 1e-9).unwrap();
    let got = plan
        .lattice_strengths(&pos, &alpha, &cores, sigma0, &s.filter)
        .unwrap();
    for c in 0..3 {
        let e = rel(&got, &want, c);
        eprintln!("strengths, component {c}: relative L2 {e:.2e}");
        assert!(e < 1e-8, "{c}: {e:e}");
    }
}

/// Particles on the lattice points with the core `sigma0` carrying smooth values: the
/// lattice operator (sums, then the unfiltered solve) gives the values back, to the
/// tolerance of the sums (the direct route's truncation left `1.5e-6` here:
/// `history::tests::the_velocity_operator_is_the_identity_on_the_lattice`).
#[test]
fn the_lattice_operator_is_the_identity_on_the_lattice() {
    let (n, l) = (16, 2.0);
    let lat = Lattice::periodic_box(n, l);
    let x = lat.points();
    let v: Vec<[f64; 3]> = x
        .iter()
        .map(|y| {
            let w = y.map(|c| PI * c);
            [
                (w[0] + 0.3).sin(),
                (w[1] - w[2] + 1.1).cos(),
                (2.0 * w[2] + 2.0).sin(),
            ]
        })
        .collect();
    for overlap in [0.8, 1.0] {
        let sigma0 = overlap * lat.h;
        let plan = SpreadPlan::new(n, l, sigma0, 1e-9).unwrap();
        let cores = vec![sigma0; x.len()];
        let got = plan
            .lattice_strengths(&x, &v, &cores, sigma0, &LatticeFilter::None)
            .unwrap();
        let e = (0..3).map(|c| rel(&got, &v, c)).fold(0.0, f64::max);
        eprintln!("identity on the lattice, overlap {overlap}: relative L2 {e:.2e}");
        assert!(e < 1e-8, "overlap {overlap}: {e:e}");
    }
}

#[test]
fn cores_fall_into_bins() {
    let b = core_bins(&[0.3, 0.3, 0.3], 1e-9).unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].members, vec![0, 1, 2]);
    // within e tol / 2 in variance: one bin with the middle variance
    let b = core_bins(&[0.3, 0.3 * (1.0 + 1e-10)], 1e-9).unwrap();
    assert_eq!(b.len(), 1);
    assert!((b[0].core / 0.3 - 1.0 - 0.5e-10).abs() < 1e-14);
    let b = core_bins(&[0.5, 0.3, 0.5, 0.4], 1e-9).unwrap();
    let got: Vec<(f64, Vec<usize>)> = b.into_iter().map(|b| (b.core, b.members)).collect();
    assert_eq!(got, vec![(0.3, vec![1]), (0.4, vec![3]), (0.5, vec![0, 2])]);
    let many: Vec<f64> = (0..=MAX_BINS).map(|i| 0.3 + 0.01 * i as f64).collect();
    assert_eq!(core_bins(&many, 1e-9), Err(SpreadError::TooManyBins));
}

/// Bad input: a tolerance no kernel reaches, a free-space run, an odd lattice, a core below
/// the design; each names its key and the limit.
#[test]
fn refusals_name_the_key_and_the_limit() {
    let (n, l) = (16, 2.0 * PI);
    let sigma0 = 0.8 * l / n as f64;
    let (key, e) = LatticeSums::Spread { tolerance: 1e-13 }
        .check_run(Some(n), l, sigma0)
        .unwrap_err();
    assert_eq!(key, "reinterpolation.sums");
    assert!(e.contains("1e-12"), "{e}");
    // cores far below the lattice spacing need more modes than the largest fine grid holds
    let (key, e) = LatticeSums::Spread { tolerance: 1e-6 }
        .check_run(Some(2048), l, 0.05 * l / 2048.0)
        .unwrap_err();
    assert_eq!(key, "reinterpolation.sums.tolerance");
    assert!(e.contains("8192^3") && e.contains("overlap"), "{e}");
    let (key, _) = LatticeSums::Spread { tolerance: 1e-6 }
        .check_run(None, l, sigma0)
        .unwrap_err();
    assert_eq!(key, "reinterpolation.sums");
    let (key, e) = LatticeSums::Spread { tolerance: 1e-6 }
        .check_run(Some(15), l, sigma0)
        .unwrap_err();
    assert_eq!(key, "reinterpolation.n");
    assert!(e.contains("15"), "{e}");
    assert!(LatticeSums::Direct.check_run(None, l, sigma0).is_ok());
    // through the configuration: the file, the key and the limit
    let text = |domain: &str, tol: &str| {
        format!(
            "nu = 0.01\ndt = 0.1\nt_end = 1.0\n{domain}[initial]\nkind = \"taylor-green\"\n\
             n = 16\n[reinterpolation]\nsums = {{ kind = \"spread\", tolerance = {tol} }}\n"
        )
    };
    let periodic = "[domain]\nperiodic = true\n";
    let e = crate::Config::from_str_named(&text(periodic, "1e-13"), "bad.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bad.toml") && e.contains("reinterpolation.sums") && e.contains("1e-12"),
        "{e}"
    );
    assert!(crate::Config::from_str_named(&text(periodic, "1e-6"), "good.toml").is_ok());
    let plan = SpreadPlan::new(n, l, sigma0, 1e-6).unwrap();
    // a grid too large for the memory: the key, the grid and both amounts
    let e = plan
        .check_memory_against(Some(1024.0))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("reinterpolation.sums")
            && e.contains(&format!("{}^3", plan.design.fine))
            && e.contains("GiB are available"),
        "{e}"
    );
    assert!(plan.check_memory_against(Some(1e12)).is_ok());
    let e = plan
        .lattice_spectra(&[[0.0; 3]], &[[1.0; 3]], &[0.5 * sigma0])
        .unwrap_err();
    assert!(matches!(e, SpreadError::CoreBelowDesign { .. }), "{e}");
}
