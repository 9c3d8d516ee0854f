//! From the spectrum of the fine grid to the lattice: deconvolution by the kernel's transform,
//! the Gaussian's transform, and the folding of the fine modes onto the lattice's (the
//! aliasing of sampling at the lattice points), then the lattice system in Fourier space.
//!
//! With `B(q)` the unnormalised DFT of the spread grid (`m` points per axis, spacing `h_f`)
//! and `W(k)` that of the Gaussian sums at the `n` lattice points (spacing `h`), both with the
//! origin at the box's corner `-L/2` (parent module):
//!
//! `W(k) = sum_{q = k mod n, -m/2 < q <= m/2} d(qx) d(qy) d(qz) B(q)`,
//! `d(q) = (h_f / h) exp(-(2 pi q sigma / L)^2 / 2) / phi_hat(2 pi q / L)`,
//!
//! `phi_hat(k) = alpha T(k alpha)` ([`super::kernel`]), and the strengths of the lattice system
//! `A beta = F omega` ([`crate::reinterpolation::separable`], circulant: eigenvalues
//! `c S(kx) S(ky) S(kz)`, transfer function `F` of [`crate::reinterpolation::filter`]) are
//!
//! `beta = IDFT[ W(k) F(k) / (c S(kx) S(ky) S(kz)) ]`,
//!
//! the host solve's three axis passes in one (the device's `SlabFourier::solve_rbf`), with no
//! lattice value in between. The half spectra are those of `vortex_spectral::fft::Fft3`
//! (`(kx n + ky)(n/2 + 1) + kz`); a fine mode with `qz < 0` is the conjugate of `-q`.

use super::kernel::{EsKernel, KernelTransform};
use crate::reinterpolation::separable::{axis_weights, AxisSolver};
use crate::reinterpolation::LatticeFilter;
use num_complex::Complex64;
use rayon::prelude::*;
use std::f64::consts::PI;
use vortex_spectral::fft::Fft3;

/// `d(q)` of one core radius, indexed by `q mod m`, `q` in `(-m/2, m/2]`.
pub fn axis_factors(
    kernel: &EsKernel,
    m: usize,
    n: usize,
    box_length: f64,
    sigma: f64,
) -> Vec<f64> {
    let hf = box_length / m as f64;
    let alpha = 0.5 * kernel.width as f64 * hf;
    let tr = KernelTransform::new(kernel, PI * kernel.width as f64 * 0.5);
    let ratio = n as f64 / m as f64; // h_f / h
    (0..m)
        .map(|i| {
            let q = if i <= m / 2 {
                i as f64
            } else {
                i as f64 - m as f64
            };
            let k = 2.0 * PI * q / box_length;
            ratio * (-0.5 * (k * sigma).powi(2)).exp() / (alpha * tr.at(k * alpha))
        })
        .collect()
}

/// The fine modes `q` (signed) that fold onto lattice mode `k` (`0 <= k < n`).
pub fn aliases(k: usize, n: usize, m: usize) -> Vec<i64> {
    let (n, m, k) = (n as i64, m as i64, k as i64);
    let reach = m / n + 2;
    (-reach..=reach)
        .map(|j| k + j * n)
        .filter(|&q| 2 * q > -m && 2 * q <= m)
        .collect()
}

/// `out += W` of one fine spectrum `spec` (`m^2 (m/2 + 1)`) with the factors `d`, on the
/// lattice half spectrum `out` (`n^2 (n/2 + 1)`).
pub fn fold(spec: &[Complex64], m: usize, d: &[f64], n: usize, out: &mut [Complex64]) {
    let (mh, nh) = (m / 2 + 1, n / 2 + 1);
    assert_eq!(spec.len(), m * m * mh);
    assert_eq!(out.len(), n * n * nh);
    let al: Vec<Vec<i64>> = (0..n).map(|k| aliases(k, n, m)).collect();
    let wrap = |q: i64| q.rem_euclid(m as i64) as usize;
    out.par_chunks_mut(n * nh)
        .enumerate()
        .for_each(|(kx, plane)| {
            for ky in 0..n {
                for kz in 0..nh {
                    let mut s = Complex64::new(0.0, 0.0);
                    for &qx in &al[kx] {
                        for &qy in &al[ky] {
                            let dxy = d[wrap(qx)] * d[wrap(qy)];
                            for &qz in &al[kz] {
                                let v = if qz >= 0 {
                                    spec[(wrap(qx) * m + wrap(qy)) * mh + qz as usize]
                                } else {
                                    spec[(wrap(-qx) * m + wrap(-qy)) * mh + (-qz) as usize].conj()
                                };
                                s += v * (dxy * d[wrap(qz)]);
                            }
                        }
                    }
                    plane[ky * nh + kz] += s;
                }
            }
        });
}

/// `F(k) / S(k)`, `k = 0..n`, of the periodic lattice (spacing `h`, core `sigma0`, weights
/// truncated at `cutoff` core radii, as the host and device solves), or why the system is not
/// safely positive definite.
pub fn inverse_eigenvalues(
    n: usize,
    h: f64,
    sigma0: f64,
    cutoff: f64,
    filter: &LatticeFilter,
) -> Result<Vec<f64>, String> {
    match AxisSolver::new(n, &axis_weights(h, sigma0, cutoff), true)?.filtered(filter) {
        AxisSolver::Circulant { inv_eig, .. } => Ok(inv_eig),
        AxisSolver::Banded { .. } => Err("a periodic axis gave a banded factor".into()),
    }
}

/// The lattice strengths `beta` (`n^3` points, lattice order) of the half spectrum `w` of the
/// Gaussian sums of one component: `W F / (c S S S)`, inverse FFT. `fft` is of size `n`;
/// `w` is destroyed.
pub fn solve_spectrum(fft: &Fft3, w: &mut [Complex64], inv_eig: &[f64], sigma0: f64) -> Vec<f64> {
    let n = fft.m();
    let nh = n / 2 + 1;
    let c = (2.0 * PI * sigma0 * sigma0).powf(-1.5);
    let scale = 1.0 / (c * (n as f64).powi(3));
    w.par_chunks_mut(n * nh)
        .enumerate()
        .for_each(|(kx, plane)| {
            for ky in 0..n {
                for kz in 0..nh {
                    plane[ky * nh + kz] *= scale * inv_eig[kx] * inv_eig[ky] * inv_eig[kz];
                }
            }
        });
    let mut out = vec![0.0; n * n * n];
    fft.inverse(w, &mut out);
    out
}

/// The lattice values of the half spectrum `w` (the Gaussian sums themselves: the test's and
/// the diagnostics' view). `w` is destroyed.
pub fn lattice_values(fft: &Fft3, w: &mut [Complex64]) -> Vec<f64> {
    let n = fft.m();
    let scale = 1.0 / (n as f64).powi(3);
    let mut out = vec![0.0; n * n * n];
    fft.inverse(w, &mut out);
    out.iter_mut().for_each(|v| *v *= scale);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_cover_the_fine_band_once() {
        for (n, m) in [(16usize, 40usize), (16, 56), (12, 24), (10, 16)] {
            let mut all: Vec<i64> = (0..n).flat_map(|k| aliases(k, n, m)).collect();
            all.sort();
            let want: Vec<i64> = (-(m as i64) / 2 + 1..=m as i64 / 2).collect();
            assert_eq!(all, want, "n {n} m {m}");
        }
    }
}
