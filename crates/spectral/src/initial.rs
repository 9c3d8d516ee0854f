//! Initial conditions, exposed so that the vortex method starts from exactly the same field.

use crate::diagnostics::{energy_spectral, enstrophy_spectral};
use crate::field::{r2c_weight, wavevector, SpectralField, VelocityField};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The 3-D Taylor-Green vortex `u = (sin x cos y cos z, -cos x sin y cos z, 0)` with unit amplitude,
/// evaluated at the grid points `-pi + 2 pi i / n`. Energy `1/8`. (High-order CFD workshop case C3.5
/// with `V0 = 1`, `L = 1`.)
pub fn taylor_green(n: usize) -> VelocityField {
    VelocityField::from_fn(n, |x, y, z| {
        [
            x.sin() * y.cos() * z.cos(),
            -x.cos() * y.sin() * z.cos(),
            0.0,
        ]
    })
}

/// The 2-D Taylor-Green vortex `u = (sin x cos y, -cos x sin y, 0)`: an exact solution of the
/// Navier-Stokes equations decaying as `exp(-2 nu t)`.
pub fn taylor_green_2d(n: usize) -> VelocityField {
    VelocityField::from_fn(n, |x, y, _z| [x.sin() * y.cos(), -x.cos() * y.sin(), 0.0])
}

/// Parameters of the isotropic random field.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IsotropicParams {
    /// Peak wavenumber `k_p` of `E(k) ~ k^4 exp(-2 (k/k_p)^2)`.
    pub k_peak: f64,
    /// Requested kinetic energy `(1/2)<|u|^2>`; used when `re_lambda` is `None`.
    pub energy: Option<f64>,
    /// Requested `Re_lambda` (needs `nu > 0`); takes precedence over `energy`.
    pub re_lambda: Option<f64>,
    /// Random seed (ChaCha20); the field is a deterministic function of `(n, k_peak, seed)` up to the
    /// amplitude.
    pub seed: u64,
    /// Viscosity, used only to scale to `re_lambda`.
    pub nu: f64,
}

/// Why `k_peak` cannot be the peak of the isotropic spectrum on a grid of `n` points per side
/// (it must lie in `[1, n/2)`, the grid's wavenumbers), or `None` when it can. Both solvers'
/// configurations refuse by this rule.
pub fn k_peak_error(k_peak: f64, n: usize) -> Option<String> {
    if k_peak.is_nan() || k_peak < 1.0 {
        Some(format!(
            "must be at least 1, the box's smallest wavenumber, got {k_peak:e} (below it \
             E(k) ~ k^4 exp(-2 (k/k_peak)^2) vanishes on every mode of the grid)"
        ))
    } else if k_peak >= n as f64 / 2.0 {
        Some(format!(
            "{k_peak} is not below the grid's largest wavenumber n/2 = {} (the energy would sit \
             where the grid cannot resolve it)",
            n / 2
        ))
    } else {
        None
    }
}

/// The model spectrum `k^4 exp(-2 (k/k_p)^2)` (unnormalised).
pub fn model_spectrum(k: f64, k_peak: f64) -> f64 {
    k.powi(4) * (-2.0 * (k / k_peak).powi(2)).exp()
}

/// Fourier coefficients of the isotropic field (see [`isotropic`]).
pub fn isotropic_spectral(n: usize, p: &IsotropicParams) -> SpectralField {
    assert!(n >= 4 && n % 2 == 0, "grid must be even");
    // White Gaussian noise in physical space (Box-Muller), so that Hermitian symmetry is exact.
    let mut rng = ChaCha20Rng::seed_from_u64(p.seed);
    let mut noise = VelocityField::zeros(n);
    for c in 0..3 {
        let v = &mut noise.u[c];
        let mut i = 0;
        while i < v.len() {
            let u1: f64 = 1.0 - rng.gen::<f64>();
            let u2: f64 = rng.gen::<f64>();
            let r = (-2.0 * u1.ln()).sqrt();
            let th = 2.0 * std::f64::consts::PI * u2;
            v[i] = r * th.cos();
            if i + 1 < v.len() {
                v[i + 1] = r * th.sin();
            }
            i += 2;
        }
    }
    let mut s = SpectralField::from_physical(&noise);
    let nh = n / 2 + 1;
    let kcut = (n / 2) as f64;
    // Project to divergence-free and truncate to |k| < n/2 (spherical, keeps isotropy).
    let nshell = (3.0f64.sqrt() * n as f64 / 2.0).ceil() as usize + 1;
    let mut shell_e = vec![0.0; nshell];
    for idx in 0..n * n * nh {
        let (kx, ky, kz) = wavevector(idx, n);
        let k2 = kx * kx + ky * ky + kz * kz;
        let k = k2.sqrt();
        if k2 == 0.0 || k >= kcut || kx.abs() >= kcut || ky.abs() >= kcut || kz >= kcut {
            for c in 0..3 {
                s.c[c][idx] = Default::default();
            }
            continue;
        }
        let dot = (s.c[0][idx] * kx + s.c[1][idx] * ky + s.c[2][idx] * kz) / k2;
        s.c[0][idx] -= dot * kx;
        s.c[1][idx] -= dot * ky;
        s.c[2][idx] -= dot * kz;
        let e = s.c[0][idx].norm_sqr() + s.c[1][idx].norm_sqr() + s.c[2][idx].norm_sqr();
        shell_e[k.round() as usize] += 0.5 * r2c_weight(idx % nh, n) * e;
    }
    // Rescale each shell to the model spectrum.
    let factor: Vec<f64> = shell_e
        .iter()
        .enumerate()
        .map(|(k, &e)| {
            if e > 0.0 {
                (model_spectrum(k as f64, p.k_peak) / e).sqrt()
            } else {
                0.0
            }
        })
        .collect();
    for idx in 0..n * n * nh {
        let (kx, ky, kz) = wavevector(idx, n);
        let shell = (kx * kx + ky * ky + kz * kz).sqrt().round() as usize;
        for c in 0..3 {
            s.c[c][idx] *= factor[shell];
        }
    }
    // Overall amplitude.
    let e0 = energy_spectral(&s);
    let a = match (p.re_lambda, p.energy) {
        (Some(re), _) => {
            let z0 = enstrophy_spectral(&s);
            let u2 = 2.0 * e0 / 3.0;
            let eps = 2.0 * p.nu * z0;
            let lambda = (15.0 * p.nu * u2 / eps).sqrt();
            let re0 = u2.sqrt() * lambda / p.nu;
            (re / re0).powi(2)
        }
        (None, Some(e)) => e / e0,
        (None, None) => 1.0 / e0,
    };
    let amp = a.sqrt();
    for c in 0..3 {
        for v in s.c[c].iter_mut() {
            *v *= amp;
        }
    }
    s
}

/// A solenoidal random velocity field with energy spectrum `E(k) ~ k^4 exp(-2 (k/k_p)^2)` and random
/// phases, deterministic for a given `(n, seed)`, rescaled to the requested energy or `Re_lambda`
/// (energy 1 if neither is given). Modes with `|k| >= n/2` are zero.
///
/// Construction: Gaussian white noise in physical space (ChaCha20 seeded by `seed`, Box-Muller), its
/// Fourier transform projected onto divergence-free fields, each shell rescaled to the model spectrum
/// exactly, the whole rescaled to the amplitude, back to physical space.
pub fn isotropic(n: usize, p: &IsotropicParams) -> VelocityField {
    isotropic_spectral(n, p).to_physical()
}
