//! The run loop behind `vortex spectral CONFIG.toml [--out DIR] [--restart FILE]`.
//!
//! Output events (rows of `energy.csv`, spectra, fields, checkpoints, the end time) are hit exactly:
//! a step that would pass one is shortened to land on it. Everything written goes to a temporary file
//! first and is renamed, so an interrupted run leaves complete files.

use crate::backend::{new_stepper, Stepper};
use crate::config::{Config, ConfigError};
use crate::diagnostics::Stats;
use crate::io::{self, os, Checkpoint, IoError};
use crate::solver::SolverError;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// File trouble.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The solver failed.
    #[error(transparent)]
    Solver(#[from] SolverError),
    /// The solution blew up; the last good checkpoint is kept.
    #[error("{source}; last good checkpoint: {checkpoint}")]
    BlewUp {
        /// What happened (names the step).
        source: SolverError,
        /// Last good checkpoint (or "none").
        checkpoint: String,
    },
    /// The restart file does not match the configuration.
    #[error("{path}: checkpoint does not match the configuration: {msg}")]
    Mismatch {
        /// Checkpoint file.
        path: PathBuf,
        /// What differs.
        msg: String,
    },
    /// Thread pool.
    #[error("thread pool: {0}")]
    Threads(String),
}

/// Options of a run besides the configuration.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Output directory.
    pub out: PathBuf,
    /// Checkpoint to restart from.
    pub restart: Option<PathBuf>,
    /// Show a progress bar (on stderr; hidden anyway when it is not a terminal).
    pub progress: bool,
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunSummary {
    /// Steps taken in this invocation.
    pub steps: u64,
    /// Statistics at the end.
    pub last: Stats,
    /// Peak dissipation seen in this invocation and its time.
    pub peak_dissipation: (f64, f64),
    /// Wall time of the time loop in seconds.
    pub wall_s: f64,
    /// Mean wall time per step.
    pub s_per_step: f64,
    /// The output directory.
    pub out: PathBuf,
}

impl RunSummary {
    /// A few lines for the terminal.
    pub fn report(&self) -> String {
        let l = &self.last;
        format!(
            "{} steps in {:.2} s ({:.4} s/step); t = {:.4}: E = {:.6e}, epsilon = {:.6e}, Re_lambda = {:.2}, kmax*eta = {:.3}; peak dissipation {:.6e} at t = {:.4}; output in {}",
            self.steps,
            self.wall_s,
            self.s_per_step,
            l.t,
            l.energy,
            l.dissipation,
            l.re_lambda,
            l.kmax_eta,
            self.peak_dissipation.0,
            self.peak_dissipation.1,
            self.out.display()
        )
    }
}

/// Name of the checkpoint file in the output directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.bin";

/// Read a configuration file and run it.
pub fn run_file(config_path: &Path, opts: &RunOptions) -> Result<RunSummary, RunError> {
    let cfg = Config::from_file(config_path)?;
    run_config(&cfg, opts)
}

/// Run a validated configuration in its own rayon pool of `cfg.threads` threads.
pub fn run_config(cfg: &Config, opts: &RunOptions) -> Result<RunSummary, RunError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cfg.threads)
        .build()
        .map_err(|e| RunError::Threads(e.to_string()))?;
    pool.install(|| run_inner(cfg, opts))
}

const TOL: f64 = 1e-9;

fn periodic_next(t: f64, every: f64) -> f64 {
    ((t + TOL * every.max(1.0)) / every).floor() * every + every
}

fn hit(t: f64, e: f64) -> bool {
    (t - e).abs() <= TOL * e.abs().max(1.0)
}

fn periodic_hit(t: f64, every: f64) -> bool {
    let r = (t / every).round() * every;
    hit(t, r)
}

fn run_inner(cfg: &Config, opts: &RunOptions) -> Result<RunSummary, RunError> {
    // Everything that can fail on input is checked before anything is written.
    let (mut solver, restarted) = match &opts.restart {
        Some(path) => {
            let ck = io::read_checkpoint(path)?;
            let mism = |msg: String| RunError::Mismatch {
                path: path.clone(),
                msg,
            };
            if ck.n != cfg.n {
                return Err(mism(format!("grid {} vs n = {}", ck.n, cfg.n)));
            }
            if ck.dealias != cfg.dealias {
                return Err(mism(format!(
                    "dealias {:?} vs {:?}",
                    ck.dealias, cfg.dealias
                )));
            }
            if ck.nu.to_bits() != cfg.nu.to_bits() {
                return Err(mism(format!("nu {} vs {}", ck.nu, cfg.nu)));
            }
            let mut s = new_stepper(cfg, cfg.backend)?;
            s.set_state(ck.state(), ck.t, ck.steps)?;
            log::info!(
                "restarting from {} at t = {} (step {})",
                path.display(),
                ck.t,
                ck.steps
            );
            (s, true)
        }
        None => (new_stepper(cfg, cfg.backend)?, false),
    };
    log::info!(
        "spectral solver: {}^3, {:?}, backend {}",
        cfg.n,
        cfg.dealias,
        solver.backend_name()
    );
    let out = &opts.out;
    std::fs::create_dir_all(out).map_err(os(out))?;
    let ck_path = out.join(CHECKPOINT_FILE);
    let energy_path = out.join("energy.csv");
    let t0 = solver.time();

    // energy.csv: new, or on restart the rows up to the restart time.
    let mut csv = String::from(Stats::CSV_HEADER);
    csv.push('\n');
    if restarted && energy_path.exists() {
        for row in io::read_csv(&energy_path)? {
            if row
                .first()
                .is_some_and(|&t| t <= t0 + TOL * t0.abs().max(1.0))
            {
                let s: Vec<String> = row.iter().map(|v| format!("{v:.16e}")).collect();
                csv.push_str(&s.join(","));
                csv.push('\n');
            }
        }
    }
    let write_csv = |csv: &str| -> Result<(), IoError> {
        let tmp = energy_path.with_extension("csv.tmp");
        std::fs::write(&tmp, csv).map_err(os(&tmp))?;
        std::fs::rename(&tmp, &energy_path).map_err(os(&energy_path))
    };

    let t_end = cfg.t_end;
    let mut peak = (0.0f64, t0);
    let mut last_good_ck: Option<f64> = if restarted { Some(t0) } else { None };

    // Statistics are computed when a row of energy.csv is due (and at the start and the end): on
    // the GPU backend they need the state on the host. The peak dissipation is the largest of
    // those rows.
    let do_outputs = |solver: &mut dyn Stepper,
                      csv: &mut String,
                      peak: &mut (f64, f64),
                      first: bool,
                      last: Option<Stats>|
     -> Result<Stats, RunError> {
        let t = solver.time();
        let stats_due = match cfg.stats_every {
            None => true,
            Some(e) => periodic_hit(t, e) || hit(t, t_end),
        };
        let st = match last {
            Some(st) if !stats_due => st,
            _ => solver.stats()?,
        };
        if stats_due && !(first && restarted) {
            csv.push_str(&st.csv_row());
            csv.push('\n');
        }
        if st.dissipation > peak.0 {
            *peak = (st.dissipation, t);
        }
        if !(first && restarted) && cfg.spectrum_times.iter().any(|&e| hit(t, e)) {
            let p = out.join(format!("spectrum_{t:010.4}.csv"));
            io::write_spectrum_csv(&p, &solver.spectrum()?)?;
            log::info!("t = {t:.4}: spectrum -> {}", p.display());
        }
        if !(first && restarted) && cfg.field_times.iter().any(|&e| hit(t, e)) {
            let vel = solver.velocity()?;
            let vort = if cfg.vorticity {
                Some(solver.vorticity()?)
            } else {
                None
            };
            for fmt in &cfg.field_formats {
                if fmt == "npy" {
                    let p = out.join(format!("velocity_{t:010.4}.npy"));
                    io::write_field_npy(&p, &vel)?;
                    if let Some(w) = &vort {
                        io::write_field_npy(&out.join(format!("vorticity_{t:010.4}.npy")), w)?;
                    }
                } else {
                    let p = out.join(format!("fields_{t:010.4}.vtk"));
                    let mut fl: Vec<(&str, &crate::VelocityField)> = vec![("velocity", &vel)];
                    if let Some(w) = &vort {
                        fl.push(("vorticity", w));
                    }
                    io::write_vtk(&p, &format!("vortex spectral t={t}"), &fl)?;
                }
            }
            log::info!("t = {t:.4}: fields written");
        }
        Ok(st)
    };

    let mut last = do_outputs(solver.as_mut(), &mut csv, &mut peak, true, None)?;
    write_csv(&csv)?;

    let bar = if opts.progress && t_end > t0 {
        let b = ProgressBar::new(1000);
        b.set_style(
            ProgressStyle::with_template(
                "{bar:40.cyan/blue} {percent:>3}% {msg} [{elapsed_precise} < {eta_precise}]",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    } else {
        ProgressBar::hidden()
    };

    let start = Instant::now();
    let mut steps = 0u64;
    while solver.time() < t_end - TOL * t_end.abs().max(1.0) {
        let t = solver.time();
        let mut next = t_end;
        if let Some(e) = cfg.stats_every {
            next = next.min(periodic_next(t, e));
        }
        if let Some(e) = cfg.checkpoint_every {
            next = next.min(periodic_next(t, e));
        }
        for &e in cfg.spectrum_times.iter().chain(cfg.field_times.iter()) {
            if e > t + TOL * e.abs().max(1.0) {
                next = next.min(e);
            }
        }
        let info = match solver.step_limited(next - t) {
            Ok(i) => i,
            Err(e @ SolverError::NonFinite { .. }) => {
                bar.abandon();
                let checkpoint = match last_good_ck {
                    Some(tc) => format!("{} (t = {tc})", ck_path.display()),
                    None => "none written yet".into(),
                };
                write_csv(&csv)?;
                log::error!("{e}; last good checkpoint: {checkpoint}");
                return Err(RunError::BlewUp {
                    source: e,
                    checkpoint,
                });
            }
            Err(e) => return Err(e.into()),
        };
        steps += 1;
        let t = solver.time();
        last = do_outputs(solver.as_mut(), &mut csv, &mut peak, false, Some(last))?;
        let ck_due = cfg.checkpoint_every.is_some_and(|e| periodic_hit(t, e)) || hit(t, t_end);
        if ck_due {
            write_csv(&csv)?;
            let steps_done = solver.steps();
            io::write_checkpoint(
                &ck_path,
                &Checkpoint::from_state(solver.state()?, cfg.nu, cfg.dealias, t, steps_done),
            )?;
            last_good_ck = Some(t);
            log::debug!("t = {t:.4}: checkpoint");
        }
        let el = start.elapsed().as_secs_f64();
        bar.set_position(((t - t0) / (t_end - t0) * 1000.0) as u64);
        bar.set_message(format!(
            "t={t:.3} dt={:.2e} cfl={:.2} {:.3}s/step E={:.4e}",
            info.dt,
            info.cfl,
            el / steps as f64,
            last.energy
        ));
    }
    bar.finish_and_clear();
    let wall_s = start.elapsed().as_secs_f64();
    write_csv(&csv)?;

    // Figures from the files (so a restarted run plots its whole history).
    let rows: Vec<(f64, f64, f64)> = io::read_csv(&energy_path)?
        .into_iter()
        .filter(|r| r.len() >= 4)
        .map(|r| (r[0], r[1], r[3]))
        .collect();
    if let Err(e) = crate::plot::plot_energy(&out.join("energy.png"), &rows) {
        log::warn!("{e}");
    }
    let mut spectra = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(out)
        .map_err(os(out))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with("spectrum_") && f.ends_with(".csv"))
        })
        .collect();
    names.sort();
    for p in names {
        let t: f64 = p
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.trim_start_matches("spectrum_").parse().ok())
            .unwrap_or(0.0);
        let s: Vec<(f64, f64)> = io::read_csv(&p)?
            .into_iter()
            .filter(|r| r.len() >= 2)
            .map(|r| (r[0], r[1]))
            .collect();
        spectra.push((t, s));
    }
    if !spectra.is_empty() {
        if let Err(e) = crate::plot::plot_spectra(&out.join("spectra.png"), &spectra) {
            log::warn!("{e}");
        }
    }
    Ok(RunSummary {
        steps,
        last,
        peak_dissipation: peak,
        wall_s,
        s_per_step: if steps > 0 {
            wall_s / steps as f64
        } else {
            0.0
        },
        out: out.clone(),
    })
}
