//! Diagnostics of the device-resident state (periodic box): the blob vorticity sampled on the
//! grid and its Biot-Savart velocity in Fourier space
//! ([`crate::reinterpolation::Reinterpolator::grid_velocity`]), energy, enstrophy and the
//! shell spectrum reduced on the device ([`crate::fourier::Fourier::spectrum`], the
//! conventions of `spectral::diagnostics`), `Re_lambda` from them on the host
//! (`spectral::diagnostics::stats_from_parts`); the moments by the device reduction. The grid
//! velocity itself reaches the host only when a grid snapshot is written. The host computes the
//! same definition with `method::diagnostics::vorticity_grid_velocity`
//! (`output.grid_velocity = "vorticity"`), so host and device runs compare like for like.

use crate::fourier::GridSpectrum;
use method::diagnostics::Diagnostics;
use spectral::VelocityField;

/// Energy, enstrophy, spectrum and `Re_lambda` of `d` from the statistics of the `n^3` grid of
/// the box of length `l` (`nu`: kinematic viscosity).
pub fn spectrum_diagnostics(d: &mut Diagnostics, s: &GridSpectrum, n: usize, l: f64, nu: f64) {
    let kscale = 2.0 * std::f64::consts::PI / l;
    d.energy = s.energy;
    d.enstrophy = s.enstrophy * kscale * kscale;
    let spec: Vec<(f64, f64)> = s
        .shells
        .iter()
        .enumerate()
        .map(|(k, e)| (k as f64 * kscale, *e))
        .collect();
    if nu > 0.0 {
        let st = spectral::diagnostics::stats_from_parts(
            d.t,
            d.energy,
            d.enstrophy,
            &spec,
            nu,
            (n / 2) as f64 * kscale,
        );
        d.re_lambda = st.re_lambda;
    }
    d.spectrum = Some(spec);
}

/// Rows `[n^3][3]` as the spectral crate's field.
pub fn velocity_field(u: &[[f64; 3]], n: usize) -> VelocityField {
    let mut vf = VelocityField::zeros(n);
    for (i, v) in u.iter().enumerate() {
        for (c, &vc) in v.iter().enumerate() {
            vf.u[c][i] = vc;
        }
    }
    vf
}
