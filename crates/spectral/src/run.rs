//! The run loop behind `vortex spectral CONFIG.toml [--out DIR] [--restart FILE]`.
//!
//! Output events (rows of `energy.csv`, spectra, fields, checkpoints, the end time) are hit exactly:
//! a step that would pass one is shortened to land on it. Everything written goes to a temporary file
//! first and is renamed, so an interrupted run leaves complete files.

use crate::backend::{new_stepper, Stepper};
use crate::config::{Config, ConfigError};
use crate::diagnostics::Stats;
use crate::durable::{self, OutMode};
use crate::energy_check::{EnergyMonitor, EnergyTolerance, Verdict};
use crate::io::{self, os, Checkpoint, IoError};
use crate::solver::SolverError;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::io::Write;
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
    /// The energy of the decaying flow rose beyond the limit (`crate::energy_check`).
    #[error("{message}: the flow blew up; last good checkpoint: {checkpoint}")]
    EnergyRise {
        /// What rose, when (names the step).
        message: String,
        /// Last good checkpoint (or "none written yet").
        checkpoint: String,
    },
    /// The run cannot fit in memory (nothing was allocated).
    #[error("{0}")]
    Memory(String),
    /// The restart file does not match the configuration.
    #[error("{path}: checkpoint does not match the configuration:\n{msg}")]
    Mismatch {
        /// Checkpoint file.
        path: PathBuf,
        /// What differs.
        msg: String,
    },
    /// The energy failed the check at a checkpoint time; the last good checkpoint is kept.
    #[error(
        "energy {energy:.4e} at t = {t} against {e0:.4e} initially (limit {limit} times): \
         the flow blew up; no checkpoint written for it; last good checkpoint: {checkpoint}"
    )]
    Unhealthy {
        /// Time.
        t: f64,
        /// Energy then.
        energy: f64,
        /// Initial energy.
        e0: f64,
        /// `energy_growth_limit`.
        limit: f64,
        /// Last good checkpoint.
        checkpoint: String,
    },
    /// A step failed the stability check (`[health]`); no checkpoint is written for it.
    #[error(
        "unstable time step at step {step} (t = {t}): advective CFL dt*max(|u|+|v|+|w|)/dx = \
         {cfl:.3} above health.cfl_limit = {limit} (RK4 is stable to about 2.8); reduce dt or \
         cfl; last good checkpoint: {checkpoint}"
    )]
    Unstable {
        /// The step (1-based).
        step: u64,
        /// Time at its start.
        t: f64,
        /// Its CFL number.
        cfl: f64,
        /// `health.cfl_limit`.
        limit: f64,
        /// Last good checkpoint.
        checkpoint: String,
    },
    /// Thread pool.
    #[error("thread pool: {0}")]
    Threads(String),
    /// The output directory would lose or mix an earlier run's files.
    #[error(transparent)]
    Durable(#[from] crate::durable::DurableError),
}

/// The configuration keys a restart must keep, flattened (`key -> value`): everything except the
/// end time, the output schedule, the backend and the threads.
pub fn restart_keys(cfg: &Config) -> BTreeMap<String, String> {
    let text = toml::to_string(cfg).unwrap_or_default();
    let mut m = durable::flatten_toml(&text).unwrap_or_default();
    for k in [
        "t_end",
        "diagnostics_interval",
        "spectrum_times",
        "field_times",
        "field_formats",
        "vorticity",
        "checkpoint_interval",
        "checkpoint_wall_minutes",
        "checkpoints_kept",
        "energy_growth_limit",
        "threads",
        "backend",
        "health.cfl_warn",
        "health.cfl_limit",
    ] {
        m.remove(k);
    }
    fill_defaults(&mut m);
    m
}

/// Writes out the defaults of optional keys (`initial.amplitude = 1.0` of the Taylor-Green
/// fields), so that a key given explicitly with its default value and the same key left out
/// compare equal at a restart.
fn fill_defaults(m: &mut BTreeMap<String, String>) {
    let taylor_green = m
        .get("initial.kind")
        .is_some_and(|k| k.contains("taylor-green"));
    if taylor_green {
        m.entry("initial.amplitude".into())
            .or_insert_with(|| toml::Value::Float(1.0).to_string());
    }
}

fn keys_text(m: &BTreeMap<String, String>) -> String {
    m.iter().map(|(k, v)| format!("{k} = {v}\n")).collect()
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
    /// Replace the files of an earlier run in `out` (otherwise a non-empty `out` is refused
    /// unless restarting).
    pub overwrite: bool,
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
    /// The backend that ran (`cpu` or `cuda`).
    pub backend: String,
    /// The signal that stopped the run early (after its checkpoint), if any.
    pub interrupted: Option<usize>,
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

/// Run a validated configuration in its own rayon pool of `cfg.threads` threads.
pub fn run_config(cfg: &Config, opts: &RunOptions) -> Result<RunSummary, RunError> {
    durable::check_memory(
        &format!("a spectral run of n = {} ({:?})", cfg.n, cfg.dealias),
        cfg.memory_bytes(),
    )
    .map_err(RunError::Memory)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(durable::cap_threads(cfg.threads))
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

/// Reads the restart checkpoint and refuses it, key by key, when the configuration changed.
fn resume(cfg: &Config, path: &Path) -> Result<(Box<dyn Stepper>, f64), RunError> {
    const BASES: [&str; 1] = ["checkpoint.bin"];
    let (path, ck) = if path.is_dir() {
        // a run directory: its newest checkpoint that loads
        let c = durable::restart_candidates(path, &BASES);
        durable::newest_loadable(path, &c, |p| {
            io::read_checkpoint(p).map_err(|e| e.to_string())
        })?
    } else {
        if let Some(e) = durable::missing_restart_hint(path, &BASES) {
            return Err(e.into());
        }
        (path.to_path_buf(), io::read_checkpoint(path)?)
    };
    let path = path.as_path();
    let mism = |msg: String| RunError::Mismatch {
        path: path.to_path_buf(),
        msg,
    };
    let mut old = durable::flatten_toml(&ck.config)
        .map_err(|e| mism(format!("its configuration record is unreadable: {e}")))?;
    fill_defaults(&mut old);
    let diff = durable::config_diff(&old, &restart_keys(cfg));
    if !diff.is_empty() {
        return Err(mism(format!(
            "  {}\n(only t_end, the output schedule, the backend and the threads may change)",
            diff.join("\n  ")
        )));
    }
    if ck.n != cfg.n {
        return Err(mism(format!("grid {} vs n = {}", ck.n, cfg.n)));
    }
    if cfg.t_end <= ck.t + TOL * ck.t.abs().max(1.0) {
        return Err(mism(format!(
            "t_end = {} is at or before the checkpoint's time t = {} (step {}): nothing to run; \
             raise t_end to continue",
            cfg.t_end, ck.t, ck.steps
        )));
    }
    let mut s = new_stepper(cfg, cfg.backend)?;
    s.set_state(ck.state(), ck.t, ck.steps)?;
    log::info!(
        "restarting from {} at t = {} (step {})",
        path.display(),
        ck.t,
        ck.steps
    );
    Ok((s, ck.initial_energy))
}

/// Opens `energy.csv` for appending: new, or on restart the rows up to the restart time `t0`
/// (rewritten atomically first). Rows are written and flushed one at a time.
/// Also returns the rows kept (`t, energy, enstrophy, dissipation, ...`): the history before
/// the restart, for the energy check and the peak dissipation of the whole run.
fn open_energy_csv(
    path: &Path,
    restarted: bool,
    t0: f64,
) -> Result<(std::fs::File, Vec<Vec<f64>>), RunError> {
    let mut csv = String::from(Stats::CSV_HEADER);
    csv.push('\n');
    let mut kept = vec![];
    if restarted && path.exists() {
        for row in io::read_csv(path)? {
            if row
                .first()
                .is_some_and(|&t| t <= t0 + TOL * t0.abs().max(1.0))
            {
                let s: Vec<String> = row.iter().map(|v| format!("{v:.16e}")).collect();
                csv.push_str(&s.join(","));
                csv.push('\n');
                kept.push(row);
            }
        }
    }
    durable::write_atomic(path, &[csv.as_bytes()], 1)?;
    let f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(os(path))?;
    Ok((f, kept))
}

/// A run as a sequence of named phases: [`open_run`] (solver, output directory), the outputs
/// of the start ([`RunOutputs::at`]), then per step the step with its health check
/// ([`Progress::step`]), the outputs due at its time and the checkpoint when due
/// ([`Progress::checkpoint`]); at the end the plots ([`plot_run`]).
fn run_inner(cfg: &Config, opts: &RunOptions) -> Result<RunSummary, RunError> {
    let (mut solver, e0) = open_run(cfg, opts)?;
    let restarted = opts.restart.is_some();
    let out = &opts.out;
    let t0 = solver.time();
    let (csv, kept) = open_energy_csv(&out.join("energy.csv"), restarted, t0)?;
    // the summaries and the energy check cover the whole history, the rows before a restart too
    let mut monitor = EnergyMonitor::new(EnergyTolerance::default());
    let mut peak = (0.0, t0);
    for (i, row) in kept.iter().enumerate() {
        if let [t, e, _, d, ..] = row[..] {
            if d > peak.0 {
                peak = (d, t);
            }
            if let Verdict::Unstable { message } = monitor.observe(i as u64, t, e) {
                log::warn!("kept row of energy.csv: {message}");
            }
        }
    }
    let mut outputs = RunOutputs {
        cfg,
        out,
        energy_path: out.join("energy.csv"),
        csv,
        restarted,
        peak,
    };
    let mut last = outputs.at(solver.as_mut(), true, None)?;
    let mut run = Progress {
        monitor,
        cfg,
        ck_path: out.join(CHECKPOINT_FILE),
        keys: keys_text(&restart_keys(cfg)),
        e0: e0.unwrap_or(last.energy),
        last_good_ck: restarted.then_some(t0),
        last_ck_wall: Instant::now(),
        cfl_warned: false,
        bar: spectral_bar(opts.progress && cfg.t_end > t0),
    };
    let announced = announce(cfg, t0, solver.backend_name().starts_with("cuda"));
    log::info!("{}", outputs_text(cfg, t0));
    let mut estimate = crate::estimate::Estimate::new("spectral run", announced);
    let start = Instant::now();
    let (mut steps, mut interrupted) = (0u64, None);
    let t_end = cfg.t_end;
    while solver.time() < t_end - TOL * t_end.abs().max(1.0) {
        // the measure of a signal's grace
        crate::stop::step_boundary();
        let info = run.step(solver.as_mut())?;
        steps += 1;
        last = outputs.at(solver.as_mut(), false, Some(last))?;
        run.check_energy(solver.as_ref(), &last)?;
        if let Some(sig) = run.checkpoint(solver.as_mut(), last)? {
            interrupted = Some(sig);
            break;
        }
        let t = solver.time();
        estimate.progress((t - t0) / (t_end - t0));
        run.bar
            .set_position(((t - t0) / (t_end - t0) * 1000.0) as u64);
        run.bar.set_message(format!(
            "t={t:.3} dt={:.2e} cfl={:.2} {:.3}s/step E={:.4e}",
            info.dt,
            info.cfl,
            start.elapsed().as_secs_f64() / steps as f64,
            last.energy
        ));
    }
    crate::stop::steps_ended();
    run.bar.finish_and_clear();
    let wall_s = start.elapsed().as_secs_f64();
    outputs.csv.sync_all().map_err(os(&outputs.energy_path))?;
    // the figures on a thread: a signal ends the wait for them
    let (o, e, nu) = (out.clone(), outputs.energy_path.clone(), cfg.nu);
    if let Some(r) = durable::unless_interrupted("the figures", move || plot_run(&o, &e, nu)) {
        r?;
    }
    Ok(RunSummary {
        steps,
        last,
        peak_dissipation: outputs.peak,
        wall_s,
        s_per_step: if steps > 0 {
            wall_s / steps as f64
        } else {
            0.0
        },
        out: out.clone(),
        backend: solver.backend_name(),
        interrupted,
    })
}

/// The solver (fresh, or from the checkpoint with the initial energy it carries) and the
/// prepared output directory with `config.toml`. Everything that can fail on input is checked
/// before anything is written.
fn open_run(cfg: &Config, opts: &RunOptions) -> Result<(Box<dyn Stepper>, Option<f64>), RunError> {
    let (solver, e0) = match &opts.restart {
        Some(path) => {
            let (s, e0) = resume(cfg, path)?;
            crate::stop::checkpoint_complete(format!("{} (the restart)", path.display()));
            (s, Some(e0))
        }
        None => (new_stepper(cfg, cfg.backend)?, None),
    };
    log::info!(
        "spectral solver: {}^3, {:?}, backend {}",
        cfg.n,
        cfg.dealias,
        solver.backend_name()
    );
    let out = &opts.out;
    durable::prepare_out(out, OutMode::of(opts.restart.is_some(), opts.overwrite))?;
    if let Some(ck) = &opts.restart {
        durable::check_restart_into(out, ck)?;
    }
    let cfg_text = toml::to_string(cfg).map_err(|e| {
        RunError::Config(ConfigError::Invalid {
            file: out.join("config.toml").display().to_string(),
            key: "(all)".into(),
            msg: e.to_string(),
        })
    })?;
    durable::write_atomic(&out.join("config.toml"), &[cfg_text.as_bytes()], 1)?;
    Ok((solver, e0))
}

/// The progress bar (per mille of the time to `t_end`), hidden unless `show`.
fn spectral_bar(show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(1000);
    b.set_style(
        ProgressStyle::with_template(
            "{bar:40.cyan/blue} {percent:>3}% {msg} [{elapsed_precise} < {eta_precise}]",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b
}

/// The time-scheduled outputs: rows of `energy.csv`, spectra, fields; the peak dissipation.
struct RunOutputs<'a> {
    cfg: &'a Config,
    out: &'a Path,
    energy_path: PathBuf,
    csv: std::fs::File,
    restarted: bool,
    /// `(dissipation, t)` of the largest dissipation among the rows.
    peak: (f64, f64),
}

impl RunOutputs<'_> {
    /// The outputs due at the solver's time. Statistics are computed when a row of energy.csv
    /// is due (and at the start and the end): on the GPU backend they need the state on the
    /// host; otherwise `last` is returned. `first`: the start of the run (a restart's start has
    /// its outputs already).
    fn at(
        &mut self,
        solver: &mut dyn Stepper,
        first: bool,
        last: Option<Stats>,
    ) -> Result<Stats, RunError> {
        let (cfg, out) = (self.cfg, self.out);
        let t = solver.time();
        let stats_due = match cfg.diagnostics_interval {
            None => true,
            Some(e) => periodic_hit(t, e) || hit(t, cfg.t_end),
        };
        let st = match last {
            Some(st) if !stats_due => st,
            _ => solver.stats()?,
        };
        let again = first && self.restarted;
        if stats_due && !again {
            writeln!(self.csv, "{}", st.csv_row())
                .and_then(|_| self.csv.flush())
                .map_err(os(&self.energy_path))?;
        }
        if st.dissipation > self.peak.0 {
            self.peak = (st.dissipation, t);
        }
        if !again && cfg.spectrum_times.iter().any(|&e| hit(t, e)) {
            let p = out.join(io::spectrum_file_name(t));
            io::write_spectrum_csv(&p, &solver.spectrum()?)?;
            log::info!("t = {t:.4}: spectrum -> {}", p.display());
        }
        if !again && cfg.field_times.iter().any(|&e| hit(t, e)) {
            write_fields(solver, cfg, out, t)?;
        }
        Ok(st)
    }
}

/// The velocity (and vorticity) fields at time `t` in the configured formats.
fn write_fields(
    solver: &mut dyn Stepper,
    cfg: &Config,
    out: &Path,
    t: f64,
) -> Result<(), RunError> {
    let vel = solver.velocity()?;
    let vort = if cfg.vorticity {
        Some(solver.vorticity()?)
    } else {
        None
    };
    for fmt in &cfg.field_formats {
        if fmt == "npy" {
            let p = out.join(format!("velocity_{}.npy", io::field_time_tag(t)));
            io::write_field_npy(&p, &vel)?;
            if let Some(w) = &vort {
                let p = out.join(format!("vorticity_{}.npy", io::field_time_tag(t)));
                io::write_field_npy(&p, w)?;
            }
        } else {
            let p = out.join(format!("fields_{}.vtk", io::field_time_tag(t)));
            let mut fl: Vec<(&str, &crate::VelocityField)> = vec![("velocity", &vel)];
            if let Some(w) = &vort {
                fl.push(("vorticity", w));
            }
            io::write_vtk(&p, &format!("vortex spectral t={t}"), &fl)?;
        }
    }
    log::info!("t = {t:.4}: fields written");
    Ok(())
}

/// The stepping state of a run: health thresholds, checkpoints, the progress bar.
struct Progress<'a> {
    cfg: &'a Config,
    /// The energy-rise check of a decaying flow (`crate::energy_check`).
    monitor: EnergyMonitor,
    ck_path: PathBuf,
    /// The configuration keys a restart must keep.
    keys: String,
    e0: f64,
    /// Time of the last checkpoint written for a state that passed the checks.
    last_good_ck: Option<f64>,
    last_ck_wall: Instant,
    cfl_warned: bool,
    bar: ProgressBar,
}

impl Progress<'_> {
    fn last_good(&self) -> String {
        match self.last_good_ck {
            Some(tc) => format!("{} (t = {tc})", self.ck_path.display()),
            None => "none written yet".into(),
        }
    }

    /// The energy-rise check on the statistics `last` when they are the current state's (a
    /// row of `energy.csv` or a checkpoint time): a rise above the limit stops the run naming
    /// the last good checkpoint, a smaller one is a warning.
    fn check_energy(&mut self, solver: &dyn Stepper, last: &Stats) -> Result<(), RunError> {
        if !hit(last.t, solver.time()) {
            return Ok(());
        }
        match self.monitor.observe(solver.steps(), last.t, last.energy) {
            Verdict::Unstable { message } => {
                self.bar.abandon();
                Err(RunError::EnergyRise {
                    message,
                    checkpoint: self.last_good(),
                })
            }
            Verdict::Rising { message, .. } => {
                log::warn!("{message}");
                Ok(())
            }
            Verdict::Decaying => Ok(()),
        }
    }

    /// One step up to the next output time, with the per-step health check: non-finite
    /// fields (refused by the step itself) and the CFL number against `[health]`.
    fn step(&mut self, solver: &mut dyn Stepper) -> Result<crate::solver::StepInfo, RunError> {
        let cfg = self.cfg;
        let t = solver.time();
        let info = match solver.step_limited(next_output(cfg, t) - t) {
            Ok(i) if solver.time().partial_cmp(&t) != Some(std::cmp::Ordering::Greater) => {
                self.bar.abandon();
                return Err(RunError::Solver(SolverError::Invalid(format!(
                    "step {} (t = {t}) did not advance the time: dt = {:e} is below the \
                     resolution of t; raise cfl or dt; last good checkpoint: {}",
                    solver.steps(),
                    i.dt,
                    self.last_good()
                ))));
            }
            Ok(i) => i,
            Err(e @ SolverError::NonFinite { .. }) => {
                self.bar.abandon();
                let checkpoint = self.last_good();
                log::error!("{e}; last good checkpoint: {checkpoint}");
                return Err(RunError::BlewUp {
                    source: e,
                    checkpoint,
                });
            }
            Err(e) => return Err(e.into()),
        };
        if info.cfl > cfg.health.cfl_limit {
            self.bar.abandon();
            return Err(RunError::Unstable {
                step: solver.steps(),
                t,
                cfl: info.cfl,
                limit: cfg.health.cfl_limit,
                checkpoint: self.last_good(),
            });
        }
        if info.cfl > cfg.health.cfl_warn && !self.cfl_warned {
            self.cfl_warned = true;
            log::warn!(
                "step {}: advective CFL {:.3} above health.cfl_warn = {} (warned once)",
                solver.steps(),
                info.cfl,
                cfg.health.cfl_warn
            );
        }
        Ok(info)
    }

    /// The checkpoint when due (interval, end, wall time, a signal), written only for a state
    /// whose energy passes the check (so the one kept after a blow-up is the last good one);
    /// returns the signal that stops the run.
    fn checkpoint(
        &mut self,
        solver: &mut dyn Stepper,
        last: Stats,
    ) -> Result<Option<usize>, RunError> {
        let cfg = self.cfg;
        let t = solver.time();
        let wall_due = cfg.checkpoint_wall_minutes > 0.0
            && self.last_ck_wall.elapsed().as_secs_f64() >= 60.0 * cfg.checkpoint_wall_minutes;
        let stop = durable::interrupted();
        let due = cfg.checkpoint_interval.is_some_and(|e| periodic_hit(t, e))
            || hit(t, cfg.t_end)
            || wall_due
            || stop.is_some();
        if !due {
            return Ok(None);
        }
        let st = if hit(last.t, t) {
            last
        } else {
            solver.stats()?
        };
        if !st.energy.is_finite() || st.energy > cfg.energy_growth_limit * self.e0 {
            self.bar.abandon();
            return Err(RunError::Unhealthy {
                t,
                energy: st.energy,
                e0: self.e0,
                limit: cfg.energy_growth_limit,
                checkpoint: self.last_good(),
            });
        }
        let steps_done = solver.steps();
        let mut ck = Checkpoint::from_state(
            solver.state()?,
            cfg.nu,
            cfg.dealias,
            t,
            steps_done,
            self.keys.clone(),
        );
        ck.initial_energy = self.e0;
        io::write_checkpoint(&self.ck_path, &ck, cfg.checkpoints_kept)?;
        crate::stop::checkpoint_complete(format!(
            "{} (t = {t}, step {steps_done})",
            self.ck_path.display()
        ));
        self.last_good_ck = Some(t);
        self.last_ck_wall = Instant::now();
        log::debug!("t = {t:.4}: checkpoint");
        if let Some(sig) = stop {
            log::warn!(
                "signal {sig}: stopped at t = {t} (step {steps_done}) after writing {}",
                self.ck_path.display()
            );
        }
        Ok(stop)
    }
}

/// The step count from `t0` to `t_end` and the estimated duration, logged before the run
/// (`durable::announce_steps`); returns the estimate in seconds. With a fixed `dt` the count
/// includes the steps shortened to land on the output times ([`landing_steps`]; announced with
/// a warning naming the schedule when it at least doubles the work); with `cfl` the step is
/// not known before the run, and [`crate::estimate::Estimate`] announces the duration measured
/// after the first steps. The model of a step: [`step_seconds`].
fn announce(cfg: &Config, t0: f64, gpu: bool) -> Option<f64> {
    let Some(dt) = cfg.dt else {
        log::info!(
            "spectral run: adaptive steps (cfl = {}): the duration is announced after the first \
             steps",
            cfg.cfl.unwrap_or(f64::NAN)
        );
        return None;
    };
    let plain = ((cfg.t_end - t0) / dt).ceil().max(0.0);
    let steps = landing_steps(cfg, t0, dt);
    if steps > 2.0 * plain.max(1.0) {
        log::warn!(
            "spectral run: the output times (diagnostics_interval, checkpoint_interval, \
             spectrum_times, field_times) are closer than dt = {dt} and shorten the steps to land \
             on them: {steps:.0} steps instead of {plain:.0}"
        );
    }
    let s = step_seconds(cfg.n, cfg.dealias, gpu, rayon::current_num_threads());
    Some(durable::announce_steps("spectral run", steps, s))
}

/// The size of each kind of output from `t0` on, announced before the first step: a field file
/// holds 3 f64 a point per field (velocity, and vorticity with `vorticity = true`) per format;
/// a checkpoint the spectral velocity, 3 complex f64 on `n^2 (n/2 + 1)` modes; a spectrum and
/// a row are small.
fn outputs_text(cfg: &Config, t0: f64) -> String {
    let n3 = (cfg.n as f64).powi(3);
    let after = |times: &[f64]| times.iter().filter(|&&t| t >= t0).count();
    let fields = after(&cfg.field_times);
    let per_field = 24.0 * n3 * (1.0 + f64::from(u8::from(cfg.vorticity)));
    let per_time = per_field * cfg.field_formats.len().max(1) as f64;
    let span = (cfg.t_end - t0).max(0.0);
    let rows = cfg
        .diagnostics_interval
        .map_or(2.0, |iv| (span / iv).floor() + 2.0);
    let checkpoint = 3.0 * 16.0 * (cfg.n as f64).powi(2) * (cfg.n / 2 + 1) as f64;
    format!(
        "spectral outputs: {fields} field time(s) of {} each ({}); checkpoints of {} each, {} \
         kept; {} spectra and about {rows:.0} rows of energy.csv (small)",
        crate::outdir::bytes_text(per_time),
        cfg.field_formats.join(" and "),
        crate::outdir::bytes_text(checkpoint),
        cfg.checkpoints_kept.max(1),
        after(&cfg.spectrum_times)
    )
}

/// Seconds of one RK4 step on an `n^3` grid: 4 stages of 9 transforms of the padded grid
/// `m^3` (about `2.5 m^3 log2(m^3)` flops each) at 5 Gflop/s per CPU thread, or 1.5 Tflop/s
/// plus 0.2 ms of launches on a GPU (fitted to BENCHMARKS.md: 16^3 to 256^3, 1 to 16 threads,
/// and 64^3 to 256^3 on an H100).
fn step_seconds(n: usize, dealias: crate::Dealias, gpu: bool, threads: usize) -> f64 {
    let m = match dealias {
        crate::Dealias::ThreeHalves => 1.5 * n as f64,
        crate::Dealias::TwoThirds => n as f64,
    };
    let flops = 36.0 * 2.5 * m.powi(3) * (m.powi(3)).log2();
    if gpu {
        2e-4 + flops / 1.5e12
    } else {
        flops / (5e9 * threads.max(1) as f64)
    }
}

/// The number of fixed steps `dt` from `t0` to `t_end` when every output time is landed on
/// ([`next_output`]): exact for up to a million output times, beyond that the plain count plus
/// one step per output time (an upper bound).
fn landing_steps(cfg: &Config, t0: f64, dt: f64) -> f64 {
    let span = cfg.t_end - t0;
    let plain = (span / dt).ceil().max(0.0);
    let periodic: f64 = [cfg.diagnostics_interval, cfg.checkpoint_interval]
        .into_iter()
        .flatten()
        .map(|e| span / e)
        .sum();
    let listed = cfg
        .spectrum_times
        .iter()
        .chain(&cfg.field_times)
        .filter(|&&e| e > t0 && e < cfg.t_end)
        .count() as f64;
    if periodic + listed > 1e6 {
        return plain + periodic + listed;
    }
    // the times landed on, in order: each gap takes ceil(gap / dt) steps
    let mut times: Vec<f64> = cfg
        .spectrum_times
        .iter()
        .chain(&cfg.field_times)
        .copied()
        .filter(|&e| e > t0 && e < cfg.t_end)
        .collect();
    for e in [cfg.diagnostics_interval, cfg.checkpoint_interval]
        .into_iter()
        .flatten()
    {
        let mut t = periodic_next(t0, e);
        while t < cfg.t_end {
            times.push(t);
            t += e;
        }
    }
    times.push(cfg.t_end);
    times.sort_by(f64::total_cmp);
    let (mut t, mut steps) = (t0, 0.0);
    for e in times {
        if e > t + TOL * e.abs().max(1.0) {
            steps += ((e - t) / dt * (1.0 - 1e-12)).ceil();
            t = e;
        }
    }
    steps
}

/// The next time the step must land on: the end, the next row, checkpoint, spectrum or field.
fn next_output(cfg: &Config, t: f64) -> f64 {
    let mut next = cfg.t_end;
    for e in [cfg.diagnostics_interval, cfg.checkpoint_interval]
        .into_iter()
        .flatten()
    {
        next = next.min(periodic_next(t, e));
    }
    for &e in cfg.spectrum_times.iter().chain(cfg.field_times.iter()) {
        if e > t + TOL * e.abs().max(1.0) {
            next = next.min(e);
        }
    }
    next
}

/// The figures from the files (so a restarted run plots its whole history): `energy.png` and
/// `spectra.png` (every `spectrum_*.csv`).
fn plot_run(out: &Path, energy_path: &Path, nu: f64) -> Result<(), RunError> {
    let h = read_history(energy_path)?;
    let history = crate::plot::History {
        label: "spectral",
        rows: &h,
        nu,
    };
    if let Err(e) = crate::plot::plot_energy(&out.join("energy.png"), &history, None) {
        log::warn!("{e}");
    }
    let spectra = io::read_spectra(out)?;
    if !spectra.is_empty() {
        let s = crate::plot::Spectra {
            label: "spectral",
            spectra: &spectra,
        };
        if let Err(e) = crate::plot::plot_spectra(&out.join("spectra.png"), &s, None, nu) {
            log::warn!("{e}");
        }
    }
    Ok(())
}

/// The rows `(t, energy, enstrophy)` of an `energy.csv` ([`Stats::CSV_HEADER`]).
pub fn read_history(energy_path: &Path) -> Result<Vec<(f64, f64, f64)>, RunError> {
    Ok(io::read_csv(energy_path)?
        .into_iter()
        .filter(|r| r.len() >= 3)
        .map(|r| (r[0], r[1], r[2]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step model against the measured ms per step of BENCHMARKS.md (`vortex bench
    /// spectral`; 16^3 from a run on 2 cores): within 3x each.
    #[test]
    fn the_step_model_is_within_3x_of_the_measured() {
        use crate::Dealias::{ThreeHalves as T, TwoThirds as W};
        let cases = [
            (16, T, false, 1, 2.0),
            (64, T, false, 2, 119.0),
            (128, T, false, 2, 1664.0),
            (256, T, false, 2, 12263.0),
            (64, W, false, 2, 32.3),
            (128, W, false, 2, 384.0),
            (64, T, false, 16, 26.3),
            (128, T, false, 16, 195.0),
            (256, T, false, 16, 1876.0),
            (64, T, true, 16, 1.23),
            (128, T, true, 16, 6.55),
            (256, T, true, 16, 57.2),
            (64, W, true, 16, 0.60),
            (128, W, true, 16, 2.28),
            (256, W, true, 16, 17.2),
        ];
        for (n, rule, gpu, threads, ms) in cases {
            let model = 1e3 * step_seconds(n, rule, gpu, threads);
            let off = (model / ms).max(ms / model);
            assert!(
                off < 3.0,
                "{n}^3 {rule:?} gpu {gpu} {threads} threads: {model} ms, measured {ms}"
            );
        }
    }
}
