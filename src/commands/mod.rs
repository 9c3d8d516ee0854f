//! The subcommands of the `vortex` binary.

pub mod bench;
pub mod bench_common;
pub mod bench_reinterp;
pub mod bench_slab;
pub mod bench_spectral;
pub mod compare;
pub mod config;
pub mod eval;
pub mod particles;
pub mod run;
pub mod spectral;
