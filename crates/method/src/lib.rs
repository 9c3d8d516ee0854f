//! The vortex particle method of the core paper (Yokota et al., CPC 180 (2009) 2066, Sec. 2 and 5):
//! vorticity as a sum of Gaussian blobs (Eq. 3-4), velocity and classical stretching from the
//! regularised Biot-Savart law through the FMM engine (Eq. 5-9), viscosity by core spreading
//! (Eq. 10-11) with RBF re-interpolation onto a fresh lattice, second-order Adams-Bashforth.
//!
//! Modules, in the order of one time step:
//! * [`config`]: the TOML run configuration and its checks;
//! * [`particles`]: the particle state and its invariants (total strength, impulse, centroid);
//! * [`initial`]: initial particles (spectral fields, vortex rings, a blob);
//! * [`rhs`]: the derivatives of a particle state (the [`rhs::RightHandSide`] the stepper calls);
//! * [`stepping`]: AB2 with a Heun start ([`stepping::Stepper`]); the re-interpolation
//!   criteria (core growth, step count, Lagrangian strain);
//! * [`core_spreading`]: `sigma^2 = sigma0^2 + 2 nu (t - t_reset)`;
//! * [`reinterpolation`]: the Gaussian interpolation system solved by CG; [`cells`]: cell lists;
//! * [`diagnostics`]: energy, enstrophy, spectra, impulse, VTK and CSV outputs;
//! * [`energy_check`]: a decaying flow's energy must not rise (warning, then an error);
//! * [`checkpoint`]: atomic, versioned, checksummed bincode checkpoints (through
//!   `vortex_spectral::durable`, shared with the spectral solver);
//! * [`health`]: the per-step verdict (stability, non-finite fields, memory) that the run obeys;
//! * [`collective`]: what the ranks do together outside the evaluation (agreeing on a failure,
//!   broadcasts, gathers and scatters of particle rows);
//! * [`parallel`]: the same step over ranks (MPI, simulated ranks, or one process): owned
//!   particles with global ids, the distributed FMM, redistribution, gathers on rank 0 for the
//!   rare global operations ([`parallel::DistSimulation`], the one simulation driver: on one
//!   process it runs over `vortex_domain::SelfComm`);
//! * [`simulator`]: what the run loop asks of a simulation, whatever holds its state (the
//!   host ranks, or one GPU in the `vortex-resident` crate);
//! * [`run`]: the `vortex run` command ([`run::run`]: one run on the ranks of any communicator, the simulation made by a [`run::Build`]);
//! * [`vtp`]: binary particle snapshots (XML VTK PolyData) and their `.pvd` time series;
//! * [`validate`]: cross-validation against the spectral solver (Taylor-Green, same initial field);
//! * [`comparison`]: `vortex compare`: any periodic run against its spectral twin (the twin's
//!   configuration, the joined histories and spectra, the comparison figure).

// `!(x > 0.0)` style checks are deliberate: they reject NaN as well.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod cells;
pub mod checkpoint;
pub mod collective;
pub mod comparison;
pub mod config;
pub mod core_spreading;
pub mod diagnostics;
pub use vortex_spectral::energy_check;
pub mod error;
pub mod exact;
pub mod health;
pub mod initial;
pub mod parallel;
pub mod particles;
pub mod reinterpolation;
pub mod rhs;
pub mod run;
pub mod simulator;
pub mod stepping;
pub mod validate;
pub mod vtp;

pub use config::Config;
pub use error::{Error, Result};
pub use parallel::DistSimulation;
pub use particles::Particles;
pub use simulator::Simulator;
pub use stepping::State;
