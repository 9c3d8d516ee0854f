//! The plain `O(p^4)` translations M2L, M2M and L2L (Epton & Dembart 1995; Dehnen 2014,
//! Eq. 40-49): the references the rotation-based operators are tested against.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use super::*;

impl Operators {
    fn full_of(&self, half: &[Complex64], scale: &[f64], conj: bool, p: usize) -> Vec<Complex64> {
        let mut f = vec![Complex64::default(); (p + 1) * (p + 1)];
        expand_full(p, half, scale, conj, &mut f);
        f
    }

    /// The regular harmonics `R_n^m(child - parent)` to order `p`, expanded by `full_of` to every
    /// `-n <= m <= n` (unit scale): the translation factors of M2M and L2L.
    fn regular_full(&self, child_center: [f64; 3], parent_center: [f64; 3]) -> Vec<Complex64> {
        let mut rh = vec![Complex64::default(); ncoef(self.p)];
        regular(self.p, sub(child_center, parent_center), &mut rh);
        self.full_of(&rh, &self.ones, true, self.p)
    }

    /// Plain `O(p^4)` M2L: `Lhat_k^l = (-1)^k sum_{n,m} Mhat_n^m I_{n+k}^{m+l}(t - s)`.
    pub fn m2l_direct(
        &self,
        source_center: [f64; 3],
        target_center: [f64; 3],
        multipole: &[Complex64],
        local: &mut [Complex64],
    ) {
        let p = self.p;
        let nc = ncoef(p);
        let mut ih = vec![Complex64::default(); ncoef(2 * p)];
        irregular(2 * p, sub(target_center, source_center), &mut ih);
        let ones = vec![1.0; ncoef(2 * p)];
        let inf = self.full_of(&ih, &ones, false, 2 * p);
        for c in 0..3 {
            let mf = self.full_of(&multipole[c * nc..(c + 1) * nc], &self.inv_k, false, p);
            for k in 0..=p {
                for l in 0..=k {
                    let mut s = Complex64::default();
                    for n in 0..=p {
                        let ni = n as isize;
                        for m in -ni..=ni {
                            s += mf[full_index(n, m)] * inf[full_index(n + k, m + l as isize)];
                        }
                    }
                    if k % 2 == 1 {
                        s = -s;
                    }
                    local[c * nc + index(k, l)] += s.conj() * self.inv_k[index(k, l)];
                }
            }
        }
    }

    /// Plain `O(p^4)` M2M: `Mhat'_n^m = sum_{k,l} conj(R_k^l(c - P)) Mhat_{n-k}^{m-l}`.
    pub fn m2m_direct(
        &self,
        child_center: [f64; 3],
        parent_center: [f64; 3],
        child: &[Complex64],
        parent: &mut [Complex64],
    ) {
        let (p, nc) = (self.p, ncoef(self.p));
        let rf = self.regular_full(child_center, parent_center);
        for c in 0..3 {
            let mf = self.full_of(&child[c * nc..(c + 1) * nc], &self.inv_k, false, p);
            for n in 0..=p {
                for m in 0..=n as isize {
                    let mut s = Complex64::default();
                    for k in 0..=n {
                        let ki = k as isize;
                        for l in -ki..=ki {
                            if (m - l).unsigned_abs() <= n - k {
                                s += rf[full_index(k, l)] * mf[full_index(n - k, m - l)];
                            }
                        }
                    }
                    let i = index(n, m as usize);
                    parent[c * nc + i] += s * self.k[i];
                }
            }
        }
    }

    /// Plain `O(p^4)` L2L: `Lhat'_a^b = sum_{j,i} Lhat_{j+a}^{i+b} conj(R_j^i(c - P))`.
    pub fn l2l_direct(
        &self,
        parent_center: [f64; 3],
        child_center: [f64; 3],
        parent: &[Complex64],
        child: &mut [Complex64],
    ) {
        let (p, nc) = (self.p, ncoef(self.p));
        let rf = self.regular_full(child_center, parent_center);
        for c in 0..3 {
            let lf = self.full_of(&parent[c * nc..(c + 1) * nc], &self.k, true, p);
            for a in 0..=p {
                for b in 0..=a as isize {
                    let mut s = Complex64::default();
                    for j in 0..=(p - a) {
                        let ji = j as isize;
                        for i in -ji..=ji {
                            s += lf[full_index(j + a, i + b)] * rf[full_index(j, i)];
                        }
                    }
                    let at = index(a, b as usize);
                    child[c * nc + at] += s.conj() * self.inv_k[at];
                }
            }
        }
    }
}
