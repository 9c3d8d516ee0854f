//! [`GpuError`]: the errors of the CUDA device layer (driver, NVRTC, devices) and of the
//! engines on it, shared by [`crate::device`] and [`crate::nvrtc`].

use thiserror::Error;

/// Errors of the CUDA device layer and of the engines on it.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum GpuError {
    #[error("CUDA driver library (libcuda) not found: no NVIDIA driver on this machine")]
    NoDriver,
    #[error("NVRTC library (libnvrtc) not found: install the CUDA runtime compiler (CUDA 13)")]
    NoNvrtc,
    #[error("no CUDA device visible (CUDA_VISIBLE_DEVICES = {0})")]
    NoDevice(String),
    #[error(
        "CUDA device {index} requested but only {count} visible (CUDA_VISIBLE_DEVICES = {visible})"
    )]
    BadIndex {
        index: usize,
        count: usize,
        visible: String,
    },
    #[error("CUDA driver error: {0}")]
    Driver(String),
    #[error("launch of the kernel {kernel} failed: {reason}")]
    Launch {
        kernel: &'static str,
        reason: String,
    },
    #[error("NVRTC compilation of kernels/{name}.cu failed: {log}")]
    Compile { name: &'static str, log: String },
    #[error("{0}")]
    Unsupported(String),
}

#[cfg(feature = "fmm")]
impl From<GpuError> for vortex_fmm::FmmError {
    fn from(e: GpuError) -> Self {
        vortex_fmm::FmmError::Backend(e.to_string())
    }
}

impl From<cudarc::driver::DriverError> for GpuError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        GpuError::Driver(format!("{e:?}"))
    }
}

/// `Result` of the CUDA device layer.
pub type GpuResult<T> = Result<T, GpuError>;
