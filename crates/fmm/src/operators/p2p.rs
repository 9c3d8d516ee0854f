//! Near-field P2P: direct Gaussian-cored Biot-Savart velocity and stretching between the
//! points of a target leaf and those of its near source leaves (core paper Eq. 5, 7, 9;
//! the pair formula is [`crate::kernel::pair_interaction`]).
//!
//! The kernel factors come from [`KernelTable`] (piecewise polynomials, 1e-13 relative to the
//! `erf`/`exp` form), and sources are packed with their inverse core-radius powers so that the
//! inner loop has no division, `erf`, `exp` or branch except the table/singular switch.

use crate::kernel::{KernelTable, TABLE_RHO2_MAX};
use crate::tree::Tree;
use crate::Sources;
use std::ops::Range;
use wide::f64x4;

/// Four sources in structure-of-arrays form, one SIMD lane each.
#[derive(Clone, Copy, Debug)]
pub struct SourceGroup {
    pub x: [f64x4; 3],
    pub alpha: [f64x4; 3],
    /// `1/sigma^2`, `1/sigma^3`, `1/sigma^5`.
    pub inv_sigma: [f64x4; 3],
}

/// Sources of a tree in groups of four, each leaf padded to whole groups with sources of zero
/// strength ("padding instead of branching", Yokota & Barba, GPU Computing Gems, Sec. 3).
#[derive(Clone, Debug, Default)]
pub struct PackedSources {
    pub groups: Vec<SourceGroup>,
    /// Groups of each cell of the tree (empty range for non-leaves).
    pub cell_groups: Vec<Range<usize>>,
}

impl PackedSources {
    /// Packs the sources (in the tree's sorted order) leaf by leaf.
    pub fn new(tree: &Tree, s: &Sources) -> Self {
        let mut groups = Vec::new();
        let mut cell_groups = vec![0..0; tree.cells.len()];
        for (c, cell) in tree.cells.iter().enumerate() {
            if !cell.is_leaf() || cell.is_empty() {
                continue;
            }
            let start = groups.len();
            let r = cell.range.clone();
            let last = r.end - 1;
            for g0 in r.clone().step_by(4) {
                let lane = |l: usize| {
                    let i = (g0 + l).min(last);
                    let real = g0 + l <= last;
                    let sig = s.sigma[i];
                    let i2 = 1.0 / (sig * sig);
                    (
                        s.position[i],
                        if real { s.strength[i] } else { [0.0; 3] },
                        [i2, i2 / sig, i2 * i2 / sig],
                    )
                };
                let lanes: [_; 4] = std::array::from_fn(lane);
                groups.push(SourceGroup {
                    x: std::array::from_fn(|c| f64x4::new(std::array::from_fn(|l| lanes[l].0[c]))),
                    alpha: std::array::from_fn(|c| {
                        f64x4::new(std::array::from_fn(|l| lanes[l].1[c]))
                    }),
                    inv_sigma: std::array::from_fn(|c| {
                        f64x4::new(std::array::from_fn(|l| lanes[l].2[c]))
                    }),
                });
            }
            cell_groups[c] = start..groups.len();
        }
        Self {
            groups,
            cell_groups,
        }
    }

    /// The groups of leaf `cell`.
    pub fn of(&self, cell: usize) -> &[SourceGroup] {
        &self.groups[self.cell_groups[cell].clone()]
    }
}

/// `(K sigma^3, K'/r sigma^5)` of four lanes with `rho2 < TABLE_RHO2_MAX`.
#[inline(always)]
fn table_lanes(
    table: &KernelTable,
    rho2: f64x4,
    scale: f64x4,
    one: f64x4,
    two: f64x4,
) -> (f64x4, f64x4) {
    let x = rho2 * scale;
    let xf = x.floor();
    let t = two * (x - xf) - one;
    let idx = xf
        .to_array()
        .map(|v| (v as usize).min(KernelTable::INTERVALS - 1));
    table.horner4(idx, t)
}

/// Accumulates (no `1/(4 pi)`) the velocity and stretching that the source groups, shifted by
/// `shift`, induce at the targets. Four sources per step in SIMD lanes; the tabulated and the
/// singular kernel are both evaluated and selected per lane.
pub fn p2p(
    table: &KernelTable,
    tgt_pos: &[[f64; 3]],
    tgt_strength: &[[f64; 3]],
    groups: &[SourceGroup],
    shift: [f64; 3],
    velocity: &mut [[f64; 3]],
    stretching: &mut [[f64; 3]],
) {
    let rho2_max = f64x4::splat(TABLE_RHO2_MAX);
    let rho2_clamp = f64x4::splat(TABLE_RHO2_MAX * (1.0 - 1e-15));
    let scale = f64x4::splat(table.scale());
    let three = f64x4::splat(3.0);
    let one = f64x4::splat(1.0);
    let two = f64x4::splat(2.0);
    for (i, xi) in tgt_pos.iter().enumerate() {
        let a = tgt_strength[i];
        let xi: [f64x4; 3] = std::array::from_fn(|c| f64x4::splat(xi[c] - shift[c]));
        let ai: [f64x4; 3] = std::array::from_fn(|c| f64x4::splat(a[c]));
        let mut u = [f64x4::splat(0.0); 3];
        let mut s = [f64x4::splat(0.0); 3];
        for g in groups {
            let d: [f64x4; 3] = std::array::from_fn(|c| xi[c] - g.x[c]);
            let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
            let rho2 = r2 * g.inv_sigma[0];
            let inside = rho2.simd_lt(rho2_max);
            // whole groups inside or outside the table range skip the other branch (neighbour
            // groups are spatially coherent, so the jump is well predicted)
            let (k, kp) = match inside.to_bitmask() {
                0b1111 => {
                    let (f, gg) = table_lanes(table, rho2, scale, one, two);
                    (f * g.inv_sigma[1], gg * g.inv_sigma[2])
                }
                0 => {
                    let inv_r2 = one / r2;
                    let inv_r3 = inv_r2.sqrt() * inv_r2;
                    (inv_r3, -three * inv_r3 * inv_r2)
                }
                _ => {
                    let (f, gg) = table_lanes(table, rho2.min(rho2_clamp), scale, one, two);
                    let inv_r2 = one / r2;
                    let inv_r3 = inv_r2.sqrt() * inv_r2;
                    (
                        inside.select(f * g.inv_sigma[1], inv_r3),
                        inside.select(gg * g.inv_sigma[2], -three * inv_r3 * inv_r2),
                    )
                }
            };
            let al = &g.alpha;
            let axd = [
                al[1] * d[2] - al[2] * d[1],
                al[2] * d[0] - al[0] * d[2],
                al[0] * d[1] - al[1] * d[0],
            ];
            let axa = [
                al[1] * ai[2] - al[2] * ai[1],
                al[2] * ai[0] - al[0] * ai[2],
                al[0] * ai[1] - al[1] * ai[0],
            ];
            let ad = (ai[0] * d[0] + ai[1] * d[1] + ai[2] * d[2]) * kp;
            for c in 0..3 {
                u[c] += k * axd[c];
                s[c] += k * axa[c] + ad * axd[c];
            }
        }
        for c in 0..3 {
            velocity[i][c] += u[c].reduce_add();
            stretching[i][c] += s[c].reduce_add();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::pair_interaction;
    use crate::testsets::standard;
    use crate::tree::BoundingCube;

    /// Packs `src` as one leaf (300 sources: the last group is padded).
    fn one_leaf(src: &Sources) -> (Tree, PackedSources) {
        let tree = Tree::build(
            &src.position,
            BoundingCube::around(&[&src.position]),
            100_000,
        );
        let sorted = Sources {
            position: tree.gather(&src.position),
            strength: tree.gather(&src.strength),
            sigma: tree.gather(&src.sigma),
        };
        let packed = PackedSources::new(&tree, &sorted);
        (tree, packed)
    }

    #[test]
    fn p2p_matches_the_exact_pair_formula() {
        let mut src = standard(301, 3);
        let tgt = standard(50, 4);
        src.position[7] = tgt.position[3]; // a coincident pair
        let table = KernelTable::new();
        let (_, packed) = one_leaf(&src);
        let shift = [0.0; 3];
        let (mut v, mut s) = (vec![[0.0; 3]; 50], vec![[0.0; 3]; 50]);
        p2p(
            &table,
            &tgt.position,
            &tgt.strength,
            packed.of(0),
            shift,
            &mut v,
            &mut s,
        );
        let (mut num, mut den) = (0.0, 0.0);
        for i in 0..50 {
            let (mut u, mut st) = ([0.0; 3], [0.0; 3]);
            for j in 0..src.len() {
                let (du, ds) = pair_interaction(
                    tgt.position[i],
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
                assert!(v[i][c].is_finite() && s[i][c].is_finite());
                num += (v[i][c] - u[c]).powi(2) + (s[i][c] - st[c]).powi(2);
                den += u[c] * u[c] + st[c] * st[c];
            }
        }
        assert!((num / den).sqrt() < 1e-13, "{}", (num / den).sqrt());
    }

    #[test]
    #[ignore = "measurement: cargo test --release -p vortex-fmm --lib p2p_timing -- --ignored --nocapture"]
    fn p2p_timing() {
        let src = standard(2000, 3);
        let tgt = standard(2000, 4);
        let table = KernelTable::new();
        let (_, packed) = one_leaf(&src);
        let (mut v, mut s) = (vec![[0.0; 3]; 2000], vec![[0.0; 3]; 2000]);
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t0 = std::time::Instant::now();
            p2p(
                &table,
                &tgt.position,
                &tgt.strength,
                packed.of(0),
                [0.0; 3],
                &mut v,
                &mut s,
            );
            best = best.min(t0.elapsed().as_secs_f64());
        }
        eprintln!("p2p: {:.2} ns/pair", best / 4e6 * 1e9);
    }
}
