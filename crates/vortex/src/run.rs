//! The `vortex run CONFIG.toml [--out DIR] [--restart FILE]` command: a whole simulation with its
//! outputs. Everything lives here; the binary only parses the command line and calls [`run`].
//!
//! Output directory (default `runs/out/<config stem>`):
//! * `config.toml`: the configuration as run;
//! * `diagnostics.csv`: one row per diagnostics step ([`crate::diagnostics::CSV_HEADER`]);
//! * `spectrum_STEP.csv` (periodic), `particles_STEP.vtk` and `grid_STEP.vtk` (snapshots);
//! * `checkpoint.bin` (atomic; every `output.checkpoint_every` steps and at the end);
//! * `energy.png`, `spectra.png` (periodic, `output.plots`).
//!
//! A restart continues from a checkpoint bit for bit; rows of `diagnostics.csv` from the
//! checkpoint's step on are replaced. A blow-up (non-finite state, energy above
//! `output.energy_growth_limit` times its initial value) stops the run with an error naming the
//! step; the last checkpoint, written before, is kept.

use crate::checkpoint::{self, Checkpoint};
use crate::config::Config;
use crate::diagnostics::{self, Diagnostics, RowTimes, CSV_HEADER};
use crate::error::{Error, Result};
use crate::stepping::Simulation;
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
    if config.evaluation.backend == "cuda" {
        return Err(Error::Config {
            file: config_path.display().to_string(),
            key: "evaluation.backend".into(),
            msg: "\"cuda\" needs the binary's GPU dispatch (method::run::run_loaded with a gpu::CudaBackend); this entry point runs the CPU backend only".into(),
        });
    }
    run_loaded(config, config_path, out, restart, fmm::CpuBackend).map(|_| ())
}

/// Runs an already read configuration on `backend` (whatever `config.evaluation.backend` resolved
/// to in the caller), into `out` or `runs/out/<config stem>`, and logs a summary that names the
/// backend.
pub fn run_loaded<B: Backend>(
    config: Config,
    config_path: &Path,
    out: Option<&Path>,
    restart: Option<&Path>,
    backend: B,
) -> Result<RunSummary> {
    let out = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_out(config_path));
    let name = backend.name();
    log::info!("backend: {name}");
    let summary = run_config(config, &out, restart, backend)?;
    log::info!("{} [backend {name}]", summary.report());
    eprintln!("{} [backend {name}]", summary.report());
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

/// Runs a configuration with any backend, writing into `out`.
pub fn run_config<B: Backend>(
    config: Config,
    out: &Path,
    restart: Option<&Path>,
    backend: B,
) -> Result<RunSummary> {
    std::fs::create_dir_all(out).map_err(Error::io(out))?;
    let cfg_path = out.join("config.toml");
    let cfg_text = toml::to_string(&config).map_err(|e| Error::Other(format!("config: {e}")))?;
    std::fs::write(&cfg_path, cfg_text).map_err(Error::io(&cfg_path))?;

    let wall0 = Instant::now();
    let (mut sim, mut e0) = match restart {
        Some(p) => {
            let ck = checkpoint::read_for(p, &config)?;
            log::info!("restart from {} at step {}", p.display(), ck.state.step);
            (
                Simulation::resume(config, backend, ck.state),
                Some(ck.initial_energy),
            )
        }
        None => {
            let sim = Simulation::new(config, backend)?;
            if let Some(r) = &sim.initial_report {
                log::info!(
                    "initial RBF solve: {} lattice points, {} particles kept, CG iterations {:?}, residual {:.2e}, {:.2} s",
                    r.lattice_points, r.kept, r.iterations, r.residual, r.seconds
                );
            }
            (sim, None)
        }
    };
    let cfg = sim.config.clone();
    let n_steps = cfg.steps();
    let start_step = sim.state.step;
    let grid = cfg
        .periodic()
        .map(|_| cfg.output.grid.or(cfg.lattice_n()).unwrap_or(16));
    let box_l = cfg.domain.box_length;

    // diagnostics.csv: fresh, or the rows before the restart step
    let csv_path = out.join("diagnostics.csv");
    let keep = if restart.is_some() {
        csv_rows_before(&csv_path, start_step)?
    } else {
        vec![]
    };
    let mut csv = std::fs::File::create(&csv_path).map_err(Error::io(&csv_path))?;
    let mut head = format!("{CSV_HEADER}\n");
    for r in &keep {
        head.push_str(r);
        head.push('\n');
    }
    csv.write_all(head.as_bytes())
        .map_err(Error::io(&csv_path))?;

    let ck_path = out.join("checkpoint.bin");
    let mut last_ck = String::from("(none written yet)");
    let bar = if cfg.output.progress {
        let b = ProgressBar::new(n_steps);
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
    let (mut t_diag, mut t_io) = (0.0, 0.0);
    let mut row_clock = Instant::now();
    let loop_start = Instant::now();
    loop {
        let step = sim.state.step;
        let last = step >= n_steps;
        let diag_due = (step == start_step && restart.is_none())
            || last
            || every(cfg.output.diagnostics_every, step);
        let snap_due =
            cfg.output.snapshot_every > 0 && (every(cfg.output.snapshot_every, step) || last);
        if diag_due || snap_due {
            let f = sim.derivatives()?.clone();
            if diag_due {
                let d = diagnostics::compute(&mut sim, &f, grid)?;
                t_diag += d.seconds;
                let e_ref = *e0.get_or_insert(d.energy);
                if !d.energy.is_finite()
                    || d.energy.abs() > cfg.output.energy_growth_limit * e_ref.abs()
                {
                    bar.abandon();
                    return Err(Error::BlowUp {
                        step,
                        t: d.t,
                        what: format!(
                            "energy {:.4e} against {:.4e} initially (limit: {} times)",
                            d.energy, e_ref, cfg.output.energy_growth_limit
                        ),
                        last_checkpoint: last_ck,
                    });
                }
                let tio = Instant::now();
                let st = sim.take_times();
                let nst = st.steps.max(1) as f64;
                let rt = RowTimes {
                    s_per_step: if st.steps > 0 {
                        row_clock.elapsed().as_secs_f64() / nst
                    } else {
                        0.0
                    },
                    fmm: st.fmm / nst,
                    rbf: st.rbf / nst,
                    update: st.update / nst,
                    diagnostics: t_diag / nst,
                    io: t_io / nst,
                };
                t_diag = 0.0;
                t_io = 0.0;
                row_clock = Instant::now();
                writeln!(csv, "{}", d.csv_row(&rt)).map_err(Error::io(&csv_path))?;
                csv.flush().map_err(Error::io(&csv_path))?;
                if let (Some(spec), true) = (&d.spectrum, cfg.output.spectra) {
                    diagnostics::write_spectrum(
                        &out.join(format!("spectrum_{step:06}.csv")),
                        spec,
                    )?;
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
                let msg = format!(
                    "step {step}/{n_steps} t = {:.4} E = {:.6e} Z = {:.6e} N = {} | {:.3} s/step (fmm {:.3}, rbf {:.3}, diag {:.3})",
                    d.t, d.energy, d.enstrophy, d.n_particles, rt.s_per_step, rt.fmm, rt.rbf, rt.diagnostics
                );
                if bar.is_hidden() {
                    let done = (step - start_step) as f64;
                    let el = loop_start.elapsed().as_secs_f64();
                    let eta = if done > 0.0 {
                        el / done * (n_steps - step) as f64
                    } else {
                        f64::NAN
                    };
                    log::info!("{msg} ETA {eta:.0} s");
                } else {
                    bar.println(msg);
                }
                t_io += tio.elapsed().as_secs_f64();
                last_diag = Diagnostics {
                    spectrum: None,
                    grid_velocity: None,
                    ..d
                };
            }
            if snap_due {
                let tio = Instant::now();
                diagnostics::write_vtk_particles(
                    &out.join(format!("particles_{step:06}.vtk")),
                    &sim.state.particles,
                    Some(&f.velocity),
                    &format!("vortex method, step {step}, t = {}", sim.t()),
                )?;
                t_io += tio.elapsed().as_secs_f64();
            }
        }
        if last {
            break;
        }
        let report = sim.step()?;
        if let Some(r) = &report.reinterpolation {
            log::info!(
                "step {}: re-interpolated onto {} lattice points, {} particles kept, CG {:?} iterations, residual {:.2e}, {:.2} s",
                sim.state.step, r.lattice_points, r.kept, r.iterations, r.residual, r.seconds
            );
        }
        if let Some((what, i)) = sim.state.particles.first_non_finite() {
            bar.abandon();
            return Err(Error::BlowUp {
                step: sim.state.step,
                t: sim.t(),
                what: format!("{what} of particle {i} is not finite"),
                last_checkpoint: last_ck,
            });
        }
        let s = sim.state.step;
        if every(cfg.output.checkpoint_every, s) || s == n_steps {
            let tio = Instant::now();
            checkpoint::write(
                &ck_path,
                &Checkpoint {
                    fingerprint: cfg.fingerprint(),
                    initial_energy: e0.unwrap_or(f64::NAN),
                    state: sim.state.clone(),
                },
            )?;
            last_ck = format!("{} (step {s})", ck_path.display());
            t_io += tio.elapsed().as_secs_f64();
        }
        bar.set_position(s);
        bar.set_message(format!("t = {:.4}", sim.t()));
    }
    bar.finish_and_clear();

    if cfg.output.plots && cfg.domain.periodic {
        let rows: Vec<(f64, f64, f64)> = std::fs::read_to_string(&csv_path)
            .map_err(Error::io(&csv_path))?
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
            .collect();
        if let Err(e) = spectral::plot::plot_energy(&out.join("energy.png"), &rows) {
            log::warn!("energy plot: {e}");
        }
        if !spectra.is_empty() {
            if let Err(e) = spectral::plot::plot_spectra(&out.join("spectra.png"), &spectra) {
                log::warn!("spectra plot: {e}");
            }
        }
    }
    let steps = sim.state.step - start_step;
    let wall_s = wall0.elapsed().as_secs_f64();
    Ok(RunSummary {
        steps,
        t: sim.t(),
        wall_s,
        s_per_step: loop_start.elapsed().as_secs_f64() / steps.max(1) as f64,
        n_particles: sim.state.particles.len(),
        last: last_diag,
        out: out.to_path_buf(),
        reinterpolations: sim.state.reinterpolations,
    })
}
