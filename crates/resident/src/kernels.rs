//! The kernels of `kernels/resident.cu`, compiled by NVRTC at the first use on a device and
//! kept as one set of function handles ([`Kernels`], launched through its typed methods), and
//! the launch shapes they expect.

use cudarc::driver::LaunchConfig;

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

/// Function handles of every kernel of the module, with one typed launch method per kernel
/// (the table of `vortex_cuda::launch::resident`).
pub use vortex_cuda::launch::Resident as Kernels;

/// One thread per element of `n`.
pub fn per_element(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(THREADS).max(1), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}
