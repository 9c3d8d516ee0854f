//! The Gaussian sums of the periodic re-interpolation as a type-1 non-uniform FFT, and the
//! lattice system solved on their spectrum (`reinterpolation.sums = { kind = "spread" }`).
//!
//! The direct route ([`crate::cells::gaussian_sum`]) evaluates
//! `omega(y_i) = sum_p alpha_p zeta_{sigma_p}(y_i - x_p)` at every lattice point from every
//! particle within `cutoff` core radii (about `(2 cutoff sigma / h)^3`, some 1500 particles
//! per point), then transforms it for the Fourier solve. Here the sums are never formed at the
//! lattice points:
//!
//! 1. **spread** ([`grid`]): the strengths onto a fine periodic grid of `m^3` points with the
//!    compact "exponential of semicircle" kernel of `w^3` points ([`kernel`]; Barnett, Magland
//!    & af Klinteberg, SIAM J. Sci. Comput. 41 (2019) C479);
//! 2. **FFT** of the fine grid;
//! 3. **deconvolve and fold** ([`fold`]): divide by the kernel's transform, multiply by the
//!    core's `exp(-k^2 sigma^2 / 2)`, and add the fine modes onto the lattice modes they alias
//!    to under sampling at the lattice points: the DFT of the periodic Gaussian sums at the
//!    lattice, `W(k)`, without their truncation;
//! 4. **solve** in Fourier space: `beta_hat = W F / (c S S S)`, one inverse FFT of the lattice.
//!
//! This is the transform-side twin of fast Gaussian gridding (L. Greengard and J.-Y. Lee,
//! SIAM Rev. 46 (2004) 443) with the ES kernel in place of the Gaussian. The width `w`, the
//! shape `beta` and the grid `m` come from `tolerance` ([`design`]: the relative error of the
//! lattice values, for spatially uncorrelated strengths and for every resolved mode), for the
//! smallest core `sigma0` of the run (larger cores are only more accurate).
//!
//! **Cores.** The Gaussian's transform depends on each particle's core, so it cannot be applied
//! after the particles are summed unless they share it. After a re-interpolation every particle
//! has the same `sigma0` and core spreading keeps them equal (`sigma^2 = sigma0^2 + 2 nu (t -
//! t_reset)`), so the exact factorisation is the rule: one spread per distinct core. Particles
//! whose cores differ ([`core_bins`]) are grouped in bins of cores so close that using the
//! bin's middle variance for all of them errs by less than `tolerance / 4` on any mode (the
//! error of `exp(-k^2 (s^2 +- d) / 2)` against `exp(-k^2 s^2 / 2)` is at most `d / (e s^2)`),
//! and every bin gets its own spread and FFT; more than [`MAX_BINS`] bins (a particle set
//! read with arbitrary cores) fall back to the direct sums.
//!
//! **Over z slabs** the spread needs a halo of `ceil(w / 2)` fine planes (the kernel's half
//! width, about `w h_f / 2 = 1.6 h` at `w = 8`, `m = 2.5 n`) instead of the direct sums'
//! `cutoff sigma` (5 to 7 h); the fine grid's FFT is a slab FFT of `m^3` and the folding reads
//! the `m / n` aliases of each lattice mode, which lie in other ranks' slabs after the
//! transpose (a gather of the fine modes `|q| <= m/2` onto the lattice layout).

pub mod design;
pub mod fold;
pub mod grid;
pub mod kernel;
#[cfg(test)]
mod tests;

use super::{Lattice, LatticeFilter};
use design::Design;
use grid::{Buckets, FineGrid};
use kernel::EsKernel;
use num_complex::Complex64;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use thiserror::Error;
use vortex_spectral::fft::Fft3;

/// The smallest tolerance: the round-off of the f64 spread, FFT and folding on grids up to
/// [`design::MAX_FINE`] points per axis stays below it.
pub const MIN_TOLERANCE: f64 = 1e-12;
/// The largest tolerance (beyond it the sums are not worth the name).
pub const MAX_TOLERANCE: f64 = 1e-2;
/// The cutoff, in core radii, of the lattice matrix of the spreading route: its weights
/// `exp(-o^2 h^2 / 2 sigma^2)` vanish in f64 before it (`exp(-800)`), so the matrix is the
/// untruncated one that matches the untruncated sums (the direct route truncates both at
/// `reinterpolation.cutoff`).
pub const UNTRUNCATED: f64 = 40.0;
/// Bins of distinct cores spread separately before the direct sums are used instead.
pub const MAX_BINS: usize = 8;

/// How the re-interpolation computes the vorticity of the old blobs at the lattice
/// (`reinterpolation.sums`, a TOML inline table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum LatticeSums {
    /// Truncated Gaussian sums at every lattice point (`cutoff` core radii): the default.
    #[default]
    Direct,
    /// Spreading and FFT (this module; periodic boxes only): the relative error of the lattice
    /// values against the exact periodic sums, in `[1e-12, 1e-2]`.
    Spread { tolerance: f64 },
}

impl LatticeSums {
    pub fn is_direct(&self) -> bool {
        matches!(self, Self::Direct)
    }

    /// The configuration key and the reason a run with these sums cannot start: the
    /// tolerance out of range or beyond the kernel ([`SpreadPlan::new`]), a free-space run,
    /// a lattice of `n` points (`None`: free space) that is odd.
    pub fn check_run(
        &self,
        n: Option<usize>,
        box_length: f64,
        sigma0: f64,
    ) -> Result<(), (&'static str, String)> {
        self.check().map_err(|e| ("reinterpolation.sums", e))?;
        let Self::Spread { tolerance } = *self else {
            return Ok(());
        };
        let Some(n) = n else {
            return Err((
                "reinterpolation.sums",
                "spreading needs a periodic box (domain.periodic = true); free space takes \
                 { kind = \"direct\" }"
                    .into(),
            ));
        };
        if n % 2 != 0 {
            return Err((
                "reinterpolation.n",
                format!("spreading needs an even number of lattice points, got {n}"),
            ));
        }
        SpreadPlan::new(n, box_length, sigma0, tolerance)
            .map(|_| ())
            .map_err(|e| ("reinterpolation.sums.tolerance", e.to_string()))
    }

    /// Why the settings are out of range, if they are.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            Self::Direct => Ok(()),
            Self::Spread { tolerance } => {
                if (MIN_TOLERANCE..=MAX_TOLERANCE).contains(&tolerance) {
                    Ok(())
                } else {
                    Err(format!(
                        "tolerance must lie in [{MIN_TOLERANCE:e}, {MAX_TOLERANCE:e}] (below it the \
                         round-off of the f64 sums), got {tolerance:e}"
                    ))
                }
            }
        }
    }
}

/// What can stop a spreading.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SpreadError {
    #[error(
        "a tolerance of {tolerance:e} is beyond a kernel of at most {max_width} points on a fine \
         grid of at most {max_fine}^3 for this lattice (n = {n}, sigma0/h = {sigma_h:.3}, \
         initial.overlap): {}",
        reachable(*.best)
    )]
    Unreachable {
        tolerance: f64,
        best: f64,
        n: usize,
        sigma_h: f64,
        max_width: usize,
        max_fine: usize,
    },
    #[error(
        "a core of {core:e} is below the smallest core {sigma_min:e} the spreading plan was \
         designed for"
    )]
    CoreBelowDesign { core: f64, sigma_min: f64 },
    #[error("the cores fall into more than {MAX_BINS} bins of equal transform")]
    TooManyBins,
    #[error("{0}")]
    Memory(String),
    #[error("{0}")]
    Tolerance(String),
    #[error("spreading needs a cubic periodic lattice of an even number of points, got {0:?}")]
    Lattice([usize; 3]),
    #[error("{0}")]
    Solve(String),
}

fn reachable(best: f64) -> String {
    if best.is_finite() {
        format!("the smallest reachable is {best:.1e}")
    } else {
        "no fine grid within that limit is fine enough for this lattice and core".into()
    }
}

/// Wall seconds of the phases of [`SpreadPlan::lattice_spectra_timed`]: the bucketing (and
/// the factors `d(q)`), the spread, the fine FFT, the folding (three components, every bin).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpreadTimes {
    pub bin: f64,
    pub spread: f64,
    pub fft: f64,
    pub fold: f64,
}

/// Particles whose cores share one Gaussian transform to the tolerance: their `core` (the
/// bin's middle variance) and indices.
#[derive(Clone, Debug, PartialEq)]
pub struct CoreBin {
    pub core: f64,
    pub members: Vec<usize>,
}

/// The particles grouped by core (module documentation): bins of variances within
/// `[v, v (1 + e tolerance / 2)]`, at most [`MAX_BINS`].
pub fn core_bins(cores: &[f64], tolerance: f64) -> Result<Vec<CoreBin>, SpreadError> {
    let mut order: Vec<usize> = (0..cores.len()).collect();
    order.sort_by(|&a, &b| cores[a].total_cmp(&cores[b]).then(a.cmp(&b)));
    let spread = std::f64::consts::E * tolerance / 2.0;
    let mut bins: Vec<CoreBin> = Vec::new();
    let mut lo = f64::NAN;
    let mut hi = f64::NAN;
    for p in order {
        let v = cores[p] * cores[p];
        if bins.is_empty() || v > lo * (1.0 + spread) {
            if let Some(b) = bins.last_mut() {
                b.core = (0.5 * (lo + hi)).sqrt();
            }
            if bins.len() == MAX_BINS {
                return Err(SpreadError::TooManyBins);
            }
            bins.push(CoreBin {
                core: 0.0,
                members: Vec::new(),
            });
            lo = v;
        }
        hi = v;
        bins.last_mut().expect("pushed above").members.push(p);
    }
    if let Some(b) = bins.last_mut() {
        b.core = (0.5 * (lo + hi)).sqrt();
    }
    for b in &mut bins {
        b.members.sort_unstable();
    }
    Ok(bins)
}

/// A spreading plan for the periodic `n^3` lattice of the box `L`: the design of the smallest
/// core `sigma_min` at `tolerance`.
#[derive(Clone, Debug, PartialEq)]
pub struct SpreadPlan {
    pub n: usize,
    pub box_length: f64,
    pub sigma_min: f64,
    pub tolerance: f64,
    pub design: Design,
}

impl SpreadPlan {
    /// The plan, or why the tolerance cannot be reached. Designs are cached, so a plan is
    /// cheap after the first of its lattice.
    pub fn new(
        n: usize,
        box_length: f64,
        sigma_min: f64,
        tolerance: f64,
    ) -> Result<Self, SpreadError> {
        LatticeSums::Spread { tolerance }
            .check()
            .map_err(SpreadError::Tolerance)?;
        let sigma_h = sigma_min * n as f64 / box_length;
        let design =
            design::design(n, sigma_h, tolerance).map_err(|u| SpreadError::Unreachable {
                tolerance,
                best: u.best,
                n,
                sigma_h,
                max_width: kernel::MAX_WIDTH,
                max_fine: design::MAX_FINE,
            })?;
        Ok(Self {
            n,
            box_length,
            sigma_min,
            tolerance,
            design,
        })
    }

    pub fn kernel(&self) -> EsKernel {
        self.design.kernel
    }

    /// The fine grid (its origin the box's corner, as the lattice's).
    pub fn grid(&self) -> FineGrid {
        let m = self.design.fine;
        FineGrid {
            m,
            origin: -0.5 * self.box_length,
            h: self.box_length / m as f64,
        }
    }

    /// `d(q)` of [`fold`] for the core `sigma`.
    pub fn axis_factors(&self, sigma: f64) -> Vec<f64> {
        fold::axis_factors(
            &self.design.kernel,
            self.design.fine,
            self.n,
            self.box_length,
            sigma,
        )
    }

    /// Bytes the host needs at once: one component's fine grid and its spectrum (f64), and
    /// the three lattice spectra.
    pub fn host_bytes(&self) -> f64 {
        let (m, n) = (self.design.fine as f64, self.n as f64);
        8.0 * m.powi(3) + 16.0 * m * m * (m / 2.0 + 1.0) + 3.0 * 16.0 * n * n * (n / 2.0 + 1.0)
    }

    /// Refuses a grid that `available` bytes (`None`: unknown) cannot hold, naming the key,
    /// the grid and the limit.
    pub fn check_memory_against(&self, available: Option<f64>) -> Result<(), SpreadError> {
        vortex_spectral::durable::check_memory_against(
            &format!(
                "reinterpolation.sums: the spreading grid of {}^3 points (from n = {} and \
                 tolerance {:e})",
                self.design.fine, self.n, self.tolerance
            ),
            self.host_bytes(),
            available,
        )
        .map_err(SpreadError::Memory)
    }

    /// The lattice half spectra `W` (three components) of the Gaussian sums of the blobs at
    /// `position` with values `values` and cores `cores` ([`fold`]).
    pub fn lattice_spectra(
        &self,
        position: &[[f64; 3]],
        values: &[[f64; 3]],
        cores: &[f64],
    ) -> Result<[Vec<Complex64>; 3], SpreadError> {
        self.lattice_spectra_timed(position, values, cores, &mut SpreadTimes::default())
    }

    /// [`Self::lattice_spectra`], its phases' wall times added to `times`.
    pub fn lattice_spectra_timed(
        &self,
        position: &[[f64; 3]],
        values: &[[f64; 3]],
        cores: &[f64],
        times: &mut SpreadTimes,
    ) -> Result<[Vec<Complex64>; 3], SpreadError> {
        if let Some(&core) = cores
            .iter()
            .find(|&&s| !(s >= self.sigma_min * (1.0 - 1e-12)))
        {
            return Err(SpreadError::CoreBelowDesign {
                core,
                sigma_min: self.sigma_min,
            });
        }
        let bins = core_bins(cores, self.tolerance)?;
        self.check_memory_against(vortex_spectral::durable::available_memory())?;
        let (n, m) = (self.n, self.design.fine);
        let (kernel, grid) = (self.design.kernel, self.grid());
        let fine_fft = Fft3::new(m);
        let mut fine = vec![0.0; m * m * m];
        let mut spec = vec![Complex64::new(0.0, 0.0); fine_fft.complex_len()];
        let mut out: [Vec<Complex64>; 3] =
            std::array::from_fn(|_| vec![Complex64::new(0.0, 0.0); n * n * (n / 2 + 1)]);
        for bin in &bins {
            let t = Instant::now();
            let d = self.axis_factors(bin.core);
            let buckets = Buckets::new(&kernel, &grid, position, &bin.members);
            times.bin += t.elapsed().as_secs_f64();
            for (c, w) in out.iter_mut().enumerate() {
                let t = Instant::now();
                let v: Vec<f64> = values.iter().map(|a| a[c]).collect();
                fine.fill(0.0);
                grid::spread(&kernel, &grid, position, &v, &buckets, &mut fine);
                let t1 = Instant::now();
                fine_fft.forward(&fine, &mut spec);
                let t2 = Instant::now();
                fold::fold(&spec, m, &d, n, w);
                times.spread += (t1 - t).as_secs_f64();
                times.fft += (t2 - t1).as_secs_f64();
                times.fold += t2.elapsed().as_secs_f64();
            }
        }
        Ok(out)
    }

    /// The strengths of blobs of core `sigma0` on the lattice points (lattice order) whose
    /// field interpolates `F omega`, `omega` the Gaussian sums of the blobs at `position`
    /// (values `values`, cores `cores`): [`Self::lattice_spectra`], then the Fourier solve of
    /// [`fold::solve_spectrum`] with the untruncated lattice matrix ([`UNTRUNCATED`]: the sums
    /// are untruncated too, so particles on the lattice with the core `sigma0` give back their
    /// values) and the transfer function `filter`.
    pub fn lattice_strengths(
        &self,
        position: &[[f64; 3]],
        values: &[[f64; 3]],
        cores: &[f64],
        sigma0: f64,
        filter: &LatticeFilter,
    ) -> Result<Vec<[f64; 3]>, SpreadError> {
        let n = self.n;
        let h = self.box_length / n as f64;
        let inv_eig = fold::inverse_eigenvalues(n, h, sigma0, UNTRUNCATED, filter)
            .map_err(|e| SpreadError::Solve(format!("{e}; lower initial.overlap")))?;
        let spectra = self.lattice_spectra(position, values, cores)?;
        let fft = Fft3::new(n);
        let mut beta = vec![[0.0; 3]; n * n * n];
        for (c, mut w) in spectra.into_iter().enumerate() {
            let x = fold::solve_spectrum(&fft, &mut w, &inv_eig, sigma0);
            for (b, v) in beta.iter_mut().zip(x) {
                b[c] = v;
            }
        }
        Ok(beta)
    }
}

/// Refuses, before a run, a spreading grid (`sums`, the periodic lattice of `n` points of the
/// box `box_length`, fresh core `sigma0`) that the host's available memory cannot hold.
pub fn check_host_memory(
    n: usize,
    box_length: f64,
    sigma0: f64,
    sums: &LatticeSums,
) -> Result<(), SpreadError> {
    match plan_for(&Lattice::periodic_box(n, box_length), sums, sigma0)? {
        Some(plan) => plan.check_memory_against(vortex_spectral::durable::available_memory()),
        None => Ok(()),
    }
}

/// The plan of the periodic lattice `lat` for `sums`, or `None` for the direct sums (the
/// setting, or a free-space lattice).
pub fn plan_for(
    lat: &Lattice,
    sums: &LatticeSums,
    sigma0: f64,
) -> Result<Option<SpreadPlan>, SpreadError> {
    let LatticeSums::Spread { tolerance } = *sums else {
        return Ok(None);
    };
    if !lat.periodic {
        return Ok(None);
    }
    let n = lat.dims[0];
    if lat.dims != [n; 3] || n % 2 != 0 {
        return Err(SpreadError::Lattice(lat.dims));
    }
    SpreadPlan::new(n, n as f64 * lat.h, sigma0, tolerance).map(Some)
}

/// The particles of the spreading tests and of `vortex bench reinterp`: the points of the
/// periodic `n^3` lattice of the box `l`, each displaced by a uniform random vector of
/// `[-h/2, h/2]^3` (seeded), with strengths uniform in `[-1, 1]^3`: positions and strengths.
pub fn jittered_lattice(n: usize, l: f64, seed: u64) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let lat = Lattice::periodic_box(n, l);
    let pos = lat
        .points()
        .iter()
        .map(|y| std::array::from_fn(|c| y[c] + lat.h * rng.gen_range(-0.5..0.5)))
        .collect();
    let alpha = (0..lat.len())
        .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
        .collect();
    (pos, alpha)
}
