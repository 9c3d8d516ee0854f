//! Turbulence statistics with the definitions of `docs/CONVENTIONS.md`.
//!
//! - energy `E = (1/2) <|u|^2>` (mean over the box);
//! - enstrophy `Z = (1/2) <|omega|^2>`, so that the dissipation of a periodic incompressible flow is
//!   `epsilon = 2 nu Z` (the convention of the high-order CFD workshop's Taylor-Green case);
//! - shell spectrum `E(k) = sum over modes with round(|k|) = k of (1/2)|uhat|^2`, so `sum_k E(k) = E`;
//! - `u' = sqrt(2E/3)`, `lambda = sqrt(15 nu u'^2 / epsilon)`, `Re_lambda = u' lambda / nu`,
//!   `L = pi / (2 u'^2) sum_k E(k)/k`, `T = L / u'`, `eta = (nu^3/epsilon)^(1/4)`.
//!
//! The functions taking a [`VelocityField`] work on any physical-space field on the grid (the vortex
//! method evaluates its velocity there and calls them); the `*_spectral` ones take Fourier
//! coefficients directly.

use crate::field::{r2c_weight, wavevector, SpectralField, VelocityField};
use rayon::prelude::*;

/// All the scalar statistics written to `energy.csv`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// Time.
    pub t: f64,
    /// Kinetic energy `(1/2)<|u|^2>`.
    pub energy: f64,
    /// Enstrophy `(1/2)<|omega|^2>`.
    pub enstrophy: f64,
    /// Dissipation `2 nu Z`.
    pub dissipation: f64,
    /// `u' = sqrt(2E/3)`.
    pub u_rms: f64,
    /// Taylor microscale `sqrt(15 nu u'^2 / epsilon)`.
    pub taylor_microscale: f64,
    /// `u' lambda / nu`.
    pub re_lambda: f64,
    /// Integral scale `pi/(2u'^2) int E(k)/k dk`.
    pub integral_scale: f64,
    /// Eddy turnover time `L / u'`.
    pub eddy_turnover: f64,
    /// `k_max * eta` with `eta = (nu^3/epsilon)^(1/4)`.
    pub kmax_eta: f64,
}

impl Stats {
    /// CSV header matching [`Stats::csv_row`].
    pub const CSV_HEADER: &'static str = "t,energy,enstrophy,dissipation,u_rms,taylor_microscale,re_lambda,integral_scale,eddy_turnover,kmax_eta";

    /// One CSV row.
    pub fn csv_row(&self) -> String {
        format!(
            "{:.10e},{:.16e},{:.16e},{:.16e},{:.10e},{:.10e},{:.10e},{:.10e},{:.10e},{:.10e}",
            self.t,
            self.energy,
            self.enstrophy,
            self.dissipation,
            self.u_rms,
            self.taylor_microscale,
            self.re_lambda,
            self.integral_scale,
            self.eddy_turnover,
            self.kmax_eta
        )
    }
}

/// `sum_{i < len} term(i)` in parallel, in an order that does not depend on the thread count
/// or on scheduling: fixed blocks summed in sequence, block sums added in block order. (rayon's
/// own float `sum` splits adaptively, so its last bits vary from run to run, which would break
/// bit-for-bit restarts.)
pub fn ordered_sum<F: Fn(usize) -> f64 + Sync>(len: usize, term: F) -> f64 {
    const BLOCK: usize = 4096;
    let blocks: Vec<f64> = (0..len.div_ceil(BLOCK))
        .into_par_iter()
        .map(|b| {
            (b * BLOCK..((b + 1) * BLOCK).min(len))
                .map(&term)
                .sum::<f64>()
        })
        .collect();
    blocks.iter().sum()
}

/// Kinetic energy `(1/2)<|u|^2>` of a physical field (a plain mean over the grid).
pub fn energy(field: &VelocityField) -> f64 {
    let s: f64 = (0..3)
        .map(|c| ordered_sum(field.u[c].len(), |i| field.u[c][i] * field.u[c][i]))
        .sum();
    0.5 * s / field.u[0].len() as f64
}

/// Enstrophy `(1/2)<|omega|^2>` of a physical field (vorticity computed spectrally).
pub fn enstrophy(field: &VelocityField) -> f64 {
    enstrophy_spectral(&SpectralField::from_physical(field))
}

/// Shell-averaged energy spectrum `(k, E(k))` for integer shells `k = 0, 1, ...` of a physical field.
pub fn spectrum(field: &VelocityField) -> Vec<(f64, f64)> {
    spectrum_spectral(&SpectralField::from_physical(field))
}

/// Vorticity of a physical field on the same grid (spectral derivative).
pub fn vorticity(field: &VelocityField) -> VelocityField {
    SpectralField::from_physical(field).curl().to_physical()
}

/// Largest `|div u|` on the grid, divided by the largest `|k| |uhat|`-scale of the field
/// (`max |u| * n / 2`), i.e. a relative divergence.
pub fn divergence_max(field: &VelocityField) -> f64 {
    let s = SpectralField::from_physical(field);
    let n = s.n;
    let nh = n / 2 + 1;
    let mut d = SpectralField::zeros(n);
    for idx in 0..n * n * nh {
        let (kx, ky, kz) = wavevector(idx, n);
        let i = num_complex::Complex64::new(0.0, 1.0);
        d.c[0][idx] = i * (kx * s.c[0][idx] + ky * s.c[1][idx] + kz * s.c[2][idx]);
    }
    let p = d.to_physical();
    let dmax = p.u[0].iter().fold(0.0f64, |a, &b| a.max(b.abs()));
    let scale = field.max_abs() * n as f64 / 2.0;
    if scale > 0.0 {
        dmax / scale
    } else {
        dmax
    }
}

/// All statistics of a physical field with viscosity `nu` and resolved wavenumber `kmax`
/// (use `n/2 - 1` for a 3/2-rule simulation, `n/3` for the 2/3 rule).
pub fn stats(field: &VelocityField, nu: f64, kmax: f64, t: f64) -> Stats {
    let s = SpectralField::from_physical(field);
    stats_spectral(&s, nu, kmax, t)
}

/// Energy from Fourier coefficients (Parseval with the r2c weights).
pub fn energy_spectral(s: &SpectralField) -> f64 {
    weighted_sum(s, |_k2| 1.0)
}

/// Enstrophy `(1/2) sum |k x uhat|^2` from Fourier coefficients (exact for any field).
pub fn enstrophy_spectral(s: &SpectralField) -> f64 {
    let n = s.n;
    let nh = n / 2 + 1;
    let total = ordered_sum(n * n * nh, |idx| {
        let (kx, ky, kz) = wavevector(idx, n);
        let (a, b, c) = (s.c[0][idx], s.c[1][idx], s.c[2][idx]);
        let wx = ky * c - kz * b;
        let wy = kz * a - kx * c;
        let wz = kx * b - ky * a;
        r2c_weight(idx % nh, n) * (wx.norm_sqr() + wy.norm_sqr() + wz.norm_sqr())
    });
    0.5 * total
}

fn weighted_sum<F: Fn(f64) -> f64 + Sync>(s: &SpectralField, f: F) -> f64 {
    let n = s.n;
    let nh = n / 2 + 1;
    let total = ordered_sum(n * n * nh, |idx| {
        let (kx, ky, kz) = wavevector(idx, n);
        let e = s.c[0][idx].norm_sqr() + s.c[1][idx].norm_sqr() + s.c[2][idx].norm_sqr();
        r2c_weight(idx % nh, n) * e * f(kx * kx + ky * ky + kz * kz)
    });
    0.5 * total
}

/// Shell spectrum from Fourier coefficients: `(k, E(k))` for `k = 0 ..= ceil(sqrt(3) n / 2)`.
pub fn spectrum_spectral(s: &SpectralField) -> Vec<(f64, f64)> {
    let n = s.n;
    let nh = n / 2 + 1;
    let nshell = (3.0f64.sqrt() * n as f64 / 2.0).ceil() as usize + 1;
    let mut e = vec![0.0; nshell];
    for (idx, ((a, b), c)) in s.c[0].iter().zip(&s.c[1]).zip(&s.c[2]).enumerate() {
        let (kx, ky, kz) = wavevector(idx, n);
        let k = (kx * kx + ky * ky + kz * kz).sqrt();
        let shell = k.round() as usize;
        e[shell] += 0.5 * r2c_weight(idx % nh, n) * (a.norm_sqr() + b.norm_sqr() + c.norm_sqr());
    }
    e.into_iter()
        .enumerate()
        .map(|(k, v)| (k as f64, v))
        .collect()
}

/// All statistics from Fourier coefficients.
pub fn stats_spectral(s: &SpectralField, nu: f64, kmax: f64, t: f64) -> Stats {
    let energy = energy_spectral(s);
    let enstrophy = enstrophy_spectral(s);
    let spec = spectrum_spectral(s);
    stats_from_parts(t, energy, enstrophy, &spec, nu, kmax)
}

/// Statistics from energy, enstrophy and the shell spectrum.
pub fn stats_from_parts(
    t: f64,
    energy: f64,
    enstrophy: f64,
    spec: &[(f64, f64)],
    nu: f64,
    kmax: f64,
) -> Stats {
    let dissipation = 2.0 * nu * enstrophy;
    let u2 = 2.0 * energy / 3.0;
    let u_rms = u2.sqrt();
    let taylor_microscale = if dissipation > 0.0 {
        (15.0 * nu * u2 / dissipation).sqrt()
    } else {
        f64::INFINITY
    };
    let re_lambda = if nu > 0.0 {
        u_rms * taylor_microscale / nu
    } else {
        f64::INFINITY
    };
    let int: f64 = spec
        .iter()
        .filter(|(k, _)| *k > 0.0)
        .map(|(k, e)| e / k)
        .sum();
    let integral_scale = if u2 > 0.0 {
        std::f64::consts::PI / (2.0 * u2) * int
    } else {
        0.0
    };
    let eddy_turnover = if u_rms > 0.0 {
        integral_scale / u_rms
    } else {
        f64::INFINITY
    };
    let kmax_eta = if dissipation > 0.0 {
        kmax * (nu * nu * nu / dissipation).powf(0.25)
    } else {
        f64::INFINITY
    };
    Stats {
        t,
        energy,
        enstrophy,
        dissipation,
        u_rms,
        taylor_microscale,
        re_lambda,
        integral_scale,
        eddy_turnover,
        kmax_eta,
    }
}
