//! [`ResidentSimulation`]: the vortex-method step of `vortex_method::stepping` with the particle
//! state on the GPUs for the whole run (periodic box), one program for any number of ranks:
//! each rank holds the particles of its z slab of the uniform grid on its own GPU (one rank:
//! the whole box, [`crate::slab`]). Per step:
//!
//! 1. `f_n`: the particles settled on the owners of their slabs ([`Placement`]; nothing moves
//!    on one rank), moments of the particles (deterministic reduction over the ranks: sums for
//!    the periodic checks and the surface correction, largest core), f32 packing on the
//!    device, the planner's uniform-grid FMM on the device buffers
//!    (`vortex_gpu::uniform::DeviceEvaluator`: one GPU, or slabs with halo particles and
//!    multipoles across the periodic seam), the fields scaled to f64 velocity and stretching;
//! 2. AB2 (`y += dt (3/2 f_n - 1/2 f_{n-1})`) or, after a start (or a re-interpolation with
//!    `reinterpolation.history = "restart"`; "carry" takes the history through it), Heun
//!    (predictor on a device copy, settled, a second evaluation), core spreading (core paper
//!    Eq. 11), wrapping and mean-strength removal;
//! 3. the criteria of `vortex_method::stepping::Stepper::reinterpolation_due` from the moments,
//!    and when due the re-interpolation of [`crate::reinterpolation`] on each rank's lattice
//!    planes;
//! 4. at output times the diagnostics of [`crate::diagnostics`]; the host sees the state only
//!    for checkpoints (each rank writes its particles with their global ids as its piece:
//!    restartable on any number of ranks) and snapshots (gathered on rank 0 in global-id
//!    order).

use crate::ctx::{gpu_err, Ctx};
use crate::diagnostics::{spectrum_diagnostics, velocity_field};
use crate::kernels::{per_element, Kernels, THREADS};
use crate::reinterpolation::{history_to_carry, Reinterpolator};
use crate::slab::Placement;
use crate::state::{first_non_finite, reduce_moments, DeviceFields, DeviceParticles, Moments};
use cudarc::driver::LaunchConfig;
use std::time::Instant;
use vortex_cuda::GpuDevice;
use vortex_domain::{Comm, ReduceOp};
use vortex_exchange::Transport;
use vortex_fmm::kernel::INV_4PI;
use vortex_fmm::periodic::Periodic;
use vortex_gpu::uniform::{DeviceEvaluator, DeviceSources};
use vortex_method::diagnostics::Diagnostics;
use vortex_method::parallel::{agree, gather_particles, LocalState, Phases};
use vortex_method::reinterpolation::RbfReport;
use vortex_method::stepping::{Scheme, State, StepReport, Stepper, UpdateOps};
use vortex_method::{Config, Error, Particles, Result, Simulator};

/// Device bytes per particle at the peak of a step (state 160, Heun copy and its fields 104,
/// FMM buffers ~150), measured against `cudaMemGetInfo` on an H100 (BENCHMARKS.md).
pub const DEVICE_BYTES_PER_PARTICLE: f64 = 440.0;

/// Why the resident step cannot run a configuration (the caller falls back to the host path
/// or refuses).
pub fn unsupported(config: &Config) -> Option<String> {
    if config.periodic().is_none() {
        return Some("the device-resident step covers periodic boxes only".into());
    }
    if config.lattice_n().is_none() {
        return Some("the device-resident step needs the lattice of a periodic box".into());
    }
    None
}

/// A vortex-method simulation whose particle state lives on the GPUs: on each rank the
/// particles of its slab on its own GPU (one rank: the whole state).
pub struct ResidentSimulation<'c> {
    ctx: Ctx<'c>,
    config: Config,
    stepper: Stepper,
    periodic: Periodic,
    /// The evaluation of the particles on the device (the planner's uniform-grid engine).
    fmm: Box<dyn DeviceEvaluator + 'c>,
    /// Which rank holds which particle.
    place: Placement,
    /// This rank's particles and their global ids.
    p: DeviceParticles,
    ids: Vec<u64>,
    /// Particles over all ranks.
    n_global: usize,
    current: Option<DeviceFields>,
    previous: Option<DeviceFields>,
    step: u64,
    step_reset: u64,
    reinterpolations: u64,
    rbf: Reinterpolator,
    phases: Phases,
    initial_report: Option<RbfReport>,
    name: String,
}

impl<'c> ResidentSimulation<'c> {
    /// A fresh start (`start = None`: the initial particles built on the host and uploaded)
    /// or a restart from this rank's part of a checkpoint's state (any distribution over the
    /// ranks; on one rank in global-id order), on visible device `index`.
    pub fn new(
        comm: &'c dyn Comm,
        config: Config,
        index: usize,
        start: Option<LocalState>,
    ) -> Result<Self> {
        if let Some(why) = unsupported(&config) {
            return Err(Error::Other(why));
        }
        let periodic = config.periodic().expect("checked above");
        let ranks = comm.size();
        let lattice = config.lattice_n().unwrap_or(0);
        if ranks > lattice {
            return Err(Error::Other(format!(
                "{ranks} ranks for a lattice of {lattice} planes per side: the slabs of the \
                 device-resident step need at most one rank per lattice plane"
            )));
        }
        let dev = agree(comm, GpuDevice::get(index).map_err(gpu_err("device")))?;
        let s = dev.stream().clone();
        let (state, ids, n_global, initial_report) = start_state(comm, &config, start)?;
        let n_max = per_rank(n_global.max(lattice.pow(3)), ranks);
        agree(comm, check_device_memory(&dev, n_max, ranks))?;
        let k = agree(comm, Kernels::load(&dev).map_err(gpu_err("kernels")))?;
        let p = DeviceParticles::upload(&s, &state.particles).map_err(gpu_err("upload"))?;
        let previous = match &state.previous {
            Some(d) if d.velocity.len() == p.n => {
                Some(DeviceFields::upload(&s, d).map_err(gpu_err("upload"))?)
            }
            _ => None,
        };
        let choice = config.evaluation.exchange;
        let x = vortex_exchange::open(comm, s.clone(), choice, vortex_exchange::DEFAULT_TIMEOUT)
            .map_err(|e| Error::Other(format!("evaluation.exchange = {choice:?}: {e}")))?;
        let mut rbf = Reinterpolator::new(&config, x);
        let reserved = n_max as f64 * DEVICE_BYTES_PER_PARTICLE;
        agree(comm, rbf.prepare(&dev, reserved, ranks))?;
        let fmm = vortex_engine::run_plan::plan_device(comm, index, &config.eval_params())
            .map_err(|e| Error::Other(format!("the device-resident step: {e}")));
        let fmm = agree(comm, fmm)?;
        let name = describe(&*fmm, &mut rbf);
        let place = agree(comm, Placement::new(&*fmm, n_global, config.sigma0()))?;
        Ok(Self {
            ctx: Ctx { comm, dev, s, k },
            stepper: Stepper::from_config(&config),
            rbf,
            config,
            periodic,
            fmm,
            place,
            p,
            ids,
            n_global,
            current: None,
            previous,
            step: state.step,
            step_reset: state.step_reset,
            reinterpolations: state.reinterpolations,
            phases: Phases::default(),
            initial_report,
            name,
        })
    }

    fn box_length(&self) -> f64 {
        self.periodic.box_length
    }

    /// The moments of `p` over every rank's part of it. Collective.
    fn moments_of(&self, p: &DeviceParticles) -> Result<Moments> {
        let (comm, k, s) = (self.ctx.comm, &self.ctx.k, &self.ctx.s);
        let m = p
            .moments(k, s, self.box_length())
            .map_err(gpu_err("moments"));
        Ok(reduce_moments(comm, agree(comm, m)?))
    }

    /// Velocity and stretching of `p` at itself: the FMM on the device buffers.
    fn evaluate(&mut self, which: Which) -> Result<DeviceFields> {
        let t0 = Instant::now();
        let l = self.box_length();
        let p = match which {
            Which::State => &self.p,
            Which::Other(q) => q,
        };
        let m = self.moments_of(p)?;
        let sums = m.periodic_sums();
        sums.check(&self.periodic)
            .map_err(|e| Error::Other(format!("step {}: {e}", self.step)))?;
        let [u0x, u0y, u0z] = sums.surface_correction(l);
        let (n, k, s) = (p.n, &self.ctx.k, &self.ctx.s);
        let input = p.pack(k, s, l).map_err(gpu_err("pack"))?;
        let src = DeviceSources {
            packed: &input,
            n,
            n_global: self.n_global,
            sigma_max: m.sigma_max,
            bounds: (m.lo, m.hi),
        };
        let (out6, tm) = self
            .fmm
            .evaluate(&src)
            .map_err(|e| Error::Other(format!("step {}: uniform grid: {e}", self.step)))?;
        log::debug!(
            "step {}: uniform grid {}^3 leaves, planes {:?}: {} owned + {} halo particles, \
             {:.2} MB sent; {}",
            self.step,
            tm.device.n,
            tm.planes,
            tm.owned,
            tm.halo_particles,
            tm.bytes() as f64 * 1e-6,
            tm.device.kernel_report()
        );
        self.place.bytes += tm.bytes() as u64;
        drop(input);
        let mut f = DeviceFields::zeros(s, n).map_err(gpu_err("alloc"))?;
        // out6 holds 6 n floats (the evaluation's), vel and str 3 n doubles
        let (n_i, cfg) = (n as i32, per_element(n));
        k.fields(
            s, cfg, &out6, n_i, INV_4PI, u0x, u0y, u0z, &mut f.vel, &mut f.str,
        )
        .map_err(gpu_err("fields"))?;
        s.synchronize().map_err(|e| gpu_err("fields")(e.into()))?;
        self.phases.fmm += t0.elapsed().as_secs_f64();
        Ok(f)
    }

    /// The rates of the state, `f_n`: the particles settled on their owners, then evaluated.
    fn current(&mut self) -> Result<&DeviceFields> {
        if self.current.is_none() {
            let (ctx, fmm, l) = (&self.ctx, &*self.fmm, self.periodic.box_length);
            let prev = self.previous.as_mut();
            let (p, ids) = (&mut self.p, &mut self.ids);
            self.place
                .settle_state(ctx, fmm, self.n_global, l, p, prev, ids)?;
            self.current = Some(self.evaluate(Which::State)?);
        }
        Ok(self.current.as_ref().expect("evaluated above"))
    }

    /// `y += a x` over `3 n` doubles.
    fn axpy(
        &self,
        y: &mut cudarc::driver::CudaSlice<f64>,
        a: f64,
        x: &cudarc::driver::CudaSlice<f64>,
    ) -> Result<()> {
        let m = y.len();
        // x has the length of y (both 3 n doubles of the state)
        let (k, s) = (&self.ctx.k, &self.ctx.s);
        k.axpy(s, per_element(m), y, a, x, m as i32)
            .map_err(gpu_err("axpy"))
    }

    /// `y += dt (3/2 f - 1/2 g)` over `3 n` doubles (`f`, `g` the rates of this and the
    /// previous step).
    fn ab2(
        &self,
        dt: f64,
        y: &mut cudarc::driver::CudaSlice<f64>,
        f: &cudarc::driver::CudaSlice<f64>,
        g: &cudarc::driver::CudaSlice<f64>,
    ) -> Result<()> {
        let m = y.len();
        // f and g have the length of y
        let (k, s) = (&self.ctx.k, &self.ctx.s);
        k.ab2(s, per_element(m), y, f, g, m as i32, dt)
            .map_err(gpu_err("ab2"))
    }

    /// Core spreading to `elapsed` at viscosity `nu`, wrapping and mean-strength removal (the
    /// host's `tidy`).
    fn spread_and_tidy(&self, p: &mut DeviceParticles, nu: f64, elapsed: f64) -> Result<()> {
        let (k, s, l) = (&self.ctx.k, &self.ctx.s, self.box_length());
        p.spread(k, s, nu, elapsed).map_err(gpu_err("spread"))?;
        let m = self.moments_of(p)?;
        p.tidy(k, s, l, m.mean_strength()).map_err(gpu_err("tidy"))
    }

    /// The state, taken out for an update in place (put back by the caller).
    fn take_state(&mut self) -> Result<DeviceParticles> {
        let empty = DeviceParticles::zeros(&self.ctx.s, 0).map_err(gpu_err("alloc"))?;
        Ok(std::mem::replace(&mut self.p, empty))
    }

    /// `f(state)`, the state taken out and put back whatever `f` returns.
    fn with_state(
        &mut self,
        f: impl FnOnce(&Self, &mut DeviceParticles) -> Result<()>,
    ) -> Result<()> {
        let mut p = self.take_state()?;
        let r = f(self, &mut p);
        self.p = p;
        r
    }

    /// The update of one step: the scheme of `vortex_method::stepping::Stepper::update_with`
    /// over the device state's operations ([`DeviceUpdate`]).
    fn update(&mut self, f_n: DeviceFields) -> Result<Scheme> {
        let stepper = self.stepper.clone();
        let (step, reset) = (self.step, self.step_reset);
        let previous = self.previous.take();
        let mut ops = DeviceUpdate { sim: self };
        let (scheme, _, f_n) = stepper.update_with(&mut ops, step, reset, f_n, previous)?;
        self.previous = Some(f_n);
        self.step += 1;
        Ok(scheme)
    }

    /// The re-interpolation of the state onto fresh particles on each rank's lattice planes
    /// (`sigma_max` the largest core), the AB2 history carried through it when asked for.
    fn reinterpolate(&mut self, sigma_max: f64) -> Result<RbfReport> {
        let t1 = Instant::now();
        if self.rbf.spreads() {
            // the spreading over slabs wants every particle in its own slab (one rank: nothing
            // moves)
            let (ctx, fmm, l) = (&self.ctx, &*self.fmm, self.periodic.box_length);
            let prev = self.previous.as_mut();
            let (p, ids) = (&mut self.p, &mut self.ids);
            self.place
                .settle_state(ctx, fmm, self.n_global, l, p, prev, ids)?;
        }
        let n = self.config.lattice_n().expect("checked by unsupported()");
        let (l, cutoff) = (self.box_length(), self.config.reinterpolation.cutoff);
        let (ctx, fmm) = (&self.ctx, &*self.fmm);
        let lat = self
            .place
            .lattice(ctx, fmm, self.n_global, n, l, cutoff, sigma_max)?;
        let step = self.step;
        let rbf_err = |e| Error::Rbf(format!("step {step}: {e}"));
        let prev = self.previous.take();
        let carry = history_to_carry(
            &self.stepper,
            prev.as_ref(),
            self.p.n,
            self.step,
            self.step_reset,
        );
        let carried = match (carry, &prev) {
            (Some(elapsed), Some(prev)) => {
                let nu = self.stepper.nu;
                let h = self
                    .rbf
                    .carry_history(ctx, &self.p, prev, nu, elapsed, &lat, sigma_max);
                Some(h.map_err(|e| Error::Rbf(format!("step {step}: the AB2 history: {e}")))?)
            }
            _ => None,
        };
        drop(prev);
        let (fresh, ids, mut report) = self
            .rbf
            .reinterpolate(ctx, &self.p, &lat, sigma_max)
            .map_err(rbf_err)?;
        self.n_global = report.lattice_points;
        self.ids = ids;
        self.p = fresh;
        let mm = self.moments_of(&self.p)?;
        let mut p = self.take_state()?;
        let (k, s) = (&self.ctx.k, &self.ctx.s);
        let r = p.tidy(k, s, l, mm.mean_strength());
        self.p = p;
        r.map_err(gpu_err("tidy"))?;
        s.synchronize().map_err(|e| gpu_err("rbf")(e.into()))?;
        self.step_reset = self.step;
        self.previous = carried;
        self.current = None;
        self.reinterpolations += 1;
        report.seconds = t1.elapsed().as_secs_f64();
        self.phases.rbf += report.seconds;
        Ok(report)
    }
}

/// The operations of one update on the device state (`vortex_method::stepping::UpdateOps`):
/// the Heun predictor is settled on the owners of its positions (the state and `f_n` move
/// with it) before its evaluation.
struct DeviceUpdate<'s, 'c> {
    sim: &'s mut ResidentSimulation<'c>,
}

impl UpdateOps for DeviceUpdate<'_, '_> {
    type Rates = DeviceFields;
    type Predictor = DeviceParticles;

    fn is_history(&self, prev: &DeviceFields) -> bool {
        prev.vel.len() == 3 * self.sim.p.n
    }

    fn ab2(&mut self, dt: f64, f: &DeviceFields, g: &DeviceFields) -> Result<()> {
        self.sim.with_state(|sim, p| {
            sim.ab2(dt, &mut p.pos, &f.vel, &g.vel)?;
            sim.ab2(dt, &mut p.alpha, &f.str, &g.str)
        })
    }

    fn predictor(&mut self, dt: f64, f: &DeviceFields) -> Result<DeviceParticles> {
        let sim = &*self.sim;
        let mut star = sim.p.duplicate(&sim.ctx.s).map_err(gpu_err("copy"))?;
        sim.axpy(&mut star.pos, dt, &f.vel)?;
        sim.axpy(&mut star.alpha, dt, &f.str)?;
        Ok(star)
    }

    fn tidy_predictor(&mut self, star: &mut DeviceParticles, nu: f64, elapsed: f64) -> Result<()> {
        self.sim.spread_and_tidy(star, nu, elapsed)
    }

    fn rates_at(
        &mut self,
        mut star: DeviceParticles,
        f_n: &mut DeviceFields,
    ) -> Result<DeviceFields> {
        let sim = &mut *self.sim;
        let (ctx, fmm, l) = (&sim.ctx, &*sim.fmm, sim.periodic.box_length);
        let moving = (&mut star, &mut sim.p, &mut *f_n);
        sim.place
            .settle_predictor(ctx, fmm, sim.n_global, l, moving, &mut sim.ids)?;
        sim.evaluate(Which::Other(&star))
    }

    fn add(&mut self, a: f64, f: &DeviceFields) -> Result<()> {
        self.sim.with_state(|sim, p| {
            sim.axpy(&mut p.pos, a, &f.vel)?;
            sim.axpy(&mut p.alpha, a, &f.str)
        })
    }

    fn tidy(&mut self, nu: f64, elapsed: f64) -> Result<()> {
        self.sim
            .with_state(|sim, p| sim.spread_and_tidy(p, nu, elapsed))
    }
}

/// The particles an evaluation is for: the state, or a predictor copy.
enum Which<'a> {
    State,
    Other(&'a DeviceParticles),
}

/// Refuses a run that cannot fit on the device, with the estimate and the free memory.
fn check_device_memory(dev: &GpuDevice, n: usize, ranks: usize) -> Result<()> {
    let (free, total) = dev.mem_info().map_err(gpu_err("memory"))?;
    let need = n as f64 * DEVICE_BYTES_PER_PARTICLE;
    if need > free as f64 {
        let per = if ranks > 1 {
            format!(" (this rank's share of the particles over {ranks} ranks)")
        } else {
            String::new()
        };
        return Err(Error::Memory(format!(
            "{n} particles{per} need about {:.1} GiB on {} ({DEVICE_BYTES_PER_PARTICLE} B each), \
             {:.1} of {:.1} GiB are free",
            need / (1u64 << 30) as f64,
            dev.name(),
            free as f64 / (1u64 << 30) as f64,
            total as f64 / (1u64 << 30) as f64
        )));
    }
    Ok(())
}

/// What runs, for the logs and run.json: the engine, the state, the sums' route and the
/// transport between the ranks.
fn describe(fmm: &dyn DeviceEvaluator, rbf: &mut Reinterpolator) -> String {
    let mut name = format!("{}, state resident on the device", fmm.describe());
    if rbf.spreads() {
        name.push_str(", Gaussian sums by spreading");
    }
    if rbf.transport() != Transport::Local {
        name.push_str(&format!(", device exchange {}", rbf.transport()));
    }
    name
}

/// The most particles a rank holds at once: its even share, 25 % more on several ranks for
/// the imbalance of the slabs and the halo of the lattice sums.
fn per_rank(n: usize, ranks: usize) -> usize {
    if ranks == 1 {
        n
    } else {
        n.div_ceil(ranks) * 5 / 4
    }
}

/// The state a run starts from on this rank, its global ids, the particles over all ranks and
/// the report of the initial solve. `start`: `None` a fresh start (the initial particles built
/// on rank 0, split by global id), `Some(part)` a restart (this rank's part of the
/// checkpoint). On several ranks the first evaluation hands each particle to the owner of its
/// slab. Collective.
fn start_state(
    comm: &dyn Comm,
    config: &Config,
    start: Option<LocalState>,
) -> Result<(State, Vec<u64>, usize, Option<RbfReport>)> {
    let root = comm.rank() == 0;
    let (global, report) = match start {
        Some(part) => return Ok((part.state, part.ids, part.n_global, None)),
        None if root => {
            let built = agree(comm, vortex_method::initial::build(config))?;
            let (particles, report) = built;
            let st = State::initial(particles);
            (Some(st), report)
        }
        None => {
            agree(comm, Ok(()))?;
            (None, None)
        }
    };
    let part = LocalState::scatter(comm, global);
    Ok((part.state, part.ids, part.n_global, report))
}

impl Simulator for ResidentSimulation<'_> {
    fn comm(&self) -> &dyn Comm {
        self.ctx.comm
    }
    fn config(&self) -> &Config {
        &self.config
    }
    fn step_index(&self) -> u64 {
        self.step
    }
    fn t(&self) -> f64 {
        self.stepper.time(self.step)
    }
    fn n_global(&self) -> usize {
        self.n_global
    }
    fn reinterpolations(&self) -> u64 {
        self.reinterpolations
    }
    fn smallest_core(&self) -> f64 {
        self.config.lattice_h()
    }
    fn take_initial_report(&mut self) -> Option<RbfReport> {
        self.initial_report.take()
    }

    fn step_measures(&mut self) -> Result<[f64; 2]> {
        self.current()?; // may hand particles to other ranks first: n after it
        let (comm, k, s) = (self.ctx.comm, &self.ctx.k, &self.ctx.s);
        let n = self.p.n;
        let f = self.current.as_ref().expect("evaluated");
        let bad = agree(comm, f.first_non_finite(k, s, n).map_err(gpu_err("check")))?;
        let local = match bad {
            Some(i) => {
                let x = s
                    .clone_dtoh(&self.p.pos.slice(3 * i..3 * i + 3))
                    .map_err(|e| gpu_err("check")(e.into()))?;
                Some((self.ids[i], [x[0], x[1], x[2]]))
            }
            None => None,
        };
        if let Some((rank, id, x)) = first_bad_over_ranks(comm, local) {
            return Err(Error::NonFiniteField {
                step: self.step,
                what: "velocity or stretching".into(),
                particle: id,
                position: x,
                cause: format!("the uniform-grid FMM on the device gave NaN or Inf (rank {rank})"),
            });
        }
        let nb = n.div_ceil(THREADS as usize).max(1);
        let mut partial = s
            .alloc_zeros::<f64>(2 * nb)
            .map_err(|e| gpu_err("alloc")(e.into()))?;
        let cfg = LaunchConfig {
            grid_dim: (nb as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // vel, str and alpha hold 3 n doubles, partial 2 nb doubles for the nb blocks of
        // THREADS (= RTHREADS, the size of the kernel's shared arrays) threads
        k.rates(
            s,
            cfg,
            &f.vel,
            &f.str,
            &self.p.alpha,
            n as i32,
            &mut partial,
        )
        .map_err(gpu_err("rates"))?;
        let v = s
            .clone_dtoh(&partial)
            .map_err(|e| gpu_err("rates")(e.into()))?;
        let mut m = [0.0f64; 2];
        for c in v.chunks_exact(2) {
            m[0] = m[0].max(c[0]);
            m[1] = m[1].max(c[1]);
        }
        comm.allreduce_f64(&mut m, ReduceOp::Max);
        Ok(m)
    }

    fn diagnostics(
        &mut self,
        grid: Option<usize>,
        with_field: bool,
    ) -> Result<Option<Diagnostics>> {
        let t0 = Instant::now();
        let m = self.moments_of(&self.p)?;
        let mut d = Diagnostics {
            step: self.step,
            t: self.t(),
            total_strength: m.total_strength,
            impulse: m.cross.map(|c| 0.5 * c),
            centroid: if m.weight == 0.0 {
                [0.0; 3]
            } else {
                m.weighted.map(|c| c / m.weight)
            },
            n_particles: m.n,
            max_sigma: m.sigma_max,
            re_lambda: f64::NAN,
            ..Default::default()
        };
        if let Some(n) = grid {
            let n = vortex_method::diagnostics::vorticity_grid(&self.config, n);
            let (l, cutoff) = (self.box_length(), self.config.reinterpolation.cutoff);
            let (ctx, fmm) = (&self.ctx, &*self.fmm);
            let lat = self
                .place
                .lattice(ctx, fmm, self.n_global, n, l, cutoff, m.sigma_max)?;
            let (spec, u) = self
                .rbf
                .grid_velocity(ctx, &self.p, &lat, m.sigma_max, with_field)
                .map_err(gpu_err("grid velocity"))?;
            spectrum_diagnostics(&mut d, &spec, n, l, self.config.nu);
            d.grid_velocity = u.map(|u| velocity_field(&u, n));
        }
        d.seconds = t0.elapsed().as_secs_f64();
        Ok(Some(d))
    }

    fn snapshot(&mut self) -> Result<Option<(Particles, Vec<[f64; 3]>)>> {
        self.current()?;
        let s = &self.ctx.s;
        let p = self.p.download(s).map_err(gpu_err("download"))?;
        let f = self.current.as_ref().expect("evaluated");
        let f = f.download(s).map_err(gpu_err("download"))?;
        let (comm, n) = (self.ctx.comm, self.n_global);
        let g = gather_particles(comm, &self.ids, n, &p, &[&f.velocity]);
        Ok(g.map(|(p, mut ex)| (p, ex.pop().expect("one field"))))
    }

    fn local_state(&mut self) -> Result<LocalState> {
        let s = &self.ctx.s;
        let particles = self.p.download(s).map_err(gpu_err("download"))?;
        let previous = match &self.previous {
            Some(f) => Some(f.download(s).map_err(gpu_err("download"))?),
            None => None,
        };
        let local = State {
            step: self.step,
            step_reset: self.step_reset,
            particles,
            previous,
            reinterpolations: self.reinterpolations,
        };
        Ok(LocalState {
            state: local,
            ids: self.ids.clone(),
            n_global: self.n_global,
        })
    }

    fn step(&mut self) -> Result<StepReport> {
        let t0 = Instant::now();
        let fmm0 = self.phases.fmm;
        self.current()?;
        let f_n = self.current.take().expect("evaluated");
        let scheme = self.update(f_n)?;
        let m = self.moments_of(&self.p)?;
        let s = &self.ctx.s;
        s.synchronize().map_err(|e| gpu_err("update")(e.into()))?;
        let fmm = self.phases.fmm - fmm0;
        self.phases.update += (t0.elapsed().as_secs_f64() - fmm).max(0.0);
        self.phases.steps += 1;
        let since = self.step - self.step_reset;
        let strain = self.stepper.strain(since, m.alpha_max);
        let mut reinterpolation = None;
        if self.stepper.reinterpolation_due(since, m.ratio_max, strain) {
            reinterpolation = Some(self.reinterpolate(m.sigma_max)?);
        }
        log::debug!(
            "step {}: {} particles sent by migrations so far, {:.1} MB sent by this rank",
            self.step,
            self.place.migrated,
            (self.place.bytes + self.rbf.bytes) as f64 * 1e-6
        );
        Ok(StepReport {
            scheme,
            extra_evaluations: (scheme == Scheme::Heun) as u32,
            reinterpolation,
        })
    }

    fn check_finite(&mut self, last_checkpoint: &str) -> Result<()> {
        let (comm, k, s) = (self.ctx.comm, &self.ctx.k, &self.ctx.s);
        let bad =
            first_non_finite(k, s, &self.p.pos, &self.p.alpha, self.p.n).map_err(gpu_err("check"));
        let bad = agree(comm, bad)?.map(|i| (self.ids[i], [f64::NAN; 3]));
        match first_bad_over_ranks(comm, bad) {
            Some((_, id, _)) => Err(Error::BlowUp {
                step: self.step,
                t: self.t(),
                what: format!("position or strength of particle {id} is not finite"),
                last_checkpoint: last_checkpoint.to_string(),
            }),
            None => Ok(()),
        }
    }

    fn phases(&self) -> Phases {
        self.phases
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    fn state_on_device(&self) -> bool {
        true
    }
}

/// The first rank's (lowest rank) bad particle: its rank, global id and position. Collective.
fn first_bad_over_ranks(
    comm: &dyn Comm,
    local: Option<(u64, [f64; 3])>,
) -> Option<(usize, u64, [f64; 3])> {
    let mine: Vec<u8> = match local {
        Some((id, x)) => std::iter::once(id.to_le_bytes())
            .chain(x.iter().map(|v| v.to_le_bytes()))
            .flatten()
            .collect(),
        None => Vec::new(),
    };
    let all = comm.allgatherv(&mine);
    all.iter()
        .enumerate()
        .find(|(_, b)| b.len() == 32)
        .map(|(r, b)| {
            let f = |j: usize| b[8 * j..8 * j + 8].try_into().expect("8 bytes");
            let x = [1, 2, 3].map(|j| f64::from_le_bytes(f(j)));
            (r, u64::from_le_bytes(f(0)), x)
        })
}

/// Refuses two ranks on one GPU (the device-resident step keeps each rank's slab on its own
/// device: ranks sharing one would run out of memory or time without saying why): the GPUs'
/// UUIDs gathered over the ranks. Collective.
pub fn check_one_gpu_per_rank(comm: &dyn Comm, index: usize) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    let uuid = GpuDevice::get(index)
        .map_err(gpu_err("device"))
        .and_then(|d| {
            d.context()
                .uuid()
                .map(|u| u.bytes.iter().map(|&b| b as u8).collect::<Vec<u8>>())
                .map_err(|e| gpu_err("device UUID")(e.into()))
        });
    let uuid = agree(comm, uuid)?;
    let all = comm.allgatherv(&uuid);
    for (r, u) in all.iter().enumerate() {
        if let Some(q) = all[..r].iter().position(|v| v == u) {
            return Err(Error::Other(format!(
                "ranks {q} and {r} share one GPU: the device-resident step needs one GPU per \
                 rank (as many ranks per node as GPUs; device index = node-local rank % GPUs \
                 visible)"
            )));
        }
    }
    Ok(())
}
