//! The particles of the resident step in z slabs of the uniform grid's leaf planes, one slab
//! per rank and GPU (one rank: one slab of the whole box).
//!
//! Each rank keeps the particles of its slab on its GPU for the whole run (with their global
//! ids, so the results and the checkpoints do not depend on the number of ranks beyond
//! round-off). Before each evaluation ([`settle`]): the owner of every particle from its packed
//! f32 position as the grid's sort computes it ([`owners`]), the particles that left the slab
//! handed to their new owners with everything that travels with them
//! ([`exchange::migrate`]); the periodic uniform-grid FMM then runs over the slabs. The
//! re-interpolation and the diagnostics' grid velocity run on each rank's lattice planes
//! ([`lattice`]): the Gaussian sums from the own particles and the halo of the neighbours'
//! ([`halo`], across the periodic seam: on one rank its own particles shifted by the box), the
//! Fourier steps over the slabs (`crate::slab_fourier`), fresh particles on the own planes.

pub mod exchange;
pub mod halo;
pub mod lattice;
pub mod owners;
pub mod settle;

pub use settle::Placement;
