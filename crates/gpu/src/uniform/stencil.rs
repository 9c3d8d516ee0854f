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
