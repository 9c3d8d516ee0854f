//! The closed forms of each core against numerical quadratures of its `zeta` (an independent
//! path: only `zeta` and its derivative enter the quadratures), its moments and its Fourier
//! transform.

use super::*;
use crate::ppm::quadrature::gauss_legendre;
use rand::{Rng, SeedableRng};
use std::f64::consts::PI;

/// `int_a^b f` by composite Gauss-Legendre, `panels` panels of 24 nodes.
fn integrate(f: impl Fn(f64) -> f64, a: f64, b: f64, panels: usize) -> f64 {
    let (x, w) = gauss_legendre(24);
    let h = (b - a) / panels as f64;
    (0..panels)
        .map(|p| {
            let lo = a + p as f64 * h;
            x.iter()
                .zip(&w)
                .map(|(xi, wi)| wi * f(lo + 0.5 * h * (xi + 1.0)))
                .sum::<f64>()
                * 0.5
                * h
        })
        .sum()
}

/// `d zeta / d s` for `sigma = 1`, from the polynomial alone.
fn dzeta_ds(core: CoreOrder, s: f64) -> f64 {
    let p = core.p_coefficients();
    let dp: f64 = (1..p.len())
        .map(|i| i as f64 * p[i] * s.powi(i as i32 - 1))
        .sum();
    GAUSS_NORM * (-0.5 * s).exp() * (dp - 0.5 * core.poly(s))
}

/// `(K, K'/r)` for `sigma = 1` at `rho` by quadrature of `zeta` in the scaled variable
/// `t = rho u`: `K = q / rho^3 = 4 pi int_0^1 zeta(rho u) u^2 du` and
/// `K'/r = (1/rho) dK/drho = 4 pi int_0^1 2 u^4 zeta_s(rho^2 u^2) du` (no cancellation as
/// `rho -> 0`).
fn quadrature_factors(core: CoreOrder, rho: f64) -> (f64, f64) {
    let s = rho * rho;
    let k = 4.0 * PI * integrate(|u| core.zeta(s * u * u) * u * u, 0.0, 1.0, 16);
    let kp = 4.0
        * PI
        * integrate(
            |u| 2.0 * u.powi(4) * dzeta_ds(core, s * u * u),
            0.0,
            1.0,
            16,
        );
    (k, kp)
}

/// Relative difference with a floor of `floor` times the scale `scale`.
fn rel(a: f64, b: f64, scale: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-14 * scale)
}

#[test]
fn each_kernel_matches_the_quadrature_of_its_zeta() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(37);
    for core in CoreOrder::ALL {
        // rho -> 0, the series switch, the cutoff of the far field, the singular switch
        let mut rhos = vec![0.0, 1e-9, 1e-5, 1e-3, 0.5, 1.0 - 1e-12, 1.0, 1.0 + 1e-12];
        rhos.extend([4.0, core.min_cutoff(), core.rho_singular() - 1e-9]);
        rhos.extend((0..200).map(|_| rng.gen_range(0.0..core.rho_singular())));
        rhos.extend((0..20).map(|_| rng.gen_range(0.0f64..1.0).powi(6)));
        let mut worst = (0.0f64, 0.0f64);
        for &rho in &rhos {
            let sigma = rng.gen_range(0.05..3.0);
            let (k, kp) = core.factors((rho * sigma).powi(2), sigma);
            let (kq, kpq) = quadrature_factors(core, rho);
            let (kq, kpq) = (kq / sigma.powi(3), kpq / sigma.powi(5));
            // the scale of each factor: its value at rho = 0
            let (k0, kp0) = quadrature_factors(core, 0.0);
            let ek = rel(k, kq, k0 / sigma.powi(3));
            let ekp = rel(kp, kpq, kp0.abs() / sigma.powi(5));
            assert!(
                ek < 1e-12 && ekp < 1e-10,
                "{core:?} rho = {rho:e}, sigma = {sigma}: K {k:e} vs {kq:e} ({ek:.1e}), \
                 K'/r {kp:e} vs {kpq:e} ({ekp:.1e})"
            );
            worst = (worst.0.max(ek), worst.1.max(ekp));
        }
        // q itself: the fraction of the circulation, against 4 pi int_0^rho zeta t^2 dt
        for rho in [0.3, 1.7, 2.9, 4.4, 6.0] {
            let qq = 4.0 * PI * integrate(|t| core.zeta(t * t) * t * t, 0.0, rho, 32);
            assert!((core.q(rho) - qq).abs() < 1e-14, "{core:?} q({rho})");
            let h = 1e-5;
            let fd = (core.q(rho + h) - core.q(rho - h)) / (2.0 * h);
            assert!((core.dq(rho) - fd).abs() < 1e-9, "{core:?} dq({rho})");
        }
        eprintln!(
            "{core:?}: worst relative error K {:.1e}, K'/r {:.1e}",
            worst.0, worst.1
        );
    }
}

#[test]
fn beyond_the_singular_switch_the_kernel_is_singular_to_round_off() {
    for core in CoreOrder::ALL {
        let rho = core.rho_singular();
        assert!(
            core.tail(rho) < 1e-15,
            "{core:?}: 1 - q = {:e}",
            core.tail(rho)
        );
        // K'/r = (dq/rho - 3 q) / rho^5: the dq term against the singular 3 / rho^5
        assert!(core.dq(rho) * rho / 3.0 < 1e-14, "{core:?}");
    }
}

#[test]
fn moments_vanish_below_the_order() {
    // M_j = int |x|^(2j) zeta d^3x = 4 pi int rho^(2j+2) zeta drho: M_0 = 1, M_j = 0 for
    // 0 < j < m, and M_m != 0 (the order is exactly 2m)
    for core in CoreOrder::ALL {
        let moment =
            |j: i32| 4.0 * PI * integrate(|r| r.powi(2 * j + 2) * core.zeta(r * r), 0.0, 24.0, 48);
        assert!((moment(0) - 1.0).abs() < 1e-13, "{core:?}: {}", moment(0));
        for j in 1..core.m() as i32 {
            assert!(moment(j).abs() < 1e-11, "{core:?}: M_{j} = {:e}", moment(j));
        }
        let mm = moment(core.m() as i32);
        assert!(mm.abs() > 0.5, "{core:?}: M_m = {mm}");
        // every order's moments of odd degree vanish by symmetry; q -> 1 far away
        assert!((core.q(12.0) - 1.0).abs() < 1e-15);
    }
}

#[test]
fn the_transform_is_the_fourier_transform_of_zeta() {
    // zeta_hat(k) = 4 pi int zeta(rho) rho^2 sin(k rho) / (k rho) drho
    for core in CoreOrder::ALL {
        for k in [0.0, 0.1, 0.5, 0.9, 1.5, 2.5, 4.0, 6.0] {
            let sinc = |x: f64| if x == 0.0 { 1.0 } else { x.sin() / x };
            let num =
                4.0 * PI * integrate(|r| core.zeta(r * r) * r * r * sinc(k * r), 0.0, 24.0, 96);
            let x = 0.5 * k * k;
            let t = core.transform(x);
            assert!(
                (num - t).abs() < 1e-13,
                "{core:?} k = {k}: {num:e} vs {t:e}"
            );
            assert!(t > 0.0);
        }
    }
    // the figures of the module documentation at k sigma = 0.9
    let x = 0.5 * 0.81;
    assert!((CoreOrder::Second.transform(x) - 0.667).abs() < 1e-3);
    assert!((CoreOrder::Fourth.transform(x) - 0.937).abs() < 1e-3);
    assert!((CoreOrder::Sixth.transform(x) - 0.992).abs() < 1e-3);
}

#[test]
fn the_minimal_cutoff_bounds_the_tail() {
    assert_eq!(CoreOrder::Second.min_cutoff(), 0.0);
    assert!((CoreOrder::Second.tail(4.0) - CUTOFF_TAIL).abs() < 0.01 * CUTOFF_TAIL);
    for core in [CoreOrder::Fourth, CoreOrder::Sixth] {
        let c = core.min_cutoff();
        assert!((4.0..6.0).contains(&c), "{core:?}: {c}");
        let mut rho = c;
        while rho < 12.0 {
            assert!(core.tail(rho) <= CUTOFF_TAIL, "{core:?}: tail({rho})");
            rho += 0.01;
        }
        assert!(core.tail(c - 0.02) > CUTOFF_TAIL, "{core:?}");
        assert_eq!(core.default_cutoff(4.0), c);
        assert_eq!(core.default_cutoff(8.0), 8.0);
    }
}

#[test]
fn orders_parse_and_print() {
    for core in CoreOrder::ALL {
        let s = core.to_string();
        assert_eq!(s.parse::<CoreOrder>().unwrap(), core);
        assert_eq!(CoreOrder::try_from(u32::from(core)).unwrap(), core);
    }
    for bad in ["3", "8", "0", "four", ""] {
        let e = bad.parse::<CoreOrder>().unwrap_err();
        assert!(e.contains("2, 4 or 6"), "{e}");
    }
}
