//! The potentials of a local expansion at points (used to hand far-field contributions to
//! representations that store potentials, e.g. the pseudo-particle local of [`crate::ppm`]).
//!
//! `phi_c(x) = sum_{n, |m| <= n} L_n^m r^n C_n^m(x^)` (core paper Eq. 13) with
//! `r^n C_n^m = K_n^m R_n^m` ([`crate::expansions::harmonics`]) and `L_n^{-m} C_n^{-m} =
//! conj(L_n^m C_n^m)`, so only `m >= 0` is summed, doubling the real part for `m > 0`.

use crate::expansions::harmonics::{knm, regular};
use crate::expansions::{index, ncoef, Complex64};

/// The three potentials (no `1/(4 pi)`) of the local expansion `local` of order `p` about
/// `center`, at each of `points`.
pub fn local_potential(
    p: usize,
    center: [f64; 3],
    local: &[Complex64],
    points: &[[f64; 3]],
) -> Vec<[f64; 3]> {
    let nc = ncoef(p);
    let mut r = vec![Complex64::new(0.0, 0.0); nc];
    let k: Vec<f64> = (0..=p)
        .flat_map(|n| (0..=n).map(move |m| knm(n, m)))
        .collect();
    points
        .iter()
        .map(|x| {
            regular(p, std::array::from_fn(|c| x[c] - center[c]), &mut r);
            let mut phi = [0.0; 3];
            for (c, ph) in phi.iter_mut().enumerate() {
                let l = &local[c * nc..(c + 1) * nc];
                for n in 0..=p {
                    for m in 0..=n {
                        let i = index(n, m);
                        let term = (l[i] * r[i]).re * k[i];
                        *ph += if m == 0 { term } else { 2.0 * term };
                    }
                }
            }
            phi
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expansions::expansion_len;
    use crate::operators::{Operators, Scratch};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn local_potential_matches_direct_sum() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let p = 12;
        let ops = Operators::new(p);
        let src: Vec<[f64; 3]> = (0..40)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-0.5..0.5)))
            .collect();
        let alpha: Vec<[f64; 3]> = (0..40)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
            .collect();
        let sc = [0.0; 3];
        let tc = [3.0, -2.5, 1.5];
        let mut m = vec![Complex64::new(0.0, 0.0); expansion_len(p)];
        ops.p2m(sc, &src, &alpha, &mut m);
        let mut l = vec![Complex64::new(0.0, 0.0); expansion_len(p)];
        ops.m2l(sc, tc, &m, &mut l, &mut Scratch::new(p));
        let pts: Vec<[f64; 3]> = (0..20)
            .map(|_| std::array::from_fn(|c| tc[c] + rng.gen_range(-0.5..0.5)))
            .collect();
        let phi = local_potential(p, tc, &l, &pts);
        let (mut num, mut den) = (0.0, 0.0);
        for (x, ph) in pts.iter().zip(&phi) {
            for c in 0..3 {
                let exact: f64 = src
                    .iter()
                    .zip(&alpha)
                    .map(|(y, a)| {
                        a[c] / ((x[0] - y[0]).powi(2)
                            + (x[1] - y[1]).powi(2)
                            + (x[2] - y[2]).powi(2))
                        .sqrt()
                    })
                    .sum();
                num += (ph[c] - exact).powi(2);
                den += exact * exact;
            }
        }
        assert!((num / den).sqrt() < 1e-7, "{}", (num / den).sqrt());
    }
}
