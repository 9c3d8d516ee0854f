//! Diagnostics and output files.
//!
//! * Periodic box: the velocity of the blobs on an `n^3` grid of targets (the spectral solver's grid
//!   points `-L/2 + L (i, j, k) / n`) through the same evaluation as the right-hand side, then the
//!   spectral crate's routines: energy `E = (1/2)<|u|^2>`, enstrophy `Z = (1/2)<|omega|^2>`
//!   (spectral derivative), the shell spectrum `E(k)` and `Re_lambda` (`docs/CONVENTIONS.md`).
//! * Free space (no box to average over): totals, `E = (1/2) int |u|^2 dV = int u . (x x omega) dV
//!   = sum_i u_i . (x_i x alpha_i)` (Saffman, *Vortex Dynamics*, 1992, Sec. 3.2) and
//!   `Z = (1/2) int |omega|^2 dV = (1/2) sum_i alpha_i . omega(x_i)` (Gaussian sums).
//! * Always: total strength `sum alpha`, linear impulse `(1/2) sum x x alpha`, the vorticity-weighted
//!   centroid, number of particles, largest core.
//!
//! Files: `diagnostics.csv` ([`CSV_HEADER`]), `spectrum_STEP.csv` (`k,E`), particle snapshots
//! `particles_STEP.vtk` (legacy VTK POLYDATA: alpha, |alpha|, sigma, velocity), grid fields
//! `grid_STEP.vtk` (STRUCTURED_POINTS: velocity, vorticity, |omega|, Q).

use crate::cells::core_sum;
use crate::error::{Error, Result};
use crate::particles::{chunked_sum, norm, Particles};
use std::io::Write;
use std::path::Path;
use vortex_domain::{Comm, ReduceOp};
use vortex_fmm::kernel::CoreOrder;
use vortex_fmm::kernel::{cross, dot};
use vortex_spectral::field::{wavevector, SpectralField};
use vortex_spectral::VelocityField;

/// One row of `diagnostics.csv`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Diagnostics {
    pub step: u64,
    pub t: f64,
    pub energy: f64,
    pub enstrophy: f64,
    /// `Re_lambda` (periodic with `nu > 0`; NaN otherwise).
    pub re_lambda: f64,
    pub total_strength: [f64; 3],
    pub impulse: [f64; 3],
    pub centroid: [f64; 3],
    pub n_particles: usize,
    pub max_sigma: f64,
    /// Shell spectrum `(k, E(k))` (periodic).
    pub spectrum: Option<Vec<(f64, f64)>>,
    /// Velocity on the diagnostics grid (periodic).
    pub grid_velocity: Option<VelocityField>,
    /// Seconds spent computing these diagnostics.
    pub seconds: f64,
}

pub const CSV_HEADER: &str = "t,energy,enstrophy,total_strength_x,total_strength_y,total_strength_z,\
impulse_x,impulse_y,impulse_z,centroid_x,centroid_y,centroid_z,n_particles,step,re_lambda,max_sigma,\
s_per_step,t_fmm,t_rbf,t_update,t_diagnostics,t_io";

/// The rows `(t, energy, enstrophy)` of a `diagnostics.csv` ([`CSV_HEADER`]).
pub fn read_history(path: &Path) -> Result<Vec<(f64, f64, f64)>> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let mut rows = vec![];
    for (i, l) in text.lines().enumerate().skip(1) {
        let v: Vec<f64> = l
            .split(',')
            .take(3)
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() != 3 {
            return Err(Error::Other(format!(
                "{} line {}: expected t,energy,enstrophy first, found `{l}`",
                path.display(),
                i + 1
            )));
        }
        rows.push((v[0], v[1], v[2]));
    }
    Ok(rows)
}

/// Timing columns of a row: mean wall seconds per step since the last row and the shares.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RowTimes {
    pub s_per_step: f64,
    pub fmm: f64,
    pub rbf: f64,
    pub update: f64,
    pub diagnostics: f64,
    pub io: f64,
}

impl Diagnostics {
    pub fn csv_row(&self, tm: &RowTimes) -> String {
        let v3 = |a: [f64; 3]| format!("{:.16e},{:.16e},{:.16e}", a[0], a[1], a[2]);
        format!(
            "{:.10e},{:.16e},{:.16e},{},{},{},{},{},{:.10e},{:.10e},{:.4e},{:.4e},{:.4e},{:.4e},{:.4e},{:.4e}",
            self.t,
            self.energy,
            self.enstrophy,
            v3(self.total_strength),
            v3(self.impulse),
            v3(self.centroid),
            self.n_particles,
            self.step,
            self.re_lambda,
            self.max_sigma,
            tm.s_per_step,
            tm.fmm,
            tm.rbf,
            tm.update,
            tm.diagnostics,
            tm.io
        )
    }
}

/// Grid points `-L/2 + L (i, j, k) / n` in the spectral crate's order (z fastest).
pub fn grid_points(n: usize, l: f64) -> Vec<[f64; 3]> {
    let c = |i: usize| -0.5 * l + l * i as f64 / n as f64;
    let mut v = Vec::with_capacity(n * n * n);
    for i in 0..n {
        for j in 0..n {
            for k in 0..n {
                v.push([c(i), c(j), c(k)]);
            }
        }
    }
    v
}

/// Free-space energy `E = int u . (x x omega) dV` (Saffman, Vortex Dynamics, 1992, Sec.
/// 3.3) by the particles, `sum_i u_i . (x_i x alpha_i)`, plus each blob's own energy, which
/// that sum misses (a blob induces no velocity at its centre): `(1/2) int |u_i|^2 dV =
/// |alpha_i|^2 / (12 pi^(3/2) sigma_i)` for the Gaussian core (in Fourier space, `omega_hat =
/// alpha exp(-k^2 sigma^2 / 2)`, `E = (1/2) int |k x omega_hat|^2 / k^4 d^3k / (2 pi)^3`).
/// Without it a single blob (`initial.kind = "blob"`) has no energy at all.
pub fn free_space_energy(p: &Particles, velocity: &[[f64; 3]]) -> f64 {
    let self_energy = 1.0 / (12.0 * std::f64::consts::PI.powf(1.5));
    chunked_sum(p.len(), |i| {
        let a = p.strength[i];
        dot(velocity[i], cross(p.position[i], a)) + self_energy * dot(a, a) / p.sigma[i]
    })
}

/// Free-space enstrophy `(1/2) sum_i alpha_i . omega(x_i)` (sums of the core `core` truncated at
/// `cutoff`).
pub fn free_space_enstrophy(p: &Particles, cutoff: f64, core: CoreOrder) -> f64 {
    let w = core_sum(
        core,
        &p.position,
        &p.strength,
        &p.sigma,
        &p.position,
        cutoff,
        None,
    );
    0.5 * chunked_sum(p.len(), |i| dot(p.strength[i], w[i]))
}

/// Points per side of the grid on which the vorticity is sampled for the diagnostics: the
/// requested `grid`, but never coarser than the particle lattice (the blob vorticity has
/// content up to `k ~ 1 / sigma`; sampled on a coarser grid it would alias back into the
/// resolved modes, which the velocity, a derivative smoother, does far less).
pub fn vorticity_grid(config: &crate::Config, grid: usize) -> usize {
    grid.max(config.lattice_n().unwrap_or(0))
}

/// The velocity of the blobs on the `n^3` grid of [`grid_points`] (box length `l`) from their
/// vorticity there: `omega` at the grid points by the sums of the core `core` truncated at
/// `cutoff` core radii ([`core_sum`]), then the periodic Biot-Savart law in Fourier space,
/// `u_hat = i k x omega_hat / |k|^2` (zero mean, the Nyquist planes dropped). The host twin of
/// the device-resident diagnostics (`output.grid_velocity = "vorticity"`).
pub fn vorticity_grid_velocity(
    p: &Particles,
    n: usize,
    l: f64,
    cutoff: f64,
    core: CoreOrder,
) -> Vec<[f64; 3]> {
    let omega = core_sum(
        core,
        &p.position,
        &p.strength,
        &p.sigma,
        &grid_points(n, l),
        cutoff,
        Some(l),
    );
    let s = SpectralField::from_physical(&velocity_field(&omega, n));
    let mut u = SpectralField::zeros(n);
    let inv_ks = l / (2.0 * std::f64::consts::PI);
    let half = n / 2;
    for idx in 0..s.c[0].len() {
        let k = wavevector(idx, n);
        let k2 = k.0 * k.0 + k.1 * k.1 + k.2 * k.2;
        let nyquist = n % 2 == 0 && [k.0, k.1, k.2].iter().any(|&c| c.abs() as usize == half);
        if k2 == 0.0 || nyquist {
            continue;
        }
        let f = inv_ks / k2;
        let o = [s.c[0][idx], s.c[1][idx], s.c[2][idx]];
        // i (k x omega) / |k|^2
        let cr = [
            o[2] * k.1 - o[1] * k.2,
            o[0] * k.2 - o[2] * k.0,
            o[1] * k.0 - o[0] * k.1,
        ];
        for (uc, crc) in u.c.iter_mut().zip(cr) {
            uc[idx] = crc * num_complex::Complex64::new(0.0, f);
        }
    }
    let v = u.to_physical();
    (0..n * n * n)
        .map(|i| [v.u[0][i], v.u[1][i], v.u[2][i]])
        .collect()
}

/// The heat kernel over `diffusion = nu tau` applied to a velocity on the `n^3` grid of
/// [`grid_points`] (box length `l`): each mode times `exp(-nu |k|^2 tau)`. The diagnostics of
/// a core of order above 2 report the field of the viscous splitting at `t`, the particles'
/// field followed by the diffusion substep still pending since the last re-interpolation
/// ([`crate::reinterpolation::cores`]), so that they do not lag the viscous decay by up to a
/// re-interpolation interval.
pub fn apply_heat(velocity: &mut [[f64; 3]], n: usize, l: f64, diffusion: f64) {
    if diffusion == 0.0 {
        return;
    }
    let mut s = SpectralField::from_physical(&velocity_field(velocity, n));
    let ks = 2.0 * std::f64::consts::PI / l;
    for idx in 0..s.c[0].len() {
        let k = wavevector(idx, n);
        let k2 = (k.0 * k.0 + k.1 * k.1 + k.2 * k.2) * ks * ks;
        let g = (-diffusion * k2).exp();
        for c in s.c.iter_mut() {
            c[idx] *= g;
        }
    }
    let v = s.to_physical();
    for (i, u) in velocity.iter_mut().enumerate() {
        *u = [v.u[0][i], v.u[1][i], v.u[2][i]];
    }
}

/// Energy, enstrophy, spectrum and `Re_lambda` from the velocity on the `n^3` grid of
/// [`grid_points`] in the box of length `l`.
pub fn grid_diagnostics(d: &mut Diagnostics, velocity: &[[f64; 3]], n: usize, l: f64, nu: f64) {
    let vf = velocity_field(velocity, n);
    let spectrum = vortex_spectral::diagnostics::spectrum(&vf);
    let energy = vortex_spectral::diagnostics::energy(&vf);
    let enstrophy = vortex_spectral::diagnostics::enstrophy(&vf);
    set_spectral_statistics(d, energy, enstrophy, spectrum, n, l, nu);
    d.grid_velocity = Some(vf);
}

/// Rows `[n^3][3]` (z fastest) as the spectral crate's field.
pub fn velocity_field(u: &[[f64; 3]], n: usize) -> VelocityField {
    let mut vf = VelocityField::zeros(n);
    for (i, v) in u.iter().enumerate() {
        for (c, &vc) in v.iter().enumerate() {
            vf.u[c][i] = vc;
        }
    }
    vf
}

/// Energy, enstrophy, spectrum and `Re_lambda` of `d` from the statistics of a velocity on the
/// `n^3` grid of the box of length `l` in integer wavenumbers (`enstrophy` = `(1/2) sum |k x
/// u_hat|^2`, `spectrum` = `(k, E(k))` of the shells `k = 0, 1, ...`), `nu` the viscosity.
pub fn set_spectral_statistics(
    d: &mut Diagnostics,
    energy: f64,
    enstrophy: f64,
    spectrum: Vec<(f64, f64)>,
    n: usize,
    l: f64,
    nu: f64,
) {
    let kscale = 2.0 * std::f64::consts::PI / l;
    d.energy = energy;
    d.enstrophy = enstrophy * kscale * kscale;
    let spec: Vec<(f64, f64)> = spectrum.into_iter().map(|(k, e)| (k * kscale, e)).collect();
    if nu > 0.0 {
        let st = vortex_spectral::diagnostics::stats_from_parts(
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

/// The moments of all particles (total strength, impulse, centroid, count, largest core) from
/// this rank's particles and sums over the ranks.
pub(crate) fn global_moments(comm: &dyn Comm, p: &Particles, d: &mut Diagnostics) {
    // exact sums: the same bits for every number of ranks
    let mut parts = crate::exact::sums(p.len(), |i| {
        let (x, a) = (p.position[i], p.strength[i]);
        let w = norm(a);
        let c = cross(x, a);
        [
            a[0],
            a[1],
            a[2],
            c[0],
            c[1],
            c[2],
            x[0] * w,
            x[1] * w,
            x[2] * w,
            w,
        ]
    });
    let mut count = crate::exact::ExactSum::default();
    count.add(p.len() as f64);
    parts.push(count);
    let v = crate::exact::allreduce(comm, &parts);
    let mut smax = [p.sigma.iter().copied().fold(0.0, f64::max)];
    comm.allreduce_f64(&mut smax, ReduceOp::Max);
    d.total_strength = [v[0], v[1], v[2]];
    d.impulse = [0.5 * v[3], 0.5 * v[4], 0.5 * v[5]];
    d.centroid = if v[9] == 0.0 {
        [0.0; 3]
    } else {
        [v[6] / v[9], v[7] / v[9], v[8] / v[9]]
    };
    d.n_particles = v[10] as usize;
    d.max_sigma = smax[0];
}

/// Writes a spectrum as CSV `k,E`.
pub fn write_spectrum(path: &Path, spec: &[(f64, f64)]) -> Result<()> {
    let mut s = String::from("k,E\n");
    for (k, e) in spec {
        s.push_str(&format!("{k},{e:.16e}\n"));
    }
    vortex_spectral::durable::write_atomic(path, &[s.as_bytes()], 1).map_err(durable_err)
}

fn durable_err(e: vortex_spectral::durable::DurableError) -> Error {
    match e {
        vortex_spectral::durable::DurableError::Os { path, source } => Error::Io { path, source },
        e => Error::Other(e.to_string()),
    }
}

/// [`vortex_spectral::durable::write_via_tmp`] with this crate's error.
fn write_via_tmp(
    path: &Path,
    body: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    vortex_spectral::durable::write_via_tmp(path, body).map_err(durable_err)
}

/// Particle snapshot as legacy VTK POLYDATA (ASCII, one vertex per particle) with point data
/// `alpha` (vector), `alpha_magnitude`, `sigma` and `velocity` (when given). ParaView: open the
/// file, then e.g. Glyph or Point Gaussian.
pub fn write_vtk_particles(
    path: &Path,
    p: &Particles,
    velocity: Option<&[[f64; 3]]>,
    title: &str,
) -> Result<()> {
    let n = p.len();
    let title: String = title.chars().filter(|c| *c != '\n').take(200).collect();
    let body = |w: &mut std::io::BufWriter<std::fs::File>| -> std::io::Result<()> {
        writeln!(
            w,
            "# vtk DataFile Version 3.0\n{title}\nASCII\nDATASET POLYDATA"
        )?;
        writeln!(w, "POINTS {n} double")?;
        for x in &p.position {
            writeln!(w, "{:.10e} {:.10e} {:.10e}", x[0], x[1], x[2])?;
        }
        writeln!(w, "VERTICES {n} {}", 2 * n)?;
        for i in 0..n {
            writeln!(w, "1 {i}")?;
        }
        writeln!(w, "POINT_DATA {n}")?;
        writeln!(w, "VECTORS alpha double")?;
        for a in &p.strength {
            writeln!(w, "{:.10e} {:.10e} {:.10e}", a[0], a[1], a[2])?;
        }
        writeln!(w, "SCALARS alpha_magnitude double 1\nLOOKUP_TABLE default")?;
        for a in &p.strength {
            writeln!(w, "{:.10e}", crate::particles::norm(*a))?;
        }
        writeln!(w, "SCALARS sigma double 1\nLOOKUP_TABLE default")?;
        for s in &p.sigma {
            writeln!(w, "{s:.10e}")?;
        }
        if let Some(v) = velocity {
            writeln!(w, "VECTORS velocity double")?;
            for u in v {
                writeln!(w, "{:.10e} {:.10e} {:.10e}", u[0], u[1], u[2])?;
            }
        }
        Ok(())
    };
    write_via_tmp(path, body)
}

/// Vorticity, `|omega|` and the second invariant `Q = -(1/2) u_{i,j} u_{j,i}` of a periodic grid
/// velocity (spectral derivatives; box length `l`).
pub fn vorticity_and_q(v: &VelocityField, l: f64) -> (VelocityField, Vec<f64>, Vec<f64>) {
    let n = v.n;
    let ks = 2.0 * std::f64::consts::PI / l;
    let s = SpectralField::from_physical(v);
    let mut w = s.curl().to_physical();
    for c in 0..3 {
        w.u[c].iter_mut().for_each(|x| *x *= ks);
    }
    // gradient column j: d u_i / d x_j for all i
    let mut grad: Vec<VelocityField> = Vec::with_capacity(3);
    for j in 0..3 {
        let mut g = SpectralField::zeros(n);
        for idx in 0..g.c[0].len() {
            let k = wavevector(idx, n);
            let kj = [k.0, k.1, k.2][j] * ks;
            for c in 0..3 {
                g.c[c][idx] = s.c[c][idx] * num_complex_i(kj);
            }
        }
        grad.push(g.to_physical());
    }
    let len = n * n * n;
    let mut q = vec![0.0; len];
    let mut wm = vec![0.0; len];
    for idx in 0..len {
        let mut acc = 0.0;
        for i in 0..3 {
            for j in 0..3 {
                // u_{i,j} u_{j,i}
                acc += grad[j].u[i][idx] * grad[i].u[j][idx];
            }
        }
        q[idx] = -0.5 * acc;
        wm[idx] = (0..3).map(|c| w.u[c][idx].powi(2)).sum::<f64>().sqrt();
    }
    (w, wm, q)
}

fn num_complex_i(k: f64) -> num_complex::Complex64 {
    num_complex::Complex64::new(0.0, k)
}

/// Grid fields as legacy VTK STRUCTURED_POINTS (binary, big-endian, x fastest) on the box
/// `[-L/2, L/2)^3`: velocity and vorticity (vectors), `omega_magnitude` and `Q` (scalars), for
/// isosurfaces as in the core paper's Fig. 13.
pub fn write_vtk_grid(path: &Path, v: &VelocityField, l: f64, title: &str) -> Result<()> {
    let n = v.n;
    let (w, wm, q) = vorticity_and_q(v, l);
    let title: String = title.chars().filter(|c| *c != '\n').take(200).collect();
    let h = l / n as f64;
    let body = |f: &mut std::io::BufWriter<std::fs::File>| -> std::io::Result<()> {
        write!(
            f,
            "# vtk DataFile Version 3.0\n{title}\nBINARY\nDATASET STRUCTURED_POINTS\nDIMENSIONS {n} {n} {n}\nORIGIN {o} {o} {o}\nSPACING {h} {h} {h}\nPOINT_DATA {np}\n",
            o = -0.5 * l,
            np = n * n * n
        )?;
        let order =
            |mut g: Box<dyn FnMut(usize) -> std::io::Result<()> + '_>| -> std::io::Result<()> {
                for k in 0..n {
                    for j in 0..n {
                        for i in 0..n {
                            g((i * n + j) * n + k)?;
                        }
                    }
                }
                Ok(())
            };
        for (name, fld) in [("velocity", v), ("vorticity", &w)] {
            writeln!(f, "VECTORS {name} double")?;
            order(Box::new(|idx| {
                for c in 0..3 {
                    f.write_all(&fld.u[c][idx].to_be_bytes())?;
                }
                Ok(())
            }))?;
            writeln!(f)?;
        }
        for (name, fld) in [("omega_magnitude", &wm), ("Q", &q)] {
            writeln!(f, "SCALARS {name} double 1\nLOOKUP_TABLE default")?;
            order(Box::new(|idx| f.write_all(&fld[idx].to_be_bytes())))?;
            writeln!(f)?;
        }
        Ok(())
    };
    write_via_tmp(path, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The energy of one blob, `(1/2) int |u|^2 dV`, by the radial quadrature of the kernel's
    /// own cutoff: the velocity of a blob is `q(r/sigma) / (4 pi r^3) |alpha x d|`, so
    /// `E = |alpha|^2 / (12 pi sigma) int_0^inf q(rho)^2 / rho^2 d rho` (the angular mean of
    /// `sin^2` is 2/3), against the closed form of [`free_space_energy`]; and that sum gives it
    /// for a blob at rest off the origin, where the velocity at its centre is zero.
    #[test]
    fn one_blob_has_its_own_energy() {
        let core = vortex_fmm::kernel::CoreOrder::Second;
        // Simpson on [1e-6, 200] (q ~ rho^3 / 3 sqrt(2/pi) near 0), then the tail 1/200
        let (a, b, n) = (1e-6_f64, 200.0_f64, 400_000usize);
        let h = (b - a) / n as f64;
        let f = |r: f64| core.q(r).powi(2) / (r * r);
        let mut sum = f(a) + f(b);
        for k in 1..n {
            sum += f(a + k as f64 * h) * if k % 2 == 1 { 4.0 } else { 2.0 };
        }
        let integral = sum * h / 3.0 + 1.0 / b;
        let (sigma, alpha) = (0.3, [0.2, -0.5, 1.1]);
        let want = dot(alpha, alpha) / (12.0 * std::f64::consts::PI * sigma) * integral;
        let mut p = Particles::default();
        p.push([0.7, -1.2, 0.4], alpha, sigma);
        let got = free_space_energy(&p, &[[0.0; 3]]);
        assert!(((got - want) / want).abs() < 1e-6, "{got} vs {want}");
    }
}
