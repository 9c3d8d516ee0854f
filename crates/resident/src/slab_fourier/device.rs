//! The slab-decomposed transforms of one rank on its GPU: cuFFT for the 2-D transforms of the
//! own planes (one batched plan of the three interleaved components, `Fourier`'s layout in two
//! dimensions, run plane by plane) and for the 1-D transforms along `s` (one plan over every
//! column of the pencil spectrum), the transpose staged through the host (download, the plan
//! of [`super::SlabLayout`], [`vortex_domain::Comm::alltoallv`], upload), the pointwise factors
//! by the kernels of `kernels/slab_fourier.cu`.

use super::{pencils_to_slabs, reduce_spectrum, slabs_to_pencils, SlabAxis, SlabError, SlabLayout};
use crate::fourier::{gpu_cufft_present, GridSpectrum};
use crate::kernels::per_element;
use cudarc::cufft::{result as cufft_result, sys as cufft_sys, CudaFft, FftDirection};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;
use vortex_cuda::{GpuDevice, GpuError, GpuResult, SLAB_FOURIER};
use vortex_domain::Comm;

/// Blocks of `sf_spectrum_partial` (each a grid-stride share of the pencil spectrum).
pub const SPECTRUM_BLOCKS: usize = 128;
/// Threads per block of `sf_spectrum_partial` (`SF_THREADS`).
const SPECTRUM_THREADS: u32 = 256;

impl From<SlabError> for GpuError {
    fn from(e: SlabError) -> Self {
        GpuError::Unsupported(e.to_string())
    }
}

fn fft_err(what: &'static str) -> impl Fn(cufft_result::CufftError) -> GpuError {
    move |e| GpuError::Unsupported(format!("cuFFT {what} (slab FFT): {e:?}"))
}

/// The kernels of `kernels/slab_fourier.cu`.
pub struct SlabKernels {
    solve: CudaFunction,
    biot_savart: CudaFunction,
    spectrum_partial: CudaFunction,
}

impl SlabKernels {
    /// Compiles (once per device) and loads the module.
    pub fn load(dev: &GpuDevice) -> GpuResult<Self> {
        let f = |name| dev.function(&SLAB_FOURIER, &[], name);
        Ok(Self {
            solve: f("sf_solve")?,
            biot_savart: f("sf_biot_savart")?,
            spectrum_partial: f("sf_spectrum_partial")?,
        })
    }
}

/// The slab-decomposed transforms of one rank, its buffers and plans (sizes:
/// [`SlabLayout::device_bytes`], [`SlabLayout::host_bytes`]).
pub struct SlabFourier {
    layout: SlabLayout,
    stream: Arc<CudaStream>,
    kernels: SlabKernels,
    /// D2Z and Z2D of one plane's three components (none on a rank without planes).
    planes: Option<(CudaFft, CudaFft)>,
    /// Z2Z along `s`, both directions.
    along_s: CudaFft,
    /// Slab spectrum, `2 slab_len` doubles (at least 2).
    slab: CudaSlice<f64>,
    /// Pencil spectrum, `2 pencil_len` doubles.
    pencil: CudaSlice<f64>,
    host_slab: Vec<f64>,
    host_pencil: Vec<f64>,
    /// `SPECTRUM_BLOCKS (shells + 2)` partial sums of the last Biot-Savart step.
    partial: CudaSlice<f64>,
    has_spectrum: bool,
}

impl SlabFourier {
    /// Plans and buffers of `layout`'s rank on `dev`, its work queued on `stream`.
    pub fn new(dev: &GpuDevice, stream: Arc<CudaStream>, layout: SlabLayout) -> GpuResult<Self> {
        if !gpu_cufft_present() {
            return Err(GpuError::Unsupported(
                "cuFFT library (libcufft) not found: install the CUDA cuFFT library and put its \
                 directory on LD_LIBRARY_PATH"
                    .into(),
            ));
        }
        let s = &stream;
        let (n, nh) = (layout.n() as i32, layout.nh() as i32);
        let nplanes = layout.planes(layout.rank()).len();
        let planes = if nplanes > 0 {
            let (real, half) = ([n, n], [n, nh]);
            let d2z = cufft_sys::cufftType::CUFFT_D2Z;
            let z2d = cufft_sys::cufftType::CUFFT_Z2D;
            let fwd = CudaFft::plan_many(
                &real,
                Some(&real),
                3,
                1,
                Some(&half),
                3,
                1,
                d2z,
                3,
                s.clone(),
            )
            .map_err(fft_err("D2Z plan"))?;
            let inv = CudaFft::plan_many(
                &real,
                Some(&half),
                3,
                1,
                Some(&real),
                3,
                1,
                z2d,
                3,
                s.clone(),
            )
            .map_err(fft_err("Z2D plan"))?;
            Some((fwd, inv))
        } else {
            None
        };
        let columns = (layout.pencil_len() / layout.n()) as i32;
        let z2z = cufft_sys::cufftType::CUFFT_Z2Z;
        let along_s = CudaFft::plan_many(
            &[n],
            Some(&[n]),
            columns,
            1,
            Some(&[n]),
            columns,
            1,
            z2z,
            columns,
            s.clone(),
        )
        .map_err(fft_err("Z2Z plan"))?;
        let work: usize = planes
            .iter()
            .flat_map(|(a, b)| [a.handle(), b.handle()])
            .chain([along_s.handle()])
            // SAFETY: valid plans created above.
            .map(|h| unsafe { cufft_result::get_size(h) }.unwrap_or(0))
            .sum();
        log::debug!(
            "slab FFT rank {} of {}: {} planes, {} middle wavenumbers; cuFFT work areas {} bytes, \
             estimate of all device buffers {} bytes",
            layout.rank(),
            layout.ranks(),
            nplanes,
            layout.pencil(layout.rank()).len(),
            work,
            layout.device_bytes()
        );
        let width = layout.shells() + 2;
        Ok(Self {
            slab: s.alloc_zeros::<f64>(2 * layout.slab_len().max(1))?,
            pencil: s.alloc_zeros::<f64>(2 * layout.pencil_len())?,
            host_slab: vec![0.0; 2 * layout.slab_len()],
            host_pencil: vec![0.0; 2 * layout.pencil_len()],
            partial: s.alloc_zeros::<f64>(SPECTRUM_BLOCKS * width)?,
            has_spectrum: false,
            kernels: SlabKernels::load(dev)?,
            planes,
            along_s,
            layout,
            stream,
        })
    }

    pub fn layout(&self) -> &SlabLayout {
        &self.layout
    }

    /// `beta = A^-1 omega` in place of this rank's planes `field` (collective; `inv_eig` =
    /// `1 / S(k)`, `k = 0..n`, on the device; `c` the Gaussian's normalisation `(2 pi
    /// sigma^2)^(-3/2)`): the factor of [`crate::fourier::Fourier::solve_rbf`].
    pub fn solve_rbf(
        &mut self,
        comm: &dyn Comm,
        field: &mut CudaSlice<f64>,
        inv_eig: &CudaSlice<f64>,
        c: f64,
    ) -> GpuResult<()> {
        self.layout.check_eig(inv_eig.len())?;
        self.forward(comm, field)?;
        let (n, nq, m0, count) = self.pencil_dims();
        let scale = 1.0 / (c * self.layout.n().pow(3) as f64);
        let mut b = self.stream.launch_builder(&self.kernels.solve);
        b.arg(&mut self.pencil)
            .arg(&n)
            .arg(&nq)
            .arg(&m0)
            .arg(&count)
            .arg(inv_eig)
            .arg(&scale);
        // SAFETY: sf_solve(double2* spec, int n, int nq, int m0, long long count, const double*
        // inv_eig, double scale): the arguments in this order and of these types; spec holds 3
        // count complex numbers (the pencil spectrum), inv_eig n doubles (indices < n); one
        // thread per element, threads t >= count return.
        unsafe { b.launch(per_element(count as usize)) }?;
        self.inverse(comm, field)
    }

    /// The periodic velocity of the vorticity `field` (this rank's planes, box length `l` in
    /// length units; collective): its spectrum's partial sums are kept for [`Self::spectrum`];
    /// with `physical`, the velocity replaces `field`.
    pub fn biot_savart(
        &mut self,
        comm: &dyn Comm,
        field: &mut CudaSlice<f64>,
        l: f64,
        physical: bool,
    ) -> GpuResult<()> {
        self.forward(comm, field)?;
        let (n, nq, m0, count) = self.pencil_dims();
        let slab_z = (self.layout.axis() == SlabAxis::Z) as i32;
        let scale = 1.0 / self.layout.n().pow(3) as f64;
        let inv_kscale = l / (2.0 * std::f64::consts::PI);
        let mut b = self.stream.launch_builder(&self.kernels.biot_savart);
        b.arg(&mut self.pencil)
            .arg(&n)
            .arg(&nq)
            .arg(&m0)
            .arg(&count)
            .arg(&slab_z)
            .arg(&inv_kscale)
            .arg(&scale);
        // SAFETY: sf_biot_savart(double2* spec, int n, int nq, int m0, long long count, int
        // slab_z, double inv_kscale, double scale): the arguments in this order and of these
        // types; spec holds 3 count complex numbers; threads t >= count return.
        unsafe { b.launch(per_element(count as usize)) }?;
        let nshell = self.layout.shells() as i32;
        let mut b = self.stream.launch_builder(&self.kernels.spectrum_partial);
        b.arg(&self.pencil)
            .arg(&n)
            .arg(&nq)
            .arg(&m0)
            .arg(&count)
            .arg(&slab_z)
            .arg(&nshell)
            .arg(&mut self.partial);
        let cfg = LaunchConfig {
            grid_dim: (SPECTRUM_BLOCKS as u32, 1, 1),
            block_dim: (SPECTRUM_THREADS, 1, 1),
            shared_mem_bytes: (nshell as u32) * 8,
        };
        // SAFETY: sf_spectrum_partial(const double2* spec, int n, int nq, int m0, long long
        // count, int slab_z, int nshell, double* partial): the arguments in this order and of
        // these types; partial holds SPECTRUM_BLOCKS (nshell + 2) doubles; blockDim.x is the
        // kernel's SF_THREADS = 256; the dynamic shared memory is its nshell shell sums; a
        // grid-stride loop covers every t < count.
        unsafe { b.launch(cfg) }?;
        self.has_spectrum = true;
        if physical {
            self.inverse(comm, field)?;
        }
        Ok(())
    }

    /// Shell spectrum, energy and enstrophy of the velocity of the last
    /// [`Self::biot_savart`], in integer wavenumbers, summed over the blocks in block order and
    /// over the ranks in rank order (collective).
    pub fn spectrum(&mut self, comm: &dyn Comm) -> GpuResult<GridSpectrum> {
        if !self.has_spectrum {
            return Err(SlabError::NoSpectrum.into());
        }
        let width = self.layout.shells() + 2;
        let blocks = self.stream.clone_dtoh(&self.partial)?;
        let mut sum = vec![0.0; width];
        for b in blocks.chunks_exact(width) {
            sum.iter_mut().zip(b).for_each(|(a, v)| *a += v);
        }
        Ok(reduce_spectrum(comm, sum))
    }

    /// `(n, nq, m0, count)` of the kernels: `count` elements of 3 complex numbers.
    fn pencil_dims(&self) -> (i32, i32, i32, i64) {
        let p = self.layout.pencil(self.layout.rank());
        (
            self.layout.n() as i32,
            p.len() as i32,
            p.start as i32,
            (self.layout.pencil_len() / 3) as i64,
        )
    }

    /// Lattice field (this rank's planes) to the pencil spectrum.
    fn forward(&mut self, comm: &dyn Comm, field: &CudaSlice<f64>) -> GpuResult<()> {
        self.layout.check_comm(comm)?;
        self.layout.check_field(field.len())?;
        let s = self.stream.clone();
        s.context().bind_to_thread()?;
        let (n, nh) = (self.layout.n() as u64, self.layout.nh() as u64);
        if let Some((fwd, _)) = &self.planes {
            let (src, _g1) = field.device_ptr(&s);
            let (dst, _g2) = self.slab.device_ptr_mut(&s);
            for p in 0..self.layout.planes(self.layout.rank()).len() as u64 {
                // SAFETY: plane p of `field` (3 n^2 doubles from 3 n^2 p) and of the slab
                // spectrum (3 n nh complex numbers from 3 n nh p): the plan's layout; `field`
                // holds real_len() doubles (checked), the slab 2 slab_len().
                unsafe {
                    cufft_result::exec_d2z(
                        fwd.handle(),
                        (src + 8 * 3 * n * n * p) as *mut _,
                        (dst + 16 * 3 * n * nh * p) as *mut _,
                    )
                }
                .map_err(fft_err("D2Z"))?;
            }
        }
        self.transpose(comm, true)?;
        self.along_s(FftDirection::Forward as i32)
    }

    /// The pencil spectrum back to the lattice field (destroys the pencil spectrum).
    fn inverse(&mut self, comm: &dyn Comm, field: &mut CudaSlice<f64>) -> GpuResult<()> {
        self.along_s(FftDirection::Inverse as i32)?;
        self.transpose(comm, false)?;
        let s = self.stream.clone();
        let (n, nh) = (self.layout.n() as u64, self.layout.nh() as u64);
        if let Some((_, inv)) = &self.planes {
            let (src, _g1) = self.slab.device_ptr_mut(&s);
            let (dst, _g2) = field.device_ptr_mut(&s);
            for p in 0..self.layout.planes(self.layout.rank()).len() as u64 {
                // SAFETY: as in `forward`, the other way (cuFFT's C2R overwrites its input: the
                // slab spectrum's plane p only).
                unsafe {
                    cufft_result::exec_z2d(
                        inv.handle(),
                        (src + 16 * 3 * n * nh * p) as *mut _,
                        (dst + 8 * 3 * n * n * p) as *mut _,
                    )
                }
                .map_err(fft_err("Z2D"))?;
            }
        }
        Ok(())
    }

    fn along_s(&mut self, direction: i32) -> GpuResult<()> {
        let s = self.stream.clone();
        s.context().bind_to_thread()?;
        let (p, _g) = self.pencil.device_ptr_mut(&s);
        // SAFETY: the pencil spectrum, 2 pencil_len doubles: the plan's columns, in place.
        unsafe {
            cufft_result::exec_z2z(self.along_s.handle(), p as *mut _, p as *mut _, direction)
        }
        .map_err(fft_err("Z2Z"))
    }

    /// The transpose through the host: slab to pencil spectra (`forward`) or back.
    fn transpose(&mut self, comm: &dyn Comm, forward: bool) -> GpuResult<()> {
        let s = self.stream.clone();
        let slab_doubles = self.host_slab.len();
        if forward {
            if slab_doubles > 0 {
                s.memcpy_dtoh(&self.slab.slice(..slab_doubles), &mut self.host_slab[..])?;
            }
            s.synchronize()?;
            slabs_to_pencils(&self.layout, comm, &self.host_slab, &mut self.host_pencil);
            s.memcpy_htod(&self.host_pencil[..], &mut self.pencil)?;
        } else {
            s.memcpy_dtoh(&self.pencil, &mut self.host_pencil[..])?;
            s.synchronize()?;
            pencils_to_slabs(&self.layout, comm, &self.host_pencil, &mut self.host_slab);
            if slab_doubles > 0 {
                s.memcpy_htod(
                    &self.host_slab[..],
                    &mut self.slab.slice_mut(..slab_doubles),
                )?;
            }
        }
        Ok(())
    }
}
