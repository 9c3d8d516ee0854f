//! The time stepping over ranks (MPI, simulated ranks in threads, or one process): every rank
//! owns a subset of the particles, identified by global ids, and the right-hand side of every
//! stage comes from the distributed FMM of the `vortex-domain` crate.
//!
//! What is distributed and what gathers on rank 0:
//! * **distributed**: the FMM evaluations (`f_n` on the particles at their owners through
//!   [`vortex_domain::evaluate_owned`], the Heun stage and the diagnostics grid through
//!   [`vortex_domain::evaluate_distributed`]), the AB2/Heun update, core spreading, the mean-strength
//!   removal and the largest core ratio (allreduce), the redistribution of the particles to the
//!   owners of their branch cells at the start of every step (the partition of
//!   [`vortex_domain::Partition`] rebuilt from the current positions; the particles carry their global
//!   id, `sigma0` and the AB2 history), the periodic diagnostics (velocity on the grid of targets,
//!   totals by allreduce);
//! * **gathered on rank 0** (in global-id order, then scattered back in contiguous pieces): the
//!   initial condition and the RBF re-interpolation (every `M` steps or at the core ratio: the
//!   solve runs on rank 0 and the fresh particles are numbered in lattice order), the free-space
//!   energy and enstrophy (Gaussian sums over all particles), checkpoints (written once by rank 0,
//!   in global-id order, so that a checkpoint does not depend on the number of ranks and can be
//!   continued with another), VTK snapshots and the spectral diagnostics of the grid velocity.
//!
//! Results do not depend on the number of ranks beyond round-off: the particles are ordered by
//! (Morton key, global id) on every rank after each redistribution, so the concatenation over the
//! ranks is the same global order whatever their number, and the distributed FMM reproduces the
//! single-rank interaction lists. Gathered operations see the same input in global-id order, and
//! the sums over ranks of the stepper are exact ([`crate::exact`]). Free space: bitwise. In a
//! periodic box the distributed evaluation's velocity differs in the last bit (its surface
//! correction sums the dipole moment per rank, then over the ranks); a re-interpolation (the
//! direct separable solve) multiplies such differences by the condition number of its lattice
//! system (about 3e5 at overlap 1), to about 1e-11. With `solver = "cg"` a flip of the iteration
//! count can move it by the CG tolerance instead.
//!
//! Failures: every operation that one rank may fail alone (a file on rank 0, a non-finite value)
//! is followed by [`agree`], so every rank stops with the message of the rank that failed and no
//! rank waits in a collective.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::particles::Particles;
use crate::reinterpolation::history::History;
use crate::reinterpolation::RbfReport;
use crate::rhs::{add_times, Derivatives, RightHandSide};
use crate::stepping::{State, StepReport, Stepper};
use rayon::prelude::*;
use std::time::Instant;
use vortex_domain::partition::{global_cube, Partition};
use vortex_domain::wire::{Reader, Writer};
use vortex_domain::{Comm, DistributedEvaluator, DomainParams, OwnedEvaluator, ReduceOp};
use vortex_fmm::{
    Backend, EvalParams, Evaluator, Fields, Method, PhaseTimes, PlanEvaluator, Sources, TargetSpec,
    Targets,
};

/// Agrees on the outcome of something every rank did (collective). When any rank failed, every
/// rank returns an error: the failing rank its own, the others [`Error::Rank`] with the rank and
/// message of the lowest failing rank (a rank that only saw another fail, such as
/// `DomainError::Remote`, is not chosen when a rank with the cause exists).
pub fn agree<T>(comm: &dyn Comm, r: Result<T>) -> Result<T> {
    if comm.size() == 1 {
        return r;
    }
    let mut w = Writer::new();
    if let Err(e) = &r {
        let (kind, origin, msg) = match e {
            Error::Rank { rank, msg } => (3u8, *rank, msg.clone()),
            e if e.is_remote() => (1, comm.rank(), e.to_string()),
            e => (2, comm.rank(), e.to_string()),
        };
        w.u8(kind);
        w.u64(origin as u64);
        w.buf.extend_from_slice(msg.as_bytes());
    }
    let all = comm.allgatherv(&w.buf);
    let pick = |k: u8| all.iter().position(|b| b.first() == Some(&k));
    let Some(chosen) = pick(2).or_else(|| pick(3)).or_else(|| pick(1)) else {
        return r;
    };
    let b = &all[chosen];
    let origin = u64::from_le_bytes(b[1..9].try_into().unwrap()) as usize;
    if origin == comm.rank() && r.is_err() {
        return r;
    }
    Err(Error::Rank {
        rank: origin,
        msg: String::from_utf8_lossy(&b[9..]).into_owned(),
    })
}

/// Rank 0's bytes on every rank. Collective.
pub fn broadcast_bytes(comm: &dyn Comm, bytes: &[u8]) -> Vec<u8> {
    if comm.size() == 1 {
        return bytes.to_vec();
    }
    let mine: &[u8] = if comm.rank() == 0 { bytes } else { &[] };
    comm.allgatherv(mine).swap_remove(0)
}

/// Rank 0's values on every rank. Collective.
pub fn broadcast_f64s(comm: &dyn Comm, v: &[f64]) -> Vec<f64> {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    broadcast_bytes(comm, &b)
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Fails on every rank unless every rank passed the same `text` (options, configuration).
/// Collective.
pub fn check_same(comm: &dyn Comm, what: &str, text: &str) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    let all = comm.allgatherv(text.as_bytes());
    if let Some(r) = all.iter().position(|b| b != &all[0]) {
        return Err(Error::Other(format!(
            "the ranks were started with different {what}: rank 0 has `{}`, rank {r} has `{}`",
            String::from_utf8_lossy(&all[0]),
            String::from_utf8_lossy(&all[r])
        )));
    }
    Ok(())
}

/// Largest payload of one collective of the gathers and scatters below (MPI counts are `i32`).
const MAX_MESSAGE: usize = 1 << 30;

/// Gathers rows of `width` values, produced by `row(i, out)` for this rank's items with global
/// ids `gid` (a permutation of `0..n` over all ranks), on rank 0 in global-id order (`n * width`
/// values); `None` on the other ranks. In rounds of at most 1 GiB. Collective.
pub fn gather_rows(
    comm: &dyn Comm,
    gid: &[u64],
    width: usize,
    n: usize,
    row: impl Fn(usize, &mut [f64]),
) -> Option<Vec<f64>> {
    let local = gid.len();
    let root = comm.rank() == 0;
    let mut out = if root { vec![0.0; n * width] } else { vec![] };
    if comm.size() == 1 {
        for (i, &g) in gid.iter().enumerate() {
            let g = g as usize;
            row(i, &mut out[g * width..(g + 1) * width]);
        }
        return Some(out);
    }
    let mut most = [local as f64];
    comm.allreduce_f64(&mut most, ReduceOp::Max);
    let chunk = (MAX_MESSAGE / (comm.size() * 8 * (width + 1))).max(1);
    let rounds = (most[0] as usize).div_ceil(chunk);
    let mut buf = vec![0.0; width];
    for k in 0..rounds {
        let mut w = Writer::new();
        let end = ((k + 1) * chunk).min(local);
        for (i, &g) in gid.iter().enumerate().take(end).skip(k * chunk) {
            w.u64(g);
            row(i, &mut buf);
            w.f64s(&buf);
        }
        let mut send = vec![Vec::new(); comm.size()];
        send[0] = w.buf;
        let recv = comm.alltoallv(&send);
        if root {
            for b in &recv {
                let mut rd = Reader::new(b);
                while !rd.done() {
                    let g = rd.u64() as usize;
                    rd.f64s_into(&mut out[g * width..(g + 1) * width]);
                }
            }
        }
    }
    root.then_some(out)
}

/// Scatters `n` rows of `width` values held by rank 0 in global-id order: rank `r` gets the ids
/// `n r / R .. n (r + 1) / R`. Returns this rank's ids and rows. `all` is ignored on the other
/// ranks; `n` must be known everywhere. In rounds of at most 1 GiB. Collective.
pub fn scatter_rows(
    comm: &dyn Comm,
    all: Option<Vec<f64>>,
    width: usize,
    n: usize,
) -> (Vec<u64>, Vec<f64>) {
    let (me, size) = (comm.rank(), comm.size());
    let lo = |r: usize| n * r / size;
    let gid: Vec<u64> = (lo(me) as u64..lo(me + 1) as u64).collect();
    if size == 1 {
        return (gid, all.expect("rank 0 holds the rows"));
    }
    let empty = Vec::new();
    let all = if me == 0 {
        all.as_ref().expect("rank 0 holds the rows")
    } else {
        &empty
    };
    let most = (0..size).map(|r| lo(r + 1) - lo(r)).max().unwrap_or(0);
    let chunk = (MAX_MESSAGE / (size * 8 * width.max(1))).max(1);
    let rounds = most.div_ceil(chunk);
    let mut out = Vec::with_capacity(gid.len() * width);
    for k in 0..rounds {
        let mut send = vec![Vec::new(); size];
        if me == 0 {
            for (r, s) in send.iter_mut().enumerate() {
                let b = (lo(r) + k * chunk).min(lo(r + 1));
                let e = (lo(r) + (k + 1) * chunk).min(lo(r + 1));
                let mut w = Writer::new();
                w.f64s(&all[b * width..e * width]);
                *s = w.buf;
            }
        }
        let recv = comm.alltoallv(&send);
        out.extend(
            recv[0]
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap())),
        );
    }
    (gid, out)
}

/// Values per particle in the gathers: position, strength, sigma, sigma0.
pub const PARTICLE_ROW: usize = 8;

fn particle_row(p: &Particles, i: usize, r: &mut [f64]) {
    r[0..3].copy_from_slice(&p.position[i]);
    r[3..6].copy_from_slice(&p.strength[i]);
    r[6] = p.sigma[i];
    r[7] = p.sigma0[i];
}

fn v3(r: &[f64]) -> [f64; 3] {
    [r[0], r[1], r[2]]
}

/// Particles and `extra` vector fields from rows of [`PARTICLE_ROW`] + 3 `extra` values.
fn from_rows(rows: &[f64], extra: usize) -> (Particles, Vec<Vec<[f64; 3]>>) {
    let width = PARTICLE_ROW + 3 * extra;
    let n = rows.len() / width.max(1);
    let mut p = Particles {
        position: Vec::with_capacity(n),
        strength: Vec::with_capacity(n),
        sigma: Vec::with_capacity(n),
        sigma0: Vec::with_capacity(n),
    };
    let mut ex: Vec<Vec<[f64; 3]>> = (0..extra).map(|_| Vec::with_capacity(n)).collect();
    for r in rows.chunks_exact(width) {
        p.position.push(v3(&r[0..3]));
        p.strength.push(v3(&r[3..6]));
        p.sigma.push(r[6]);
        p.sigma0.push(r[7]);
        for (k, e) in ex.iter_mut().enumerate() {
            e.push(v3(&r[PARTICLE_ROW + 3 * k..]));
        }
    }
    (p, ex)
}

fn rows_of(p: &Particles, extra: &[&[[f64; 3]]]) -> Vec<f64> {
    let width = PARTICLE_ROW + 3 * extra.len();
    let mut out = vec![0.0; p.len() * width];
    out.par_chunks_mut(width).enumerate().for_each(|(i, r)| {
        particle_row(p, i, r);
        for (k, e) in extra.iter().enumerate() {
            r[PARTICLE_ROW + 3 * k..PARTICLE_ROW + 3 * k + 3].copy_from_slice(&e[i]);
        }
    });
    out
}

fn permute<T: Copy + Send + Sync>(v: &[T], idx: &[usize]) -> Vec<T> {
    idx.par_iter().map(|&i| v[i]).collect()
}

/// Wall-clock seconds of the phases of the steps (this rank's).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Phases {
    /// Evaluations of the right-hand side, their communication included.
    pub fmm: f64,
    /// Of which the communication inside the distributed evaluation (partition, moving the
    /// particles, P2Pcomm, M2Lcomm).
    pub fmm_comm: f64,
    /// Moving the particles to the owners of their branch cells before each step.
    pub redistribute: f64,
    /// AB2/Heun arithmetic, core spreading, reductions.
    pub update: f64,
    /// RBF re-interpolation: gather, solve on rank 0, scatter.
    pub rbf: f64,
    pub steps: u64,
}

/// The right-hand side over ranks: `vortex_fmm::evaluate` on one rank, the `vortex-domain` crate's
/// distributed evaluation on several.
pub struct DistRhs<'c, B: Backend> {
    pub comm: &'c dyn Comm,
    pub backend: B,
    pub params: EvalParams,
    pub dparams: DomainParams,
    /// FMM phase times summed over all evaluations.
    pub times: PhaseTimes,
    /// Wall seconds of all evaluations and of their communication.
    pub seconds: f64,
    pub comm_seconds: f64,
    pub evaluations: u64,
    /// Step number, for error messages.
    pub step: u64,
    /// The engine of the evaluations of the particles at themselves on one rank (the
    /// planner's choice, e.g. the GPU uniform grid); `None`: the adaptive plan on `backend`.
    pub at_sources: Option<Box<dyn Evaluator + 'c>>,
}

fn targets_of(p: &Particles) -> Targets {
    Targets {
        position: p.position.clone(),
        strength: p.strength.clone(),
    }
}

impl<'c, B: Backend> DistRhs<'c, B> {
    pub fn new(comm: &'c dyn Comm, backend: B, params: EvalParams) -> Self {
        Self {
            comm,
            backend,
            params,
            dparams: DomainParams::default(),
            times: PhaseTimes::default(),
            seconds: 0.0,
            comm_seconds: 0.0,
            evaluations: 0,
            step: 0,
            at_sources: None,
        }
    }

    /// The fields of one evaluation that started at `t0`; its times and communication added
    /// to the totals (errors carry the step).
    fn record(
        &mut self,
        t0: Instant,
        ev: std::result::Result<vortex_fmm::Evaluation, vortex_fmm::FmmError>,
    ) -> Result<Fields> {
        let step = self.step;
        let ev = ev.map_err(|source| Error::Fmm { step, source })?;
        add_times(&mut self.times, &ev.times);
        self.comm_seconds += ev.comm.seconds();
        self.evaluations += 1;
        self.seconds += t0.elapsed().as_secs_f64();
        Ok(ev.fields)
    }

    /// Fields at this rank's `targets` (in their order) induced by the sources of all ranks, in
    /// any distribution: the adaptive plan on one rank, [`DistributedEvaluator`] on several.
    /// Collective.
    pub fn evaluate_at(&mut self, sources: &Sources, targets: &Targets) -> Result<Fields> {
        let t0 = Instant::now();
        let at = TargetSpec::Points(targets);
        let ev = if self.comm.size() == 1 {
            PlanEvaluator::new(&self.backend, self.params.clone())
                .and_then(|mut e| e.evaluate(sources, at))
        } else {
            DistributedEvaluator::new(self.comm, &self.backend, self.params.clone())
                .and_then(|mut e| e.evaluate(sources, at))
        };
        self.record(t0, ev)
    }

    /// Fields at the particles `p` at themselves, on one rank: [`DistRhs::at_sources`] when
    /// set (the GPU uniform grid), else the adaptive plan on the backend; with several ranks
    /// the distributed evaluation of [`DistRhs::evaluate_at`].
    pub fn evaluate_self(&mut self, p: &Particles) -> Result<Fields> {
        if self.comm.size() > 1 {
            return self.evaluate_at(&p.to_sources(), &targets_of(p));
        }
        let t0 = Instant::now();
        let sources = p.to_sources();
        let ev = match &mut self.at_sources {
            Some(e) => e.evaluate(&sources, TargetSpec::Sources),
            None => PlanEvaluator::new(&self.backend, self.params.clone())
                .and_then(|mut e| e.evaluate(&sources, TargetSpec::Sources)),
        };
        self.record(t0, ev)
    }

    /// Fields at the particles `p` (sources and targets) held at their owners under `part`,
    /// sorted by (`keys`, `gid`), through [`OwnedEvaluator`] (no redistribution). Collective.
    pub fn evaluate_owned(
        &mut self,
        part: &Partition,
        gid: &[u64],
        keys: &[u64],
        p: &Particles,
    ) -> Result<Fields> {
        if self.comm.size() == 1 {
            return self.evaluate_self(p);
        }
        if self.params.method == Method::Direct {
            return self.evaluate_at(&p.to_sources(), &targets_of(p));
        }
        let t0 = Instant::now();
        let (comm, params) = (self.comm, self.params.clone());
        let ev = OwnedEvaluator::new(comm, &self.backend, params, part, gid, keys)
            .and_then(|mut e| e.evaluate(&p.to_sources(), TargetSpec::Sources));
        self.record(t0, ev)
    }
}

impl<B: Backend> RightHandSide for DistRhs<'_, B> {
    fn eval(&mut self, p: &Particles) -> Result<Derivatives> {
        let f = self.evaluate_self(p)?;
        Ok(Derivatives {
            velocity: f.velocity,
            stretching: f.stretching,
        })
    }
}

/// A vortex-method simulation over the ranks of `comm` (one rank included): this rank's
/// particles with their global ids, the stepper and the distributed right-hand side.
pub struct DistSimulation<'c, B: Backend> {
    pub comm: &'c dyn Comm,
    pub config: Config,
    pub stepper: Stepper,
    /// This rank's particles and their AB2 history (in the order of `gid`); `step`,
    /// `step_reset` and `reinterpolations` are the same on every rank.
    pub state: State,
    /// Global ids of this rank's particles (`0..n_global` over all ranks).
    pub gid: Vec<u64>,
    pub n_global: usize,
    pub rhs: DistRhs<'c, B>,
    /// Partition and Morton keys while the particles sit at their owners, sorted by (key, gid).
    owned: Option<(Partition, Vec<u64>)>,
    current: Option<Derivatives>,
    pub phases: Phases,
    /// Report of the initial RBF solve (fresh start, rank 0).
    pub initial_report: Option<RbfReport>,
}

impl<'c, B: Backend> DistSimulation<'c, B> {
    fn assemble(
        comm: &'c dyn Comm,
        config: Config,
        backend: B,
        state: State,
        gid: Vec<u64>,
        n: usize,
    ) -> Self {
        let stepper = Stepper::from_config(&config);
        let rhs = DistRhs::new(comm, backend, config.eval_params());
        Self {
            comm,
            config,
            stepper,
            state,
            gid,
            n_global: n,
            rhs,
            owned: None,
            current: None,
            phases: Phases::default(),
            initial_report: None,
        }
    }

    /// A fresh start: rank 0 builds the initial particles (the RBF solve) and scatters them.
    /// Collective.
    pub fn new(comm: &'c dyn Comm, config: Config, backend: B) -> Result<Self> {
        check_same(comm, "configurations", &config.fingerprint())?;
        let built = if comm.rank() == 0 {
            crate::initial::build(&config).map(Some)
        } else {
            Ok(None)
        };
        let built = agree(comm, built)?;
        let (rows, report, n) = match built {
            Some((p, report)) => (Some(rows_of(&p, &[])), report, p.len()),
            None => (None, None, 0),
        };
        let n = broadcast_f64s(comm, &[n as f64])[0] as usize;
        let (gid, rows) = scatter_rows(comm, rows, PARTICLE_ROW, n);
        let (particles, _) = from_rows(&rows, 0);
        let state = State {
            step: 0,
            step_reset: 0,
            particles,
            previous: None,
            reinterpolations: 0,
        };
        let mut s = Self::assemble(comm, config, backend, state, gid, n);
        s.initial_report = report;
        Ok(s)
    }

    /// Continues from a global state in global-id order (a checkpoint) held by rank 0; the
    /// other ranks pass `None`. Works with any number of ranks. Collective.
    pub fn resume(
        comm: &'c dyn Comm,
        config: Config,
        backend: B,
        global: Option<State>,
    ) -> Result<Self> {
        check_same(comm, "configurations", &config.fingerprint())?;
        let head = match &global {
            Some(st) => {
                let n = st.particles.len();
                let prev = st
                    .previous
                    .as_ref()
                    .is_some_and(|d| d.velocity.len() == n && d.stretching.len() == n);
                vec![
                    st.step as f64,
                    st.step_reset as f64,
                    st.reinterpolations as f64,
                    if prev { 1.0 } else { 0.0 },
                    n as f64,
                ]
            }
            None => vec![0.0; 5],
        };
        let head = broadcast_f64s(comm, &head);
        let has_prev = head[3] == 1.0;
        let n = head[4] as usize;
        let extra = if has_prev { 2 } else { 0 };
        let rows = global.as_ref().map(|st| match (&st.previous, has_prev) {
            (Some(d), true) => rows_of(&st.particles, &[&d.velocity, &d.stretching]),
            _ => rows_of(&st.particles, &[]),
        });
        drop(global);
        let (gid, rows) = scatter_rows(comm, rows, PARTICLE_ROW + 3 * extra, n);
        let (particles, mut ex) = from_rows(&rows, extra);
        let previous = has_prev.then(|| {
            let stretching = ex.pop().unwrap();
            let velocity = ex.pop().unwrap();
            Derivatives {
                velocity,
                stretching,
            }
        });
        let state = State {
            step: head[0] as u64,
            step_reset: head[1] as u64,
            particles,
            previous,
            reinterpolations: head[2] as u64,
        };
        Ok(Self::assemble(comm, config, backend, state, gid, n))
    }

    pub fn t(&self) -> f64 {
        self.stepper.time(self.state.step)
    }

    /// Moves every particle (with its id, `sigma0` and AB2 history) to the owner of its branch
    /// cell under a partition rebuilt from the current positions, as
    /// [`vortex_domain::redistribute_particles`] does for the FMM sources, and sorts this rank's
    /// particles by (Morton key, global id). Collective.
    fn redistribute(&mut self) {
        let t0 = Instant::now();
        let comm = self.comm;
        let params = &self.rhs.params;
        let st = &mut self.state;
        if let Some(per) = &params.periodic {
            st.particles
                .position
                .par_iter_mut()
                .for_each(|x| *x = per.wrap(*x));
        }
        let cube = match &params.periodic {
            None => global_cube(comm, &[&st.particles.position]),
            Some(per) => vortex_fmm::tree::BoundingCube {
                lo: [-0.5 * per.box_length; 3],
                width: per.box_length,
            },
        };
        let mut keys: Vec<u64> = st
            .particles
            .position
            .par_iter()
            .map(|&x| vortex_fmm::tree::morton_key(cube.grid_coords(x)))
            .collect();
        let mut sorted = keys.clone();
        sorted.par_sort_unstable();
        let part = Partition::build(
            comm,
            cube,
            &sorted,
            &sorted,
            params.leaf_size,
            self.rhs.dparams.granularity,
        );
        drop(sorted);
        if comm.size() > 1 {
            let me = comm.rank();
            let prev = st.previous.take();
            let extra: Vec<&[[f64; 3]]> = match &prev {
                Some(d) => vec![&d.velocity, &d.stretching],
                None => vec![],
            };
            let width = PARTICLE_ROW + 3 * extra.len();
            let mut w: Vec<Writer> = (0..comm.size()).map(|_| Writer::new()).collect();
            let mut stay: Vec<usize> = Vec::new();
            let mut buf = vec![0.0; width];
            let p = &st.particles;
            for i in 0..p.len() {
                let r = part.owner_of(keys[i]);
                if r == me {
                    stay.push(i);
                    continue;
                }
                particle_row(p, i, &mut buf);
                for (k, e) in extra.iter().enumerate() {
                    buf[PARTICLE_ROW + 3 * k..PARTICLE_ROW + 3 * k + 3].copy_from_slice(&e[i]);
                }
                w[r].u64(self.gid[i]);
                w[r].u64(keys[i]);
                w[r].f64s(&buf);
            }
            let send: Vec<Vec<u8>> = w.into_iter().map(|w| w.buf).collect();
            let recv = comm.alltoallv(&send);
            let mut gid = permute(&self.gid, &stay);
            let mut nkeys = permute(&keys, &stay);
            let mut rows = Vec::with_capacity(stay.len() * width);
            for &i in &stay {
                particle_row(p, i, &mut buf);
                for (k, e) in extra.iter().enumerate() {
                    buf[PARTICLE_ROW + 3 * k..PARTICLE_ROW + 3 * k + 3].copy_from_slice(&e[i]);
                }
                rows.extend_from_slice(&buf);
            }
            for b in &recv {
                let mut rd = Reader::new(b);
                while !rd.done() {
                    gid.push(rd.u64());
                    nkeys.push(rd.u64());
                    rd.f64s_into(&mut buf);
                    rows.extend_from_slice(&buf);
                }
            }
            let (particles, mut ex) = from_rows(&rows, extra.len());
            st.particles = particles;
            st.previous = prev.map(|_| {
                let stretching = ex.pop().unwrap();
                let velocity = ex.pop().unwrap();
                Derivatives {
                    velocity,
                    stretching,
                }
            });
            self.gid = gid;
            keys = nkeys;
        }
        // (key, gid) order: the same global order whatever the number of ranks
        let gid = &self.gid;
        let mut idx: Vec<usize> = (0..gid.len()).collect();
        idx.par_sort_unstable_by_key(|&i| (keys[i], gid[i]));
        let p = &st.particles;
        st.particles = Particles {
            position: permute(&p.position, &idx),
            strength: permute(&p.strength, &idx),
            sigma: permute(&p.sigma, &idx),
            sigma0: permute(&p.sigma0, &idx),
        };
        if let Some(d) = &st.previous {
            st.previous = Some(Derivatives {
                velocity: permute(&d.velocity, &idx),
                stretching: permute(&d.stretching, &idx),
            });
        }
        self.gid = permute(&self.gid, &idx);
        let keys = permute(&keys, &idx);
        self.owned = Some((part, keys));
        self.phases.redistribute += t0.elapsed().as_secs_f64();
    }

    fn evaluate_current(&mut self) -> Result<Derivatives> {
        if self.owned.is_none() {
            self.redistribute();
        }
        self.rhs.step = self.state.step;
        let (s0, c0) = (self.rhs.seconds, self.rhs.comm_seconds);
        let (part, keys) = self.owned.as_ref().unwrap();
        let f = self
            .rhs
            .evaluate_owned(part, &self.gid, keys, &self.state.particles)?;
        self.phases.fmm += self.rhs.seconds - s0;
        self.phases.fmm_comm += self.rhs.comm_seconds - c0;
        Ok(Derivatives {
            velocity: f.velocity,
            stretching: f.stretching,
        })
    }

    /// `f_n` at this rank's particles (redistributed first, then evaluated once and cached).
    /// Collective.
    pub fn derivatives(&mut self) -> Result<&Derivatives> {
        if self.current.is_none() {
            let f = self.evaluate_current();
            self.current = Some(agree(self.comm, f)?);
        }
        Ok(self.current.as_ref().unwrap())
    }

    /// `[max|u|, max|s|/|alpha|]` of the current state over all ranks (for
    /// [`crate::health::check_step`]), after refusing a non-finite velocity or stretching with
    /// an error that names the particle, the method and the likely cause. Collective.
    pub fn step_measures(&mut self) -> Result<[f64; 2]> {
        self.derivatives()?;
        let f = self.current.as_ref().expect("evaluated");
        let p = &self.state.particles;
        let r = match crate::health::first_non_finite(f) {
            Some((what, i)) => {
                let reach = p
                    .position
                    .iter()
                    .flat_map(|x| x.iter())
                    .fold(0.0f64, |m, c| m.max(c.abs()));
                let params = &self.rhs.params;
                Err(Error::NonFiniteField {
                    step: self.state.step,
                    what: what.to_string(),
                    particle: self.gid[i],
                    position: p.position[i],
                    cause: format!(
                        "the {:?} evaluation (order {}, theta {}) of particles reaching |x| = \
                         {reach:.3e} gave NaN or Inf; a larger time step, a smaller core radius \
                         or coordinates that overflow the expansions are the usual causes",
                        params.method, params.order, params.theta
                    ),
                })
            }
            None => Ok(crate::health::local_measures(f, p)),
        };
        let mut m = agree(self.comm, r)?;
        self.comm.allreduce_f64(&mut m, ReduceOp::Max);
        Ok(m)
    }

    /// One time step (collective): `f_n`, the update, and the re-interpolation when due.
    pub fn step(&mut self) -> Result<StepReport> {
        self.derivatives()?;
        let f_n = self.current.take().unwrap();
        let r = self.step_with(f_n);
        agree(self.comm, r)
    }

    fn step_with(&mut self, f_n: Derivatives) -> Result<StepReport> {
        let t0 = Instant::now();
        let (s0, c0) = (self.rhs.seconds, self.rhs.comm_seconds);
        self.rhs.step = self.state.step;
        let comm = self.comm;
        let total = |p: &Particles| {
            // exact sums: the same bits for every number of ranks
            let mut parts = crate::exact::sums(p.len(), |i| p.strength[i]);
            let mut count = crate::exact::ExactSum::default();
            count.add(p.len() as f64);
            parts.push(count);
            let v = crate::exact::allreduce(comm, &parts);
            ([v[0], v[1], v[2]], v[3] as usize)
        };
        let (scheme, extra) = self
            .stepper
            .update(&mut self.state, f_n, &mut self.rhs, &total)?;
        self.owned = None;
        let p = &self.state.particles;
        let mut ratio = [p.max_core_ratio(), p.max_strength()];
        comm.allreduce_f64(&mut ratio, ReduceOp::Max);
        let fmm = self.rhs.seconds - s0;
        self.phases.fmm += fmm;
        self.phases.fmm_comm += self.rhs.comm_seconds - c0;
        self.phases.update += (t0.elapsed().as_secs_f64() - fmm).max(0.0);
        self.phases.steps += 1;
        let st = &self.state;
        let mut reinterpolation = None;
        let since = st.step - st.step_reset;
        let strain = self.stepper.strain(since, ratio[1]);
        if self.stepper.reinterpolation_due(since, ratio[0], strain) {
            let t1 = Instant::now();
            reinterpolation = Some(self.reinterpolate()?);
            self.phases.rbf += t1.elapsed().as_secs_f64();
        }
        Ok(StepReport {
            scheme,
            extra_evaluations: extra,
            reinterpolation,
        })
    }

    /// RBF re-interpolation of all particles on rank 0 (gathered in global-id order), the fresh
    /// particles scattered back and numbered in lattice order. Returns rank 0's report (a
    /// default one elsewhere). Collective.
    fn reinterpolate(&mut self) -> Result<RbfReport> {
        let st = &self.state;
        let carry = self.stepper.history == History::Carry && st.previous.is_some();
        let all = match (&st.previous, carry) {
            (Some(d), true) => self.gather(&[&d.velocity, &d.stretching]),
            _ => self.gather(&[]),
        };
        let solved = match all {
            Some((old, mut ex)) => {
                let previous = (ex.len() == 2).then(|| {
                    let stretching = ex.pop().unwrap();
                    let velocity = ex.pop().unwrap();
                    Derivatives {
                        velocity,
                        stretching,
                    }
                });
                let whole = State {
                    step: st.step,
                    step_reset: st.step_reset,
                    particles: old,
                    previous,
                    reinterpolations: st.reinterpolations,
                };
                self.stepper
                    .reinterpolate(&whole)
                    .and_then(|(fresh, history, r)| {
                        if fresh.is_empty() {
                            Err(Error::Rbf(format!(
                                "no particle left after re-interpolation at step {}",
                                self.state.step
                            )))
                        } else {
                            Ok(Some((fresh, history, r)))
                        }
                    })
            }
            None => Ok(None),
        };
        let solved = agree(self.comm, solved)?;
        let extra = if carry { 2 } else { 0 };
        let (rows, report, n) = match solved {
            Some((p, h, r)) => {
                let rows = match &h {
                    Some(h) => rows_of(&p, &[&h.velocity, &h.stretching]),
                    None => rows_of(&p, &[]),
                };
                (Some(rows), r, p.len())
            }
            None => (None, RbfReport::default(), 0),
        };
        let n = broadcast_f64s(self.comm, &[n as f64])[0] as usize;
        let (gid, rows) = scatter_rows(self.comm, rows, PARTICLE_ROW + 3 * extra, n);
        let (particles, mut ex) = from_rows(&rows, extra);
        self.state.particles = particles;
        self.gid = gid;
        self.n_global = n;
        self.stepper.reset(&mut self.state);
        if carry {
            let stretching = ex.pop().unwrap();
            let velocity = ex.pop().unwrap();
            self.state.previous = Some(Derivatives {
                velocity,
                stretching,
            });
        }
        self.owned = None;
        self.current = None;
        Ok(report)
    }

    /// All particles in global-id order on rank 0, with the per-particle vector fields `extra`
    /// (aligned with this rank's particles); `None` on the other ranks. Collective.
    pub fn gather(&self, extra: &[&[[f64; 3]]]) -> Option<(Particles, Vec<Vec<[f64; 3]>>)> {
        let p = &self.state.particles;
        let width = PARTICLE_ROW + 3 * extra.len();
        let rows = gather_rows(self.comm, &self.gid, width, self.n_global, |i, r| {
            particle_row(p, i, r);
            for (k, e) in extra.iter().enumerate() {
                r[PARTICLE_ROW + 3 * k..PARTICLE_ROW + 3 * k + 3].copy_from_slice(&e[i]);
            }
        })?;
        Some(from_rows(&rows, extra.len()))
    }

    /// The global state in global-id order on rank 0 (what a checkpoint holds, independent of
    /// the number of ranks); `None` on the other ranks. Collective.
    pub fn gather_state(&self) -> Option<State> {
        let st = &self.state;
        let (p, mut ex) = match &st.previous {
            Some(d) => self.gather(&[&d.velocity, &d.stretching])?,
            None => self.gather(&[])?,
        };
        let previous = st.previous.as_ref().map(|_| {
            let stretching = ex.pop().unwrap();
            let velocity = ex.pop().unwrap();
            Derivatives {
                velocity,
                stretching,
            }
        });
        Some(State {
            step: st.step,
            step_reset: st.step_reset,
            particles: p,
            previous,
            reinterpolations: st.reinterpolations,
        })
    }

    /// The first non-finite value of any rank, as a message naming the global id. Collective.
    pub fn check_finite(&self, last_checkpoint: &str) -> Result<()> {
        let r = match self.state.particles.first_non_finite() {
            Some((what, i)) => Err(Error::BlowUp {
                step: self.state.step,
                t: self.t(),
                what: format!("{what} of particle {} is not finite", self.gid[i]),
                last_checkpoint: last_checkpoint.to_string(),
            }),
            None => Ok(()),
        };
        agree(self.comm, r)
    }

    pub fn take_phases(&mut self) -> Phases {
        std::mem::take(&mut self.phases)
    }
}

impl<B: Backend> crate::simulator::Simulator for DistSimulation<'_, B> {
    fn comm(&self) -> &dyn Comm {
        self.comm
    }
    fn config(&self) -> &Config {
        &self.config
    }
    fn step_index(&self) -> u64 {
        self.state.step
    }
    fn t(&self) -> f64 {
        DistSimulation::t(self)
    }
    fn n_global(&self) -> usize {
        self.n_global
    }
    fn reinterpolations(&self) -> u64 {
        self.state.reinterpolations
    }
    fn smallest_core(&self) -> f64 {
        let mut m = [-self
            .state
            .particles
            .sigma
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)];
        self.comm.allreduce_f64(&mut m, ReduceOp::Max);
        -m[0]
    }
    fn take_initial_report(&mut self) -> Option<RbfReport> {
        self.initial_report.take()
    }
    fn step_measures(&mut self) -> Result<[f64; 2]> {
        DistSimulation::step_measures(self)
    }
    fn diagnostics(
        &mut self,
        grid: Option<usize>,
        _with_field: bool,
    ) -> Result<Option<crate::diagnostics::Diagnostics>> {
        let f = self.derivatives()?.clone();
        let d = crate::diagnostics::compute(self, &f, grid);
        agree(self.comm, d)
    }
    fn snapshot(&mut self) -> Result<Option<(Particles, Vec<[f64; 3]>)>> {
        self.derivatives()?;
        let f = self.current.as_ref().expect("evaluated");
        Ok(self
            .gather(&[&f.velocity])
            .map(|(p, mut v)| (p, v.pop().unwrap_or_default())))
    }
    fn gather_state(&mut self) -> Result<Option<State>> {
        Ok(DistSimulation::gather_state(self))
    }
    fn step(&mut self) -> Result<StepReport> {
        DistSimulation::step(self)
    }
    fn check_finite(&mut self, last_checkpoint: &str) -> Result<()> {
        DistSimulation::check_finite(self, last_checkpoint)
    }
    fn phases(&self) -> Phases {
        self.phases
    }
    fn describe(&self) -> String {
        match &self.rhs.at_sources {
            Some(e) => format!(
                "{} ({} for the particles at themselves)",
                self.rhs.backend.name(),
                e.describe()
            ),
            None => self.rhs.backend.name(),
        }
    }
}
