//! Near-field P2P: direct Gaussian-cored Biot-Savart velocity and stretching between the
//! points of a target leaf and those of its near source leaves (core paper Eq. 5, 7, 9;
//! the pair formula is [`crate::kernel::pair_interaction`]).
//!
//! The kernel factors come from [`KernelTable`] (piecewise polynomials, 1e-13 relative to the
//! `erf`/`exp` form), and sources are packed with their inverse core-radius powers so that the
//! inner loop has no division, `erf`, `exp` or branch except the table/singular switch.

use crate::kernel::{cross, KernelTable};
use crate::Sources;

/// One source packed for the P2P inner loop.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct P2pSource {
    pub x: [f64; 3],
    pub alpha: [f64; 3],
    /// `1/sigma^2`, `1/sigma^3`, `1/sigma^5`.
    pub inv_sigma: [f64; 3],
}

/// Packs sources (any order) for [`p2p`].
pub fn pack_sources(s: &Sources) -> Vec<P2pSource> {
    s.position
        .iter()
        .zip(&s.strength)
        .zip(&s.sigma)
        .map(|((&x, &alpha), &sigma)| {
            let i2 = 1.0 / (sigma * sigma);
            P2pSource {
                x,
                alpha,
                inv_sigma: [i2, i2 / sigma, i2 * i2 / sigma],
            }
        })
        .collect()
}

/// Sources handled together in the inner loop (one AVX2 register of f64).
const LANES: usize = 4;

/// Accumulates (no `1/(4 pi)`) the velocity and stretching that `sources`, shifted by `shift`,
/// induce at the targets.
///
/// The inner loop runs over groups of [`LANES`] sources with branch-free selects between the
/// tabulated and the singular kernel, so that the compiler can keep the lanes in vector registers.
pub fn p2p(
    table: &KernelTable,
    tgt_pos: &[[f64; 3]],
    tgt_strength: &[[f64; 3]],
    sources: &[P2pSource],
    shift: [f64; 3],
    velocity: &mut [[f64; 3]],
    stretching: &mut [[f64; 3]],
) {
    let groups = sources.chunks_exact(LANES);
    let rest = groups.remainder();
    for (i, xi) in tgt_pos.iter().enumerate() {
        let ai = tgt_strength[i];
        let xi = [xi[0] - shift[0], xi[1] - shift[1], xi[2] - shift[2]];
        let mut u = [[0.0; LANES]; 3];
        let mut s = [[0.0; LANES]; 3];
        for g in groups.clone() {
            let mut k = [0.0; LANES];
            let mut kp = [0.0; LANES];
            let mut d = [[0.0; LANES]; 3];
            for l in 0..LANES {
                let src = &g[l];
                for c in 0..3 {
                    d[c][l] = xi[c] - src.x[c];
                }
                let r2 = d[0][l] * d[0][l] + d[1][l] * d[1][l] + d[2][l] * d[2][l];
                (k[l], kp[l]) = table.factors_branchless(
                    r2,
                    src.inv_sigma[0],
                    src.inv_sigma[1],
                    src.inv_sigma[2],
                );
            }
            for l in 0..LANES {
                let a = g[l].alpha;
                let axd = [
                    a[1] * d[2][l] - a[2] * d[1][l],
                    a[2] * d[0][l] - a[0] * d[2][l],
                    a[0] * d[1][l] - a[1] * d[0][l],
                ];
                let axa = [
                    a[1] * ai[2] - a[2] * ai[1],
                    a[2] * ai[0] - a[0] * ai[2],
                    a[0] * ai[1] - a[1] * ai[0],
                ];
                let ad = (ai[0] * d[0][l] + ai[1] * d[1][l] + ai[2] * d[2][l]) * kp[l];
                for c in 0..3 {
                    u[c][l] += k[l] * axd[c];
                    s[c][l] += k[l] * axa[c] + ad * axd[c];
                }
            }
        }
        let mut ut: [f64; 3] = std::array::from_fn(|c| u[c].iter().sum());
        let mut st: [f64; 3] = std::array::from_fn(|c| s[c].iter().sum());
        for src in rest {
            let d = [xi[0] - src.x[0], xi[1] - src.x[1], xi[2] - src.x[2]];
            let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
            let (k, kp_over_r) =
                table.factors(r2, src.inv_sigma[0], src.inv_sigma[1], src.inv_sigma[2]);
            let axd = cross(src.alpha, d);
            let axa = cross(src.alpha, ai);
            let ad = (ai[0] * d[0] + ai[1] * d[1] + ai[2] * d[2]) * kp_over_r;
            for c in 0..3 {
                ut[c] += k * axd[c];
                st[c] += k * axa[c] + ad * axd[c];
            }
        }
        for c in 0..3 {
            velocity[i][c] += ut[c];
            stretching[i][c] += st[c];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::pair_interaction;
    use crate::testsets::standard;

    #[test]
    fn p2p_matches_the_exact_pair_formula() {
        let src = standard(300, 3);
        let tgt = standard(50, 4);
        let table = KernelTable::new();
        let packed = pack_sources(&src);
        let shift = [0.1, -0.2, 0.3];
        let (mut v, mut s) = (vec![[0.0; 3]; 50], vec![[0.0; 3]; 50]);
        p2p(
            &table,
            &tgt.position,
            &tgt.strength,
            &packed,
            shift,
            &mut v,
            &mut s,
        );
        let (mut num, mut den) = (0.0, 0.0);
        for i in 0..50 {
            let xi: [f64; 3] = std::array::from_fn(|c| tgt.position[i][c] - shift[c]);
            let (mut u, mut st) = ([0.0; 3], [0.0; 3]);
            for j in 0..300 {
                let (du, ds) = pair_interaction(
                    xi,
                    tgt.strength[i],
                    src.position[j],
                    src.strength[j],
                    src.sigma[j],
                );
                for c in 0..3 {
                    u[c] += du[c];
                    st[c] += ds[c];
                }
            }
            for c in 0..3 {
                num += (v[i][c] - u[c]).powi(2) + (s[i][c] - st[c]).powi(2);
                den += u[c] * u[c] + st[c] * st[c];
            }
        }
        assert!((num / den).sqrt() < 1e-13, "{}", (num / den).sqrt());
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    #[test]
    #[ignore]
    fn p2p_timing() {
        let src = crate::testsets::standard(2000, 3);
        let tgt = crate::testsets::standard(2000, 4);
        let table = KernelTable::new();
        let packed = pack_sources(&src);
        let (mut v, mut s) = (vec![[0.0; 3]; 2000], vec![[0.0; 3]; 2000]);
        let t0 = std::time::Instant::now();
        p2p(
            &table,
            &tgt.position,
            &tgt.strength,
            &packed,
            [0.0; 3],
            &mut v,
            &mut s,
        );
        let dt = t0.elapsed().as_secs_f64();
        eprintln!("p2p: {:.2} ns/pair", dt / 4e6 * 1e9);
    }
}
