//! [`Ctx`]: what every phase of the resident step runs on — the ranks, this rank's GPU, its
//! stream and the kernels of `kernels/resident.cu` — and [`gpu_err`], the device's errors as
//! the method's.

use crate::kernels::Kernels;
use cudarc::driver::CudaStream;
use std::sync::Arc;
use vortex_cuda::{GpuDevice, GpuError};
use vortex_domain::Comm;
use vortex_method::Error;

/// The ranks of the run, this rank's device, its stream and the resident kernels.
#[derive(Clone)]
pub struct Ctx<'c> {
    pub comm: &'c dyn Comm,
    pub dev: Arc<GpuDevice>,
    pub s: Arc<CudaStream>,
    pub k: Kernels,
}

/// A device error as the method's error, naming the operation `what`.
pub fn gpu_err(what: &'static str) -> impl Fn(GpuError) -> Error {
    move |e| Error::Other(format!("GPU ({what}): {e}"))
}
