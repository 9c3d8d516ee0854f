use vortex_spectral::config::Dealias;
use vortex_spectral::diagnostics;
use vortex_spectral::fft::wavenumber;
use vortex_spectral::field::{SpectralField, VelocityField};
use vortex_spectral::initial::{self, IsotropicParams};
use vortex_spectral::{Solver, StepMode};

fn rel_err(a: &VelocityField, b: &VelocityField) -> f64 {
    let mut num = 0.0;
    let mut den = 0.0;
    for c in 0..3 {
        for (x, y) in a.u[c].iter().zip(&b.u[c]) {
            num += (x - y) * (x - y);
            den += y * y;
        }
    }
    (num / den).sqrt()
}

/// A random solenoidal field with all modes |k_i| <= kc (and nothing else).
fn band_limited(n: usize, kc: i64, seed: u64) -> VelocityField {
    let p = IsotropicParams {
        k_peak: 3.0,
        energy: Some(0.5),
        re_lambda: None,
        seed,
        nu: 0.0,
    };
    let mut s = initial::isotropic_spectral(n, &p);
    let nh = n / 2 + 1;
    for (idx, ((a, b), c)) in {
        let [a, b, c] = &mut s.c;
        a.iter_mut().zip(b.iter_mut()).zip(c.iter_mut()).enumerate()
    } {
        let iz = (idx % nh) as i64;
        let iy = wavenumber((idx / nh) % n, n);
        let ix = wavenumber(idx / (nh * n), n);
        if ix.abs() > kc || iy.abs() > kc || iz > kc {
            *a = Default::default();
            *b = Default::default();
            *c = Default::default();
        }
    }
    s.to_physical()
}

#[test]
fn projection_gives_zero_divergence() {
    let n = 16;
    // A non-solenoidal random field.
    let f = VelocityField::from_fn(n, |x, y, z| {
        [
            (2.0 * x).sin() * y.cos() + z.cos(),
            (x + y).cos() * (3.0 * z).sin(),
            (x - 2.0 * y + z).sin(),
        ]
    });
    assert!(diagnostics::divergence_max(&f) > 1e-2);
    let s = Solver::with_field(&f, 0.01, Dealias::ThreeHalves, StepMode::Fixed(0.01)).unwrap();
    let d = diagnostics::divergence_max(&s.velocity());
    assert!(d < 1e-14, "divergence after projection {d}");
}

/// Where the mode `(ix, iy, iz)` of the half-spectrum of an `n`^3 grid sits in that of an
/// `nf`^3 grid (`nf >= n`): its index there and its wavenumbers `kx`, `ky`.
fn on_finer_grid(ix: usize, iy: usize, iz: usize, n: usize, nf: usize) -> (usize, i64, i64) {
    let (kx, ky) = (wavenumber(ix, n), wavenumber(iy, n));
    let j = ((kx.rem_euclid(nf as i64) as usize) * nf + ky.rem_euclid(nf as i64) as usize)
        * (nf / 2 + 1)
        + iz;
    (j, kx, ky)
}

#[test]
fn dealiasing_is_exact_for_band_limited_products() {
    // P[u x omega] of a field with |k_i| <= n/2 - 1 computed on n^3 with the 3/2 rule equals the
    // product computed on a grid twice as fine (where no mode of the product is truncated),
    // restricted to the resolved modes.
    let n = 16;
    let kc = (n / 2 - 1) as i64;
    let f = band_limited(n, kc, 11);
    let mut coarse =
        Solver::with_field(&f, 0.0, Dealias::ThreeHalves, StepMode::Fixed(0.01)).unwrap();
    let nc = coarse.nonlinear_term();
    // Same field on the fine grid (spectral interpolation).
    let sf = SpectralField::from_physical(&f);
    let nf = 2 * n;
    let mut fine_s = SpectralField::zeros(nf);
    let nh = n / 2 + 1;
    for ix in 0..n {
        for iy in 0..n {
            for iz in 0..nh {
                let (j, _, _) = on_finer_grid(ix, iy, iz, n, nf);
                for c in 0..3 {
                    fine_s.c[c][j] = sf.c[c][(ix * n + iy) * nh + iz];
                }
            }
        }
    }
    let mut fine = Solver::with_field(
        &fine_s.to_physical(),
        0.0,
        Dealias::ThreeHalves,
        StepMode::Fixed(0.01),
    )
    .unwrap();
    let nfine = fine.nonlinear_term();
    let mut max_diff = 0.0f64;
    let mut max_val = 0.0f64;
    let mut max_outside = 0.0f64;
    for ix in 0..n {
        for iy in 0..n {
            for iz in 0..nh {
                let (j, kx, ky) = on_finer_grid(ix, iy, iz, n, nf);
                for c in 0..3 {
                    let a = nc.c[c][(ix * n + iy) * nh + iz];
                    let b = nfine.c[c][j];
                    if kx.abs() <= kc && ky.abs() <= kc && iz as i64 <= kc {
                        max_diff = max_diff.max((a - b).norm());
                        max_val = max_val.max(b.norm());
                    } else {
                        max_outside = max_outside.max(a.norm());
                    }
                }
            }
        }
    }
    assert!(max_val > 1e-3);
    assert!(
        max_diff < 1e-13 * max_val.max(1.0),
        "aliasing error {max_diff} (max {max_val})"
    );
    assert_eq!(max_outside, 0.0);
    // The 2/3 rule is exact too for fields within |k_i| < n/3.
    let kc3 = ((n as f64 / 3.0).ceil() as i64) - 1;
    let f3 = band_limited(n, kc3, 12);
    let mut a = Solver::with_field(&f3, 0.0, Dealias::TwoThirds, StepMode::Fixed(0.01)).unwrap();
    let mut b = Solver::with_field(&f3, 0.0, Dealias::ThreeHalves, StepMode::Fixed(0.01)).unwrap();
    let (na, nb) = (a.nonlinear_term(), b.nonlinear_term());
    for ix in 0..n {
        for iy in 0..n {
            for iz in 0..nh {
                let (kx, ky) = (wavenumber(ix, n), wavenumber(iy, n));
                if kx.abs() <= kc3 && ky.abs() <= kc3 && iz as i64 <= kc3 {
                    for c in 0..3 {
                        let i = (ix * n + iy) * nh + iz;
                        assert!(
                            (na.c[c][i] - nb.c[c][i]).norm() < 1e-13,
                            "2/3 rule at {kx} {ky} {iz}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn spectrum_of_known_field() {
    let n = 16;
    // Three single-wavevector components: |k| = 3, 4 and 5, each of energy 1/4.
    let f = VelocityField::from_fn(n, |x, y, z| {
        [(3.0 * z).cos(), (4.0 * x).sin(), (3.0 * x + 4.0 * y).cos()]
    });
    let spec = diagnostics::spectrum(&f);
    for (k, e) in &spec {
        let want = if (3.0..=5.0).contains(k) { 0.25 } else { 0.0 };
        assert!((e - want).abs() < 1e-14, "E({k}) = {e}, want {want}");
    }
    let e = diagnostics::energy(&f);
    assert!((e - 0.75).abs() < 1e-14);
    let total: f64 = spec.iter().map(|p| p.1).sum();
    assert!((total - e).abs() < 1e-14);
    // Enstrophy (1/2)<|omega|^2> = (1/2) sum k^2 * 2 E(k)... = sum k^2 E(k) for single modes.
    let z = diagnostics::enstrophy(&f);
    assert!((z - 0.25 * (9.0 + 16.0 + 25.0)).abs() < 1e-12, "{z}");
    // Integral scale: pi/(2 u'^2) sum E/k with u'^2 = 2E/3 = 0.5.
    let st = diagnostics::stats(&f, 0.01, 7.0, 0.0);
    let l = std::f64::consts::PI / (2.0 * 0.5) * 0.25 * (1.0 / 3.0 + 0.25 + 0.2);
    assert!((st.integral_scale - l).abs() < 1e-12);
    assert!((st.dissipation - 2.0 * 0.01 * z).abs() < 1e-14);
}

#[test]
fn taylor_green_2d_decays_exactly() {
    let n = 16;
    let nu = 0.05;
    let dt = 0.01;
    let f0 = initial::taylor_green_2d(n);
    let mut s = Solver::with_field(&f0, nu, Dealias::ThreeHalves, StepMode::Fixed(dt)).unwrap();
    for _ in 0..1000 {
        s.step().unwrap();
    }
    let t = s.time();
    assert!((t - 10.0).abs() < 1e-9);
    let decay = (-2.0 * nu * t).exp();
    let mut exact = f0.clone();
    for c in exact.u.iter_mut() {
        c.iter_mut().for_each(|v| *v *= decay);
    }
    let v = s.velocity();
    let err = rel_err(&v, &exact);
    eprintln!("2-D Taylor-Green after 1000 steps: relative L2 error {err:.3e}");
    assert!(err < 1e-10, "relative error {err}");
    assert!(diagnostics::divergence_max(&v) < 1e-14);
}

fn run_tg(n: usize, dt: f64, t_end: f64) -> Solver {
    let f0 = initial::taylor_green(n);
    let mut s = Solver::with_field(&f0, 0.0, Dealias::ThreeHalves, StepMode::Fixed(dt)).unwrap();
    let steps = (t_end / dt).round() as usize;
    for _ in 0..steps {
        s.step().unwrap();
    }
    s
}

#[test]
fn inviscid_taylor_green_time_error_is_fourth_order() {
    let n = 16;
    let t_end = 1.0;
    let reference = run_tg(n, 0.1 / 32.0, t_end).velocity();
    let dts = [0.2, 0.1, 0.05];
    let mut errs = vec![];
    let mut eerrs = vec![];
    for &dt in &dts {
        let s = run_tg(n, dt, t_end);
        errs.push(rel_err(&s.velocity(), &reference));
        eerrs.push((s.energy() - 0.125).abs() / 0.125);
    }
    let order = |e: &[f64], i: usize| (e[i] / e[i + 1]).log2();
    for i in 0..dts.len() - 1 {
        eprintln!(
            "dt {} -> {}: field error {:.3e} -> {:.3e} (order {:.2}), energy error {:.3e} -> {:.3e} (order {:.2})",
            dts[i], dts[i + 1], errs[i], errs[i + 1], order(&errs, i), eerrs[i], eerrs[i + 1], order(&eerrs, i)
        );
    }
    let p = order(&errs, 1);
    assert!((3.7..4.4).contains(&p), "field order {p}");
    let pe = order(&eerrs, 1);
    assert!(pe > 3.7, "energy order {pe}");
}

#[test]
fn isotropic_field_is_deterministic_solenoidal_and_scaled() {
    let n = 32;
    let p = IsotropicParams {
        k_peak: 4.0,
        energy: None,
        re_lambda: Some(50.0),
        seed: 42,
        nu: 0.01,
    };
    let a = initial::isotropic(n, &p);
    let b = initial::isotropic(n, &p);
    assert_eq!(a, b);
    let c = initial::isotropic(
        n,
        &IsotropicParams {
            seed: 43,
            ..p.clone()
        },
    );
    assert_ne!(a, c);
    assert!(diagnostics::divergence_max(&a) < 1e-13);
    let st = diagnostics::stats(&a, 0.01, 15.0, 0.0);
    assert!((st.re_lambda - 50.0).abs() < 1e-9, "{}", st.re_lambda);
    // Spectrum follows k^4 exp(-2 (k/kp)^2) shell by shell.
    let spec = diagnostics::spectrum(&a);
    let r = spec[4].1 / initial::model_spectrum(4.0, 4.0);
    for (k, e) in spec.iter().skip(1).take(14) {
        let want = r * initial::model_spectrum(*k, 4.0);
        assert!(
            (e - want).abs() < 1e-10 * want.max(1e-30) + 1e-20,
            "E({k}) = {e}, want {want}"
        );
    }
    let pe = IsotropicParams {
        energy: Some(0.3),
        re_lambda: None,
        ..p
    };
    assert!((diagnostics::energy(&initial::isotropic(n, &pe)) - 0.3).abs() < 1e-12);
}
