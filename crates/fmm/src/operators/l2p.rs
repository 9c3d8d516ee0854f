//! L2P (core paper Eq. 19, 21): velocity and stretching of a local expansion at targets.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use super::*;

impl Operators {
    /// L2P (paper Eq. 19, 21): accumulates velocity `curl(phi)` and stretching
    /// `(alpha . grad) curl(phi)` of the local expansion at the targets (no `1/(4 pi)`).
    pub fn l2p(
        &self,
        center: [f64; 3],
        local: &[Complex64],
        position: &[[f64; 3]],
        alpha: &[[f64; 3]],
        velocity: &mut [[f64; 3]],
        stretching: &mut [[f64; 3]],
    ) {
        let p = self.p;
        let nc = ncoef(p);
        let nf = (p + 1) * (p + 1);
        let mut lf = [[Complex64::default(); (MAX_ORDER + 1) * (MAX_ORDER + 1)]; 3];
        for (c, l) in lf.iter_mut().enumerate() {
            // Lhat = conj(L) K
            expand_full(p, &local[c * nc..(c + 1) * nc], &self.k, true, &mut l[..nf]);
        }
        let mut rh = [Complex64::default(); HALF_MAX];
        let mut rf = [Complex64::default(); FULL_MAX];
        const AB: [(usize, isize); 5] = [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2)];
        for (i, x) in position.iter().enumerate() {
            regular(p, sub(*x, center), &mut rh);
            expand_full(p, &rh, &self.ones, true, &mut rf[..nf]);
            let mut tay = [[Complex64::default(); 5]; 3];
            for j in 0..p {
                let na = if j + 2 <= p { 5 } else { 2 };
                let ji = j as isize;
                for ii in -ji..=ji {
                    let r = rf[full_index(j, ii)];
                    for (q, &(a, b)) in AB.iter().enumerate().take(na) {
                        let at = full_index(j + a, ii + b);
                        tay[0][q] += lf[0][at] * r;
                        tay[1][q] += lf[1][at] * r;
                        tay[2][q] += lf[2][at] * r;
                    }
                }
            }
            accumulate_fields(&tay, alpha[i], &mut velocity[i], &mut stretching[i]);
        }
    }
}
