//! The CUDA device layer of the backend: driver / NVRTC probing, device selection, the
//! per-device cache of NVRTC-compiled modules and the embedded kernel sources, all in the
//! `vortex-cuda` crate and re-exported here under their old paths.

pub use vortex_cuda::device::*;
pub use vortex_cuda::kernels::KernelSource;
pub use vortex_cuda::nvrtc::{compile, compile_options};
