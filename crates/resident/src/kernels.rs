//! The kernels of `kernels/resident.cu`, compiled by NVRTC at the first use on a device and
//! kept as one set of function handles.

use cudarc::driver::{CudaFunction, LaunchConfig};
use vortex_cuda::{GpuDevice, GpuResult};

/// `kernels/resident.cu` (with `kernels/common.cuh`), embedded in the binary.
pub use vortex_cuda::RESIDENT;

/// Threads per block of the element-wise kernels (`RTHREADS` in the source).
pub const THREADS: u32 = 256;
/// Threads of the moment reduction and particles per thread (`RED_THREADS`,
/// `RED_PER_THREAD`).
pub const RED_THREADS: u32 = 128;
pub const RED_PER_THREAD: usize = 8;
/// Slots of the moment reduction (`NSLOT`).
pub const NSLOT: usize = 30;
/// Elements per block of the scan (`SCAN_THREADS`).
pub const SCAN_THREADS: u32 = 1024;

macro_rules! kernel_set {
    ($($name:ident),* $(,)?) => {
        /// Function handles of every kernel of the module.
        pub struct Kernels {
            $(pub $name: CudaFunction,)*
        }
        impl Kernels {
            /// Compiles (once per device) and loads the module.
            pub fn load(dev: &GpuDevice) -> GpuResult<Self> {
                Ok(Self {
                    $($name: dev.function(&RESIDENT, &[], concat!("r_", stringify!($name)))?,)*
                })
            }
        }
    };
}

kernel_set!(
    moments,
    moments_finish,
    pack,
    fields,
    first_nonfinite,
    rates,
    ab2,
    axpy,
    spread,
    tidy,
    bin_count,
    scan_blocks,
    scan_sums,
    scan_apply,
    bin_scatter,
    bin_sort,
    bin_gather,
    gauss_lattice,
    solve_fourier,
    biot_savart_fourier,
    lattice_particles,
    spectrum_partial,
    sum_partials,
    slab_owner,
    gather_rows,
    halo_flag,
    halo_rows,
    halo_split,
    flag_owner,
    compact_index,
);

/// One thread per element of `n`.
pub fn per_element(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(THREADS).max(1), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}
