//! The rotation-based translations' common steps (core paper Eq. 30-32): rotate the three
//! components so that the translation runs along `+z`, translate along `z` with one of the
//! factor tables, rotate back.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use super::*;

impl Operators {
    /// `w.a` = forward rotation of `input` (component-major, `index` layout), m-major.
    #[inline]
    pub(super) fn rotate_forward(&self, rot: &Rotation, input: &[Complex64], w: &mut Work) {
        let p = self.p;
        let nc = ncoef(p);
        for n in 0..=p {
            for m in 0..=n {
                let ph = rot.phase[m];
                let i = index(n, m);
                let (g0, g1) = pack3(ph * input[i], ph * input[nc + i], ph * input[2 * nc + i]);
                w.g[2 * m] = g0;
                w.g[2 * m + 1] = g1;
            }
            let off = sq_offset(n);
            let nb = n + 1;
            let g = &w.g[..2 * nb];
            for mp in 0..=n {
                let pq = &rot.fwd[off + mp * nb..off + mp * nb + nb];
                let (mut s0, mut s1) = (f64x4::splat(0.0), f64x4::splat(0.0));
                for (c, g) in pq.iter().zip(g.chunks_exact(2)) {
                    let ab = ab2(c);
                    s0 = ab.mul_add(g[0], s0);
                    s1 = ab.mul_add(g[1], s1);
                }
                let o = (self.moff[mp] + n - mp) * 2;
                w.a[o] = s0;
                w.a[o + 1] = s1;
            }
        }
    }

    /// `out += ` backward rotation of `w.b` (m-major) into component-major `index` layout.
    #[inline]
    pub(super) fn rotate_backward_acc(&self, rot: &Rotation, w: &Work, out: &mut [Complex64]) {
        let p = self.p;
        let nc = ncoef(p);
        let mut y = [f64x4::splat(0.0); 2 * (MAX_ORDER + 1)];
        for n in 0..=p {
            let off = sq_offset(n);
            let nb = n + 1;
            // gather degree n of w.b contiguously
            for mp in 0..nb {
                let o = (self.moff[mp] + n - mp) * 2;
                y[2 * mp] = w.b[o];
                y[2 * mp + 1] = w.b[o + 1];
            }
            let y = &y[..2 * nb];
            for m in 0..=n {
                let pq = &rot.bwd[off + m * nb..off + m * nb + nb];
                let (mut s0, mut s1) = (f64x4::splat(0.0), f64x4::splat(0.0));
                for (c, y) in pq.iter().zip(y.chunks_exact(2)) {
                    let ab = ab2(c);
                    s0 = ab.mul_add(y[0], s0);
                    s1 = ab.mul_add(y[1], s1);
                }
                let (s0, s1) = (s0.to_array(), s1.to_array());
                let ph = rot.phase[m].conj();
                let i = index(n, m);
                out[i] += ph * Complex64::new(s0[0], s0[1]);
                out[nc + i] += ph * Complex64::new(s0[2], s0[3]);
                out[2 * nc + i] += ph * Complex64::new(s1[0], s1[1]);
            }
        }
    }

    /// z-axis translation `w.b[m][i] = post(i) sum_j T[m][i][j] pw(i, j) w.a[m][j]`, with
    /// `KIND` = [`Z_LOWER`] (M2M: `j <= i`, `tau^{i-j}`), [`Z_FULL`] (M2L: all `j`,
    /// `s^{-(m+j)} s^{-(m+i+1)}`) or [`Z_UPPER`] (L2L: `j >= i`, `tau^{j-i}`).
    #[inline]
    pub(super) fn translate_z<const KIND: u8>(&self, table: &[f64], w: &mut Work) {
        let p = self.p;
        for m in 0..=p {
            let side = p + 1 - m;
            let blk = &table[self.toff[m]..self.toff[m] + side * side];
            let base = self.moff[m] * 2;
            let a = &w.a[base..base + side * 2];
            for i in 0..side {
                let (lo, hi) = match KIND {
                    Z_LOWER => (0, i + 1),
                    Z_FULL => (0, side),
                    _ => (i, side),
                };
                let row = &blk[i * side + lo..i * side + hi];
                let aj = &a[2 * lo..2 * hi];
                let (mut s0, mut s1) = (f64x4::splat(0.0), f64x4::splat(0.0));
                match KIND {
                    Z_LOWER => {
                        let pw = &w.pw[..=i];
                        for (jj, (t, x)) in row.iter().zip(aj.chunks_exact(2)).enumerate() {
                            let t = f64x4::splat(t * pw[i - jj]);
                            s0 = t.mul_add(x[0], s0);
                            s1 = t.mul_add(x[1], s1);
                        }
                    }
                    Z_FULL => {
                        let pw = &w.pw[m..m + side];
                        for ((t, x), q) in row.iter().zip(aj.chunks_exact(2)).zip(pw) {
                            let t = f64x4::splat(t * q);
                            s0 = t.mul_add(x[0], s0);
                            s1 = t.mul_add(x[1], s1);
                        }
                    }
                    _ => {
                        let pw = &w.pw[..side - i];
                        for ((t, x), q) in row.iter().zip(aj.chunks_exact(2)).zip(pw) {
                            let t = f64x4::splat(t * q);
                            s0 = t.mul_add(x[0], s0);
                            s1 = t.mul_add(x[1], s1);
                        }
                    }
                }
                let o = base + 2 * i;
                if KIND == Z_FULL {
                    let post = f64x4::splat(w.pw[m + i + 1]);
                    w.b[o] = s0 * post;
                    w.b[o + 1] = s1 * post;
                } else {
                    w.b[o] = s0;
                    w.b[o + 1] = s1;
                }
            }
        }
    }

    /// Rebuilds `scratch`'s rotation for the translation from centre `from` to centre `to`
    /// and returns the distance `|to - from|`.
    pub(super) fn rotation_between(
        &self,
        from: [f64; 3],
        to: [f64; 3],
        scratch: &mut Scratch,
    ) -> f64 {
        let v = sub(to, from);
        scratch.rot.set(v, &self.delta);
        norm(v)
    }

    /// One rotation-based translation (M2M, M2L or L2L; core paper Eq. 30-32): `input`
    /// rotated so that the translation runs along `+z`, translated along z by `table` (of
    /// `KIND`) with the powers `1, x, x^2, ...` (`terms` of them), rotated back and added to
    /// `out`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn translate<const KIND: u8>(
        &self,
        rot: &Rotation,
        table: &[f64],
        x: f64,
        terms: usize,
        input: &[Complex64],
        out: &mut [Complex64],
        w: &mut Work,
    ) {
        debug_assert_eq!(rot.order(), self.p);
        self.rotate_forward(rot, input, w);
        let mut t = 1.0;
        for k in 0..terms {
            w.pw[k] = t;
            t *= x;
        }
        self.translate_z::<KIND>(table, w);
        self.rotate_backward_acc(rot, w, out);
    }
}

/// z-axis translation kinds of [`Operators::translate_z`].
pub(super) const Z_LOWER: u8 = 0;
pub(super) const Z_FULL: u8 = 1;
pub(super) const Z_UPPER: u8 = 2;
