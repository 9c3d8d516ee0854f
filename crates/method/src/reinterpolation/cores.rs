//! The lattice system of the cores of order 4 and 6 (`evaluation.core`), and the heat kernel
//! that carries their viscous term.
//!
//! # The matrix as a sum of Kronecker products
//!
//! The Gaussian-based core of order `2m` is `zeta(x) = c e^(-s/2) P_m(s)` with `c = (2 pi
//! sigma^2)^(-3/2)` and `s = |x|^2 / sigma^2` (`vortex_fmm::kernel::CoreOrder`; Beale & Majda,
//! J. Comput. Phys. 58 (1985) 188; Winckelmans & Leonard, J. Comput. Phys. 109 (1993) 247).
//! With `s = sx + sy + sz` (`sx = x^2 / sigma^2`) and `P_m(s) = sum_n p_n s^n`, the multinomial
//! expansion gives
//!
//! `zeta(x) = c sum_{a+b+d < m} C_abd g_a(x) g_b(y) g_d(z)`,  `g_a(x) = e^(-sx/2) sx^a`,
//! `C_abd = p_{a+b+d} (a+b+d)! / (a! b! d!)`,
//!
//! so on a regular lattice (weights truncated at `cutoff` core radii per axis, as the Gaussian's
//! [`super::apply_gaussian`]) the matrix `A` is a sum of `m (m+1) (m+2) / 6` Kronecker products
//! of 1-D banded (free space) or circulant (periodic) matrices: one for the Gaussian, 4 for the
//! fourth-order core, 10 for the sixth. [`apply_core`] applies it by 1-D passes. It is not one
//! Kronecker product, so the line-by-line inverse of [`super::separable`] does not apply:
//!
//! * periodic: `A` is still diagonal in the 3-D discrete Fourier basis, with the eigenvalues
//!   `c sum C_abd S_a(kx) S_b(ky) S_d(kz)`, `S_a(k) = sum_o w^a_o cos(2 pi k o / n)` the
//!   eigenvalues of the 1-D factors ([`FourierSolver`]: a 3-D FFT, a division, the inverse);
//! * free space: conjugate gradients with [`apply_core`] (`reinterpolation.solver = "cg"`).
//!
//! The continuous transform of every core of the family is positive (`e^(-x) sum_{j<m} x^j /
//! j!`), so the lattice matrix is positive definite up to the truncation of its weights; the
//! solve refuses a symbol whose range exceeds [`MAX_CONDITION`].
//!
//! # The viscous term: the lattice's heat kernel
//!
//! Core spreading (`sigma^2 = sigma0^2 + 2 nu t`) solves the heat equation only for the
//! Gaussian: the heat kernel turns the transform `e^(-x) sum_{j<m} x^j / j!` of a higher-order
//! core into `e^(-x - nu k^2 t) sum_{j<m} x^j / j!`, which is no core of the family. For the
//! cores of order 4 and 6 the cores therefore keep `sigma0`, the particles move inviscidly
//! between two re-interpolations, and each re-interpolation applies the exact heat kernel of the
//! time `tau` since the last one to the interpolated vorticity: the lattice strengths solve
//! `A beta = H_tau F omega` with `H_tau(k) = exp(-nu |k|^2 tau)` (separable:
//! [`heat_transfers`]). This is the viscous splitting of Chorin (J. Fluid Mech. 57 (1973) 785;
//! convergence: Beale & Majda, Math. Comp. 37 (1981) 243) with the diffusion substep solved
//! exactly on the lattice, as in the vortex-in-cell methods that diffuse on the grid (Cottet &
//! Koumoutsakos, *Vortex Methods: Theory and Practice*, Cambridge 2000, Sec. 6.3); its
//! splitting error is first order in `tau`. The re-interpolation criterion
//! `reinterpolation.ratio` keeps its meaning: a reset when a Gaussian would have spread to
//! `ratio sigma0` (`tau = sigma0^2 (ratio^2 - 1) / (2 nu)`).

use rayon::prelude::*;
use rustfft::num_complex::Complex64;
use rustfft::FftPlanner;
use std::f64::consts::PI;
use vortex_fmm::kernel::CoreOrder;

use super::Lattice;

/// Largest ratio of the largest to the smallest eigenvalue of the periodic 3-D symbol that the
/// direct solve accepts (the Gaussian's per-axis bound `1e8`, cubed, is far beyond; at overlap 1
/// the Gaussian's symbol spans 3.4e5).
pub const MAX_CONDITION: f64 = 1e12;

/// One term `C g_a(x) g_b(y) g_d(z)` of the core's expansion.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Term {
    pub powers: [usize; 3],
    pub coefficient: f64,
}

fn factorial(n: usize) -> f64 {
    (1..=n).map(|i| i as f64).product()
}

/// The terms of the core's separable expansion (module documentation).
pub fn terms(core: CoreOrder) -> Vec<Term> {
    let p = core.p_coefficients();
    let mut out = Vec::new();
    for (n, &pn) in p.iter().enumerate() {
        for a in 0..=n {
            for b in 0..=n - a {
                let d = n - a - b;
                out.push(Term {
                    powers: [a, b, d],
                    coefficient: pn * factorial(n) / (factorial(a) * factorial(b) * factorial(d)),
                });
            }
        }
    }
    out
}

/// The 1-D weights `w^a_o = e^(-t/2) t^a`, `t = (o h / sigma)^2`, `|o| <= floor(cutoff sigma /
/// h)`.
pub fn axis_weights_power(h: f64, sigma: f64, cutoff: f64, a: usize) -> Vec<f64> {
    let m = (cutoff * sigma / h).floor() as i64;
    (-m..=m)
        .map(|o| {
            let t = (o as f64 * h / sigma).powi(2);
            (-0.5 * t).exp() * t.powi(a as i32)
        })
        .collect()
}

/// `y = w * x` along `axis` of a lattice field (wrapped when periodic, zero outside in free
/// space).
fn convolve_axis(lat: &Lattice, axis: usize, w: &[f64], x: &[f64]) -> Vec<f64> {
    let [nx, ny, nz] = lat.dims;
    let m = (w.len() / 2) as i64;
    let n = lat.dims[axis] as i64;
    let stride = match axis {
        0 => ny * nz,
        1 => nz,
        _ => 1,
    };
    let per = lat.periodic;
    let mut y = vec![0.0; x.len()];
    y.par_chunks_mut(ny * nz).enumerate().for_each(|(i, slab)| {
        for (r, out) in slab.iter_mut().enumerate() {
            let idx = i * ny * nz + r;
            let coord = [i, r / nz, r % nz][axis] as i64;
            let base = idx as i64 - coord * stride as i64;
            let mut s = 0.0;
            for (t, wo) in w.iter().enumerate() {
                let q = coord + t as i64 - m;
                let q = if per {
                    q.rem_euclid(n)
                } else if q < 0 || q >= n {
                    continue;
                } else {
                    q
                };
                s += wo * x[(base + q * stride as i64) as usize];
            }
            *out = s;
        }
    });
    debug_assert_eq!(x.len(), nx * ny * nz);
    y
}

/// `y = A x` on the lattice for blobs of the core `core` with radius `sigma`, weights truncated
/// at `cutoff * sigma` per axis: the Gaussian's [`super::apply_gaussian`], else the sum of
/// Kronecker products of the module documentation.
pub fn apply_core(lat: &Lattice, core: CoreOrder, sigma: f64, cutoff: f64, x: &[f64]) -> Vec<f64> {
    if core == CoreOrder::Second {
        return super::apply_gaussian(lat, sigma, cutoff, x);
    }
    let m = core.m();
    let w: Vec<Vec<f64>> = (0..m)
        .map(|a| axis_weights_power(lat.h, sigma, cutoff, a))
        .collect();
    let norm = (2.0 * PI * sigma * sigma).powf(-1.5);
    let ts = terms(core);
    // z passes by power d, then y passes by (b, d), then the x passes summed with C_abd
    let z: Vec<Vec<f64>> = (0..m).map(|d| convolve_axis(lat, 2, &w[d], x)).collect();
    let mut out = vec![0.0; x.len()];
    for b in 0..m {
        for (d, zd) in z.iter().enumerate().take(m - b) {
            let yz = convolve_axis(lat, 1, &w[b], zd);
            for (a, wa) in w.iter().enumerate().take(m - b - d) {
                let c = ts
                    .iter()
                    .find(|t| t.powers == [a, b, d])
                    .map(|t| t.coefficient)
                    .unwrap_or(0.0);
                let xyz = convolve_axis(lat, 0, wa, &yz);
                out.par_iter_mut()
                    .zip(xyz.par_iter())
                    .for_each(|(o, v)| *o += norm * c * v);
            }
        }
    }
    out
}

/// The eigenvalues `S_a(k) = sum_o w^a_o cos(2 pi k o / n)`, `k = 0..n`, of the periodic 1-D
/// factor of power `a`.
fn axis_symbol(n: usize, w: &[f64]) -> Vec<f64> {
    let m = (w.len() / 2) as f64;
    (0..n)
        .map(|k| {
            w.iter()
                .enumerate()
                .map(|(t, wo)| wo * (2.0 * PI * k as f64 * (t as f64 - m) / n as f64).cos())
                .sum()
        })
        .collect()
}

/// In-place 3-D complex DFT of a field of `dims` (z fastest), forward or inverse (unnormalised).
fn fft3(data: &mut [Complex64], dims: [usize; 3], inverse: bool) {
    let [nx, ny, nz] = dims;
    let mut planner = FftPlanner::new();
    let plan = |n: usize, p: &mut FftPlanner<f64>| {
        if inverse {
            p.plan_fft_inverse(n)
        } else {
            p.plan_fft_forward(n)
        }
    };
    let (fx, fy, fz) = (
        plan(nx, &mut planner),
        plan(ny, &mut planner),
        plan(nz, &mut planner),
    );
    data.par_chunks_mut(nz).for_each(|line| fz.process(line));
    data.par_chunks_mut(ny * nz).for_each(|slab| {
        let mut line = vec![Complex64::default(); ny];
        for k in 0..nz {
            for (j, v) in line.iter_mut().enumerate() {
                *v = slab[j * nz + k];
            }
            fy.process(&mut line);
            for (j, v) in line.iter().enumerate() {
                slab[j * nz + k] = *v;
            }
        }
    });
    let slab = ny * nz;
    let cols: Vec<Vec<Complex64>> = (0..slab)
        .into_par_iter()
        .map(|c| {
            let mut line: Vec<Complex64> = (0..nx).map(|i| data[i * slab + c]).collect();
            fx.process(&mut line);
            line
        })
        .collect();
    for (c, line) in cols.into_iter().enumerate() {
        for (i, v) in line.into_iter().enumerate() {
            data[i * slab + c] = v;
        }
    }
}

/// The direct solve of the periodic lattice system of a core of any order: `1 / lambda(k)` of
/// the 3-D symbol and the 3-D DFT.
#[derive(Debug)]
pub struct FourierSolver {
    dims: [usize; 3],
    inv_symbol: Vec<f64>,
}

impl FourierSolver {
    /// The inverse symbol of the periodic lattice `dims` (spacing `h`) for blobs of `core` with
    /// radius `sigma`, truncated at `cutoff` core radii per axis; refused with the reason when
    /// its range exceeds [`MAX_CONDITION`] or it is not positive.
    pub fn new(
        dims: [usize; 3],
        h: f64,
        sigma: f64,
        cutoff: f64,
        core: CoreOrder,
    ) -> Result<Self, String> {
        let m = core.m();
        let axes: Vec<[Vec<f64>; 3]> = (0..m)
            .map(|a| {
                let w = axis_weights_power(h, sigma, cutoff, a);
                std::array::from_fn(|c| axis_symbol(dims[c], &w))
            })
            .collect();
        let ts = terms(core);
        let norm = (2.0 * PI * sigma * sigma).powf(-1.5);
        let [nx, ny, nz] = dims;
        let symbol: Vec<f64> = (0..nx * ny * nz)
            .into_par_iter()
            .map(|idx| {
                let k = [idx / (ny * nz), (idx / nz) % ny, idx % nz];
                norm * ts
                    .iter()
                    .map(|t| {
                        t.coefficient * (0..3).map(|c| axes[t.powers[c]][c][k[c]]).product::<f64>()
                    })
                    .sum::<f64>()
            })
            .collect();
        let max = symbol.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = symbol.iter().copied().fold(f64::INFINITY, f64::min);
        if !(min > max / MAX_CONDITION) {
            return Err(format!(
                "the periodic lattice matrix of the core of order {core} is not safely positive \
                 definite: eigenvalues in [{min:.3e}, {max:.3e}] (sigma/h = {:.3})",
                sigma / h
            ));
        }
        Ok(Self {
            dims,
            inv_symbol: symbol.iter().map(|s| 1.0 / s).collect(),
        })
    }

    /// `A^-1 b` for a scalar field stored `(i * ny + j) * nz + k`.
    pub fn solve(&self, b: &[f64]) -> Vec<f64> {
        let n: usize = self.dims.iter().product();
        assert_eq!(b.len(), n);
        let mut c: Vec<Complex64> = b.iter().map(|&v| Complex64::new(v, 0.0)).collect();
        fft3(&mut c, self.dims, false);
        let scale = 1.0 / n as f64;
        c.par_iter_mut()
            .zip(self.inv_symbol.par_iter())
            .for_each(|(v, s)| *v *= s * scale);
        fft3(&mut c, self.dims, true);
        c.iter().map(|v| v.re).collect()
    }
}

/// `F(k) H(k) / lambda(k)` of the periodic `n^3` lattice on the half spectrum of a real 3-D FFT
/// (`(kx n + ky) (n/2 + 1) + kz`, the layout of `vortex_spectral::fft::Fft3` and of cuFFT's
/// D2Z): the inverse symbol of the lattice matrix of `core` ([`FourierSolver::new`]) times the
/// filter and the heat kernel of `diffusion = nu tau` (box length `n h`), i.e. the one
/// pointwise factor of a Fourier-space lattice solve (a device solve multiplies the D2Z
/// spectrum of the lattice sums by it and divides by `n^3` after the Z2D).
pub fn inverse_symbol_half(
    n: usize,
    h: f64,
    sigma: f64,
    cutoff: f64,
    core: CoreOrder,
    filter: &super::LatticeFilter,
    diffusion: f64,
) -> Result<Vec<f64>, String> {
    let full = FourierSolver::new([n; 3], h, sigma, cutoff, core)?;
    let f = filter.axis_transfers(n);
    let heat = heat_transfers(n, n as f64 * h, diffusion);
    let g: Vec<f64> = f.iter().zip(&heat).map(|(a, b)| a * b).collect();
    let nh = n / 2 + 1;
    Ok((0..n * n * nh)
        .map(|i| {
            let (kx, ky, kz) = (i / (n * nh), (i / nh) % n, i % nh);
            full.inv_symbol[(kx * n + ky) * n + kz] * g[kx] * g[ky] * g[kz]
        })
        .collect())
}

/// The per-axis factors `exp(-nu k^2 tau)` of the heat kernel over `diffusion = nu tau`
/// (length^2) on a periodic axis of `n` points and length `box_length` (`k = 2 pi min(i, n - i)
/// / L`): the transfer function of the viscous substep (module documentation).
pub fn heat_transfers(n: usize, box_length: f64, diffusion: f64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let k = 2.0 * PI * i.min(n - i) as f64 / box_length;
            (-diffusion * k * k).exp()
        })
        .collect()
}

#[cfg(test)]
mod tests;
