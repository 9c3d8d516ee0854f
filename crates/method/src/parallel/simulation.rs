//! [`DistSimulation`]: the particles of this rank, the stepper and the distributed right-hand
//! side; the steps, the redistribution, the re-interpolation on rank 0, the gathers, and the
//! [`crate::simulator::Simulator`] the run loop drives.

use super::*;
use crate::collective::*;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::particles::Particles;
use crate::reinterpolation::history::History;
use crate::reinterpolation::RbfReport;
use crate::rhs::Derivatives;
use crate::stepping::{State, StepReport, Stepper};
use rayon::prelude::*;
use std::time::Instant;
use vortex_domain::partition::{global_cube, Partition};
use vortex_domain::wire::{Reader, Writer};
use vortex_domain::{Comm, ReduceOp};
use vortex_fmm::Backend;

/// A vortex-method simulation over the ranks of `comm` (one rank included): this rank's
/// particles with their global ids, the stepper and the distributed right-hand side.
pub struct DistSimulation<'c, B: Backend + 'c> {
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

impl<'c, B: Backend + 'c> DistSimulation<'c, B> {
    fn assemble(
        comm: &'c dyn Comm,
        config: Config,
        backend: B,
        state: State,
        gid: Vec<u64>,
        n: usize,
    ) -> Result<Self> {
        let stepper = Stepper::from_config(&config);
        let rhs = DistRhs::new(comm, backend, config.eval_params())?;
        Ok(Self {
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
        })
    }

    /// A fresh start: rank 0 builds the initial particles (the RBF solve) and scatters them.
    /// Collective.
    pub fn new(comm: &'c dyn Comm, config: Config, backend: B) -> Result<Self> {
        check_same(comm, "configurations", &config.fingerprint())?;
        check_spread_memory(comm, &config)?;
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
        let state = State::initial(particles);
        let mut s = Self::assemble(comm, config, backend, state, gid, n)?;
        s.initial_report = report;
        Ok(s)
    }

    /// Continues from this rank's part of a state (a checkpoint read on any number of ranks):
    /// its particles with their global ids, in any distribution over the ranks (the first
    /// evaluation moves every particle to the owner of its branch cell and orders them by
    /// (Morton key, global id), so the steps do not depend on it). Collective.
    pub fn resume(
        comm: &'c dyn Comm,
        config: Config,
        backend: B,
        local: LocalState,
    ) -> Result<Self> {
        check_same(comm, "configurations", &config.fingerprint())?;
        check_spread_memory(comm, &config)?;
        let LocalState {
            state,
            ids,
            n_global,
        } = local;
        Self::assemble(comm, config, backend, state, ids, n_global)
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
        let params = self.rhs.params();
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
                let params = self.rhs.params();
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
        gather_particles(
            self.comm,
            &self.gid,
            self.n_global,
            &self.state.particles,
            extra,
        )
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

impl<'c, B: Backend + 'c> crate::simulator::Simulator for DistSimulation<'c, B> {
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
        let d = super::diagnostics::compute(self, &f, grid);
        agree(self.comm, d)
    }
    fn snapshot(&mut self) -> Result<Option<(Particles, Vec<[f64; 3]>)>> {
        self.derivatives()?;
        let f = self.current.as_ref().expect("evaluated");
        Ok(self
            .gather(&[&f.velocity])
            .map(|(p, mut v)| (p, v.pop().unwrap_or_default())))
    }
    fn local_state(&mut self) -> Result<LocalState> {
        Ok(LocalState {
            state: self.state.clone(),
            ids: self.gid.clone(),
            n_global: self.n_global,
        })
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
        match self.rhs.at_sources() {
            Some(e) => format!(
                "{} ({} for the particles at themselves)",
                self.rhs.backend.name(),
                e.describe()
            ),
            None => self.rhs.backend.name(),
        }
    }
}

/// Refuses, before the run, a spreading grid (`reinterpolation.sums`) that rank 0, where the
/// re-interpolation runs, cannot hold. Collective.
fn check_spread_memory(comm: &dyn Comm, config: &Config) -> Result<()> {
    let r = match (comm.rank(), config.periodic(), config.lattice_n()) {
        (0, Some(p), Some(n)) => crate::reinterpolation::spreading::check_host_memory(
            n,
            p.box_length,
            config.sigma0(),
            &config.reinterpolation.sums,
        )
        .map_err(|e| Error::Memory(e.to_string())),
        _ => Ok(()),
    };
    agree(comm, r)
}
