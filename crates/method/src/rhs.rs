//! The right-hand side of the particle ODEs: `dx/dt = u(x)` (Eq. 5, 7) and
//! `d alpha/dt = (alpha . grad) u` (classical stretching, Eq. 9), both from one evaluation of the
//! regularised Biot-Savart law per stage. [`RightHandSide`] is what the stepper calls; the
//! vortex method's one implementation is [`crate::parallel::DistRhs`] (an [`vortex_fmm::Evaluator`]
//! chosen by the planner, over the ranks of a `vortex_domain::Comm`, one process included); tests
//! also drive the stepper with model ODEs through it.

use crate::error::Result;
use crate::particles::Particles;
use serde::{Deserialize, Serialize};
use vortex_fmm::PhaseTimes;

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

/// Adds the phase times of one evaluation to a running total.
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
