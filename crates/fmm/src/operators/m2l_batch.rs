//! Batched M2L (core paper Eq. 27, 30-32): up to [`M2L_BATCH`] translations that share one
//! rotation in one SIMD pass.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use super::*;

/// Largest number of translations of one [`Operators::m2l_batch`] call.
pub const M2L_BATCH: usize = 4;

/// Work buffers of [`Operators::m2l_batch`] (per thread; no allocation in hot calls).
#[derive(Clone, Debug)]
pub struct BatchScratch {
    a: Vec<f64x4>,
    b: Vec<f64x4>,
    g: Vec<f64x4>,
}

impl BatchScratch {
    pub fn new(p: usize) -> Self {
        Self {
            a: vec![f64x4::splat(0.0); 6 * ncoef(p)],
            b: vec![f64x4::splat(0.0); 6 * ncoef(p)],
            g: vec![f64x4::splat(0.0); 6 * (p + 1)],
        }
    }
}

impl Operators {
    /// Batched M2L: `dist.len()` (1 to [`M2L_BATCH`]) translations that share the rotation
    /// `rot` (one direction), from the multipoles at complex offsets `src` of `multipoles` into
    /// the locals at offsets `dst` of `locals`, at distances `dist` (each as
    /// [`Operators::m2l_with_rotation`]; equal up to round-off). The coefficients of all lanes
    /// (3 components each) are packed densely into SIMD vectors, so that every rotation and
    /// z-translation entry is loaded once for all of them and the multiply-adds run in 3 or 6
    /// independent chains. The distance powers of the z-translation are applied per degree
    /// while packing and unpacking. Every lane is computed independently of the others, and the
    /// lanes are added to `locals` in order (two lanes may share a target).
    #[allow(clippy::too_many_arguments)]
    pub fn m2l_batch(
        &self,
        rot: &Rotation,
        dist: &[f64],
        multipoles: &[Complex64],
        src: &[usize],
        locals: &mut [Complex64],
        dst: &[usize],
        scratch: &mut BatchScratch,
    ) {
        let lanes = dist.len();
        assert!((1..=M2L_BATCH).contains(&lanes) && src.len() == lanes && dst.len() == lanes);
        debug_assert_eq!(rot.order(), self.p);
        if lanes <= 2 {
            self.m2l_lanes::<3>(rot, dist, multipoles, src, locals, dst, scratch);
        } else {
            self.m2l_lanes::<6>(rot, dist, multipoles, src, locals, dst, scratch);
        }
    }

    /// [`Operators::m2l_batch`] with `V` vectors per coefficient slot, `2 V / 3` lanes (unused
    /// lanes repeat the first one and are not stored). Complex number `q = 3 lane + component`
    /// of a slot lives in vector `q / 2`, half `q % 2`.
    #[allow(clippy::too_many_arguments)]
    fn m2l_lanes<const V: usize>(
        &self,
        rot: &Rotation,
        dist: &[f64],
        multipoles: &[Complex64],
        src: &[usize],
        locals: &mut [Complex64],
        dst: &[usize],
        w: &mut BatchScratch,
    ) {
        let p = self.p;
        let nc = ncoef(p);
        let nl = 2 * V / 3;
        let lanes = dist.len();
        let lane_of = |q: usize| if q / 3 < lanes { q / 3 } else { 0 };
        // complex offset of number q of a slot in the input; per-vector inverse distances
        let mut sq = [0usize; 12];
        for q in 0..3 * nl {
            sq[q] = src[lane_of(q)] + (q % 3) * nc;
        }
        let inv: [f64x4; V] = std::array::from_fn(|k| {
            let (a, b) = (1.0 / dist[lane_of(2 * k)], 1.0 / dist[lane_of(2 * k + 1)]);
            f64x4::new([a, a, b, b])
        });
        // dist^{-n} per vector while packing degree n
        let mut pw = [f64x4::splat(1.0); V];
        let a = &mut w.a[..V * nc];
        let g = &mut w.g[..V * (p + 1)];
        for n in 0..=p {
            for m in 0..=n {
                let ph = rot.phase[m];
                let (c, sn) = (
                    f64x4::splat(ph.re),
                    f64x4::new([-ph.im, ph.im, -ph.im, ph.im]),
                );
                let i = index(n, m);
                for k in 0..V {
                    let (z0, z1) = (multipoles[sq[2 * k] + i], multipoles[sq[2 * k + 1] + i]);
                    let v = f64x4::new([z0.re, z0.im, z1.re, z1.im]);
                    // (re, im) * e^{i m phi} * dist^{-n}
                    g[m * V + k] = v.mul_add(c, swap_re_im(v) * sn) * pw[k];
                }
            }
            let off = sq_offset(n);
            let nb = n + 1;
            for mp in 0..=n {
                let pq = &rot.fwd[off + mp * nb..off + mp * nb + nb];
                let mut s = [f64x4::splat(0.0); V];
                for (c, gm) in pq.iter().zip(g.chunks_exact(V)) {
                    let ab = ab2(c);
                    for k in 0..V {
                        s[k] = ab.mul_add(gm[k], s[k]);
                    }
                }
                let o = (self.moff[mp] + n - mp) * V;
                a[o..o + V].copy_from_slice(&s);
            }
            for k in 0..V {
                pw[k] *= inv[k];
            }
        }
        // z translation with the bare factors: b[m][i] = sum_j T[m][i][j] a[m][j]
        let b = &mut w.b[..V * nc];
        for m in 0..=p {
            let side = p + 1 - m;
            let blk = &self.t_m2l[self.toff[m]..self.toff[m] + side * side];
            let base = self.moff[m] * V;
            let am = &a[base..base + side * V];
            for i in 0..side {
                let row = &blk[i * side..(i + 1) * side];
                let mut s = [f64x4::splat(0.0); V];
                for (t, x) in row.iter().zip(am.chunks_exact(V)) {
                    let t = f64x4::splat(*t);
                    for k in 0..V {
                        s[k] = t.mul_add(x[k], s[k]);
                    }
                }
                let o = base + i * V;
                b[o..o + V].copy_from_slice(&s);
            }
        }
        // back-rotation, then e^{-i m phi} dist^{-(n+1)}, into `a` in `index` order
        pw = inv;
        let y = &mut w.g[..V * (p + 1)];
        for n in 0..=p {
            let off = sq_offset(n);
            let nb = n + 1;
            for mp in 0..nb {
                let o = (self.moff[mp] + n - mp) * V;
                y[mp * V..(mp + 1) * V].copy_from_slice(&b[o..o + V]);
            }
            for m in 0..=n {
                let pq = &rot.bwd[off + m * nb..off + m * nb + nb];
                let mut s = [f64x4::splat(0.0); V];
                for (c, ym) in pq.iter().zip(y.chunks_exact(V)) {
                    let ab = ab2(c);
                    for k in 0..V {
                        s[k] = ab.mul_add(ym[k], s[k]);
                    }
                }
                let ph = rot.phase[m];
                let (c, sn) = (
                    f64x4::splat(ph.re),
                    f64x4::new([ph.im, -ph.im, ph.im, -ph.im]),
                );
                let o = index(n, m) * V;
                for k in 0..V {
                    a[o + k] = s[k].mul_add(c, swap_re_im(s[k]) * sn) * pw[k];
                }
            }
            for k in 0..V {
                pw[k] *= inv[k];
            }
        }
        // add lane by lane
        for l in 0..lanes {
            for c in 0..3 {
                let q = 3 * l + c;
                let (k, h) = (q / 2, 2 * (q % 2));
                let out = &mut locals[dst[l] + c * nc..dst[l] + (c + 1) * nc];
                for (i, o) in out.iter_mut().enumerate() {
                    let v = a[i * V + k].to_array();
                    *o += Complex64::new(v[h], v[h + 1]);
                }
            }
        }
    }
}
