//! Domain decomposition of the vortex FMM over ranks (MPI or simulated).
//!
//! * [`comm`]: the [`Comm`] trait and its implementations ([`SelfComm`], [`ThreadComm`],
//!   `MpiComm` with the `mpi` feature);
//! * [`watchdog`]: ends the job when a rank stops answering (a wait in a collective longer than
//!   a timeout), over any communicator;
//! * [`partition`]: the replicated partition tree, branch cells and their owners along the Morton
//!   curve, weighted by work;
//! * [`redistribute_sources`] / [`redistribute_targets`]: moving particles to their owners (keeping
//!   global ids); [`redistribute_particles`] rebuilds the partition from the current positions
//!   and redistributes (every time step) (private module `redistribute`);
//! * [`essential`]: the locally essential tree (halo particles and remote multipoles) and one
//!   evaluation on the owned particles;
//! * [`evaluate_distributed`]: the whole evaluation for particles held in any distribution, with
//!   results returned in the caller's order (private module `distributed`), and
//!   [`gather_to_root`] / [`scatter_sources_from_root`] for the files rank 0 reads and writes
//!   (private module `root`).
//!
//! The results do not depend on the number of ranks: every target cell gets the interaction
//! lists of the single-rank run (see [`essential`]).

pub mod comm;
pub mod essential;
pub mod evaluator;
pub mod ext_tree;
pub mod partition;
pub mod watchdog;
pub mod wire;

#[cfg(feature = "mpi")]
pub use comm::MpiComm;
pub use comm::{world, Comm, ReduceOp, SelfComm, ThreadComm, TransportChoice};
pub use essential::{evaluate_owned, OwnedSources, OwnedTargets};
pub use evaluator::{DistributedEvaluator, OwnedEvaluator};
pub use partition::Partition;

use rayon::prelude::*;
use std::time::Instant;
use vortex_fmm::backend::{Backend, PhaseTimes};
use vortex_fmm::evaluators::{direct, Method};
use vortex_fmm::{EvalParams, Fields, FmmError, Sources, Targets};
use wire::{Reader, Writer};

mod distributed;
mod redistribute;
mod root;
pub use distributed::evaluate_distributed;
pub use redistribute::{redistribute_particles, redistribute_sources, redistribute_targets};
pub use root::{gather_to_root, scatter_sources_from_root, scatter_targets_from_root};

#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    #[error(transparent)]
    Fmm(#[from] FmmError),
    #[error("rank {rank}: the locally essential tree lacks cells the traversal needs ({violations} times): a bug in the conservative opening criterion")]
    IncompleteEssentialTree { rank: usize, violations: usize },
    #[error("rank {rank}: asked for the multipoles of {cells} cells it does not own: a bug in the M2Lcomm requests")]
    MissingMultipoles { rank: usize, cells: usize },
    #[error("rank {rank} failed (see its message)")]
    Remote { rank: usize },
    #[error("ranks disagree on the evaluation parameters (rank {rank}: {params})")]
    MismatchedParameters { rank: usize, params: String },
}

/// Parameters of the decomposition.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DomainParams {
    /// Target number of branch cells per rank (finer: better balance, larger replicated top).
    pub granularity: usize,
    /// Testing only: send no halo particles, to check that an incomplete locally essential
    /// tree is detected (the evaluation must fail on every rank).
    #[doc(hidden)]
    pub sabotage_halo: bool,
}

impl Default for DomainParams {
    fn default() -> Self {
        Self {
            granularity: 16,
            sabotage_halo: false,
        }
    }
}

/// Bytes sent by this rank and times of the communication phases (one record per
/// evaluation, shared with every engine through `vortex_fmm::Evaluation::comm`).
pub use vortex_fmm::CommStats;

/// The one timing record of an evaluation as its phases fill it: the backend phase times,
/// the communication counters and seconds, and the profile laps ([`CommStats::profile`]).
/// [`evaluate_distributed`] hands its record to the locally essential evaluation
/// ([`essential`]), so the laps of all its phases run on one clock.
pub(crate) struct Record<'a> {
    pub(crate) stats: &'a mut CommStats,
    pub(crate) times: &'a mut PhaseTimes,
    pub(crate) last: Instant,
}

impl<'a> Record<'a> {
    pub(crate) fn new(stats: &'a mut CommStats, times: &'a mut PhaseTimes) -> Self {
        Self {
            stats,
            times,
            last: Instant::now(),
        }
    }

    /// Records the time since the previous lap under `name` (accumulating repeated names).
    pub(crate) fn lap(&mut self, name: &'static str) {
        lap(self.stats, &mut self.last, name);
    }
}

/// [`Record::lap`] on the record's fields (for closures that hold another of its fields).
pub(crate) fn lap(stats: &mut CommStats, last: &mut Instant, name: &'static str) {
    let now = Instant::now();
    let dt = (now - *last).as_secs_f64();
    *last = now;
    match stats.profile.iter_mut().find(|(n, _)| *n == name) {
        Some((_, v)) => *v += dt,
        None => stats.profile.push((name, dt)),
    }
}

/// Result of [`evaluate_distributed`] on one rank.
#[derive(Clone, Debug)]
pub struct DistributedEvaluation {
    /// Fields at this rank's targets, in the caller's order.
    pub fields: Fields,
    pub times: PhaseTimes,
    pub stats: CommStats,
    /// Work (sources + targets) owned by each rank.
    pub work: Vec<u64>,
}
