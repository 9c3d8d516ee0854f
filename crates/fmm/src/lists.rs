//! Interaction lists by dual tree traversal with a multipole acceptance criterion (MAC).
//!
//! For every target cell the traversal classifies source cells as
//! * **far** (M2L in the FMM, M2P in the treecode) when they are well separated:
//!   `R_t + R_s < theta * d` (Dehnen's MAC with the tight radii of the points about the
//!   geometric centres) **and** the gap `d - R_t - R_s` is at least `core_cutoff * sigma_max(s)`,
//!   so that the singular far-field kernel equals the Gaussian-cored one to round-off
//!   (`1 - q(6) < 1e-7`);
//! * **near** (P2P) when both are leaves and not well separated;
//! * otherwise the larger cell is split (the target when sizes tie).
//!
//! The traversal is target-centric: each target cell inherits its parent's undecided sources,
//! so target subtrees are processed independently in parallel and every list is built by one
//! thread. A source is an octree cell seen through a periodic image shift (`image`); free-space
//! evaluations use only [`NO_SHIFT`].

use crate::tree::Tree;
use rayon::prelude::*;

/// Index of the unshifted image among the 27 shifts `{-1,0,1}^3`.
pub const NO_SHIFT: u8 = 13;

/// Shift (in box lengths) of image `i` in `{-1,0,1}^3`, `i = 9 (sx+1) + 3 (sy+1) + (sz+1)`.
#[inline]
pub fn image_shift(image: u8) -> [i32; 3] {
    let i = image as i32;
    [i / 9 - 1, (i / 3) % 3 - 1, i % 3 - 1]
}

/// A source cell as seen from a target: the cell and the periodic image it is shifted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceRef {
    pub cell: u32,
    pub image: u8,
}

/// Parameters of the acceptance criterion.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ListParams {
    /// Opening angle: `(R_t + R_s) / d < theta` accepts a far interaction.
    pub theta: f64,
    /// Minimum gap between accepted cells in units of the source cell's largest core radius.
    pub core_cutoff: f64,
    /// Box length for periodic images (`None`: free space).
    pub period: Option<f64>,
    /// Radii of the acceptance criterion: `None` uses the tight radius of the points about the
    /// centre (FMM expansions converge outside it); `Some(f)` uses `f * half_width`, the sphere
    /// of the pseudo-particle method.
    pub sphere_radius_factor: Option<f64>,
}

impl Default for ListParams {
    fn default() -> Self {
        Self {
            theta: 0.5,
            core_cutoff: 6.0,
            period: None,
            sphere_radius_factor: None,
        }
    }
}

/// Compressed lists, one row per cell of the target tree (rows of non-target cells are empty).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CsrList {
    pub offsets: Vec<usize>,
    pub sources: Vec<SourceRef>,
}

impl CsrList {
    pub fn row(&self, target: usize) -> &[SourceRef] {
        &self.sources[self.offsets[target]..self.offsets[target + 1]]
    }
    pub fn len(&self) -> usize {
        self.sources.len()
    }
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }
    /// Target cells with a non-empty row.
    pub fn targets(&self) -> Vec<usize> {
        (0..self.offsets.len() - 1)
            .filter(|&t| self.offsets[t + 1] > self.offsets[t])
            .collect()
    }
    fn from_rows(n_cells: usize, rows: Vec<(usize, Vec<SourceRef>)>) -> Self {
        let mut counts = vec![0usize; n_cells];
        for (t, r) in &rows {
            counts[*t] = r.len();
        }
        let mut offsets = Vec::with_capacity(n_cells + 1);
        offsets.push(0);
        for c in counts {
            offsets.push(offsets.last().unwrap() + c);
        }
        let mut sources = vec![
            SourceRef {
                cell: 0,
                image: NO_SHIFT
            };
            *offsets.last().unwrap()
        ];
        for (t, r) in rows {
            sources[offsets[t]..offsets[t + 1]].copy_from_slice(&r);
        }
        Self { offsets, sources }
    }
}

/// Near (P2P) and far (M2L or M2P) lists of a target tree against a source tree.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InteractionLists {
    pub near: CsrList,
    pub far: CsrList,
}

impl InteractionLists {
    /// Builds the lists. `source_sigma_max[c]` is the largest core radius in source cell `c`.
    pub fn build(
        targets: &Tree,
        sources: &Tree,
        source_sigma_max: &[f64],
        params: &ListParams,
    ) -> Self {
        Self::build_impl(targets, sources, source_sigma_max, params, None).0
    }

    /// As [`InteractionLists::build`] for a source tree some of whose cells are incomplete
    /// copies of cells of a larger tree (the locally essential tree of an MPI rank):
    /// `incomplete[c]` is [`COMPLETE`], [`TRUNCATED`] (an internal cell of the full tree whose
    /// children are absent) or [`NO_PARTICLES`] (a leaf of the full tree whose points are
    /// absent). Both kinds look like leaves here. Returns the lists, and the number of times the
    /// traversal wanted to split a truncated cell or to pair an incomplete one in the near
    /// field, i.e. where the lists differ from those of the full tree (0 when they are equal).
    pub fn build_checked(
        targets: &Tree,
        sources: &Tree,
        source_sigma_max: &[f64],
        params: &ListParams,
        incomplete: &[u8],
    ) -> (Self, usize) {
        assert_eq!(incomplete.len(), sources.cells.len());
        Self::build_impl(targets, sources, source_sigma_max, params, Some(incomplete))
    }

    fn build_impl(
        targets: &Tree,
        sources: &Tree,
        source_sigma_max: &[f64],
        params: &ListParams,
        incomplete: Option<&[u8]>,
    ) -> (Self, usize) {
        let roots: Vec<SourceRef> = match params.period {
            None => vec![SourceRef {
                cell: 0,
                image: NO_SHIFT,
            }],
            Some(_) => (0..27u8)
                .map(|image| SourceRef { cell: 0, image })
                .collect(),
        };
        let ctx = Traversal {
            targets,
            sources,
            sigma_max: source_sigma_max,
            params,
            incomplete,
            violations: std::sync::atomic::AtomicUsize::new(0),
        };
        let mut rows = Vec::new();
        ctx.visit(0, roots, &mut rows);
        let n = targets.cells.len();
        let (mut near, mut far) = (Vec::new(), Vec::new());
        for (t, f, nr) in rows {
            if !f.is_empty() {
                far.push((t, f));
            }
            if !nr.is_empty() {
                near.push((t, nr));
            }
        }
        let lists = Self {
            near: CsrList::from_rows(n, near),
            far: CsrList::from_rows(n, far),
        };
        (lists, ctx.violations.into_inner())
    }
}

/// [`InteractionLists::build_checked`]: a complete cell.
pub const COMPLETE: u8 = 0;
/// [`InteractionLists::build_checked`]: an internal cell whose children are absent.
pub const TRUNCATED: u8 = 1;
/// [`InteractionLists::build_checked`]: a leaf whose points are absent.
pub const NO_PARTICLES: u8 = 2;

type Row = (usize, Vec<SourceRef>, Vec<SourceRef>);

struct Traversal<'a> {
    targets: &'a Tree,
    sources: &'a Tree,
    sigma_max: &'a [f64],
    params: &'a ListParams,
    incomplete: Option<&'a [u8]>,
    violations: std::sync::atomic::AtomicUsize,
}

impl Traversal<'_> {
    fn source_center(&self, s: SourceRef) -> [f64; 3] {
        let c = self.sources.cells[s.cell as usize].center;
        match self.params.period {
            None => c,
            Some(l) => {
                let sh = image_shift(s.image);
                std::array::from_fn(|k| c[k] + sh[k] as f64 * l)
            }
        }
    }

    fn well_separated(&self, t: usize, s: SourceRef) -> bool {
        let tc = &self.targets.cells[t];
        let sc = &self.sources.cells[s.cell as usize];
        let scen = self.source_center(s);
        let d = (0..3)
            .map(|k| (tc.center[k] - scen[k]).powi(2))
            .sum::<f64>()
            .sqrt();
        let rsum = match self.params.sphere_radius_factor {
            None => tc.radius + sc.radius,
            Some(f) => f * (tc.half_width + sc.half_width),
        };
        rsum < self.params.theta * d
            && d - rsum >= self.params.core_cutoff * self.sigma_max[s.cell as usize]
    }

    #[inline]
    fn kind(&self, s: SourceRef) -> u8 {
        self.incomplete.map_or(COMPLETE, |k| k[s.cell as usize])
    }

    #[cold]
    fn violation(&self) {
        self.violations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn visit(&self, t: usize, mut work: Vec<SourceRef>, out: &mut Vec<Row>) {
        let tcell = &self.targets.cells[t];
        let (mut far, mut near, mut inherit) = (Vec::new(), Vec::new(), Vec::new());
        while let Some(s) = work.pop() {
            let scell = &self.sources.cells[s.cell as usize];
            if self.well_separated(t, s) {
                far.push(s);
            } else if tcell.is_leaf() && scell.is_leaf() {
                if self.kind(s) != COMPLETE {
                    self.violation();
                }
                near.push(s);
            } else if !scell.is_leaf() && (tcell.is_leaf() || scell.half_width > tcell.half_width) {
                work.extend(scell.children.clone().map(|c| SourceRef {
                    cell: c as u32,
                    image: s.image,
                }));
            } else {
                if self.kind(s) == TRUNCATED && scell.half_width > tcell.half_width {
                    self.violation(); // the full tree would split it here
                }
                inherit.push(s);
            }
        }
        far.sort_unstable();
        near.sort_unstable();
        if !far.is_empty() || !near.is_empty() {
            out.push((t, far, near));
        }
        if inherit.is_empty() {
            return;
        }
        let children = tcell.children.clone();
        if children.len() == 1 || inherit.len() * tcell.len() < 4096 {
            for c in children {
                self.visit(c, inherit.clone(), out);
            }
        } else {
            let rows: Vec<Vec<Row>> = children
                .into_par_iter()
                .map(|c| {
                    let mut o = Vec::new();
                    self.visit(c, inherit.clone(), &mut o);
                    o
                })
                .collect();
            out.extend(rows.into_iter().flatten());
        }
    }
}

/// Largest core radius of each cell of a source tree, given the core radii in sorted order.
pub fn cell_sigma_max(tree: &Tree, sorted_sigma: &[f64]) -> Vec<f64> {
    tree.cells
        .par_iter()
        .map(|c| {
            sorted_sigma[c.range.clone()]
                .iter()
                .copied()
                .fold(0.0, f64::max)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::BoundingCube;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Every (target point, source point) pair must be covered exactly once, either by a near
    /// pair of leaves or by a far pair of cells, for each image.
    fn check_coverage(pts_t: &[[f64; 3]], pts_s: &[[f64; 3]], params: ListParams) {
        let cube = BoundingCube::around(&[pts_t, pts_s]);
        let tt = Tree::build(pts_t, cube, 8);
        let st = Tree::build(pts_s, cube, 8);
        let sig = vec![0.01; pts_s.len()];
        let lists = InteractionLists::build(&tt, &st, &cell_sigma_max(&st, &sig), &params);
        let images = if params.period.is_some() { 27 } else { 1 };
        let mut cover = vec![0u32; pts_t.len() * pts_s.len() * images];
        let img_index = |i: u8| {
            if params.period.is_some() {
                i as usize
            } else {
                0
            }
        };
        for (list, is_far) in [(&lists.near, false), (&lists.far, true)] {
            for t in 0..tt.cells.len() {
                for s in list.row(t) {
                    if !is_far {
                        assert!(tt.cells[t].is_leaf() && st.cells[s.cell as usize].is_leaf());
                    }
                    for &i in &tt.order[tt.cells[t].range.clone()] {
                        for &j in &st.order[st.cells[s.cell as usize].range.clone()] {
                            cover[(i * pts_s.len() + j) * images + img_index(s.image)] += 1;
                        }
                    }
                }
            }
        }
        assert!(
            cover.iter().all(|&c| c == 1),
            "pairs not covered exactly once"
        );
    }

    #[test]
    fn lists_cover_every_pair_once_uniform() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let pts: Vec<[f64; 3]> = (0..400)
            .map(|_| std::array::from_fn(|_| rng.gen::<f64>()))
            .collect();
        check_coverage(&pts, &pts, ListParams::default());
    }

    #[test]
    fn lists_cover_every_pair_once_clustered_and_separate_targets() {
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let src: Vec<[f64; 3]> = (0..300)
            .map(|k| {
                let s = if k % 3 == 0 { 1.0 } else { 1e-3 };
                std::array::from_fn(|_| s * rng.gen::<f64>())
            })
            .collect();
        let tgt: Vec<[f64; 3]> = (0..200)
            .map(|_| std::array::from_fn(|_| rng.gen::<f64>() * 0.5))
            .collect();
        check_coverage(&tgt, &src, ListParams::default());
    }

    #[test]
    fn periodic_lists_cover_every_image_once() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let pts: Vec<[f64; 3]> = (0..150)
            .map(|_| std::array::from_fn(|_| rng.gen::<f64>()))
            .collect();
        let params = ListParams {
            period: Some(1.0),
            ..Default::default()
        };
        check_coverage(&pts, &pts, params);
    }

    #[test]
    fn image_shift_round_trip() {
        assert_eq!(image_shift(NO_SHIFT), [0, 0, 0]);
        assert_eq!(image_shift(0), [-1, -1, -1]);
        assert_eq!(image_shift(26), [1, 1, 1]);
    }
}
