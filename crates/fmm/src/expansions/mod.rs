//! Expansion storage, solid harmonics and Wigner rotations.
//!
//! # Storage
//! A cell's multipole or local expansion holds three scalar expansions, one per Cartesian
//! component `c` of the vortex strength, component-major: entry `c * ncoef(p) + index(n, m)`.
//! Only `m >= 0` is stored; the potentials are real, so `X_n^{-m} = (-1)^m conj(X_n^m)`.
//!
//! # Normalization
//! Stored coefficients are those of the Racah-normalized spherical harmonics
//! `C_n^m = sqrt((n-m)!/(n+m)!) P_n^m(cos t) e^{imf}` (Condon-Shortley phase included), i.e.
//! exactly the core paper's Eq. 12-14 (Yokota et al. 2009; their `Y_n^m` lacks the sign
//! `(-1)^m`):
//!
//! * multipole about `x_c`: `phi(x) = sum_{n<=p, |m|<=n} M_n^m C_n^m(r^) / r^{n+1}`, `r = x - x_c`,
//!   `M_n^m = sum_j a_j rho_j^n conj(C_n^m(rho^_j))` (`rho_j = x_j - x_c`; paper Eq. 12);
//! * local about `x_c`: `phi(x) = sum_{n<=p, |m|<=n} L_n^m r^n C_n^m(r^)` (paper Eq. 13).
//!
//! In this basis a rotation acts by the (real, orthogonal) Wigner d-matrix and a phase
//! (paper Eq. 30-32), so the rotation-based translations need no rescaling. The translation
//! theorems are written in the scaled solid harmonics `R_n^m`, `I_n^m` of [`harmonics`]
//! (Epton & Dembart 1995; Dehnen 2014, Eq. 40-49), related to the stored coefficients by
//! `M_n^m = K_n^m Mhat_n^m` and `L_n^m = conj(Lhat_n^m) / K_n^m` with
//! `K_n^m = sqrt((n-m)!(n+m)!)`, where `phi = sum Mhat I(r) = sum Lhat conj(R(r))`.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

pub mod harmonics;
pub mod rotation;

pub use num_complex::Complex64;

/// Number of stored complex coefficients per scalar expansion of order `p` (`m >= 0` only, the
/// field is real): `(p+1)(p+2)/2`.
#[inline(always)]
pub const fn ncoef(p: usize) -> usize {
    (p + 1) * (p + 2) / 2
}

/// Index of `(n, m)`, `0 <= m <= n <= p`, within one scalar expansion: `n(n+1)/2 + m`.
#[inline(always)]
pub const fn index(n: usize, m: usize) -> usize {
    n * (n + 1) / 2 + m
}

/// One cell's expansion = 3 scalar expansions (components x, y, z of the strength),
/// component-major: `[c * ncoef(p) + index(n, m)]`.
#[inline(always)]
pub const fn expansion_len(p: usize) -> usize {
    3 * ncoef(p)
}
