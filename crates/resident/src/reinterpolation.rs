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
use crate::lattice::{bin, gaussian_sums, lattice_particles, Planes};
use crate::state::{DeviceFields, DeviceParticles};
use cudarc::driver::{CudaSlice, CudaStream};
use std::collections::HashMap;
use std::sync::Arc;
use vortex_cuda::{GpuError, GpuResult};
use vortex_method::reinterpolation::history::History;
use vortex_method::reinterpolation::separable::{axis_weights, AxisSolver};
use vortex_method::reinterpolation::{Lattice, LatticeFilter, RbfReport};
use vortex_method::stepping::Stepper;
use vortex_method::Config;

/// Settings of the periodic re-interpolation and the transforms and eigenvalues it keeps.
pub struct Reinterpolator {
    n: usize,
    box_length: f64,
    sigma0: f64,
    cutoff: f64,
    filter: LatticeFilter,
    ffts: HashMap<usize, Fourier>,
    inv_eig: Option<CudaSlice<f64>>,
}

/// `f(k) / S(k)`, `k = 0..n`, of the circulant axis factor (the host's `AxisSolver`) and the
/// transfer function `filter`, or the reason the system is not safely positive definite.
pub fn inverse_eigenvalues(
    n: usize,
    h: f64,
    sigma: f64,
    cutoff: f64,
    filter: &LatticeFilter,
) -> Result<Vec<f64>, String> {
    match AxisSolver::new(n, &axis_weights(h, sigma, cutoff), true)?.filtered(filter) {
        AxisSolver::Circulant { inv_eig, .. } => Ok(inv_eig),
        AxisSolver::Banded { .. } => Err("a periodic axis gave a banded factor".into()),
    }
}

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
        }
    }

    fn fourier(&mut self, s: &Arc<CudaStream>, n: usize) -> GpuResult<&mut Fourier> {
        match self.ffts.entry(n) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => Ok(e.insert(Fourier::new(s, n)?)),
        }
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
        let n = self.n;
        let lat = Lattice::periodic_box(n, self.box_length);
        let mut field = self.lattice_vorticity(k, s, p, &lat, sigma_max)?;
        if self.inv_eig.is_none() {
            let e = inverse_eigenvalues(n, lat.h, self.sigma0, self.cutoff, &self.filter)
                .map_err(|e| GpuError::Unsupported(format!("{e}; lower initial.overlap")))?;
            self.inv_eig = Some(s.clone_htod(&e)?);
        }
        let c = (2.0 * std::f64::consts::PI * self.sigma0 * self.sigma0).powf(-1.5);
        let inv_eig = self.inv_eig.take().expect("set above");
        let r = self.fourier(s, n)?.solve_rbf(k, s, &mut field, &inv_eig, c);
        self.inv_eig = Some(inv_eig);
        r?;
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
        let mut q = DeviceParticles {
            n: p.n,
            pos: s.clone_dtod(&p.pos)?,
            alpha: s.clone_dtod(&prev.str)?,
            sigma: s.clone_dtod(&p.sigma)?,
            sigma0: s.clone_dtod(&p.sigma0)?,
        };
        q.spread(k, s, nu, elapsed)?;
        let rates = self.lattice_operator(k, s, &q, sigma_max)?;
        q.alpha = s.clone_dtod(&prev.vel)?;
        q.spread(k, s, 0.0, 0.0)?;
        let vel = self.lattice_operator(k, s, &q, sigma_max)?;
        Ok(DeviceFields { vel, str: rates })
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
        let f = self.fourier(s, n)?;
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
