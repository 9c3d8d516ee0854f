//! The right-hand side of the particle ODEs: `dx/dt = u(x)` (Eq. 5, 7) and
//! `d alpha/dt = (alpha . grad) u` (classical stretching, Eq. 9), both from one evaluation of the
//! regularised Biot-Savart law per stage, through an [`fmm::Evaluator`] (the adaptive plan on
//! the backend, [`fmm::PlanEvaluator`]). The method (direct, treecode, FMM), order, opening
//! angle and periodic images come from [`fmm::EvalParams`]; the backend is any [`fmm::Backend`].

use crate::error::{Error, Result};
use crate::particles::Particles;
use fmm::{Backend, EvalParams, Evaluator, PhaseTimes, PlanEvaluator, TargetSpec, Targets};
use serde::{Deserialize, Serialize};

/// `dx/dt` and `d alpha/dt` of every particle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Derivatives {
    pub velocity: Vec<[f64; 3]>,
    pub stretching: Vec<[f64; 3]>,
}

/// Anything that gives the derivatives of a particle state (the FMM, or a model ODE in tests).
pub trait RightHandSide {
    fn eval(&mut self, p: &Particles) -> Result<Derivatives>;
}

/// The vortex-method right-hand side through the adaptive plan's [`fmm::Evaluator`].
pub struct FmmRhs<B: Backend> {
    pub backend: B,
    pub params: EvalParams,
    /// Phase times summed over all evaluations since the last [`FmmRhs::take_times`].
    pub times: PhaseTimes,
    pub evaluations: u64,
    /// Step number, for error messages.
    pub step: u64,
}

impl<B: Backend> FmmRhs<B> {
    pub fn new(backend: B, params: EvalParams) -> Self {
        Self {
            backend,
            params,
            times: PhaseTimes::default(),
            evaluations: 0,
            step: 0,
        }
    }

    /// Velocity (and stretching of `targets.strength`) induced by `p` at arbitrary targets.
    pub fn evaluate_at(&mut self, p: &Particles, targets: &Targets) -> Result<fmm::Fields> {
        let ev = self
            .evaluator()
            .and_then(|mut e| e.evaluate(&p.to_sources(), TargetSpec::Points(targets)));
        self.record(ev)
    }

    /// The fields of one evaluation, its times added to the totals (errors carry the step).
    fn record(
        &mut self,
        ev: std::result::Result<fmm::Evaluation, fmm::FmmError>,
    ) -> Result<fmm::Fields> {
        let ev = ev.map_err(|source| Error::Fmm {
            step: self.step,
            source,
        })?;
        add_times(&mut self.times, &ev.times);
        self.evaluations += 1;
        Ok(ev.fields)
    }

    /// The evaluator over this right-hand side's backend and parameters.
    fn evaluator(&self) -> std::result::Result<PlanEvaluator<&B>, fmm::FmmError> {
        PlanEvaluator::new(&self.backend, self.params.clone())
    }

    /// Returns and resets the accumulated phase times.
    pub fn take_times(&mut self) -> PhaseTimes {
        std::mem::take(&mut self.times)
    }
}

impl<B: Backend> RightHandSide for FmmRhs<B> {
    /// The particles at themselves ([`TargetSpec::Sources`]).
    fn eval(&mut self, p: &Particles) -> Result<Derivatives> {
        let ev = self
            .evaluator()
            .and_then(|mut e| e.evaluate(&p.to_sources(), TargetSpec::Sources));
        let f = self.record(ev)?;
        Ok(Derivatives {
            velocity: f.velocity,
            stretching: f.stretching,
        })
    }
}

pub fn add_times(acc: &mut PhaseTimes, t: &PhaseTimes) {
    acc.tree += t.tree;
    acc.lists += t.lists;
    acc.p2m += t.p2m;
    acc.m2m += t.m2m;
    acc.m2l += t.m2l;
    acc.m2p += t.m2p;
    acc.l2l += t.l2l;
    acc.l2p += t.l2p;
    acc.p2p += t.p2p;
    acc.transfer += t.transfer;
    acc.total += t.total;
}
