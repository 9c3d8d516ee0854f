//! The `vortex run CONFIG.toml [--out DIR] [--restart FILE]` command: a whole simulation with its
//! outputs. Everything lives here; the binary only parses the command line and calls [`run`].
//!
//! Output directory (default `runs/out/<config stem>`):
//! * `config.toml`: the configuration as run;
//! * `diagnostics.csv`: one row per diagnostics step ([`crate::diagnostics::CSV_HEADER`]);
//! * `spectrum_STEP.csv` (periodic), `particles_STEP.vtk` and `grid_STEP.vtk` (snapshots);
//! * `checkpoint.bin` (atomic; every `output.checkpoint_every` steps and at the end);
//! * `timing.csv`: one row per step, the wall seconds of its phases (FMM evaluation and its
//!   communication, redistribution, update, RBF re-interpolation, diagnostics, I/O, the rest),
//!   each the largest over the ranks ([`TIMING_HEADER`]); their shares are logged at the end;
//! * `energy.png`, `spectra.png` (periodic, `output.plots`).
//!
//! Under MPI ([`run_on`] with any [`domain::Comm`]) every rank steps its own particles (see
//! [`crate::parallel`]) and rank 0 writes every file; the outputs do not depend on the number of
//! ranks beyond round-off, and a checkpoint written with `R` ranks continues with any other
//! number. A restart continues from a checkpoint bit for bit (same number of ranks); rows of
//! `diagnostics.csv` and `timing.csv` from the checkpoint's step on are replaced. A blow-up (non-finite state, energy above
//! `output.energy_growth_limit` times its initial value) stops the run with an error naming the
//! step; the last checkpoint, written before, is kept.

use crate::checkpoint::{self, Checkpoint};
use crate::config::Config;
use crate::diagnostics::{self, Diagnostics, RowTimes, CSV_HEADER};
use crate::error::{Error, Result};
use crate::parallel::{agree, check_same, DistSimulation};
use domain::{Comm, ReduceOp, SelfComm};
use fmm::Backend;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

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
}

impl RunSummary {
    pub fn report(&self) -> String {
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

/// Entry point of `vortex run` for the CPU backend: reads and checks the configuration, runs it
/// and logs a summary. `evaluation.backend = "cuda"` is refused here (this crate does not build GPU
/// backends): the binary reads the configuration with [`Config::from_file`], builds the backend that
/// `config.evaluation.backend` names and calls [`run_loaded`].
pub fn run(config_path: &Path, out: Option<&Path>, restart: Option<&Path>) -> Result<()> {
    let config = Config::from_file(config_path)?;
    if config.evaluation.backend == fmm::BackendChoice::Cuda {
        return Err(Error::Config {
            file: config_path.display().to_string(),
            key: "evaluation.backend".into(),
            msg: "\"cuda\" needs the binary's GPU dispatch (method::run::run_loaded with a gpu::CudaBackend); this entry point runs the CPU backend only".into(),
        });
    }
    run_loaded(config, config_path, out, restart, fmm::CpuBackend).map(|_| ())
}

/// [`run_loaded_on`] in one process.
pub fn run_loaded<B: Backend>(
    config: Config,
    config_path: &Path,
    out: Option<&Path>,
    restart: Option<&Path>,
    backend: B,
) -> Result<RunSummary> {
    run_loaded_on(
        &SelfComm,
        config,
        config_path,
        out,
        restart,
        backend,
        None,
        &RunOptions::default(),
    )
}

/// Runs an already read configuration on the ranks of `comm` with this rank's `backend`
/// (whatever `config.evaluation.backend` resolved to in the caller) and, when given, the
/// engine the planner chose for the evaluations of the particles at themselves
/// (`at_sources`, e.g. the GPU uniform grid), into `out` or `runs/out/<config stem>`; rank 0
/// logs a summary that names the backend and the number of ranks, and the shares of the
/// phases. Collective.
#[allow(clippy::too_many_arguments)]
pub fn run_loaded_on<'c, B: Backend>(
    comm: &'c dyn Comm,
    config: Config,
    config_path: &Path,
    out: Option<&Path>,
    restart: Option<&Path>,
    backend: B,
    at_sources: Option<Box<dyn fmm::Evaluator + 'c>>,
    opts: &RunOptions,
) -> Result<RunSummary> {
    let out = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_out(config_path));
    let name = match &at_sources {
        Some(e) => format!(
            "{} ({} for the particles at themselves)",
            backend.name(),
            e.describe()
        ),
        None => backend.name(),
    };
    let root = comm.rank() == 0;
    if root {
        log::info!("backend: {name}, {} rank(s)", comm.size());
    }
    let summary = run_on(comm, config, &out, restart, backend, at_sources, opts)?;
    if root {
        let line = format!(
            "{} [backend {name}, {} rank(s)]",
            summary.report(),
            comm.size()
        );
        log::info!("{line}");
        log::info!("{}", summary.phases.report());
        eprintln!("{line}");
        eprintln!("{}", summary.phases.report());
    }
    Ok(summary)
}

fn csv_rows_before(path: &Path, step: u64) -> Result<Vec<String>> {
    let text = match std::fs::read_to_string(path) {
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

/// Runs a configuration with any backend in one process, writing into `out`.
pub fn run_config<B: Backend>(
    config: Config,
    out: &Path,
    restart: Option<&Path>,
    backend: B,
) -> Result<RunSummary> {
    run_on(
        &SelfComm,
        config,
        out,
        restart,
        backend,
        None,
        &RunOptions::default(),
    )
}

/// Files that only rank 0 writes.
struct Outputs {
    csv: std::fs::File,
    csv_path: PathBuf,
    timing: std::fs::File,
    timing_path: PathBuf,
}

fn open_outputs(out: &Path, restart: bool, start_step: u64) -> Result<Outputs> {
    // diagnostics rows are taken at a step, timing rows after it (steps up to the restart's kept)
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
    let (csv, csv_path) = open("diagnostics.csv", CSV_HEADER, start_step)?;
    let (timing, timing_path) = open("timing.csv", TIMING_HEADER, start_step + 1)?;
    Ok(Outputs {
        csv,
        csv_path,
        timing,
        timing_path,
    })
}

fn setup_out(out: &Path, config: &Config) -> Result<()> {
    std::fs::create_dir_all(out).map_err(Error::io(out))?;
    let cfg_path = out.join("config.toml");
    let cfg_text = toml::to_string(config).map_err(|e| Error::Other(format!("config: {e}")))?;
    std::fs::write(&cfg_path, cfg_text).map_err(Error::io(&cfg_path))
}

/// Runs a configuration on the ranks of `comm` (each with its own `backend`), writing into `out`
/// from rank 0. Every rank returns the same outcome; the summary's diagnostics are rank 0's.
/// Collective.
pub fn run_on<'c, B: Backend>(
    comm: &'c dyn Comm,
    config: Config,
    out: &Path,
    restart: Option<&Path>,
    backend: B,
    at_sources: Option<Box<dyn fmm::Evaluator + 'c>>,
    opts: &RunOptions,
) -> Result<RunSummary> {
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
    let wall0 = Instant::now();
    let r = if root {
        setup_out(out, &config)
    } else {
        Ok(())
    };
    agree(comm, r)?;

    let (mut sim, mut e0) = match restart {
        Some(p) => {
            let ck = if root {
                checkpoint::read_for(p, &config).map(Some)
            } else {
                Ok(None)
            };
            let ck = agree(comm, ck)?;
            let (state, e0) = match ck {
                Some(ck) => {
                    log::info!("restart from {} at step {}", p.display(), ck.state.step);
                    (Some(ck.state), Some(ck.initial_energy))
                }
                None => (None, None),
            };
            (DistSimulation::resume(comm, config, backend, state)?, e0)
        }
        None => {
            let sim = DistSimulation::new(comm, config, backend)?;
            if let Some(r) = &sim.initial_report {
                log::info!("initial RBF solve: {}", r.summary());
            }
            (sim, None)
        }
    };
    sim.rhs.at_sources = at_sources;
    let cfg = sim.config.clone();
    let n_steps = cfg.steps();
    let start_step = sim.state.step;
    let stop = opts
        .max_steps
        .map_or(n_steps, |k| n_steps.min(start_step + k))
        .max(start_step);
    let grid = cfg
        .periodic()
        .map(|_| cfg.output.grid.or(cfg.lattice_n()).unwrap_or(16));
    let box_l = cfg.domain.box_length;

    let outputs = if root {
        open_outputs(out, restart.is_some(), start_step).map(Some)
    } else {
        Ok(None)
    };
    let mut outputs = agree(comm, outputs)?;

    let ck_path = out.join("checkpoint.bin");
    let mut last_ck = String::from("(none written yet)");
    let bar = if cfg.output.progress && root {
        let b = ProgressBar::new(stop);
        b.set_style(
            ProgressStyle::with_template(
                "{bar:40.cyan/blue} step {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.set_position(start_step);
        b
    } else {
        ProgressBar::hidden()
    };

    let every = |k: u64, s: u64| k > 0 && s % k == 0;
    let mut spectra: Vec<(f64, Vec<(f64, f64)>)> = vec![];
    let mut last_diag = Diagnostics::default();
    let mut totals = PhaseTotals::default();
    let mut since_row = PhaseTotals::default();
    let loop_start = Instant::now();
    loop {
        let it0 = Instant::now();
        // f_n may be evaluated for the diagnostics before the step: counted in this step's FMM
        let phases0 = sim.phases;
        let step = sim.state.step;
        let last = step >= stop;
        let diag_due = (step == start_step && restart.is_none())
            || last
            || every(cfg.output.diagnostics_every, step);
        let snap_due =
            cfg.output.snapshot_every > 0 && (every(cfg.output.snapshot_every, step) || last);
        let (mut t_diag, mut t_io) = (0.0, 0.0);
        if diag_due || snap_due {
            let f = sim.derivatives()?.clone();
            if diag_due {
                let td = Instant::now();
                let d = diagnostics::compute_distributed(&mut sim, &f, grid);
                let d = agree(comm, d)?;
                t_diag += td.elapsed().as_secs_f64();
                let tio = Instant::now();
                let r = match (d, outputs.as_mut()) {
                    (Some(d), Some(o)) => {
                        let e_ref = *e0.get_or_insert(d.energy);
                        if !d.energy.is_finite()
                            || d.energy.abs() > cfg.output.energy_growth_limit * e_ref.abs()
                        {
                            bar.abandon();
                            Err(Error::BlowUp {
                                step,
                                t: d.t,
                                what: format!(
                                    "energy {:.4e} against {:.4e} initially (limit: {} times)",
                                    d.energy, e_ref, cfg.output.energy_growth_limit
                                ),
                                last_checkpoint: last_ck.clone(),
                            })
                        } else {
                            let nst = since_row.steps.max(1) as f64;
                            let rt = RowTimes {
                                s_per_step: since_row.step / nst,
                                fmm: since_row.fmm / nst,
                                rbf: since_row.rbf / nst,
                                update: since_row.update / nst,
                                diagnostics: since_row.diagnostics / nst,
                                io: since_row.io / nst,
                            };
                            since_row = PhaseTotals::default();
                            let msg = format!(
                                "step {step}/{stop} t = {:.4} E = {:.6e} Z = {:.6e} N = {} | {:.3} s/step (fmm {:.3}, rbf {:.3}, diag {:.3})",
                                d.t, d.energy, d.enstrophy, d.n_particles, rt.s_per_step, rt.fmm, rt.rbf, rt.diagnostics
                            );
                            if bar.is_hidden() {
                                let done = (step - start_step) as f64;
                                let el = loop_start.elapsed().as_secs_f64();
                                let eta = if done > 0.0 {
                                    el / done * (stop - step) as f64
                                } else {
                                    f64::NAN
                                };
                                log::info!("{msg} ETA {eta:.0} s");
                            } else {
                                bar.println(msg);
                            }
                            write_diag_row(
                                o,
                                &d,
                                &rt,
                                out,
                                step,
                                box_l,
                                &cfg,
                                &mut spectra,
                                snap_due,
                            )
                            .map(|_| d)
                        }
                    }
                    _ => Ok(Diagnostics::default()),
                };
                let d = agree(comm, r)?;
                last_diag = Diagnostics {
                    spectrum: None,
                    grid_velocity: None,
                    ..d
                };
                t_io += tio.elapsed().as_secs_f64();
            }
            if snap_due {
                let tio = Instant::now();
                let g = sim.gather(&[&f.velocity]);
                let r = match g {
                    Some((p, v)) => diagnostics::write_vtk_particles(
                        &out.join(format!("particles_{step:06}.vtk")),
                        &p,
                        Some(&v[0]),
                        &format!("vortex method, step {step}, t = {}", sim.t()),
                    ),
                    None => Ok(()),
                };
                agree(comm, r)?;
                t_io += tio.elapsed().as_secs_f64();
            }
        }
        if last {
            let mut v = [t_diag, t_io];
            comm.allreduce_f64(&mut v, ReduceOp::Max);
            totals.diagnostics += v[0];
            totals.io += v[1];
            break;
        }
        let report = sim.step()?;
        if let Some(r) = &report.reinterpolation {
            if root {
                log::info!("step {}: re-interpolated, {}", sim.state.step, r.summary());
            }
        }
        sim.check_finite(&last_ck).inspect_err(|_| bar.abandon())?;
        let s = sim.state.step;
        if every(cfg.output.checkpoint_every, s) || s == stop {
            let tio = Instant::now();
            let state = sim.gather_state();
            let r = match state {
                Some(state) => checkpoint::write(
                    &ck_path,
                    &Checkpoint {
                        fingerprint: cfg.fingerprint(),
                        initial_energy: e0.unwrap_or(f64::NAN),
                        state,
                    },
                ),
                None => Ok(()),
            };
            agree(comm, r)?;
            last_ck = format!("{} (step {s})", ck_path.display());
            t_io += tio.elapsed().as_secs_f64();
        }
        // this step's phases, the largest over the ranks
        let ph = sim.phases;
        let d = |a: f64, b: f64| (a - b).max(0.0);
        let mut row = [
            it0.elapsed().as_secs_f64(),
            d(ph.fmm, phases0.fmm),
            d(ph.fmm_comm, phases0.fmm_comm),
            d(ph.redistribute, phases0.redistribute),
            d(ph.update, phases0.update),
            d(ph.rbf, phases0.rbf),
            t_diag,
            t_io,
            0.0,
        ];
        row[8] = (row[0] - row[1] - row[3] - row[4] - row[5] - row[6] - row[7]).max(0.0);
        comm.allreduce_f64(&mut row, ReduceOp::Max);
        let pt = PhaseTotals::from_values(&row);
        totals.add(&pt);
        since_row.add(&pt);
        if let Some(o) = outputs.as_mut() {
            let line = format!(
                "{s},{:.10e},{}\n",
                sim.t(),
                row.iter()
                    .map(|v| format!("{v:.4e}"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let r = o
                .timing
                .write_all(line.as_bytes())
                .map_err(Error::io(&o.timing_path));
            if let Err(e) = r {
                log::warn!("timing.csv: {e}");
            }
        }
        bar.set_position(s);
        bar.set_message(format!("t = {:.4}", sim.t()));
    }
    bar.finish_and_clear();
    if let Some(o) = outputs.as_mut() {
        let _ = o.timing.flush();
    }

    if root && cfg.output.plots && cfg.domain.periodic {
        if let Some(o) = &outputs {
            plot(&o.csv_path, &out.join("energy.png"), &cfg, &spectra, out);
        }
    }
    let steps = sim.state.step - start_step;
    let wall_s = wall0.elapsed().as_secs_f64();
    Ok(RunSummary {
        steps,
        t: sim.t(),
        wall_s,
        s_per_step: loop_start.elapsed().as_secs_f64() / steps.max(1) as f64,
        n_particles: sim.n_global,
        last: last_diag,
        out: out.to_path_buf(),
        reinterpolations: sim.state.reinterpolations,
        phases: totals,
        ranks: comm.size(),
    })
}

#[allow(clippy::too_many_arguments)]
fn write_diag_row(
    o: &mut Outputs,
    d: &Diagnostics,
    rt: &RowTimes,
    out: &Path,
    step: u64,
    box_l: f64,
    cfg: &Config,
    spectra: &mut Vec<(f64, Vec<(f64, f64)>)>,
    snap_due: bool,
) -> Result<()> {
    writeln!(o.csv, "{}", d.csv_row(rt)).map_err(Error::io(&o.csv_path))?;
    o.csv.flush().map_err(Error::io(&o.csv_path))?;
    if let (Some(spec), true) = (&d.spectrum, cfg.output.spectra) {
        diagnostics::write_spectrum(&out.join(format!("spectrum_{step:06}.csv")), spec)?;
        spectra.push((d.t, spec.clone()));
    }
    if snap_due {
        if let Some(v) = &d.grid_velocity {
            diagnostics::write_vtk_grid(
                &out.join(format!("grid_{step:06}.vtk")),
                v,
                box_l,
                &format!("vortex method, step {step}, t = {}", d.t),
            )?;
        }
    }
    Ok(())
}

fn plot(
    csv_path: &Path,
    energy_png: &Path,
    cfg: &Config,
    spectra: &[(f64, Vec<(f64, f64)>)],
    out: &Path,
) {
    let rows: Vec<(f64, f64, f64)> = match std::fs::read_to_string(csv_path) {
        Ok(text) => text
            .lines()
            .skip(1)
            .filter_map(|l| {
                let v: Vec<f64> = l
                    .split(',')
                    .take(3)
                    .filter_map(|x| x.parse().ok())
                    .collect();
                (v.len() == 3).then(|| (v[0], v[1], 2.0 * cfg.nu * v[2]))
            })
            .collect(),
        Err(e) => {
            log::warn!("energy plot: {}: {e}", csv_path.display());
            return;
        }
    };
    if let Err(e) = spectral::plot::plot_energy(energy_png, &rows) {
        log::warn!("energy plot: {e}");
    }
    if !spectra.is_empty() {
        if let Err(e) = spectral::plot::plot_spectra(&out.join("spectra.png"), spectra) {
            log::warn!("spectra plot: {e}");
        }
    }
}
