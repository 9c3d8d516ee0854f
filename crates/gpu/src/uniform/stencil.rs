//! The implicit interaction lists of the uniform grid (classical FMM lists, Greengard &
//! Rokhlin 1987): near field = the (at most) 27 neighbours of a leaf; M2L sources of a cell
//! of level `l >= 1` = the children of its parent's neighbours that are not its neighbours
//! (at most 189, offsets in `-3..=3` per axis); at the top level (`l = 0`) every cell that is
//! not a neighbour. Cells outside the grid do not exist (free space). Every pair of leaves is
//! then covered exactly once: by P2P, or by M2L between their ancestors at exactly one level
//! (tested below).
//!
//! The kernels of `kernels/uniform.cu` enumerate the same sets with the same loops
//! ([`m2l_range`], the neighbour test); their rotation records are indexed by the integer
//! offset vector `target - source` (in cells of the level) via [`RotationTable`], one record
//! per direction for every level and scale (a rotation depends on the direction only).
//!
//! Periodic grids (`UniformGrid::periodic`) use the same lists on the infinite lattice of
//! cells, with source coordinates *unwrapped* (not clamped): an unwrapped coordinate `s` of a
//! level of `nl` cells per side is the cell `s mod nl` of the image `floor(s / nl)` of the box
//! ([`wrap_coord`]). The near field of leaf `c` is the 27 pairs (cell, image) of
//! [`neighbours_periodic`] (`n >= 3` keeps them distinct); the M2L sources of
//! [`m2l_sources_periodic`] are, below the top, the children of the parent's 27 (wrapped)
//! neighbours that are not neighbours, and at the top every non-neighbour top cell of the
//! `3 x 3 x 3` box images; the translation uses the unwrapped offset. Then every (target leaf, source leaf, image
//! `T in {-1, 0, 1}^3`) is covered exactly once (tested below); the images `|T|_inf >= 2` are
//! the far images (`vortex_fmm::periodic::FarImages`, added at `UniformGrid::receiver_level`).

use crate::tables::{rot_stride, RotationBuilder};

/// Per-axis range `lo..=hi` of the cells scanned for M2L sources of cell `c` of a level with
/// `nl` cells per side (`top`: level 0, all cells). The cells within one of `c` (per axis, all
/// three axes) are neighbours and skipped by the caller.
pub fn m2l_range(nl: usize, top: bool, c: usize) -> (usize, usize) {
    if top {
        return (0, nl - 1);
    }
    let parent = c / 2;
    let lo = (2 * parent).saturating_sub(2);
    let hi = (2 * parent + 3).min(nl - 1);
    (lo, hi)
}

/// Whether two cells of one level are neighbours (Chebyshev distance <= 1, itself included).
pub fn adjacent(a: [usize; 3], b: [usize; 3]) -> bool {
    (0..3).all(|d| a[d].abs_diff(b[d]) <= 1)
}

/// M2L sources of cell `c` at level `l` (`nl` cells per side), in the kernel's loop order
/// (z outermost, x innermost).
pub fn m2l_sources(nl: usize, top: bool, c: [usize; 3]) -> Vec<[usize; 3]> {
    let r: [(usize, usize); 3] = std::array::from_fn(|d| m2l_range(nl, top, c[d]));
    let mut out = Vec::new();
    for z in r[2].0..=r[2].1 {
        for y in r[1].0..=r[1].1 {
            for x in r[0].0..=r[0].1 {
                let s = [x, y, z];
                if !adjacent(c, s) {
                    out.push(s);
                }
            }
        }
    }
    out
}

/// Periodic image code of the near-field kernel for the shift `t` (box lengths, each in
/// `-1..=1`): `9 (tx + 1) + 3 (ty + 1) + (tz + 1)` (`vortex_fmm::lists::image_shift`); the sources
/// of a run with this code are used at `x + t L`. No shift gives `vortex_fmm::lists::NO_SHIFT`.
pub fn image_code(t: [i64; 3]) -> i32 {
    debug_assert!(t.iter().all(|v| (-1..=1).contains(v)), "{t:?}");
    (9 * (t[0] + 1) + 3 * (t[1] + 1) + (t[2] + 1)) as i32
}

/// Wraps the unwrapped coordinate `s` of a periodic level of `nl` cells per side: the cell
/// `s mod nl` (in `0..nl`) and the image shift `floor(s / nl)` in box lengths.
pub fn wrap_coord(s: i64, nl: usize) -> (usize, i64) {
    let n = nl as i64;
    (s.rem_euclid(n) as usize, s.div_euclid(n))
}

/// [`wrap_coord`] per axis: the wrapped cell and its image shift.
pub fn wrap_cell(s: [i64; 3], nl: usize) -> ([usize; 3], [i64; 3]) {
    let w = s.map(|v| wrap_coord(v, nl));
    (w.map(|x| x.0), w.map(|x| x.1))
}

/// Per-axis range `lo..=hi` of the unwrapped M2L source coordinates of cell `c` of a periodic
/// level with `nl` cells per side (no clamping): below the top (`top == false`) the children
/// of the parent's neighbours, `2 floor(c/2) - 2 ..= 2 floor(c/2) + 3`; at the top (where
/// `nl = m`) the `3 x 3 x 3` box images, `-m ..= 2m - 1`. Cells within one of `c` on all
/// three axes are neighbours and skipped by the caller.
pub fn m2l_range_periodic(nl: usize, top: bool, m: usize, c: usize) -> (i64, i64) {
    debug_assert!(!top || nl == m);
    if top {
        let m = m as i64;
        return (-m, 2 * m - 1);
    }
    let base = 2 * (c / 2) as i64;
    (base - 2, base + 3)
}

/// Whether the unwrapped cell `s` is a neighbour of `c` (Chebyshev distance <= 1).
pub fn adjacent_unwrapped(c: [usize; 3], s: [i64; 3]) -> bool {
    (0..3).all(|d| (c[d] as i64 - s[d]).abs() <= 1)
}

/// M2L sources of cell `c` of a periodic level (`nl` cells per side, `top`: level 0 with
/// `nl = m`), in the kernel's loop order (z outermost, x innermost) over the unwrapped
/// coordinates of [`m2l_range_periodic`], neighbours skipped: `(source cell, image shift,
/// offset)` with the source cell wrapped into the box, its shift in box lengths
/// ([`wrap_cell`]) and the unwrapped offset `v = c - s` in cells of the level (the
/// translation vector: rotation record of `v`, distance `|v| width(l)`).
pub fn m2l_sources_periodic(
    nl: usize,
    top: bool,
    m: usize,
    c: [usize; 3],
) -> Vec<([usize; 3], [i64; 3], [i64; 3])> {
    let r: [(i64, i64); 3] = std::array::from_fn(|d| m2l_range_periodic(nl, top, m, c[d]));
    let mut out = Vec::new();
    for z in r[2].0..=r[2].1 {
        for y in r[1].0..=r[1].1 {
            for x in r[0].0..=r[0].1 {
                let s = [x, y, z];
                if !adjacent_unwrapped(c, s) {
                    let (cell, shift) = wrap_cell(s, nl);
                    let v = std::array::from_fn(|d| c[d] as i64 - s[d]);
                    out.push((cell, shift, v));
                }
            }
        }
    }
    out
}

/// Near field of leaf `c` of a periodic grid of `n >= 3` leaves per side: 27 pairs
/// `(source cell, image shift)`, `dz` outermost, then `dy`, `dx` innermost, each in `-1..=1`:
/// the cell `(c + d) mod n` and the shift `floor((c + d) / n)` per axis (in `-1..=1`; the
/// sources of the cell are used at `x + shift L`, image code [`image_code`]).
pub fn neighbours_periodic(n: usize, c: [usize; 3]) -> Vec<([usize; 3], [i64; 3])> {
    debug_assert!(n >= 3);
    let mut out = Vec::with_capacity(27);
    for dz in -1i64..=1 {
        for dy in -1i64..=1 {
            for dx in -1i64..=1 {
                let d = [dx, dy, dz];
                out.push(wrap_cell(std::array::from_fn(|a| c[a] as i64 + d[a]), n));
            }
        }
    }
    out
}

/// Neighbours of leaf `c` (itself included) in a grid of `n` cells per side, z outermost.
pub fn neighbours(n: usize, c: [usize; 3]) -> Vec<[usize; 3]> {
    let r = |v: usize| (v.saturating_sub(1), (v + 1).min(n - 1));
    let (rx, ry, rz) = (r(c[0]), r(c[1]), r(c[2]));
    let mut out = Vec::new();
    for z in rz.0..=rz.1 {
        for y in ry.0..=ry.1 {
            for x in rx.0..=rx.1 {
                out.push([x, y, z]);
            }
        }
    }
    out
}

/// Rotation records (layout of `crate::tables`) of every integer vector in `[-r, r]^3`,
/// indexed by [`RotationTable::index`]; the zero vector gets a zero record (never used).
#[derive(Clone, Debug)]
pub struct RotationTable {
    pub order: usize,
    pub r: usize,
    /// `(2r + 1)^3` records of `rot_stride(order)` floats.
    pub records: Vec<f32>,
}

impl RotationTable {
    /// Builds the records in f64 (stored f32): `(2r+1)^3 - 1` rotations, `O(p^4)` each; done
    /// once per order and kept by the caller.
    pub fn new(order: usize, r: usize) -> Self {
        use rayon::prelude::*;
        let d = 2 * r + 1;
        let stride = rot_stride(order);
        let mut records = vec![0.0f32; d * d * d * stride];
        records.par_chunks_mut(stride).enumerate().for_each_init(
            || RotationBuilder::new(order),
            |rb, (i, out)| {
                let v = Self::vector(r, i);
                if v != [0, 0, 0] {
                    let mut rec = Vec::with_capacity(stride);
                    rb.push(v.map(|x| x as f64), &mut rec);
                    out.copy_from_slice(&rec);
                }
            },
        );
        RotationTable { order, r, records }
    }

    /// Index of integer vector `v` (each component in `-r..=r`).
    pub fn index(r: usize, v: [i64; 3]) -> usize {
        let d = 2 * r as i64 + 1;
        let s = r as i64;
        ((v[0] + s) + d * ((v[1] + s) + d * (v[2] + s))) as usize
    }

    /// Inverse of [`RotationTable::index`].
    pub fn vector(r: usize, i: usize) -> [i64; 3] {
        let d = 2 * r + 1;
        let s = r as i64;
        [
            (i % d) as i64 - s,
            ((i / d) % d) as i64 - s,
            (i / (d * d)) as i64 - s,
        ]
    }

    /// The record of vector `v`.
    pub fn record(&self, v: [i64; 3]) -> &[f32] {
        let s = rot_stride(self.order);
        let i = Self::index(self.r, v);
        &self.records[i * s..(i + 1) * s]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uniform::grid::{coords, local_index};

    /// For every ordered pair of leaves: how many times it is covered (P2P or M2L at one of the
    /// levels between their ancestors). Must be exactly once.
    fn coverage(m: usize, k: usize) {
        let n = m << k;
        let leaves = n * n * n;
        let mut count = vec![0u8; leaves * leaves];
        for t in 0..leaves {
            let tc = coords(n, t);
            for s in neighbours(n, tc) {
                count[t * leaves + local_index(n, s)] += 1;
            }
        }
        for l in 0..=k {
            let nl = m << l;
            let shift = k - l;
            for tl in 0..nl * nl * nl {
                let tc = coords(nl, tl);
                for sc in m2l_sources(nl, l == 0, tc) {
                    // every leaf pair below (tc, sc)
                    let side = 1usize << shift;
                    for tz in 0..side.pow(3) {
                        let to = coords(side, tz);
                        let tleaf: [usize; 3] = std::array::from_fn(|d| (tc[d] << shift) + to[d]);
                        for sz in 0..side.pow(3) {
                            let so = coords(side, sz);
                            let sleaf: [usize; 3] =
                                std::array::from_fn(|d| (sc[d] << shift) + so[d]);
                            count[local_index(n, tleaf) * leaves + local_index(n, sleaf)] += 1;
                        }
                    }
                }
            }
        }
        for (i, &c) in count.iter().enumerate() {
            assert_eq!(
                c,
                1,
                "m {m} k {k}: leaves {:?} {:?} covered {c} times",
                coords(n, i / leaves),
                coords(n, i % leaves)
            );
        }
    }

    #[test]
    fn every_leaf_pair_is_covered_exactly_once() {
        for (m, k) in [
            (1, 0),
            (1, 1),
            (1, 2),
            (2, 0),
            (2, 1),
            (2, 2),
            (3, 0),
            (3, 1),
            (3, 2),
            (4, 1),
            (5, 1),
        ] {
            coverage(m, k);
        }
    }

    /// Periodic lists: for every (target leaf, source leaf, image `T in {-1, 0, 1}^3`) how
    /// many times it is covered (P2P with shift `T`, or M2L between ancestors whose source
    /// is shifted by `T`). Must be exactly once; no list reaches an image `|T|_inf >= 2`.
    fn coverage_periodic(m: usize, k: usize) {
        let n = m << k;
        let leaves = n * n * n;
        let code = |t: [i64; 3]| image_code(t) as usize;
        let mut count = vec![0u8; leaves * leaves * 27];
        for t in 0..leaves {
            let tc = coords(n, t);
            let nb = neighbours_periodic(n, tc);
            assert_eq!(nb.len(), 27);
            for (s, sh) in nb {
                count[(t * leaves + local_index(n, s)) * 27 + code(sh)] += 1;
            }
        }
        let mut max_v = 0;
        for l in 0..=k {
            let nl = m << l;
            let shift = k - l;
            let side = 1usize << shift;
            for tl in 0..nl * nl * nl {
                let tc = coords(nl, tl);
                for (sc, sh, v) in m2l_sources_periodic(nl, l == 0, m, tc) {
                    assert!(sh.iter().all(|x| (-1..=1).contains(x)), "{sh:?}");
                    for d in 0..3 {
                        assert!(sc[d] < nl);
                        // the offset is the unwrapped one
                        assert_eq!(v[d], tc[d] as i64 - (sc[d] as i64 + sh[d] * nl as i64));
                        max_v = max_v.max(v[d].unsigned_abs() as usize);
                    }
                    for tz in 0..side.pow(3) {
                        let to = coords(side, tz);
                        let tleaf: [usize; 3] = std::array::from_fn(|d| (tc[d] << shift) + to[d]);
                        for sz in 0..side.pow(3) {
                            let so = coords(side, sz);
                            let sleaf: [usize; 3] =
                                std::array::from_fn(|d| (sc[d] << shift) + so[d]);
                            let pair = local_index(n, tleaf) * leaves + local_index(n, sleaf);
                            count[pair * 27 + code(sh)] += 1;
                        }
                    }
                }
            }
        }
        for (i, &c) in count.iter().enumerate() {
            assert_eq!(
                c,
                1,
                "m {m} k {k}: leaves {:?} {:?} image {:?} covered {c} times",
                coords(n, i / 27 / leaves),
                coords(n, i / 27 % leaves),
                vortex_fmm::lists::image_shift((i % 27) as u8)
            );
        }
        let g = crate::uniform::grid::UniformGrid::fixed_periodic(
            &crate::uniform::grid::Extent {
                lo: [0.0; 3],
                side: 1.0,
                sigma_max: 0.0,
            },
            m,
            k,
        )
        .unwrap();
        assert_eq!(g.max_offset(), max_v, "m {m} k {k}");
    }

    #[test]
    fn periodic_lists_cover_every_leaf_pair_and_near_image_exactly_once() {
        for (m, k) in [(1, 2), (1, 3), (3, 0), (3, 1)] {
            coverage_periodic(m, k);
        }
    }

    #[test]
    fn periodic_stencil_sizes_order_and_wrapping() {
        // m = 3: 27 x (9^3 - 27) top-level translations
        let top: usize = (0..27)
            .map(|c| m2l_sources_periodic(3, true, 3, coords(3, c)).len())
            .sum();
        assert_eq!(top, 18954);
        // m = 1: every top-level source is adjacent
        assert!(m2l_sources_periodic(1, true, 1, [0, 0, 0]).is_empty());
        // below the top every cell has 189 sources, like an interior free-space cell
        for c in [[0, 0, 0], [3, 1, 2], [3, 3, 3]] {
            assert_eq!(m2l_sources_periodic(4, false, 1, c).len(), 189);
        }
        // loop order: z outermost, x innermost, over the unwrapped coordinates
        let s = m2l_sources_periodic(8, false, 1, [0, 5, 7]);
        let unwrapped: Vec<[i64; 3]> = s
            .iter()
            .map(|(c, sh, _)| std::array::from_fn(|d| c[d] as i64 + 8 * sh[d]))
            .collect();
        let key = |u: &[i64; 3]| (u[2], u[1], u[0]);
        assert!(unwrapped.windows(2).all(|w| key(&w[0]) < key(&w[1])));
        assert_eq!(unwrapped[0], [-2, 2, 4]);
        // near field of a corner leaf of n = 3: 27 distinct (cell, shift) pairs in order
        let nb = neighbours_periodic(3, [0, 2, 1]);
        assert_eq!(nb[0], ([2, 1, 0], [-1, 0, 0]));
        assert_eq!(nb[13], ([0, 2, 1], [0, 0, 0]));
        assert_eq!(nb[26], ([1, 0, 2], [0, 1, 0]));
        let mut distinct = nb.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 27);
        for (i, t) in (0..27u8).map(|i| (i, vortex_fmm::lists::image_shift(i))) {
            assert_eq!(image_code(t.map(|x| x as i64)), i as i32);
        }
        assert_eq!(image_code([0, 0, 0]), vortex_fmm::lists::NO_SHIFT as i32);
        assert_eq!(wrap_coord(-1, 6), (5, -1));
        assert_eq!(wrap_coord(11, 6), (5, 1));
        assert_eq!(wrap_coord(-7, 3), (2, -3));
    }

    #[test]
    fn stencil_sizes_and_offsets() {
        // an interior cell below the top has 189 M2L sources, offsets within 3 cells
        let c = [6, 7, 5];
        let s = m2l_sources(16, false, c);
        assert_eq!(s.len(), 189);
        for x in &s {
            assert!((0..3).all(|d| x[d].abs_diff(c[d]) <= 3));
        }
        assert_eq!(neighbours(16, c).len(), 27);
        assert_eq!(neighbours(16, [0, 0, 15]).len(), 8);
        for i in [0, 5, 100, 342] {
            assert_eq!(RotationTable::index(3, RotationTable::vector(3, i)), i);
        }
    }

    #[test]
    fn rotation_table_matches_the_builder() {
        let t = RotationTable::new(4, 3);
        let mut want = Vec::new();
        RotationBuilder::new(4).push([2.0, -3.0, 1.0], &mut want);
        assert_eq!(t.record([2, -3, 1]), &want[..]);
        assert!(t.record([0, 0, 0]).iter().all(|&x| x == 0.0));
    }
}
