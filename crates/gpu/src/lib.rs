//! CUDA backend of the vortex FMM engine.
//!
//! * [`device`]: driver / NVRTC probing (no panic without a driver), device selection
//!   (`CUDA_VISIBLE_DEVICES` and an index), NVRTC compilation at first use, cached per device:
//!   the `vortex-cuda` crate, re-exported;
//! * [`layout`]: host-side packing of particles and near lists into the kernels' buffers;
//! * [`tables`]: `K_n^m`, z-axis translation tables and rotation records for the kernels;
//! * [`backend`]: [`CudaBackend`], an [`vortex_fmm::Backend`], so `vortex_fmm::evaluate(&CudaBackend, ..)`
//!   runs P2M, M2M, M2L (rotation O(p^3) or plain O(p^4)), L2L, L2P / M2P and P2P on the GPU
//!   (one submodule per operator family, the list packing and the expansion exchange);
//! * [`ppm`]: the pseudo-particle method's tables (every PPM operator runs on the GPU,
//!   `kernels/ppm.cu`);
//! * [`uniform`]: the uniform-grid FMM built entirely on the device (sort, lists by stencil,
//!   every operator), [`UniformFmm`] / [`evaluate_uniform`].
//!
//! The CUDA C sources live in `kernels/*.cu` (the crate `vortex-kernels`); `vortex-cuda`
//! compiles them with NVRTC at run time (no `nvcc` needed at build time).

pub mod backend;
pub mod device;
pub mod layout;
pub mod ppm;
pub mod tables;
pub mod uniform;

pub use backend::{CudaBackend, KernelTimes, M2lKind, MAX_GPU_ORDER};
pub use device::{available, device_count, driver_present, nvrtc_present, GpuDevice, GpuError};
pub use uniform::{
    evaluate_uniform, UniformEvaluator, UniformFmm, UniformParams, UniformSlabEvaluator,
    UniformTimes,
};

#[cfg(test)]
mod tests {
    use super::*;
    use vortex_cuda::launch::{Fmm, P2p, Ppm, Uniform};

    #[test]
    fn new_without_driver_is_an_error_not_a_panic() {
        match CudaBackend::new(0) {
            Ok(b) => println!("CUDA device present: {}", vortex_fmm::Backend::name(&b)),
            Err(e) => {
                println!("no CUDA device here (test skipped its GPU part): {e}");
                assert!(!e.to_string().is_empty());
                if !driver_present() {
                    assert_eq!(e, GpuError::NoDriver);
                }
            }
        }
        // an index past the visible devices is an error too
        if let Err(e) = CudaBackend::new(10_000) {
            println!("device 10000: {e}");
        } else {
            panic!("device 10000 should not exist");
        }
    }

    /// Compiles every kernel source of the workspace with NVRTC (for sm_90 and sm_80) when
    /// the NVRTC library is present, even without a GPU, so a kernel that does not compile
    /// never lands: those of this crate with the defines it uses, and those of the spectral
    /// solver and of the resident step (`vortex_cuda::SPECTRAL`, `RESIDENT`).
    #[test]
    #[ignore = "needs the NVRTC library: cargo test --release --workspace -- --ignored nvrtc (.ci/run)"]
    fn kernels_compile_with_nvrtc() {
        assert!(
            nvrtc_present(),
            "the NVRTC library (libnvrtc.so.13) cannot be loaded: put its folder on \
             LD_LIBRARY_PATH (.ci/run installs it from PyPI: nvidia-cuda-nvrtc==13.0.*)"
        );
        for cc in [(9, 0), (8, 0)] {
            for m in 1..=3 {
                device::compile(&P2p::SOURCE, cc, &P2p::defines(m)).unwrap();
            }
            for p in [4, 10, backend::MAX_GPU_ORDER] {
                device::compile(&Fmm::SOURCE, cc, &Fmm::defines(p, backend::EVAL_BLOCK)).unwrap();
            }
            for p in [4, 8, 10, 16] {
                let k = backend::ppm_count(p);
                device::compile(&Ppm::SOURCE, cc, &Ppm::defines(k, p)).unwrap();
            }
            for p in [1, 4, 6, 8, 10, 14, backend::MAX_GPU_ORDER] {
                let defines = Uniform::defines(p, uniform::pipeline::UNIFORM_EVAL_BLOCK, 1);
                device::compile(&Uniform::SOURCE, cc, &defines).unwrap();
            }
            for m in 2..=3 {
                let defines = Uniform::defines(8, uniform::pipeline::UNIFORM_EVAL_BLOCK, m);
                device::compile(&Uniform::SOURCE, cc, &defines).unwrap();
            }
            device::compile(&vortex_cuda::SPECTRAL, cc, &[]).unwrap();
            device::compile(&vortex_cuda::RESIDENT, cc, &[]).unwrap();
        }
        println!("all kernels compiled with NVRTC");
    }
}
