//! The CUDA device of the vortex solvers, shared by the FMM engines (`vortex-gpu`), the
//! resident vortex step (`vortex-resident`) and the pseudo-spectral solver (`vortex-spectral`):
//!
//! * [`device`]: driver / NVRTC probing (no panic without a driver), device selection
//!   (`CUDA_VISIBLE_DEVICES` and an index), [`GpuDevice`] with the modules compiled for it,
//!   cached per device, and [`GpuError`];
//! * [`error`]: [`GpuError`], the errors of every layer below;
//! * [`kernels`]: the CUDA C sources of `crates/cuda/kernels/*.cu` (inside this crate), embedded
//!   with `include_str!`, and the headers they include;
//! * [`nvrtc`]: their compilation by NVRTC at run time (no `nvcc` at build time), the
//!   headers handed to the program by name.
//!
//! cudarc loads `libcuda` and `libnvrtc` at run time, so this crate builds and its callers
//! run (on the CPU) on machines without CUDA.

pub mod device;
pub mod error;
pub mod kernels;
pub mod nvrtc;

pub use device::{
    available, device_count, driver_present, nvrtc_present, GpuDevice, GpuError, GpuResult,
};
pub use kernels::{
    Header, KernelSource, ALL_SOURCES, COMMON_H, FMM, P2P, PPM, RESIDENT, SLAB_FOURIER, SPECTRAL,
    SPREAD, UNIFORM,
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

    /// Fails with the reason where the NVRTC library cannot be loaded.
    pub(crate) fn require_nvrtc() {
        assert!(
            nvrtc_present(),
            "the NVRTC library (libnvrtc.so.13) cannot be loaded: put its folder on \
             LD_LIBRARY_PATH (.ci/run installs it from PyPI: nvidia-cuda-nvrtc==13.0.*)"
        );
    }

    /// A sample value of each required define (order 8, its 144 pseudo-particles, the
    /// evaluation block of `vortex-gpu`): the sources are compiled here without that crate.
    fn sample_defines(src: &KernelSource) -> Vec<(&'static str, usize)> {
        src.required
            .iter()
            .map(|&d| match d {
                "ORDER" | "PPM_P" => (d, 8),
                "PPM_K" => (d, 144),
                "EVAL_BLOCK" => (d, 64),
                other => panic!("{}: no sample value for the define {other}", src.name),
            })
            .collect()
    }

    /// Every source with a sample value of each required define, for sm_90 and sm_80 (needs
    /// the NVRTC library, no GPU): the named headers resolve.
    #[test]
    #[ignore = "needs the NVRTC library: cargo test --release --workspace -- --ignored nvrtc (.ci/run)"]
    fn nvrtc_compiles_every_source_with_its_headers() {
        require_nvrtc();
        for cc in [(9, 0), (8, 0)] {
            for src in &ALL_SOURCES {
                compile(src, cc, &sample_defines(src))
                    .unwrap_or_else(|e| panic!("{}: {e}", src.name));
            }
        }
    }

    /// A source compiled without one of its required defines is refused before NVRTC runs,
    /// naming the source and the define (no NVRTC needed).
    #[test]
    fn a_missing_required_define_is_refused_by_name() {
        for src in ALL_SOURCES.iter().filter(|s| !s.required.is_empty()) {
            let all = sample_defines(src);
            for skip in 0..all.len() {
                let some: Vec<_> = (0..all.len())
                    .filter(|&i| i != skip)
                    .map(|i| all[i])
                    .collect();
                match compile(src, (9, 0), &some) {
                    Err(GpuError::Compile { name, log }) => {
                        assert_eq!(name, src.name);
                        assert!(log.contains(all[skip].0), "{log}");
                    }
                    other => panic!("{}: expected a refusal, got {other:?}", src.name),
                }
            }
        }
    }

    /// A compile error names the source and carries NVRTC's log.
    #[test]
    #[ignore = "needs the NVRTC library: cargo test --release --workspace -- --ignored nvrtc (.ci/run)"]
    fn nvrtc_compile_errors_carry_the_log() {
        require_nvrtc();
        let bad = KernelSource {
            name: "bad",
            source: "#include \"missing.cuh\"\nextern \"C\" __global__ void k() {}\n",
            headers: &[],
            required: &[],
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
