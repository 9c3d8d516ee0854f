//! The regularized Biot-Savart kernel of the vortex method.
//!
//! Core paper (Yokota et al., CPC 180, 2009), Eq. 3-6 and 9, with the conventions of
//! `docs/CONVENTIONS.md`: a vortex element `j` at `x_j` with strength `alpha_j` (vorticity times
//! volume) and Gaussian core radius `sigma_j` induces at `x_i`, with `d = x_i - x_j`, `r = |d|`,
//! `rho = r / sigma_j`,
//!
//! * cutoff `q(rho) = erf(rho / sqrt 2) - sqrt(2/pi) rho exp(-rho^2 / 2)`,
//! * `K(r) = q / r^3`, `K'(r) = (dq/dr) / r^3 - 3 q / r^4`,
//! * velocity `u_i = 1/(4 pi) sum_j K alpha_j x d`,
//! * classical stretching
//!   `s_i = 1/(4 pi) sum_j [K alpha_j x alpha_i + (K'/r) (alpha_i . d) alpha_j x d]`.
//!
//! A coincident pair (`r = 0`) contributes its analytic limit: zero velocity and the finite
//! stretching `K(0) alpha_j x alpha_i` with `K(0) = sqrt(2/pi) / (3 sigma^3)`.
//!
//! The cutoff above is the Gaussian's (order 2); [`cores`] holds the Gaussian-based family of
//! order 2, 4 and 6 ([`CoreOrder`]: `q`, `dq/dr` and the pair factors of each) and [`table`]
//! the piecewise polynomials of those factors that the CPU near field evaluates.

use std::f64::consts::PI;

/// `1 / (4 pi)`, the Biot-Savart prefactor.
pub const INV_4PI: f64 = 0.25 / PI;
/// `sqrt(2 / pi)`.
pub const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

pub mod cores;
pub mod table;

pub use cores::CoreOrder;
pub use table::KernelTable;

/// `K(r)` and `K'(r) / r` of one pair of the Gaussian core, given `r^2` and the source core
/// radius `sigma` ([`CoreOrder::factors`] of [`CoreOrder::Second`]).
///
/// Returns `(K, K'/r)`. Both are finite for every `r >= 0` and `sigma > 0`.
#[inline]
pub fn kernel_factors(r2: f64, sigma: f64) -> (f64, f64) {
    CoreOrder::Second.factors(r2, sigma)
}

/// The cutoff function `q(rho)` of the Gaussian core (exposed for tests and diagnostics).
#[inline]
pub fn cutoff(rho: f64) -> f64 {
    CoreOrder::Second.q(rho)
}

#[inline]
pub fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

#[inline]
pub fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Velocity and stretching that source `(xj, alpha_j, sigma_j)` with the Gaussian core induces
/// at target `(xi, alpha_i)`, **without** the `1/(4 pi)` prefactor (callers apply it once at
/// the end): [`pair_interaction_core`] of [`CoreOrder::Second`].
#[inline]
pub fn pair_interaction(
    xi: [f64; 3],
    alpha_i: [f64; 3],
    xj: [f64; 3],
    alpha_j: [f64; 3],
    sigma_j: f64,
) -> ([f64; 3], [f64; 3]) {
    pair_interaction_core(CoreOrder::Second, xi, alpha_i, xj, alpha_j, sigma_j)
}

/// Direct sum of [`pair_interaction`] at targets `xt` (stretching strengths `at`) over sources
/// `xs` of strengths `a`, all of core radius `sigma` (a negligible core: the singular sum), in
/// source order: the reference of the operator tests.
#[cfg(test)]
pub(crate) fn direct_sum(
    xs: &[[f64; 3]],
    a: &[[f64; 3]],
    xt: &[[f64; 3]],
    at: &[[f64; 3]],
    sigma: f64,
) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
    let mut v = vec![[0.0; 3]; xt.len()];
    let mut s = vec![[0.0; 3]; xt.len()];
    for i in 0..xt.len() {
        for j in 0..xs.len() {
            let (dv, ds) = pair_interaction(xt[i], at[i], xs[j], a[j], sigma);
            for c in 0..3 {
                v[i][c] += dv[c];
                s[i][c] += ds[c];
            }
        }
    }
    (v, s)
}

/// Velocity and stretching that source `(xj, alpha_j, sigma_j)` with a core of order `core`
/// induces at target `(xi, alpha_i)`, without the `1/(4 pi)` prefactor.
#[inline]
pub fn pair_interaction_core(
    core: CoreOrder,
    xi: [f64; 3],
    alpha_i: [f64; 3],
    xj: [f64; 3],
    alpha_j: [f64; 3],
    sigma_j: f64,
) -> ([f64; 3], [f64; 3]) {
    let d = [xi[0] - xj[0], xi[1] - xj[1], xi[2] - xj[2]];
    let r2 = dot(d, d);
    let (k, kp_over_r) = core.factors(r2, sigma_j);
    let axd = cross(alpha_j, d);
    let axa = cross(alpha_j, alpha_i);
    let ad = dot(alpha_i, d) * kp_over_r;
    (
        [k * axd[0], k * axd[1], k * axd[2]],
        [
            k * axa[0] + ad * axd[0],
            k * axa[1] + ad * axd[1],
            k * axa[2] + ad * axd[2],
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_and_closed_form_agree_at_the_switch() {
        let sigma: f64 = 0.37;
        for rho in [0.7, 1.0, 1.3] {
            let r2 = (rho * sigma).powi(2);
            let series = CoreOrder::Second.series(rho * rho, sigma);
            let closed = CoreOrder::Second.closed(r2, sigma);
            assert!(
                (series.0 - closed.0).abs() < 1e-14 * series.0.abs(),
                "{rho}"
            );
            assert!(
                (series.1 - closed.1).abs() < 1e-13 * series.1.abs(),
                "{rho}"
            );
        }
    }

    #[test]
    fn far_pair_is_singular_biot_savart() {
        let (k, kp) = kernel_factors(100.0, 0.1);
        assert!((k - 1e-3).abs() < 1e-15);
        assert!((kp - (-3e-5)).abs() < 1e-15);
    }

    #[test]
    fn coincident_pair_has_the_analytic_limit() {
        let sigma = 0.5;
        let (v, s) = pair_interaction([1.0; 3], [0.0, 0.0, 1.0], [1.0; 3], [1.0, 0.0, 0.0], sigma);
        assert_eq!(v, [0.0; 3]);
        let k0 = SQRT_2_OVER_PI / (3.0 * sigma.powi(3));
        // alpha_j x alpha_i = x_hat x z_hat = -y_hat
        assert!((s[1] + k0).abs() < 1e-14 * k0);
        assert!(s.iter().all(|c| c.is_finite()));
    }

    #[test]
    fn derivative_matches_finite_difference() {
        let sigma = 0.8;
        for &r in &[0.05, 0.3, 1.0, 2.5, 7.0] {
            let h = 1e-4 * r;
            let kp = (kernel_factors((r + h) * (r + h), sigma).0
                - kernel_factors((r - h) * (r - h), sigma).0)
                / (2.0 * h);
            let (_, kp_over_r) = kernel_factors(r * r, sigma);
            assert!(
                (kp_over_r * r - kp).abs() < 1e-6 * kp.abs().max(1e-12),
                "r = {r}: {} vs {kp}",
                kp_over_r * r
            );
        }
    }
}
