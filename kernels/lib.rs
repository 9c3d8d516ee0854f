//! The CUDA C kernels of the vortex solvers (`kernels/*.cu`, `kernels/*.cuh`), handed out as
//! source text: each [`KernelSource`] carries its name, its text (embedded with `include_str!`),
//! the preprocessor defines it has no default for and the headers it includes. `vortex-cuda`
//! compiles them with NVRTC at their first use on a device (no `nvcc` at build time), so this
//! crate needs neither CUDA nor a GPU to build.
//!
//! NVRTC sees no file system: a source's `#include "name"` is resolved against the headers
//! handed to the program at its creation ([`KernelSource::headers`], the include names
//! below), so shared device code lives in one file and is compiled into each module that
//! includes it (`common.cuh`: block scan and tree reduction of `resident.cu`; `p2p.cu` and
//! `fmm.cu`: the device functions and kernels that `uniform.cu` reuses).

/// A header a source may `#include "name"` (NVRTC's named headers).
#[derive(Clone, Copy, Debug)]
pub struct Header {
    /// The include name, as written in the `#include` directive.
    pub name: &'static str,
    pub source: &'static str,
}

/// One CUDA source file of `kernels/`, embedded in the binary, with the headers it includes.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// The file's stem (`kernels/{name}.cu`): the program name, the cache key, error messages.
    pub name: &'static str,
    pub source: &'static str,
    pub headers: &'static [Header],
    /// The preprocessor defines the source has no default for (`-DNAME=value`): its
    /// parameters (the expansion order, block sizes) are set once, on the Rust side, and
    /// `vortex_cuda::compile` refuses a call that leaves one out.
    pub required: &'static [&'static str],
}

/// Block-wide Hillis-Steele scan and shared-memory tree reduction (`kernels/common.cuh`).
pub const COMMON_H: Header = Header {
    name: "common.cuh",
    source: include_str!("common.cuh"),
};

/// Near-field and all-pairs P2P kernels (compiled with `-DCORE_M=m`: the core of order `2 m`).
pub const P2P: KernelSource = KernelSource {
    name: "p2p",
    source: include_str!("p2p.cu"),
    headers: &[],
    required: &["CORE_M"],
};

/// Expansion kernels (P2M, M2M, M2L, L2L, L2P, M2P; compiled with `-DORDER=p` and
/// `-DEVAL_BLOCK=` the targets per L2P / M2P block).
pub const FMM: KernelSource = KernelSource {
    name: "fmm",
    source: include_str!("fmm.cu"),
    headers: &[],
    required: &["ORDER", "EVAL_BLOCK"],
};

/// Pseudo-particle operators (compiled with `-DPPM_K=K -DPPM_P=p`).
pub const PPM: KernelSource = KernelSource {
    name: "ppm",
    source: include_str!("ppm.cu"),
    headers: &[],
    required: &["PPM_K", "PPM_P"],
};

/// Uniform-grid FMM built on the device (`kernels/uniform.cu`, compiled with `-DORDER=p
/// -DEVAL_BLOCK=32 -DCORE_M=m`): it includes `p2p.cu` and `fmm.cu` and so reuses their device functions
/// and their `p2p_near`, `p2m` and `l2p` kernels (one module).
pub const UNIFORM: KernelSource = KernelSource {
    name: "uniform",
    source: include_str!("uniform.cu"),
    headers: &[
        Header {
            name: "p2p.cu",
            source: P2P.source,
        },
        Header {
            name: "fmm.cu",
            source: FMM.source,
        },
    ],
    required: &["ORDER", "EVAL_BLOCK", "CORE_M"],
};

/// Element-wise steps of the pseudo-spectral solver (`crates/spectral`, cuFFT path).
pub const SPECTRAL: KernelSource = KernelSource {
    name: "spectral",
    source: include_str!("spectral.cu"),
    headers: &[],
    required: &[],
};

/// The vortex-method step resident on the device (`crates/resident`).
pub const RESIDENT: KernelSource = KernelSource {
    name: "resident",
    source: include_str!("resident.cu"),
    headers: &[COMMON_H],
    required: &[],
};

/// The pointwise steps of the slab-decomposed Fourier transform (`crates/resident`,
/// `slab_fourier`).
pub const SLAB_FOURIER: KernelSource = KernelSource {
    name: "slab_fourier",
    source: include_str!("slab_fourier.cu"),
    headers: &[COMMON_H],
    required: &[],
};

/// The Gaussian sums of the re-interpolation by spreading and FFT (`crates/resident`,
/// `spreading`).
pub const SPREAD: KernelSource = KernelSource {
    name: "spread",
    source: include_str!("spread.cu"),
    headers: &[COMMON_H],
    required: &[],
};

/// Every kernel source of the workspace.
pub const ALL_SOURCES: [KernelSource; 8] = [
    P2P,
    FMM,
    PPM,
    UNIFORM,
    SPECTRAL,
    RESIDENT,
    SLAB_FOURIER,
    SPREAD,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The `"name"` of every `#include "name"` line of a text.
    fn includes(text: &str) -> Vec<&str> {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix("#include"))
            .filter_map(|rest| rest.trim().strip_prefix('"')?.split('"').next())
            .collect()
    }

    /// Every `#include "name"` of a source (and of the headers it includes) is one of the
    /// headers handed out with it, and every header handed out is included: NVRTC finds
    /// each by name and no header travels for nothing.
    #[test]
    fn every_include_is_a_header_of_its_source_and_back() {
        for src in &ALL_SOURCES {
            let names: Vec<&str> = src.headers.iter().map(|h| h.name).collect();
            let mut wanted = includes(src.source);
            for h in src.headers {
                wanted.extend(includes(h.source));
            }
            for w in &wanted {
                assert!(
                    names.contains(w),
                    "{}: #include \"{w}\" not handed out",
                    src.name
                );
            }
            for n in &names {
                assert!(wanted.contains(n), "{}: header {n} not included", src.name);
            }
        }
    }

    /// Every required define is one the source (or a header) tests for; the sources' names
    /// are distinct (they are cache keys).
    #[test]
    fn required_defines_appear_in_the_source_and_names_are_distinct() {
        for src in &ALL_SOURCES {
            let text: String = std::iter::once(src.source)
                .chain(src.headers.iter().map(|h| h.source))
                .collect();
            for d in src.required {
                assert!(
                    text.contains(&format!("defined({d})"))
                        || text.contains(&format!("#ifndef {d}")),
                    "{}: the required define {d} is not tested in the source",
                    src.name
                );
            }
        }
        let mut names: Vec<&str> = ALL_SOURCES.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL_SOURCES.len());
    }
}
