//! Direct solve of the lattice interpolation system `A beta = omega` by its tensor structure.
//!
//! On a regular lattice the truncated Gaussian matrix of [`super::apply_gaussian`] is a Kronecker
//! product, `A = c (T_x ⊗ T_y ⊗ T_z)` with `c = (2 pi sigma^2)^(-3/2)` and `T` the 1-D matrix of
//! the weights `w_o = exp(-(o h)^2 / (2 sigma^2))`, `|o| <= m = floor(cutoff sigma / h)`, so
//! `A^-1 = c^-1 (T_x^-1 ⊗ T_y^-1 ⊗ T_z^-1)`: one 1-D solve along every lattice line of each axis.
//! * Free space: `T` is symmetric, banded (bandwidth `m`) and Toeplitz; it is factorised once by
//!   a banded Cholesky `T = L L^T` (`O(n m^2)`), each line costs `O(n m)`.
//! * Periodic: the weights wrap around the axis, `T` is circulant and diagonal in the discrete
//!   Fourier basis with the real eigenvalues `S(k) = sum_o w_o cos(2 pi k o / n)`; each line is
//!   an FFT, a division by `S` and an inverse FFT (`rustfft`).
//!
//! `S` is a sampled theta function: for `sigma / h = 1` it ranges over `[0.036, 2.51]` per axis,
//! so the 3-D condition number is about `(70)^3 = 3.4e5` and the solve is accurate to round-off
//! times that. The result is a fixed sequence of floating-point operations (no iteration count
//! that could change with the last bits of the input), so rank counts and thread counts change
//! it only by the conditioning times round-off. The system stops being positive definite in
//! floating point when `sigma / h` is large (about 2, where `min S` reaches the truncation of the
//! weights); that is reported, not hidden.
//!
//! A periodic solve may carry a transfer function ([`super::filter::LatticeFilter`]): the inverse
//! eigenvalues `1 / S(k)` of each axis multiplied by `f(k)` ([`AxisSolver::filtered`], the
//! device's one-pass solve), or `F` applied first ([`SeparableSolver::transfer`]) and the exact
//! solve after it (the host, which measures the residual against `F omega`).

use super::filter::LatticeFilter;
use rayon::prelude::*;
use rustfft::num_complex::Complex64;
use rustfft::{Fft, FftPlanner};
use std::sync::Arc;

/// Condition number of the 1-D factor beyond which the system is refused (round-off times
/// `kappa^3` would swamp the result).
const MAX_AXIS_CONDITION: f64 = 1e8;

/// The 1-D truncated Gaussian weights `w_o`, `o = -m..=m`.
pub fn axis_weights(h: f64, sigma: f64, cutoff: f64) -> Vec<f64> {
    let m = (cutoff * sigma / h).floor() as i64;
    (-m..=m)
        .map(|o| (-0.5 * (o as f64 * h / sigma).powi(2)).exp())
        .collect()
}

/// Inverse of the 1-D factor `T` of one axis.
#[derive(Clone)]
pub enum AxisSolver {
    /// Banded Cholesky factor: `l[i * (b + 1) + k] = L(i, i - k)`, `k = 0..=b`.
    Banded { n: usize, b: usize, l: Vec<f64> },
    /// `1 / S(k)` and the FFT pair of length `n`.
    Circulant {
        n: usize,
        inv_eig: Vec<f64>,
        forward: Arc<dyn Fft<f64>>,
        inverse: Arc<dyn Fft<f64>>,
    },
}

impl std::fmt::Debug for AxisSolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Banded { n, b, .. } => write!(f, "Banded {{ n: {n}, b: {b} }}"),
            Self::Circulant { n, .. } => write!(f, "Circulant {{ n: {n} }}"),
        }
    }
}

impl AxisSolver {
    /// Factorises the 1-D matrix of `n` points with the weights `w` (`w.len() = 2 m + 1`).
    /// Fails with the reason when it is not (numerically) positive definite.
    pub fn new(n: usize, w: &[f64], periodic: bool) -> Result<Self, String> {
        assert!(n > 0 && w.len() % 2 == 1);
        let m = w.len() / 2;
        if periodic {
            let eig: Vec<f64> = (0..n)
                .map(|k| {
                    w.iter()
                        .enumerate()
                        .map(|(t, wo)| {
                            let o = t as f64 - m as f64;
                            wo * (2.0 * std::f64::consts::PI * (k as f64) * o / n as f64).cos()
                        })
                        .sum()
                })
                .collect();
            let max = eig.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let min = eig.iter().copied().fold(f64::INFINITY, f64::min);
            if !(min > max / MAX_AXIS_CONDITION) {
                return Err(format!(
                    "the periodic lattice matrix is not safely positive definite: eigenvalues of \
                     one axis in [{min:.3e}, {max:.3e}]"
                ));
            }
            let mut planner = FftPlanner::new();
            Ok(Self::Circulant {
                n,
                inv_eig: eig.iter().map(|e| 1.0 / e).collect(),
                forward: planner.plan_fft_forward(n),
                inverse: planner.plan_fft_inverse(n),
            })
        } else {
            let b = m.min(n - 1);
            let mut l = vec![0.0; n * (b + 1)];
            let at = |i: usize, k: usize| i * (b + 1) + k; // L(i, i - k)
            let mut diag_min = f64::INFINITY;
            let mut diag_max = 0.0f64;
            for i in 0..n {
                for j in i.saturating_sub(b)..=i {
                    // T(i, j) - sum_{q < j} L(i, q) L(j, q), q within both bands
                    let mut s = w[m + (i - j)];
                    for q in i.saturating_sub(b)..j {
                        s -= l[at(i, i - q)] * l[at(j, j - q)];
                    }
                    if i == j {
                        if !(s > w[m] / MAX_AXIS_CONDITION) {
                            return Err(format!(
                                "the free-space lattice matrix is not safely positive definite \
                                 (pivot {s:.3e} at point {i} of {n})"
                            ));
                        }
                        let d = s.sqrt();
                        diag_min = diag_min.min(d);
                        diag_max = diag_max.max(d);
                        l[at(i, 0)] = d;
                    } else {
                        l[at(i, i - j)] = s / l[at(j, 0)];
                    }
                }
            }
            Ok(Self::Banded { n, b, l })
        }
    }

    /// The inverse eigenvalues of a periodic axis multiplied by the transfer function `filter`
    /// (free-space factors are returned unchanged: they have no Fourier basis).
    pub fn filtered(self, filter: &LatticeFilter) -> Self {
        match self {
            Self::Circulant {
                n,
                inv_eig,
                forward,
                inverse,
            } => Self::Circulant {
                inv_eig: inv_eig
                    .iter()
                    .zip(filter.axis_transfers(n))
                    .map(|(e, f)| e * f)
                    .collect(),
                n,
                forward,
                inverse,
            },
            banded => banded,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Banded { n, .. } | Self::Circulant { n, .. } => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replaces `x` (length `n`) by `T^-1 x`; `buf` is scratch of any length.
    pub fn solve_line(&self, x: &mut [f64], buf: &mut Vec<Complex64>) {
        match self {
            Self::Banded { n, b, l } => {
                let (n, b) = (*n, *b);
                let at = |i: usize, k: usize| i * (b + 1) + k;
                // L y = x
                for i in 0..n {
                    let mut s = x[i];
                    for q in i.saturating_sub(b)..i {
                        s -= l[at(i, i - q)] * x[q];
                    }
                    x[i] = s / l[at(i, 0)];
                }
                // L^T z = y
                for i in (0..n).rev() {
                    let mut s = x[i];
                    for q in i + 1..(i + b + 1).min(n) {
                        s -= l[at(q, q - i)] * x[q];
                    }
                    x[i] = s / l[at(i, 0)];
                }
            }
            Self::Circulant {
                n,
                inv_eig,
                forward,
                inverse,
            } => {
                buf.clear();
                buf.extend(x.iter().map(|&v| Complex64::new(v, 0.0)));
                forward.process(buf);
                let scale = 1.0 / *n as f64;
                for (c, e) in buf.iter_mut().zip(inv_eig) {
                    *c *= e * scale;
                }
                inverse.process(buf);
                for (v, c) in x.iter_mut().zip(buf.iter()) {
                    *v = c.re;
                }
            }
        }
    }
}

/// The three axis factors of a lattice, ready to apply `A^-1`.
#[derive(Debug)]
pub struct SeparableSolver {
    dims: [usize; 3],
    axes: [AxisSolver; 3],
    /// `1 / c`, `c = (2 pi sigma^2)^(-3/2)`.
    inv_norm: f64,
}

impl SeparableSolver {
    /// Factorises the system of the lattice `dims` (spacing `h`) for blobs of core `sigma`
    /// truncated at `cutoff * sigma`, the operator of [`super::apply_gaussian`].
    pub fn new(
        dims: [usize; 3],
        h: f64,
        sigma: f64,
        cutoff: f64,
        periodic: bool,
    ) -> Result<Self, String> {
        let w = axis_weights(h, sigma, cutoff);
        let axis = |c: usize| {
            AxisSolver::new(dims[c], &w, periodic)
                .map_err(|e| format!("{e} (axis {c}, sigma/h = {:.3})", sigma / h))
        };
        let norm = (2.0 * std::f64::consts::PI * sigma * sigma).powf(-1.5);
        Ok(Self {
            dims,
            axes: [axis(0)?, axis(1)?, axis(2)?],
            inv_norm: 1.0 / norm,
        })
    }

    /// The operator `F` alone on the periodic lattice `dims`: `solve` multiplies each axis line's
    /// Fourier coefficients by `f(k)` (the filtered right-hand side a filtered solve
    /// interpolates).
    pub fn transfer(dims: [usize; 3], filter: &LatticeFilter) -> Self {
        Self::transfer_gains(dims, |c| filter.axis_transfers(dims[c]))
    }

    /// A separable transfer function alone on the periodic lattice `dims`: `solve` multiplies
    /// the Fourier coefficients of each axis `c` by `gains(c)[k]`, `k = 0..dims[c]`.
    pub fn transfer_gains(dims: [usize; 3], gains: impl Fn(usize) -> Vec<f64>) -> Self {
        let mut planner = FftPlanner::new();
        let mut axis = |c: usize| AxisSolver::Circulant {
            n: dims[c],
            inv_eig: gains(c),
            forward: planner.plan_fft_forward(dims[c]),
            inverse: planner.plan_fft_inverse(dims[c]),
        };
        let axes = [axis(0), axis(1), axis(2)];
        Self {
            dims,
            axes,
            inv_norm: 1.0,
        }
    }

    /// `A^-1 b` for a scalar field stored `(i * ny + j) * nz + k`.
    pub fn solve(&self, b: &[f64]) -> Vec<f64> {
        let [nx, ny, nz] = self.dims;
        assert_eq!(b.len(), nx * ny * nz);
        let mut x: Vec<f64> = b.iter().map(|v| v * self.inv_norm).collect();
        // z lines are contiguous
        x.par_chunks_mut(nz)
            .for_each_init(Vec::new, |buf, line| self.axes[2].solve_line(line, buf));
        // y lines: stride nz inside each x slab
        x.par_chunks_mut(ny * nz).for_each_init(
            || (Vec::new(), Vec::new()),
            |st: &mut (Vec<Complex64>, Vec<f64>), slab: &mut [f64]| {
                let (buf, line) = st;
                for k in 0..nz {
                    line.clear();
                    line.extend((0..ny).map(|j| slab[j * nz + k]));
                    self.axes[1].solve_line(line, buf);
                    for (j, v) in line.iter().enumerate() {
                        slab[j * nz + k] = *v;
                    }
                }
            },
        );
        // x lines: stride ny * nz; blocks of consecutive (j, k) columns, gathered then scattered
        let slab = ny * nz;
        const COLS: usize = 64;
        let blocks: Vec<(usize, Vec<f64>)> = (0..slab)
            .step_by(COLS)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map_init(Vec::new, |buf, start| {
                let cols = COLS.min(slab - start);
                let mut out = vec![0.0; cols * nx];
                let mut line = vec![0.0; nx];
                for c in 0..cols {
                    for (i, v) in line.iter_mut().enumerate() {
                        *v = x[i * slab + start + c];
                    }
                    self.axes[0].solve_line(&mut line, buf);
                    out[c * nx..(c + 1) * nx].copy_from_slice(&line);
                }
                (start, out)
            })
            .collect();
        for (start, out) in blocks {
            let cols = out.len() / nx;
            for c in 0..cols {
                for i in 0..nx {
                    x[i * slab + start + c] = out[c * nx + i];
                }
            }
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::super::{apply_gaussian, solve, Lattice, RbfSettings, RbfSolver};
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn rel(a: &[f64], b: &[f64]) -> f64 {
        let d: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
        let n: f64 = b.iter().map(|y| y * y).sum();
        (d / n).sqrt()
    }

    /// `A (A^-1 b) = b` with `A` applied by the independent convolution code, and `A^-1 (A x) = x`,
    /// for free-space and periodic lattices of odd, even and tiny sizes, overlaps 0.8 .. 1.3.
    #[test]
    fn inverse_of_the_lattice_operator() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for &periodic in &[false, true] {
            for &(dims, overlap) in &[
                ([9usize, 7, 12], 1.0),
                ([16, 16, 16], 1.0),
                ([5, 1, 3], 1.3),
                ([11, 10, 2], 0.8),
                ([20, 6, 9], 1.2),
            ] {
                let h = 0.3;
                let sigma = overlap * h;
                let lat = Lattice {
                    origin: [0.0; 3],
                    h,
                    dims,
                    periodic,
                };
                let s = SeparableSolver::new(dims, h, sigma, 6.0, periodic).unwrap();
                let b: Vec<f64> = (0..lat.len()).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let x = s.solve(&b);
                let ax = apply_gaussian(&lat, sigma, 6.0, &x);
                let e1 = rel(&ax, &b);
                // the forward error grows with the conditioning (overlap 1: kappa ~ 3e5)
                let back = s.solve(&apply_gaussian(&lat, sigma, 6.0, &b));
                // and so does the residual of the FFT route (overlap 1.2: kappa ~ 2e8)
                let e2 = if overlap <= 1.0 { rel(&back, &b) } else { 0.0 };
                let e1_tol = if overlap <= 1.0 { 1e-11 } else { 1e-8 };
                assert!(
                    e1 < e1_tol && e2 < 1e-9,
                    "periodic {periodic} dims {dims:?} overlap {overlap}: {e1:.2e} {e2:.2e}"
                );
            }
        }
    }

    /// The banded Cholesky and circulant eigenvalues against dense elimination of the 1-D matrix.
    #[test]
    fn axis_solver_matches_dense_elimination() {
        let w = axis_weights(0.25, 0.3, 6.0);
        let m = w.len() / 2;
        for &periodic in &[false, true] {
            for n in [1usize, 2, 5, 13, 30] {
                let mut t = vec![vec![0.0; n]; n];
                for (i, row) in t.iter_mut().enumerate() {
                    for (q, wo) in w.iter().enumerate() {
                        let j = i as i64 + q as i64 - m as i64;
                        if periodic {
                            row[j.rem_euclid(n as i64) as usize] += wo;
                        } else if (0..n as i64).contains(&j) {
                            row[j as usize] += wo;
                        }
                    }
                }
                let x0: Vec<f64> = (0..n).map(|i| (i as f64 * 0.7).sin() + 0.3).collect();
                let b: Vec<f64> = t
                    .iter()
                    .map(|r| r.iter().zip(&x0).map(|(a, x)| a * x).sum())
                    .collect();
                let s = AxisSolver::new(n, &w, periodic).unwrap();
                let mut x = b.clone();
                s.solve_line(&mut x, &mut Vec::new());
                assert!(rel(&x, &x0) < 1e-12, "periodic {periodic} n {n}");
            }
        }
    }

    /// A single Fourier mode `cos(2 pi (kx i + ky j + kz l) / n + phase)` through the filtered
    /// solve comes back multiplied by `f(kx) f(ky) f(kz) / lambda`, `f` the closed form
    /// `exp(-a (|k| / (n/2))^m)` and `lambda` the mode's eigenvalue of the Gaussian operator
    /// (measured by applying the independent convolution code to it); the host route (`F` then
    /// the exact solve) and the device route (the filtered inverse eigenvalues in one pass)
    /// agree, and so does the run's solve (direct and conjugate gradients).
    #[test]
    fn single_mode_through_the_filtered_solve() {
        let (a, m) = (36.0f64, 8.0f64);
        let filter = LatticeFilter::Exponential {
            strength: a,
            order: m,
        };
        let f = |k: i64, n: usize| (-a * (k.abs() as f64 / (0.5 * n as f64)).powf(m)).exp();
        for (dims, kv) in [
            ([16usize, 16, 16], [3i64, -5, 6]),
            ([12, 10, 14], [5, 2, -1]),
            ([9, 8, 11], [3, 0, 4]),
        ] {
            let (h, overlap) = (0.2, 0.8);
            let sigma = overlap * h;
            let lat = Lattice {
                origin: [0.0; 3],
                h,
                dims,
                periodic: true,
            };
            let mode: Vec<f64> = (0..lat.len())
                .map(|idx| {
                    let l = idx % dims[2];
                    let j = (idx / dims[2]) % dims[1];
                    let i = idx / (dims[1] * dims[2]);
                    let ph: f64 = [i, j, l]
                        .iter()
                        .zip(kv.iter().zip(dims))
                        .map(|(&p, (&k, n))| p as f64 * k as f64 / n as f64)
                        .sum();
                    (2.0 * std::f64::consts::PI * ph + 0.3).cos()
                })
                .collect();
            let am = apply_gaussian(&lat, sigma, 6.0, &mode);
            let i0 = (0..mode.len())
                .max_by(|&p, &q| mode[p].abs().total_cmp(&mode[q].abs()))
                .unwrap();
            let lambda = am[i0] / mode[i0];
            let gain: f64 = (0..3).map(|c| f(kv[c], dims[c])).product::<f64>() / lambda;
            let expect: Vec<f64> = mode.iter().map(|v| v * gain).collect();
            let s = SeparableSolver::new(dims, h, sigma, 6.0, true).unwrap();
            let host = s.solve(&SeparableSolver::transfer(dims, &filter).solve(&mode));
            assert!(
                rel(&host, &expect) < 1e-9,
                "{dims:?} {kv:?}: {:.2e}",
                rel(&host, &expect)
            );
            let w = axis_weights(h, sigma, 6.0);
            let one_pass = SeparableSolver {
                dims,
                axes: std::array::from_fn(|c| {
                    AxisSolver::new(dims[c], &w, true)
                        .unwrap()
                        .filtered(&filter)
                }),
                inv_norm: s.inv_norm,
            };
            let dev = one_pass.solve(&mode);
            assert!(
                rel(&dev, &expect) < 1e-9,
                "{dims:?} {kv:?}: {:.2e}",
                rel(&dev, &expect)
            );
            // the run's path (`reinterpolation::solve`, direct and CG): the same gain, the
            // residual measured against F omega
            let omega: Vec<[f64; 3]> = mode.iter().map(|&v| [v, -2.0 * v, 0.5 * v]).collect();
            for solver in [RbfSolver::Direct, RbfSolver::Cg] {
                let settings = RbfSettings {
                    solver,
                    tolerance: 1e-10,
                    filter,
                    ..Default::default()
                };
                let (beta, rep) = solve(&lat, sigma, &omega, &settings).unwrap();
                assert!(rep.residual <= 1e-10, "{solver:?}");
                for (c, scale) in [1.0, -2.0, 0.5].into_iter().enumerate() {
                    let got: Vec<f64> = beta.iter().map(|b| b[c] / scale).collect();
                    let e = rel(&got, &expect);
                    assert!(
                        e < 1e-8,
                        "{solver:?} {dims:?} {kv:?} component {c}: {e:.2e}"
                    );
                }
            }
            // the filter took something off (the test can tell F from 1)
            assert!(gain * lambda < 0.99, "{dims:?} {kv:?}");
        }
    }

    /// Large overlaps make the matrix numerically singular: refused with the reason.
    #[test]
    fn refuses_a_numerically_singular_system() {
        let e = SeparableSolver::new([32, 32, 32], 0.1, 0.35, 6.0, true).unwrap_err();
        assert!(
            e.contains("positive definite") && e.contains("sigma/h"),
            "{e}"
        );
        let e = SeparableSolver::new([32, 32, 32], 0.1, 0.35, 6.0, false).unwrap_err();
        assert!(e.contains("positive definite"), "{e}");
    }
}
