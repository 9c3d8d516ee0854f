//! A periodic vortex-method run against the pseudo-spectral solver from the same initial
//! field (`vortex compare`): the spectral twin of a run's configuration ([`spectral_twin`]),
//! and the comparison of the two output directories ([`Comparison`]): energy and enstrophy at
//! the vortex run's diagnostics times, the energy spectra at the times both wrote one, one
//! figure of the three, and the runs' own figures redrawn with the other solver beside them.
//!
//! Both solvers compute energy, enstrophy and E(k) from a velocity on the same `n^3` grid by
//! the same functions (`vortex_spectral::diagnostics`), so the numbers compare directly: the
//! vortex run's grid velocity is the Biot-Savart velocity of its blobs (core paper Eq. 3),
//! the spectral solver's its Fourier state.

use crate::config::{Config, InitialKind};
use crate::error::{Error, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use vortex_spectral::plot::{History, Spectra};

/// The legend name of the vortex method.
pub const VORTEX: &str = "vortex method";
/// The legend name of the pseudo-spectral solver.
pub const SPECTRAL: &str = "spectral";

/// The `vortex spectral` configuration that starts from the field of the vortex run `cfg`
/// (read from `file`, named in errors): the same initial kind and parameters on the lattice's
/// `n^3` grid, the same viscosity and end time, an adaptive step no longer than the vortex
/// run's, rows of `energy.csv` and spectra at the vortex run's diagnostics times. Returns the
/// TOML text (written beside the runs, to rerun by hand) and the parsed configuration. A run
/// the spectral solver cannot twin is refused naming the key: free space, a box other than
/// `2 pi`, an initial kind of free space.
pub fn spectral_twin(
    cfg: &Config,
    file: &str,
    backend: vortex_spectral::Backend,
) -> Result<(String, vortex_spectral::Config)> {
    let refuse = |key: &str, msg: String| Error::Config {
        file: file.to_string(),
        key: key.to_string(),
        msg: format!("{msg} (vortex compare needs a run the spectral solver can start)"),
    };
    if !cfg.domain.periodic {
        return Err(refuse(
            "domain.periodic",
            "the spectral solver is periodic; this run is in free space".into(),
        ));
    }
    let two_pi = 2.0 * std::f64::consts::PI;
    if (cfg.domain.box_length - two_pi).abs() > 1e-12 * two_pi {
        return Err(refuse(
            "domain.box_length",
            format!(
                "{} is not the spectral solver's box length 2 pi",
                cfg.domain.box_length
            ),
        ));
    }
    let i = &cfg.initial;
    let kind = match i.kind {
        InitialKind::TaylorGreen => "taylor-green",
        InitialKind::TaylorGreen2d => "taylor-green2d",
        InitialKind::Isotropic => "isotropic",
        other => {
            return Err(refuse(
                "initial.kind",
                format!(
                    "{other:?} has no spectral twin (taylor-green, taylor-green-2d, isotropic)"
                ),
            ))
        }
    };
    let n = cfg
        .lattice_n()
        .ok_or_else(|| refuse("initial.n", "the lattice size is missing".into()))?;
    // the twin's grid is the run's lattice: the spectral solver's rule, named by the run's key
    if n < 8 {
        return Err(refuse(
            if cfg.reinterpolation.n.is_some() {
                "reinterpolation.n"
            } else {
                "initial.n"
            },
            format!(
                "{n}: the spectral twin runs on the run's {n}^3 lattice, and the spectral \
                 solver needs a grid of at least 8^3"
            ),
        ));
    }
    let times = diagnostics_times(cfg);
    let interval = times.get(1).copied().unwrap_or(cfg.t_end);
    let list = |v: &[f64]| {
        v.iter()
            .map(|t| format!("{t:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = format!(
        "# The spectral twin of {file}: the same initial field, viscosity and end time on the\n\
         # {n}^3 grid (written by `vortex compare`; rerun with `vortex spectral THIS.toml`).\n\
         n = {n}\nnu = {nu:?}\nt_end = {t_end:?}\ncfl = 0.5\ndt_max = {dt:?}\n\
         diagnostics_interval = {interval:?}\nspectrum_times = [{spectra}]\nfield_times = []\n\
         backend = \"{backend}\"\n\n[initial]\nkind = \"{kind}\"\n",
        nu = cfg.nu,
        t_end = cfg.t_end,
        dt = cfg.dt,
        spectra = list(&times),
    );
    if i.kind == InitialKind::Isotropic {
        let _ = writeln!(
            text,
            "seed = {}",
            i.seed.unwrap_or(crate::initial::ISOTROPIC_SEED)
        );
        if let Some(k) = i.k_peak {
            let _ = writeln!(text, "k_peak = {k:?}");
        }
        if let Some(e) = i.energy {
            let _ = writeln!(text, "energy = {e:?}");
        }
        if let Some(r) = i.re_lambda {
            let _ = writeln!(text, "re_lambda = {r:?}");
        }
    }
    let twin =
        vortex_spectral::Config::from_str_named(&text, &format!("the spectral twin of {file}"))
            .map_err(|e| Error::Other(e.to_string()))?;
    Ok((text, twin))
}

/// The times of the vortex run's diagnostics rows: every `output.diagnostics_every` steps
/// (else every `output.diagnostics_interval`, else 20 rows), from 0 to `t_end`.
pub fn diagnostics_times(cfg: &Config) -> Vec<f64> {
    let o = &cfg.output;
    let steps = cfg.steps();
    let every = if o.diagnostics_every > 0 {
        o.diagnostics_every
    } else if let Some(dt) = o.diagnostics_interval {
        ((dt / cfg.dt).round() as u64).max(1)
    } else {
        steps.div_ceil(20).max(1)
    };
    let mut t: Vec<f64> = (0..=steps / every)
        .map(|k| (k * every) as f64 * cfg.dt)
        .collect();
    if steps % every != 0 {
        t.push(cfg.t_end);
    }
    t
}

/// The linear interpolation of `rows` (sorted by time) at `t`, component `c` (1: energy, 2:
/// enstrophy); `None` outside their times.
fn interpolate(rows: &[(f64, f64, f64)], t: f64, c: usize) -> Option<f64> {
    let get = |r: &(f64, f64, f64)| if c == 1 { r.1 } else { r.2 };
    let tol = 1e-9 * t.abs().max(1.0);
    let j = rows.iter().position(|r| r.0 >= t - tol)?;
    let b = &rows[j];
    if (b.0 - t).abs() <= tol {
        return Some(get(b));
    }
    let a = rows.get(j.checked_sub(1)?)?;
    let w = (t - a.0) / (b.0 - a.0);
    Some(get(a) + w * (get(b) - get(a)))
}

/// One row of `comparison.csv`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    pub t: f64,
    /// Vortex method, spectral.
    pub energy: [f64; 2],
    pub enstrophy: [f64; 2],
}

impl Row {
    /// `E_vortex / E_spectral - 1` and the same of the enstrophy.
    pub fn differences(&self) -> (f64, f64) {
        (
            self.energy[0] / self.energy[1] - 1.0,
            self.enstrophy[0] / self.enstrophy[1] - 1.0,
        )
    }
}

/// `(k, E_vortex(k), E_spectral(k))`.
pub type SpectrumPair = (f64, f64, f64);

/// The outputs of a vortex run and of its spectral twin.
pub struct Comparison {
    pub vortex: Vec<(f64, f64, f64)>,
    pub spectral: Vec<(f64, f64, f64)>,
    pub vortex_spectra: vortex_spectral::io::SpectrumSeries,
    pub spectral_spectra: vortex_spectral::io::SpectrumSeries,
    pub nu: f64,
}

/// The files of the comparison in its directory.
pub const CSV: &str = "comparison.csv";
pub const SPECTRA_CSV: &str = "comparison_spectra.csv";
pub const PNG: &str = "comparison.png";

impl Comparison {
    /// Reads `diagnostics.csv` and the spectra of the vortex run in `vortex`, `energy.csv` and
    /// the spectra of the spectral run in `spectral`.
    pub fn load(vortex: &Path, spectral: &Path, nu: f64) -> Result<Comparison> {
        let spectra = |dir: &Path| {
            vortex_spectral::io::read_spectra(dir).map_err(|e| Error::Other(e.to_string()))
        };
        let s_csv = spectral.join("energy.csv");
        Ok(Comparison {
            vortex: crate::diagnostics::read_history(&vortex.join("diagnostics.csv"))?,
            spectral: vortex_spectral::run::read_history(&s_csv)
                .map_err(|e| Error::Other(format!("{}: {e}", s_csv.display())))?,
            vortex_spectra: spectra(vortex)?,
            spectral_spectra: spectra(spectral)?,
            nu,
        })
    }

    /// Energy and enstrophy of both solvers at the vortex run's diagnostics times that the
    /// spectral history covers (the spectral values interpolated linearly where its rows fall
    /// between).
    pub fn rows(&self) -> Vec<Row> {
        self.vortex
            .iter()
            .filter_map(|v| {
                Some(Row {
                    t: v.0,
                    energy: [v.1, interpolate(&self.spectral, v.0, 1)?],
                    enstrophy: [v.2, interpolate(&self.spectral, v.0, 2)?],
                })
            })
            .collect()
    }

    /// The times at which both wrote a spectrum, with the two spectra on their common
    /// wavenumbers.
    pub fn spectra(&self) -> Vec<(f64, Vec<SpectrumPair>)> {
        self.vortex_spectra
            .iter()
            .filter_map(|(t, v)| {
                let tol = 1e-6 * t.abs().max(1.0);
                let (_, s) = self
                    .spectral_spectra
                    .iter()
                    .find(|(u, _)| (u - t).abs() <= tol)?;
                let both = v
                    .iter()
                    .zip(s)
                    .filter(|(a, b)| a.0 == b.0)
                    .map(|(a, b)| (a.0, a.1, b.1))
                    .collect();
                Some((*t, both))
            })
            .collect()
    }

    /// Writes `comparison.csv`, `comparison_spectra.csv` and `comparison.png` into `out`, and
    /// redraws `energy.png` and `spectra.png` of both runs (`vortex_dir`, `spectral_dir`) with
    /// the other solver's curves beside their own. `title` names the case in the figure.
    pub fn write(
        &self,
        out: &Path,
        title: &str,
        vortex_dir: &Path,
        spectral_dir: &Path,
    ) -> Result<Vec<PathBuf>> {
        let rows = self.rows();
        if rows.is_empty() {
            return Err(Error::Other(format!(
                "{}: no time of the vortex run's diagnostics falls in the spectral history of {}",
                vortex_dir.display(),
                spectral_dir.display()
            )));
        }
        let mut csv = String::from(
            "t,energy_vortex,energy_spectral,enstrophy_vortex,enstrophy_spectral,\
             energy_rel_diff,enstrophy_rel_diff\n",
        );
        for r in &rows {
            let (de, dz) = r.differences();
            let _ = writeln!(
                csv,
                "{:?},{:.12e},{:.12e},{:.12e},{:.12e},{de:.6e},{dz:.6e}",
                r.t, r.energy[0], r.energy[1], r.enstrophy[0], r.enstrophy[1]
            );
        }
        let mut sp = String::from("t,k,E_vortex,E_spectral\n");
        for (t, s) in self.spectra() {
            for (k, a, b) in s {
                let _ = writeln!(sp, "{t:?},{k},{a:.12e},{b:.12e}");
            }
        }
        let write = |name: &str, text: &str| -> Result<PathBuf> {
            let p = out.join(name);
            vortex_spectral::durable::write_atomic(&p, &[text.as_bytes()], 1)
                .map_err(|e| Error::Other(e.to_string()))?;
            Ok(p)
        };
        let mut files = vec![write(CSV, &csv)?, write(SPECTRA_CSV, &sp)?];
        let h = [
            History {
                label: VORTEX,
                rows: &self.vortex,
                nu: self.nu,
            },
            History {
                label: SPECTRAL,
                rows: &self.spectral,
                nu: self.nu,
            },
        ];
        let s = [
            Spectra {
                label: VORTEX,
                spectra: &self.vortex_spectra,
            },
            Spectra {
                label: SPECTRAL,
                spectra: &self.spectral_spectra,
            },
        ];
        let plot_err = |e: vortex_spectral::io::IoError| Error::Other(e.to_string());
        let png = out.join(PNG);
        vortex_spectral::plot::plot_comparison(&png, title, [(&h[0], &s[0]), (&h[1], &s[1])])
            .map_err(plot_err)?;
        files.push(png);
        for (dir, (me, other)) in [(vortex_dir, (0, 1)), (spectral_dir, (1, 0))] {
            let e = dir.join("energy.png");
            vortex_spectral::plot::plot_energy(&e, &h[me], Some(&h[other])).map_err(plot_err)?;
            let p = dir.join("spectra.png");
            vortex_spectral::plot::plot_spectra(&p, &s[me], Some(&s[other]), self.nu)
                .map_err(plot_err)?;
            files.extend([e, p]);
        }
        Ok(files)
    }

    /// One line per quantity at the last common time: the values and their difference.
    pub fn summary(&self) -> String {
        let rows = self.rows();
        let Some(last) = rows.last() else {
            return "no common time".into();
        };
        let (de, dz) = last.differences();
        let worst = rows
            .iter()
            .map(|r| r.differences())
            .fold((0.0f64, 0.0f64), |a, d| {
                (a.0.max(d.0.abs()), a.1.max(d.1.abs()))
            });
        format!(
            "at t = {t}: energy {ev:.5e} (vortex method) against {es:.5e} (spectral), {de:+.2} %; \
             enstrophy {zv:.5e} against {zs:.5e}, {dz:+.2} %; largest differences over the \
             {n} common rows: energy {we:.2} %, enstrophy {wz:.2} %",
            t = last.t,
            ev = last.energy[0],
            es = last.energy[1],
            de = 100.0 * de,
            zv = last.enstrophy[0],
            zs = last.enstrophy[1],
            dz = 100.0 * dz,
            n = rows.len(),
            we = 100.0 * worst.0,
            wz = 100.0 * worst.1,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::from_str_named(text, "test.toml").unwrap()
    }

    const ISO: &str = "nu = 0.02\ndt = 0.02\nt_end = 0.5\n[domain]\nperiodic = true\n\
        box_length = 6.283185307179586\n[initial]\nkind = \"isotropic\"\nn = 16\nk_peak = 3.0\n\
        re_lambda = 20.0\nseed = 7\n[output]\ndiagnostics_every = 5\n";

    #[test]
    fn the_twin_starts_from_the_same_field() {
        let c = config(ISO);
        let (text, s) = spectral_twin(&c, "test.toml", vortex_spectral::Backend::Cpu).unwrap();
        assert_eq!((s.n, s.nu, s.t_end), (16, 0.02, 0.5));
        assert_eq!(s.dt_max, Some(0.02));
        assert_eq!(s.diagnostics_interval, Some(0.1));
        assert_eq!(
            s.initial.kind,
            vortex_spectral::config::InitialKind::Isotropic
        );
        assert_eq!(
            (s.initial.seed, s.initial.k_peak, s.initial.re_lambda),
            (Some(7), Some(3.0), Some(20.0))
        );
        assert_eq!(s.spectrum_times.len(), 6);
        assert!((s.spectrum_times[5] - 0.5).abs() < 1e-12);
        assert!(text.contains("test.toml"));
        // the same velocity field at t = 0: the vortex method's initial field is the spectral
        // crate's, with the twin's parameters
        let p = vortex_spectral::initial::IsotropicParams {
            k_peak: 3.0,
            energy: None,
            re_lambda: Some(20.0),
            seed: 7,
            nu: 0.02,
        };
        let a = vortex_spectral::initial::isotropic(16, &p);
        let b = vortex_spectral::solver::initial_field(&s);
        for c in 0..3 {
            assert_eq!(a.u[c], b.u[c]);
        }
    }

    #[test]
    fn runs_without_a_twin_are_refused_naming_the_key() {
        let blob = "nu = 0.01\ndt = 0.1\nt_end = 1.0\n[initial]\nkind = \"blob\"\n\
                    sigma = 0.5\nstrength = [0.0, 0.0, 1.0]\nspacing = 0.5\n";
        let cases = [
            (ISO.replace("6.283185307179586", "6.0"), "domain.box_length"),
            (blob.to_string(), "domain.periodic"),
            // a lattice below the spectral solver's smallest grid: the run's own key
            (
                ISO.replace("n = 16", "n = 6")
                    .replace("k_peak = 3.0", "k_peak = 2.0"),
                "initial.n",
            ),
        ];
        for (text, key) in cases {
            // refused by the configuration's own checks or by the twin, naming the key
            let e = Config::from_str_named(&text, "t.toml")
                .and_then(|c| spectral_twin(&c, "t.toml", vortex_spectral::Backend::Cpu))
                .unwrap_err();
            assert!(e.to_string().contains(key), "{e}");
        }
        // the free-space blob parses: the twin itself refuses it
        let c = Config::from_str_named(blob, "t.toml").unwrap();
        let e = spectral_twin(&c, "t.toml", vortex_spectral::Backend::Cpu).unwrap_err();
        assert!(e.to_string().contains("free space"), "{e}");
    }

    #[test]
    fn rows_join_on_time_and_interpolate_between_spectral_rows() {
        let c = Comparison {
            vortex: vec![
                (0.0, 1.0, 2.0),
                (0.1, 0.9, 2.2),
                (0.2, 0.8, 2.4),
                (0.35, 0.7, 2.5),
            ],
            spectral: vec![
                (0.0, 1.0, 2.0),
                (0.05, 0.96, 2.1),
                (0.15, 0.86, 2.3),
                (0.3, 0.75, 2.6),
            ],
            vortex_spectra: vec![],
            spectral_spectra: vec![],
            nu: 0.01,
        };
        let rows = c.rows();
        // 0.35 is past the spectral history: left out
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].differences(), (0.0, 0.0));
        assert!((rows[1].energy[1] - 0.91).abs() < 1e-12);
        assert!((rows[2].enstrophy[1] - (2.3 + (0.05 / 0.15) * 0.3)).abs() < 1e-12);
    }

    #[test]
    fn diagnostics_times_end_at_t_end() {
        let c = config(&ISO.replace("t_end = 0.5", "t_end = 0.52"));
        let t = diagnostics_times(&c);
        assert_eq!(t.len(), 7);
        assert!((t[6] - 0.52).abs() < 1e-12 && (t[5] - 0.5).abs() < 1e-12);
    }
}
