//! Ewald-split periodic reference for Gaussian vortex blobs: velocity and stretching of the
//! zero-mean periodic solution at a few targets, at a cost that stays practical for `N = 1e6`
//! sources (seconds to a minute on two cores for a thousand targets).
//!
//! # The split
//!
//! Blob `j` (strength `alpha_j`, core `sigma_j`) and all its images in the box of side `L`
//! (volume `V = L^3`) carry the vorticity Fourier coefficients
//! `omega_k = (1/V) sum_j alpha_j exp(-i k.x_j) exp(-k^2 sigma_j^2 / 2)`, `k in (2 pi / L) Z^3`.
//! The zero-mean periodic velocity is `u_k = i k x omega_k / k^2` (`k != 0`; `u_0 = 0`, the
//! convention of the spectral solver and of [`super::fourier_reference`]). With a splitting
//! width `s >= max_j sigma_j` we write the blob factor as
//!
//! ```text
//! exp(-k^2 sigma_j^2 / 2) = exp(-k^2 s^2 / 2) + [exp(-k^2 sigma_j^2 / 2) - exp(-k^2 s^2 / 2)]
//! ```
//!
//! and sum the two parts where each converges fast.
//!
//! * **Smooth (Fourier) part.** With the structure factor `S(k) = sum_j alpha_j exp(-i k.x_j)`
//!   (which does not depend on the cores),
//!   `u_F(x) = (1/V) sum_{k != 0} exp(-k^2 s^2/2) / k^2 * (i k x S(k)) exp(i k.x)`.
//!   Since `S(-k) = conj S(k)`, only a half space of modes is stored and every term counts
//!   twice: `u_F = (2/V) sum_{k in H} Re[A_k exp(i k.x)]`, `A_k = w_k i k x S(k)`,
//!   `w_k = exp(-k^2 s^2/2) / k^2`. The velocity gradient is `d_l u_F = Re[i k_l ...]`, so the
//!   stretching `(alpha_i . grad) u_F = (2/V) sum_{k in H} Re[i (k.alpha_i) A_k exp(i k.x_i)]`.
//! * **Real-space part.** The bracket is the Fourier transform of the difference of two
//!   blob fields of the same strength, core `sigma_j` minus core `s`. In real space that is the
//!   regularized Biot-Savart law of `docs/CONVENTIONS.md` with
//!   `K(r) -> K_sigma_j(r) - K_s(r) = [q(r/sigma_j) - q(r/s)] / r^3`
//!   (and `K'/r` likewise), summed over all sources and images:
//!   `u_R(x) = 1/(4 pi) sum_j sum_n [K_sigma_j - K_s](r) alpha_j x d`, `d = x - x_j - n L`.
//!   Because `1 - q(rho) = erfc(rho / sqrt 2) + sqrt(2/pi) rho exp(-rho^2/2)`, the difference
//!   decays like `exp(-r^2 / (2 s^2))`: the lattice sum converges absolutely and is cut at
//!   `r_c = rho_c s`. Its `k = 0` coefficient is zero (the kernel is odd in `d`), so the sum of
//!   both parts is the zero-mean solution; no surface term appears.
//!
//! A coincident pair (`r = 0`) contributes the analytic limits of the kernel (zero velocity,
//! finite stretching), as in the direct sum, so that blob self-terms cancel exactly between the
//! two parts.
//!
//! # Cut-offs and the error bound
//!
//! For a requested relative tolerance `eps` (default `1e-12`):
//! * the real-space cut-off `rho_c = r_c / s` is the smallest `rho` with `1 - q(rho) <= eps`
//!   (`rho_c = 7.65` at `1e-12`): a dropped pair is at most `eps` times the singular kernel
//!   `1/r^2` at its distance, and the Gaussian tail of the dropped pairs sums to the same order;
//! * the Fourier cut-off `k_c = kappa / s` with `exp(-kappa^2 / 2) = eps`
//!   (`kappa = sqrt(2 ln(1/eps))`, `7.43` at `1e-12`): the dropped modes carry the factor
//!   `exp(-k^2 s^2/2) <= eps` relative to the unsuppressed modes (`k s << 1`), times a factor
//!   `O(kappa)` for the stretching.
//!
//! The tests check the result against [`super::fourier_reference`] (an independent
//! `O(N M k^3)` sum) to `1e-10` and its independence of `s` to `1e-10`.
//!
//! # Cost and the choice of `s`
//!
//! With `n_h = (2 pi / 3) (k_c L / 2 pi)^3` half-space modes, the structure factors cost
//! `O(N n_h)` (three `sin_cos` per source and axis, then one complex product per mode) and the
//! targets `O(M n_h)`; the real-space part costs `O(M N (4 pi / 3) r_c^3 / V)` kernel pairs, found
//! through a cell list. Balancing the two with the measured cost ratio (a real-space pair, with
//! its `erf` and `exp`, costs about `REAL_TO_FOURIER_COST` mode-source products) gives
//! `s^6 = (n_h s^3) c_F (N + M) / (c_R M N (4 pi/3) rho_c^3 / V)`; `s` is then raised to at
//! least `max sigma_j`.

use crate::kernel::{cross, dot, kernel_factors, INV_4PI, SQRT_2_OVER_PI};
use crate::periodic::{check_total_strength, Periodic};
use crate::{Fields, FmmError, Sources, Targets};
use rayon::prelude::*;
use std::f64::consts::PI;

/// Cost of one real-space kernel pair in units of one mode-source product of the structure
/// factor (measured on the development machine, order of magnitude).
const REAL_TO_FOURIER_COST: f64 = 12.0;

/// Parameters of the Ewald reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EwaldParams {
    /// Box length `L`; the box is `[-L/2, L/2)^3`.
    pub box_length: f64,
    /// Relative truncation tolerance `eps` of both sums (see the module doc).
    pub tolerance: f64,
    /// Splitting width `s` (same length unit as positions); `None` chooses it for speed.
    pub split_width: Option<f64>,
}

impl Default for EwaldParams {
    fn default() -> Self {
        Self {
            box_length: 2.0 * PI,
            tolerance: 1e-12,
            split_width: None,
        }
    }
}

/// The smallest `rho` with `1 - q(rho) <= eps` (bisection; `1 - q` is decreasing).
pub fn real_space_cutoff(eps: f64) -> f64 {
    let tail = |rho: f64| {
        libm::erfc(rho * std::f64::consts::FRAC_1_SQRT_2)
            + SQRT_2_OVER_PI * rho * (-0.5 * rho * rho).exp()
    };
    let (mut lo, mut hi) = (0.0f64, 40.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if tail(mid) > eps {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// `kappa = k_c s` with `exp(-kappa^2 / 2) = eps`.
pub fn fourier_cutoff(eps: f64) -> f64 {
    (2.0 * (1.0 / eps).ln()).sqrt()
}

/// One row of half-space modes: `(nx, ny, nz)` for `nz in nz0..=nz1`, stored from `offset`.
#[derive(Clone, Copy, Debug)]
struct ModeRow {
    nx: i32,
    ny: i32,
    nz0: i32,
    nz1: i32,
    offset: usize,
}

/// Sources binned into a periodic cell list for the real-space sum.
struct CellList {
    /// Cells per dimension.
    nc: usize,
    /// Cell width `L / nc`.
    width: f64,
    /// Neighbour cells searched per dimension on each side.
    reach: i64,
    /// `start[c]..start[c+1]` are the sources of cell `c` in the sorted arrays.
    start: Vec<usize>,
    position: Vec<[f64; 3]>,
    strength: Vec<[f64; 3]>,
    sigma: Vec<f64>,
}

/// The Ewald reference for one set of sources: structure factors and cell list, ready to
/// evaluate any targets.
pub struct EwaldReference {
    params: EwaldParams,
    /// Splitting width `s`.
    s: f64,
    /// Real-space cut-off radius `r_c = rho_c s`.
    r_cut: f64,
    /// Largest mode index `|n|` (Fourier cut-off `k_c = n_max 2 pi / L`, rounded up).
    n_max: i32,
    rows: Vec<ModeRow>,
    /// Per half-space mode: `A_k = w_k i k x S(k)`, real and imaginary parts.
    a_re: Vec<[f64; 3]>,
    a_im: Vec<[f64; 3]>,
    cells: CellList,
}

impl EwaldReference {
    /// Prepares the reference for `sources`; `targets_hint` (the number of targets to be
    /// evaluated) enters only the automatic choice of `s`.
    ///
    /// Errors: invalid sources, a non-zero total strength, a bad box length or tolerance, or a
    /// splitting width smaller than the largest core radius.
    pub fn new(
        sources: &Sources,
        params: &EwaldParams,
        targets_hint: usize,
    ) -> Result<Self, FmmError> {
        sources.validate()?;
        Periodic {
            box_length: params.box_length,
            image_levels: 0,
        }
        .validate()?;
        check_total_strength(sources)?;
        if !(params.tolerance > 0.0 && params.tolerance < 1e-2) {
            return Err(FmmError::BadParameter {
                name: "tolerance",
                value: params.tolerance.to_string(),
                reason: "the Ewald tolerance must lie in (0, 1e-2)",
            });
        }
        let l = params.box_length;
        let v = l.powi(3);
        let sigma_max = sources.max_sigma();
        let rho_c = real_space_cutoff(params.tolerance);
        let kappa = fourier_cutoff(params.tolerance);
        let n = sources.len() as f64;
        let m = targets_hint.max(1) as f64;
        let s = match params.split_width {
            Some(s) => {
                if !(s.is_finite() && s >= sigma_max) {
                    return Err(FmmError::BadParameter {
                        name: "split_width",
                        value: format!("{s} (largest core radius {sigma_max})"),
                        reason: "the splitting width must be finite and at least the largest \
                                 core radius",
                    });
                }
                s
            }
            None => {
                // n_h s^3 = (2 pi/3) (kappa L / 2 pi)^3 ; real pairs per target / s^3 =
                // N (4 pi / 3) rho_c^3 / V
                let modes_s3 = 2.0 * PI / 3.0 * (kappa * l / (2.0 * PI)).powi(3);
                let pairs_s3 = n * 4.0 * PI / 3.0 * rho_c.powi(3) / v;
                let s6 = modes_s3 * (n + m) / (REAL_TO_FOURIER_COST * m * pairs_s3);
                s6.powf(1.0 / 6.0).max(sigma_max)
            }
        };
        let dk = 2.0 * PI / l;
        let kc = kappa / s;
        let nc2 = (kc / dk).powi(2);
        let n_max = (kc / dk).floor() as i32;
        // half space H: nz > 0, or nz = 0 and ny > 0, or nz = ny = 0 and nx > 0
        let mut rows = Vec::new();
        let mut total = 0usize;
        for nx in -n_max..=n_max {
            for ny in -n_max..=n_max {
                let rem = nc2 - (nx * nx + ny * ny) as f64;
                if rem < 0.0 {
                    continue;
                }
                let mut nz1 = rem.sqrt().floor() as i32;
                while ((nz1 + 1) * (nz1 + 1)) as f64 <= rem {
                    nz1 += 1;
                }
                while nz1 >= 0 && (nz1 * nz1) as f64 > rem {
                    nz1 -= 1;
                }
                let nz0 = if ny > 0 || (ny == 0 && nx > 0) { 0 } else { 1 };
                if nz1 < nz0 {
                    continue;
                }
                rows.push(ModeRow {
                    nx,
                    ny,
                    nz0,
                    nz1,
                    offset: total,
                });
                total += (nz1 - nz0 + 1) as usize;
            }
        }
        let wrap = Periodic {
            box_length: l,
            image_levels: 0,
        };
        let pos: Vec<[f64; 3]> = sources.position.iter().map(|&x| wrap.wrap(x)).collect();
        let (s_re, s_im) = structure_factors(&pos, &sources.strength, &rows, total, n_max, dk);
        let (mut a_re, mut a_im) = (vec![[0.0; 3]; total], vec![[0.0; 3]; total]);
        for row in &rows {
            for nz in row.nz0..=row.nz1 {
                let i = row.offset + (nz - row.nz0) as usize;
                let k = [row.nx as f64 * dk, row.ny as f64 * dk, nz as f64 * dk];
                let k2 = dot(k, k);
                let w = 2.0 * (-0.5 * k2 * s * s).exp() / (k2 * v);
                // i k x (Sr + i Si) = -k x Si + i k x Sr ; the factor 2 counts -k
                let kr = cross(k, s_re[i]);
                let ki = cross(k, s_im[i]);
                a_re[i] = ki.map(|c| -w * c);
                a_im[i] = kr.map(|c| w * c);
            }
        }
        let r_cut = rho_c * s;
        let cells = CellList::build(&pos, sources, l, r_cut);
        log::debug!(
            "Ewald reference: N = {}, s = {s:.4}, r_c = {r_cut:.4}, k_c = {kc:.3} \
             ({total} half-space modes), {}^3 cells (reach {})",
            sources.len(),
            cells.nc,
            cells.reach
        );
        Ok(Self {
            params: *params,
            s,
            r_cut,
            n_max,
            rows,
            a_re,
            a_im,
            cells,
        })
    }

    /// Splitting width `s`.
    pub fn split_width(&self) -> f64 {
        self.s
    }

    /// Real-space cut-off radius `r_c`.
    pub fn real_space_radius(&self) -> f64 {
        self.r_cut
    }

    /// Number of half-space Fourier modes.
    pub fn modes(&self) -> usize {
        self.a_re.len()
    }

    /// Velocity and stretching at `targets` (in their order), including the `1/(4 pi)` of the
    /// Biot-Savart law: the same quantities as [`crate::evaluate`] returns.
    pub fn evaluate(&self, targets: &Targets) -> Result<Fields, FmmError> {
        targets.validate()?;
        let l = self.params.box_length;
        let wrap = Periodic {
            box_length: l,
            image_levels: 0,
        };
        let dk = 2.0 * PI / l;
        let (velocity, stretching): (Vec<[f64; 3]>, Vec<[f64; 3]>) = targets
            .position
            .par_iter()
            .zip(targets.strength.par_iter())
            .map(|(&x, &alpha)| {
                let x = wrap.wrap(x);
                let (uf, sf) = self.fourier_at(x, alpha, dk);
                let (ur, sr) = self.real_space_at(x, alpha);
                (
                    std::array::from_fn(|c| uf[c] + ur[c]),
                    std::array::from_fn(|c| sf[c] + sr[c]),
                )
            })
            .unzip();
        Ok(Fields {
            velocity,
            stretching,
        })
    }

    fn fourier_at(&self, x: [f64; 3], alpha: [f64; 3], dk: f64) -> ([f64; 3], [f64; 3]) {
        let nm = self.n_max;
        let e: [Vec<(f64, f64)>; 3] = std::array::from_fn(|c| {
            (-nm..=nm)
                .map(|n| {
                    let (s, co) = (n as f64 * dk * x[c]).sin_cos();
                    (co, s)
                })
                .collect()
        });
        let (mut u, mut st) = ([0.0; 3], [0.0; 3]);
        for row in &self.rows {
            let (ax, ay) = (e[0][(row.nx + nm) as usize], e[1][(row.ny + nm) as usize]);
            let b = (ax.0 * ay.0 - ax.1 * ay.1, ax.0 * ay.1 + ax.1 * ay.0);
            let kxa = row.nx as f64 * dk * alpha[0] + row.ny as f64 * dk * alpha[1];
            for nz in row.nz0..=row.nz1 {
                let az = e[2][(nz + nm) as usize];
                let (c, s) = (b.0 * az.0 - b.1 * az.1, b.0 * az.1 + b.1 * az.0);
                let i = row.offset + (nz - row.nz0) as usize;
                let (ar, ai) = (self.a_re[i], self.a_im[i]);
                let kda = kxa + nz as f64 * dk * alpha[2];
                for d in 0..3 {
                    u[d] += ar[d] * c - ai[d] * s;
                    st[d] -= kda * (ar[d] * s + ai[d] * c);
                }
            }
        }
        (u, st)
    }

    fn real_space_at(&self, x: [f64; 3], alpha: [f64; 3]) -> ([f64; 3], [f64; 3]) {
        let cl = &self.cells;
        let l = self.params.box_length;
        let s = self.s;
        let rc2 = self.r_cut * self.r_cut;
        let nc = cl.nc as i64;
        let home: [i64; 3] = std::array::from_fn(|c| {
            (((x[c] + 0.5 * l) / cl.width).floor() as i64).clamp(0, nc - 1)
        });
        let (mut u, mut st) = ([0.0; 3], [0.0; 3]);
        let r = cl.reach;
        for ox in -r..=r {
            for oy in -r..=r {
                for oz in -r..=r {
                    let raw = [home[0] + ox, home[1] + oy, home[2] + oz];
                    // cell index modulo nc and the image shift that brings it next to the target
                    let idx = raw.map(|q| q.rem_euclid(nc));
                    let shift: [f64; 3] =
                        std::array::from_fn(|c| (raw[c] - idx[c]) as f64 / nc as f64 * l);
                    let cell = ((idx[0] * nc + idx[1]) * nc + idx[2]) as usize;
                    for j in cl.start[cell]..cl.start[cell + 1] {
                        let xj = cl.position[j];
                        let d = [
                            x[0] - xj[0] - shift[0],
                            x[1] - xj[1] - shift[1],
                            x[2] - xj[2] - shift[2],
                        ];
                        let r2 = dot(d, d);
                        if r2 > rc2 {
                            continue;
                        }
                        let (k1, kp1) = kernel_factors(r2, cl.sigma[j]);
                        let (k2, kp2) = kernel_factors(r2, s);
                        let (dkk, dkp) = (k1 - k2, kp1 - kp2);
                        let aj = cl.strength[j];
                        let axd = cross(aj, d);
                        let axa = cross(aj, alpha);
                        let ad = dot(alpha, d);
                        for c in 0..3 {
                            u[c] += dkk * axd[c];
                            st[c] += dkk * axa[c] + dkp * ad * axd[c];
                        }
                    }
                }
            }
        }
        (u.map(|v| v * INV_4PI), st.map(|v| v * INV_4PI))
    }
}

impl CellList {
    fn build(pos: &[[f64; 3]], sources: &Sources, l: f64, r_cut: f64) -> Self {
        // cells about r_c / 3 wide: the searched cube is (7/3)^3 / (4 pi/3) ~ 3 times the
        // sphere; at most 64 cells per dimension (memory and empty-cell overhead)
        let nc = ((3.0 * l / r_cut).floor() as usize).clamp(1, 64);
        let width = l / nc as f64;
        let reach = (r_cut / width).ceil() as i64;
        let cell_of = |x: [f64; 3]| {
            let i: [usize; 3] = std::array::from_fn(|c| {
                (((x[c] + 0.5 * l) / width).floor() as i64).clamp(0, nc as i64 - 1) as usize
            });
            (i[0] * nc + i[1]) * nc + i[2]
        };
        let ncell = nc * nc * nc;
        let mut count = vec![0usize; ncell + 1];
        let ids: Vec<usize> = pos.iter().map(|&x| cell_of(x)).collect();
        for &c in &ids {
            count[c + 1] += 1;
        }
        for c in 0..ncell {
            count[c + 1] += count[c];
        }
        let start = count.clone();
        let mut fill = count;
        let n = pos.len();
        let (mut p, mut a, mut sg) = (vec![[0.0; 3]; n], vec![[0.0; 3]; n], vec![0.0; n]);
        for (j, &c) in ids.iter().enumerate() {
            let k = fill[c];
            fill[c] += 1;
            p[k] = pos[j];
            a[k] = sources.strength[j];
            sg[k] = sources.sigma[j];
        }
        Self {
            nc,
            width,
            reach,
            start,
            position: p,
            strength: a,
            sigma: sg,
        }
    }
}

/// Structure factors `S(k) = sum_j alpha_j exp(-i k.x_j)` on the half-space modes, in parallel
/// over chunks of sources (one accumulator per chunk, summed at the end).
fn structure_factors(
    pos: &[[f64; 3]],
    strength: &[[f64; 3]],
    rows: &[ModeRow],
    total: usize,
    nm: i32,
    dk: f64,
) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
    let threads = rayon::current_num_threads().max(1);
    let chunk = pos.len().div_ceil(4 * threads).max(256);
    let zero = || (vec![[0.0; 3]; total], vec![[0.0; 3]; total]);
    pos.par_chunks(chunk)
        .zip(strength.par_chunks(chunk))
        .map(|(pc, ac)| {
            let (mut sr, mut si) = zero();
            let width = (2 * nm + 1) as usize;
            let mut e = vec![(0.0, 0.0); 3 * width];
            for (x, a) in pc.iter().zip(ac) {
                // exp(-i n dk x_c) for n = -nm..nm
                for c in 0..3 {
                    for (q, n) in (-nm..=nm).enumerate() {
                        let (s, co) = (n as f64 * dk * x[c]).sin_cos();
                        e[c * width + q] = (co, -s);
                    }
                }
                for row in rows {
                    let ax = e[(row.nx + nm) as usize];
                    let ay = e[width + (row.ny + nm) as usize];
                    let b = (ax.0 * ay.0 - ax.1 * ay.1, ax.0 * ay.1 + ax.1 * ay.0);
                    let ez = &e
                        [2 * width + (row.nz0 + nm) as usize..=2 * width + (row.nz1 + nm) as usize];
                    let (or, oi) = (
                        &mut sr[row.offset..row.offset + ez.len()],
                        &mut si[row.offset..row.offset + ez.len()],
                    );
                    for ((z, r), i) in ez.iter().zip(or.iter_mut()).zip(oi.iter_mut()) {
                        let (c, s) = (b.0 * z.0 - b.1 * z.1, b.0 * z.1 + b.1 * z.0);
                        for d in 0..3 {
                            r[d] += a[d] * c;
                            i[d] += a[d] * s;
                        }
                    }
                }
            }
            (sr, si)
        })
        .reduce(zero, |(mut ar, mut ai), (br, bi)| {
            for (x, y) in ar.iter_mut().zip(&br) {
                for d in 0..3 {
                    x[d] += y[d];
                }
            }
            for (x, y) in ai.iter_mut().zip(&bi) {
                for d in 0..3 {
                    x[d] += y[d];
                }
            }
            (ar, ai)
        })
}

/// Velocity and stretching of the zero-mean periodic solution at `targets` by the Ewald split
/// (see the module doc), with the default tolerance and an automatic splitting width.
pub fn ewald_reference(
    sources: &Sources,
    targets: &Targets,
    box_length: f64,
) -> Result<Fields, FmmError> {
    let params = EwaldParams {
        box_length,
        ..EwaldParams::default()
    };
    EwaldReference::new(sources, &params, targets.len())?.evaluate(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutoffs_match_their_definitions() {
        let rho = real_space_cutoff(1e-12);
        let tail = |r: f64| 1.0 - crate::kernel::cutoff(r);
        assert!((7.0..8.5).contains(&rho), "{rho}");
        assert!(
            libm::erfc(rho / 2f64.sqrt()) + SQRT_2_OVER_PI * rho * (-0.5 * rho * rho).exp()
                <= 1e-12
        );
        assert!(tail(rho - 0.1) > 1e-12);
        let kappa = fourier_cutoff(1e-12);
        assert!(((-0.5 * kappa * kappa).exp() - 1e-12).abs() < 1e-20);
    }
}
