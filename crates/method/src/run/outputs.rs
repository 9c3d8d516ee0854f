//! The files rank 0 writes during a run: the CSV files (opened fresh, or cut after the
//! checkpoint's step at a restart), the energy checks and report of a diagnostics row, the particle
//! snapshots and their `particles.pvd` list, the spectra and the plots.

use super::*;

pub(super) fn csv_rows_before(path: &Path, step: u64) -> Result<Vec<String>> {
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
pub(super) fn energy_rows(path: &Path) -> Vec<(u64, f64, f64)> {
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
pub(super) struct Outputs {
    pub(super) csv: std::fs::File,
    pub(super) csv_path: PathBuf,
    pub(super) timing: std::fs::File,
    pub(super) timing_path: PathBuf,
}

pub(super) fn open_outputs(out: &Path, restart: bool, start_step: u64) -> Result<Outputs> {
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
pub(super) fn setup_out(
    out: &Path,
    config: &Config,
    mode: OutMode,
    restart: Option<&Path>,
) -> Result<()> {
    durable::prepare_out(out, mode).map_err(|e| Error::OutDir(e.to_string()))?;
    if let Some(ck) = restart {
        durable::check_restart_into(out, ck).map_err(|e| Error::OutDir(e.to_string()))?;
    }
    let cfg_path = out.join("config.toml");
    let cfg_text = toml::to_string(config).map_err(|e| Error::Other(format!("config: {e}")))?;
    durable::write_atomic(&cfg_path, &[cfg_text.as_bytes()], 1)
        .map_err(|e| Error::OutDir(e.to_string()))
}

/// The smallest initial energy a run accepts: below it the diagnostics' products (enstrophy,
/// spectra, their ratios) underflow.
pub const MIN_ENERGY: f64 = 1e-30;

/// The energy checks of a diagnostics row: a decaying flow's energy may not rise
/// ([`EnergyMonitor`]; a warning, then an error) nor exceed `energy_growth_limit` times the
/// initial energy `e0` (set from the first row).
pub(super) fn check_energy(
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
pub(super) fn report_row(
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

pub(super) fn snapshot_step(file: &str) -> Option<u64> {
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
pub(super) fn write_snapshot(
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
pub(super) struct DiagRow<'a> {
    pub(super) d: &'a Diagnostics,
    pub(super) rt: &'a RowTimes,
    pub(super) step: u64,
    pub(super) snapshot: bool,
}

/// Writes a diagnostics row, its spectrum (`spectrum_TTTTT.TTTT.csv`) and, on snapshot steps,
/// the grid velocity (`grid_STEP.vtk`).
pub(super) fn write_diag_row(
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
pub(super) fn spectrum_decimals(dt: f64) -> usize {
    if dt > 1e-4 * (1.0 + 1e-9) {
        4
    } else {
        (-dt.log10()).floor() as usize + 1
    }
}

pub(super) fn plot(
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
