//! Cross-validation against the pseudo-spectral solver: the 3-D Taylor-Green vortex run by both
//! solvers from the identical initial field (`vortex_spectral::initial::taylor_green(n)`) with the same
//! viscosity, compared in energy, enstrophy and the end spectrum. The case of
//! `validation/taylor-green/` (there driven through the binary by `compare.py`); this module is the
//! same comparison as library code (there is no `vortex validate` command; call it as below):
//!
//! ```no_run
//! let case = vortex_method::validate::CrossCase::default(); // 16^3, Re = 100, t = 3
//! let report = vortex_method::validate::run_taylor_green(&case, std::path::Path::new("out/cross")).unwrap();
//! println!("{}", report.table());
//! assert!(report.passes());
//! ```

use crate::config::Config;
use crate::error::{Error, Result};
use std::fmt::Write as _;
use std::path::Path;

/// The parameters of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossCase {
    /// Grid points per direction (particles: `n^3`, `sigma0 = h = 2 pi / n`).
    pub n: usize,
    /// Kinematic viscosity (Re = 1 / nu for the unit Taylor-Green field).
    pub nu: f64,
    /// Vortex-method time step (AB2).
    pub dt: f64,
    /// Spectral time step (RK4).
    pub spectral_dt: f64,
    pub t_end: f64,
    /// FMM expansion order.
    pub order: usize,
    /// Diagnostics of the vortex run every this many steps.
    pub diagnostics_every: u64,
    /// Core growth ratio that triggers re-interpolation.
    pub ratio: f64,
    /// Bounds of [`CrossReport::passes`]: relative energy and enstrophy differences.
    pub bound_energy: f64,
    pub bound_enstrophy: f64,
}

impl Default for CrossCase {
    fn default() -> Self {
        Self {
            n: 16,
            nu: 0.01,
            dt: 0.05,
            spectral_dt: 0.01,
            t_end: 3.0,
            order: 8,
            diagnostics_every: 4,
            ratio: 1.2,
            bound_energy: 5e-3,
            bound_enstrophy: 3e-2,
        }
    }
}

impl CrossCase {
    /// The vortex-method configuration (as `validation/taylor-green/vortex-tg16.toml`).
    pub fn vortex_config(&self) -> Result<Config> {
        let text = format!(
            "nu = {nu:e}\ndt = {dt:e}\nt_end = {te:e}\n\
             [domain]\nperiodic = true\nbox_length = {l:e}\nimage_levels = 3\n\
             [evaluation]\nmethod = \"fmm\"\norder = {p}\ntheta = 0.5\n\
             [initial]\nkind = \"taylor-green\"\nn = {n}\noverlap = 1.0\n\
             [reinterpolation]\nratio = {r:e}\ntolerance = 1e-10\n\
             [output]\ndiagnostics_every = {de}\ngrid = {n}\ncheckpoint_every = 0\n\
             snapshot_every = 0\nplots = false\nprogress = false\n",
            nu = self.nu,
            dt = self.dt,
            te = self.t_end,
            l = 2.0 * std::f64::consts::PI,
            p = self.order,
            n = self.n,
            r = self.ratio,
            de = self.diagnostics_every,
        );
        Config::from_str_named(&text, "<cross-validation case>")
    }

    /// The spectral configuration (same field, grid and viscosity; 3/2 rule).
    pub fn spectral_config(&self) -> Result<vortex_spectral::Config> {
        let text = format!(
            "n = {n}\nnu = {nu:e}\ndealias = \"three-halves\"\nt_end = {te:e}\ndt = {dt:e}\n\
             diagnostics_interval = {se:e}\nspectrum_times = [0.0, {te:e}]\nfield_times = []\n\
             checkpoint_interval = {te:e}\nthreads = 0\n[initial]\nkind = \"taylor-green\"\namplitude = 1.0\n",
            n = self.n,
            nu = self.nu,
            te = self.t_end,
            dt = self.spectral_dt,
            se = self.dt * self.diagnostics_every as f64,
        );
        vortex_spectral::Config::from_str_named(&text, "<cross-validation case>")
            .map_err(|e| Error::Other(e.to_string()))
    }
}

/// One compared time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossRow {
    pub t: f64,
    pub energy_vortex: f64,
    pub energy_spectral: f64,
    pub enstrophy_vortex: f64,
    pub enstrophy_spectral: f64,
}

impl CrossRow {
    /// `E_vortex / E_spectral - 1`.
    pub fn energy_rel(&self) -> f64 {
        self.energy_vortex / self.energy_spectral - 1.0
    }
    /// `Z_vortex / Z_spectral - 1`.
    pub fn enstrophy_rel(&self) -> f64 {
        self.enstrophy_vortex / self.enstrophy_spectral - 1.0
    }
}

/// The outcome of [`run_taylor_green`] or [`compare_outputs`].
#[derive(Clone, Debug, PartialEq)]
pub struct CrossReport {
    pub rows: Vec<CrossRow>,
    /// End spectra `(k, E_vortex, E_spectral)`.
    pub spectrum_end: Vec<(f64, f64, f64)>,
    pub bound_energy: f64,
    pub bound_enstrophy: f64,
}

impl CrossReport {
    pub fn max_energy_rel(&self) -> f64 {
        self.rows
            .iter()
            .map(|r| r.energy_rel().abs())
            .fold(0.0, f64::max)
    }
    pub fn max_enstrophy_rel(&self) -> f64 {
        self.rows
            .iter()
            .map(|r| r.enstrophy_rel().abs())
            .fold(0.0, f64::max)
    }
    /// Both maxima within the bounds (and finite).
    pub fn passes(&self) -> bool {
        let (e, z) = (self.max_energy_rel(), self.max_enstrophy_rel());
        !self.rows.is_empty() && e <= self.bound_energy && z <= self.bound_enstrophy
    }
    /// A Markdown table of the histories, the end spectra and the verdict.
    pub fn table(&self) -> String {
        let mut s = String::from("| t | E vortex | E spectral | dE | Z vortex | Z spectral | dZ |\n|---|---|---|---|---|---|---|\n");
        for r in &self.rows {
            let _ = writeln!(
                s,
                "| {:.3} | {:.6e} | {:.6e} | {:+.3e} | {:.6e} | {:.6e} | {:+.3e} |",
                r.t,
                r.energy_vortex,
                r.energy_spectral,
                r.energy_rel(),
                r.enstrophy_vortex,
                r.enstrophy_spectral,
                r.enstrophy_rel()
            );
        }
        s.push_str("\n| k | E(k) vortex | E(k) spectral |\n|---|---|---|\n");
        for (k, a, b) in &self.spectrum_end {
            let _ = writeln!(s, "| {k} | {a:.4e} | {b:.4e} |");
        }
        let _ = writeln!(
            s,
            "\nmax |dE| = {:.3e} (bound {:.1e}), max |dZ| = {:.3e} (bound {:.1e}): {}",
            self.max_energy_rel(),
            self.bound_energy,
            self.max_enstrophy_rel(),
            self.bound_enstrophy,
            if self.passes() { "PASS" } else { "FAIL" }
        );
        s
    }
}

/// Columns of a CSV with a header, by name.
fn read_columns(path: &Path) -> Result<(Vec<String>, Vec<Vec<f64>>)> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let mut lines = text.lines();
    let head: Vec<String> = lines
        .next()
        .unwrap_or("")
        .split(',')
        .map(|h| h.trim().to_string())
        .collect();
    let mut cols = vec![Vec::new(); head.len()];
    for l in lines.filter(|l| !l.trim().is_empty()) {
        for (c, x) in l.split(',').enumerate().take(head.len()) {
            cols[c].push(x.trim().parse::<f64>().unwrap_or(f64::NAN));
        }
    }
    Ok((head, cols))
}

fn column<'a>(path: &Path, head: &[String], cols: &'a [Vec<f64>], name: &str) -> Result<&'a [f64]> {
    head.iter()
        .position(|h| h == name)
        .map(|i| cols[i].as_slice())
        .ok_or_else(|| Error::Other(format!("{}: no column `{name}`", path.display())))
}

/// Linear interpolation of `(ts, ys)` (ascending `ts`) at `t`.
fn interp(ts: &[f64], ys: &[f64], t: f64) -> f64 {
    if ts.is_empty() {
        return f64::NAN;
    }
    let j = ts.partition_point(|&x| x < t);
    if j == 0 {
        return ys[0];
    }
    if j >= ts.len() {
        return ys[ts.len() - 1];
    }
    let (t0, t1) = (ts[j - 1], ts[j]);
    let w = if t1 > t0 { (t - t0) / (t1 - t0) } else { 1.0 };
    ys[j - 1] + w * (ys[j] - ys[j - 1])
}

/// The last `spectrum_*.csv` of a directory in name order (both solvers zero-pad the step or time).
fn last_spectrum(dir: &Path) -> Result<Option<Vec<(f64, f64)>>> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(Error::io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with("spectrum_") && f.ends_with(".csv"))
        })
        .collect();
    names.sort();
    let Some(p) = names.last() else {
        return Ok(None);
    };
    let (head, cols) = read_columns(p)?;
    let k = column(p, &head, &cols, "k")?;
    let e = column(p, &head, &cols, "E")?;
    Ok(Some(k.iter().copied().zip(e.iter().copied()).collect()))
}

/// Compares the outputs of a vortex run (`diagnostics.csv`, `spectrum_*.csv`) with those of a
/// spectral run (`energy.csv`, `spectrum_*.csv`): the spectral histories are interpolated
/// linearly to the vortex rows' times.
pub fn compare_outputs(
    vortex_dir: &Path,
    spectral_dir: &Path,
    bound_energy: f64,
    bound_enstrophy: f64,
) -> Result<CrossReport> {
    let vp = vortex_dir.join("diagnostics.csv");
    let sp = spectral_dir.join("energy.csv");
    let (vh, vc) = read_columns(&vp)?;
    let (sh, sc) = read_columns(&sp)?;
    let (vt, ve, vz) = (
        column(&vp, &vh, &vc, "t")?,
        column(&vp, &vh, &vc, "energy")?,
        column(&vp, &vh, &vc, "enstrophy")?,
    );
    let (st, se, sz) = (
        column(&sp, &sh, &sc, "t")?,
        column(&sp, &sh, &sc, "energy")?,
        column(&sp, &sh, &sc, "enstrophy")?,
    );
    let rows = vt
        .iter()
        .enumerate()
        .map(|(i, &t)| CrossRow {
            t,
            energy_vortex: ve[i],
            energy_spectral: interp(st, se, t),
            enstrophy_vortex: vz[i],
            enstrophy_spectral: interp(st, sz, t),
        })
        .collect();
    let spectrum_end = match (last_spectrum(vortex_dir)?, last_spectrum(spectral_dir)?) {
        (Some(a), Some(b)) => a
            .iter()
            .zip(b.iter())
            .map(|(&(k, ea), &(_, eb))| (k, ea, eb))
            .collect(),
        _ => vec![],
    };
    Ok(CrossReport {
        rows,
        spectrum_end,
        bound_energy,
        bound_enstrophy,
    })
}

/// Runs both solvers on the case (into `out/vortex` and `out/spectral`) and compares them. The
/// vortex method runs on the CPU backend in the current rayon pool.
pub fn run_taylor_green(case: &CrossCase, out: &Path) -> Result<CrossReport> {
    let vdir = out.join("vortex");
    let sdir = out.join("spectral");
    for d in [&vdir, &sdir] {
        if d.exists() {
            std::fs::remove_dir_all(d).map_err(Error::io(d))?;
        }
    }
    let scfg = case.spectral_config()?;
    let summary = vortex_spectral::run::run_config(
        &scfg,
        &vortex_spectral::run::RunOptions {
            out: sdir.clone(),
            restart: None,
            progress: false,
            overwrite: false,
        },
    )
    .map_err(|e| Error::Other(format!("spectral run: {e}")))?;
    log::info!("spectral: {}", summary.report());
    let vcfg = case.vortex_config()?;
    let one = &vortex_domain::SelfComm;
    let build = crate::run::host_build(one, vortex_fmm::CpuBackend, None);
    let opts = crate::run::RunOptions::default();
    let vs = crate::run::run(one, vcfg, &vdir, None, &opts, build)?;
    log::info!("vortex: {}", vs.report());
    compare_outputs(&vdir, &sdir, case.bound_energy, case.bound_enstrophy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_and_the_configs() {
        let ts = [0.0, 1.0, 2.0];
        let ys = [1.0, 3.0, 7.0];
        assert_eq!(interp(&ts, &ys, 0.5), 2.0);
        assert_eq!(interp(&ts, &ys, 2.0), 7.0);
        assert_eq!(interp(&ts, &ys, 5.0), 7.0);
        let c = CrossCase::default();
        let v = c.vortex_config().unwrap();
        assert_eq!(v.steps(), 60);
        assert_eq!(v.lattice_n(), Some(16));
        let s = c.spectral_config().unwrap();
        assert_eq!(s.n, 16);
        assert_eq!(s.nu, v.nu);
    }

    /// A tiny cross-validation end to end: 8^3, a few steps; the two solvers start from the same
    /// field, so the first row agrees to the FMM accuracy (p = 6 here: 5e-5 in E at 8^3) and the
    /// rest to well within the bounds.
    #[test]
    fn tiny_cross_validation_agrees() {
        let case = CrossCase {
            n: 8,
            nu: 0.05,
            dt: 0.05,
            t_end: 0.2,
            order: 6,
            diagnostics_every: 2,
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let r = run_taylor_green(&case, dir.path()).unwrap();
        println!("{}", r.table());
        assert_eq!(r.rows.len(), 3);
        assert!(r.rows[0].energy_rel().abs() < 2e-4, "{:?}", r.rows[0]);
        assert!(r.passes());
        assert!(!r.spectrum_end.is_empty());
    }
}
