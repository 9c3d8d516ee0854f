//! Fourier-space steps on a periodic `n^3` lattice with cuFFT: three real components stored
//! interleaved (`[n^3][3]`, the layout of the particle rows) transformed together (one batched
//! plan of stride 3), the half spectrum `(i n + j) (n/2+1) + k` of each component after the
//! other.
//! * [`Fourier::solve_rbf`]: the periodic RBF system `A beta = omega` of
//!   `vortex_method::reinterpolation` (`A = c T ⊗ T ⊗ T`, `T` circulant with the eigenvalues `S(k)`
//!   of `vortex_method::reinterpolation::separable`), `beta_hat = omega_hat / (c S(kx) S(ky) S(kz))`:
//!   the three axis solves of the host in one pass.
//! * [`Fourier::biot_savart`]: `u_hat = i k x omega_hat / |k|^2`, the velocity of a periodic
//!   vorticity field (zero mean; the Nyquist planes dropped).

use crate::kernels::{per_element, Kernels};
use cudarc::cufft::{result as cufft_result, sys as cufft_sys, CudaFft};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use std::sync::Arc;
use vortex_cuda::{GpuError, GpuResult};

fn fft_err(what: &'static str) -> impl Fn(cufft_result::CufftError) -> GpuError {
    move |e| GpuError::Unsupported(format!("cuFFT {what}: {e:?}"))
}

/// Energy statistics of a periodic velocity from its Fourier coefficients, in integer
/// wavenumbers (`k = 0, 1, ...`; multiply by `2 pi / L`).
#[derive(Clone, Debug, PartialEq)]
pub struct GridSpectrum {
    /// `E(k)` of the shells `round(|k|) = 0, 1, ...`.
    pub shells: Vec<f64>,
    /// `(1/2) <|u|^2>`.
    pub energy: f64,
    /// `(1/2) sum |k x u_hat|^2` (integer `k`).
    pub enstrophy: f64,
}

/// The batched transforms of one lattice size and their spectrum buffer.
pub struct Fourier {
    pub n: usize,
    /// Complex values per component, `n^2 (n/2 + 1)`.
    pub clen: usize,
    fwd: CudaFft,
    inv: CudaFft,
    /// `3 clen` complex numbers (f64 pairs).
    spec: CudaSlice<f64>,
}

impl Fourier {
    pub fn new(s: &Arc<CudaStream>, n: usize) -> GpuResult<Self> {
        if !gpu_cufft_present() {
            return Err(GpuError::Unsupported(
                "cuFFT library (libcufft) not found: install the CUDA cuFFT library and put its \
                 directory on LD_LIBRARY_PATH"
                    .into(),
            ));
        }
        vortex_cuda::device::trim_pool(s.context())?;
        let ni = n as i32;
        let nh = (n / 2 + 1) as i32;
        let clen = n * n * (n / 2 + 1);
        let real = [ni, ni, ni];
        let half = [ni, ni, nh];
        let fwd = CudaFft::plan_many(
            &real,
            Some(&real),
            3,
            1,
            Some(&half),
            1,
            clen as i32,
            cufft_sys::cufftType::CUFFT_D2Z,
            3,
            s.clone(),
        )
        .map_err(fft_err("D2Z plan"))?;
        let inv = CudaFft::plan_many(
            &real,
            Some(&half),
            1,
            clen as i32,
            Some(&real),
            3,
            1,
            cufft_sys::cufftType::CUFFT_Z2D,
            3,
            s.clone(),
        )
        .map_err(fft_err("Z2D plan"))?;
        Ok(Self {
            n,
            clen,
            fwd,
            inv,
            spec: s.alloc_zeros::<f64>(6 * clen)?,
        })
    }

    fn forward(&mut self, s: &Arc<CudaStream>, real: &CudaSlice<f64>) -> GpuResult<()> {
        s.context().bind_to_thread()?;
        let (src, _g1) = real.device_ptr(s);
        let (dst, _g2) = self.spec.device_ptr_mut(s);
        // SAFETY: `real` holds 3 n^3 doubles, `spec` 3 clen complex: the plan's layout.
        unsafe { cufft_result::exec_d2z(self.fwd.handle(), src as *mut _, dst as *mut _) }
            .map_err(fft_err("D2Z"))
    }

    fn inverse(&mut self, s: &Arc<CudaStream>, real: &mut CudaSlice<f64>) -> GpuResult<()> {
        s.context().bind_to_thread()?;
        let (src, _g1) = self.spec.device_ptr_mut(s);
        let (dst, _g2) = real.device_ptr_mut(s);
        // SAFETY: as in `forward` (the spectrum is overwritten: cuFFT's C2R contract).
        unsafe { cufft_result::exec_z2d(self.inv.handle(), src as *mut _, dst as *mut _) }
            .map_err(fft_err("Z2D"))
    }

    fn check_len(&self, v: &CudaSlice<f64>) -> GpuResult<()> {
        if v.len() < 3 * self.n.pow(3) {
            return Err(GpuError::Unsupported(format!(
                "a lattice field of {} doubles for n = {}",
                v.len(),
                self.n
            )));
        }
        Ok(())
    }

    /// `beta = A^-1 omega` in place of `field` (`inv_eig` = `1 / S(k)`, `k = 0..n`, on the
    /// device; `c` the Gaussian's normalisation `(2 pi sigma^2)^(-3/2)`).
    pub fn solve_rbf(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        field: &mut CudaSlice<f64>,
        inv_eig: &CudaSlice<f64>,
        c: f64,
    ) -> GpuResult<()> {
        self.check_len(field)?;
        self.forward(s, field)?;
        self.solve_rbf_spectrum(k, s, field, inv_eig, c)
    }

    /// The spectrum buffer: `3 clen` complex numbers (f64 pairs), the half spectrum of each
    /// component after the other, unnormalised (cuFFT's D2Z convention), for a caller that
    /// computes the spectrum itself (`crate::spreading`).
    pub fn spectrum_mut(&mut self) -> &mut CudaSlice<f64> {
        &mut self.spec
    }

    /// [`Fourier::solve_rbf`] of the field whose spectrum is in the buffer
    /// ([`Fourier::spectrum_mut`]): `beta` into `field` (`3 n^3` doubles, interleaved).
    pub fn solve_rbf_spectrum(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        field: &mut CudaSlice<f64>,
        inv_eig: &CudaSlice<f64>,
        c: f64,
    ) -> GpuResult<()> {
        self.check_len(field)?;
        let scale = 1.0 / (c * self.n.pow(3) as f64);
        let (n_i, clen_i) = (self.n as i32, self.clen as i64);
        let cfg = per_element(self.clen);
        k.solve_fourier(s, cfg, &mut self.spec, n_i, clen_i, inv_eig, scale)?;
        self.inverse(s, field)
    }

    /// The periodic velocity of the vorticity `field` (box length `l`): its normalised half
    /// spectrum is left in the spectrum buffer ([`Fourier::spectrum`]); with `physical`, the
    /// velocity replaces `field`.
    pub fn biot_savart(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        field: &mut CudaSlice<f64>,
        l: f64,
        physical: bool,
    ) -> GpuResult<()> {
        self.check_len(field)?;
        self.forward(s, field)?;
        let scale = 1.0 / self.n.pow(3) as f64;
        let inv_kscale = l / (2.0 * std::f64::consts::PI);
        let (n_i, clen_i) = (self.n as i32, self.clen as i64);
        let cfg = per_element(self.clen);
        k.biot_savart_fourier(s, cfg, &mut self.spec, n_i, clen_i, inv_kscale, scale)?;
        if physical {
            // cuFFT's C2R overwrites its input: the statistics come from a copy
            let keep = s.clone_dtod(&self.spec)?;
            self.inverse(s, field)?;
            self.spec = keep;
        }
        Ok(())
    }

    /// Shell spectrum, energy and enstrophy of the normalised velocity half spectrum in the
    /// buffer (after [`Fourier::biot_savart`]), in integer wavenumbers, with the conventions of
    /// `vortex_spectral::diagnostics` (`spectrum_spectral`, `energy_spectral`, `enstrophy_spectral`).
    pub fn spectrum(&self, k: &Kernels, s: &Arc<CudaStream>) -> GpuResult<GridSpectrum> {
        let n = self.n;
        let nshell = (3.0f64.sqrt() * n as f64 / 2.0).ceil() as usize + 1;
        let width = nshell + 2;
        let threads = 256usize;
        let blocks = self.clen.div_ceil(threads).clamp(1, 1024);
        let mut partial = s.alloc_zeros::<f64>(blocks * width)?;
        let (n_i, clen_i, ns_i) = (n as i32, self.clen as i64, nshell as i32);
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (threads as u32, 1, 1),
            shared_mem_bytes: ((nshell + 2 * threads) * 8) as u32,
        };
        k.spectrum_partial(s, cfg, &self.spec, n_i, clen_i, ns_i, &mut partial)?;
        let mut out = s.alloc_zeros::<f64>(width)?;
        let (nb_i, w_i) = (blocks as i32, width as i32);
        k.sum_partials(s, per_element(width), &partial, nb_i, w_i, &mut out)?;
        let v = s.clone_dtoh(&out)?;
        Ok(GridSpectrum {
            shells: v[..nshell].to_vec(),
            energy: v[nshell],
            enstrophy: v[nshell + 1],
        })
    }
}

/// Whether libcufft can be loaded.
pub fn gpu_cufft_present() -> bool {
    // SAFETY: probes the dynamic library only.
    unsafe { cufft_sys::is_culib_present() }
}
