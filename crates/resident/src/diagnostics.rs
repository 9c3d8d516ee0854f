//! Diagnostics of the device-resident state (periodic box): the grid velocity by
//! [`crate::reinterpolation::Reinterpolator::grid_velocity`] (blob vorticity at the grid
//! points, Biot-Savart by cuFFT) handed to the host's routines of `method::diagnostics`
//! (energy, enstrophy, shell spectrum, `Re_lambda`), the moments by the device reduction.
//! The same grid velocity is computed on the host by
//! `method::diagnostics::vorticity_grid_velocity` (`output.grid_velocity = "vorticity"`), so a
//! host run and a device run are compared by the same definition.

pub use method::diagnostics::grid_diagnostics;
