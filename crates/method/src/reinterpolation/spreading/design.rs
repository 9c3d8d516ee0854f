//! The kernel width, shape and fine-grid size of a spreading plan, from the tolerance.
//!
//! The quantity computed is the periodic Gaussian sum at the `n^3` lattice points (or its
//! discrete Fourier transform, folded: see the parent module), whose Fourier weights are
//! `g(q) = exp(-(2 pi q sigma / L)^2 / 2)` per axis. Spreading with the ES kernel
//! ([`super::kernel`]) onto `n_f^3` points and one FFT gives every mode `|q| <= n_f / 2` with
//! the aliases `q + j n_f`, `j != 0`, weighted by `phi_hat(q + j n_f) / phi_hat(q)` (Barnett,
//! Magland & af Klinteberg 2019, their aliasing-error analysis of type-1 spreading); the modes
//! beyond `n_f / 2` are dropped. Unlike a general type-1 transform, which needs every output
//! mode to the same relative accuracy (hence their upsampling factor 2, `beta = 2.30 w`),
//! here mode `q` is needed only to the accuracy `tolerance / g(q)`: the Gaussian itself
//! suppresses the modes near the fine grid's Nyquist, so the grid can be coarser than twice
//! the highest mode and the kernel's band `beta = b pi w` wider (`b` up to 0.97).
//!
//! Two estimates, both per axis and combined over the three axes exactly (the weights and the
//! kernel factorise):
//! * `white`: the expected relative L2 error of the lattice values when the strengths are
//!   spatially uncorrelated (every mode of the particle distribution of the same expected
//!   magnitude: random strengths, or the particle noise of any field), with the alias terms
//!   independent: `e^2 = [(S_a^3 - S_in^3) + (S_all^3 - S_in^3)] / S_all^3`,
//!   `S_all = sum_q g^2`, `S_in = sum_{|q| <= n_f/2} g^2`,
//!   `S_a = sum_{|q| <= n_f/2} g^2 (1 + a(q))`, `a(q) = sum_{0 < |j| <= J} phi_hat(q + j n_f)^2
//!   / phi_hat(q)^2`;
//! * `resolved`: the relative alias error of the worst lattice mode (`|q| <= n/2` per axis),
//!   `((1 + max a)^3 - 1)^(1/2)`: a smooth field on particles near a lattice has copies of its
//!   spectrum at the lattice's multiples, so the aliases of a resolved mode are as large as the
//!   mode itself.
//!
//! A design must bring both below `tolerance / SAFETY`; among those that do, the cheapest by a
//! cost model of spreading (`n^3 w^3`) against the fine grid (`n_f^3`) is chosen.

use super::kernel::{EsKernel, KernelTransform, MAX_WIDTH};
use rayon::prelude::*;
use std::f64::consts::PI;
use std::sync::Mutex;

/// Aliases `|j| <= J` summed in the estimate (the kernel's tail beyond them is below the
/// `exp(-beta)` floor of the first ones).
const ALIASES: i64 = 4;
/// The estimates must be below `tolerance / SAFETY`.
pub const SAFETY: f64 = 2.0;
/// Shapes `beta = b pi w` tried.
const BANDS: [f64; 9] = [0.60, 0.66, 0.71, 0.76, 0.82, 0.86, 0.90, 0.94, 0.97];
/// The largest fine grid per axis a design may give.
pub const MAX_FINE: usize = 8192;
/// Weight of a fine-grid point (FFT, grid traffic) against one kernel point of one particle
/// in the cost model.
const GRID_COST: f64 = 15.0;

/// The parameters of a spreading plan and the errors they are estimated to give.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Design {
    pub kernel: EsKernel,
    /// Fine-grid points per axis: a multiple of 8 with no prime factor above 7, at least `n`.
    pub fine: usize,
    /// Estimated relative L2 error of the lattice values (spatially uncorrelated strengths).
    pub white: f64,
    /// Estimated relative error of the worst resolved lattice mode.
    pub resolved: f64,
}

/// Why no design meets a tolerance.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreachable {
    /// The smallest tolerance a design reaches (`SAFETY` times the smallest estimate).
    pub best: f64,
}

/// `g(q)^2` per axis for the core `sigma_h = sigma / h` on a lattice of `n` points.
fn g2(q: f64, n: usize, sigma_h: f64) -> f64 {
    (-(2.0 * PI * q * sigma_h / n as f64).powi(2)).exp()
}

/// The fine-grid sizes tried: multiples of 8 with no prime factor above 7, from `n` up.
fn fine_sizes(n: usize) -> impl Iterator<Item = usize> {
    let smooth = |mut m: usize| {
        for p in [2, 3, 5, 7] {
            while m % p == 0 {
                m /= p;
            }
        }
        m == 1
    };
    let start = n.div_ceil(8).max(2) * 8;
    (start..=MAX_FINE).step_by(8).filter(move |&m| smooth(m))
}

/// `(S_in, S_all - S_in)` of the module documentation for the fine grid of `2 half` points.
fn gaussian_sums(half: usize, n: usize, sigma_h: f64) -> (f64, f64) {
    let mut s_in = 1.0;
    for q in 1..=half {
        s_in += if q == half { 1.0 } else { 2.0 } * g2(q as f64, n, sigma_h);
    }
    // beyond: -half once, |q| > half twice
    let mut s_out = g2(half as f64, n, sigma_h);
    let mut q = half as f64 + 1.0;
    loop {
        let t = 2.0 * g2(q, n, sigma_h);
        s_out += t;
        if t <= 1e-30 * s_out || t == 0.0 {
            break;
        }
        q += 1.0;
    }
    (s_in, s_out)
}

/// `(x^3 - y^3) / z^3` from `d = x - y` without cancellation.
fn cube_difference(d: f64, x: f64, y: f64, z: f64) -> f64 {
    d * (x * x + x * y + y * y) / z.powi(3)
}

/// The estimates `(white, resolved)` of the kernel on the fine grid `fine` for the lattice
/// `n`, core `sigma_h` lattice spacings (see the module documentation).
pub fn estimate(kernel: &EsKernel, fine: usize, n: usize, sigma_h: f64) -> (f64, f64) {
    let tstep = PI * kernel.width as f64;
    let tr = KernelTransform::new(kernel, tstep * (ALIASES as f64 + 0.5));
    estimate_with(|t| tr.at(t), kernel.width, fine, n, sigma_h)
}

/// [`estimate`] with the kernel's transform `T(t)` given.
fn estimate_with(
    tr: impl Fn(f64) -> f64 + Sync,
    width: usize,
    fine: usize,
    n: usize,
    sigma_h: f64,
) -> (f64, f64) {
    let tstep = PI * width as f64; // t(q + n_f) - t(q)
    let half = fine / 2;
    // (multiplicity g^2 a, a if resolved)
    let terms: Vec<(f64, f64)> = (0..=half)
        .into_par_iter()
        .map(|q| {
            let mult = if q == 0 || q == half { 1.0 } else { 2.0 };
            let g = g2(q as f64, n, sigma_h);
            let t = tstep * q as f64 / fine as f64;
            let t0 = tr(t);
            let a: f64 = (1..=ALIASES)
                .map(|j| {
                    let (p, m) = (tr(t + tstep * j as f64), tr(t - tstep * j as f64));
                    (p * p + m * m) / (t0 * t0)
                })
                .sum();
            let res = if 2 * q <= n { a } else { 0.0 };
            (mult * g * a, res)
        })
        .collect();
    let (s_in, s_out) = gaussian_sums(half, n, sigma_h);
    let s_all = s_in + s_out;
    let d_a: f64 = terms.iter().map(|t| t.0).sum();
    let a_max = terms.iter().map(|t| t.1).fold(0.0, f64::max);
    let aliased = cube_difference(d_a, s_in + d_a, s_in, s_all);
    let dropped = cube_difference(s_out, s_all, s_in, s_all);
    let white = (aliased + dropped).sqrt();
    // (1 + a)^3 - 1 without cancellation
    let resolved = (a_max * (3.0 + 3.0 * a_max + a_max * a_max)).sqrt();
    (white, resolved)
}

/// `T(t)` tabulated for `|t| <= t_max` at spacing [`TABLE_STEP`], cubic (Catmull-Rom)
/// interpolation: the search's cheap stand-in for [`KernelTransform`] (relative accuracy
/// about `1e-5`, `1e-4` where it falls off at the band's edge, ample for comparing designs; the chosen one is re-estimated with
/// the quadrature).
struct TransformTable {
    values: Vec<f64>,
}

const TABLE_STEP: f64 = 0.025;

impl TransformTable {
    fn new(kernel: &EsKernel, t_max: f64) -> Self {
        let tr = KernelTransform::new(kernel, t_max + 4.0 * TABLE_STEP);
        let m = (t_max / TABLE_STEP).ceil() as usize + 4;
        let values = (0..m)
            .into_par_iter()
            .map(|i| tr.at((i as f64 - 1.0) * TABLE_STEP))
            .collect();
        Self { values }
    }

    fn at(&self, t: f64) -> f64 {
        let x = t.abs() / TABLE_STEP + 1.0;
        let i = (x.floor() as usize).clamp(1, self.values.len() - 3);
        let f = x - i as f64;
        let v = &self.values[i - 1..i + 3];
        let (p0, p1, p2, p3) = (v[0], v[1], v[2], v[3]);
        p1 + 0.5
            * f
            * (p2 - p0
                + f * (2.0 * p0 - 5.0 * p1 + 4.0 * p2 - p3 + f * (3.0 * (p1 - p2) + p3 - p0)))
    }
}

/// The truncation part of `white` alone (no kernel): a lower bound of the error on `fine`.
fn truncation(fine: usize, n: usize, sigma_h: f64) -> f64 {
    let (s_in, s_out) = gaussian_sums(fine / 2, n, sigma_h);
    cube_difference(s_out, s_in + s_out, s_in, s_in + s_out).sqrt()
}

/// Designs computed so far: `(n, sigma_h bits, tolerance bits)`.
type Cache = Vec<((usize, u64, u64), Design)>;
static CACHE: Mutex<Cache> = Mutex::new(Vec::new());

/// The cheapest design for the lattice of `n` points per axis, cores of at least
/// `sigma_h = sigma / h` lattice spacings, relative error `tolerance`; the smallest estimate
/// reachable when none meets it. Designs are cached (the same lattice is re-interpolated many
/// times).
pub fn design(n: usize, sigma_h: f64, tolerance: f64) -> Result<Design, Unreachable> {
    let key = (n, sigma_h.to_bits(), tolerance.to_bits());
    if let Some((_, d)) = CACHE.lock().unwrap().iter().find(|(k, _)| *k == key) {
        return Ok(*d);
    }
    let d = search(n, sigma_h, tolerance)?;
    CACHE.lock().unwrap().push((key, d));
    Ok(d)
}

fn search(n: usize, sigma_h: f64, tolerance: f64) -> Result<Design, Unreachable> {
    let target = tolerance / SAFETY;
    let nn = (n as f64).powi(3);
    let cost = |w: usize, fine: usize| nn * (w as f64).powi(3) + GRID_COST * (fine as f64).powi(3);
    // the fine grids whose truncation alone leaves room for the aliases
    let sizes: Vec<usize> = fine_sizes(n)
        .filter(|&f| truncation(f, n, sigma_h) <= 0.5 * target)
        .take(12)
        .collect();
    // candidates by the tabulated transform, cheapest first
    let mut found: Vec<(f64, EsKernel, usize)> = Vec::new();
    let mut closest = f64::INFINITY;
    for w in 2..=MAX_WIDTH {
        let cheapest = found.iter().map(|c| c.0).fold(f64::INFINITY, f64::min);
        if nn * (w as f64).powi(3) >= cheapest {
            break; // wider kernels only cost more
        }
        let t_max = PI * w as f64 * (ALIASES as f64 + 0.5);
        for b in BANDS {
            let kernel = EsKernel {
                width: w,
                beta: b * PI * w as f64,
            };
            let table = TransformTable::new(&kernel, t_max);
            for &fine in &sizes {
                if cost(w, fine) >= cheapest {
                    break;
                }
                let (white, resolved) = estimate_with(|t| table.at(t), w, fine, n, sigma_h);
                closest = closest.min(white.max(resolved));
                if white <= target && resolved <= target {
                    found.push((cost(w, fine), kernel, fine));
                    break;
                }
            }
        }
    }
    found.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (_, kernel, fine) in found {
        let (white, resolved) = estimate(&kernel, fine, n, sigma_h);
        if white <= target && resolved <= target {
            return Ok(Design {
                kernel,
                fine,
                white,
                resolved,
            });
        }
    }
    Err(Unreachable {
        best: closest * SAFETY,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fine_sizes_are_smooth_multiples_of_eight() {
        let v: Vec<usize> = fine_sizes(20).take(6).collect();
        assert_eq!(v, vec![24, 32, 40, 48, 56, 64]);
        assert!(fine_sizes(256).take(40).all(|m| m % 8 == 0 && m >= 256));
        assert!(!fine_sizes(256).any(|m| m == 88)); // 88 = 8 * 11
    }

    /// The table against the quadrature on the kernel's band and in its tail.
    #[test]
    fn table_follows_the_quadrature() {
        let k = EsKernel {
            width: 8,
            beta: 0.76 * PI * 8.0,
        };
        let t_max = PI * 8.0 * 4.5;
        let (table, tr) = (
            TransformTable::new(&k, t_max),
            KernelTransform::new(&k, t_max),
        );
        let peak = tr.at(0.0);
        for i in 0..=997 {
            let t = t_max * i as f64 / 997.0;
            let (a, b) = (table.at(t), tr.at(t));
            let scale = b.abs().max(peak * (-k.beta).exp());
            assert!((a - b).abs() <= 1e-4 * scale, "t = {t}: {a:e} vs {b:e}");
        }
    }

    /// Tighter tolerances need wider kernels or finer grids; every design meets its own
    /// estimate, and an impossible tolerance is refused with the best reachable.
    #[test]
    fn designs_follow_the_tolerance() {
        let loose = design(32, 0.8, 1e-4).unwrap();
        let tight = design(32, 0.8, 1e-10).unwrap();
        assert!(tight.kernel.width > loose.kernel.width);
        for d in [loose, tight] {
            let (w, r) = estimate(&d.kernel, d.fine, 32, 0.8);
            assert_eq!((w, r), (d.white, d.resolved));
        }
        assert!(tight.white <= 0.5e-10 && tight.resolved <= 0.5e-10);
        let e = design(32, 0.8, 1e-18).unwrap_err();
        assert!(e.best > 1e-18 && e.best < 1e-10, "{e:?}");
    }
}
