//! The kernels of `kernels/spectral.cu`: the element-wise steps of the pseudo-spectral solver
//! on the device (`vortex_spectral::gpu`), f64. Spectra are `3 n^2 (n/2+1)` complex
//! (`double2`) values of the `n` grid, work areas six in-place buffers of `m^2 (m/2+1)`
//! complex values of the product grid `m`; every kernel loops over its elements with a grid
//! stride, so any grid covers them.

crate::kernel_set! {
    /// The kernels of `kernels/spectral.cu` (no defines).
    pub struct Spectral(crate::kernels::SPECTRAL) { defines() }

    /// Velocity and vorticity of the spectrum `u` (`3 n^2 (n/2+1)` complex) zero-padded
    /// into the six buffers of `work`, modes beyond `kcut` dropped.
    fn pad = pad_velocity_vorticity(
        u: *const double2, work: *mut double2, n: int, m: int, kcut: int,
    );

    /// `u x omega` in place on the six real buffers of `work` (`m^3` points) and
    /// `max(|u| + |v| + |w|)` into `umax_bits` (one value, as ordered bits); blocks of 256
    /// threads.
    fn cross = cross_umax(work: *mut double, m: int, umax_bits: *mut ull);

    /// The first three buffers of `work` truncated to the `n` grid, scaled by `scale` and
    /// projected, into `rhs` (`3 n^2 (n/2+1)` complex).
    fn unpad = unpad_project(
        work: *const double2, rhs: *mut double2, n: int, m: int, kcut: int, scale: double,
    );

    /// Projection and truncation at `kcut` in place (`v`: `3 n^2 (n/2+1)` complex).
    fn project = project_truncate(v: *mut double2, n: int, kcut: int);

    /// The viscous factors of half and full steps `dt` (`e_half`, `e_full`: `n^2 (n/2+1)`
    /// doubles each).
    fn factors = factors(e_half: *mut double, e_full: *mut double, n: int, nu: double, dt: double);

    /// One RK4 stage's combination over the `3 nclen` complex values of `u`, `k`, `acc` and
    /// `st` (`eh`, `ef`: `nclen` doubles); a non-finite value sets `nonfinite` (one value).
    fn rk = rk_combine(
        stage: int, u: *mut double2, k: *const double2, acc: *mut double2, st: *mut double2,
        eh: *const double, ef: *const double, nclen: long_long, h: double, h2: double,
        h6: double, nonfinite: *mut ull,
    );
}
