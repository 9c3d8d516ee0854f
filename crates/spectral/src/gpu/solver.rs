//! The CUDA stepper: the state and all workspace on the device, cuFFT for the transforms and the
//! kernels of `kernels/spectral.cu` for everything else.

use super::layout::{self, BLOCK};
use crate::config::Dealias;
use crate::field::SpectralField;
use crate::solver::{product_grid, Clock, SolverError, StepInfo, StepMode};
use cudarc::cufft::{result as cufft_result, sys as cufft_sys, CudaFft};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut, LaunchConfig};
use num_complex::Complex64;
use std::sync::Arc;
use vortex_cuda::launch::Spectral;
use vortex_cuda::{GpuDevice, GpuError};

/// The kernel source, embedded in the binary and compiled by NVRTC at first use on a device.
pub use vortex_cuda::SPECTRAL;

fn dev_err<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> SolverError {
    move |e| SolverError::Device(format!("{what}: {e}"))
}

fn gpu_err(e: GpuError) -> SolverError {
    SolverError::Device(e.to_string())
}

/// Whether the cuFFT library can be loaded (never panics).
pub fn cufft_present() -> bool {
    // SAFETY: only tries to dlopen the library under its candidate names.
    unsafe { cufft_sys::is_culib_present() }
}

/// Why the CUDA backend cannot run here, or `Ok` with the device when it can.
pub fn probe(index: usize) -> Result<Arc<GpuDevice>, SolverError> {
    if !vortex_cuda::driver_present() {
        return Err(gpu_err(GpuError::NoDriver));
    }
    if !cufft_present() {
        return Err(SolverError::Device(
            "cuFFT library (libcufft) not found: install the CUDA 13 cuFFT library (e.g. the \
             nvidia-cufft wheel) and put its directory on LD_LIBRARY_PATH"
                .into(),
        ));
    }
    GpuDevice::get(index).map_err(gpu_err)
}

fn launch_cfg(len: usize) -> LaunchConfig {
    let blocks = len.div_ceil(BLOCK).clamp(1, 1 << 20);
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (BLOCK as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The pseudo-spectral solver on a CUDA device, in double precision. Same algorithm, same
/// parameters and same results (to round-off) as [`crate::Solver`].
pub struct GpuSolver {
    n: usize,
    m: usize,
    nu: f64,
    dealias: Dealias,
    kcut: i64,
    clock: Clock,
    factor_dt: f64,
    dev: Arc<GpuDevice>,
    stream: Arc<CudaStream>,
    k: Spectral,
    inv: CudaFft,
    fwd: CudaFft,
    /// State, accumulator, stage and right-hand side: 3 components of `n^2 (n/2+1)` complex each
    /// (stored as interleaved doubles), the CPU layout.
    state: CudaSlice<f64>,
    acc: CudaSlice<f64>,
    stage: CudaSlice<f64>,
    rhs: CudaSlice<f64>,
    e_half: CudaSlice<f64>,
    e_full: CudaSlice<f64>,
    /// Six in-place transform buffers of `m^2 (m/2+1)` complex.
    work: CudaSlice<f64>,
    /// `[umax bits, non-finite flag]`.
    flags: CudaSlice<u64>,
    /// The state on the host, valid until the next step.
    host: Option<SpectralField>,
}

impl std::fmt::Debug for GpuSolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuSolver")
            .field("n", &self.n)
            .field("m", &self.m)
            .field("device", &self.dev.name())
            .finish()
    }
}

#[derive(Clone, Copy)]
enum Input {
    State,
    Stage,
}

impl GpuSolver {
    /// A solver on visible device `device` starting from `state` (the projected, truncated
    /// Fourier coefficients, see [`crate::solver::initial_state`]). An error, never a panic,
    /// when there is no driver, cuFFT, NVRTC or device, or too little device memory.
    pub fn new(
        state: &SpectralField,
        nu: f64,
        dealias: Dealias,
        mode: StepMode,
        device: usize,
    ) -> Result<GpuSolver, SolverError> {
        let n = state.n;
        if n < 8 || n % 2 != 0 {
            return Err(SolverError::Invalid(format!(
                "grid size must be even and >= 8, got {n}"
            )));
        }
        if nu.is_nan() || nu < 0.0 {
            return Err(SolverError::Invalid(format!(
                "viscosity must be >= 0, got {nu}"
            )));
        }
        let dev = probe(device)?;
        let (m, kcut) = product_grid(n, dealias);
        let need = layout::device_bytes(n, dealias);
        let (free, _) = dev.mem_info().map_err(gpu_err)?;
        if need > free {
            return Err(SolverError::Device(format!(
                "{n}^3 with {dealias:?} needs about {:.2} GiB of device memory (plus cuFFT work \
                 areas), {} has {:.2} GiB free",
                need as f64 / (1u64 << 30) as f64,
                dev.name(),
                free as f64 / (1u64 << 30) as f64
            )));
        }
        let k = Spectral::load(&dev).map_err(gpu_err)?;
        let stream = dev.stream().clone();
        let mi = m as i32;
        let mh = (m / 2 + 1) as i32;
        let mclen = m * m * (m / 2 + 1);
        let plan = |ty, inembed: [i32; 3], idist: usize, onembed: [i32; 3], odist: usize| {
            CudaFft::plan_many(
                &[mi, mi, mi],
                Some(&inembed),
                1,
                idist as i32,
                Some(&onembed),
                1,
                odist as i32,
                ty,
                1,
                stream.clone(),
            )
            .map_err(dev_err("cuFFT plan"))
        };
        // In place: complex rows of mh, real rows padded to 2*mh.
        let inv = plan(
            cufft_sys::cufftType::CUFFT_Z2D,
            [mi, mi, mh],
            mclen,
            [mi, mi, 2 * mh],
            2 * mclen,
        )?;
        let fwd = plan(
            cufft_sys::cufftType::CUFFT_D2Z,
            [mi, mi, 2 * mh],
            2 * mclen,
            [mi, mi, mh],
            mclen,
        )?;
        let clen = n * n * (n / 2 + 1);
        let alloc = |len: usize| {
            stream
                .alloc_zeros::<f64>(len)
                .map_err(dev_err("device allocation"))
        };
        let mut s = GpuSolver {
            n,
            m,
            nu,
            dealias,
            kcut,
            clock: Clock::new(mode),
            factor_dt: f64::NAN,
            state: alloc(6 * clen)?,
            acc: alloc(6 * clen)?,
            stage: alloc(6 * clen)?,
            rhs: alloc(6 * clen)?,
            e_half: alloc(clen)?,
            e_full: alloc(clen)?,
            work: alloc(12 * mclen)?,
            flags: stream
                .alloc_zeros::<u64>(2)
                .map_err(dev_err("device allocation"))?,
            host: None,
            dev,
            stream,
            k,
            inv,
            fwd,
        };
        s.upload(state)?;
        log::info!(
            "CUDA spectral solver on {}: {n}^3, products on {m}^3, {:.2} GiB of device memory",
            s.dev.name(),
            need as f64 / (1u64 << 30) as f64
        );
        Ok(s)
    }

    /// Name of the device.
    pub fn device_name(&self) -> &str {
        self.dev.name()
    }

    /// Grid size.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Size of the grid on which products are formed.
    pub fn padded_n(&self) -> usize {
        self.m
    }

    /// Current time.
    pub fn time(&self) -> f64 {
        self.clock.t
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.clock.steps
    }

    /// Viscosity.
    pub fn nu(&self) -> f64 {
        self.nu
    }

    /// Dealiasing rule.
    pub fn dealias(&self) -> Dealias {
        self.dealias
    }

    /// Largest retained wavenumber per direction.
    pub fn kmax(&self) -> f64 {
        self.kcut as f64
    }

    /// Step mode.
    pub fn step_mode(&self) -> StepMode {
        self.clock.mode
    }

    /// Change the step mode.
    pub fn set_step_mode(&mut self, mode: StepMode) {
        self.clock.mode = mode;
    }

    fn upload(&mut self, state: &SpectralField) -> Result<(), SolverError> {
        let clen = self.n * self.n * (self.n / 2 + 1);
        if state.n != self.n || state.c.iter().any(|c| c.len() != clen) {
            return Err(SolverError::Invalid("state has the wrong size".into()));
        }
        let mut flat = Vec::with_capacity(6 * clen);
        for c in &state.c {
            for v in c {
                flat.push(v.re);
                flat.push(v.im);
            }
        }
        self.stream
            .memcpy_htod(&flat, &mut self.state)
            .map_err(dev_err("upload"))?;
        self.host = Some(state.clone());
        Ok(())
    }

    /// Replace the state (used by restart); sets time and step count.
    pub fn set_state(
        &mut self,
        state: SpectralField,
        t: f64,
        steps: u64,
    ) -> Result<(), SolverError> {
        self.upload(&state)?;
        self.clock.t = t;
        self.clock.steps = steps;
        Ok(())
    }

    /// The Fourier coefficients of the velocity, downloaded when the state changed since the last
    /// call.
    pub fn spectral(&mut self) -> Result<&SpectralField, SolverError> {
        if self.host.is_none() {
            let flat = self
                .stream
                .clone_dtoh(&self.state)
                .map_err(dev_err("download"))?;
            let clen = self.n * self.n * (self.n / 2 + 1);
            let mut s = SpectralField::zeros(self.n);
            for (c, comp) in s.c.iter_mut().enumerate() {
                let src = &flat[2 * c * clen..2 * (c + 1) * clen];
                for (v, p) in comp.iter_mut().zip(src.chunks_exact(2)) {
                    *v = Complex64::new(p[0], p[1]);
                }
            }
            self.host = Some(s);
        }
        Ok(self.host.as_ref().expect("just set"))
    }

    /// The dealiased, projected nonlinear term `P[u x omega]` of the current state (for tests).
    pub fn nonlinear_term(&mut self) -> Result<SpectralField, SolverError> {
        self.nonlinear(Input::State)?;
        let flat = self
            .stream
            .clone_dtoh(&self.rhs)
            .map_err(dev_err("download"))?;
        let clen = self.n * self.n * (self.n / 2 + 1);
        let mut s = SpectralField::zeros(self.n);
        for (c, comp) in s.c.iter_mut().enumerate() {
            for (i, v) in comp.iter_mut().enumerate() {
                let j = 2 * (c * clen + i);
                *v = Complex64::new(flat[j], flat[j + 1]);
            }
        }
        Ok(s)
    }

    /// Advance one step with the configured step mode.
    pub fn step(&mut self) -> Result<StepInfo, SolverError> {
        self.step_limited(f64::INFINITY)
    }

    /// Advance one step, never beyond `dt_limit`.
    pub fn step_limited(&mut self, dt_limit: f64) -> Result<StepInfo, SolverError> {
        self.stream
            .memset_zeros(&mut self.flags)
            .map_err(dev_err("memset"))?;
        // Stage 1 does not depend on dt: compute it first, then choose dt from its velocity.
        self.nonlinear(Input::State)?;
        let umax = f64::from_bits(self.read_flags()?[0]);
        let (dt, cfl) = self.clock.choose(self.n, umax, dt_limit)?;
        self.update_factors(dt)?;
        self.host = None;
        self.combine(1, dt)?;
        self.nonlinear(Input::Stage)?;
        self.combine(2, dt)?;
        self.nonlinear(Input::Stage)?;
        self.combine(3, dt)?;
        self.nonlinear(Input::Stage)?;
        self.combine(4, dt)?;
        let flags = self.read_flags()?;
        let umax4 = f64::from_bits(flags[0]);
        self.clock.advance(dt, umax4.is_finite() && flags[1] == 0)?;
        Ok(StepInfo { dt, cfl })
    }

    fn read_flags(&self) -> Result<Vec<u64>, SolverError> {
        self.stream
            .clone_dtoh(&self.flags)
            .map_err(dev_err("download"))
    }

    fn update_factors(&mut self, dt: f64) -> Result<(), SolverError> {
        if dt == self.factor_dt {
            return Ok(());
        }
        let clen = self.n * self.n * (self.n / 2 + 1);
        let (n, nu) = (self.n as i32, self.nu);
        let cfg = launch_cfg(clen);
        self.k
            .factors(
                &self.stream,
                cfg,
                &mut self.e_half,
                &mut self.e_full,
                n,
                nu,
                dt,
            )
            .map_err(gpu_err)?;
        self.factor_dt = dt;
        Ok(())
    }

    fn combine(&mut self, stage: i32, h: f64) -> Result<(), SolverError> {
        let clen = (self.n * self.n * (self.n / 2 + 1)) as i64;
        let (h2, h6) = (h / 2.0, h / 6.0);
        // The non-finite flag is the second entry of `flags`.
        let mut flag = self.flags.slice_mut(1..2);
        self.k
            .rk(
                &self.stream,
                launch_cfg(3 * clen as usize),
                stage,
                &mut self.state,
                &self.rhs,
                &mut self.acc,
                &mut self.stage,
                &self.e_half,
                &self.e_full,
                clen,
                h,
                h2,
                h6,
                &mut flag,
            )
            .map_err(gpu_err)?;
        Ok(())
    }

    /// `rhs = P[u x omega]` of the state or the stage; `max(|u|+|v|+|w|)` is left in `flags[0]`.
    fn nonlinear(&mut self, which: Input) -> Result<(), SolverError> {
        let (n, m, kcut) = (self.n as i32, self.m as i32, self.kcut as i32);
        let mh = self.m / 2 + 1;
        let mclen = self.m * self.m * mh;
        let clen = self.n * self.n * (self.n / 2 + 1);
        // Velocity and vorticity, zero-padded, in the six transform buffers.
        {
            let input = match which {
                Input::State => &self.state,
                Input::Stage => &self.stage,
            };
            // work: six buffers of m^2 (m/2+1) complex (allocated in `new`)
            let cfg = launch_cfg(mclen);
            self.k
                .pad(&self.stream, cfg, input, &mut self.work, n, m, kcut)
                .map_err(gpu_err)?;
        }
        // cuFFT runs in the current context of the calling thread.
        self.stream
            .context()
            .bind_to_thread()
            .map_err(dev_err("context"))?;
        // Six in-place Z2D transforms.
        {
            let (base, _guard) = self.work.device_ptr_mut(&self.stream);
            for c in 0..6u64 {
                let p = base + c * (2 * mclen as u64) * 8;
                // SAFETY: `p` points at buffer c of `work` (mclen complex), the layout of the plan.
                unsafe {
                    cufft_result::exec_z2d(self.inv.handle(), p as *mut _, p as *mut _)
                        .map_err(dev_err("cuFFT Z2D"))?;
                }
            }
        }
        // u x omega and max(|u|+|v|+|w|).
        {
            let mut flags = self.flags.slice_mut(0..1);
            self.stream
                .memset_zeros(&mut flags)
                .map_err(dev_err("memset"))?;
            // BLOCK = 256 threads, at most the 32 warps of the kernel's shared array
            let cfg = launch_cfg(self.m * self.m * self.m);
            self.k
                .cross(&self.stream, cfg, &mut self.work, m, &mut flags)
                .map_err(gpu_err)?;
        }
        // Three in-place D2Z transforms.
        {
            let (base, _guard) = self.work.device_ptr_mut(&self.stream);
            for c in 0..3u64 {
                let p = base + c * (2 * mclen as u64) * 8;
                // SAFETY: as above.
                unsafe {
                    cufft_result::exec_d2z(self.fwd.handle(), p as *mut _, p as *mut _)
                        .map_err(dev_err("cuFFT D2Z"))?;
                }
            }
        }
        // Truncation to the n grid, 1/m^3, projection.
        {
            let scale = 1.0 / (self.m * self.m * self.m) as f64;
            let cfg = launch_cfg(clen);
            self.k
                .unpad(
                    &self.stream,
                    cfg,
                    &self.work,
                    &mut self.rhs,
                    n,
                    m,
                    kcut,
                    scale,
                )
                .map_err(gpu_err)?;
        }
        Ok(())
    }

    /// Project and truncate the state on the device (the kernel of the initial state; the host
    /// path [`crate::solver::initial_state`] gives the same values).
    pub fn project_state(&mut self) -> Result<(), SolverError> {
        let (n, kcut) = (self.n as i32, self.kcut as i32);
        let clen = self.n * self.n * (self.n / 2 + 1);
        self.k
            .project(&self.stream, launch_cfg(clen), &mut self.state, n, kcut)
            .map_err(gpu_err)?;
        self.host = None;
        Ok(())
    }

    /// Waits for the queued work (for timings).
    pub fn synchronize(&self) -> Result<(), SolverError> {
        self.stream.synchronize().map_err(dev_err("synchronize"))
    }
}
