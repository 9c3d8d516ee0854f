//! RBF re-interpolation onto a fresh lattice (the remedy that keeps core spreading convergent,
//! core paper Sec. 2 and its ref. [30]).
//!
//! Given the vorticity `omega(y_i)` at the points `y_i` of a regular lattice (spacing `h`), find
//! strengths `beta_j` of new blobs at `y_j` with the initial core radius `sigma` such that
//!
//! `sum_j beta_j zeta_sigma(y_i - y_j) = omega(y_i)`      for every lattice point `i`,
//!
//! i.e. the blob field interpolates the vorticity at the lattice points. The Gaussian matrix is
//! symmetric positive definite. By default it is solved directly ([`separable`]: the matrix is a
//! Kronecker product of 1-D banded or circulant factors, inverted line by line), which is exact
//! to round-off times its conditioning and takes a fixed sequence of operations, so results do not
//! depend on how many ranks or threads produced the input beyond that; `solver = "cg"` uses
//! conjugate gradients instead. Either way the relative residual `||A beta - omega|| / ||omega||`
//! must reach `tolerance` per component. On a lattice the Gaussian factorises,
//! `exp(-|d|^2/2 sigma^2) = prod_c exp(-d_c^2/2 sigma^2)`, so the product with the matrix is three
//! one-dimensional convolutions (truncated at `cutoff * sigma`, wrapped in a periodic box, zero
//! outside the lattice in free space), rayon-parallel and deterministic.
//!
//! `omega(y_i)` at the new points comes from the old blobs by the same truncated Gaussian sums
//! ([`crate::cells::gaussian_sum`], a periodic-aware cell list), or in a periodic box with
//! `sums = { kind = "spread" }` as its spectrum by spreading and FFT, solved in Fourier space
//! without lattice values ([`spreading`]). In free space the lattice is the
//! box around the old particles widened by a few core radii, and strengths below
//! `drop * max |beta|` are dropped after the solve; in a periodic box the lattice fills the box and
//! the mean strength is removed (a periodic velocity needs zero total strength).
//!
//! In a periodic box the solve may interpolate a filtered vorticity, `A beta = F omega`
//! ([`filter`]: the transfer function that keeps the lattice-scale content from being amplified
//! by `1 / S(k)` at every re-interpolation); the residual is then measured against `F omega`.

use crate::error::{Error, Result};
use crate::particles::{chunked_sum, norm, Particles};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::Instant;

pub mod cores;
pub mod filter;
pub mod history;
pub mod separable;
pub mod spreading;
pub use filter::LatticeFilter;
use separable::SeparableSolver;
pub use spreading::LatticeSums;
use vortex_fmm::kernel::CoreOrder;

/// A regular lattice of `dims` points `origin + h * (i, j, k)`, stored at `(i*ny + j)*nz + k`
/// (z fastest, as the spectral grids). `periodic`: the lattice tiles the box `[-L/2, L/2)^3`
/// with `L = n h` and neighbours wrap across its faces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lattice {
    pub origin: [f64; 3],
    pub h: f64,
    pub dims: [usize; 3],
    pub periodic: bool,
}

impl Lattice {
    /// The `n^3` lattice of the periodic box of length `l`: points `-l/2 + l (i, j, k) / n`, the
    /// spectral solver's grid for `l = 2 pi`.
    pub fn periodic_box(n: usize, l: f64) -> Self {
        Self {
            origin: [-0.5 * l; 3],
            h: l / n as f64,
            dims: [n; 3],
            periodic: true,
        }
    }

    /// The free-space lattice of spacing `h` covering `[lo, hi]`, aligned to integer multiples
    /// of `h` (so successive re-interpolations share their points).
    pub fn covering(lo: [f64; 3], hi: [f64; 3], h: f64) -> Self {
        let a: [i64; 3] = std::array::from_fn(|c| (lo[c] / h).floor() as i64);
        let b: [i64; 3] = std::array::from_fn(|c| (hi[c] / h).ceil() as i64);
        Self {
            origin: std::array::from_fn(|c| a[c] as f64 * h),
            h,
            dims: std::array::from_fn(|c| (b[c] - a[c] + 1).max(1) as usize),
            periodic: false,
        }
    }

    pub fn len(&self) -> usize {
        self.dims[0] * self.dims[1] * self.dims[2]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn point(&self, idx: usize) -> [f64; 3] {
        let k = idx % self.dims[2];
        let j = (idx / self.dims[2]) % self.dims[1];
        let i = idx / (self.dims[1] * self.dims[2]);
        [
            self.origin[0] + self.h * i as f64,
            self.origin[1] + self.h * j as f64,
            self.origin[2] + self.h * k as f64,
        ]
    }

    pub fn points(&self) -> Vec<[f64; 3]> {
        (0..self.len())
            .into_par_iter()
            .map(|i| self.point(i))
            .collect()
    }
}

/// How the lattice system is solved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RbfSolver {
    /// Line-by-line inverse of the separable matrix ([`separable`]): exact to round-off.
    #[default]
    Direct,
    /// Conjugate gradients from the quadrature guess, to `tolerance`.
    Cg,
}

/// Settings of the interpolation solve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RbfSettings {
    pub solver: RbfSolver,
    /// Relative residual `||A beta - omega|| / ||omega||` that the solve must reach (CG stops
    /// there; the direct solve is checked against it), per component.
    pub tolerance: f64,
    pub max_iterations: usize,
    /// Truncation of the Gaussian in core radii.
    pub cutoff: f64,
    /// Free space: strengths below `drop * max |beta|` are discarded (0 keeps all).
    pub drop: f64,
    /// Transfer function of the periodic solve (ignored in free space).
    pub filter: LatticeFilter,
    /// How the Gaussian sums at the lattice points are computed (periodic boxes).
    pub sums: LatticeSums,
    /// The core of the blobs (sums and lattice matrix; `evaluation.core`).
    pub core: CoreOrder,
    /// `nu tau`: the heat kernel `exp(-nu |k|^2 tau)` applied to the interpolated vorticity
    /// (periodic lattices; the viscous term of the cores of order above 2, [`cores`]); 0: none.
    pub diffusion: f64,
}

impl Default for RbfSettings {
    fn default() -> Self {
        Self {
            solver: RbfSolver::Direct,
            tolerance: 1e-8,
            max_iterations: 2000,
            cutoff: 6.0,
            drop: 1e-6,
            // exact interpolation (the initial conditions); runs take `[reinterpolation] filter`
            filter: LatticeFilter::None,
            sums: LatticeSums::Direct,
            core: CoreOrder::Second,
            diffusion: 0.0,
        }
    }
}

/// What one solve did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RbfReport {
    /// CG iterations of each component (0 for the direct solve).
    pub iterations: [usize; 3],
    /// Final relative residual (largest over the components).
    pub residual: f64,
    /// Lattice points solved for.
    pub lattice_points: usize,
    /// Particles kept.
    pub kept: usize,
    pub seconds: f64,
}

impl RbfReport {
    /// One line for the log: lattice, particles kept, solver, residual, time.
    pub fn summary(&self) -> String {
        let solve = if self.iterations == [0; 3] {
            "direct solve".to_string()
        } else {
            format!("CG {:?} iterations", self.iterations)
        };
        format!(
            "{} lattice points, {} particles kept, {solve}, residual {:.2e}, {:.2} s",
            self.lattice_points, self.kept, self.residual, self.seconds
        )
    }
}

/// `y = A x` for a scalar field on the lattice, `A_ij = zeta_sigma(y_i - y_j)` truncated at
/// `cutoff * sigma` (separable: three 1-D convolutions).
pub fn apply_gaussian(lat: &Lattice, sigma: f64, cutoff: f64, x: &[f64]) -> Vec<f64> {
    let [nx, ny, nz] = lat.dims;
    assert_eq!(x.len(), nx * ny * nz);
    let m = (cutoff * sigma / lat.h).floor() as i64;
    let w: Vec<f64> = (-m..=m)
        .map(|o| (-0.5 * (o as f64 * lat.h / sigma).powi(2)).exp())
        .collect();
    let norm = 0.063_493_635_934_240_97 / (sigma * sigma * sigma);
    let per = lat.periodic;
    // index of neighbour p + o along an axis of length n, or None outside (free space)
    let nb = move |p: usize, o: i64, n: usize| -> Option<usize> {
        let q = p as i64 + o;
        if per {
            Some(q.rem_euclid(n as i64) as usize)
        } else if q < 0 || q >= n as i64 {
            None
        } else {
            Some(q as usize)
        }
    };
    // z pass
    let mut a = vec![0.0; x.len()];
    a.par_chunks_mut(nz)
        .zip(x.par_chunks(nz))
        .for_each(|(out, inp)| {
            for (k, ok) in out.iter_mut().enumerate() {
                let mut s = 0.0;
                for (t, o) in (-m..=m).enumerate() {
                    if let Some(q) = nb(k, o, nz) {
                        s += w[t] * inp[q];
                    }
                }
                *ok = s;
            }
        });
    // y pass (within each x slab)
    let mut b = vec![0.0; x.len()];
    b.par_chunks_mut(ny * nz)
        .zip(a.par_chunks(ny * nz))
        .for_each(|(out, inp)| {
            for j in 0..ny {
                let row = &mut out[j * nz..(j + 1) * nz];
                for (t, o) in (-m..=m).enumerate() {
                    if let Some(q) = nb(j, o, ny) {
                        let src = &inp[q * nz..(q + 1) * nz];
                        for k in 0..nz {
                            row[k] += w[t] * src[k];
                        }
                    }
                }
            }
        });
    // x pass
    let slab = ny * nz;
    let mut c = vec![0.0; x.len()];
    c.par_chunks_mut(slab).enumerate().for_each(|(i, out)| {
        for (t, o) in (-m..=m).enumerate() {
            if let Some(q) = nb(i, o, nx) {
                let src = &b[q * slab..(q + 1) * slab];
                for k in 0..slab {
                    out[k] += w[t] * src[k];
                }
            }
        }
        for v in out.iter_mut() {
            *v *= norm;
        }
    });
    c
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    chunked_sum(a.len(), |i| a[i] * b[i])
}

/// Conjugate gradients for `A x = b` with `A` applied by `op`, from the guess `x`. Returns the
/// iterations and the final relative residual.
pub fn conjugate_gradient(
    op: impl Fn(&[f64]) -> Vec<f64>,
    b: &[f64],
    x: &mut [f64],
    tolerance: f64,
    max_iterations: usize,
) -> (usize, f64) {
    let bnorm = dot(b, b).sqrt();
    if bnorm == 0.0 {
        x.iter_mut().for_each(|v| *v = 0.0);
        return (0, 0.0);
    }
    let ax = op(x);
    let mut r: Vec<f64> = b.iter().zip(&ax).map(|(b, a)| b - a).collect();
    let mut p = r.clone();
    let mut rr = dot(&r, &r);
    let mut it = 0;
    while it < max_iterations && rr.sqrt() > tolerance * bnorm {
        let ap = op(&p);
        let pap = dot(&p, &ap);
        if pap <= 0.0 {
            break; // not positive definite in floating point: stop with what we have
        }
        let a = rr / pap;
        x.par_iter_mut()
            .zip(p.par_iter())
            .for_each(|(x, p)| *x += a * p);
        r.par_iter_mut()
            .zip(ap.par_iter())
            .for_each(|(r, q)| *r -= a * q);
        let rr_new = dot(&r, &r);
        let beta = rr_new / rr;
        rr = rr_new;
        p.par_iter_mut()
            .zip(r.par_iter())
            .for_each(|(p, r)| *p = r + beta * *p);
        it += 1;
    }
    (it, rr.sqrt() / bnorm)
}

/// `||A x - b|| / ||b||` (0 when `b = 0` and `x = 0`).
fn relative_residual(
    lat: &Lattice,
    core: CoreOrder,
    sigma: f64,
    cutoff: f64,
    x: &[f64],
    b: &[f64],
) -> f64 {
    let ax = cores::apply_core(lat, core, sigma, cutoff, x);
    let bn = dot(b, b).sqrt();
    let rn = chunked_sum(b.len(), |i| (ax[i] - b[i]).powi(2)).sqrt();
    if bn == 0.0 {
        if rn == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        rn / bn
    }
}

/// The direct solve of a lattice system: the Gaussian's separable inverse, or the 3-D Fourier
/// solve of a periodic lattice for the cores of order above 2.
enum DirectSolver {
    Separable(SeparableSolver),
    Fourier(cores::FourierSolver),
}

impl DirectSolver {
    fn new(lat: &Lattice, sigma: f64, s: &RbfSettings) -> Result<Self> {
        let lower = |e: String| Error::Rbf(format!("{e}; lower initial.overlap"));
        match (s.core, lat.periodic) {
            (CoreOrder::Second, _) => {
                SeparableSolver::new(lat.dims, lat.h, sigma, s.cutoff, lat.periodic)
                    .map(Self::Separable)
                    .map_err(lower)
            }
            (core, true) => cores::FourierSolver::new(lat.dims, lat.h, sigma, s.cutoff, core)
                .map(Self::Fourier)
                .map_err(lower),
            (core, false) => Err(Error::Rbf(format!(
                "the direct solve inverts the Gaussian's Kronecker-product matrix; the free-space \
                 lattice matrix of the core of order {core} is a sum of such products: use \
                 reinterpolation.solver = \"cg\""
            ))),
        }
    }

    fn solve(&self, b: &[f64]) -> Vec<f64> {
        match self {
            Self::Separable(s) => s.solve(b),
            Self::Fourier(f) => f.solve(b),
        }
    }
}

/// The transfer function applied to the vorticity before the solve (periodic lattices): the
/// filter `F` and the heat kernel of `s.diffusion`, per axis; `None` when both are 1.
fn transfer_of(lat: &Lattice, s: &RbfSettings) -> Option<SeparableSolver> {
    if !lat.periodic || (s.filter.is_none() && s.diffusion == 0.0) {
        return None;
    }
    Some(SeparableSolver::transfer_gains(lat.dims, |c| {
        let n = lat.dims[c];
        let heat = cores::heat_transfers(n, n as f64 * lat.h, s.diffusion);
        s.filter
            .axis_transfers(n)
            .iter()
            .zip(heat)
            .map(|(f, h)| f * h)
            .collect()
    }))
}

/// Strengths of blobs of core `sigma` on every lattice point whose field interpolates `omega`
/// (given at the lattice points). Fails if CG does not reach the tolerance.
pub fn solve(
    lat: &Lattice,
    sigma: f64,
    omega: &[[f64; 3]],
    s: &RbfSettings,
) -> Result<(Vec<[f64; 3]>, RbfReport)> {
    let t0 = Instant::now();
    let n = lat.len();
    assert_eq!(omega.len(), n);
    let h3 = lat.h.powi(3);
    let mut report = RbfReport {
        lattice_points: n,
        ..Default::default()
    };
    let mut beta = vec![[0.0; 3]; n];
    let direct = match s.solver {
        RbfSolver::Direct => Some(DirectSolver::new(lat, sigma, s)?),
        RbfSolver::Cg => None,
    };
    let transfer = transfer_of(lat, s);
    for c in 0..3 {
        let b: Vec<f64> = omega.iter().map(|w| w[c]).collect();
        // the right-hand side the blobs interpolate: F omega with a filter, omega without
        let b = match &transfer {
            Some(t) => t.solve(&b),
            None => b,
        };
        let (x, it, res) = match &direct {
            Some(solver) => {
                let x = solver.solve(&b);
                let res = relative_residual(lat, s.core, sigma, s.cutoff, &x, &b);
                if !(res <= s.tolerance) {
                    return Err(Error::Rbf(format!(
                        "the direct solve left a relative residual {res:.3e} (component {c}, \
                         tolerance {:.1e}, {n} lattice points, sigma/h = {:.3}): the system is \
                         too ill-conditioned; lower initial.overlap",
                        s.tolerance,
                        sigma / lat.h
                    )));
                }
                (x, 0, res)
            }
            None => {
                // quadrature guess: beta = omega h^3
                let mut x: Vec<f64> = b.iter().map(|v| v * h3).collect();
                let (it, res) = conjugate_gradient(
                    |v| cores::apply_core(lat, s.core, sigma, s.cutoff, v),
                    &b,
                    &mut x,
                    s.tolerance,
                    s.max_iterations,
                );
                if !(res <= s.tolerance) {
                    // at the iteration limit more iterations may help; before it the solve
                    // stagnated (round-off), and only a looser tolerance or another solver does
                    let what = if it >= s.max_iterations {
                        "reached reinterpolation.max_iterations; raise it, use solver = \
                         \"direct\" or lower the overlap"
                    } else {
                        "stagnated before reinterpolation.max_iterations (round-off); raise \
                         reinterpolation.tolerance or use solver = \"direct\""
                    };
                    return Err(Error::Rbf(format!(
                        "conjugate gradients stopped at relative residual {res:.3e} after {it} \
                         iterations (component {c}, reinterpolation.tolerance {:.1e}, {n} \
                         lattice points, sigma/h = {:.3}): {what}",
                        s.tolerance,
                        sigma / lat.h
                    )));
                }
                (x, it, res)
            }
        };
        report.iterations[c] = it;
        report.residual = report.residual.max(res);
        for (bj, xj) in beta.iter_mut().zip(&x) {
            bj[c] = *xj;
        }
    }
    report.kept = n;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok((beta, report))
}

/// Particles with core `sigma` on the lattice from vorticity values at its points: the solve,
/// then (free space) dropping negligible strengths or (periodic) removing the mean strength.
pub fn particles_from_lattice_vorticity(
    lat: &Lattice,
    sigma: f64,
    omega: &[[f64; 3]],
    s: &RbfSettings,
) -> Result<(Particles, RbfReport)> {
    let (beta, mut report) = solve(lat, sigma, omega, s)?;
    let (p, _) = fresh_particles(lat, sigma, &beta, s);
    report.kept = p.len();
    Ok((p, report))
}

/// The particles of core `sigma` with the solved strengths `beta` on the points of `lat`, and
/// the lattice index of each: periodic, every point, the mean strength removed; free space, the
/// points whose strength exceeds `drop * max |beta|`.
pub fn fresh_particles(
    lat: &Lattice,
    sigma: f64,
    beta: &[[f64; 3]],
    s: &RbfSettings,
) -> (Particles, Vec<usize>) {
    let mut p = Particles::default();
    let mut kept = Vec::new();
    if lat.periodic {
        for (i, b) in beta.iter().enumerate() {
            p.push(lat.point(i), *b, sigma);
        }
        kept.extend(0..beta.len());
        p.subtract_mean_strength();
    } else {
        let bmax = beta.iter().map(|b| norm(*b)).fold(0.0, f64::max);
        let thr = s.drop * bmax;
        for (i, b) in beta.iter().enumerate() {
            if norm(*b) > thr {
                p.push(lat.point(i), *b, sigma);
                kept.push(i);
            }
        }
    }
    (p, kept)
}

/// How the fresh lattice is laid out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LatticeSpec {
    /// The `n^3` lattice of the periodic box of length `box_length`.
    Periodic { n: usize, box_length: f64 },
    /// Spacing `h` in free space; the lattice covers the particles plus `margin` core radii.
    Free { h: f64, margin: f64 },
}

/// The fresh lattice of `spec` for the particles `old` and the period of its box (`None`: free
/// space, the lattice covering the particles plus `margin` of their largest core radius).
pub fn lattice_for(old: &Particles, spec: &LatticeSpec) -> (Lattice, Option<f64>) {
    match spec {
        LatticeSpec::Periodic { n, box_length } => {
            (Lattice::periodic_box(*n, *box_length), Some(*box_length))
        }
        LatticeSpec::Free { h, margin } => {
            let smax = old.sigma.iter().copied().fold(0.0, f64::max);
            let mut lo = [f64::INFINITY; 3];
            let mut hi = [f64::NEG_INFINITY; 3];
            for x in &old.position {
                for c in 0..3 {
                    lo[c] = lo[c].min(x[c] - margin * smax);
                    hi[c] = hi[c].max(x[c] + margin * smax);
                }
            }
            (Lattice::covering(lo, hi, *h), None)
        }
    }
}

/// Re-interpolates `old` onto a fresh lattice with core radius `sigma0`: the vorticity of the
/// old blobs at the lattice points (truncated Gaussian sums, or their spectrum by spreading:
/// `s.sums`), the lattice solve ([`history::lattice_operator`]), then the fresh particles.
pub fn reinterpolate(
    old: &Particles,
    spec: &LatticeSpec,
    sigma0: f64,
    s: &RbfSettings,
) -> Result<(Particles, RbfReport)> {
    let t0 = Instant::now();
    let (lat, period) = lattice_for(old, spec);
    let (beta, mut report) = history::lattice_operator(
        &lat,
        period,
        &old.position,
        &old.strength,
        &old.sigma,
        sigma0,
        s,
    )?;
    let (p, _) = fresh_particles(&lat, sigma0, &beta, s);
    report.kept = p.len();
    report.seconds = t0.elapsed().as_secs_f64();
    Ok((p, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core_spreading::zeta;

    #[test]
    fn separable_product_equals_pairwise_sum() {
        for &periodic in &[false, true] {
            let lat = Lattice {
                origin: [-1.0, -0.8, -0.5],
                h: 0.25,
                dims: [6, 5, 7],
                periodic,
            };
            let x: Vec<f64> = (0..lat.len())
                .map(|i| ((i * 37) % 11) as f64 - 5.0)
                .collect();
            let (sigma, cut) = (0.3, 4.0);
            let y = apply_gaussian(&lat, sigma, cut, &x);
            let pts = lat.points();
            for i in (0..lat.len()).step_by(7) {
                let mut s = 0.0;
                for j in 0..lat.len() {
                    // cube truncation, periodic images along each axis
                    let mut prod = 1.0;
                    #[allow(clippy::needless_range_loop)]
                    for c in 0..3 {
                        let mut f = 0.0;
                        let l = lat.dims[c] as f64 * lat.h;
                        let imgs: Vec<f64> = if periodic {
                            (-3..=3).map(|k| k as f64 * l).collect()
                        } else {
                            vec![0.0]
                        };
                        for sh in imgs {
                            let d = pts[i][c] - pts[j][c] - sh;
                            if d.abs() <= cut * sigma + 1e-12 {
                                f += (-0.5 * d * d / (sigma * sigma)).exp();
                            }
                        }
                        prod *= f;
                    }
                    s += x[j] * prod * zeta(0.0, sigma);
                }
                assert!((s - y[i]).abs() < 1e-9 * (1.0 + s.abs()), "{s} vs {}", y[i]);
            }
        }
    }
}
