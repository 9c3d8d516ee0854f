//! Viscous diffusion by the core spreading method (core paper Eq. 10-11).
//!
//! A Gaussian blob `alpha zeta_sigma` with `zeta_sigma(x) = exp(-|x|^2 / 2 sigma^2) /
//! ((2 pi)^{3/2} sigma^3)` solves the heat equation `d omega/dt = nu lap omega` exactly when its
//! variance grows as `sigma^2(t) = sigma_0^2 + 2 nu (t - t_reset)` (Eq. 11, counted from the last
//! reset of the cores by re-interpolation). Applied to every particle at every stage, this is the
//! diffusion half of the fractional step; the convergence of the method needs the cores to be reset
//! to a small size now and then ([`crate::reinterpolation`]).

use crate::particles::Particles;

/// `sqrt(sigma0^2 + 2 nu elapsed)`.
#[inline]
pub fn sigma_at(sigma0: f64, nu: f64, elapsed: f64) -> f64 {
    (sigma0 * sigma0 + 2.0 * nu * elapsed).sqrt()
}

/// Sets every core radius to its value `elapsed = t - t_reset` after the last reset.
pub fn apply(p: &mut Particles, nu: f64, elapsed: f64) {
    for (s, &s0) in p.sigma.iter_mut().zip(&p.sigma0) {
        *s = sigma_at(s0, nu, elapsed);
    }
}

/// Time after a reset at which the cores reach `ratio * sigma0` (infinite for `nu = 0`).
pub fn time_to_ratio(sigma0: f64, nu: f64, ratio: f64) -> f64 {
    if nu <= 0.0 {
        f64::INFINITY
    } else {
        sigma0 * sigma0 * (ratio * ratio - 1.0) / (2.0 * nu)
    }
}

/// Normalised Gaussian `zeta_sigma` at squared distance `r2` (core paper Eq. 4).
#[inline]
pub fn zeta(r2: f64, sigma: f64) -> f64 {
    const C: f64 = 0.063_493_635_934_240_97; // (2 pi)^{-3/2}
    C / (sigma * sigma * sigma) * (-0.5 * r2 / (sigma * sigma)).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeta_is_normalised() {
        // midpoint sum over a fine grid
        let (s, h) = (0.3, 0.03);
        let m = (6.0 * s / h) as i64;
        let mut sum = 0.0;
        for i in -m..=m {
            for j in -m..=m {
                for k in -m..=m {
                    let r2 = ((i * i + j * j + k * k) as f64) * h * h;
                    sum += zeta(r2, s) * h * h * h;
                }
            }
        }
        assert!((sum - 1.0).abs() < 1e-6, "{sum}");
    }

    #[test]
    fn spreading_follows_eq_11() {
        let mut p = Particles::new(vec![[0.0; 3]; 2], vec![[1.0, 0.0, 0.0]; 2], 0.1);
        apply(&mut p, 0.01, 0.5);
        assert!((p.sigma[0] - (0.01f64 + 0.01).sqrt()).abs() < 1e-15);
        let t = time_to_ratio(0.1, 0.01, 2.0);
        assert!((sigma_at(0.1, 0.01, t) - 0.2).abs() < 1e-15);
    }
}
