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
//!   energy and enstrophy (Gaussian sums over all particles), one-rank checkpoints, VTK
//!   snapshots and the spectral diagnostics of the grid velocity;
//! * **written by every rank**: checkpoints of several ranks (a piece per rank with the global
//!   ids, and a manifest: [`crate::checkpoint::pieces`]), continued with any number of ranks
//!   ([`DistSimulation::resume`] takes any distribution of the particles).
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

mod diagnostics;
mod rhs;
mod simulation;

pub use crate::collective::{
    agree, balance_by_gid, broadcast_bytes, broadcast_f64s, check_same, gather_particles,
    gather_rows, gather_state, scatter_rows, scatter_state, LocalState, PARTICLE_ROW,
};
pub use crate::simulator::Phases;
pub use diagnostics::compute as diagnostics;
pub use rhs::DistRhs;
pub use simulation::DistSimulation;
