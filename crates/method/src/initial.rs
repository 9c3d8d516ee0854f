//! Initial particle sets.
//!
//! * From a velocity field on the spectral grid ([`from_velocity_field`]): vorticity by the spectral
//!   curl of the spectral crate, then the RBF solve on the same grid, so that the vortex method and
//!   the spectral solver start from the same field (core paper Sec. 5.1: "the strength of the vortex
//!   elements was calculated from the vorticity field on the grid by solving a system of equations
//!   for (3)"). Taylor-Green (3-D and 2-D) and the isotropic random field come from
//!   `vortex_spectral::initial`.
//! * Free space: vortex rings with a Gaussian core
//!   `omega = Gamma / (2 pi s^2) exp(-d^2 / 2 s^2) e_theta` (`d` the distance to the core centre
//!   line), sampled on a lattice of spacing `h` and turned into blobs by the same RBF solve; one ring,
//!   or two coaxial rings (leapfrogging: same sense; colliding: opposite senses, head-on).
//! * A single Gaussian blob (tests).

use crate::config::{Config, InitialKind, RingPair};
use crate::error::Result;
use crate::particles::Particles;
use crate::reinterpolation::{particles_from_lattice_vorticity, Lattice, RbfReport, RbfSettings};
use rayon::prelude::*;
use std::f64::consts::PI;
use vortex_spectral::VelocityField;

/// The seed of the isotropic field when `initial.seed` is not given.
pub const ISOTROPIC_SEED: u64 = 2024;

/// Particles whose blob field interpolates the vorticity of `field` (spectral curl) at the grid
/// points: one particle per grid point, core `overlap * h`, `h = 2 pi / n`, zero total strength.
pub fn from_velocity_field(
    field: &VelocityField,
    overlap: f64,
    s: &RbfSettings,
) -> Result<(Particles, RbfReport)> {
    let n = field.n;
    let w = vortex_spectral::diagnostics::vorticity(field);
    let omega: Vec<[f64; 3]> = (0..n * n * n)
        .map(|i| [w.u[0][i], w.u[1][i], w.u[2][i]])
        .collect();
    let lat = Lattice::periodic_box(n, 2.0 * PI);
    particles_from_lattice_vorticity(&lat, overlap * lat.h, &omega, s)
}

/// A vortex ring in a plane `z = center[2]`, axis along `z`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ring {
    pub center: [f64; 3],
    pub radius: f64,
    /// Circulation; positive: vorticity along `+e_theta`, the ring moves towards `+z`.
    pub circulation: f64,
    /// Standard deviation of the Gaussian core.
    pub core: f64,
}

impl Ring {
    /// Vorticity of the ring at `x`.
    pub fn vorticity(&self, x: [f64; 3]) -> [f64; 3] {
        let (dx, dy, dz) = (
            x[0] - self.center[0],
            x[1] - self.center[1],
            x[2] - self.center[2],
        );
        let rho = (dx * dx + dy * dy).sqrt();
        if rho == 0.0 {
            return [0.0; 3];
        }
        let d2 = (rho - self.radius).powi(2) + dz * dz;
        let s2 = self.core * self.core;
        let w = self.circulation / (2.0 * PI * s2) * (-0.5 * d2 / s2).exp();
        [-w * dy / rho, w * dx / rho, 0.0]
    }

    /// Saffman's translation speed of a thin ring with a Gaussian core,
    /// `U = Gamma / (4 pi R) (ln(8 R / delta) - 0.558)` with `delta = sqrt(2) s`
    /// (`omega ~ exp(-d^2 / delta^2)`); P. G. Saffman, "The velocity of viscous vortex rings",
    /// Stud. Appl. Math. 49 (1970) 371-380, Eq. (7.4) with `delta^2 = 4 nu t`. The constant is
    /// `(1 - gamma + ln 2) / 2 = 0.5579` (gamma: Euler's constant); valid to `O((delta/R)^2)`.
    pub fn saffman_speed(&self) -> f64 {
        let delta = std::f64::consts::SQRT_2 * self.core;
        let c = 0.5 * (1.0 - 0.577_215_664_901_532_9 + std::f64::consts::LN_2);
        self.circulation / (4.0 * PI * self.radius) * ((8.0 * self.radius / delta).ln() - c)
    }
}

/// Blobs of core `overlap * h` on a lattice of spacing `h` whose field interpolates the vorticity
/// of `rings` (free space; negligible strengths dropped).
pub fn rings(
    rings: &[Ring],
    h: f64,
    overlap: f64,
    s: &RbfSettings,
) -> Result<(Particles, RbfReport)> {
    let sigma = overlap * h;
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for r in rings {
        let ext = [
            r.radius + 6.0 * r.core,
            r.radius + 6.0 * r.core,
            6.0 * r.core,
        ];
        for c in 0..3 {
            lo[c] = lo[c].min(r.center[c] - ext[c] - 3.0 * sigma);
            hi[c] = hi[c].max(r.center[c] + ext[c] + 3.0 * sigma);
        }
    }
    let lat = Lattice::covering(lo, hi, h);
    let omega: Vec<[f64; 3]> = (0..lat.len())
        .into_par_iter()
        .map(|i| {
            let x = lat.point(i);
            let mut w = [0.0; 3];
            for r in rings {
                let v = r.vorticity(x);
                for c in 0..3 {
                    w[c] += v[c];
                }
            }
            w
        })
        .collect();
    particles_from_lattice_vorticity(&lat, sigma, &omega, s)
}

/// The rings of a configuration (kinds `ring` and `two-rings`).
pub fn rings_of(config: &Config) -> Vec<Ring> {
    let i = &config.initial;
    let first = Ring {
        center: i.center.unwrap_or([0.0; 3]),
        radius: i.radius.unwrap_or(1.0),
        circulation: i.circulation.unwrap_or(1.0),
        core: i.core.unwrap_or(0.1),
    };
    match i.kind {
        InitialKind::TwoRings => {
            let mut second = first;
            second.center[2] += i.separation.unwrap_or(1.0);
            if i.pair == Some(RingPair::Collide) {
                second.circulation = -second.circulation;
            }
            vec![first, second]
        }
        _ => vec![first],
    }
}

/// The initial particles of a configuration (and the report of the RBF solve, if any).
pub fn build(config: &Config) -> Result<(Particles, Option<RbfReport>)> {
    let i = &config.initial;
    // the initial vorticity is interpolated exactly: the filter is for re-interpolations
    let s = RbfSettings {
        filter: crate::reinterpolation::LatticeFilter::None,
        ..config.rbf_settings()
    };
    let from_field = |f: VelocityField| -> Result<(Particles, Option<RbfReport>)> {
        let (p, r) = from_velocity_field(&f, i.overlap, &s)?;
        Ok((p, Some(r)))
    };
    match i.kind {
        InitialKind::TaylorGreen => {
            from_field(vortex_spectral::initial::taylor_green(i.n.unwrap()))
        }
        InitialKind::TaylorGreen2d => {
            from_field(vortex_spectral::initial::taylor_green_2d(i.n.unwrap()))
        }
        InitialKind::Isotropic => {
            let params = vortex_spectral::initial::IsotropicParams {
                k_peak: i.k_peak.unwrap(),
                energy: i.energy,
                re_lambda: i.re_lambda,
                seed: i.seed.unwrap_or(ISOTROPIC_SEED),
                nu: config.nu,
            };
            from_field(vortex_spectral::initial::isotropic(i.n.unwrap(), &params))
        }
        InitialKind::Ring | InitialKind::TwoRings => {
            let (p, r) = rings(&rings_of(config), config.lattice_h(), i.overlap, &s)?;
            Ok((p, Some(r)))
        }
        InitialKind::Blob => {
            let mut p = Particles::default();
            p.push(
                i.center.unwrap_or([0.0; 3]),
                i.strength.unwrap(),
                i.sigma.unwrap(),
            );
            Ok((p, None))
        }
    }
}
