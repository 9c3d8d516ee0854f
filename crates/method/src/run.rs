//! The `vortex run CONFIG.toml [--out DIR] [--restart FILE]` command: a whole simulation with its
//! outputs. Everything lives here; the binary only parses the command line and calls [`run`].
//!
//! Output directory (default `runs/out/<config stem>`):
//! * `config.toml`: the configuration as run;
//! * `diagnostics.csv`: one row per diagnostics step ([`crate::diagnostics::CSV_HEADER`]);
//! * `spectrum_TTTTT.TTTT.csv` (periodic; named by the time, as `vortex spectral` names them),
//!   `grid_STEP.vtk` and the particle snapshots
//!   `particles_STEP.vtp` (binary XML VTK; `particles.pvd` lists them with their times for
//!   ParaView; on several ranks `particles_STEP.pvtp` and one piece per rank) or `particles_STEP.vtk` (`output.snapshot_format = "vtk"`, legacy ASCII);
//! * `checkpoint.bin` on one rank, `checkpoint.manifest` and one piece per rank
//!   `checkpoint-sSTEP-wSERIAL-pRANK.bin` on several ([`crate::checkpoint`]: checksummed,
//!   atomic, written in parallel, the last `output.checkpoints_kept` kept as `checkpoint.bin.1`
//!   or `checkpoint.manifest.1` ...; every `output.checkpoint_every` steps, every
//!   `output.checkpoint_wall_minutes`, at the end and when a signal stops the run; each after a
//!   diagnostics row of its step that passed the checks);
//! * `run.json` (written by the binary: what produced the directory);
//! * `timing.csv`: one row per step, the wall seconds of its phases (FMM evaluation and its
//!   communication, redistribution, update, RBF re-interpolation, diagnostics, I/O, the rest),
//!   each the largest over the ranks ([`TIMING_HEADER`]); their shares are logged at the end;
//! * `energy.png`, `spectra.png` (periodic, `output.plots`).
//!
//! Under MPI ([`run`] with any [`vortex_domain::Comm`]) every rank steps its own particles (see
//! [`crate::parallel`]) and rank 0 writes every file but the particle snapshots (each rank
//! writes its piece `particles_STEP_pRANK.vtp`, rank 0 the `particles_STEP.pvtp`) and the
//! checkpoints' pieces; the outputs do not depend on the number of
//! ranks beyond round-off, and a checkpoint written with `R` ranks continues with any other
//! number (`--restart` takes the checkpoint, the manifest or the output directory). A restart
//! continues from a checkpoint bit for bit (same number of ranks); rows of
//! `diagnostics.csv` and `timing.csv` after the checkpoint's step are replaced. A blow-up
//! (non-finite state or field, energy above `output.energy_growth_limit` times its initial value,
//! an energy that rises in the decaying flow by more than `output.energy_rise_limit`
//! ([`crate::energy_check`]; a smaller rise, `output.energy_rise_warn`, is a warning), a step
//! that fails the stability check of [`crate::health`]) stops the run with an error naming the
//! step; the last checkpoint, written for a state that passed, is kept. A non-empty output
//! directory is refused unless [`RunOptions::overwrite`] or a restart (`vortex_spectral::durable`).
//! SIGINT/SIGTERM/SIGUSR1 (the flag of `vortex_spectral::durable`) end the run after the current step
//! with a checkpoint ([`RunSummary::interrupted`]).

use crate::checkpoint::{read_restart, CheckpointWriter, Restart};
use crate::collective::LocalState;
use crate::config::{Config, SnapshotFormat};
use crate::diagnostics::{self, Diagnostics, RowTimes, CSV_HEADER};
use crate::energy_check::{EnergyMonitor, Verdict as EnergyVerdict};
use crate::error::{Error, Result};
use crate::health::{self, Verdict};
use crate::parallel::{agree, check_same, DistSimulation};
use crate::simulator::Simulator;
use crate::vtp;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use vortex_domain::{Comm, ReduceOp};
use vortex_fmm::Backend;
use vortex_spectral::durable::{self, OutMode};

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub steps: u64,
    pub t: f64,
    pub wall_s: f64,
    pub s_per_step: f64,
    pub n_particles: usize,
    pub last: Diagnostics,
    pub out: PathBuf,
    pub reinterpolations: u64,
    /// Seconds of each phase summed over the steps (each step's largest over the ranks), and
    /// the number of ranks.
    pub phases: PhaseTotals,
    pub ranks: usize,
    /// The signal that stopped the run early (after its checkpoint), if any.
    pub interrupted: Option<usize>,
    /// [`Backend::name`] of the backend that ran (names the GPU).
    pub backend: String,
}

/// Phase seconds summed over the steps of a run (each step: the largest over the ranks).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseTotals {
    pub step: f64,
    pub fmm: f64,
    pub fmm_comm: f64,
    pub redistribute: f64,
    pub update: f64,
    pub rbf: f64,
    pub diagnostics: f64,
    pub io: f64,
    pub other: f64,
    pub steps: u64,
}

/// Columns of `timing.csv` (seconds; each the largest over the ranks).
pub const TIMING_HEADER: &str =
    "step,t,s_step,fmm,fmm_comm,redistribute,update,rbf,diagnostics,io,other";

impl PhaseTotals {
    /// The mean seconds per step of these totals (the timing columns of a diagnostics row).
    fn per_step(&self) -> RowTimes {
        let nst = self.steps.max(1) as f64;
        RowTimes {
            s_per_step: self.step / nst,
            fmm: self.fmm / nst,
            rbf: self.rbf / nst,
            update: self.update / nst,
            diagnostics: self.diagnostics / nst,
            io: self.io / nst,
        }
    }

    fn values(&self) -> [f64; 9] {
        [
            self.step,
            self.fmm,
            self.fmm_comm,
            self.redistribute,
            self.update,
            self.rbf,
            self.diagnostics,
            self.io,
            self.other,
        ]
    }

    fn from_values(v: &[f64]) -> Self {
        Self {
            step: v[0],
            fmm: v[1],
            fmm_comm: v[2],
            redistribute: v[3],
            update: v[4],
            rbf: v[5],
            diagnostics: v[6],
            io: v[7],
            other: v[8],
            steps: 1,
        }
    }

    fn add(&mut self, o: &PhaseTotals) {
        let mut v = self.values();
        for (a, b) in v.iter_mut().zip(o.values()) {
            *a += b;
        }
        *self = Self {
            steps: self.steps + o.steps,
            ..Self::from_values(&v)
        };
    }

    /// One line: mean seconds per step and the share of each phase.
    pub fn report(&self) -> String {
        let n = self.steps.max(1) as f64;
        let tot = self.step.max(f64::MIN_POSITIVE);
        let part = |name: &str, v: f64| format!("{name} {:.4} s ({:.1} %)", v / n, 100.0 * v / tot);
        format!(
            "per step (largest over the ranks) {:.4} s: {}, of which communication {}; {}; {}; {}; {}; {}; {}",
            self.step / n,
            part("FMM", self.fmm),
            part("", self.fmm_comm).trim_start(),
            part("redistribution", self.redistribute),
            part("update", self.update),
            part("RBF", self.rbf),
            part("diagnostics", self.diagnostics),
            part("I/O", self.io),
            part("other", self.other)
        )
    }
}

/// Options of a run beyond the configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    /// Stop after this many steps (from the start or the restart), checkpoint included.
    pub max_steps: Option<u64>,
    /// Replace the files of an earlier run in the output directory (otherwise a non-empty one
    /// is refused unless restarting into it).
    pub overwrite: bool,
}

/// Bytes per particle of a run, all buffers counted (state, two derivative sets, the FMM's
/// sources, tree and fields, the gathered copy for re-interpolation), rounded up.
pub const BYTES_PER_PARTICLE: f64 = 800.0;

/// Refuses a configuration whose particles cannot fit in the available memory, before any
/// allocation: periodic kinds have `n^3` particles (plus the spectral initial field), free
/// ones about the volume of their vorticity over `h^3`.
fn check_run_memory(cfg: &Config) -> Result<()> {
    let n_particles = if cfg.domain.periodic {
        cfg.lattice_n().map(|n| (n as f64).powi(3))
    } else {
        let h = cfg.lattice_h();
        let i = &cfg.initial;
        match (i.radius, i.core) {
            (Some(r), Some(c)) => Some(
                2.0 * std::f64::consts::PI * r * std::f64::consts::PI * (5.0 * c).powi(2)
                    / h.powi(3),
            ),
            _ => None,
        }
    };
    // the diagnostics grid of a periodic run: velocity, vorticity and the transforms' copies
    if let (true, Some(g)) = (cfg.domain.periodic, cfg.output.grid) {
        health::check_memory(
            &format!("output.grid = {g} (about 200 B per point)"),
            (g as f64).powi(3) * 200.0,
        )
        .map_err(Error::Memory)?;
    }
    match n_particles {
        Some(n) => health::check_memory(
            &format!("a run of about {n:.3e} particles ({BYTES_PER_PARTICLE} B each)"),
            n * BYTES_PER_PARTICLE,
        )
        .map_err(Error::Memory),
        None => Ok(()),
    }
}

impl RunSummary {
    pub fn report(&self) -> String {
        if self.steps == 0 {
            return format!(
                "no step taken (--steps 0): the state at t = {:.4} is in the outputs (diagnostics \
                 row, checkpoint); {} particles, energy {:.6e}, enstrophy {:.6e}; outputs in {}",
                self.t,
                self.n_particles,
                self.last.energy,
                self.last.enstrophy,
                self.out.display()
            );
        }
        format!(
            "{} steps to t = {:.4} in {:.1} s ({:.3} s/step), {} particles, {} re-interpolations; \
             energy {:.6e}, enstrophy {:.6e}; outputs in {}",
            self.steps,
            self.t,
            self.wall_s,
            self.s_per_step,
            self.n_particles,
            self.reinterpolations,
            self.last.energy,
            self.last.enstrophy,
            self.out.display()
        )
    }
}

/// Default output directory of a configuration: `runs/out/<file stem>`.
pub fn default_out(config_path: &Path) -> PathBuf {
    let stem = config_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "vortex".into());
    PathBuf::from("runs/out").join(stem)
}

/// The [`Build`] of a [`DistSimulation`] (the state on the host ranks) with this rank's
/// `backend` and, when given, the planner's engine of the particles at themselves
/// (`at_sources`, e.g. the GPU uniform grid; the adaptive plan on `backend` otherwise).
pub fn host_build<'c, B: Backend + 'c>(
    comm: &'c dyn Comm,
    backend: B,
    at_sources: Option<Box<dyn vortex_fmm::Evaluator + 'c>>,
) -> Build<'c> {
    Box::new(move |config, start| {
        let mut sim = match start {
            Some(state) => DistSimulation::resume(comm, config, backend, state)?,
            None => DistSimulation::new(comm, config, backend)?,
        };
        sim.rhs.at_sources = at_sources;
        Ok(Simulation::Pieces(Box::new(sim)))
    })
}

fn csv_rows_before(path: &Path, step: u64) -> Result<Vec<String>> {
    let text = match vortex_spectral::inputs::read_own_text(path, "CSV of the run") {
        Ok(t) => t,
        Err(_) => return Ok(vec![]),
    };
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    let col = header.split(',').position(|h| h == "step");
    let Some(col) = col else { return Ok(vec![]) };
    Ok(lines
        .filter(|l| {
            l.split(',')
                .nth(col)
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|s| s < step)
        })
        .map(str::to_string)
        .collect())
}

/// `(step, t, energy)` of every row of a `diagnostics.csv` (none if it cannot be read).
fn energy_rows(path: &Path) -> Vec<(u64, f64, f64)> {
    let Ok(text) = vortex_spectral::inputs::read_own_text(path, "CSV of the run") else {
        return vec![];
    };
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name);
    let (Some(cs), Some(ct), Some(ce)) = (col("step"), col("t"), col("energy")) else {
        return vec![];
    };
    lines
        .filter_map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            Some((
                v.get(cs)?.parse().ok()?,
                v.get(ct)?.parse().ok()?,
                v.get(ce)?.parse().ok()?,
            ))
        })
        .collect()
}

/// Files that only rank 0 writes.
struct Outputs {
    csv: std::fs::File,
    csv_path: PathBuf,
    timing: std::fs::File,
    timing_path: PathBuf,
}

fn open_outputs(out: &Path, restart: bool, start_step: u64) -> Result<Outputs> {
    // diagnostics rows are taken at a step, timing rows after it; a checkpoint is written after
    // the diagnostics of its step, so both keep the rows up to the restart's step
    let open = |name: &str, header: &str, before: u64| -> Result<(std::fs::File, PathBuf)> {
        let path = out.join(name);
        let keep = if restart {
            csv_rows_before(&path, before)?
        } else {
            vec![]
        };
        let mut f = std::fs::File::create(&path).map_err(Error::io(&path))?;
        let mut head = format!("{header}\n");
        for r in &keep {
            head.push_str(r);
            head.push('\n');
        }
        f.write_all(head.as_bytes()).map_err(Error::io(&path))?;
        Ok((f, path))
    };
    let (csv, csv_path) = open("diagnostics.csv", CSV_HEADER, start_step + 1)?;
    let (timing, timing_path) = open("timing.csv", TIMING_HEADER, start_step + 1)?;
    Ok(Outputs {
        csv,
        csv_path,
        timing,
        timing_path,
    })
}

/// Prepares the output directory for `mode`; a restart only into the directory of its
/// checkpoint `restart` (the file read). Rank 0.
fn setup_out(out: &Path, config: &Config, mode: OutMode, restart: Option<&Path>) -> Result<()> {
    durable::prepare_out(out, mode).map_err(|e| Error::OutDir(e.to_string()))?;
    if let Some(ck) = restart {
        durable::check_restart_into(out, ck).map_err(|e| Error::OutDir(e.to_string()))?;
    }
    let cfg_path = out.join("config.toml");
    let cfg_text = toml::to_string(config).map_err(|e| Error::Other(format!("config: {e}")))?;
    durable::write_atomic(&cfg_path, &[cfg_text.as_bytes()], 1)
        .map_err(|e| Error::OutDir(e.to_string()))
}

/// How a run's simulation is made on every rank: from the configuration (a fresh start,
/// `None`) or from a checkpoint (`Some(part)`: this rank's part of its state, the global ids
/// `n r / R .. n (r + 1) / R`, whatever number of ranks wrote it).
pub type Build<'c> = Box<dyn FnOnce(Config, Option<LocalState>) -> Result<Simulation<'c>> + 'c>;

/// The simulation a run drives: one whose ranks hold their own particles on the host (each
/// rank writes its piece of a particle snapshot, nothing is gathered) or any other
/// [`Simulator`] (snapshots gathered on rank 0). Dereferences to the [`Simulator`].
pub enum Simulation<'c> {
    Pieces(Box<dyn LocalParticles + 'c>),
    Gathered(Box<dyn Simulator + 'c>),
}

/// A [`Simulator`] whose ranks can hand out their own particles.
pub trait LocalParticles: Simulator {
    /// This rank's particles and their velocities, in the same order. Collective (the
    /// velocity may have to be evaluated).
    fn local_particles(&mut self) -> Result<(&crate::Particles, Vec<[f64; 3]>)>;
}

impl<B: Backend> LocalParticles for DistSimulation<'_, B> {
    fn local_particles(&mut self) -> Result<(&crate::Particles, Vec<[f64; 3]>)> {
        let v = self.derivatives()?.velocity.clone();
        Ok((&self.state.particles, v))
    }
}

impl<'c> std::ops::Deref for Simulation<'c> {
    type Target = dyn Simulator + 'c;
    fn deref(&self) -> &Self::Target {
        match self {
            Simulation::Pieces(s) => &**s,
            Simulation::Gathered(s) => &**s,
        }
    }
}

impl std::ops::DerefMut for Simulation<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            Simulation::Pieces(s) => &mut **s,
            Simulation::Gathered(s) => &mut **s,
        }
    }
}

/// Runs a configuration on the ranks of `comm` with the simulation that `build` makes, writing
/// into `out` from rank 0. Every rank returns the same outcome; the summary's diagnostics are
/// rank 0's. Collective.
///
/// The pipeline of every step, each a named phase of [`RunLoop`]: the health verdict of the
/// step about to be taken, what is due (signals and the wall-time interval agreed over the
/// ranks), the diagnostics row with its energy checks, the particle snapshot, the checkpoint,
/// then the step itself with its timing row and progress.
pub fn run<'c>(
    comm: &'c dyn Comm,
    config: Config,
    out: &Path,
    restart: Option<&Path>,
    opts: &RunOptions,
    build: Build<'c>,
) -> Result<RunSummary> {
    let summary = drive(comm, config, out, restart, opts, build)?;
    if comm.rank() == 0 {
        let line = format!(
            "{} [backend {}, {} rank(s)]",
            summary.report(),
            summary.backend,
            comm.size()
        );
        log::info!("{line}");
        if summary.steps > 0 {
            log::info!("{}", summary.phases.report());
        }
    }
    Ok(summary)
}

/// The loop of [`run`].
fn drive<'c>(
    comm: &'c dyn Comm,
    config: Config,
    out: &Path,
    restart: Option<&Path>,
    opts: &RunOptions,
    build: Build<'c>,
) -> Result<RunSummary> {
    let wall0 = Instant::now();
    let dest = Destination { out, restart, opts };
    let mut run = RunLoop::start(comm, config, &dest, build)?;
    if let Err(e) = run.steps() {
        // a checkpoint still being written holds a state that passed the checks: once it is
        // on disk it is the last good one the error must name
        return Err(match run.writer.finish(comm) {
            Ok(Some(done)) => e.with_last_checkpoint(done),
            _ => e,
        });
    }
    Ok(run.finish(wall0))
}

impl RunLoop<'_> {
    /// The steps of [`run`] until the end, the `--steps` limit or a signal.
    fn steps(&mut self) -> Result<()> {
        let comm = self.comm;
        let run = self;
        loop {
            let it0 = Instant::now();
            // f_n may be evaluated for the diagnostics before the step: counted in this step's FMM
            let phases0 = run.sim.phases();
            let step = run.sim.step_index();
            run.check_health(step)?;
            let due = run.due(step);
            let mut io = PhaseIo::default();
            if due.written {
                run.finish_checkpoint(&mut io)?;
            }
            if due.diagnostics {
                run.diagnostics(step, due.snapshot, &mut io)?;
            }
            if due.snapshot {
                let t = Instant::now();
                write_snapshot(&mut run.sim, comm, &run.out, &run.cfg, &mut run.pvd)?;
                io.io += t.elapsed().as_secs_f64();
            }
            if due.checkpoint {
                run.checkpoint(due.last, &mut io)?;
            }
            run.interrupted = due.signal;
            if let (Some(sig), 0) = (due.signal, comm.rank()) {
                log::warn!(
                "signal {sig}: stopped at step {step} (t = {}) after writing {}; continue with \
                 --restart {}",
                run.sim.t(),
                run.last_ck,
                run.ck_path.display()
            );
            }
            if due.last {
                let mut v = [io.diagnostics, io.io];
                comm.allreduce_f64(&mut v, ReduceOp::Max);
                run.totals.diagnostics += v[0];
                run.totals.io += v[1];
                break;
            }
            run.advance(it0, phases0, io)?;
        }
        Ok(())
    }
}

/// Seconds of a step's diagnostics and output (files, checkpoints, snapshots) on this rank.
#[derive(Clone, Copy, Debug, Default)]
struct PhaseIo {
    diagnostics: f64,
    io: f64,
}

/// What the step about to be taken writes, and whether the run ends there.
#[derive(Clone, Copy, Debug)]
struct Due {
    /// A signal that stops the run (agreed over the ranks).
    signal: Option<usize>,
    last: bool,
    diagnostics: bool,
    snapshot: bool,
    checkpoint: bool,
    /// The checkpoint being written is on disk on every rank (its manifest is due).
    written: bool,
}

/// Where a run writes and from what it starts.
#[derive(Clone, Copy)]
struct Destination<'a> {
    out: &'a Path,
    restart: Option<&'a Path>,
    opts: &'a RunOptions,
}

/// The state of a run between its phases (see [`run`]).
struct RunLoop<'c> {
    comm: &'c dyn Comm,
    sim: Simulation<'c>,
    cfg: Config,
    out: PathBuf,
    restarted: bool,
    start_step: u64,
    stop: u64,
    /// Points per side of the diagnostics grid (periodic).
    grid: Option<usize>,
    /// The spacing of the stability measures.
    h: f64,
    schedules: Schedules,
    /// Rank 0's CSV files.
    outputs: Option<Outputs>,
    monitor: EnergyMonitor,
    e0: Option<f64>,
    ck_path: PathBuf,
    last_ck: String,
    last_ck_wall: Instant,
    writer: CheckpointWriter,
    warned: bool,
    bar: ProgressBar,
    pvd: Vec<(f64, String)>,
    spectra: Vec<(f64, Vec<(f64, f64)>)>,
    last_diag: Diagnostics,
    totals: PhaseTotals,
    since_row: PhaseTotals,
    loop_start: Instant,
    interrupted: Option<usize>,
    backend_name: String,
    /// The announced duration, measured as the steps go (rank 0).
    estimate: Option<vortex_spectral::estimate::Estimate>,
}

impl<'c> RunLoop<'c> {
    /// The output directory, the simulation (fresh or from the checkpoint), the CSV files, the
    /// energy history kept from before a restart and the progress bar. Collective.
    fn start(
        comm: &'c dyn Comm,
        config: Config,
        dest: &Destination,
        build: Build<'c>,
    ) -> Result<Self> {
        let Destination { out, restart, opts } = *dest;
        let root = comm.rank() == 0;
        check_same(
            comm,
            "options",
            &format!(
                "{} t_end={:e} out={} restart={:?} {opts:?}",
                config.fingerprint(),
                config.t_end,
                out.display(),
                restart
            ),
        )?;
        // the checkpoint is read and checked before anything is written
        let ck = read_restart(comm, &config, restart)?;
        let source = ck.as_ref().map(|r| r.source.path().to_path_buf());
        let mode = OutMode::of(restart.is_some(), opts.overwrite);
        let r = if root {
            setup_out(out, &config, mode, source.as_deref()).and_then(|_| check_run_memory(&config))
        } else {
            Ok(())
        };
        agree(comm, r)?;
        let writer = CheckpointWriter::new(comm, out, config.output.checkpoints_kept)?;
        let (mut sim, e0) = open_simulation(config, ck, build)?;
        if let Some(r) = sim.take_initial_report() {
            log::info!("initial RBF solve: {}", r.summary());
        }
        let cfg = sim.config().clone();
        let start_step = sim.step_index();
        let stop = opts
            .max_steps
            .map_or(cfg.steps(), |k| cfg.steps().min(start_step + k))
            .max(start_step);
        // the whole run to t_end (also under --steps: a mistyped dt shows at once), measured
        // again after the first steps
        let estimate = root.then(|| {
            let steps = cfg.steps().saturating_sub(start_step);
            let model = announce(&cfg, steps, sim.n_global(), &sim.describe());
            vortex_spectral::estimate::Estimate::new(
                &format!("the run to t_end = {}", cfg.t_end),
                Some(model),
            )
        });
        let outputs = if root {
            open_outputs(out, restart.is_some(), start_step).map(Some)
        } else {
            Ok(None)
        };
        let outputs = agree(comm, outputs)?;
        let mut monitor = EnergyMonitor::new(cfg.energy_tolerance());
        if root && restart.is_some() {
            // the rows kept from before the restart continue the energy history
            for (step, t, e) in energy_rows(&out.join("diagnostics.csv")) {
                if let EnergyVerdict::Unstable { message } = monitor.observe(step, t, e) {
                    log::warn!("kept row of diagnostics.csv: {message}");
                }
            }
        }
        let last_ck = match &source {
            Some(p) => format!("{} (step {start_step}, the restart)", p.display()),
            None => String::from("(none written yet)"),
        };
        // the snapshots' time series: those of the earlier run up to the restart's step are kept
        let pvd = vtp::read_pvd(&out.join(PVD_FILE))
            .into_iter()
            .filter(|(_, f)| snapshot_step(f).is_some_and(|s| s <= start_step && restart.is_some()))
            .collect();
        Ok(RunLoop {
            comm,
            grid: cfg
                .periodic()
                .map(|_| cfg.output.grid.or(cfg.lattice_n()).unwrap_or(16)),
            h: if cfg.lattice_h().is_finite() {
                cfg.lattice_h()
            } else {
                sim.smallest_core()
            },
            schedules: Schedules::new(&cfg),
            bar: progress_bar(cfg.output.progress && root, start_step, stop),
            backend_name: sim.describe(),
            sim,
            cfg,
            out: out.to_path_buf(),
            restarted: restart.is_some(),
            start_step,
            stop,
            outputs,
            monitor,
            e0,
            ck_path: writer.path(comm.size()),
            last_ck,
            last_ck_wall: Instant::now(),
            writer,
            warned: false,
            pvd,
            spectra: vec![],
            last_diag: Diagnostics::default(),
            totals: PhaseTotals::default(),
            since_row: PhaseTotals::default(),
            loop_start: Instant::now(),
            interrupted: None,
            estimate,
        })
    }

    /// The stability verdict of the step about to be taken (its f_n is the step's own): an
    /// error above the limits, a warning (once) above the warning thresholds.
    fn check_health(&mut self, step: u64) -> Result<()> {
        let [max_speed, max_rate] = self
            .sim
            .step_measures()
            .inspect_err(|_| self.bar.abandon())?;
        let m = health::StepMeasures {
            dt: self.cfg.dt,
            h: self.h,
            max_speed,
            max_rate,
        };
        match health::check_step(&m, &self.cfg.health) {
            Verdict::Refuse(what) => {
                self.bar.abandon();
                return Err(Error::Unstable {
                    step,
                    t: self.sim.t(),
                    what,
                    last_checkpoint: self.last_ck.clone(),
                });
            }
            Verdict::Warn(what) if self.comm.rank() == 0 && !self.warned => {
                self.warned = true;
                log::warn!("step {step}: {what} (warned once)");
            }
            _ => {}
        }
        Ok(())
    }

    /// What is due at `step`: a signal or the wall-time interval (agreed over the ranks), the
    /// end, the schedules. Collective.
    fn due(&self, step: u64) -> Due {
        let o = &self.cfg.output;
        let mut flags = [
            vortex_spectral::durable::interrupted().unwrap_or(0) as f64,
            (o.checkpoint_wall_minutes > 0.0
                && self.last_ck_wall.elapsed().as_secs_f64() >= 60.0 * o.checkpoint_wall_minutes)
                as u8 as f64,
            self.writer.busy() as u8 as f64,
        ];
        self.comm.allreduce_f64(&mut flags, ReduceOp::Max);
        let signal = (flags[0] > 0.0).then_some(flags[0] as usize);
        let last = step >= self.stop || signal.is_some();
        let (s, start) = (&self.schedules, self.start_step);
        // a checkpoint is written only after the diagnostics of its state passed the checks
        let checkpoint =
            (step > start || !self.restarted) && (last || s.checkpoint.due(step) || flags[1] > 0.0);
        // a restart's own step has its row already (written before its checkpoint)
        let diagnostics = (step == start && !self.restarted)
            || (step > start && (last || checkpoint || s.diagnostics.due(step)));
        Due {
            signal,
            last,
            diagnostics,
            snapshot: s.snapshot.any() && (s.snapshot.due(step) || last),
            checkpoint,
            written: self.writer.active() && flags[2] == 0.0,
        }
    }

    /// The diagnostics of the current state: energy checks, the progress line, the row of
    /// `diagnostics.csv` with its spectrum (and the grid snapshot when `snapshot`); the
    /// outcome agreed over the ranks. Collective.
    fn diagnostics(&mut self, step: u64, snapshot: bool, io: &mut PhaseIo) -> Result<()> {
        let td = Instant::now();
        let d = self.sim.diagnostics(self.grid, snapshot)?;
        io.diagnostics += td.elapsed().as_secs_f64();
        let tio = Instant::now();
        let r = match (d, self.outputs.as_mut()) {
            (Some(d), Some(o)) => check_energy(
                &mut self.monitor,
                &mut self.e0,
                &d,
                step,
                &self.cfg,
                &self.last_ck,
            )
            .inspect_err(|_| self.bar.abandon())
            .and_then(|()| {
                let rt = self.since_row.per_step();
                self.since_row = PhaseTotals::default();
                let progress = (self.start_step, self.stop, self.loop_start.elapsed());
                report_row(&self.bar, &d, &rt, step, progress);
                let row = DiagRow {
                    d: &d,
                    rt: &rt,
                    step,
                    snapshot,
                };
                write_diag_row(o, &row, &self.out, &self.cfg, &mut self.spectra).map(|_| d)
            }),
            _ => Ok(Diagnostics::default()),
        };
        let d = agree(self.comm, r)?;
        self.last_diag = Diagnostics {
            spectrum: None,
            grid_velocity: None,
            ..d
        };
        io.io += tio.elapsed().as_secs_f64();
        Ok(())
    }

    /// Waits for the checkpoint being written (with pieces: every rank's, then rank 0 writes
    /// the manifest); it becomes the last good one. Collective.
    fn finish_checkpoint(&mut self, io: &mut PhaseIo) -> Result<()> {
        let tio = Instant::now();
        if let Some(done) = self.writer.finish(self.comm)? {
            self.last_ck = done;
        }
        io.io += tio.elapsed().as_secs_f64();
        Ok(())
    }

    /// The checkpoint of the current state, written by a thread of every rank (the previous
    /// one finished first, [`CheckpointWriter`]); at the end of the run it is on disk before
    /// the outcome is reported. Collective.
    fn checkpoint(&mut self, last: bool, io: &mut PhaseIo) -> Result<()> {
        self.finish_checkpoint(io)?;
        let tio = Instant::now();
        let e0 = self.e0.unwrap_or(f64::NAN);
        self.writer.start(self.comm, &mut *self.sim, e0)?;
        io.io += tio.elapsed().as_secs_f64();
        if last {
            self.finish_checkpoint(io)?;
        }
        self.last_ck_wall = Instant::now();
        Ok(())
    }

    /// One step: the update (and re-interpolation), the finite-state check, the step's row of
    /// `timing.csv` (each phase the largest over the ranks) and the progress bar. Collective.
    fn advance(
        &mut self,
        it0: Instant,
        phases0: crate::parallel::Phases,
        io: PhaseIo,
    ) -> Result<()> {
        let report = self.sim.step()?;
        if let (Some(r), 0) = (&report.reinterpolation, self.comm.rank()) {
            log::info!(
                "step {}: re-interpolated, {}",
                self.sim.step_index(),
                r.summary()
            );
        }
        self.sim
            .check_finite(&self.last_ck)
            .inspect_err(|_| self.bar.abandon())?;
        let s = self.sim.step_index();
        if let Some(e) = self.estimate.as_mut() {
            let total = self.cfg.steps().saturating_sub(self.start_step).max(1);
            e.progress((s - self.start_step) as f64 / total as f64);
        }
        let ph = self.sim.phases();
        let d = |a: f64, b: f64| (a - b).max(0.0);
        let mut row = [
            it0.elapsed().as_secs_f64(),
            d(ph.fmm, phases0.fmm),
            d(ph.fmm_comm, phases0.fmm_comm),
            d(ph.redistribute, phases0.redistribute),
            d(ph.update, phases0.update),
            d(ph.rbf, phases0.rbf),
            io.diagnostics,
            io.io,
            0.0,
        ];
        row[8] = (row[0] - row[1] - row[3] - row[4] - row[5] - row[6] - row[7]).max(0.0);
        self.comm.allreduce_f64(&mut row, ReduceOp::Max);
        let pt = PhaseTotals::from_values(&row);
        self.totals.add(&pt);
        self.since_row.add(&pt);
        if let Some(o) = self.outputs.as_mut() {
            let values: Vec<String> = row.iter().map(|v| format!("{v:.4e}")).collect();
            let line = format!("{s},{:.10e},{}\n", self.sim.t(), values.join(","));
            let r = o
                .timing
                .write_all(line.as_bytes())
                .map_err(Error::io(&o.timing_path));
            if let Err(e) = r {
                log::warn!("timing.csv: {e}");
            }
        }
        self.bar.set_position(s);
        self.bar.set_message(format!("t = {:.4}", self.sim.t()));
        Ok(())
    }

    /// The end: files flushed, plots (rank 0), the summary.
    fn finish(mut self, wall0: Instant) -> RunSummary {
        self.bar.finish_and_clear();
        if let Some(o) = self.outputs.as_mut() {
            let _ = o.timing.flush();
        }
        let cfg = &self.cfg;
        if let (Some(o), true) = (&self.outputs, cfg.output.plots && cfg.domain.periodic) {
            // on a thread: a signal ends the wait for the figures
            let (csv, png) = (o.csv_path.clone(), self.out.join("energy.png"));
            let (cfg, spectra, out) = (cfg.clone(), self.spectra.clone(), self.out.clone());
            durable::unless_interrupted("the figures", move || {
                plot(&csv, &png, &cfg, &spectra, &out)
            });
        }
        let steps = self.sim.step_index() - self.start_step;
        RunSummary {
            steps,
            t: self.sim.t(),
            wall_s: wall0.elapsed().as_secs_f64(),
            s_per_step: self.loop_start.elapsed().as_secs_f64() / steps.max(1) as f64,
            n_particles: self.sim.n_global(),
            last: self.last_diag,
            out: self.out,
            reinterpolations: self.sim.reinterpolations(),
            phases: self.totals,
            ranks: self.comm.size(),
            interrupted: self.interrupted,
            backend: self.backend_name,
        }
    }
}

/// Logs the step count of the run and its estimated duration before the first step (a warning
/// for a long one, `vortex_spectral::durable::announce_steps`); returns the estimate in
/// seconds. A rough model of the step (FMM, two evaluations per AB2/Heun step,
/// re-interpolation, diagnostics), fitted to runs on a 2-core CPU (Taylor-Green 8^3 and 16^3,
/// a ring of 55,000 particles: 0.6 to 8 s a step) and to the 256^3 step on an H100
/// (BENCHMARKS.md): 4e-4 s per particle and thread on the CPU, plus 1 thread-second a step in a
/// periodic box (the image sums and the diagnostics grid); 6e-8 s per particle on a GPU. The
/// run measures itself after the first steps and announces again when this is off
/// ([`vortex_spectral::estimate::Estimate`]).
fn announce(cfg: &Config, steps: u64, n: usize, backend: &str) -> f64 {
    let s_per_step = if backend.contains("cuda") || backend.contains("GPU") {
        1e-2 + n as f64 * 6e-8
    } else {
        let threads = rayon::current_num_threads() as f64;
        let fixed = if cfg.domain.periodic { 1.0 } else { 0.01 };
        (fixed + n as f64 * 4e-4) / threads
    };
    durable::announce_steps(
        &format!("the run to t_end = {} with dt = {}", cfg.t_end, cfg.dt),
        steps as f64,
        s_per_step,
    )
}

/// The simulation of a run on every rank, fresh or from the checkpoint of [`read_restart`],
/// with the initial energy the checkpoint carries. Collective.
fn open_simulation<'c>(
    config: Config,
    restart: Option<Restart>,
    build: Build<'c>,
) -> Result<(Simulation<'c>, Option<f64>)> {
    match restart {
        None => Ok((build(config, None)?, None)),
        Some(r) => Ok((build(config, Some(r.local))?, Some(r.initial_energy))),
    }
}

/// The progress bar of rank 0 (hidden elsewhere and when `show` is false).
fn progress_bar(show: bool, start_step: u64, stop: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(stop);
    b.set_style(
        ProgressStyle::with_template(
            "{bar:40.cyan/blue} step {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_position(start_step);
    b
}

/// When an output is due: every `every` steps (0: not by steps) and at the first step at or
/// after each multiple of the simulation-time `interval` (`t = step dt`).
#[derive(Clone, Copy, Debug)]
struct Schedule {
    every: u64,
    interval: Option<f64>,
    dt: f64,
}

impl Schedule {
    fn any(&self) -> bool {
        self.every > 0 || self.interval.is_some()
    }

    fn due(&self, step: u64) -> bool {
        // the multiples of the interval reached by a step, a relative 1e-9 below each counted
        let reached = |iv: f64, s: u64| (s as f64 * self.dt / iv * (1.0 + 1e-9)).floor();
        (self.every > 0 && step % self.every == 0)
            || self
                .interval
                .is_some_and(|iv| step == 0 || reached(iv, step) > reached(iv, step - 1))
    }
}

/// The schedules of the outputs of `vortex run` (`output.*_every` in steps, `output.*_interval`
/// in simulation time).
struct Schedules {
    diagnostics: Schedule,
    snapshot: Schedule,
    checkpoint: Schedule,
}

impl Schedules {
    fn new(cfg: &Config) -> Self {
        let o = &cfg.output;
        let s = |every, interval| Schedule {
            every,
            interval,
            dt: cfg.dt,
        };
        Schedules {
            diagnostics: s(o.diagnostics_every, o.diagnostics_interval),
            snapshot: s(o.snapshot_every, o.snapshot_interval),
            checkpoint: s(o.checkpoint_every, o.checkpoint_interval),
        }
    }
}

/// The smallest initial energy a run accepts: below it the diagnostics' products (enstrophy,
/// spectra, their ratios) underflow.
pub const MIN_ENERGY: f64 = 1e-30;

/// The energy checks of a diagnostics row: a decaying flow's energy may not rise
/// ([`EnergyMonitor`]; a warning, then an error) nor exceed `energy_growth_limit` times the
/// initial energy `e0` (set from the first row).
fn check_energy(
    monitor: &mut EnergyMonitor,
    e0: &mut Option<f64>,
    d: &Diagnostics,
    step: u64,
    cfg: &Config,
    last_ck: &str,
) -> Result<()> {
    if e0.is_none() && !(d.energy >= MIN_ENERGY && d.energy.is_finite()) {
        return Err(Error::Other(format!(
            "the initial field's energy is {:e} (step {step}): not a finite value of at least \
             {MIN_ENERGY:e}, so every diagnostic of the run would be 0 or NaN; check the scale \
             of [initial] (circulation, strength, energy, re_lambda with nu)",
            d.energy
        )));
    }
    let e_ref = *e0.get_or_insert(d.energy);
    let blow_up = |what: String| Error::BlowUp {
        step,
        t: d.t,
        what,
        last_checkpoint: last_ck.to_string(),
    };
    match monitor.observe(step, d.t, d.energy) {
        EnergyVerdict::Unstable { message } => return Err(blow_up(message)),
        EnergyVerdict::Rising { message, .. } => log::warn!("{message}"),
        _ => {}
    }
    if d.energy.abs() > cfg.output.energy_growth_limit * e_ref.abs() {
        return Err(blow_up(format!(
            "energy {:.4e} against {:.4e} initially (limit: {} times)",
            d.energy, e_ref, cfg.output.energy_growth_limit
        )));
    }
    Ok(())
}

/// The progress line of a diagnostics row (on the bar, or logged with the ETA when the bar is
/// hidden); `progress` = (first step of the run, last step, time since the loop started).
fn report_row(
    bar: &ProgressBar,
    d: &Diagnostics,
    rt: &RowTimes,
    step: u64,
    progress: (u64, u64, std::time::Duration),
) {
    let (start_step, stop, elapsed) = progress;
    let msg = format!(
        "step {step}/{stop} t = {:.4} E = {:.6e} Z = {:.6e} N = {} | {:.3} s/step (fmm {:.3}, rbf {:.3}, diag {:.3})",
        d.t, d.energy, d.enstrophy, d.n_particles, rt.s_per_step, rt.fmm, rt.rbf, rt.diagnostics
    );
    if bar.is_hidden() {
        let done = (step - start_step) as f64;
        let eta = if done > 0.0 {
            elapsed.as_secs_f64() / done * (stop - step) as f64
        } else {
            f64::NAN
        };
        log::info!("{msg} ETA {eta:.0} s");
    } else {
        bar.println(msg);
    }
}

/// The time series of the `.vtp` particle snapshots.
pub const PVD_FILE: &str = "particles.pvd";

fn snapshot_step(file: &str) -> Option<u64> {
    let stem = file.strip_prefix("particles_")?;
    stem.strip_suffix(".vtp")
        .or_else(|| stem.strip_suffix(".pvtp"))?
        .parse()
        .ok()
}

/// The particle snapshot of the current step in the configured format. In `.vtp` with several
/// ranks that hold their own particles, every rank writes its piece `particles_STEP_pRANK.vtp`
/// and rank 0 the `particles_STEP.pvtp` that names the pieces (nothing is gathered); otherwise
/// the particles gathered on rank 0 go to one `particles_STEP.vtp` (or `.vtk`). Rank 0 lists a
/// `.vtp`/`.pvtp` in `particles.pvd` with its time. Collective.
fn write_snapshot(
    sim: &mut Simulation,
    comm: &dyn Comm,
    out: &Path,
    cfg: &Config,
    pvd: &mut Vec<(f64, String)>,
) -> Result<()> {
    let (step, t, ranks) = (sim.step_index(), sim.t(), comm.size());
    let list = |pvd: &mut Vec<(f64, String)>, file: String| {
        pvd.retain(|(_, f)| snapshot_step(f) != Some(step));
        pvd.push((t, file));
        vtp::write_pvd(&out.join(PVD_FILE), pvd)
    };
    match (&mut *sim, cfg.output.snapshot_format) {
        (Simulation::Pieces(s), SnapshotFormat::Vtp) if ranks > 1 => {
            let piece = |r: usize| format!("particles_{step:06}_p{r:04}.vtp");
            let r = s.local_particles().and_then(|(p, v)| {
                vtp::write_particles(&out.join(piece(comm.rank())), p, Some(&v))
            });
            agree(comm, r)?;
            let r = if comm.rank() == 0 {
                let file = format!("particles_{step:06}.pvtp");
                let pieces: Vec<String> = (0..ranks).map(piece).collect();
                vtp::write_pvtp(&out.join(&file), &pieces, true).and_then(|_| list(pvd, file))
            } else {
                Ok(())
            };
            agree(comm, r)
        }
        _ => {
            let r = match sim.snapshot()? {
                Some((p, v)) => match cfg.output.snapshot_format {
                    SnapshotFormat::Vtk => diagnostics::write_vtk_particles(
                        &out.join(format!("particles_{step:06}.vtk")),
                        &p,
                        Some(&v),
                        &format!("vortex method, step {step}, t = {t}"),
                    ),
                    SnapshotFormat::Vtp => {
                        let file = format!("particles_{step:06}.vtp");
                        vtp::write_particles(&out.join(&file), &p, Some(&v))
                            .and_then(|_| list(pvd, file))
                    }
                },
                None => Ok(()),
            };
            agree(comm, r)
        }
    }
}

/// One row of `diagnostics.csv` to write: the values, the phase times since the previous row,
/// the step, and whether the step writes snapshots (then also the grid velocity).
struct DiagRow<'a> {
    d: &'a Diagnostics,
    rt: &'a RowTimes,
    step: u64,
    snapshot: bool,
}

/// Writes a diagnostics row, its spectrum (`spectrum_TTTTT.TTTT.csv`) and, on snapshot steps,
/// the grid velocity (`grid_STEP.vtk`).
fn write_diag_row(
    o: &mut Outputs,
    row: &DiagRow,
    out: &Path,
    cfg: &Config,
    spectra: &mut Vec<(f64, Vec<(f64, f64)>)>,
) -> Result<()> {
    let (d, step) = (row.d, row.step);
    writeln!(o.csv, "{}", d.csv_row(row.rt)).map_err(Error::io(&o.csv_path))?;
    o.csv.flush().map_err(Error::io(&o.csv_path))?;
    if let (Some(spec), true) = (&d.spectrum, cfg.output.spectra) {
        let name = vortex_spectral::io::spectrum_file_name_with(d.t, spectrum_decimals(cfg.dt));
        diagnostics::write_spectrum(&out.join(name), spec)?;
        spectra.push((d.t, spec.clone()));
    }
    if row.snapshot {
        if let Some(v) = &d.grid_velocity {
            diagnostics::write_vtk_grid(
                &out.join(format!("grid_{step:06}.vtk")),
                v,
                cfg.domain.box_length,
                &format!("vortex method, step {step}, t = {}", d.t),
            )?;
        }
    }
    Ok(())
}

/// Decimals of the time in the spectra's file names: 4 (`spectrum_TTTTT.TTTT.csv`, as
/// `vortex spectral` names them) unless steps of `dt` are that close; then enough that two
/// rows, at least one step apart, never share a name.
fn spectrum_decimals(dt: f64) -> usize {
    if dt > 1e-4 * (1.0 + 1e-9) {
        4
    } else {
        (-dt.log10()).floor() as usize + 1
    }
}

fn plot(
    csv_path: &Path,
    energy_png: &Path,
    cfg: &Config,
    spectra: &[(f64, Vec<(f64, f64)>)],
    out: &Path,
) {
    use vortex_spectral::plot::{History, Spectra};
    let rows = match diagnostics::read_history(csv_path) {
        Ok(rows) => rows,
        Err(e) => {
            log::warn!("energy plot: {e}");
            return;
        }
    };
    let label = crate::comparison::VORTEX;
    let h = History {
        label,
        rows: &rows,
        nu: cfg.nu,
    };
    if let Err(e) = vortex_spectral::plot::plot_energy(energy_png, &h, None) {
        log::warn!("energy plot: {e}");
    }
    if !spectra.is_empty() {
        let s = Spectra { label, spectra };
        let png = out.join("spectra.png");
        if let Err(e) = vortex_spectral::plot::plot_spectra(&png, &s, None, cfg.nu) {
            log::warn!("spectra plot: {e}");
        }
    }
}
