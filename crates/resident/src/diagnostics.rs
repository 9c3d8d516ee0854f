//! Diagnostics of the device-resident state (periodic box): the blob vorticity sampled on the
//! grid and its Biot-Savart velocity in Fourier space
//! ([`crate::reinterpolation::Reinterpolator::grid_velocity`]), energy, enstrophy and the
//! shell spectrum reduced on the device and over the ranks
//! ([`crate::slab_fourier::SlabFourier::spectrum`], the
//! conventions of `vortex_spectral::diagnostics`), `Re_lambda` from them on the host
//! (`vortex_method::diagnostics::set_spectral_statistics`, shared with the host path); the moments by
//! the device reduction. The grid velocity itself reaches the host only when a grid snapshot is
//! written. The host computes the same definition with
//! `vortex_method::diagnostics::vorticity_grid_velocity` (`output.grid_velocity = "vorticity"`), so
//! host and device runs compare like for like.

use crate::slab_fourier::GridSpectrum;
use vortex_method::diagnostics::{set_spectral_statistics, Diagnostics};

pub use vortex_method::diagnostics::velocity_field;

/// Energy, enstrophy, spectrum and `Re_lambda` of `d` from the device statistics of the `n^3`
/// grid of the box of length `l` (`nu`: kinematic viscosity).
pub fn spectrum_diagnostics(d: &mut Diagnostics, s: &GridSpectrum, n: usize, l: f64, nu: f64) {
    let shells = s
        .shells
        .iter()
        .enumerate()
        .map(|(k, e)| (k as f64, *e))
        .collect();
    set_spectral_statistics(d, s.energy, s.enstrophy, shells, n, l, nu);
}
