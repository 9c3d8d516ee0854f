//! The slab-decomposed transforms of one rank on its GPU, the data on the device end to end:
//! cuFFT for the 2-D transforms of the own planes (one plan of a plane's three interleaved
//! components, run plane by plane) and for the 1-D transforms along `s` (one plan
//! over every column of the pencil spectrum); the transposes as the pack kernel
//! `sf_copy_rows` (the slab spectrum's block of each pencil rank into its contiguous
//! message, the own block straight into the pencil spectrum), one all-to-all of device
//! buffers ([`vortex_exchange::DeviceExchange`]: NCCL, or pinned host buffers and MPI), and
//! the same kernel back; the pointwise factors by the kernels of `kernels/slab_fourier.cu`.
//! No host pass over the spectrum.

use super::GridSpectrum;
use super::{reduce_spectrum, Rows, SlabAxis, SlabError, SlabLayout};
use crate::kernels::per_element;
use cudarc::cufft::{result as cufft_result, sys as cufft_sys, CudaFft, FftDirection};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use std::sync::Arc;
use std::time::Instant;
use vortex_cuda::{GpuDevice, GpuError, GpuResult};
use vortex_domain::Comm;
use vortex_exchange::DeviceExchange;

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

/// The kernels of `kernels/slab_fourier.cu` (the typed table of `vortex_cuda::launch`).
pub use vortex_cuda::launch::SlabFourier as SlabKernels;

/// The communicator and the device exchange of one rank, handed to each collective call.
pub struct Ranks<'a> {
    pub comm: &'a dyn Comm,
    pub exchange: &'a mut dyn DeviceExchange,
}

/// Seconds and bytes of the phases of the transforms since [`SlabFourier::take_times`]
/// (measured only with [`SlabFourier::set_timed`]: each phase then ends with a synchronize).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SlabTimes {
    /// 2-D transforms of the own planes (both directions).
    pub planes: f64,
    /// 1-D transforms along `s`.
    pub along_s: f64,
    /// Packing and unpacking the messages.
    pub pack: f64,
    /// The all-to-all exchanges.
    pub exchange: f64,
    /// Bytes sent to other ranks by the exchanges.
    pub bytes: u64,
    /// Exchanges run.
    pub transposes: u64,
}

/// The slab-decomposed transforms of one rank, its buffers and plans (sizes:
/// [`SlabLayout::device_bytes`], [`SlabLayout::host_bytes`] for the pinned transport).
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
    /// Messages of the transposes, `2 slab_len` doubles ([`SlabLayout::wire_block`]).
    wire: CudaSlice<f64>,
    /// Pencil spectrum, `2 pencil_len` doubles.
    pencil: CudaSlice<f64>,
    /// `SPECTRUM_BLOCKS (shells + 2)` partial sums of the last Biot-Savart step.
    partial: CudaSlice<f64>,
    has_spectrum: bool,
    timed: bool,
    times: SlabTimes,
}

/// The 2-D plans of one plane's three interleaved components (`D2Z`, `Z2D`), run plane by
/// plane. (One plan batched over the planes per component would need the component's real
/// input at an 8-byte offset, which cuFFT refuses: its pointers must be aligned to the
/// complex type.)
fn plane_plans(
    n: i32,
    planes: usize,
    s: &Arc<CudaStream>,
) -> GpuResult<Option<(CudaFft, CudaFft)>> {
    if planes == 0 {
        return Ok(None);
    }
    let nh = n / 2 + 1;
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
    Ok(Some((fwd, inv)))
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
        dev.trim_pool()?;
        let n = layout.n() as i32;
        let nplanes = layout.planes(layout.rank()).len();
        // a layout deeper than the lattice (the fine planes of the spreading over slabs) has
        // its slab spectrum written by its caller: no plane transforms
        let planes = match layout.depth() == layout.n() {
            true => plane_plans(n, nplanes, s)?,
            false => None,
        };
        let depth = layout.depth() as i32;
        let columns = (layout.pencil_len() / layout.depth()) as i32;
        let z2z = cufft_sys::cufftType::CUFFT_Z2Z;
        let along_s = CudaFft::plan_many(
            &[depth],
            Some(&[depth]),
            columns,
            1,
            Some(&[depth]),
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
        let slab_doubles = 2 * layout.slab_len().max(1);
        Ok(Self {
            slab: s.alloc_zeros::<f64>(slab_doubles)?,
            wire: s.alloc_zeros::<f64>(slab_doubles)?,
            pencil: s.alloc_zeros::<f64>(2 * layout.pencil_len())?,
            partial: s.alloc_zeros::<f64>(SPECTRUM_BLOCKS * width)?,
            has_spectrum: false,
            timed: false,
            times: SlabTimes::default(),
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

    /// Measure the phases (a synchronize after each; for benchmarks).
    pub fn set_timed(&mut self, timed: bool) {
        self.timed = timed;
    }

    /// The phase times since the last call (zero unless timed; bytes always counted).
    pub fn take_times(&mut self) -> SlabTimes {
        std::mem::take(&mut self.times)
    }

    /// Runs `f`, adding its seconds to the phase `slot` when timed.
    fn phase<T>(
        &mut self,
        slot: fn(&mut SlabTimes) -> &mut f64,
        f: impl FnOnce(&mut Self) -> GpuResult<T>,
    ) -> GpuResult<T> {
        if !self.timed {
            return f(self);
        }
        self.stream.synchronize()?;
        let t = Instant::now();
        let r = f(self)?;
        self.stream.synchronize()?;
        *slot(&mut self.times) += t.elapsed().as_secs_f64();
        Ok(r)
    }

    /// `beta = A^-1 omega` in place of this rank's planes `field` (collective; `inv_eig` =
    /// `1 / S(k)`, `k = 0..n`, on the device; `c` the Gaussian's normalisation `(2 pi
    /// sigma^2)^(-3/2)`): the periodic RBF lattice solve, the three axis solves of the host's
    /// `vortex_method::reinterpolation::separable` in one pass.
    pub fn solve_rbf(
        &mut self,
        ranks: Ranks<'_>,
        field: &mut CudaSlice<f64>,
        inv_eig: &CudaSlice<f64>,
        c: f64,
    ) -> GpuResult<()> {
        self.forward(ranks.comm, ranks.exchange, field)?;
        self.solve_rbf_pencil(ranks, field, inv_eig, c)
    }

    /// The pencil spectrum (`2 pencil_len` doubles: complex numbers as pairs, three components
    /// interleaved, unnormalised as cuFFT's forward transforms), for a caller that computes
    /// this rank's spectrum itself (the Gaussian sums by spreading, `crate::spreading`).
    pub fn pencil_mut(&mut self) -> &mut CudaSlice<f64> {
        &mut self.pencil
    }

    /// The slab spectrum (`2 slab_len` doubles, `[s - s0][km][kf][3]`), for a caller that
    /// computes it itself (the fine planes of `crate::spreading::device_slabs`).
    pub fn slab_mut(&mut self) -> &mut CudaSlice<f64> {
        &mut self.slab
    }

    /// The pencil spectrum after [`Self::forward_from_slab`].
    pub fn pencil(&self) -> &CudaSlice<f64> {
        &self.pencil
    }

    /// The slab spectrum ([`Self::slab_mut`]) transposed and transformed along `s` into the
    /// pencil spectrum (collective).
    pub fn forward_from_slab(&mut self, ranks: Ranks<'_>) -> GpuResult<()> {
        self.layout.check_comm(ranks.comm)?;
        self.stream.context().bind_to_thread()?;
        self.phase(|t| &mut t.pack, |me| me.pack())?;
        self.phase(
            |t| &mut t.exchange,
            |me| me.exchange(ranks.comm, ranks.exchange, true),
        )?;
        self.phase(
            |t| &mut t.along_s,
            |me| me.along_s(FftDirection::Forward as i32),
        )
    }

    /// [`Self::solve_rbf`] of the field whose spectrum is in the pencil buffer
    /// ([`Self::pencil_mut`]): `beta` into this rank's planes `field` (collective).
    pub fn solve_rbf_pencil(
        &mut self,
        ranks: Ranks<'_>,
        field: &mut CudaSlice<f64>,
        inv_eig: &CudaSlice<f64>,
        c: f64,
    ) -> GpuResult<()> {
        self.layout.check_eig(inv_eig.len())?;
        self.layout.check_field(field.len())?;
        let (n, nq, m0, count) = self.pencil_dims();
        let scale = 1.0 / (c * self.layout.n().pow(3) as f64);
        let cfg = per_element(count as usize);
        // the pencil holds 3 count complex numbers, inv_eig n doubles (checked)
        let k = &self.kernels;
        k.solve(
            &self.stream,
            cfg,
            &mut self.pencil,
            n,
            nq,
            m0,
            count,
            inv_eig,
            scale,
        )?;
        self.inverse(ranks.comm, ranks.exchange, field)
    }

    /// The periodic velocity of the vorticity `field` (this rank's planes, box length `l` in
    /// length units; collective): its spectrum's partial sums are kept for [`Self::spectrum`];
    /// with `physical`, the velocity replaces `field`.
    pub fn biot_savart(
        &mut self,
        ranks: Ranks<'_>,
        field: &mut CudaSlice<f64>,
        l: f64,
        physical: bool,
    ) -> GpuResult<()> {
        self.forward(ranks.comm, ranks.exchange, field)?;
        let (n, nq, m0, count) = self.pencil_dims();
        let slab_z = (self.layout.axis() == SlabAxis::Z) as i32;
        let scale = 1.0 / self.layout.n().pow(3) as f64;
        let inv_kscale = l / (2.0 * std::f64::consts::PI);
        let (k, st) = (&self.kernels, &self.stream);
        let cfg = per_element(count as usize);
        // the pencil holds 3 count complex numbers
        k.biot_savart(
            st,
            cfg,
            &mut self.pencil,
            n,
            nq,
            m0,
            count,
            slab_z,
            inv_kscale,
            scale,
        )?;
        let nshell = self.layout.shells() as i32;
        let cfg = LaunchConfig {
            grid_dim: (SPECTRUM_BLOCKS as u32, 1, 1),
            block_dim: (SPECTRUM_THREADS, 1, 1),
            shared_mem_bytes: (nshell as u32) * 8,
        };
        // partial holds SPECTRUM_BLOCKS (nshell + 2) doubles; blockDim.x is the kernel's
        // SF_THREADS = 256; the dynamic shared memory its nshell shell sums; a grid-stride loop
        // covers every element
        let (pencil, partial) = (&self.pencil, &mut self.partial);
        k.spectrum_partial(st, cfg, pencil, n, nq, m0, count, slab_z, nshell, partial)?;
        self.has_spectrum = true;
        if physical {
            self.inverse(ranks.comm, ranks.exchange, field)?;
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
    fn forward(
        &mut self,
        comm: &dyn Comm,
        exchange: &mut dyn DeviceExchange,
        field: &CudaSlice<f64>,
    ) -> GpuResult<()> {
        self.layout.check_comm(comm)?;
        self.layout.check_field(field.len())?;
        self.stream.context().bind_to_thread()?;
        self.phase(|t| &mut t.planes, |me| me.planes_forward(field))?;
        self.forward_from_slab(Ranks { comm, exchange })
    }

    /// The pencil spectrum back to the lattice field (destroys the pencil spectrum).
    fn inverse(
        &mut self,
        comm: &dyn Comm,
        exchange: &mut dyn DeviceExchange,
        field: &mut CudaSlice<f64>,
    ) -> GpuResult<()> {
        self.phase(
            |t| &mut t.along_s,
            |me| me.along_s(FftDirection::Inverse as i32),
        )?;
        self.phase(|t| &mut t.exchange, |me| me.exchange(comm, exchange, false))?;
        self.phase(|t| &mut t.pack, |me| me.unpack())?;
        self.phase(|t| &mut t.planes, |me| me.planes_inverse(field))
    }

    /// The 2-D transforms of the own planes.
    fn planes_forward(&mut self, field: &CudaSlice<f64>) -> GpuResult<()> {
        let Some((fwd, _)) = &self.planes else {
            return Ok(());
        };
        let s = &self.stream;
        let (n, nh) = (self.layout.n() as u64, self.layout.nh() as u64);
        let (src, _g1) = field.device_ptr(s);
        let (dst, _g2) = self.slab.device_ptr_mut(s);
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
        Ok(())
    }

    /// The inverse 2-D transforms (cuFFT's C2R overwrites its input: the slab spectrum).
    fn planes_inverse(&mut self, field: &mut CudaSlice<f64>) -> GpuResult<()> {
        let Some((_, inv)) = &self.planes else {
            return Ok(());
        };
        let s = &self.stream;
        let (n, nh) = (self.layout.n() as u64, self.layout.nh() as u64);
        let (src, _g1) = self.slab.device_ptr_mut(s);
        let (dst, _g2) = field.device_ptr_mut(s);
        for p in 0..self.layout.planes(self.layout.rank()).len() as u64 {
            // SAFETY: as in `planes_forward`, the other way.
            unsafe {
                cufft_result::exec_z2d(
                    inv.handle(),
                    (src + 16 * 3 * n * nh * p) as *mut _,
                    (dst + 8 * 3 * n * n * p) as *mut _,
                )
            }
            .map_err(fft_err("Z2D"))?;
        }
        Ok(())
    }

    /// The slab spectrum's block of every pencil rank into its message; the own block into
    /// the pencil spectrum.
    fn pack(&mut self) -> GpuResult<()> {
        let Self {
            layout: l,
            stream,
            kernels,
            slab,
            wire,
            pencil,
            ..
        } = self;
        let me = l.rank();
        for d in 0..l.ranks() {
            let rows = l.slab_rows(d);
            let dst = if d == me {
                (&mut *pencil, l.pencil_run(me).start, rows.width)
            } else {
                (&mut *wire, l.wire_block(d).start, rows.width)
            };
            copy_rows(stream, kernels, dst, (slab, rows.first), rows)?;
        }
        Ok(())
    }

    /// Every received message (and the own block of the pencil spectrum) back into its
    /// block of the slab spectrum.
    fn unpack(&mut self) -> GpuResult<()> {
        let Self {
            layout: l,
            stream,
            kernels,
            slab,
            wire,
            pencil,
            ..
        } = self;
        let me = l.rank();
        for q in 0..l.ranks() {
            let rows = l.slab_rows(q);
            let src = if q == me {
                (&*pencil, l.pencil_run(me).start)
            } else {
                (&*wire, l.wire_block(q).start)
            };
            let packed = Rows {
                first: 0,
                stride: rows.width,
                ..rows
            };
            let dst = (&mut *slab, rows.first, rows.stride);
            copy_rows(stream, kernels, dst, src, packed)?;
        }
        Ok(())
    }

    /// The all-to-all of the forward (message buffer to pencil spectrum) or inverse
    /// transpose.
    fn exchange(
        &mut self,
        comm: &dyn Comm,
        exchange: &mut dyn DeviceExchange,
        forward: bool,
    ) -> GpuResult<()> {
        let err = |e: vortex_exchange::ExchangeError| GpuError::Unsupported(e.to_string());
        let bytes = if forward {
            let parts = self.layout.forward_parts().map_err(err)?;
            exchange.alltoallv(comm, &self.wire, &mut self.pencil, &parts)
        } else {
            let parts = self.layout.inverse_parts().map_err(err)?;
            exchange.alltoallv(comm, &self.pencil, &mut self.wire, &parts)
        }
        .map_err(err)?;
        self.times.bytes += bytes as u64;
        self.times.transposes += 1;
        Ok(())
    }

    fn along_s(&mut self, direction: i32) -> GpuResult<()> {
        let s = self.stream.clone();
        let (p, _g) = self.pencil.device_ptr_mut(&s);
        // SAFETY: the pencil spectrum, 2 pencil_len doubles: the plan's columns, in place.
        unsafe {
            cufft_result::exec_z2z(self.along_s.handle(), p as *mut _, p as *mut _, direction)
        }
        .map_err(fft_err("Z2Z"))
    }
}

/// `rows` of `src` (complex numbers as `f64` pairs) from the complex offset `src.1` to `dst`
/// from `dst.1`, row stride `dst.2` there: the kernel `sf_copy_rows`.
fn copy_rows(
    s: &Arc<CudaStream>,
    kernels: &SlabKernels,
    dst: (&mut CudaSlice<f64>, usize, usize),
    src: (&CudaSlice<f64>, usize),
    rows: Rows,
) -> GpuResult<()> {
    let count = (rows.rows * rows.width) as i64;
    if count == 0 {
        return Ok(());
    }
    let (dst, dst_at, dst_stride) = dst;
    let last = |at: usize, stride: usize| 2 * (at + (rows.rows - 1) * stride + rows.width);
    if last(dst_at, dst_stride) > dst.len() || last(src.1, rows.stride) > src.0.len() {
        return Err(GpuError::Unsupported(format!(
            "slab FFT: a block of {rows:?} outside its buffers ({} and {} doubles)",
            dst.len(),
            src.0.len()
        )));
    }
    let mut d = dst.slice_mut(2 * dst_at..);
    let sv = src.0.slice(2 * src.1..);
    let (ds, ss, w) = (dst_stride as i64, rows.stride as i64, rows.width as i64);
    // every row lies within both buffers (checked above)
    kernels.copy_rows(
        s,
        per_element(count as usize),
        &mut d,
        ds,
        &sv,
        ss,
        w,
        count,
    )?;
    Ok(())
}

/// Whether libcufft can be loaded.
pub fn gpu_cufft_present() -> bool {
    // SAFETY: probes the dynamic library only.
    unsafe { cufft_sys::is_culib_present() }
}
