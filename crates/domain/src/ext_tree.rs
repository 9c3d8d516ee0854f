//! Building [`vortex_fmm::tree::Tree`]s from a given set of cells of the global octree: a rank's own
//! subtrees, the replicated top tree and the remote cells it received (the locally essential
//! tree). Cells are identified by `(level, key)`; geometry is recomputed top-down with exactly
//! the arithmetic of `Tree::build`, so centres and half-widths are bitwise those of the
//! single-rank tree, and the breadth-first `(level, key)` order is that of `Tree::build`.

use crate::partition::{child_geometry, key_span, root_geometry};
use rayon::prelude::*;
use std::collections::HashMap;
use vortex_fmm::lists::COMPLETE;
use vortex_fmm::tree::{BoundingCube, Cell, Tree, MAX_LEVEL};

/// A cell to put into an assembled tree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeInfo {
    pub level: u32,
    pub key: u64,
    /// Tight radius, when known from elsewhere (`None`: computed from the points present).
    pub radius: Option<f64>,
    /// Largest core radius, when known from elsewhere (`None`: from the points present).
    pub sigma_max: Option<f64>,
    /// [`vortex_fmm::lists::COMPLETE`], `TRUNCATED` or `NO_PARTICLES`.
    pub kind: u8,
}

impl NodeInfo {
    pub fn own(level: u32, key: u64) -> Self {
        Self {
            level,
            key,
            radius: None,
            sigma_max: None,
            kind: COMPLETE,
        }
    }
}

/// An assembled tree with per-cell data the traversal needs.
#[derive(Clone, Debug)]
pub struct Assembled {
    pub tree: Tree,
    pub sigma_max: Vec<f64>,
    pub kind: Vec<u8>,
    pub index: HashMap<(u32, u64), usize>,
}

/// Cells of the subtree that `Tree::build` grows below cell `(level, key)` holding the sorted
/// keys `keys` (all the points of that cell), root included, appended to `out`.
pub fn subtree_cells(
    keys: &[u64],
    level: u32,
    key: u64,
    leaf_size: usize,
    out: &mut Vec<(u32, u64)>,
) {
    out.push((level, key));
    if keys.len() <= leaf_size.max(1) || level >= MAX_LEVEL {
        return;
    }
    let shift = 3 * (MAX_LEVEL - level - 1);
    let mut b = 0;
    while b < keys.len() {
        let octant = (keys[b] >> shift) & 7;
        let e = b + keys[b..].partition_point(|k| (k >> shift) & 7 == octant);
        subtree_cells(
            &keys[b..e],
            level + 1,
            key | (octant << shift),
            leaf_size,
            out,
        );
        b = e;
    }
}

/// Builds the tree of `nodes` (which must be closed under parents and contain the root) over
/// points with sorted Morton keys `keys`: every cell's range is the points present in its key
/// range. Radii and core radii not given in `nodes` are computed from the points present.
pub fn assemble(
    cube: BoundingCube,
    nodes: impl IntoIterator<Item = NodeInfo>,
    keys: &[u64],
    position: &[[f64; 3]],
    sigma: Option<&[f64]>,
    leaf_size: usize,
) -> Assembled {
    let mut nodes: Vec<NodeInfo> = nodes.into_iter().collect();
    nodes.sort_by_key(|n| (n.level, n.key));
    nodes.dedup_by_key(|n| (n.level, n.key));
    assert!(
        !nodes.is_empty() && nodes[0].level == 0,
        "assembled tree without a root"
    );
    let index: HashMap<(u32, u64), usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| ((n.level, n.key), i))
        .collect();
    let mut cells: Vec<Cell> = Vec::with_capacity(nodes.len());
    let mut levels: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let (center, half_width, parent) = if n.level == 0 {
            let (c, h) = root_geometry(&cube);
            (c, h, None)
        } else {
            let pk = n.key & !(key_span(n.level - 1) - 1);
            let p = *index
                .get(&(n.level - 1, pk))
                .unwrap_or_else(|| panic!("cell ({}, {:#x}) without its parent", n.level, n.key));
            let (c, h) = child_geometry(cells[p].center, cells[p].half_width, n.level, n.key);
            (c, h, Some(p))
        };
        let end = n.key + key_span(n.level);
        let range = keys.partition_point(|&k| k < n.key)..keys.partition_point(|&k| k < end);
        if let Some(p) = parent {
            let ch = &mut cells[p].children;
            if ch.start == ch.end {
                *ch = i..i + 1;
            } else {
                assert_eq!(ch.end, i);
                ch.end = i + 1;
            }
        }
        let l = n.level as usize;
        if levels.len() <= l {
            assert_eq!(levels.len(), l, "a level without cells");
            levels.push(i..i);
        }
        levels[l].end = i + 1;
        cells.push(Cell {
            level: n.level,
            key: n.key,
            center,
            half_width,
            radius: 0.0,
            range,
            children: 0..0,
            parent,
        });
    }
    let mut sigma_max = vec![0.0; cells.len()];
    cells
        .par_iter_mut()
        .zip(sigma_max.par_iter_mut())
        .zip(nodes.par_iter())
        .with_min_len(64)
        .for_each(|((cell, sm), n)| {
            cell.radius = match n.radius {
                Some(r) => r,
                None => radius_of(cell.center, &position[cell.range.clone()]),
            };
            *sm = match (n.sigma_max, sigma) {
                (Some(s), _) => s,
                (None, Some(sig)) => max_of(&sig[cell.range.clone()]),
                (None, None) => 0.0,
            };
        });
    let n = cells.len();
    Assembled {
        tree: Tree {
            cube,
            cells,
            levels,
            order: (0..n.min(keys.len())).collect(),
            leaf_size,
        },
        sigma_max,
        kind: nodes.iter().map(|n| n.kind).collect(),
        index,
    }
}

/// Points per task of the parallel reductions (a maximum is exact: any split gives the
/// same value).
const CHUNK: usize = 1 << 15;

/// Squared tight radius about `center`, with the arithmetic of `Tree::build`.
pub fn radius2_of(center: [f64; 3], points: &[[f64; 3]]) -> f64 {
    let seq = |pts: &[[f64; 3]]| {
        let mut r2: f64 = 0.0;
        for p in pts {
            let d2 = (0..3).map(|c| (p[c] - center[c]).powi(2)).sum::<f64>();
            r2 = r2.max(d2);
        }
        r2
    };
    if points.len() <= 2 * CHUNK {
        seq(points)
    } else {
        points.par_chunks(CHUNK).map(seq).reduce(|| 0.0, f64::max)
    }
}

/// Largest value (0 for none).
pub fn max_of(v: &[f64]) -> f64 {
    let seq = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    if v.len() <= 2 * CHUNK {
        seq(v)
    } else {
        v.par_chunks(CHUNK).map(seq).reduce(|| 0.0, f64::max)
    }
}

pub fn radius_of(center: [f64; 3], points: &[[f64; 3]]) -> f64 {
    radius2_of(center, points).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use vortex_fmm::tree::morton_key;

    /// Assembling all cells of `Tree::build` reproduces it exactly.
    #[test]
    fn assemble_reproduces_tree_build() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let pts: Vec<[f64; 3]> = (0..3000)
            .map(|k| {
                let s = if k % 2 == 0 { 1.0 } else { 1e-3 };
                std::array::from_fn(|_| s * rng.gen::<f64>())
            })
            .collect();
        let cube = BoundingCube::around(&[&pts]);
        let t = Tree::build(&pts, cube, 16);
        let sorted: Vec<[f64; 3]> = t.gather(&pts);
        let keys: Vec<u64> = sorted
            .iter()
            .map(|&p| morton_key(cube.grid_coords(p)))
            .collect();
        let mut cells = Vec::new();
        subtree_cells(&keys, 0, 0, 16, &mut cells);
        let a = assemble(
            cube,
            cells.iter().map(|&(l, k)| NodeInfo::own(l, k)),
            &keys,
            &sorted,
            None,
            16,
        );
        assert_eq!(a.tree.cells, t.cells);
        assert_eq!(a.tree.levels, t.levels);
    }
}
