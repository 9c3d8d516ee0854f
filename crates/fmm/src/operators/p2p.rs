//! Near-field P2P: direct core-regularized Biot-Savart velocity and stretching between the
//! points of a target leaf and those of its near source leaves (core paper Eq. 5, 7, 9;
//! the pair formula is [`crate::kernel::pair_interaction_core`], the core that of the table).
//!
//! The kernel factors come from [`KernelTable`] (piecewise polynomials of one core's factors,
//! 1e-13 relative to the `erf`/`exp` form), and sources are packed with their inverse core-radius powers so that the
//! inner loop has no division, `erf`, `exp` or branch except the table/singular switch.
//!
//! When the targets are the sources, [`p2p_mutual`] visits each pair of points once and updates
//! both (Newton's third law: the velocity is odd in `d`, and the stretching of each side uses
//! its own strength), so one kernel evaluation serves two interactions; the CPU backend
//! schedules it over pairs of leaves (`backend::cpu`).

use crate::kernel::KernelTable;
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

/// `(K sigma^3, K'/r sigma^5)` of four lanes with `rho2 <` [`KernelTable::rho2_max`].
#[inline(always)]
fn table_lanes(
    table: &KernelTable,
    rho2: f64x4,
    scale: f64x4,
    one: f64x4,
    two: f64x4,
) -> (f64x4, f64x4) {
    let x = rho2 * scale;
    // rho2 < rho2_max: 0 <= x < intervals up to rounding; the last interval is clamped
    let last = table.intervals() - 1;
    let xf = x.floor().min(f64x4::splat(last as f64));
    let t = two * (x - xf) - one;
    table.horner4(interval_indices(xf, last), t)
}

/// The lanes of `xf` (whole numbers in `[0, last]`) as indices.
#[inline(always)]
fn interval_indices(xf: f64x4, last: usize) -> [usize; 4] {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx"))]
    {
        use std::arch::x86_64::*;
        // SAFETY: AVX is enabled at compile time; `f64x4` and `__m256d` are four f64 lanes.
        let i: [i32; 4] = unsafe {
            let v = _mm256_cvttpd_epi32(std::mem::transmute::<f64x4, __m256d>(xf));
            std::mem::transmute::<__m128i, [i32; 4]>(v)
        };
        i.map(|v| (v as usize).min(last))
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "avx")))]
    {
        xf.to_array().map(|v| (v as usize).min(last))
    }
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
    for (i, xi) in tgt_pos.iter().enumerate() {
        let a = tgt_strength[i];
        let xi: [f64x4; 3] = std::array::from_fn(|c| f64x4::splat(xi[c] - shift[c]));
        let ai: [f64x4; 3] = std::array::from_fn(|c| f64x4::splat(a[c]));
        let mut u = [f64x4::splat(0.0); 3];
        let mut s = [f64x4::splat(0.0); 3];
        for g in groups {
            let d: [f64x4; 3] = std::array::from_fn(|c| xi[c] - g.x[c]);
            let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
            let (k, kp) = kernel_lanes(table, g, r2);
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

/// Per-lane accumulators of a source group in [`p2p_mutual`]: velocity then stretching,
/// three components each.
pub type GroupAcc = [f64x4; 6];

/// Kernel factors `(K, K'/r)` of the four lanes of `g` at squared distances `r2`.
#[inline(always)]
fn kernel_lanes(table: &KernelTable, g: &SourceGroup, r2: f64x4) -> (f64x4, f64x4) {
    let rho2_max = f64x4::splat(table.rho2_max());
    let rho2_clamp = f64x4::splat(table.rho2_max() * (1.0 - 1e-15));
    let scale = f64x4::splat(table.scale());
    let three = f64x4::splat(3.0);
    let one = f64x4::splat(1.0);
    let two = f64x4::splat(2.0);
    let rho2 = r2 * g.inv_sigma[0];
    let inside = rho2.simd_lt(rho2_max);
    match inside.to_bitmask() {
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
    }
}

/// Mutual P2P between two leaves whose points are both targets and sources (Newton's third
/// law): the points `a_pos`, `a_strength` of leaf A (targets, scalar) against the packed groups
/// of leaf B, every kernel evaluation serving both directions. Adds (no `1/(4 pi)`) what B
/// induces at A to `velocity`, `stretching`, and what A induces at B to the per-lane
/// accumulators `b_acc` (one per group of B; padded lanes collect garbage and must be
/// ignored). Both leaves must have one common core radius (the kernel is that of the source).
///
/// B is seen from A through the periodic image `shift` (as in [`p2p`]: the sources of B sit
/// at `x_j + shift`), so A is seen from B through `-shift`: `d = (x_i - shift) - x_j`, the
/// difference [`p2p`] forms, and `-d` is the one B's side would form to round-off. Free
/// space and the unshifted image pass `[0.0; 3]` (then `x_i - 0 = x_i` exactly).
///
/// With `same_leaf`, B is A itself (`groups` are A's own groups, in order) and `shift` must be
/// zero: each pair `i < j` is visited once, the pair `i = i` (zero velocity, zero stretching)
/// not at all. A leaf against its own nonzero image is not `same_leaf`: every `(i, j)`,
/// `i = j` included, is then one pair, and A's side gets the image `+shift`, B's (the same
/// points) the image `-shift`.
///
/// For `d = x_i - shift - x_j`: `u_i += K alpha_j x d`, `s_i += K alpha_j x alpha_i + (K'/r)
/// (alpha_i . d) alpha_j x d`, and `u_j -= K alpha_i x d`, `s_j += -K alpha_j x alpha_i +
/// (K'/r) (alpha_j . d) alpha_i x d`.
#[allow(clippy::too_many_arguments)]
pub fn p2p_mutual(
    table: &KernelTable,
    a_pos: &[[f64; 3]],
    a_strength: &[[f64; 3]],
    groups: &[SourceGroup],
    shift: [f64; 3],
    same_leaf: bool,
    velocity: &mut [[f64; 3]],
    stretching: &mut [[f64; 3]],
    b_acc: &mut [GroupAcc],
) {
    debug_assert!(b_acc.len() >= groups.len());
    debug_assert!(!same_leaf || shift == [0.0; 3]);
    let zero = f64x4::splat(0.0);
    let lane_index = f64x4::new([0.0, 1.0, 2.0, 3.0]);
    for (i, xi) in a_pos.iter().enumerate() {
        let a = a_strength[i];
        let xi: [f64x4; 3] = std::array::from_fn(|c| f64x4::splat(xi[c] - shift[c]));
        let ai: [f64x4; 3] = std::array::from_fn(|c| f64x4::splat(a[c]));
        let mut u = [zero; 3];
        let mut s = [zero; 3];
        let g0 = if same_leaf { i / 4 } else { 0 };
        // lanes j <= i of the first group are the pairs already visited (or i itself)
        let first_mask = (lane_index + f64x4::splat((4 * g0) as f64))
            .simd_gt(f64x4::splat(i as f64))
            .select(f64x4::splat(1.0), zero);
        for (gi, (g, acc)) in groups.iter().zip(b_acc.iter_mut()).enumerate().skip(g0) {
            let d: [f64x4; 3] = std::array::from_fn(|c| xi[c] - g.x[c]);
            let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
            let (mut k, mut kp) = kernel_lanes(table, g, r2);
            if same_leaf && gi == g0 {
                k *= first_mask;
                kp *= first_mask;
            }
            let al = &g.alpha;
            let axd = [
                al[1] * d[2] - al[2] * d[1],
                al[2] * d[0] - al[0] * d[2],
                al[0] * d[1] - al[1] * d[0],
            ];
            let ixd = [
                ai[1] * d[2] - ai[2] * d[1],
                ai[2] * d[0] - ai[0] * d[2],
                ai[0] * d[1] - ai[1] * d[0],
            ];
            let axa = [
                al[1] * ai[2] - al[2] * ai[1],
                al[2] * ai[0] - al[0] * ai[2],
                al[0] * ai[1] - al[1] * ai[0],
            ];
            let ad = (ai[0] * d[0] + ai[1] * d[1] + ai[2] * d[2]) * kp;
            let bd = (al[0] * d[0] + al[1] * d[1] + al[2] * d[2]) * kp;
            for c in 0..3 {
                let kaxa = k * axa[c];
                u[c] += k * axd[c];
                s[c] += kaxa + ad * axd[c];
                acc[c] -= k * ixd[c];
                acc[3 + c] += bd * ixd[c] - kaxa;
            }
        }
        for c in 0..3 {
            velocity[i][c] += u[c].reduce_add();
            stretching[i][c] += s[c].reduce_add();
        }
    }
}

/// Adds the per-lane accumulators of [`p2p_mutual`] to the `velocity.len()` points of leaf B.
pub fn add_group_acc(acc: &[GroupAcc], velocity: &mut [[f64; 3]], stretching: &mut [[f64; 3]]) {
    for (j, (v, s)) in velocity.iter_mut().zip(stretching.iter_mut()).enumerate() {
        let g = &acc[j / 4];
        let l = j % 4;
        for c in 0..3 {
            v[c] += g[c].to_array()[l];
            s[c] += g[3 + c].to_array()[l];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{pair_interaction_core, CoreOrder};
    use crate::testsets::standard;
    use crate::tree::BoundingCube;
    use std::f64::consts::PI;

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
    fn p2p_matches_the_exact_pair_formula_of_every_core() {
        let mut src = standard(301, 3);
        let tgt = standard(50, 4);
        src.position[7] = tgt.position[3]; // a coincident pair
        let (_, packed) = one_leaf(&src);
        let shift = [0.0; 3];
        for core in CoreOrder::ALL {
            let table = KernelTable::new(core);
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
                    let (du, ds) = pair_interaction_core(
                        core,
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
            assert!(
                (num / den).sqrt() < 1e-13,
                "{core:?}: {}",
                (num / den).sqrt()
            );
        }
    }

    /// Relative L2 difference of two pairs of (velocity, stretching) arrays.
    fn rel_diff(a: [&[[f64; 3]]; 2], b: [&[[f64; 3]]; 2]) -> f64 {
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for k in 0..2 {
            for (x, y) in a[k].iter().zip(b[k]) {
                for c in 0..3 {
                    num += (x[c] - y[c]).powi(2);
                    den += y[c] * y[c];
                }
            }
        }
        (num / den).sqrt()
    }

    /// `p2p_mutual` of leaf A against leaf B seen through a periodic shift `s` equals the two
    /// one-sided sums (B through `+s` at A, A through `-s` at B) to round-off; so does a leaf
    /// against its own image (`+s` and `-s` at the same points, `i = j` included). The points
    /// are placed so that the shifted distances fall inside the table range, on both sides of
    /// the singular switch, and at one coincidence with the shifted partner.
    #[test]
    fn mutual_p2p_through_a_shift_matches_both_one_sided_sums() {
        for core in CoreOrder::ALL {
            mutual_p2p_through_a_shift(KernelTable::new(core));
        }
    }

    fn mutual_p2p_through_a_shift(table: KernelTable) {
        let sigma = 0.3;
        let with_sigma = |mut s: Sources| {
            s.sigma.iter_mut().for_each(|x| *x = sigma);
            s
        };
        let shift = [2.0 * PI, 0.0, -2.0 * PI];
        // A: 37 points (one padded group); B: 53 points placed about A's images at -s, so that
        // B + s lies among A
        let a = with_sigma(standard(37, 11));
        let mut b = with_sigma(standard(53, 12));
        for x in &mut b.position {
            for c in 0..3 {
                x[c] = 0.3 * x[c] - shift[c];
            }
        }
        let a_at = |i: usize| a.position[i];
        b.position[5] = std::array::from_fn(|c| a_at(2)[c] - shift[c]); // coincident through s
        let (ta, pa) = one_leaf(&a);
        let (tb, pb) = one_leaf(&b);
        let (a_pos, a_str) = (ta.gather(&a.position), ta.gather(&a.strength));
        let (b_pos, b_str) = (tb.gather(&b.position), tb.gather(&b.strength));
        let neg = shift.map(|x| -x);
        let zeros = |n: usize| vec![[0.0; 3]; n];
        // one-sided
        let (mut va, mut sa, mut vb, mut sb) = (zeros(37), zeros(37), zeros(53), zeros(53));
        p2p(&table, &a_pos, &a_str, pb.of(0), shift, &mut va, &mut sa);
        p2p(&table, &b_pos, &b_str, pa.of(0), neg, &mut vb, &mut sb);
        // mutual
        let (mut ma, mut msa, mut mb, mut msb) = (zeros(37), zeros(37), zeros(53), zeros(53));
        let mut acc = vec![[f64x4::splat(0.0); 6]; pb.of(0).len()];
        p2p_mutual(
            &table,
            &a_pos,
            &a_str,
            pb.of(0),
            shift,
            false,
            &mut ma,
            &mut msa,
            &mut acc,
        );
        add_group_acc(&acc, &mut mb, &mut msb);
        let e = rel_diff([&ma, &msa], [&va, &sa]);
        assert!(e < 1e-13, "A side: {e:e}");
        let e = rel_diff([&mb, &msb], [&vb, &sb]);
        assert!(e < 1e-13, "B side: {e:e}");
        // a leaf against its own image: A with A at +s and at -s; a shift short enough for
        // the images to overlap the cores
        let short = [0.9, -0.4, 0.2];
        let mut small = a.clone();
        small.position.iter_mut().flatten().for_each(|x| *x *= 0.2);
        let (ts, ps) = one_leaf(&small);
        let (s_pos, s_str) = (ts.gather(&small.position), ts.gather(&small.strength));
        let (mut v1, mut s1) = (zeros(37), zeros(37));
        p2p(&table, &s_pos, &s_str, ps.of(0), short, &mut v1, &mut s1);
        p2p(
            &table,
            &s_pos,
            &s_str,
            ps.of(0),
            short.map(|x| -x),
            &mut v1,
            &mut s1,
        );
        let (mut v2, mut s2) = (zeros(37), zeros(37));
        let mut acc = vec![[f64x4::splat(0.0); 6]; ps.of(0).len()];
        p2p_mutual(
            &table,
            &s_pos,
            &s_str,
            ps.of(0),
            short,
            false,
            &mut v2,
            &mut s2,
            &mut acc,
        );
        add_group_acc(&acc, &mut v2, &mut s2);
        let e = rel_diff([&v2, &s2], [&v1, &s1]);
        assert!(e < 1e-13, "self image: {e:e}");
        assert!(v1.iter().flatten().all(|x| x.is_finite()));
    }

    #[test]
    #[ignore = "measurement: cargo test --release -p vortex-fmm --lib p2p_timing -- --ignored --nocapture"]
    fn p2p_timing() {
        use crate::operators::tests::thread_cpu_seconds;
        let src = standard(2000, 3);
        let table = KernelTable::default();
        let (tree, packed) = one_leaf(&src);
        let pos = tree.gather(&src.position);
        let str_ = tree.gather(&src.strength);
        let (mut v, mut s) = (vec![[0.0; 3]; 2000], vec![[0.0; 3]; 2000]);
        let mut acc = vec![[f64x4::splat(0.0); 6]; packed.of(0).len()];
        let (mut one, mut mutual) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..5 {
            let t0 = thread_cpu_seconds();
            p2p(&table, &pos, &str_, packed.of(0), [0.0; 3], &mut v, &mut s);
            one = one.min(thread_cpu_seconds() - t0);
            let t0 = thread_cpu_seconds();
            p2p_mutual(
                &table,
                &pos,
                &str_,
                packed.of(0),
                [0.0; 3],
                true,
                &mut v,
                &mut s,
                &mut acc,
            );
            mutual = mutual.min(thread_cpu_seconds() - t0);
        }
        std::hint::black_box((&v, &s, &acc));
        eprintln!(
            "p2p: {:.2} ns per ordered pair one-sided, {:.2} mutual (CPU time)",
            one / 4e6 * 1e9,
            mutual / 4e6 * 1e9
        );
    }
}
