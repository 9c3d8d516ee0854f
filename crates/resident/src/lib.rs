//! The vortex-method time step resident on one GPU (periodic box): the particle state stays on
//! the device for the whole run, and the host sees it only for checkpoints, snapshots and the
//! diagnostics' grid velocity.
//!
//! * [`kernels`]: `kernels/resident.cu` (updates, deterministic reductions, packing for the
//!   FMM, binning, Gaussian sums, Fourier factors);
//! * [`state`]: the particle buffers and their moments;
//! * [`lattice`]: particles binned into lattice cells and the truncated Gaussian sums at the
//!   lattice points (core paper Eq. 3-4);
//! * [`fourier`]: cuFFT steps: the periodic RBF lattice solve, the Biot-Savart law;
//! * [`reinterpolation`]: the RBF re-interpolation (core paper Sec. 2) on the device;
//! * [`spreading`]: its Gaussian sums by spreading and FFT (`reinterpolation.sums = "spread"`);
//! * [`slab_fourier`]: the same Fourier-space steps on a lattice split over ranks in slabs of
//!   planes (slab-decomposed 3-D FFT, all-to-all transpose), with its CPU twin;
//! * [`diagnostics`]: energy, enstrophy, spectrum from the device's grid velocity;
//! * [`simulation`]: [`ResidentSimulation`], the `vortex_method::Simulator` the run loop drives;
//! * [`slab`]: the same step over several ranks, one GPU each (z slabs: ownership, migration,
//!   halos, the lattice sums and transforms over the slabs);
//! * [`emulate`]: host emulations of the device algorithms (tested without a GPU).

pub mod diagnostics;
pub mod emulate;
pub mod fourier;
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
