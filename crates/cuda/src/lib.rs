//! The CUDA device of the vortex solvers, shared by the FMM engines (`vortex-gpu`), the
//! resident vortex step (`vortex-resident`) and the pseudo-spectral solver (`vortex-spectral`):
//!
//! * [`device`]: driver / NVRTC probing (no panic without a driver), device selection
//!   (`CUDA_VISIBLE_DEVICES` and an index), [`GpuDevice`] with the modules compiled for it,
//!   cached per device, and [`GpuError`];
//! * [`kernels`]: the CUDA C sources of `kernels/*.cu` at the top of the workspace, embedded
//!   with `include_str!`, and the headers they include;
//! * [`nvrtc`]: their compilation by NVRTC at run time (no `nvcc` at build time), the
//!   headers handed to the program by name.
//!
//! cudarc loads `libcuda` and `libnvrtc` at run time, so this crate builds and its callers
//! run (on the CPU) on machines without CUDA.

pub mod device;
pub mod kernels;
pub mod nvrtc;

pub use device::{
    available, device_count, driver_present, nvrtc_present, GpuDevice, GpuError, GpuResult,
};
pub use kernels::{
    Header, KernelSource, ALL_SOURCES, COMMON_H, FMM, P2P, PPM, RESIDENT, SLAB_FOURIER, SPECTRAL,
    UNIFORM,
};
pub use nvrtc::{compile, compile_options};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_is_an_error_not_a_panic() {
        match GpuDevice::get(10_000) {
            Ok(_) => panic!("device 10000 should not exist"),
            Err(e) => {
                assert!(!e.to_string().is_empty());
                if !driver_present() {
                    assert_eq!(e, GpuError::NoDriver);
                }
            }
        }
    }

    /// Every source with the defaults of its defines, for sm_90 and sm_80, when the NVRTC
    /// library is present (no GPU needed): the named headers resolve.
    #[test]
    fn every_source_compiles_with_its_headers() {
        if !nvrtc_present() {
            println!("NVRTC library not found: kernel compilation test SKIPPED");
            return;
        }
        for cc in [(9, 0), (8, 0)] {
            for src in &ALL_SOURCES {
                compile(src, cc, &[]).unwrap_or_else(|e| panic!("{}: {e}", src.name));
            }
        }
    }

    /// A compile error names the source and carries NVRTC's log.
    #[test]
    fn compile_errors_carry_the_log() {
        if !nvrtc_present() {
            return;
        }
        let bad = KernelSource {
            name: "bad",
            source: "#include \"missing.cuh\"\nextern \"C\" __global__ void k() {}\n",
            headers: &[],
        };
        match compile(&bad, (9, 0), &[]) {
            Err(GpuError::Compile { name, log }) => {
                assert_eq!(name, "bad");
                assert!(log.contains("missing.cuh"), "{log}");
            }
            other => panic!("expected a compile error, got {other:?}"),
        }
    }
}
