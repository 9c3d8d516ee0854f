//! Partition of the octree over ranks.
//!
//! All ranks build the same coarse **partition tree** from allreduced particle counts: a cell is
//! split while it holds more than `threshold` sources or targets *and* more than `leaf_size` of
//! both. Its leaves ("branch cells") are therefore complete cells of both the global source tree
//! and the global target tree (or absent from one of them when they hold none of its points),
//! and every cell above them is an internal cell of both. The branch cells, in Morton order, are
//! cut into `R` contiguous runs of about equal work (sources + targets), one run per rank; a
//! rank then owns every particle inside its branch cells and builds the subtrees below them
//! exactly as the single-rank [`vortex_fmm::tree::Tree::build`] would (the split rule of a cell depends
//! only on the points inside it).

use crate::comm::{Comm, ReduceOp};
use vortex_fmm::tree::{morton_key, BoundingCube, MAX_LEVEL};

/// Number of Morton keys covered by a cell of `level` (`2^(3 (MAX_LEVEL - level))`).
#[inline]
pub fn key_span(level: u32) -> u64 {
    1u64 << (3 * (MAX_LEVEL - level))
}

/// Centre and half-width of the children of a cell, with exactly the arithmetic of
/// `Tree::build` (so that centres are bitwise equal to the single-rank tree's).
#[inline]
pub fn child_geometry(
    center: [f64; 3],
    half_width: f64,
    child_level: u32,
    child_key: u64,
) -> ([f64; 3], f64) {
    let shift = 3 * (MAX_LEVEL - child_level);
    let octant = (child_key >> shift) & 7;
    let hw = half_width * 0.5;
    let off = [octant & 1, (octant >> 1) & 1, (octant >> 2) & 1];
    (
        std::array::from_fn(|c| center[c] + if off[c] == 1 { hw } else { -hw }),
        hw,
    )
}

/// Root centre and half-width of `cube` as `Tree::build` computes them.
#[inline]
pub fn root_geometry(cube: &BoundingCube) -> ([f64; 3], f64) {
    (
        std::array::from_fn(|c| cube.lo[c] + 0.5 * cube.width),
        0.5 * cube.width,
    )
}

/// Global bounding cube of all sources and targets, bitwise equal to
/// `BoundingCube::around(&[all sources, all targets])` of the single-rank run.
pub fn global_cube<C: Comm + ?Sized>(comm: &C, sets: &[&[[f64; 3]]]) -> BoundingCube {
    let mut b = [
        f64::INFINITY,
        f64::INFINITY,
        f64::INFINITY,
        f64::INFINITY,
        f64::INFINITY,
        f64::INFINITY,
    ];
    for set in sets {
        for p in set.iter() {
            for c in 0..3 {
                b[c] = b[c].min(p[c]);
                b[3 + c] = b[3 + c].min(-p[c]);
            }
        }
    }
    comm.allreduce_f64(&mut b, ReduceOp::Min);
    let lo = [b[0], b[1], b[2]];
    let hi = [-b[3], -b[4], -b[5]];
    BoundingCube::around(&[&[lo, hi]])
}

/// One cell of the partition tree.
#[derive(Clone, Debug, PartialEq)]
pub struct PCell {
    pub level: u32,
    pub key: u64,
    pub center: [f64; 3],
    pub half_width: f64,
    pub n_src: u64,
    pub n_tgt: u64,
    pub parent: Option<usize>,
    /// Children (non-empty octants), contiguous; empty for a branch cell.
    pub children: std::ops::Range<usize>,
    /// Owning rank of a branch cell (`None` for internal cells).
    pub owner: Option<usize>,
}

impl PCell {
    pub fn is_branch(&self) -> bool {
        self.children.is_empty()
    }
    pub fn contains_key(&self, key: u64) -> bool {
        key >= self.key && key - self.key < key_span(self.level)
    }
}

/// The replicated partition tree and the owner of every branch cell.
#[derive(Clone, Debug)]
pub struct Partition {
    pub cube: BoundingCube,
    pub cells: Vec<PCell>,
    /// Branch cells in Morton order.
    pub branches: Vec<usize>,
    pub threshold: u64,
    pub leaf_size: usize,
    pub ranks: usize,
    pub total_src: u64,
    pub total_tgt: u64,
}

fn count_in(keys: &[u64], key: u64, level: u32) -> (usize, usize) {
    let end = key + key_span(level); // <= 2^63: no overflow
    (
        keys.partition_point(|&k| k < key),
        keys.partition_point(|&k| k < end),
    )
}

impl Partition {
    /// Bytes one rank sent while building the partition tree (allreduce of 16 counts per split).
    pub(crate) fn build_bytes(&self, nranks: usize) -> u64 {
        let split = self.cells.iter().filter(|c| !c.is_branch()).count();
        crate::comm::bytes_allreduce(nranks, 16 * split + 2)
    }

    /// Builds the partition from every rank's (sorted) source and target keys. `granularity`
    /// is the target number of branch cells per rank (more: finer balance, larger top tree).
    pub fn build<C: Comm + ?Sized>(
        comm: &C,
        cube: BoundingCube,
        src_keys: &[u64],
        tgt_keys: &[u64],
        leaf_size: usize,
        granularity: usize,
    ) -> Self {
        debug_assert!(src_keys.windows(2).all(|w| w[0] <= w[1]));
        debug_assert!(tgt_keys.windows(2).all(|w| w[0] <= w[1]));
        let ranks = comm.size();
        let leaf_size = leaf_size.max(1);
        let mut tot = [src_keys.len() as f64, tgt_keys.len() as f64];
        comm.allreduce_f64(&mut tot, ReduceOp::Sum);
        let (ns, nt) = (tot[0] as u64, tot[1] as u64);
        let threshold = (ns.max(nt) / (ranks * granularity.max(1)) as u64).max(leaf_size as u64);
        let split = |c: &PCell| {
            c.level < MAX_LEVEL
                && c.n_src.max(c.n_tgt) > threshold
                && c.n_src.min(c.n_tgt) > leaf_size as u64
        };
        let (center, hw) = root_geometry(&cube);
        let mut cells = vec![PCell {
            level: 0,
            key: 0,
            center,
            half_width: hw,
            n_src: ns,
            n_tgt: nt,
            parent: None,
            children: 0..0,
            owner: None,
        }];
        let mut frontier: Vec<usize> = if split(&cells[0]) { vec![0] } else { vec![] };
        while !frontier.is_empty() {
            // counts of the 8 octants of every frontier cell
            let mut counts = vec![0.0f64; frontier.len() * 16];
            for (f, &ci) in frontier.iter().enumerate() {
                let cell = &cells[ci];
                let cl = cell.level + 1;
                for o in 0..8u64 {
                    let ck = cell.key | (o << (3 * (MAX_LEVEL - cl)));
                    let (b, e) = count_in(src_keys, ck, cl);
                    counts[f * 16 + o as usize] = (e - b) as f64;
                    let (b, e) = count_in(tgt_keys, ck, cl);
                    counts[f * 16 + 8 + o as usize] = (e - b) as f64;
                }
            }
            comm.allreduce_f64(&mut counts, ReduceOp::Sum);
            let mut next = Vec::new();
            for (f, &ci) in frontier.iter().enumerate() {
                let (pkey, plevel, pcenter, phw) = (
                    cells[ci].key,
                    cells[ci].level,
                    cells[ci].center,
                    cells[ci].half_width,
                );
                let first = cells.len();
                for o in 0..8u64 {
                    let (s, t) = (
                        counts[f * 16 + o as usize] as u64,
                        counts[f * 16 + 8 + o as usize] as u64,
                    );
                    if s + t == 0 {
                        continue;
                    }
                    let cl = plevel + 1;
                    let ck = pkey | (o << (3 * (MAX_LEVEL - cl)));
                    let (center, half_width) = child_geometry(pcenter, phw, cl, ck);
                    cells.push(PCell {
                        level: cl,
                        key: ck,
                        center,
                        half_width,
                        n_src: s,
                        n_tgt: t,
                        parent: Some(ci),
                        children: 0..0,
                        owner: None,
                    });
                    if split(cells.last().unwrap()) {
                        next.push(cells.len() - 1);
                    }
                }
                cells[ci].children = first..cells.len();
            }
            frontier = next;
        }
        let mut branches: Vec<usize> = (0..cells.len()).filter(|&c| cells[c].is_branch()).collect();
        branches.sort_by_key(|&c| cells[c].key);
        // contiguous runs of equal work along the Morton curve
        let total: f64 = branches
            .iter()
            .map(|&c| (cells[c].n_src + cells[c].n_tgt) as f64)
            .sum();
        let mut acc = 0.0;
        for &c in &branches {
            let w = (cells[c].n_src + cells[c].n_tgt) as f64;
            let mid = acc + 0.5 * w;
            acc += w;
            let r = ((mid / total.max(1.0)) * ranks as f64).floor() as usize;
            cells[c].owner = Some(r.min(ranks - 1));
        }
        Self {
            cube,
            cells,
            branches,
            threshold,
            leaf_size,
            ranks,
            total_src: ns,
            total_tgt: nt,
        }
    }

    /// Index (into `cells`) of the branch cell containing Morton key `key`.
    pub fn branch_of(&self, key: u64) -> usize {
        let i = self
            .branches
            .partition_point(|&c| self.cells[c].key <= key)
            .checked_sub(1)
            .expect("key before the first branch cell");
        let c = self.branches[i];
        debug_assert!(self.cells[c].contains_key(key));
        c
    }

    /// Rank owning the point of Morton key `key`.
    pub fn owner_of(&self, key: u64) -> usize {
        self.cells[self.branch_of(key)].owner.unwrap()
    }

    /// Morton key of a point.
    pub fn key(&self, p: [f64; 3]) -> u64 {
        morton_key(self.cube.grid_coords(p))
    }

    /// Branch cells of `rank`.
    pub fn branches_of(&self, rank: usize) -> impl Iterator<Item = usize> + '_ {
        self.branches
            .iter()
            .copied()
            .filter(move |&c| self.cells[c].owner == Some(rank))
    }

    /// Work (sources + targets) of each rank.
    pub fn work_per_rank(&self) -> Vec<u64> {
        let mut w = vec![0; self.ranks];
        for &c in &self.branches {
            w[self.cells[c].owner.unwrap()] += self.cells[c].n_src + self.cells[c].n_tgt;
        }
        w
    }
}
