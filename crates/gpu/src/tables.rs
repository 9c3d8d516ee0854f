//! Host-side tables of the expansion kernels, computed in f64 and stored as f32: `K_n^m`, the
//! z-axis translation tables of the rotation-based M2M / M2L / L2L and the rotation records
//! (phases and folded Wigner matrices) of every translation direction.
//!
//! The rotation matrices are taken from [`vortex_fmm::operators::Rotation`] itself (probed with unit
//! coefficients at `phi = 0`), so the GPU uses exactly the CPU engine's convention.

use vortex_fmm::expansions::harmonics::{factorial, knm};
use vortex_fmm::expansions::rotation::delta_table;
use vortex_fmm::expansions::{index, ncoef, Complex64};
use vortex_fmm::operators::Rotation;

/// `sum_{n <= p} (n + 1)^2`: floats in one folded rotation matrix set.
pub const fn sq_len(p: usize) -> usize {
    (p + 1) * (p + 2) * (2 * p + 3) / 6
}

/// Offset of degree `n`'s `(n+1)^2` block.
pub const fn sq_offset(n: usize) -> usize {
    n * (n + 1) * (2 * n + 1) / 6
}

/// Floats per rotation record: phases (`p + 1` complex), fwd_re, fwd_im, bwd_re, bwd_im.
pub const fn rot_stride(p: usize) -> usize {
    2 * (p + 1) + 4 * sq_len(p)
}

/// `K_n^m = sqrt((n-m)!(n+m)!)` at `index(n, m)`.
pub fn knm_table(p: usize) -> Vec<f32> {
    let mut k = vec![0.0f32; ncoef(p)];
    for n in 0..=p {
        for m in 0..=n {
            k[index(n, m)] = knm(n, m) as f32;
        }
    }
    k
}

/// Offsets of the per-`m` square blocks (side `p + 1 - m`) of the z tables, `p + 2` entries.
pub fn toff(p: usize) -> Vec<i32> {
    let mut t = vec![0i32; p + 2];
    for m in 0..=p {
        let side = (p + 1 - m) as i32;
        t[m + 1] = t[m] + side * side;
    }
    t
}

/// The z-axis tables `(m2m, m2l, l2l)` of `vortex_fmm::operators::Operators::new`.
pub fn z_tables(p: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let off = toff(p);
    let size = off[p + 1] as usize;
    let (mut a, mut b, mut c) = (vec![0.0; size], vec![0.0; size], vec![0.0; size]);
    for (m, &base) in off.iter().take(p + 1).enumerate() {
        let side = p + 1 - m;
        for i in 0..side {
            for j in 0..side {
                let (ni, nj) = (m + i, m + j);
                let at = base as usize + i * side + j;
                if nj <= ni {
                    a[at] = (knm(ni, m) / (factorial(ni - nj) * knm(nj, m))) as f32;
                }
                let sign = if (ni + m) % 2 == 0 { 1.0 } else { -1.0 };
                b[at] = (sign * factorial(ni + nj) / (knm(ni, m) * knm(nj, m))) as f32;
                if nj >= ni {
                    c[at] = (knm(nj, m) / (knm(ni, m) * factorial(nj - ni))) as f32;
                }
            }
        }
    }
    (a, b, c)
}

/// Builds rotation records (see the kernel's layout) for many directions.
pub struct RotationBuilder {
    p: usize,
    delta: Vec<f64>,
    rot: Rotation,
}

impl RotationBuilder {
    pub fn new(p: usize) -> Self {
        Self {
            p,
            delta: delta_table(p),
            rot: Rotation::empty(p),
        }
    }

    /// Appends the record of the rotation that takes `v` to `+z` to `out`.
    pub fn push(&mut self, v: [f64; 3], out: &mut Vec<f32>) {
        let p = self.p;
        let rxy = (v[0] * v[0] + v[1] * v[1]).sqrt();
        assert!(rxy > 0.0 || v[2] != 0.0, "zero translation vector");
        let theta = rxy.atan2(v[2]);
        let phi = if rxy > 0.0 { v[1].atan2(v[0]) } else { 0.0 };
        self.rot.set_angles(theta, 0.0, &self.delta);
        for m in 0..=p {
            let (s, c) = (m as f64 * phi).sin_cos();
            out.extend_from_slice(&[c as f32, s as f32]);
        }
        let nc = ncoef(p);
        let sq = sq_len(p);
        let base = out.len();
        out.resize(base + 4 * sq, 0.0);
        let mut unit = vec![Complex64::default(); nc];
        let mut res = vec![Complex64::default(); nc];
        for n in 0..=p {
            let nb = n + 1;
            for m in 0..=n {
                for (part, z) in [
                    (0usize, Complex64::new(1.0, 0.0)),
                    (1, Complex64::new(0.0, 1.0)),
                ] {
                    unit.iter_mut().for_each(|u| *u = Complex64::default());
                    unit[index(n, m)] = z;
                    // forward: column m of fwd (rows m')
                    self.rot.forward(&unit, &mut res);
                    for mp in 0..=n {
                        let v = res[index(n, mp)];
                        let val = if part == 0 { v.re } else { v.im };
                        out[base + part * sq + sq_offset(n) + mp * nb + m] = val as f32;
                    }
                    // backward: input at (n, m) read as m'; rows m of bwd
                    self.rot.backward(&unit, &mut res);
                    for mm in 0..=n {
                        let v = res[index(n, mm)];
                        let val = if part == 0 { v.re } else { v.im };
                        out[base + (2 + part) * sq + sq_offset(n) + mm * nb + m] = val as f32;
                    }
                }
            }
        }
    }
}

pub use vortex_fmm::backend::direction_key;

#[cfg(test)]
mod tests {
    use super::*;
    use vortex_fmm::operators::{Operators, Scratch};

    /// Applies a record the way the kernel does (forward, z-translation M2L, backward) in f64.
    fn emulate_m2l(p: usize, rec: &[f32], dist: f64, mult: &[Complex64], out: &mut [Complex64]) {
        let nc = ncoef(p);
        let sq = sq_len(p);
        let (_, zt, _) = z_tables(p);
        let off = toff(p);
        let ph: Vec<Complex64> = (0..=p)
            .map(|m| Complex64::new(rec[2 * m] as f64, rec[2 * m + 1] as f64))
            .collect();
        let mats = &rec[2 * (p + 1)..];
        for c in 0..3 {
            let x = &mult[c * nc..(c + 1) * nc];
            let mut a = vec![Complex64::default(); nc];
            for n in 0..=p {
                for mp in 0..=n {
                    let (mut re, mut im) = (0.0, 0.0);
                    for m in 0..=n {
                        let g = ph[m] * x[index(n, m)];
                        re += mats[sq_offset(n) + mp * (n + 1) + m] as f64 * g.re;
                        im += mats[sq + sq_offset(n) + mp * (n + 1) + m] as f64 * g.im;
                    }
                    a[index(n, mp)] = Complex64::new(re, im);
                }
            }
            let mut b = vec![Complex64::default(); nc];
            for n in 0..=p {
                for m in 0..=n {
                    let side = p + 1 - m;
                    let ii = n - m;
                    let mut s = Complex64::default();
                    for j in 0..side {
                        let t = zt[off[m] as usize + ii * side + j] as f64;
                        s += a[index(m + j, m)] * t * dist.powi(-((m + j) as i32));
                    }
                    b[index(n, m)] = s * dist.powi(-((m + ii + 1) as i32));
                }
            }
            for n in 0..=p {
                for m in 0..=n {
                    let (mut re, mut im) = (0.0, 0.0);
                    for mp in 0..=n {
                        let v = b[index(n, mp)];
                        re += mats[2 * sq + sq_offset(n) + m * (n + 1) + mp] as f64 * v.re;
                        im += mats[3 * sq + sq_offset(n) + m * (n + 1) + mp] as f64 * v.im;
                    }
                    out[c * nc + index(n, m)] += ph[m].conj() * Complex64::new(re, im);
                }
            }
        }
    }

    #[test]
    fn rotation_record_reproduces_the_cpu_m2l() {
        let p = 6;
        let ops = Operators::new(p);
        let nc = ncoef(p);
        let mult: Vec<Complex64> = (0..3 * nc)
            .map(|i| Complex64::new((i as f64 * 0.37).sin(), (i as f64 * 0.11).cos()))
            .collect();
        let mut b = RotationBuilder::new(p);
        for v in [
            [1.0, 2.0, -2.0],
            [0.0, 0.0, -3.0],
            [0.0, 0.0, 2.5],
            [-1.5, 0.5, 0.0],
        ] {
            let dist: f64 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
            let dist = dist.sqrt();
            let mut rec = Vec::new();
            b.push(v, &mut rec);
            assert_eq!(rec.len(), rot_stride(p));
            let mut got = vec![Complex64::default(); 3 * nc];
            emulate_m2l(p, &rec, dist, &mult, &mut got);
            let mut want = vec![Complex64::default(); 3 * nc];
            let mut scratch = Scratch::new(p);
            ops.m2l([0.0; 3], v, &mult, &mut want, &mut scratch);
            let err: f64 = got.iter().zip(&want).map(|(a, b)| (a - b).norm_sqr()).sum();
            let den: f64 = want.iter().map(|a| a.norm_sqr()).sum();
            assert!(
                (err / den).sqrt() < 1e-6,
                "v = {v:?}: {}",
                (err / den).sqrt()
            );
        }
    }

    #[test]
    fn direction_keys_are_reduced() {
        assert_eq!(direction_key([4.0, -2.0, 0.0], 1.0), [2, -1, 0]);
        assert_eq!(direction_key([0.5, 0.5, 0.5], 0.25), [1, 1, 1]);
        assert_eq!(toff(2), vec![0, 9, 13, 14]);
        assert_eq!(sq_len(2), 1 + 4 + 9);
    }
}
