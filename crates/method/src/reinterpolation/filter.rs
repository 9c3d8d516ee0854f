//! The transfer function of the periodic lattice solve (`[reinterpolation] filter`).
//!
//! The periodic system `A beta = omega` is diagonal in the discrete Fourier basis
//! ([`super::separable`]): `beta_hat(k) = omega_hat(k) / (c S(kx) S(ky) S(kz))`. At overlap
//! `sigma / h = 0.8` the axis eigenvalue `S` at the Nyquist wavenumber is about 12 times smaller
//! than at `k = 0`, so every re-interpolation multiplies the lattice-scale content of the
//! interpolated vorticity (the part that carries the quadrature and truncation errors of the
//! Gaussian sums of the distorted particle set) by up to `12^3` relative to the resolved scales.
//! In transitional flow (Taylor-Green at Re = 1600) that feedback grows until the energy check
//! stops the run. The filter multiplies the inverse eigenvalues by a separable transfer function
//!
//! `F(k) = f(kx) f(ky) f(kz)`,  `f(k) = exp(-a (|k| / k_N)^m)`,  `k_N = n / 2` (integer wavenumbers),
//!
//! so `A beta = F omega` instead of `A beta = omega`: the blob field interpolates the filtered
//! vorticity. `a = 36, m = 36` is the filter of T. Y. Hou and R. Li, "Computing nearly singular
//! solutions using pseudo-spectral methods", J. Comput. Phys. 226 (2007) 379-397 (their
//! `exp(-36 (|k|/N)^36)`): it leaves the wavenumbers below `0.7 k_N` within 0.01 % of 1
//! (`f(2/3 k_N) = 0.99998`, `f(0.8 k_N) = 0.988`, `f(0.9 k_N) = 0.44`) and removes the Nyquist
//! mode to `exp(-36)`.
//! Lower `m` damps a wider band (`m = 8`: `f(k_N / 2) = 0.87`).

use serde::{Deserialize, Serialize};

/// The transfer function of the periodic lattice solve (free-space lattices are solved exactly
/// by the banded factors, with no filter).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum LatticeFilter {
    /// Exact interpolation, `F = 1`.
    None,
    /// `f(k) = exp(-strength (|k| / k_N)^order)` on each axis.
    Exponential {
        /// `a` (dimensionless; `f(k_N) = exp(-a)`).
        strength: f64,
        /// `m` (even or odd, `>= 2`).
        order: f64,
    },
}

impl Default for LatticeFilter {
    /// The filter of Hou & Li (2007), `a = 36, m = 36`: see the module documentation and
    /// validation/taylor-green-1600/README.md for the choice.
    fn default() -> Self {
        Self::Exponential {
            strength: 36.0,
            order: 36.0,
        }
    }
}

impl LatticeFilter {
    /// `f(k)` for the integer wavenumber index `k = 0..n` of an axis of `n` points
    /// (`|k|` is `min(k, n - k)`).
    pub fn axis_transfer(&self, k: usize, n: usize) -> f64 {
        match *self {
            Self::None => 1.0,
            Self::Exponential { strength, order } => {
                let kk = k.min(n - k) as f64;
                let k_nyquist = 0.5 * n as f64;
                (-strength * (kk / k_nyquist).powf(order)).exp()
            }
        }
    }

    /// `f(k)`, `k = 0..n`.
    pub fn axis_transfers(&self, n: usize) -> Vec<f64> {
        (0..n).map(|k| self.axis_transfer(k, n)).collect()
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Self::None)
    }

    /// Why the parameters are out of range, if they are.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            Self::None => Ok(()),
            Self::Exponential { strength, order } => {
                if !(strength > 0.0 && strength <= 700.0) {
                    Err(format!(
                        "the strength a of exp(-a (k/k_N)^m) must lie in (0, 700], got {strength}"
                    ))
                } else if !(2.0..=200.0).contains(&order) {
                    Err(format!(
                        "the order m of exp(-a (k/k_N)^m) must lie in [2, 200], got {order}"
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hou_li_values() {
        let f = LatticeFilter::default();
        let n = 30;
        assert_eq!(f.axis_transfer(0, n), 1.0);
        assert!((f.axis_transfer(15, n) - (-36.0f64).exp()).abs() < 1e-20);
        // symmetric in k -> n - k
        for k in 1..n {
            assert_eq!(f.axis_transfer(k, n), f.axis_transfer(n - k, n));
        }
        assert!((f.axis_transfer(10, n) - 1.0).abs() < 1e-4); // 2/3 k_N
        assert!(LatticeFilter::None
            .axis_transfers(7)
            .iter()
            .all(|&v| v == 1.0));
        assert!(LatticeFilter::Exponential {
            strength: 36.0,
            order: 1.0
        }
        .check()
        .is_err());
    }
}
