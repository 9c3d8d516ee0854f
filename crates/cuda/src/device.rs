//! Driver probing, device selection and the per-device cache of NVRTC-compiled modules.
//!
//! cudarc 0.19 with dynamic loading panics on the first driver call when `libcuda` is missing,
//! so every entry point probes [`driver_present`] / [`nvrtc_present`] first and returns a
//! [`GpuError`] instead. Device indices count the devices the driver shows, i.e. after
//! `CUDA_VISIBLE_DEVICES` (the driver applies it). Kernel modules are compiled with NVRTC at
//! their first use on a device (`--use_fast_math`, `--gpu-architecture=compute_XY` from the
//! device's compute capability) and kept for the life of the process, like candle does.

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

pub use crate::error::{GpuError, GpuResult};
use crate::kernels::KernelSource;
use crate::nvrtc::compile;
pub use crate::nvrtc::nvrtc_present;

/// Whether the CUDA driver library can be loaded (never panics).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library under its candidate names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn visible_devices() -> String {
    std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "<unset>".into())
}

/// Number of visible CUDA devices; an error (not a panic) when there is no driver.
pub fn device_count() -> GpuResult<usize> {
    if !driver_present() {
        return Err(GpuError::NoDriver);
    }
    let n = CudaContext::device_count()?;
    Ok(n.max(0) as usize)
}

/// Whether a CUDA device can be used here (driver, NVRTC and at least one device).
pub fn available() -> bool {
    nvrtc_present() && device_count().map(|n| n > 0).unwrap_or(false)
}

/// Environment variable: bytes of freed memory the stream-ordered pool may keep across
/// synchronisations (default: all of it; `0` is the driver's own default).
pub const POOL_KEEP_ENV: &str = "VORTEX_GPU_POOL_KEEP_BYTES";

fn default_pool(ctx: &CudaContext) -> GpuResult<cudarc::driver::sys::CUmemoryPool> {
    let mut pool = std::ptr::null_mut();
    // SAFETY: `pool` is a valid out-pointer; `cu_device` is the context's device.
    unsafe { cudarc::driver::sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }
        .result()?;
    Ok(pool)
}

/// Lets the device's default memory pool (the stream-ordered allocations every buffer of the
/// time step comes from) keep freed memory across synchronisations. With the driver's
/// default release threshold of 0 every synchronisation returns the freed memory to the
/// system, and the next step maps it again: hundreds of MB per step at 256^3 (the
/// stream-ordered allocator's documented tuning, CUDA Programming Guide, "Stream Ordered
/// Memory Allocator", physical page caching behavior). [`POOL_KEEP_ENV`] bounds it.
fn keep_pool_memory(ctx: &CudaContext) -> GpuResult<()> {
    if !ctx.has_async_alloc() {
        return Ok(());
    }
    let keep: u64 = match std::env::var(POOL_KEEP_ENV) {
        Ok(v) => v.trim().parse().map_err(|_| {
            GpuError::Unsupported(format!(
                "environment variable {POOL_KEEP_ENV} = '{v}': expected a number of bytes"
            ))
        })?,
        Err(_) => u64::MAX,
    };
    ctx.bind_to_thread()?;
    let pool = default_pool(ctx)?;
    let mut value = keep;
    // SAFETY: the attribute RELEASE_THRESHOLD takes a pointer to a u64 (cuuint64_t).
    unsafe {
        cudarc::driver::sys::cuMemPoolSetAttribute(
            pool,
            cudarc::driver::sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut value as *mut u64 as *mut std::ffi::c_void,
        )
    }
    .result()?;
    Ok(())
}

/// Hands the memory the stream-ordered pool of `ctx`'s device keeps (see
/// [`keep_pool_memory`]) back to the driver: called before allocations outside the pool
/// (cuFFT plans and their work areas), which cannot use what the pool holds.
pub fn trim_pool(ctx: &CudaContext) -> GpuResult<()> {
    if !ctx.has_async_alloc() {
        return Ok(());
    }
    ctx.bind_to_thread()?;
    let pool = default_pool(ctx)?;
    // SAFETY: `pool` is the default memory pool of the context's device (just queried);
    // trimming releases only memory no allocation uses.
    unsafe { cudarc::driver::sys::cuMemPoolTrimTo(pool, 0) }.result()?;
    Ok(())
}

/// A CUDA device: its context, one stream, and the modules compiled for it so far.
pub struct GpuDevice {
    index: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    cc: (i32, i32),
    total_mem: usize,
    modules: Mutex<HashMap<String, Arc<CudaModule>>>,
    /// Seconds spent compiling and loading modules (reported, not part of the phase times).
    compile_seconds: Mutex<f64>,
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("index", &self.index)
            .field("name", &self.name)
            .field("cc", &self.cc)
            .finish()
    }
}

static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<GpuDevice>>>> = OnceLock::new();

impl GpuDevice {
    /// The device with index `index` among the visible ones (shared within the process).
    pub fn get(index: usize) -> GpuResult<Arc<GpuDevice>> {
        let count = device_count()?;
        if !nvrtc_present() {
            return Err(GpuError::NoNvrtc);
        }
        if count == 0 {
            return Err(GpuError::NoDevice(visible_devices()));
        }
        if index >= count {
            return Err(GpuError::BadIndex {
                index,
                count,
                visible: visible_devices(),
            });
        }
        let map = DEVICES.get_or_init(|| Mutex::new(HashMap::new()));
        let mut map = map.lock().expect("device table poisoned");
        if let Some(d) = map.get(&index) {
            return Ok(d.clone());
        }
        let ctx = CudaContext::new(index)?;
        keep_pool_memory(&ctx)?;
        let stream = ctx.default_stream();
        let dev = Arc::new(GpuDevice {
            index,
            name: ctx.name()?,
            cc: ctx.compute_capability()?,
            total_mem: ctx.total_mem()?,
            ctx,
            stream,
            modules: Mutex::new(HashMap::new()),
            compile_seconds: Mutex::new(0.0),
        });
        map.insert(index, dev.clone());
        Ok(dev)
    }

    pub fn index(&self) -> usize {
        self.index
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }
    pub fn total_mem(&self) -> usize {
        self.total_mem
    }
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    pub fn compile_seconds(&self) -> f64 {
        *self.compile_seconds.lock().unwrap()
    }

    /// `(free, total)` device memory in bytes, after the pool has handed back what it kept
    /// ([`trim_pool`]): free is what the next allocation of any kind can have.
    pub fn mem_info(&self) -> GpuResult<(usize, usize)> {
        trim_pool(&self.ctx)?;
        Ok(self.ctx.mem_get_info()?)
    }

    /// [`trim_pool`] of this device.
    pub fn trim_pool(&self) -> GpuResult<()> {
        trim_pool(&self.ctx)
    }

    /// The module of `src` with `defines`, compiled and loaded at its first use on this
    /// device and cached (key: source name and defines).
    pub fn module(
        &self,
        src: &KernelSource,
        defines: &[(&str, usize)],
    ) -> GpuResult<Arc<CudaModule>> {
        let key = std::iter::once(src.name.to_string())
            .chain(defines.iter().map(|(k, v)| format!("{k}={v}")))
            .collect::<Vec<_>>()
            .join(" ");
        let mut mods = self.modules.lock().expect("module table poisoned");
        if let Some(m) = mods.get(&key) {
            return Ok(m.clone());
        }
        let t0 = Instant::now();
        let ptx = compile(src, self.cc, defines)?;
        let m = self.ctx.load_module(ptx)?;
        *self.compile_seconds.lock().unwrap() += t0.elapsed().as_secs_f64();
        log::debug!(
            "compiled kernels/{}.cu ({key}) for {} in {:.0} ms",
            src.name,
            self.name,
            t0.elapsed().as_secs_f64() * 1e3
        );
        mods.insert(key, m.clone());
        Ok(m)
    }

    /// Kernel `func` of `src` compiled with `defines`, by name. The typed sets of
    /// [`crate::launch`] load every kernel of a source at once; this is for launches not yet
    /// written through a table.
    pub fn function(
        &self,
        src: &KernelSource,
        defines: &[(&str, usize)],
        func: &str,
    ) -> GpuResult<CudaFunction> {
        Ok(self.module(src, defines)?.load_function(func)?)
    }

    /// Runs `f` (launches on this device's stream) between two CUDA events and returns the
    /// elapsed seconds (kernel time, without the host's launch overhead).
    pub fn event_timed(&self, f: impl FnOnce() -> GpuResult<()>) -> GpuResult<f64> {
        let s = self.stream();
        let e0 = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        f()?;
        let e1 = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        e1.synchronize()?;
        Ok(e0.elapsed_ms(&e1)? as f64 * 1e-3)
    }

    /// Waits for all work queued on the stream.
    pub fn synchronize(&self) -> GpuResult<()> {
        Ok(self.stream.synchronize()?)
    }
}
