//! The RBF re-interpolation of `vortex_method::reinterpolation` on the device, periodic box: the
//! vorticity of the blobs at the lattice points by the Gaussian sums of [`crate::lattice`],
//! the lattice system solved in Fourier space ([`crate::fourier::Fourier::solve_rbf`]: the
//! eigenvalues of the host's circulant axis factors, `vortex_method::reinterpolation::separable`,
//! times the transfer function of `[reinterpolation] filter`,
//! `vortex_method::reinterpolation::filter`),
//! and the fresh particles on the lattice with the initial core (the caller removes the mean
//! strength). The same lattice operations give the diagnostics' grid velocity
//! ([`Reinterpolator::grid_velocity`]: the blob vorticity on the grid, then Biot-Savart in
//! Fourier space).

use crate::fourier::{Fourier, GridSpectrum};
use crate::kernels::Kernels;
use crate::lattice::{bin, gaussian_sums, lattice_particles, Planes};
use crate::state::DeviceParticles;
use cudarc::driver::{CudaSlice, CudaStream};
use std::collections::HashMap;
use std::sync::Arc;
use vortex_cuda::{GpuError, GpuResult};
use vortex_method::reinterpolation::separable::{axis_weights, AxisSolver};
use vortex_method::reinterpolation::{Lattice, LatticeFilter, RbfReport};
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
        let b = bin(k, s, p, lat)?;
        gaussian_sums(k, s, &b, lat, self.cutoff, sigma_max)
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
        let n3 = n * n * n;
        let planes = Planes::all(&lat);
        let fresh = lattice_particles(k, s, n, lat.origin[0], lat.h, self.sigma0, planes, field)?;
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
