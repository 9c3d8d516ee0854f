//! M2P (core paper Eq. 18, 20): velocity and stretching of a multipole at targets.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use super::*;

impl Operators {
    /// M2P (paper Eq. 18, 20): accumulates velocity and stretching of the multipole at the
    /// targets (no `1/(4 pi)`); targets must lie outside the sources' sphere.
    pub fn m2p(
        &self,
        center: [f64; 3],
        multipole: &[Complex64],
        position: &[[f64; 3]],
        alpha: &[[f64; 3]],
        velocity: &mut [[f64; 3]],
        stretching: &mut [[f64; 3]],
    ) {
        let p = self.p;
        let nc = ncoef(p);
        let nf = (p + 1) * (p + 1);
        let nf2 = (p + 3) * (p + 3);
        let mut mf = [[Complex64::default(); (MAX_ORDER + 1) * (MAX_ORDER + 1)]; 3];
        for (c, m) in mf.iter_mut().enumerate() {
            // Mhat = M / K
            expand_full(
                p,
                &multipole[c * nc..(c + 1) * nc],
                &self.inv_k,
                false,
                &mut m[..nf],
            );
        }
        let mut ih = [Complex64::default(); HALF_MAX];
        let mut inf = [Complex64::default(); FULL_MAX];
        for (i, x) in position.iter().enumerate() {
            irregular(p + 2, sub(*x, center), &mut ih);
            expand_full(p + 2, &ih, &self.ones, false, &mut inf[..nf2]);
            let mut tay = [[Complex64::default(); 5]; 3];
            for n in 0..=p {
                let ni = n as isize;
                for m in -ni..=ni {
                    let i1 = full_index(n + 1, m);
                    let i2 = full_index(n + 2, m);
                    let iv = [inf[i1], inf[i1 + 1], inf[i2], inf[i2 + 1], inf[i2 + 2]];
                    let at = full_index(n, m);
                    for c in 0..3 {
                        let mv = mf[c][at];
                        tay[c][0] -= mv * iv[0];
                        tay[c][1] -= mv * iv[1];
                        tay[c][2] += mv * iv[2];
                        tay[c][3] += mv * iv[3];
                        tay[c][4] += mv * iv[4];
                    }
                }
            }
            accumulate_fields(&tay, alpha[i], &mut velocity[i], &mut stretching[i]);
        }
    }
}
