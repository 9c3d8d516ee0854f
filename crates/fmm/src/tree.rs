//! Adaptive octree over Morton-sorted points.
//!
//! Points are binned into a cube, keyed by 3 x 21-bit Morton codes and sorted; a cell is split
//! while it holds more than `leaf_size` points (up to [`MAX_LEVEL`]). Cells are stored level by
//! level (breadth first), so the upward pass walks the levels backwards and the downward pass
//! forwards; the points of every cell are one contiguous range of the sorted order, which is what
//! the kernels (CPU and GPU) read.
//!
//! Expansion centres are the geometric cell centres, so that the relative position of two cells
//! is an integer multiple of the smaller half-width: M2L rotations repeat and are cached by the
//! driver. The acceptance criterion uses the tighter radius of the points actually in the cell.

use rayon::prelude::*;
use std::ops::Range;

/// Deepest level: 21 bits per coordinate in a 63-bit Morton key.
pub const MAX_LEVEL: u32 = 21;

/// Axis-aligned bounding cube `[lo, lo + width)^3`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoundingCube {
    pub lo: [f64; 3],
    pub width: f64,
}

impl BoundingCube {
    /// Smallest cube (slightly enlarged) containing every point of every set.
    pub fn around(sets: &[&[[f64; 3]]]) -> Self {
        let mut lo = [f64::INFINITY; 3];
        let mut hi = [f64::NEG_INFINITY; 3];
        for set in sets {
            for p in set.iter() {
                for c in 0..3 {
                    lo[c] = lo[c].min(p[c]);
                    hi[c] = hi[c].max(p[c]);
                }
            }
        }
        let mut width = (0..3).map(|c| hi[c] - lo[c]).fold(0.0, f64::max);
        if width.is_nan() || width <= 0.0 {
            width = 1.0; // all points coincide (or one point): any positive width works
        }
        let pad = width * 1e-6;
        let center: [f64; 3] = std::array::from_fn(|c| 0.5 * (lo[c] + hi[c]));
        let w = width + 2.0 * pad;
        Self {
            lo: std::array::from_fn(|c| center[c] - 0.5 * w),
            width: w,
        }
    }

    /// Integer coordinates of a point on the `2^MAX_LEVEL` grid (clamped into the cube).
    #[inline]
    pub fn grid_coords(&self, p: [f64; 3]) -> [u32; 3] {
        let scale = (1u64 << MAX_LEVEL) as f64 / self.width;
        let max = (1u32 << MAX_LEVEL) - 1;
        std::array::from_fn(|c| {
            let g = ((p[c] - self.lo[c]) * scale).floor();
            if g <= 0.0 {
                0
            } else if g >= max as f64 {
                max
            } else {
                g as u32
            }
        })
    }
}

/// Interleaves the low 21 bits of `v` with two zero bits between each.
#[inline]
fn spread_bits(v: u32) -> u64 {
    let mut x = (v as u64) & 0x1f_ffff;
    x = (x | (x << 32)) & 0x1f_0000_0000_ffff;
    x = (x | (x << 16)) & 0x1f_0000_ff00_00ff;
    x = (x | (x << 8)) & 0x100f_00f0_0f00_f00f;
    x = (x | (x << 4)) & 0x10c3_0c30_c30c_30c3;
    x = (x | (x << 2)) & 0x1249_2492_4924_9249;
    x
}

/// Morton key of integer grid coordinates (x in the lowest bit of each triple).
#[inline]
pub fn morton_key(g: [u32; 3]) -> u64 {
    spread_bits(g[0]) | (spread_bits(g[1]) << 1) | (spread_bits(g[2]) << 2)
}

/// One cell of the octree.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub level: u32,
    /// Morton key of the cell's first point, truncated to the cell's level (prefix).
    pub key: u64,
    pub center: [f64; 3],
    pub half_width: f64,
    /// Largest distance from `center` to a point of the cell (<= sqrt(3) half_width).
    pub radius: f64,
    /// Points of the cell in the sorted order.
    pub range: Range<usize>,
    /// Children (non-empty octants), contiguous in the cell array; empty for a leaf.
    pub children: Range<usize>,
    pub parent: Option<usize>,
}

impl Cell {
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }
    pub fn len(&self) -> usize {
        self.range.len()
    }
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
}

/// An octree over one point set.
#[derive(Clone, Debug)]
pub struct Tree {
    pub cube: BoundingCube,
    pub cells: Vec<Cell>,
    /// `levels[l]` is the range of cells on level `l` (cells are stored breadth first).
    pub levels: Vec<Range<usize>>,
    /// `order[k]` is the input index of the `k`-th point in sorted order.
    pub order: Vec<usize>,
    pub leaf_size: usize,
}

/// Cells with at least this many points compute their radius with a parallel reduction.
const PARALLEL_RADIUS_MIN: usize = 1 << 16;

impl Tree {
    /// Builds the tree of `points` inside `cube` (which must contain them; points outside are
    /// clamped to the boundary cells, which keeps the tree valid but loosens the radii).
    pub fn build(points: &[[f64; 3]], cube: BoundingCube, leaf_size: usize) -> Self {
        let leaf_size = leaf_size.max(1);
        let mut keyed: Vec<(u64, usize)> = points
            .par_iter()
            .enumerate()
            .map(|(i, &p)| (morton_key(cube.grid_coords(p)), i))
            .collect();
        keyed.par_sort_unstable();
        let keys: Vec<u64> = keyed.iter().map(|k| k.0).collect();
        let order: Vec<usize> = keyed.iter().map(|k| k.1).collect();

        let mut cells = vec![Cell {
            level: 0,
            key: 0,
            center: std::array::from_fn(|c| cube.lo[c] + 0.5 * cube.width),
            half_width: 0.5 * cube.width,
            radius: 0.0,
            range: 0..points.len(),
            children: 0..0,
            parent: None,
        }];
        #[allow(clippy::single_range_in_vec_init)] // one range per level, level 0 first
        let mut levels = vec![0..1];
        let mut level = 0;
        loop {
            let this = levels[level as usize].clone();
            let start = cells.len();
            for ci in this {
                let cell = &cells[ci];
                if cell.len() <= leaf_size || level >= MAX_LEVEL {
                    if cell.len() > 8 * leaf_size.max(1) {
                        // coincident points: the near field of this leaf is O(count^2)
                        log::warn!(
                            "degenerate near field: a leaf at the deepest level ({MAX_LEVEL}) \
                             holds {} points (leaf_size {leaf_size}); its direct sum costs \
                             {:.2e} pair interactions (coincident or nearly coincident points)",
                            cell.len(),
                            (cell.len() as f64).powi(2)
                        );
                    }
                    continue;
                }
                let shift = 3 * (MAX_LEVEL - level - 1);
                let range = cell.range.clone();
                let (key, hw, center) = (cell.key, cell.half_width * 0.5, cell.center);
                let first = cells.len();
                let mut b = range.start;
                while b < range.end {
                    let octant = (keys[b] >> shift) & 7;
                    let e = b + keys[b..range.end].partition_point(|k| (k >> shift) & 7 == octant);
                    let off = [octant & 1, (octant >> 1) & 1, (octant >> 2) & 1];
                    cells.push(Cell {
                        level: level + 1,
                        key: key | (octant << shift),
                        center: std::array::from_fn(|c| {
                            center[c] + if off[c] == 1 { hw } else { -hw }
                        }),
                        half_width: hw,
                        radius: 0.0,
                        range: b..e,
                        children: 0..0,
                        parent: Some(ci),
                    });
                    b = e;
                }
                let last = cells.len();
                cells[ci].children = first..last;
            }
            if cells.len() == start {
                break;
            }
            levels.push(start..cells.len());
            level += 1;
        }

        // Tight radii: distance from the centre to the farthest point of the cell. The points
        // are gathered into sorted order once, so every cell reads a contiguous range; the
        // large cells near the root (one cell holds all N points) reduce in parallel, the many
        // small ones run one per task.
        let sorted: Vec<[f64; 3]> = order.par_iter().map(|&i| points[i]).collect();
        let radius = |cell: &Cell| -> f64 {
            let c = cell.center;
            let d2 = |p: &[f64; 3]| (0..3).map(|k| (p[k] - c[k]).powi(2)).sum::<f64>();
            let pts = &sorted[cell.range.clone()];
            if pts.len() >= PARALLEL_RADIUS_MIN {
                pts.par_iter().map(d2).reduce(|| 0.0, f64::max).sqrt()
            } else {
                pts.iter().map(d2).fold(0.0, f64::max).sqrt()
            }
        };
        let (big, small): (Vec<usize>, Vec<usize>) =
            (0..cells.len()).partition(|&c| cells[c].len() >= PARALLEL_RADIUS_MIN);
        for c in big {
            cells[c].radius = radius(&cells[c]);
        }
        let small_radii: Vec<(usize, f64)> = small
            .into_par_iter()
            .map(|c| (c, radius(&cells[c])))
            .collect();
        for (c, r) in small_radii {
            cells[c].radius = r;
        }
        Self {
            cube,
            cells,
            levels,
            order,
            leaf_size,
        }
    }

    pub fn depth(&self) -> usize {
        self.levels.len()
    }

    pub fn leaves(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.cells.len()).filter(|&c| self.cells[c].is_leaf())
    }

    /// Gathers `values` (input order) into the tree's sorted order.
    pub fn gather<T: Copy + Send + Sync>(&self, values: &[T]) -> Vec<T> {
        self.order.par_iter().map(|&i| values[i]).collect()
    }

    /// Scatters `sorted` values back to input order.
    pub fn scatter<T: Copy + Default + Send + Sync>(&self, sorted: &[T]) -> Vec<T> {
        assert_eq!(sorted.len(), self.order.len());
        let mut out = vec![T::default(); sorted.len()];
        /// The output's base pointer, shared by the tasks of the parallel scatter.
        struct Out<T>(*mut T);
        // SAFETY: the tasks write disjoint elements (below).
        unsafe impl<T: Send> Sync for Out<T> {}
        let base = Out(out.as_mut_ptr());
        let base = &base;
        self.order
            .par_iter()
            .zip(sorted.par_iter())
            .for_each(|(&i, &v)| {
                // SAFETY: `order` is a permutation of `0..len` (built from the enumerated input
                // points), so every `i` is in bounds and written by exactly one task.
                unsafe { base.0.add(i).write(v) };
            });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random_points(n: usize, seed: u64) -> Vec<[f64; 3]> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
            .collect()
    }

    #[test]
    fn morton_interleaves_bits() {
        assert_eq!(morton_key([1, 0, 0]), 1);
        assert_eq!(morton_key([0, 1, 0]), 2);
        assert_eq!(morton_key([0, 0, 1]), 4);
        assert_eq!(morton_key([3, 0, 0]), 0b1001);
        let m = (1u32 << MAX_LEVEL) - 1;
        assert_eq!(morton_key([m, m, m]), (1u64 << 63) - 1);
    }

    fn check_tree(points: &[[f64; 3]], tree: &Tree) {
        // every point in exactly one leaf, inside the leaf's cube and radius
        let mut count = vec![0; points.len()];
        for leaf in tree.leaves() {
            let cell = &tree.cells[leaf];
            assert!(cell.len() <= tree.leaf_size || cell.level == MAX_LEVEL);
            for &i in &tree.order[cell.range.clone()] {
                count[i] += 1;
                for (x, c) in points[i].iter().zip(&cell.center) {
                    assert!((x - c).abs() <= cell.half_width * (1.0 + 1e-9));
                }
            }
        }
        assert!(count.iter().all(|&c| c == 1));
        // radii are the exact largest centre-to-point distances
        for cell in &tree.cells {
            let r = tree.order[cell.range.clone()]
                .iter()
                .map(|&i| {
                    (0..3)
                        .map(|c| (points[i][c] - cell.center[c]).powi(2))
                        .sum::<f64>()
                })
                .fold(0.0, f64::max)
                .sqrt();
            assert_eq!(cell.radius, r);
        }
        // children partition the parent's range
        for cell in &tree.cells {
            if !cell.is_leaf() {
                let ch = &tree.cells[cell.children.clone()];
                assert_eq!(ch.first().unwrap().range.start, cell.range.start);
                assert_eq!(ch.last().unwrap().range.end, cell.range.end);
                for w in ch.windows(2) {
                    assert_eq!(w[0].range.end, w[1].range.start);
                }
                assert!(cell.radius <= cell.half_width * 3f64.sqrt() * (1.0 + 1e-9));
            }
        }
    }

    #[test]
    fn uniform_tree_partitions_points() {
        // above the parallel-radius threshold, so both radius paths run
        let pts = random_points(PARALLEL_RADIUS_MIN + 5000, 1);
        let tree = Tree::build(&pts, BoundingCube::around(&[&pts]), 32);
        check_tree(&pts, &tree);
        assert!(tree.depth() >= 3);
    }

    #[test]
    fn clustered_tree_adapts() {
        let mut pts = random_points(2000, 2);
        for p in pts.iter_mut().take(1500) {
            for c in p.iter_mut() {
                *c *= 1e-4;
            }
        }
        let tree = Tree::build(&pts, BoundingCube::around(&[&pts]), 16);
        check_tree(&pts, &tree);
        assert!(tree.depth() > 10);
    }

    #[test]
    fn coincident_points_stop_at_max_level() {
        let pts = vec![[0.5; 3]; 100];
        let tree = Tree::build(&pts, BoundingCube::around(&[&pts]), 8);
        check_tree(&pts, &tree);
        assert_eq!(tree.depth() as u32, MAX_LEVEL + 1);
    }

    #[test]
    fn gather_scatter_round_trip() {
        let pts = random_points(300, 3);
        let tree = Tree::build(&pts, BoundingCube::around(&[&pts]), 4);
        let idx: Vec<usize> = (0..300).collect();
        assert_eq!(tree.scatter(&tree.gather(&idx)), idx);
    }
}
