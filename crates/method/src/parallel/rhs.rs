//! [`DistRhs`]: the right-hand side of the vortex method over the ranks (the velocity and
//! stretching of the particles, core paper Eq. 5-9, through the distributed FMM).

use crate::error::{Error, Result};
use crate::particles::Particles;
use crate::rhs::{add_times, Derivatives, RightHandSide};
use std::time::Instant;
use vortex_domain::partition::Partition;
use vortex_domain::{Comm, DistributedEvaluator, DomainParams, OwnedEvaluator};
use vortex_fmm::{
    Backend, EvalParams, Evaluator, Fields, Method, PhaseTimes, PlanEvaluator, Sources, TargetSpec,
    Targets,
};

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
