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
//!
//! Submodules: `run_loop` (the run's state and its steps), `schedule` (when an output is due),
//! `outputs` (the CSV files, snapshots, spectra and plots of rank 0); this module holds the entry
//! point [`run`], the summary and the simulation a run builds.

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

mod outputs;
mod run_loop;
mod schedule;
pub use outputs::{MIN_ENERGY, PVD_FILE};
use run_loop::{Destination, RunLoop};

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
    // name the key that sets the count: the lattice side of a periodic run, the spacing of a
    // free one
    let key = match (cfg.domain.periodic, cfg.lattice_n()) {
        (true, Some(n)) => format!("initial.n = {n}: "),
        _ => format!("initial.spacing = {:e}: ", cfg.lattice_h()),
    };
    match n_particles {
        Some(n) => health::check_memory(
            &format!("{key}a run of about {n:.3e} particles ({BYTES_PER_PARTICLE} B each)"),
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
        if let Some(engine) = at_sources {
            sim.rhs.use_at_sources(engine)?;
        }
        Ok(Simulation::Pieces(Box::new(sim)))
    })
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

impl<'c, B: Backend + 'c> LocalParticles for DistSimulation<'c, B> {
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
