//! P2M (core paper Eq. 12): the multipole of point sources about a centre.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use super::*;

impl Operators {
    /// P2M (paper Eq. 12): accumulates the multipole about `center` of point sources.
    pub fn p2m(
        &self,
        center: [f64; 3],
        position: &[[f64; 3]],
        strength: &[[f64; 3]],
        multipole: &mut [Complex64],
    ) {
        let p = self.p;
        let nc = ncoef(p);
        assert!(multipole.len() >= 3 * nc && strength.len() == position.len());
        let mut r = [Complex64::default(); HALF_MAX];
        for (x, a) in position.iter().zip(strength) {
            regular(p, sub(*x, center), &mut r);
            for i in 0..nc {
                let w = r[i].conj() * self.k[i];
                multipole[i] += w * a[0];
                multipole[nc + i] += w * a[1];
                multipole[2 * nc + i] += w * a[2];
            }
        }
    }
}
