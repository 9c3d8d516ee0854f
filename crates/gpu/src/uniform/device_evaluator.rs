//! The device twin of `vortex_fmm::Evaluator`: velocity and stretching of particles that stay
//! on the GPU (device buffers in, device buffers out), for a caller that keeps its state on the
//! device between evaluations (the resident time step). Two engines implement it, chosen by the
//! planner (`vortex_engine::planner::build_device`): [`UniformDevice`], the uniform grid on one
//! GPU, and [`UniformSlabDevice`], the uniform grid split into z slabs over the ranks of a
//! [`Comm`], one GPU each (periodic boxes; the caller keeps every particle on the rank owning
//! its slab, [`DeviceEvaluator::slabs`]).

use super::distributed::DistributedUniformTimes;
use super::slab::SlabPlan;
use super::{UniformFmm, UniformParams};
use crate::device::{GpuError, GpuResult};
use cudarc::driver::CudaSlice;
use vortex_domain::Comm;
use vortex_fmm::periodic::Periodic;

/// Particles on the device, at themselves.
pub struct DeviceSources<'a> {
    /// `8 n` floats, the rows of `pipeline::pack_sources_into`: `float4 (x, y, z, 1/sigma)`,
    /// then `float4 (ax, ay, az, 0)` (positions inside the box when periodic).
    pub packed: &'a CudaSlice<f32>,
    /// Particles of this rank.
    pub n: usize,
    /// Particles over all ranks.
    pub n_global: usize,
    /// The largest core radius over all ranks (length units).
    pub sigma_max: f64,
    /// The bounds of the positions over all ranks (free space; ignored when periodic).
    pub bounds: ([f64; 3], [f64; 3]),
}

/// Velocity and stretching of particles kept on the device.
pub trait DeviceEvaluator {
    /// `6 n` floats, `(u, s)` per particle in input order, the raw sums: **without** the
    /// factor `1/(4 pi)` and (periodic) without the surface correction, both the caller's (it
    /// has the sums of its particles). Collective over the ranks of a slab engine; every
    /// particle must lie in its rank's slab ([`Self::slabs`]).
    fn evaluate(
        &mut self,
        src: &DeviceSources,
    ) -> GpuResult<(CudaSlice<f32>, DistributedUniformTimes)>;
    /// The slabs of the ranks for `n_global` particles of largest core `sigma_max`: the plan
    /// whose owners the caller's particles must follow; `None` on one GPU.
    fn slabs(&self, n_global: usize, sigma_max: f64) -> GpuResult<Option<SlabPlan>>;
    /// What runs, for the logs.
    fn describe(&self) -> String;
}

/// The uniform grid on one GPU, free space or periodic.
pub struct UniformDevice {
    pub fmm: UniformFmm,
    pub params: UniformParams,
    pub periodic: Option<Periodic>,
}

impl DeviceEvaluator for UniformDevice {
    fn evaluate(
        &mut self,
        src: &DeviceSources,
    ) -> GpuResult<(CudaSlice<f32>, DistributedUniformTimes)> {
        let (out6, tm) = self.fmm.evaluate_device(
            src.packed,
            src.n,
            src.bounds,
            src.sigma_max,
            &self.params,
            self.periodic.as_ref(),
        )?;
        log::debug!("uniform grid {}^3 leaves: {}", tm.n, tm.kernel_report());
        let record = DistributedUniformTimes {
            total: tm.total,
            owned: src.n,
            device: tm,
            ..Default::default()
        };
        Ok((out6, record))
    }

    fn slabs(&self, _: usize, _: f64) -> GpuResult<Option<SlabPlan>> {
        Ok(None)
    }

    fn describe(&self) -> String {
        format!(
            "{} (uniform grid p = {}, device buffers)",
            self.fmm.device().name(),
            self.params.order
        )
    }
}

/// The uniform grid of a periodic box split into z slabs over the ranks of `comm`, one GPU
/// per rank (`UniformFmm::evaluate_device_slab`).
pub struct UniformSlabDevice<'c> {
    pub comm: &'c dyn Comm,
    pub fmm: UniformFmm,
    pub params: UniformParams,
    pub periodic: Periodic,
}

impl DeviceEvaluator for UniformSlabDevice<'_> {
    fn evaluate(
        &mut self,
        src: &DeviceSources,
    ) -> GpuResult<(CudaSlice<f32>, DistributedUniformTimes)> {
        let plan = self
            .slabs(src.n_global, src.sigma_max)?
            .expect("a slab engine has slabs");
        self.fmm.evaluate_device_slab(
            self.comm,
            &plan,
            src.packed,
            src.n,
            &self.params,
            &self.periodic,
        )
    }

    fn slabs(&self, n_global: usize, sigma_max: f64) -> GpuResult<Option<SlabPlan>> {
        SlabPlan::periodic(self.comm, &self.periodic, n_global, sigma_max, &self.params).map(Some)
    }

    fn describe(&self) -> String {
        format!(
            "{} (uniform grid p = {}, z slabs over {} ranks, device buffers)",
            self.fmm.device().name(),
            self.params.order,
            self.comm.size()
        )
    }
}

/// Refuses a slab engine for a free-space set (the slabs of a free-space grid move with the
/// particles' bounds; the device-resident step covers periodic boxes).
pub fn check_slab_box(periodic: Option<&Periodic>) -> GpuResult<Periodic> {
    periodic.copied().ok_or_else(|| {
        GpuError::Unsupported(
            "the uniform grid's slabs on device buffers cover periodic boxes (free space: the \
             host-state slabs, UniformSlabEvaluator)"
                .into(),
        )
    })
}
