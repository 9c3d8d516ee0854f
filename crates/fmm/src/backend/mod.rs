//! The compute backend interface.
//!
//! The driver ([`crate::evaluators`]) builds a [`Plan`] (trees and interaction lists, on the CPU)
//! and hands it to a backend, which runs the phases of one evaluation on its own data:
//! `prepare` (upload sorted particles), `upward` (P2M, M2M), `downward` (M2L or M2P, L2L, L2P),
//! `near_field` (P2P) and `fields` (download). Backends keep particles and expansions in their
//! own memory between phases (`State`), so a GPU backend moves only what must cross the bus.
//! The MPI decomposition (`vortex-domain`) inserts the exchange of halo particles and remote
//! multipoles between `upward` and `downward` (see `docs/ARCHITECTURE.md`).

pub mod cpu;

use crate::far::Expansions;
pub use crate::plan::{direction_key, FarField, Plan};
use crate::{Fields, FmmError, Sources, Targets};
use std::time::Instant;

/// Wall-clock seconds spent in each phase of one evaluation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PhaseTimes {
    pub tree: f64,
    pub lists: f64,
    pub p2m: f64,
    pub m2m: f64,
    pub m2l: f64,
    pub m2p: f64,
    pub l2l: f64,
    pub l2p: f64,
    pub p2p: f64,
    pub transfer: f64,
    pub total: f64,
}

impl PhaseTimes {
    /// `(name, seconds)` for every phase, in pipeline order.
    pub fn entries(&self) -> [(&'static str, f64); 11] {
        [
            ("tree", self.tree),
            ("lists", self.lists),
            ("P2M", self.p2m),
            ("M2M", self.m2m),
            ("M2L", self.m2l),
            ("M2P", self.m2p),
            ("L2L", self.l2l),
            ("L2P", self.l2p),
            ("P2P", self.p2p),
            ("transfer", self.transfer),
            ("total", self.total),
        ]
    }
}

/// Times a closure and adds the elapsed seconds to `slot`.
pub fn timed<T>(slot: &mut f64, f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let r = f();
    *slot += t0.elapsed().as_secs_f64();
    r
}

/// A compute backend: the CPU reference ([`cpu::CpuBackend`]) or a GPU one.
///
/// Sources and targets handed to `prepare` are already in the trees' sorted order; `fields`
/// returns velocity and stretching (with the `1/(4 pi)` factor) in that same order.
pub trait Backend: Send + Sync {
    type State;

    fn name(&self) -> String;
    fn prepare(
        &self,
        plan: &Plan,
        sources: &Sources,
        targets: &Targets,
    ) -> Result<Self::State, FmmError>;
    fn upward(
        &self,
        plan: &Plan,
        state: &mut Self::State,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError>;
    fn downward(
        &self,
        plan: &Plan,
        state: &mut Self::State,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError>;
    fn near_field(
        &self,
        plan: &Plan,
        state: &mut Self::State,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError>;
    fn fields(&self, plan: &Plan, state: Self::State) -> Result<Fields, FmmError>;
    /// The multipole expansions of source cells `cells` (after `upward`), in the order of
    /// `cells`, typed by the plan's far field ([`crate::far::Expansions`]).
    fn multipoles(
        &self,
        plan: &Plan,
        state: &Self::State,
        cells: &[usize],
    ) -> Result<Expansions, FmmError>;
    /// Adds local expansions to target cells before `downward` (periodic far images, and remote
    /// contributions under MPI); `data` holds one expansion per cell, in the order of `cells`.
    fn add_locals(
        &self,
        plan: &Plan,
        state: &mut Self::State,
        cells: &[usize],
        data: &Expansions,
    ) -> Result<(), FmmError>;
    /// Overwrites the multipole expansions of source cells `cells` after `upward` (cells of an
    /// MPI rank's locally essential tree whose multipoles were computed elsewhere); `data`
    /// holds one expansion per cell, in the order of `cells`. Backends without MPI support may keep the
    /// default, which refuses.
    fn set_multipoles(
        &self,
        plan: &Plan,
        state: &mut Self::State,
        cells: &[usize],
        data: &Expansions,
    ) -> Result<(), FmmError> {
        let _ = (plan, state, cells, data);
        Err(FmmError::BadParameter {
            name: "backend",
            value: self.name(),
            reason: "this backend cannot import remote multipoles (set_multipoles)",
        })
    }
}

/// A backend behind a pointer is a backend: a borrowed one (an evaluator drives a backend that
/// its owner keeps) or a shared one (`Arc`: several evaluators held at once drive one backend).
macro_rules! pointer_backend {
    ($($ptr:ty),*) => {$(
impl<B: Backend> Backend for $ptr {
    type State = B::State;

    fn name(&self) -> String {
        (**self).name()
    }
    fn prepare(&self, plan: &Plan, s: &Sources, t: &Targets) -> Result<B::State, FmmError> {
        (**self).prepare(plan, s, t)
    }
    fn upward(&self, plan: &Plan, st: &mut B::State, t: &mut PhaseTimes) -> Result<(), FmmError> {
        (**self).upward(plan, st, t)
    }
    fn downward(&self, plan: &Plan, st: &mut B::State, t: &mut PhaseTimes) -> Result<(), FmmError> {
        (**self).downward(plan, st, t)
    }
    fn near_field(
        &self,
        plan: &Plan,
        st: &mut B::State,
        t: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        (**self).near_field(plan, st, t)
    }
    fn fields(&self, plan: &Plan, st: B::State) -> Result<Fields, FmmError> {
        (**self).fields(plan, st)
    }
    fn multipoles(
        &self,
        plan: &Plan,
        st: &B::State,
        cells: &[usize],
    ) -> Result<Expansions, FmmError> {
        (**self).multipoles(plan, st, cells)
    }
    fn add_locals(
        &self,
        plan: &Plan,
        st: &mut B::State,
        cells: &[usize],
        data: &Expansions,
    ) -> Result<(), FmmError> {
        (**self).add_locals(plan, st, cells, data)
    }
    fn set_multipoles(
        &self,
        plan: &Plan,
        st: &mut B::State,
        cells: &[usize],
        data: &Expansions,
    ) -> Result<(), FmmError> {
        (**self).set_multipoles(plan, st, cells, data)
    }
}
    )*};
}

pointer_backend!(&B, std::sync::Arc<B>);
