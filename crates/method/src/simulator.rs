//! What the run loop ([`crate::run::run`]) asks of a simulation, whatever holds its state:
//! the particles of the ranks on the host ([`crate::parallel::DistSimulation`]) or one GPU for
//! the whole run (the `vortex-resident` crate). The loop decides when to take diagnostics, snapshots
//! and checkpoints, checks the step's health and the energy, and writes the outputs; the
//! implementor takes the steps and hands out the state when asked (each rank its part for the
//! pieces of a checkpoint, or the whole on rank 0).

use crate::collective::LocalState;
use crate::config::Config;
use crate::diagnostics::Diagnostics;
use crate::error::Result;
use crate::particles::Particles;
use crate::reinterpolation::RbfReport;
use crate::stepping::{State, StepReport};
use vortex_domain::Comm;

/// One vortex-method simulation as the run loop drives it. Every method is collective over
/// [`Simulator::comm`]; `Option` results are `Some` on rank 0 only.
pub trait Simulator {
    fn comm(&self) -> &dyn Comm;
    fn config(&self) -> &Config;
    /// Steps taken (`t = step dt`).
    fn step_index(&self) -> u64;
    fn t(&self) -> f64;
    /// Particles over all ranks.
    fn n_global(&self) -> usize;
    fn reinterpolations(&self) -> u64;
    /// The smallest core radius (the spacing for the stability measures of free-space runs).
    fn smallest_core(&self) -> f64;
    /// The report of the initial RBF solve (a fresh start), once.
    fn take_initial_report(&mut self) -> Option<RbfReport>;
    /// `[max|u|, max|s|/|alpha|]` of the current state (for [`crate::health::check_step`]),
    /// after refusing a non-finite velocity or stretching with the particle's id.
    fn step_measures(&mut self) -> Result<[f64; 2]>;
    /// The diagnostics of the current state (`grid`: points per side of the periodic grid;
    /// `with_field`: keep the grid velocity in the result, for a grid snapshot).
    fn diagnostics(&mut self, grid: Option<usize>, with_field: bool)
        -> Result<Option<Diagnostics>>;
    /// The particles in global-id order with their velocities (snapshots).
    fn snapshot(&mut self) -> Result<Option<(Particles, Vec<[f64; 3]>)>>;
    /// This rank's part of the state with the global ids of its particles (what its piece of
    /// a checkpoint holds). Not collective.
    fn local_state(&mut self) -> Result<LocalState>;
    /// The global state in global-id order (what a one-rank checkpoint holds).
    fn gather_state(&mut self) -> Result<Option<State>> {
        let local = self.local_state();
        let local = crate::collective::agree(self.comm(), local)?;
        Ok(local.into_global(self.comm()))
    }
    /// One time step: the update and the re-interpolation when due.
    fn step(&mut self) -> Result<StepReport>;
    /// Refuses a non-finite position, strength or core radius (naming the particle).
    fn check_finite(&mut self, last_checkpoint: &str) -> Result<()>;
    /// Seconds spent in each phase so far.
    fn phases(&self) -> Phases;
    /// What computes the steps, for the logs (e.g. the backend's name).
    fn describe(&self) -> String;
    /// Whether the particle state stays on the GPUs between steps (the model of the step's
    /// duration announced before a run differs by two orders of magnitude).
    fn state_on_device(&self) -> bool {
        false
    }
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
