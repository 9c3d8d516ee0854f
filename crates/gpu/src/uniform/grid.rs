//! Geometry of the uniform grid: bounding cube, the number of leaf cells per side
//! `n = m 2^k`, cell widths, centres and the numbering of cells across levels.
//!
//! Level `l = 0..=k` has `n_l = m 2^l` cells per side of width `w_l = side / n_l` (length
//! units of the input positions); level `k` holds the leaves. Cell `(i, j, k)` of level `l` has
//! the local index `i + n_l (j + n_l k)` (x fastest: the three cells `i-1..=i+1` of one row are
//! contiguous in the sorted particle array, so the 27 neighbours of a leaf are 9 runs) and the
//! global index `level_offset(l) + local` (levels stored top first).
//!
//! The leaf width is at least `core_cutoff * sigma_max`: a particle and any source outside the
//! 27 neighbours of its leaf are at least one leaf width apart, so the singular far-field
//! kernel equals the Gaussian-cored one there up to `1 - q(core_cutoff)` (docs/CONVENTIONS.md).
//!
//! A periodic grid ([`UniformGrid::periodic`]) covers the box `[-L/2, L/2)^3` of
//! `vortex_fmm::periodic::Periodic` exactly (`lo = -L/2`, `side = L`, no padding; positions are
//! wrapped before the f32 cast and a cell index that rounds to `n` is clamped to `n - 1`).
//! Its leaves per side are `n = m 2^k` with `m` in `{1, 3}` and `n >= 3`: the top level's
//! M2L spans the `3 x 3 x 3` images of the box (`m^3 (27 m^3 - 27)` translations: `m`
//! must stay tiny), and three leaves per side keep the 27 near-field images of a leaf
//! distinct.

use crate::device::{GpuError, GpuResult};
use rayon::prelude::*;
use vortex_fmm::periodic::Periodic;

/// Largest number of top-level cells per side (`m`): at the top every pair of non-adjacent
/// cells interacts by M2L, so `m^3` cells cost `O(m^6)` translations.
pub const MAX_TOP: usize = 7;
/// Largest number of levels below the top.
pub const MAX_LEVELS: usize = 10;

/// Bounding cube of the positions, found by a parallel reduction: lower corner and side.
/// The side is enlarged by a relative 1e-6 (and never zero) so that every point lies strictly
/// inside. Also returns the largest core radius; `None` when a value is not finite or a core
/// radius is not positive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Extent {
    pub lo: [f64; 3],
    pub side: f64,
    pub sigma_max: f64,
}

impl Extent {
    /// Parallel reduction over the sources (the only N-sized host work besides the f32 packing).
    pub fn of(position: &[[f64; 3]], sigma: &[f64]) -> Option<Extent> {
        let (lo, hi, smax, ok) = bounds(position, sigma);
        if !ok || position.is_empty() {
            return None;
        }
        Some(Extent::from_bounds(lo, hi, smax))
    }

    /// The periodic box `[-L/2, L/2)^3` itself (no padding) with the largest core radius.
    pub fn periodic(periodic: &Periodic, sigma_max: f64) -> Extent {
        let l = periodic.box_length;
        Extent {
            lo: [-0.5 * l; 3],
            side: l,
            sigma_max,
        }
    }

    /// The cube of [`Extent::of`] from the component-wise bounds of the positions and the
    /// largest core radius (so ranks that agree on these by min / max reductions get bitwise
    /// the single-rank cube).
    pub fn from_bounds(lo: [f64; 3], hi: [f64; 3], smax: f64) -> Extent {
        let width = (0..3).map(|c| hi[c] - lo[c]).fold(0.0, f64::max);
        let side = if width > 0.0 {
            width * (1.0 + 1e-6)
        } else {
            smax
        };
        let mid: [f64; 3] = std::array::from_fn(|c| 0.5 * (lo[c] + hi[c]));
        Extent {
            lo: std::array::from_fn(|c| mid[c] - 0.5 * side),
            side,
            sigma_max: smax,
        }
    }
}

/// Component-wise bounds of the positions, the largest core radius, and whether every value
/// is finite and every core radius positive (parallel reduction; infinite bounds when empty).
pub fn bounds(position: &[[f64; 3]], sigma: &[f64]) -> ([f64; 3], [f64; 3], f64, bool) {
    type Acc = ([f64; 3], [f64; 3], f64, bool);
    let id = || -> Acc { ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3], 0.0, true) };
    position
        .par_iter()
        .zip(sigma.par_iter())
        .fold(id, |(mut lo, mut hi, s, ok), (x, &sg)| {
            for c in 0..3 {
                lo[c] = lo[c].min(x[c]);
                hi[c] = hi[c].max(x[c]);
            }
            let good = x.iter().all(|v| v.is_finite()) && sg.is_finite() && sg > 0.0;
            (lo, hi, s.max(sg), ok && good)
        })
        .reduce(id, |a, b| {
            (
                std::array::from_fn(|c| a.0[c].min(b.0[c])),
                std::array::from_fn(|c| a.1[c].max(b.1[c])),
                a.2.max(b.2),
                a.3 && b.3,
            )
        })
}

/// The uniform grid of one evaluation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UniformGrid {
    /// Cells per side at the top level.
    pub m: usize,
    /// Levels below the top (the leaves are level `k`).
    pub k: usize,
    /// Lower corner of the cube.
    pub lo: [f64; 3],
    /// Side of the cube.
    pub side: f64,
    /// Periodic in all three directions (the cube is the box of `vortex_fmm::periodic::Periodic`):
    /// the near field and the M2L lists wrap around ([`super::stencil`]).
    pub periodic: bool,
}

impl UniformGrid {
    /// Chooses `n = m 2^k` (`m <= MAX_TOP`): the largest leaf count per side whose width is at
    /// least `core_cutoff * sigma_max` (gap condition), and among those allowed the one nearest
    /// (in log) to `(N / leaf_target)^(1/3)`; ties go to the larger `n`, equal `n` to the
    /// smaller `m` (more levels, fewer top-level translations).
    pub fn choose(ext: &Extent, np: usize, core_cutoff: f64, leaf_target: f64) -> UniformGrid {
        let allowed = |m: usize, k: usize| m <= MAX_TOP && k <= MAX_LEVELS;
        let (m, k) = best_grid(ext, np, core_cutoff, leaf_target, allowed, true)
            .expect("n = 1 is always allowed");
        UniformGrid::fixed(ext, m, k)
    }

    /// The grid with `m` top cells per side and `k` levels below, over the extent's cube.
    pub fn fixed(ext: &Extent, m: usize, k: usize) -> UniformGrid {
        assert!(m >= 1 && k <= MAX_LEVELS);
        UniformGrid {
            m,
            k,
            lo: ext.lo,
            side: ext.side,
            periodic: false,
        }
    }

    /// The periodic grid with `m` top cells per side and `k` levels below over the box `ext`
    /// ([`Extent::periodic`]); an error unless `m` is 1 or 3, `n = m 2^k >= 3` and
    /// `k <= MAX_LEVELS` (the leaf width is not checked, as for [`UniformGrid::fixed`]).
    pub fn fixed_periodic(ext: &Extent, m: usize, k: usize) -> GpuResult<UniformGrid> {
        if !periodic_allowed(m, k) {
            return Err(GpuError::Unsupported(format!(
                "periodic uniform grid (m, k) = ({m}, {k}): need m = 1 or 3, \
                 n = m 2^k >= 3 leaves per side and k <= {MAX_LEVELS}"
            )));
        }
        Ok(UniformGrid {
            m,
            k,
            lo: ext.lo,
            side: ext.side,
            periodic: true,
        })
    }

    /// Chooses a periodic grid over the box `ext` ([`Extent::periodic`]) like
    /// [`UniformGrid::choose`], among `n = m 2^k` with `m` in `{1, 3}` and `n >= 3`: the leaf
    /// width `L / n` at least `core_cutoff * sigma_max`, `n` nearest (in log) to
    /// `(N / leaf_target)^(1/3)`, ties to the larger `n`. An error when even `n = 3` is too
    /// fine (the box is only a few core radii wide).
    pub fn choose_periodic(
        ext: &Extent,
        np: usize,
        core_cutoff: f64,
        leaf_target: f64,
    ) -> GpuResult<UniformGrid> {
        match best_grid(ext, np, core_cutoff, leaf_target, periodic_allowed, false) {
            Some((m, k)) => UniformGrid::fixed_periodic(ext, m, k),
            None => Err(GpuError::Unsupported(format!(
                "periodic box of length {} too small for the cores: a leaf (at least 3 per \
                 side, width {:.6e}) must be at least core_cutoff {} x the largest core radius \
                 {:.6e} = {:.6e} wide (the box is only a few core radii wide: use smaller \
                 cores, a larger box or a smaller core_cutoff)",
                ext.side,
                ext.side / 3.0,
                core_cutoff,
                ext.sigma_max,
                core_cutoff * ext.sigma_max
            ))),
        }
    }

    /// Leaf cells per side.
    pub fn n(&self) -> usize {
        self.m << self.k
    }
    /// Cells per side at level `l`.
    pub fn n_at(&self, l: usize) -> usize {
        self.m << l
    }
    /// Cell width at level `l`.
    pub fn width(&self, l: usize) -> f64 {
        self.side / self.n_at(l) as f64
    }
    /// Leaf width.
    pub fn leaf_width(&self) -> f64 {
        self.width(self.k)
    }
    /// Number of leaves.
    pub fn leaves(&self) -> usize {
        self.n().pow(3)
    }
    /// Global index of the first cell of level `l` (`l = k + 1` gives the total).
    pub fn level_offset(&self, l: usize) -> usize {
        (0..l).map(|q| self.n_at(q).pow(3)).sum()
    }
    /// Cells of all levels.
    pub fn total_cells(&self) -> usize {
        self.level_offset(self.k + 1)
    }
    /// Centre of cell `c` of level `l`.
    pub fn center(&self, l: usize, c: [usize; 3]) -> [f64; 3] {
        let w = self.width(l);
        std::array::from_fn(|d| self.lo[d] + (c[d] as f64 + 0.5) * w)
    }
    /// Largest number of cells away (per axis) of an M2L source: 3 below the top (children of
    /// the parent's neighbours), `m - 1` at the top; periodic: `2m - 1` at the top (the
    /// unwrapped sources span the `3 x 3 x 3` box images, `-m..2m` per axis).
    pub fn max_offset(&self) -> usize {
        if self.periodic {
            3.max(2 * self.m - 1)
        } else {
            3.max(self.m.saturating_sub(1))
        }
    }
    /// The level whose cells receive the far periodic images (`vortex_fmm::periodic::FarImages`):
    /// the coarsest with at least 3 cells per side (`m = 1`: level 2, `m = 3`: level 0); the
    /// ordinary L2L carries their locals down to the leaves.
    pub fn receiver_level(&self) -> usize {
        (0..=self.k).find(|&l| self.n_at(l) >= 3).unwrap_or(self.k)
    }
    /// The f32 parameters of the cell-index kernel: lower corner and `1 / leaf width`.
    pub fn f32_params(&self) -> ([f32; 3], f32) {
        (self.lo.map(|x| x as f32), (1.0 / self.leaf_width()) as f32)
    }
}

/// The `(m, k)` among `allowed` (`m <= MAX_TOP`, `k <= MAX_LEVELS`) whose leaf width is at
/// least `core_cutoff * sigma_max` (`n = 1` always passes when `one_ok`) and whose `n = m 2^k`
/// is nearest (in log) to `(N / leaf_target)^(1/3)`; ties go to the larger `n`, equal `n` to
/// the smaller `m` (more levels, fewer top-level translations). `None` when none passes.
fn best_grid(
    ext: &Extent,
    np: usize,
    core_cutoff: f64,
    leaf_target: f64,
    allowed: impl Fn(usize, usize) -> bool,
    one_ok: bool,
) -> Option<(usize, usize)> {
    let n_geom = if core_cutoff * ext.sigma_max > 0.0 {
        (ext.side / (core_cutoff * ext.sigma_max)).floor()
    } else {
        f64::INFINITY
    };
    let n_want = (np as f64 / leaf_target.max(1.0)).cbrt().max(1.0);
    let mut best: Option<(f64, usize, usize, usize)> = None; // (score, n, m, k)
    for k in 0..=MAX_LEVELS {
        for m in 1..=MAX_TOP {
            let n = m << k;
            if !allowed(m, k) || (n as f64 > n_geom && !(one_ok && n == 1)) {
                continue;
            }
            let score = ((n as f64) / n_want).ln().abs();
            let better = match best {
                None => true,
                Some((s, bn, bm, _)) => {
                    score < s - 1e-12
                        || ((score - s).abs() <= 1e-12 && n > bn)
                        || (n == bn && m < bm)
                }
            };
            if better {
                best = Some((score, n, m, k));
            }
        }
    }
    best.map(|(_, _, m, k)| (m, k))
}

/// Whether `(m, k)` is a periodic grid: `m` in `{1, 3}`, `n = m 2^k >= 3`, `k <= MAX_LEVELS`.
pub fn periodic_allowed(m: usize, k: usize) -> bool {
    (m == 1 || m == 3) && k <= MAX_LEVELS && (m << k) >= 3
}

/// Local index of cell `c` in a level of `nl` cells per side.
pub fn local_index(nl: usize, c: [usize; 3]) -> usize {
    c[0] + nl * (c[1] + nl * c[2])
}

/// Coordinates of local index `i` in a level of `nl` cells per side.
pub fn coords(nl: usize, i: usize) -> [usize; 3] {
    [i % nl, (i / nl) % nl, i / (nl * nl)]
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // index loops over coordinates
mod tests {
    use super::*;

    fn ext(side: f64, sigma: f64) -> Extent {
        Extent {
            lo: [0.0; 3],
            side,
            sigma_max: sigma,
        }
    }

    #[test]
    fn ten_million_standard_set_gets_48_cells() {
        // sigma = mean spacing h = 2 pi / N^(1/3); side 2 pi: n <= 2 pi / (4.45 h) = 48.4
        let n = 1e7;
        let h = 2.0 * std::f64::consts::PI / f64::cbrt(n);
        let g = UniformGrid::choose(&ext(2.0 * std::f64::consts::PI, h), n as usize, 4.45, 100.0);
        assert_eq!((g.n(), g.m, g.k), (48, 3, 4));
        // cutoff 5 does not allow 48 (w >= 5 h): the next allowed is 40 = 5 * 8
        let g = UniformGrid::choose(&ext(2.0 * std::f64::consts::PI, h), n as usize, 5.0, 100.0);
        assert_eq!(g.n(), 40);
        assert!(g.leaf_width() >= 5.0 * h);
    }

    #[test]
    fn gap_condition_and_numbering() {
        for &(side, sigma, np) in &[(1.0, 0.01, 100_000), (3.0, 0.5, 1000), (1.0, 2.0, 10)] {
            let e = ext(side, sigma);
            let g = UniformGrid::choose(&e, np, 4.5, 100.0);
            assert!(g.n() == 1 || g.leaf_width() >= 4.5 * sigma, "{g:?}");
            assert!(g.m <= MAX_TOP);
            assert_eq!(
                g.total_cells(),
                (0..=g.k).map(|l| g.n_at(l).pow(3)).sum::<usize>()
            );
            let nl = g.n();
            for i in [0, 1, nl * nl - 1, g.leaves() - 1] {
                assert_eq!(local_index(nl, coords(nl, i)), i);
            }
        }
    }

    #[test]
    fn periodic_grid_choice_levels_and_errors() {
        let per = Periodic::default();
        let l = per.box_length;
        // the standard set: 48 = 3 x 16 leaves as in free space; cutoff 5 allows n <= 43, of
        // which m in {1, 3} gives 32 (40 = 5 x 8 is not periodic)
        let n = 1e7;
        let h = l / f64::cbrt(n);
        let e = Extent::periodic(&per, h);
        assert_eq!((e.lo, e.side), ([-0.5 * l; 3], l));
        let g = UniformGrid::choose_periodic(&e, n as usize, 4.45, 100.0).unwrap();
        assert_eq!((g.n(), g.m, g.k, g.periodic), (48, 3, 4, true));
        assert_eq!((g.lo, g.side), (e.lo, l));
        let g = UniformGrid::choose_periodic(&e, n as usize, 5.0, 100.0).unwrap();
        assert_eq!((g.n(), g.m), (32, 1));
        // few particles: never fewer than 3 leaves per side
        let g = UniformGrid::choose_periodic(&Extent::periodic(&per, 0.01), 10, 4.4, 100.0);
        assert_eq!(g.unwrap().n(), 3);
        for &(np, sigma) in &[(100_000, 0.01), (5000, 0.3), (300_000, 0.05)] {
            let g = UniformGrid::choose_periodic(&Extent::periodic(&per, sigma), np, 4.4, 100.0)
                .unwrap();
            assert!(
                g.leaf_width() >= 4.4 * sigma && periodic_allowed(g.m, g.k),
                "{g:?}"
            );
        }
        // a box of a few core radii: an error naming the box, the core radius, the cutoff
        let e = UniformGrid::choose_periodic(&Extent::periodic(&per, 0.5), 2000, 4.4, 100.0)
            .unwrap_err()
            .to_string();
        for w in [
            "box of length 6.28",
            "core radius",
            "5.000000e-1",
            "core_cutoff 4.4",
        ] {
            assert!(e.contains(w), "{w}: {e}");
        }
        for (m, k) in [(1, 1), (2, 2), (5, 0), (3, MAX_LEVELS + 1)] {
            assert!(UniformGrid::fixed_periodic(&Extent::periodic(&per, 0.1), m, k).is_err());
        }
        // far-image receivers: the coarsest level with 3 cells per side or more
        for (m, k, rl, off) in [(1, 2, 2, 3), (1, 5, 2, 3), (3, 0, 0, 5), (3, 3, 0, 5)] {
            let g = UniformGrid::fixed_periodic(&Extent::periodic(&per, 0.1), m, k).unwrap();
            assert_eq!(
                (g.receiver_level(), g.max_offset()),
                (rl, off),
                "m {m} k {k}"
            );
        }
        assert!(!UniformGrid::fixed(&Extent::periodic(&per, 0.1), 3, 1).periodic);
    }

    #[test]
    fn extent_contains_points_and_rejects_bad_input() {
        let s = vortex_fmm::testsets::standard(1000, 2);
        let e = Extent::of(&s.position, &s.sigma).unwrap();
        for x in &s.position {
            for c in 0..3 {
                assert!(x[c] > e.lo[c] && x[c] < e.lo[c] + e.side);
            }
        }
        assert_eq!(e.sigma_max, s.max_sigma());
        let mut bad = s.clone();
        bad.sigma[3] = 0.0;
        assert!(Extent::of(&bad.position, &bad.sigma).is_none());
        bad.sigma[3] = 1.0;
        bad.position[5][1] = f64::NAN;
        assert!(Extent::of(&bad.position, &bad.sigma).is_none());
    }
}
