//! The kernels of `kernels/slab_fourier.cu`: the pointwise steps of the slab-decomposed
//! Fourier transform of `vortex_resident::slab_fourier`, on a pencil of `count` complex
//! values per component (`3 count` in `spec`), each element's wavevector found from the
//! layout (`n`, `nq`, `m0`, `slab_z`); one thread per element or a grid-stride loop.

crate::kernel_set! {
    /// The kernels of `kernels/slab_fourier.cu` (no defines).
    pub struct SlabFourier(crate::kernels::SLAB_FOURIER) { defines() }

    /// The Poisson solve in place: `inv_eig` holds `n` doubles, `scale` the transform's.
    fn solve = sf_solve(
        spec: *mut double2, n: int, nq: int, m0: int, count: long_long, inv_eig: *const double,
        scale: double,
    );

    /// Biot-Savart in Fourier space in place (`i k x`, scaled).
    fn biot_savart = sf_biot_savart(
        spec: *mut double2, n: int, nq: int, m0: int, count: long_long, slab_z: int,
        inv_kscale: double, scale: double,
    );

    /// Per-block shell sums of the energy spectrum: `partial` holds `nshell + 2` doubles per
    /// block; blocks of 256 threads with `nshell` doubles of dynamic shared memory.
    fn spectrum_partial = sf_spectrum_partial(
        spec: *const double2, n: int, nq: int, m0: int, count: long_long, slab_z: int,
        nshell: int, partial: *mut double,
    );

    /// Row `r < count / width` of a strided block: `src[r src_stride + j]` to
    /// `dst[r dst_stride + j]`, `j < width` (complex numbers; the slab transposes' packing).
    fn copy_rows = sf_copy_rows(
        dst: *mut double2, dst_stride: long_long, src: *const double2, src_stride: long_long,
        width: long_long, count: long_long,
    );
}
