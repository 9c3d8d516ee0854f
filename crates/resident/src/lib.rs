//! The vortex-method time step resident on the GPUs (periodic box), one program for any number
//! of ranks: each rank's particles (its z slab; one rank: all of them) stay on its device for
//! the whole run, and the host sees them only for checkpoints, snapshots and the diagnostics'
//! grid velocity.
//!
//! * [`ctx`]: the ranks, the device, its stream and kernels every phase runs on;
//! * [`kernels`]: `kernels/resident.cu` (updates, deterministic reductions, packing for the
//!   FMM, binning, Gaussian sums, layouts, migration and halo rows);
//! * [`state`]: the particle buffers and their moments;
//! * [`lattice`]: particles binned into lattice cells and the truncated Gaussian sums at the
//!   lattice points (core paper Eq. 3-4);
//! * [`reinterpolation`]: the RBF re-interpolation (core paper Sec. 2) on the device;
//! * [`spreading`]: its Gaussian sums by spreading and FFT (`reinterpolation.sums = "spread"`);
//! * [`slab_fourier`]: the Fourier-space steps (RBF lattice solve, Biot-Savart, spectrum) on a
//!   lattice split over the ranks in slabs of planes (slab-decomposed 3-D FFT, all-to-all
//!   transpose; one rank: local copies), with its CPU twin;
//! * [`diagnostics`]: energy, enstrophy, spectrum from the device's grid velocity;
//! * [`simulation`]: [`ResidentSimulation`], the `vortex_method::Simulator` the run loop drives;
//! * [`slab`]: who holds which particle (z slabs of the uniform grid, one per rank and GPU:
//!   ownership, migration, halos, the lattice sums at a rank's planes);
//! * [`emulate`]: host emulations of the device algorithms (tested without a GPU).

pub mod ctx;
pub mod diagnostics;
pub mod emulate;
pub mod kernels;
pub mod laps;
pub mod lattice;
pub mod reinterpolation;
pub mod simulation;
pub mod slab;
pub mod slab_fourier;
pub mod spreading;
pub mod state;

pub use simulation::{
    check_one_gpu_per_rank, unsupported, ResidentSimulation, DEVICE_BYTES_PER_PARTICLE,
};
