//! The CUDA backend of the solver (feature `cuda`): [`GpuSolver`] keeps the state and all
//! workspace on one GPU and runs the same algorithm as [`crate::Solver`] in double precision.
//!
//! - **Transforms**: cuFFT 3-D D2Z / Z2D plans on the product grid (`3n/2`, or `n` for the 2/3
//!   rule), made once, in place in six buffers of `m^2 (m/2+1)` complex. cuFFT's r2c layout is
//!   realfft's (last axis halved, `(ix*m + iy)*(m/2+1) + iz`), its transforms are unnormalised like
//!   [`crate::fft::Fft3`] (forward `exp(-i k.x)`), and the `1/m^3` is applied when truncating,
//!   as on the CPU. The physical product grid uses cuFFT's padded in-place layout (rows of `m`
//!   reals in `2 (m/2+1)` slots); no other code sees it.
//! - **Kernels** (`kernels/spectral.cu`, compiled by NVRTC at first use through
//!   [`vortex_cuda::GpuDevice`]): zero padding of `u` and of the curl `i k x u`, `u x omega` with
//!   `max(|u|+|v|+|w|)` (an order-independent `atomicMax` on the bit patterns: deterministic),
//!   truncation with projection, the integrating factors, the four RK4 combinations. The
//!   elementwise arithmetic is rounded exactly as on the CPU (`__dmul_rn`, no FMA contraction);
//!   only the FFTs and `exp` round differently, so the two backends agree to about 1e-13.
//! - **Transfers**: the initial state is computed on the host ([`crate::solver::initial_state`])
//!   and uploaded once; the state is downloaded (in the CPU layout, so checkpoints are the same
//!   files) only when diagnostics, spectra, fields or checkpoints need it. One 16-byte read per
//!   step carries the CFL velocity and a non-finite flag.
//! - **Memory**: [`layout::device_bytes`] (about 4.2 GiB at `256^3` with the 3/2 rule) plus cuFFT's
//!   work areas.
//!
//! Without a driver, cuFFT, NVRTC or a device, [`GpuSolver::new`] returns an error, never panics.
//! [`layout`] holds host mirrors of the kernels' index maps, tested without a GPU.

pub mod layout;
#[cfg(feature = "cuda")]
mod solver;

#[cfg(feature = "cuda")]
pub use solver::{cufft_present, probe, GpuSolver, SPECTRAL};
