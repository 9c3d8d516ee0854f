//! The state of a run between its phases ([`RunLoop`]) and its steps: the start (output
//! directory, simulation fresh or from a checkpoint, CSV files, the announced duration), the health
//! and energy checks of each step, the diagnostics rows, snapshots and checkpoints when they are due,
//! the advance by one step and the summary at the end.

use super::outputs::{
    check_energy, energy_rows, open_outputs, plot, report_row, setup_out, snapshot_step,
    write_diag_row, write_snapshot, DiagRow, Outputs, PVD_FILE,
};
use super::schedule::Schedules;
use super::*;

impl RunLoop<'_> {
    /// The steps of [`run`] until the end, the `--steps` limit or a signal.
    pub(super) fn steps(&mut self) -> Result<()> {
        let comm = self.comm;
        let run = self;
        loop {
            let it0 = Instant::now();
            // the measure of a signal's grace (vortex_spectral::stop)
            vortex_spectral::stop::step_boundary();
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
        vortex_spectral::stop::steps_ended();
        Ok(())
    }
}

/// Seconds of a step's diagnostics and output (files, checkpoints, snapshots) on this rank.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PhaseIo {
    pub(super) diagnostics: f64,
    pub(super) io: f64,
}

/// What the step about to be taken writes, and whether the run ends there.
#[derive(Clone, Copy, Debug)]
pub(super) struct Due {
    /// A signal that stops the run (agreed over the ranks).
    pub(super) signal: Option<usize>,
    pub(super) last: bool,
    pub(super) diagnostics: bool,
    pub(super) snapshot: bool,
    pub(super) checkpoint: bool,
    /// The checkpoint being written is on disk on every rank (its manifest is due).
    pub(super) written: bool,
}

/// Where a run writes and from what it starts.
#[derive(Clone, Copy)]
pub(super) struct Destination<'a> {
    pub(super) out: &'a Path,
    pub(super) restart: Option<&'a Path>,
    pub(super) opts: &'a RunOptions,
}

/// The state of a run between its phases (see [`run`]).
pub(super) struct RunLoop<'c> {
    pub(super) comm: &'c dyn Comm,
    pub(super) sim: Simulation<'c>,
    pub(super) cfg: Config,
    pub(super) out: PathBuf,
    pub(super) restarted: bool,
    pub(super) start_step: u64,
    pub(super) stop: u64,
    /// Points per side of the diagnostics grid (periodic).
    pub(super) grid: Option<usize>,
    /// The spacing of the stability measures.
    pub(super) h: f64,
    pub(super) schedules: Schedules,
    /// Rank 0's CSV files.
    pub(super) outputs: Option<Outputs>,
    pub(super) monitor: EnergyMonitor,
    pub(super) e0: Option<f64>,
    pub(super) ck_path: PathBuf,
    pub(super) last_ck: String,
    pub(super) last_ck_wall: Instant,
    pub(super) writer: CheckpointWriter,
    pub(super) warned: bool,
    pub(super) bar: ProgressBar,
    pub(super) pvd: Vec<(f64, String)>,
    pub(super) spectra: Vec<(f64, Vec<(f64, f64)>)>,
    pub(super) last_diag: Diagnostics,
    pub(super) totals: PhaseTotals,
    pub(super) since_row: PhaseTotals,
    pub(super) loop_start: Instant,
    pub(super) interrupted: Option<usize>,
    pub(super) backend_name: String,
    /// The announced duration, measured as the steps go (rank 0).
    pub(super) estimate: Option<vortex_spectral::estimate::Estimate>,
}

impl<'c> RunLoop<'c> {
    /// The output directory, the simulation (fresh or from the checkpoint), the CSV files, the
    /// energy history kept from before a restart and the progress bar. Collective.
    pub(super) fn start(
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
            .map_or(cfg.steps(), |k| {
                cfg.steps().min(start_step.saturating_add(k))
            })
            .max(start_step);
        // the whole run to t_end (also under --steps: a mistyped dt shows at once), measured
        // again after the first steps
        let estimate = root.then(|| {
            let steps = cfg.steps().saturating_sub(start_step);
            let cost = StepCost::of(&*sim);
            let model = announce(&cfg, steps, sim.n_global(), cost);
            vortex_spectral::estimate::Estimate::new(
                &format!("the run to t_end = {}", cfg.t_end),
                Some(model),
            )
        });
        if root {
            log::info!(
                "{}",
                super::sizes::outputs_text(&cfg, sim.n_global(), start_step, stop)
            );
        }
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
            Some(p) => {
                let name = format!("{} (step {start_step}, the restart)", p.display());
                vortex_spectral::stop::checkpoint_complete(name.clone());
                name
            }
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
    pub(super) fn check_health(&mut self, step: u64) -> Result<()> {
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
    pub(super) fn due(&self, step: u64) -> Due {
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
            // the initial state only when asked for (output.snapshot_initial)
            snapshot: s.snapshot.any()
                && ((s.snapshot.due(step) && (step > 0 || o.snapshot_initial)) || last),
            checkpoint,
            written: self.writer.active() && flags[2] == 0.0,
        }
    }

    /// The diagnostics of the current state: energy checks, the progress line, the row of
    /// `diagnostics.csv` with its spectrum (and the grid snapshot when `snapshot`); the
    /// outcome agreed over the ranks. Collective.
    pub(super) fn diagnostics(
        &mut self,
        step: u64,
        snapshot: bool,
        io: &mut PhaseIo,
    ) -> Result<()> {
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
    pub(super) fn finish_checkpoint(&mut self, io: &mut PhaseIo) -> Result<()> {
        let tio = Instant::now();
        if let Some(done) = self.writer.finish(self.comm)? {
            vortex_spectral::stop::checkpoint_complete(done.clone());
            self.last_ck = done;
        }
        io.io += tio.elapsed().as_secs_f64();
        Ok(())
    }

    /// The checkpoint of the current state, written by a thread of every rank (the previous
    /// one finished first, [`CheckpointWriter`]); at the end of the run it is on disk before
    /// the outcome is reported. Collective.
    pub(super) fn checkpoint(&mut self, last: bool, io: &mut PhaseIo) -> Result<()> {
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
    pub(super) fn advance(
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
    pub(super) fn finish(mut self, wall0: Instant) -> RunSummary {
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

/// What runs a step, for the model of its duration ([`announce`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StepCost {
    /// The particles on the host, the FMM on the CPU cores.
    Cpu,
    /// The particles on the host, the FMM on a GPU.
    HostGpu,
    /// The particle state resident on the GPUs (`vortex-resident`).
    Resident,
}

impl StepCost {
    pub(super) fn of(sim: &dyn Simulator) -> Self {
        if sim.state_on_device() {
            StepCost::Resident
        } else if sim.describe().starts_with("cpu") {
            // the CPU backend's name (`vortex_fmm::CpuBackend::name`): "cpu (N threads)"
            StepCost::Cpu
        } else {
            StepCost::HostGpu
        }
    }
}

/// Seconds of one step of `n` particles (see [`announce`]); `threads` of the CPU backend.
pub(super) fn step_seconds(cost: StepCost, periodic: bool, n: usize, threads: usize) -> f64 {
    let n = n as f64;
    match cost {
        StepCost::Cpu => {
            let fixed = if periodic { 0.05 } else { 0.01 };
            (fixed + n * 2.5e-4) / threads.max(1) as f64
        }
        StepCost::HostGpu => 0.1 + n * 4e-6,
        StepCost::Resident => 1e-2 + n * 6e-8,
    }
}

/// Logs the step count of the run and its estimated duration before the first step (a warning
/// for a long one, `vortex_spectral::durable::announce_steps`); returns the estimate in
/// seconds. A rough model of the step (FMM, two evaluations per AB2/Heun step,
/// re-interpolation, diagnostics) for what runs it ([`StepCost`]), fitted to BENCHMARKS.md:
/// on the CPU 2.5e-4 s per particle and thread, plus 0.05 thread-seconds a step in a periodic
/// box (the image sums and the diagnostics grid) (Taylor-Green 8^3 on one core of the 2-core
/// machine, 0.07 s of CPU a step, 0.15-0.2 s of wall time beside other builds; 64^3 and 256^3
/// on 16 cores, 4.6 and 197 s);
/// the host state with the FMM on a GPU 4e-6 s per particle (64^3 to 256^3 on an H100: 2.0 to
/// 72 s); the state resident on the GPU 6e-8 s per particle (64^3 to 512^3 on an H100 and an
/// H200: 0.024 to 8.9 s); on the CPU also the re-interpolation's Gaussian sums by their reach
/// (`reinterpolation.cutoff`, `initial.overlap`). The run measures itself after the first steps and announces again
/// when this is off ([`vortex_spectral::estimate::Estimate`]).
pub(super) fn announce(cfg: &Config, steps: u64, n: usize, cost: StepCost) -> f64 {
    let threads = rayon::current_num_threads();
    let mut s_per_step = step_seconds(cost, cfg.domain.periodic, n, threads);
    if cost == StepCost::Cpu {
        // the Gaussian sums of a re-interpolation visit (2 cutoff overlap)^3 lattice points per
        // particle (1.3e-7 thread-seconds each on the 2-core machine, Taylor-Green 16^3 with
        // cutoff 12 re-interpolated every step: 3.8 s of a 4.3 s step); once per
        // `reinterpolation.every` steps, else about once in 20 steps
        let r = &cfg.reinterpolation;
        let reach = (2.0 * r.cutoff * cfg.initial.overlap).powi(3);
        let every = if r.every > 0 { r.every as f64 } else { 20.0 };
        s_per_step += n as f64 * reach * 1.3e-7 / every / threads.max(1) as f64;
    }
    durable::announce_steps(
        &format!("the run to t_end = {} with dt = {}", cfg.t_end, cfg.dt),
        steps as f64,
        s_per_step,
    )
}

/// The simulation of a run on every rank, fresh or from the checkpoint of [`read_restart`],
/// with the initial energy the checkpoint carries. Collective.
pub(super) fn open_simulation<'c>(
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
pub(super) fn progress_bar(show: bool, start_step: u64, stop: u64) -> ProgressBar {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The model against the measured seconds per step of BENCHMARKS.md (what runs the step,
    /// particles, CPU threads, measured): within 3x each.
    #[test]
    fn the_step_model_is_within_3x_of_the_measured() {
        let n3 = |n: usize| n * n * n;
        let cases = [
            (StepCost::Resident, n3(64), 16, 0.0236),
            (StepCost::Resident, n3(128), 16, 0.185),
            (StepCost::Resident, n3(256), 16, 1.003),
            (StepCost::Resident, n3(512), 16, 8.9),
            (StepCost::HostGpu, n3(64), 16, 2.03),
            (StepCost::HostGpu, n3(128), 16, 10.4),
            (StepCost::HostGpu, n3(256), 16, 44.4),
            (StepCost::HostGpu, n3(256), 16, 72.5),
            (StepCost::Cpu, n3(8), 1, 0.15),
            (StepCost::Cpu, n3(64), 16, 4.59),
            (StepCost::Cpu, n3(256), 16, 197.3),
        ];
        for (cost, n, threads, measured) in cases {
            let model = step_seconds(cost, true, n, threads);
            let off = (model / measured).max(measured / model);
            assert!(
                off < 3.0,
                "{cost:?} n = {n}: model {model} s, measured {measured} s"
            );
        }
    }
}
