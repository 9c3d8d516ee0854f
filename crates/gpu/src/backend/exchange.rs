//! Expansions across the host boundary: the multipoles of chosen source cells read from the
//! device (`Backend::multipoles`), written into it (`set_multipoles`, the cells of an MPI
//! rank's locally essential tree computed elsewhere) and local expansions added to target
//! cells (`add_locals`: periodic far images, remote contributions). FMM expansions are fp32
//! on the device and f64 interleaved `(re, im)` on the host; PPM pseudo-particle strengths
//! are f64 on both sides.

use super::{CudaBackend, CudaState};
use crate::device::GpuError;
use cudarc::driver::{CudaSlice, DeviceRepr};
use vortex_fmm::backend::Plan;
use vortex_fmm::expansions::ncoef;
use vortex_fmm::{Expansions, FmmError};

impl CudaBackend {
    /// The contents of a device array (the stream synchronized after the copy).
    fn download<T: DeviceRepr>(&self, x: &CudaSlice<T>) -> Result<Vec<T>, FmmError> {
        let s = self.dev.stream();
        let host = s.clone_dtoh(x).map_err(GpuError::from)?;
        s.synchronize().map_err(GpuError::from)?;
        Ok(host)
    }

    /// Copies `host` into the device array `x`.
    fn upload<T: DeviceRepr>(&self, host: &[T], x: &mut CudaSlice<T>) -> Result<(), FmmError> {
        Ok(self
            .dev
            .stream()
            .memcpy_htod(host, x)
            .map_err(GpuError::from)?)
    }

    pub(super) fn multipoles_impl(
        &self,
        plan: &Plan,
        st: &CudaState,
        cells: &[usize],
    ) -> Result<Expansions, FmmError> {
        let len = flat_len(plan, st);
        let flat = if let Some(d) = st.ppm_dev.as_ref() {
            gather(&self.download(&d.mult)?, len, cells, |x| x)
        } else if let Some(h) = st.ppm.as_ref() {
            gather(&h.multipoles, len, cells, |x| x)
        } else {
            let m = st
                .multipoles
                .as_ref()
                .ok_or_else(|| FmmError::Backend("no multipoles".into()))?;
            gather(&self.download(m)?, len, cells, |x| x as f64)
        };
        Ok(Expansions::from_flat(plan.far_field, len, &flat))
    }

    pub(super) fn set_multipoles_impl(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        cells: &[usize],
        data: &Expansions,
    ) -> Result<(), FmmError> {
        let len = flat_len(plan, st);
        data.check(plan.far_field, cells.len(), len)?;
        let data = &data.to_flat()[..];
        if let Some(d) = st.ppm_dev.as_mut() {
            let mut host = self.download(&d.mult)?;
            scatter(&mut host, len, cells, data, |a, b| *a = b);
            return self.upload(&host, &mut d.mult);
        }
        if let Some(h) = st.ppm.as_mut() {
            scatter(&mut h.multipoles, len, cells, data, |a, b| *a = b);
            return Ok(());
        }
        let m = st
            .multipoles
            .as_mut()
            .ok_or_else(|| FmmError::Backend("no multipoles".into()))?;
        let mut host = self.download(&*m)?;
        scatter(&mut host, len, cells, data, |a, b| *a = b as f32);
        self.upload(&host, m)
    }

    pub(super) fn add_locals_impl(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        cells: &[usize],
        data: &Expansions,
    ) -> Result<(), FmmError> {
        let len = flat_len(plan, st);
        data.check(plan.far_field, cells.len(), len)?;
        let data = &data.to_flat()[..];
        if let Some(h) = st.ppm.as_mut() {
            scatter(&mut h.locals, len, cells, data, |a, b| *a += b);
            return Ok(());
        }
        if st.locals.is_none() {
            if !plan.far_field.has_locals() {
                return Err(GpuError::Unsupported(
                    "add_locals with the treecode (no L2L/L2P pass) is not supported on the GPU"
                        .into(),
                )
                .into());
            }
            st.locals = Some(
                self.dev
                    .stream()
                    .alloc_zeros::<f32>(plan.target_tree.cells.len() * len)
                    .map_err(GpuError::from)?,
            );
        }
        let loc = st.locals.as_mut().unwrap();
        let mut host = self.download(&*loc)?;
        scatter(&mut host, len, cells, data, |a, b| *a += b as f32);
        self.upload(&host, loc)
    }
}

/// `f64` values per cell of the expansions of `st` in the flat layout of
/// [`vortex_fmm::Expansions::to_flat`]: `3 K` pseudo-particle values, or `2 * 3 * ncoef(p)` for the
/// interleaved `(re, im)` coefficients (fp32 on the device).
fn flat_len(plan: &Plan, st: &CudaState) -> usize {
    match (st.ppm_dev.as_ref(), st.ppm.as_ref()) {
        (Some(d), _) => 3 * d.k,
        (None, Some(h)) => h.len(),
        (None, None) => 2 * 3 * ncoef(plan.order),
    }
}

/// The `len` values of each of `cells` in `all` (one expansion per cell), concatenated and
/// converted by `f`.
fn gather<T: Copy>(all: &[T], len: usize, cells: &[usize], f: impl Fn(T) -> f64) -> Vec<f64> {
    cells
        .iter()
        .flat_map(|&c| all[c * len..(c + 1) * len].iter().map(|&x| f(x)))
        .collect()
}

/// Applies `f` to the `len` values of each of `cells` in `all` and the cell's values in
/// `data` (concatenated in the order of `cells`).
fn scatter<T>(all: &mut [T], len: usize, cells: &[usize], data: &[f64], f: impl Fn(&mut T, f64)) {
    for (k, &c) in cells.iter().enumerate() {
        all[c * len..(c + 1) * len]
            .iter_mut()
            .zip(&data[k * len..(k + 1) * len])
            .for_each(|(a, &b)| f(a, b));
    }
}
