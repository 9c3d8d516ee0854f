//! Host mirrors of the index maps of `kernels/spectral.cu` and the device memory estimate. They
//! need no GPU: the tests check them against the CPU solver, so the kernels' maps are checked
//! without a device.

use crate::config::Dealias;
use crate::fft::wavenumber;
use crate::solver::product_grid;

/// Threads per block of every kernel (`cross_umax` reduces over at most 32 warps).
pub const BLOCK: usize = 256;

/// Source of padded spectral entry `p` (index `(px*m + py)*mh + pz` on the `m` grid) in the
/// `n`-grid spectrum (index `(ix*n + iy)*nh + iz`), or `None` where the padded entry is zero:
/// `pad_velocity_vorticity`.
pub fn pad_source(p: usize, n: usize, m: usize, kcut: i64) -> Option<usize> {
    let (nh, mh) = (n / 2 + 1, m / 2 + 1);
    let pz = p % mh;
    let row = p / mh;
    let (py, px) = (row % m, row / m);
    let (kx, ky) = (wavenumber(px, m), wavenumber(py, m));
    let lim = (kcut as usize + 1).min(mh);
    if kx.abs() > kcut || ky.abs() > kcut || pz >= lim {
        return None;
    }
    let ix = kx.rem_euclid(n as i64) as usize;
    let iy = ky.rem_euclid(n as i64) as usize;
    Some((ix * n + iy) * nh + pz)
}

/// Source of `n`-grid spectral entry `i` in the padded spectrum, or `None` where the result is
/// zero (a mode outside `|k_i| <= kcut`, or the mean): `unpad_project`.
pub fn unpad_source(i: usize, n: usize, m: usize, kcut: i64) -> Option<usize> {
    let (nh, mh) = (n / 2 + 1, m / 2 + 1);
    let iz = i % nh;
    let row = i / nh;
    let (iy, ix) = (row % n, row / n);
    let (kx, ky, kz) = (wavenumber(ix, n), wavenumber(iy, n), iz as i64);
    if kx.abs() > kcut || ky.abs() > kcut || kz > kcut || (kx == 0 && ky == 0 && kz == 0) {
        return None;
    }
    let px = kx.rem_euclid(m as i64) as usize;
    let py = ky.rem_euclid(m as i64) as usize;
    Some((px * m + py) * mh + iz)
}

/// Offset, in doubles within one transform buffer, of physical grid point `idx = (i*m + j)*m + k`
/// in cuFFT's in-place layout (rows of `m` reals padded to `2 (m/2+1)`): `cross_umax`.
pub fn real_offset(idx: usize, m: usize) -> usize {
    (idx / m) * 2 * (m / 2 + 1) + idx % m
}

/// Bytes of device memory of the CUDA solver on an `n^3` grid, without cuFFT's work areas: four
/// spectral vector fields and two factor arrays on the `n` grid, six in-place transform buffers on
/// the product grid.
pub fn device_bytes(n: usize, dealias: Dealias) -> usize {
    let (m, _) = product_grid(n, dealias);
    let clen = n * n * (n / 2 + 1);
    let mclen = m * m * (m / 2 + 1);
    4 * 3 * clen * 16 + 2 * clen * 8 + 6 * mclen * 16 + 16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_and_unpad_are_inverse_on_the_kept_modes() {
        for n in [8usize, 10, 12, 16, 18, 32] {
            for dealias in [Dealias::ThreeHalves, Dealias::TwoThirds] {
                let (m, kcut) = product_grid(n, dealias);
                let (nh, mh) = (n / 2 + 1, m / 2 + 1);
                let mut hits = vec![0u32; n * n * nh];
                for p in 0..m * m * mh {
                    if let Some(i) = pad_source(p, n, m, kcut) {
                        hits[i] += 1;
                        // the same wavevector on both grids
                        let (pz, py, px) = (p % mh, (p / mh) % m, p / (mh * m));
                        let (iz, iy, ix) = (i % nh, (i / nh) % n, i / (nh * n));
                        assert_eq!(pz, iz);
                        assert_eq!(wavenumber(py, m), wavenumber(iy, n));
                        assert_eq!(wavenumber(px, m), wavenumber(ix, n));
                        if i != 0 {
                            assert_eq!(unpad_source(i, n, m, kcut), Some(p), "n {n} p {p}");
                        }
                    }
                }
                for (i, &h) in hits.iter().enumerate() {
                    let (iz, iy, ix) = (i % nh, (i / nh) % n, i / (nh * n));
                    let kept = wavenumber(ix, n).abs() <= kcut
                        && wavenumber(iy, n).abs() <= kcut
                        && iz as i64 <= kcut;
                    assert_eq!(h, kept as u32, "n {n} {dealias:?} i {i}");
                    assert_eq!(
                        unpad_source(i, n, m, kcut).is_some(),
                        kept && i != 0,
                        "n {n} i {i}"
                    );
                }
                // the Nyquist modes are never kept
                assert!(kcut < n as i64 / 2);
            }
        }
    }

    #[test]
    fn real_offsets_cover_the_in_place_layout_once() {
        for m in [8usize, 12, 24] {
            let mh = m / 2 + 1;
            let mut seen = vec![false; m * m * 2 * mh];
            for idx in 0..m * m * m {
                let o = real_offset(idx, m);
                assert!(o % (2 * mh) < m);
                assert!(!seen[o]);
                seen[o] = true;
            }
        }
    }

    /// The GPU algorithm (pad, inverse transforms, cross product in the in-place layout, forward
    /// transforms, truncation with 1/m^3 and projection), emulated on the host with these maps,
    /// gives the CPU solver's nonlinear term.
    #[test]
    fn emulated_kernels_give_the_cpu_nonlinear_term() {
        use crate::fft::Fft3;
        use crate::solver::{initial_state, Solver, StepMode};
        use num_complex::Complex64;
        let i = Complex64::new(0.0, 1.0);
        for (n, dealias) in [(16usize, Dealias::ThreeHalves), (18, Dealias::TwoThirds)] {
            let f = crate::initial::isotropic(
                n,
                &crate::initial::IsotropicParams {
                    k_peak: 3.0,
                    energy: Some(0.5),
                    re_lambda: None,
                    seed: 3,
                    nu: 0.01,
                },
            );
            let mut cpu = Solver::with_field(&f, 0.01, dealias, StepMode::Fixed(0.01)).unwrap();
            let want = cpu.nonlinear_term();
            let u = initial_state(&f, dealias);
            let (m, kcut) = product_grid(n, dealias);
            let (nh, mh) = (n / 2 + 1, m / 2 + 1);
            let mclen = m * m * mh;
            let fft = Fft3::new(m);
            // pad_velocity_vorticity, then the six inverse transforms into the in-place layout
            let mut work = vec![0.0f64; 6 * 2 * mclen];
            let mut spec = vec![Complex64::default(); mclen];
            let mut phys = vec![0.0; m * m * m];
            for c in 0..6 {
                for (p, out) in spec.iter_mut().enumerate() {
                    *out = match pad_source(p, n, m, kcut) {
                        None => Complex64::default(),
                        Some(s) => {
                            let (pz, py, px) = (p % mh, (p / mh) % m, p / (mh * m));
                            let (fx, fy, fz) = (
                                wavenumber(px, m) as f64,
                                wavenumber(py, m) as f64,
                                pz as f64,
                            );
                            let [a, b, cc] = [u.c[0][s], u.c[1][s], u.c[2][s]];
                            match c {
                                0 => a,
                                1 => b,
                                2 => cc,
                                3 => i * (cc * fy - b * fz),
                                4 => i * (a * fz - cc * fx),
                                _ => i * (b * fx - a * fy),
                            }
                        }
                    };
                }
                fft.inverse(&mut spec, &mut phys);
                for (idx, v) in phys.iter().enumerate() {
                    work[c * 2 * mclen + real_offset(idx, m)] = *v;
                }
            }
            // cross_umax
            let st = 2 * mclen;
            for idx in 0..m * m * m {
                let o = real_offset(idx, m);
                let (a, b, c) = (work[o], work[st + o], work[2 * st + o]);
                let (wx, wy, wz) = (work[3 * st + o], work[4 * st + o], work[5 * st + o]);
                work[o] = b * wz - c * wy;
                work[st + o] = c * wx - a * wz;
                work[2 * st + o] = a * wy - b * wx;
            }
            // forward transforms and unpad_project
            let scale = 1.0 / (m * m * m) as f64;
            let mut fwd = vec![vec![Complex64::default(); mclen]; 3];
            for (c, out) in fwd.iter_mut().enumerate() {
                for (idx, v) in phys.iter_mut().enumerate() {
                    *v = work[c * st + real_offset(idx, m)];
                }
                fft.forward(&phys, out);
            }
            let mut max_err = 0.0f64;
            let mut max_val = 0.0f64;
            for j in 0..n * n * nh {
                let got = match unpad_source(j, n, m, kcut) {
                    None => [Complex64::default(); 3],
                    Some(p) => {
                        let (iz, iy, ix) = (j % nh, (j / nh) % n, j / (nh * n));
                        let (fx, fy, fz) = (
                            wavenumber(ix, n) as f64,
                            wavenumber(iy, n) as f64,
                            iz as f64,
                        );
                        let [a, b, c] = [fwd[0][p] * scale, fwd[1][p] * scale, fwd[2][p] * scale];
                        let d = (a * fx + b * fy + c * fz) / (fx * fx + fy * fy + fz * fz);
                        [a - d * fx, b - d * fy, c - d * fz]
                    }
                };
                for (c, g) in got.iter().enumerate() {
                    max_err = max_err.max((g - want.c[c][j]).norm());
                    max_val = max_val.max(want.c[c][j].norm());
                }
            }
            assert!(max_val > 0.0);
            assert!(
                max_err <= 1e-13 * max_val,
                "n {n} {dealias:?}: {max_err:e} vs {max_val:e}"
            );
        }
    }

    #[test]
    fn memory_estimate() {
        // 256^3 with the 3/2 rule: products on 384^3.
        let b = device_bytes(256, Dealias::ThreeHalves);
        let gib = b as f64 / (1u64 << 30) as f64;
        assert!(gib > 4.0 && gib < 4.5, "{gib}");
        assert!(device_bytes(64, Dealias::TwoThirds) < device_bytes(64, Dealias::ThreeHalves));
    }
}
