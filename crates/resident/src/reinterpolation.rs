//! The RBF re-interpolation of `vortex_method::reinterpolation` on the device, periodic box: the
//! vorticity of the blobs at the lattice points by the Gaussian sums of [`crate::lattice`],
//! the lattice system solved in Fourier space ([`crate::fourier::Fourier::solve_rbf`]: the
//! eigenvalues of the host's circulant axis factors, `vortex_method::reinterpolation::separable`,
//! times the transfer function of `[reinterpolation] filter`,
//! `vortex_method::reinterpolation::filter`),
//! and the fresh particles on the lattice with the initial core (the caller removes the mean
//! strength); [`Reinterpolator::carry_history`] takes the AB2 history through the same lattice
//! operator. The same lattice operations give the diagnostics' grid velocity
//! ([`Reinterpolator::grid_velocity`]: the blob vorticity on the grid, then Biot-Savart in
//! Fourier space).

use crate::fourier::{Fourier, GridSpectrum};
use crate::kernels::Kernels;
use crate::laps::Laps;
use crate::lattice::{bin, gaussian_sums, lattice_particles, Planes};
use crate::spreading::{core_bin, device_bytes, DeviceSpread, Precision};
use crate::state::{DeviceFields, DeviceParticles};
use cudarc::driver::{CudaSlice, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Once};
use vortex_cuda::{GpuDevice, GpuError, GpuResult};
use vortex_method::reinterpolation::history::History;
use vortex_method::reinterpolation::spreading::{plan_for, UNTRUNCATED};
use vortex_method::reinterpolation::{Lattice, LatticeFilter, LatticeSums, RbfReport};
use vortex_method::stepping::Stepper;
use vortex_method::{Config, Error, Result};

/// Settings of the periodic re-interpolation and the transforms and eigenvalues it keeps.
pub struct Reinterpolator {
    n: usize,
    box_length: f64,
    sigma0: f64,
    cutoff: f64,
    filter: LatticeFilter,
    ffts: HashMap<usize, Fourier>,
    inv_eig: Option<CudaSlice<f64>>,
    sums: LatticeSums,
    /// The spreading route, once [`Reinterpolator::prepare`] made it.
    spread: Option<DeviceSpread>,
    /// `f(k) / S(k)` of the untruncated lattice matrix (the spreading route's).
    inv_eig_exact: Option<CudaSlice<f64>>,
}

/// `f(k) / S(k)`, `k = 0..n`, of the circulant axis factor (the host's `AxisSolver`) and the
/// transfer function `filter`, or the reason the system is not safely positive definite.
pub use vortex_method::reinterpolation::spreading::fold::inverse_eigenvalues;

/// The transforms of one lattice size, made at its first use.
fn fourier_of<'a>(
    ffts: &'a mut HashMap<usize, Fourier>,
    s: &Arc<CudaStream>,
    n: usize,
) -> GpuResult<&'a mut Fourier> {
    match ffts.entry(n) {
        std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
        std::collections::hash_map::Entry::Vacant(e) => Ok(e.insert(Fourier::new(s, n)?)),
    }
}

static MIXED_CORES: Once = Once::new();
static SPREAD_OVER_SLABS: Once = Once::new();

impl Reinterpolator {
    pub fn new(config: &Config) -> Self {
        Self {
            n: config.lattice_n().unwrap_or(0),
            box_length: config.domain.box_length,
            sigma0: config.sigma0(),
            cutoff: config.reinterpolation.cutoff,
            filter: config.reinterpolation.filter,
            ffts: HashMap::new(),
            inv_eig: None,
            sums: config.reinterpolation.sums,
            spread: None,
            inv_eig_exact: None,
        }
    }

    /// Makes the spreading route of `reinterpolation.sums = { kind = "spread" }` on `dev`
    /// (kernels compiled, FFT planned, grid allocated) before the run starts, refusing a plan
    /// that does not fit the device's free memory, `reserved` bytes kept for the run's
    /// particles; nothing for the direct sums. Over several ranks the slabs keep the direct
    /// sums (logged once).
    pub fn prepare(&mut self, dev: &GpuDevice, reserved: f64, ranks: usize) -> Result<()> {
        let lat = Lattice::periodic_box(self.n, self.box_length);
        let plan = plan_for(&lat, &self.sums, self.sigma0)
            .map_err(|e| Error::Rbf(format!("reinterpolation.sums: {e}")))?;
        let Some(plan) = plan else {
            return Ok(());
        };
        if ranks > 1 {
            SPREAD_OVER_SLABS.call_once(|| {
                log::info!(
                    "reinterpolation.sums = \"spread\" is not implemented over slabs (several \
                     ranks): the slabs use the direct Gaussian sums"
                )
            });
            return Ok(());
        }
        let precision = Precision::for_tolerance(plan.tolerance);
        let need = device_bytes(&plan, precision);
        let (free, _) = dev
            .mem_info()
            .map_err(|e| Error::Other(format!("device memory: {e}")))?;
        if need + reserved > free as f64 {
            const GIB: f64 = (1u64 << 30) as f64;
            return Err(Error::Memory(format!(
                "reinterpolation.sums: the spreading grid of {m}^3 points ({precision:?}, from \
                 reinterpolation.n = {n} and tolerance {tol:e}) needs about {:.2} GiB on {} \
                 besides the {:.2} GiB of the particles; {:.2} GiB are free (limit: a coarser \
                 tolerance or the direct sums)",
                need / GIB,
                dev.name(),
                reserved / GIB,
                free as f64 / GIB,
                m = plan.design.fine,
                n = plan.n,
                tol = plan.tolerance,
            )));
        }
        let spread = DeviceSpread::new(dev, plan)
            .map_err(|e| Error::Rbf(format!("reinterpolation.sums: {e}")))?;
        log::info!(
            "reinterpolation.sums: spreading with a kernel of {} points on a {}^3 grid ({:?}, tiles \
             of {}^3)",
            spread.plan.design.kernel.width,
            spread.plan.design.fine,
            spread.precision,
            spread.tile
        );
        self.spread = Some(spread);
        Ok(())
    }

    /// The spreading route's strengths of the blobs `p` (`3 n^3` doubles, lattice order), or
    /// `None` when their cores differ by more than one transform allows (the caller uses the
    /// direct sums).
    fn spread_operator(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        p: &DeviceParticles,
    ) -> GpuResult<Option<CudaSlice<f64>>> {
        let Some(sp) = self.spread.as_mut() else {
            return Ok(None);
        };
        let mut laps = Laps::new(s, "lattice operator by spreading");
        let (lo, hi) = sp.range(s, &p.sigma, p.n)?;
        laps.lap("cores");
        if lo.is_nan() || lo < sp.plan.sigma_min * (1.0 - 1e-12) {
            return Err(GpuError::Unsupported(format!(
                "reinterpolation.sums: a core of {lo:e} is below the smallest core {:e} the \
                 spreading plan was designed for",
                sp.plan.sigma_min
            )));
        }
        let Some(core) = core_bin(lo, hi, sp.plan.tolerance) else {
            MIXED_CORES.call_once(|| {
                log::info!(
                    "reinterpolation.sums: the cores range over [{lo:e}, {hi:e}], more than one \
                     transform allows; those re-interpolations use the direct sums"
                )
            });
            return Ok(None);
        };
        let n = self.n;
        if self.inv_eig_exact.is_none() {
            let h = self.box_length / n as f64;
            let e = inverse_eigenvalues(n, h, self.sigma0, UNTRUNCATED, &self.filter)
                .map_err(|e| GpuError::Unsupported(format!("{e}; lower initial.overlap")))?;
            self.inv_eig_exact = Some(s.clone_htod(&e)?);
        }
        let f = fourier_of(&mut self.ffts, s, n)?;
        sp.lattice_spectra(k, s, p.into(), core, f.spectrum_mut())?;
        laps.lap("spectra");
        let mut field = s.alloc_zeros::<f64>(3 * n * n * n)?;
        let c = (2.0 * std::f64::consts::PI * self.sigma0 * self.sigma0).powf(-1.5);
        let inv_eig = self.inv_eig_exact.as_ref().expect("set above");
        f.solve_rbf_spectrum(k, s, &mut field, inv_eig, c)?;
        laps.lap("solve");
        Ok(Some(field))
    }

    /// The spreading route on the device, if [`Reinterpolator::prepare`] made one.
    pub fn spreading(&mut self) -> Option<&mut DeviceSpread> {
        self.spread.as_mut()
    }

    /// The vorticity of the blobs `p` at the points of `lat` (`3` doubles per point).
    fn lattice_vorticity(
        &self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        p: &DeviceParticles,
        lat: &Lattice,
        sigma_max: f64,
    ) -> GpuResult<CudaSlice<f64>> {
        let mut laps = crate::laps::Laps::new(s, "lattice vorticity");
        let b = bin(k, s, p, lat)?;
        laps.lap("bin");
        let omega = gaussian_sums(k, s, &b, lat, self.cutoff, sigma_max);
        laps.lap("sums");
        omega
    }

    /// `L_c[x] v = A^{-1} G_c[x] v` on the `n^3` lattice of the box: the Gaussian sums of the
    /// blobs `p` (their positions, strengths and cores, `sigma_max` the largest core) at the
    /// lattice points, then the lattice solve with the core `sigma0` (`3 n^3` doubles, lattice
    /// order): the strengths of [`Reinterpolator::reinterpolate`], and the operator through
    /// which [`Reinterpolator::carry_history`] takes the AB2 history.
    pub fn lattice_operator(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        p: &DeviceParticles,
        sigma_max: f64,
    ) -> GpuResult<CudaSlice<f64>> {
        if let Some(beta) = self.spread_operator(k, s, p)? {
            return Ok(beta);
        }
        let n = self.n;
        let lat = Lattice::periodic_box(n, self.box_length);
        let mut laps = Laps::new(s, "lattice operator by direct sums");
        let mut field = self.lattice_vorticity(k, s, p, &lat, sigma_max)?;
        laps.lap("vorticity");
        if self.inv_eig.is_none() {
            let e = inverse_eigenvalues(n, lat.h, self.sigma0, self.cutoff, &self.filter)
                .map_err(|e| GpuError::Unsupported(format!("{e}; lower initial.overlap")))?;
            self.inv_eig = Some(s.clone_htod(&e)?);
        }
        let c = (2.0 * std::f64::consts::PI * self.sigma0 * self.sigma0).powf(-1.5);
        let inv_eig = self.inv_eig.take().expect("set above");
        let r = fourier_of(&mut self.ffts, s, n)?.solve_rbf(k, s, &mut field, &inv_eig, c);
        self.inv_eig = Some(inv_eig);
        r?;
        laps.lap("solve");
        Ok(field)
    }

    /// The AB2 history `prev` of the old particles `p` (rates evaluated `elapsed` after the
    /// last reset, `nu` the viscosity of the core spreading) carried to the fresh particles of
    /// [`Reinterpolator::reinterpolate`] (`vortex_method::reinterpolation::history`, whose
    /// module documentation derives it): the strength rates through the lattice operator with
    /// the cores of that evaluation, the velocities with the fresh core `sigma0`. Three lattice
    /// operators per re-interpolation instead of one, and no second FMM evaluation in the step
    /// after it.
    #[allow(clippy::too_many_arguments)]
    pub fn carry_history(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        p: &DeviceParticles,
        prev: &DeviceFields,
        nu: f64,
        elapsed: f64,
        sigma_max: f64,
    ) -> GpuResult<DeviceFields> {
        carry_through(
            k,
            s,
            p,
            prev,
            nu,
            elapsed,
            |e| e,
            |q| self.lattice_operator(k, s, q, sigma_max),
        )
    }

    /// Fresh particles on the `n^3` lattice of the box (index = lattice order) whose blob
    /// field interpolates the vorticity of `p` at the lattice points; the mean strength is
    /// not yet removed.
    pub fn reinterpolate(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        p: &DeviceParticles,
        sigma_max: f64,
    ) -> GpuResult<(DeviceParticles, RbfReport)> {
        let (n, l) = (self.n, self.box_length);
        let lat = Lattice::periodic_box(n, l);
        let mut laps = crate::laps::Laps::new(s, "re-interpolation");
        let field = self.lattice_operator(k, s, p, sigma_max)?;
        laps.lap("sums and solve");
        let n3 = n * n * n;
        let planes = Planes::all(&lat);
        let fresh = lattice_particles(k, s, n, lat.origin[0], lat.h, self.sigma0, planes, field)?;
        laps.lap("fresh particles");
        let report = RbfReport {
            iterations: [0; 3],
            residual: 0.0,
            lattice_points: n3,
            kept: n3,
            seconds: 0.0,
        };
        Ok((fresh, report))
    }

    /// The velocity statistics of the blobs `p` on the `n^3` grid of the box of length `l`
    /// (the spectral solver's points, z fastest): the blob vorticity at the grid points
    /// (Gaussian sums truncated at `cutoff` core radii), `u_hat = i k x omega_hat / |k|^2`, the
    /// spectrum on the device; with `physical`, also the grid velocity itself (downloaded).
    #[allow(clippy::too_many_arguments)]
    pub fn grid_velocity(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        p: &DeviceParticles,
        n: usize,
        l: f64,
        cutoff: f64,
        sigma_max: f64,
        physical: bool,
    ) -> GpuResult<(GridSpectrum, Option<Vec<[f64; 3]>>)> {
        let lat = Lattice::periodic_box(n, l);
        let b = bin(k, s, p, &lat)?;
        let mut field = gaussian_sums(k, s, &b, &lat, cutoff, sigma_max)?;
        drop(b);
        let f = fourier_of(&mut self.ffts, s, n)?;
        f.biot_savart(k, s, &mut field, l, physical)?;
        let spectrum = f.spectrum(k, s)?;
        let velocity = if physical {
            let v = s.clone_dtoh(&field)?;
            Some(v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect())
        } else {
            None
        };
        Ok((spectrum, velocity))
    }
}

/// The AB2 history `prev` of the particles `p` carried through a lattice operator `op` (one GPU:
/// [`Reinterpolator::lattice_operator`]; slabs: the same over the ranks' planes): the strength
/// rates spread to the cores of their evaluation (`elapsed` after the last reset, viscosity
/// `nu`), the velocities with the fresh core; `E` the caller's error (`wrap` converts the
/// device's).
#[allow(clippy::too_many_arguments)]
pub fn carry_through<E>(
    k: &Kernels,
    s: &Arc<CudaStream>,
    p: &DeviceParticles,
    prev: &DeviceFields,
    nu: f64,
    elapsed: f64,
    wrap: impl Fn(GpuError) -> E,
    mut op: impl FnMut(&DeviceParticles) -> std::result::Result<CudaSlice<f64>, E>,
) -> std::result::Result<DeviceFields, E> {
    let copy = |a: &CudaSlice<f64>| s.clone_dtod(a).map_err(|e| wrap(e.into()));
    let mut q = DeviceParticles {
        n: p.n,
        pos: copy(&p.pos)?,
        alpha: copy(&prev.str)?,
        sigma: copy(&p.sigma)?,
        sigma0: copy(&p.sigma0)?,
    };
    q.spread(k, s, nu, elapsed).map_err(&wrap)?;
    let rates = op(&q)?;
    q.alpha = copy(&prev.vel)?;
    q.spread(k, s, 0.0, 0.0).map_err(&wrap)?;
    let vel = op(&q)?;
    Ok(DeviceFields { vel, str: rates })
}

/// The history the step after a re-interpolation of the state `p` uses: with
/// `reinterpolation.history = "carry"` and a history `previous` of the same particles,
/// [`Reinterpolator::carry_history`] (the previous rates were evaluated at step `step - 1`,
/// `step_reset` the step of the last reset); `None` (a Heun step) otherwise.
#[allow(clippy::too_many_arguments)]
pub fn carried_history(
    rbf: &mut Reinterpolator,
    k: &Kernels,
    s: &Arc<CudaStream>,
    stepper: &Stepper,
    p: &DeviceParticles,
    previous: Option<&DeviceFields>,
    step: u64,
    step_reset: u64,
    sigma_max: f64,
) -> GpuResult<Option<DeviceFields>> {
    match previous {
        Some(prev) if stepper.history == History::Carry && prev.vel.len() == 3 * p.n => {
            let elapsed = stepper.time(step - 1) - stepper.time(step_reset);
            let h = rbf.carry_history(k, s, p, prev, stepper.nu, elapsed, sigma_max)?;
            Ok(Some(h))
        }
        _ => Ok(None),
    }
}
