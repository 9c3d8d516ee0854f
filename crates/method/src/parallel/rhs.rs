//! [`DistRhs`]: the right-hand side of the vortex method over the ranks (the velocity and
//! stretching of the particles, core paper Eq. 5-9, through the distributed FMM).

use crate::error::{Error, Result};
use crate::particles::Particles;
use crate::rhs::{add_times, Derivatives, RightHandSide};
use std::sync::Arc;
use std::time::Instant;
use vortex_domain::partition::Partition;
use vortex_domain::{Comm, DistributedEvaluator, DomainParams, OwnedEvaluator};
use vortex_fmm::{
    Backend, EvalParams, Evaluator, Fields, Method, PhaseTimes, PlanEvaluator, Sources, TargetSpec,
    Targets,
};

/// The right-hand side over ranks: `vortex_fmm::evaluate` on one rank, the `vortex-domain` crate's
/// distributed evaluation on several. The engines are chosen once, at construction, from the
/// number of ranks: every evaluation goes straight to the one that serves it.
pub struct DistRhs<'c, B: Backend + 'c> {
    pub comm: &'c dyn Comm,
    /// The backend every engine of this right-hand side drives.
    pub backend: Arc<B>,
    /// The parameters the engines were built with.
    params: EvalParams,
    pub dparams: DomainParams,
    /// FMM phase times summed over all evaluations.
    pub times: PhaseTimes,
    /// Wall seconds of all evaluations and of their communication.
    pub seconds: f64,
    pub comm_seconds: f64,
    pub evaluations: u64,
    /// Step number, for error messages.
    pub step: u64,
    /// The engine of separate targets (the diagnostics grid, the Heun stage on several ranks):
    /// the adaptive plan on `backend` on one rank, [`DistributedEvaluator`] on several.
    at_points: Box<dyn Evaluator + 'c>,
    /// The engine of the particles at themselves.
    at_self: SelfEngine<'c>,
}

/// How the particles at themselves are evaluated (chosen at construction).
enum SelfEngine<'c> {
    /// One rank: the adaptive plan on the backend, or the planner's engine of the particles at
    /// themselves ([`DistRhs::use_at_sources`]: e.g. the GPU uniform grid); `planned` says which.
    OneRank {
        engine: Box<dyn Evaluator + 'c>,
        planned: bool,
    },
    /// Several ranks: as separate targets through `at_points`, or at their owners without
    /// a redistribution ([`OwnedEvaluator`], [`DistRhs::evaluate_owned`]).
    Ranks,
}

fn targets_of(p: &Particles) -> Targets {
    Targets {
        position: p.position.clone(),
        strength: p.strength.clone(),
    }
}

impl<'c, B: Backend + 'c> DistRhs<'c, B> {
    /// The right-hand side of `params` on `backend` over the ranks of `comm` (checks the
    /// parameters: the error names the bad one).
    pub fn new(comm: &'c dyn Comm, backend: B, params: EvalParams) -> Result<Self> {
        let backend = Arc::new(backend);
        let fmm = |source| Error::Fmm { step: 0, source };
        let (at_points, at_self): (Box<dyn Evaluator + 'c>, _) = if comm.size() == 1 {
            let plan = |b: &Arc<B>| PlanEvaluator::new(b.clone(), params.clone()).map_err(fmm);
            let engine = Box::new(plan(&backend)?);
            (
                Box::new(plan(&backend)?),
                SelfEngine::OneRank {
                    engine,
                    planned: false,
                },
            )
        } else {
            let dist = DistributedEvaluator::new(comm, backend.clone(), params.clone());
            (Box::new(dist.map_err(fmm)?), SelfEngine::Ranks)
        };
        Ok(Self {
            comm,
            backend,
            params,
            dparams: DomainParams::default(),
            times: PhaseTimes::default(),
            seconds: 0.0,
            comm_seconds: 0.0,
            evaluations: 0,
            step: 0,
            at_points,
            at_self,
        })
    }

    /// The parameters of the evaluations.
    pub fn params(&self) -> &EvalParams {
        &self.params
    }

    /// Evaluates the particles at themselves with `engine` (the planner's choice, e.g. the GPU
    /// uniform grid) instead of the adaptive plan; only one rank evaluates them at themselves:
    /// on several ranks `engine` is refused.
    pub fn use_at_sources(&mut self, engine: Box<dyn Evaluator + 'c>) -> Result<()> {
        match self.at_self {
            SelfEngine::OneRank { .. } => {
                self.at_self = SelfEngine::OneRank {
                    engine,
                    planned: true,
                };
                Ok(())
            }
            SelfEngine::Ranks => Err(Error::Other(format!(
                "{} for the particles at themselves: an engine of one rank, and this run has {}",
                engine.describe(),
                self.comm.size()
            ))),
        }
    }

    /// The planner's engine of the particles at themselves, when one was given
    /// ([`DistRhs::use_at_sources`]).
    pub fn at_sources(&self) -> Option<&dyn Evaluator> {
        match &self.at_self {
            SelfEngine::OneRank {
                engine,
                planned: true,
            } => Some(engine.as_ref()),
            _ => None,
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
        let ev = self
            .at_points
            .evaluate(sources, TargetSpec::Points(targets));
        self.record(t0, ev)
    }

    /// Fields at the particles `p` at themselves: on one rank the engine of
    /// [`DistRhs::use_at_sources`] when given (the GPU uniform grid), else the adaptive plan on
    /// the backend; with several ranks the distributed evaluation of [`DistRhs::evaluate_at`].
    pub fn evaluate_self(&mut self, p: &Particles) -> Result<Fields> {
        let SelfEngine::OneRank { engine, .. } = &mut self.at_self else {
            return self.evaluate_at(&p.to_sources(), &targets_of(p));
        };
        let t0 = Instant::now();
        let ev = engine.evaluate(&p.to_sources(), TargetSpec::Sources);
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
        if matches!(self.at_self, SelfEngine::OneRank { .. }) {
            return self.evaluate_self(p);
        }
        if self.params.method == Method::Direct {
            return self.evaluate_at(&p.to_sources(), &targets_of(p));
        }
        let t0 = Instant::now();
        let (comm, params) = (self.comm, self.params.clone());
        let ev = OwnedEvaluator::new(comm, &*self.backend, params, part, gid, keys)
            .and_then(|mut e| e.evaluate(&p.to_sources(), TargetSpec::Sources));
        self.record(t0, ev)
    }
}

impl<'c, B: Backend + 'c> RightHandSide for DistRhs<'c, B> {
    fn eval(&mut self, p: &Particles) -> Result<Derivatives> {
        let f = self.evaluate_self(p)?;
        Ok(Derivatives {
            velocity: f.velocity,
            stretching: f.stretching,
        })
    }
}
