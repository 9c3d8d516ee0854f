//! The periodic FMM against the pseudo-spectral solver's velocity of the same smooth vorticity.
//!
//! A smooth periodic velocity `u` (the isotropic random field of `vortex_spectral::initial`, modes
//! `|k| < n/2`, peak `k_p = 2`) has the vorticity `omega = curl u`. Blobs on the `n^3` grid
//! (spacing `h = 2 pi / n`) with strengths `alpha_j = omega(x_j) h^3` and core `sigma = 2 h`
//! carry the vorticity Fourier coefficients `omega_hat(k mod n) exp(-k^2 sigma^2 / 2)`
//! (`docs/CONVENTIONS.md` normalisation): inside the band this is the filtered vorticity; the
//! aliased copies at `|k| >= n/2` are damped by `exp(-(n/2)^2 sigma^2 / 2) = exp(-2 pi^2)
//! = 2.7e-9` relative to the mode they copy. The zero-mean periodic velocity of the blobs is
//! therefore the spectral velocity filtered by `G(k) = exp(-k^2 sigma^2 / 2)`,
//! `u_blob = IFFT[G(k) u_hat(k)]`, to `3e-9`, and their stretching at particle `i` is
//! `(alpha_i . grad) u_blob` with `d_l u_blob = IFFT[i k_l G(k) u_hat(k)]`.
//!
//! The periodic FMM at `p = 10` with 4 image levels has a velocity error of about `1e-5` on the
//! standard zero-mean set (validation/periodic/README.md); the tolerance below is `1e-4` for the
//! velocity and `1e-3` for the stretching (the figures). The Ewald-split reference must
//! agree with the spectral fields to `1e-8` (aliasing plus round-off).

use num_complex::Complex64;
use std::f64::consts::PI;
use vortex_fmm::periodic::{EwaldParams, EwaldReference, Periodic};
use vortex_fmm::{evaluate, relative_l2_error, CpuBackend, EvalParams, Method, Sources, Targets};
use vortex_spectral::field::{grid_coord, wavevector, SpectralField};
use vortex_spectral::initial::{isotropic_spectral, IsotropicParams};

struct Case {
    sources: Sources,
    velocity: Vec<[f64; 3]>,
    stretching: Vec<[f64; 3]>,
}

/// Particles on the grid and the spectral velocity and stretching of their filtered vorticity.
fn grid_case(n: usize, seed: u64) -> Case {
    let u_hat = isotropic_spectral(
        n,
        &IsotropicParams {
            k_peak: 2.0,
            energy: Some(0.5),
            re_lambda: None,
            seed,
            nu: 0.0,
        },
    );
    let h = 2.0 * PI / n as f64;
    let sigma = 2.0 * h;
    let omega = u_hat.curl().to_physical();
    // filtered velocity and its gradient d_l u_m = IFFT[i k_l G u_hat_m]
    let nh = n / 2 + 1;
    let mut filt = SpectralField::zeros(n);
    let mut grad: [SpectralField; 3] = std::array::from_fn(|_| SpectralField::zeros(n));
    for idx in 0..n * n * nh {
        let (kx, ky, kz) = wavevector(idx, n);
        let g = (-0.5 * sigma * sigma * (kx * kx + ky * ky + kz * kz)).exp();
        for c in 0..3 {
            let v = u_hat.c[c][idx] * g;
            filt.c[c][idx] = v;
            for (l, kl) in [kx, ky, kz].into_iter().enumerate() {
                grad[l].c[c][idx] = Complex64::new(0.0, kl) * v;
            }
        }
    }
    // the Nyquist planes of a real field carry no derivative (their i k mode is not real)
    for (l, gr) in grad.iter_mut().enumerate() {
        for idx in 0..n * n * nh {
            let (kx, ky, kz) = wavevector(idx, n);
            if [kx, ky, kz][l].abs() == (n / 2) as f64 {
                for c in 0..3 {
                    gr.c[c][idx] = Complex64::default();
                }
            }
        }
    }
    let u = filt.to_physical();
    let du: Vec<_> = grad.iter().map(|g| g.to_physical()).collect();
    let mut s = Sources::default();
    let (mut velocity, mut stretching) = (Vec::new(), Vec::new());
    for i in 0..n {
        for j in 0..n {
            for k in 0..n {
                let idx = (i * n + j) * n + k;
                let x = [grid_coord(i, n), grid_coord(j, n), grid_coord(k, n)];
                let a: [f64; 3] = std::array::from_fn(|c| omega.u[c][idx] * h.powi(3));
                s.position.push(x);
                s.strength.push(a);
                s.sigma.push(sigma);
                velocity.push(std::array::from_fn(|c| u.u[c][idx]));
                stretching.push(std::array::from_fn(|c| {
                    (0..3).map(|l| a[l] * du[l].u[c][idx]).sum::<f64>()
                }));
            }
        }
    }
    Case {
        sources: s,
        velocity,
        stretching,
    }
}

/// Periodic evaluation (`p = 10`, `K = 4`) of the case's blobs with `method`, checked against
/// the spectral velocity and stretching (1e-4 / 1e-3).
fn check_against_spectral(case: &Case, method: Method, label: &str) {
    let s = &case.sources;
    let params = EvalParams {
        method,
        order: 10,
        periodic: Some(Periodic {
            box_length: 2.0 * PI,
            image_levels: 4,
        }),
        ..EvalParams::default()
    };
    let ev = evaluate(&CpuBackend, &params, s, &s.as_targets()).unwrap();
    let eu = relative_l2_error(&ev.fields.velocity, &case.velocity);
    let es = relative_l2_error(&ev.fields.stretching, &case.stretching);
    eprintln!("{label} p = 10 vs spectral: velocity {eu:e}, stretching {es:e}");
    assert!(eu < 1e-4 && es < 1e-3, "velocity {eu:e} stretching {es:e}");
}

#[test]
fn periodic_fmm_matches_spectral_velocity_of_a_smooth_field() {
    let case = grid_case(24, 7);
    check_against_spectral(&case, Method::Fmm, "FMM, 24^3 grid");
    let s = &case.sources;

    // the Ewald reference on a sample of the grid points
    let step = 13;
    let t = Targets {
        position: s.position.iter().step_by(step).copied().collect(),
        strength: s.strength.iter().step_by(step).copied().collect(),
    };
    let ew = EwaldReference::new(s, &EwaldParams::default(), t.len())
        .unwrap()
        .evaluate(&t)
        .unwrap();
    let pick = |v: &[[f64; 3]]| v.iter().step_by(step).copied().collect::<Vec<_>>();
    let eu = relative_l2_error(&ew.velocity, &pick(&case.velocity));
    let es = relative_l2_error(&ew.stretching, &pick(&case.stretching));
    eprintln!("Ewald vs spectral: velocity {eu:e}, stretching {es:e}");
    assert!(eu < 1e-8 && es < 1e-8, "velocity {eu:e} stretching {es:e}");
}

#[test]
fn periodic_ppm_matches_spectral_velocity_of_a_smooth_field() {
    check_against_spectral(&grid_case(16, 8), Method::Ppm, "PPM, 16^3 grid");
}
