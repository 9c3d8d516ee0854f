//! Pseudo-spectral incompressible Navier-Stokes solver in the periodic box `[-pi, pi)^3`.
//!
//! - [`fft`]: r2c 3-D transforms (realfft along z, rustfft along y and x, rayon over pencils);
//! - [`field`]: [`VelocityField`] (physical, index `(i*n + j)*n + k`, z fastest) and
//!   [`field::SpectralField`];
//! - [`initial`]: Taylor-Green and isotropic random initial fields;
//! - [`diagnostics`]: energy, enstrophy, spectrum and the scales of `docs/CONVENTIONS.md`;
//! - [`solver`]: RK4 with an integrating factor, 3/2-rule (or 2/3-rule) dealiasing;
//! - [`gpu`]: the same solver on a CUDA GPU (feature `cuda`: cuFFT and the kernels of
//!   `kernels/spectral.cu`, double precision, agreeing with the CPU to round-off);
//! - [`backend`]: [`backend::Stepper`], one interface over both, chosen by the configuration key
//!   `backend = "auto" | "cpu" | "cuda"` (`auto`, the default, takes the GPU when one is usable);
//! - [`config`], [`run`], [`io`], [`plot`]: the `vortex spectral` command;
//! - [`energy_check`]: a decaying flow's energy must not rise (both solvers);
//! - [`durable`]: checksummed atomic checkpoints, the interrupt flag and the output-directory
//!   policy, shared with the vortex method; [`outdir`]: the output-directory lock, the restart
//!   check and the memory estimates; [`inputs`]: inputs refused unless regular files, read with
//!   their length known; [`estimate`]: a run's duration measured after the first steps;
//!   [`overwrite`]: what `--overwrite` removes (the files `run.json` lists).

pub mod backend;
pub mod config;
pub mod diagnostics;
pub mod durable;
pub mod energy_check;
pub mod estimate;
pub mod fft;
pub mod field;
mod file_error;
mod file_names;
pub mod gpu;
pub mod initial;
pub mod inputs;
pub mod io;
pub mod outdir;
pub mod overwrite;
pub mod plot;
pub mod run;
pub mod solver;
pub mod stop;
pub mod text;

pub use backend::Stepper;
pub use config::{Backend, Config, ConfigError, Dealias};
pub use field::{SpectralField, VelocityField};
pub use solver::{Solver, SolverError, StepMode};
