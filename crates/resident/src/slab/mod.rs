//! The resident step over several ranks, one GPU each: slabs of planes along z.
//!
//! Each rank keeps the particles of its slab of the uniform grid's leaf planes on its GPU for
//! the whole run (with their global ids, so the results and the checkpoints do not depend on
//! the number of ranks beyond round-off). Per evaluation ([`step`]): the owner of every
//! particle from its packed f32 position as the grid's sort computes it ([`owners`]), the
//! particles that left the slab handed to their new owners with everything that travels with
//! them ([`exchange::migrate`]), then the periodic uniform-grid FMM over the slabs
//! (`vortex_gpu::uniform::UniformFmm::evaluate_device_slab`: halo particles for the P2P,
//! multipoles for the M2L, across the periodic seam). The re-interpolation and the
//! diagnostics' grid velocity run on each rank's lattice planes ([`lattice`]): the Gaussian
//! sums from the own and the halo particles, the Fourier steps over the slabs
//! (`crate::slab_fourier`), fresh particles on the own planes. The moments that the step
//! needs (sums for the periodic checks and the surface correction, the largest core) are
//! reduced over the ranks.

pub mod exchange;
pub mod halo;
pub mod lattice;
pub mod owners;
pub mod step;

pub use step::SlabStep;
