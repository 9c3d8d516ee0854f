//! What another rank's dual traversal may visit, as far as this rank can know it (used by step 2
//! of [`super`]): its target branch cells and the top target cells above them ([`View`],
//! [`view_of`]) and a conservative acceptance test against every target cell size and position
//! inside them, the core-radius gap and the 27 periodic images ([`Mac`]).

use super::*;

/// A target branch cell of another rank, as far as this rank can know it.
pub(super) struct Region {
    pub(super) lo: [f64; 3],
    pub(super) hi: [f64; 3],
    pub(super) level: u32,
    pub(super) hw: f64,
    pub(super) radius: f64,
    pub(super) min_leaf: u32,
    pub(super) max_leaf: u32,
}

/// A target cell of the top tree of another rank (an internal cell).
pub(super) struct TopTarget {
    pub(super) center: [f64; 3],
    pub(super) hw: f64,
    pub(super) radius: f64,
}

/// What this rank knows of another rank's target cells.
pub(super) struct View {
    pub(super) regions: Vec<Region>,
    pub(super) tops: Vec<TopTarget>,
    pub(super) lo: [f64; 3],
    pub(super) hi: [f64; 3],
    pub(super) rmax: f64,
    pub(super) hwmax: f64,
}

pub(super) struct Mac {
    pub(super) theta: f64,
    pub(super) core_cutoff: f64,
    pub(super) period: Option<f64>,
    /// PPM: radii of the criterion are `f * half_width` (see `ListParams`).
    pub(super) sphere: Option<f64>,
}

impl Mac {
    /// Whether the acceptance criterion may fail for a target of radius at most `rt` whose
    /// centre is at least `d` from the source centre (conservative by a relative 1e-9).
    #[inline]
    pub(super) fn may_fail(&self, rt: f64, rs: f64, sigma: f64, d: f64) -> bool {
        let rsum = rt + rs;
        !(rsum < self.theta * d * (1.0 - 1e-9) && d - rsum >= self.core_cutoff * sigma + 1e-9 * d)
    }

    pub(super) fn images(&self) -> impl Iterator<Item = [f64; 3]> + '_ {
        let n = if self.period.is_some() { 27 } else { 1 };
        (0..n).map(move |i| match self.period {
            None => [0.0; 3],
            Some(l) => {
                let s = vortex_fmm::lists::image_shift(i as u8);
                [s[0] as f64 * l, s[1] as f64 * l, s[2] as f64 * l]
            }
        })
    }

    /// Smallest distance from the images of `c` to the box `[lo, hi]`.
    pub(super) fn box_dist(&self, c: [f64; 3], lo: [f64; 3], hi: [f64; 3]) -> f64 {
        self.images()
            .map(|s| {
                (0..3)
                    .map(|k| {
                        let x = c[k] + s[k];
                        let g = (lo[k] - x).max(x - hi[k]).max(0.0);
                        g * g
                    })
                    .sum::<f64>()
            })
            .fold(f64::INFINITY, f64::min)
            .sqrt()
    }

    /// Whether rank `view`'s traversal may need the children (internal `s`) or the particles
    /// (leaf `s`) of source cell `s`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn needs_open(
        &self,
        view: &View,
        center: [f64; 3],
        level: u32,
        hw: f64,
        rs: f64,
        sigma: f64,
        leaf: bool,
    ) -> bool {
        // radius of a cell in the criterion: tight (bounded by sqrt(3) hw), or the PPM sphere
        let rs = self.sphere.map_or(rs, |f| f * hw);
        let rad = |tight: f64, h: f64| self.sphere.map_or(tight, |f| f * h);
        let cube_r = |h: f64| {
            self.sphere
                .map_or(SQRT3 * h * (1.0 + 1e-12), |f| f * h * (1.0 + 1e-12))
        };
        if !leaf {
            for t in &view.tops {
                if t.hw < hw
                    && self.may_fail(
                        rad(t.radius, t.hw),
                        rs,
                        sigma,
                        self.box_dist(center, t.center, t.center),
                    )
                {
                    return true;
                }
            }
        }
        let rmax = self
            .sphere
            .map_or(view.rmax, |f| f * view.hwmax * (1.0 + 1e-12));
        if view.regions.is_empty()
            || !self.may_fail(rmax, rs, sigma, self.box_dist(center, view.lo, view.hi))
        {
            return false;
        }
        for b in &view.regions {
            let bound = cube_r(b.hw).max(rad(b.radius, b.hw));
            if !self.may_fail(bound, rs, sigma, self.box_dist(center, b.lo, b.hi)) {
                continue;
            }
            let mut h = b.hw;
            for l in b.level..=b.max_leaf {
                let relevant = l >= b.min_leaf || (!leaf && l > level);
                if relevant {
                    let (rt, shrink) = if l == b.level {
                        (rad(b.radius, b.hw), b.hw)
                    } else {
                        (cube_r(h), h)
                    };
                    let lo = b.lo.map(|x| x + shrink);
                    let hi = b.hi.map(|x| x - shrink);
                    let lo2: [f64; 3] = std::array::from_fn(|k| lo[k].min(hi[k]));
                    let hi2: [f64; 3] = std::array::from_fn(|k| lo[k].max(hi[k]));
                    if self.may_fail(rt, rs, sigma, self.box_dist(center, lo2, hi2)) {
                        return true;
                    }
                }
                h *= 0.5;
            }
        }
        false
    }
}

/// Whether partition cell `c` is a leaf of the global source tree.
pub(super) fn src_leaf(part: &Partition, c: usize) -> bool {
    let pc = &part.cells[c];
    pc.n_src <= part.leaf_size as u64 || pc.level >= MAX_LEVEL
}

pub(super) fn key_range(keys: &[u64], level: u32, key: u64) -> std::ops::Range<usize> {
    let end = key + key_span(level);
    keys.partition_point(|&k| k < key)..keys.partition_point(|&k| k < end)
}

/// What this rank knows of rank `r`'s target cells: its target branch cells and the top
/// cells above them.
pub(super) fn view_of(part: &Partition, summary: &Summary, r: usize) -> View {
    let mut regions = Vec::new();
    let mut tops: Vec<usize> = Vec::new();
    for b in part.branches_of(r) {
        let pc = &part.cells[b];
        if pc.n_tgt == 0 {
            continue;
        }
        regions.push(Region {
            lo: pc.center.map(|x| x - pc.half_width),
            hi: pc.center.map(|x| x + pc.half_width),
            level: pc.level,
            hw: pc.half_width,
            radius: summary.t_r(b),
            min_leaf: summary.t_min(b),
            max_leaf: summary.t_max(b),
        });
        let mut a = pc.parent;
        while let Some(p) = a {
            tops.push(p);
            a = part.cells[p].parent;
        }
    }
    tops.sort_unstable();
    tops.dedup();
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    let mut rmax: f64 = 0.0;
    let mut hwmax: f64 = 0.0;
    for g in &regions {
        hwmax = hwmax.max(g.hw);
        for k in 0..3 {
            lo[k] = lo[k].min(g.lo[k]);
            hi[k] = hi[k].max(g.hi[k]);
        }
        rmax = rmax.max(SQRT3 * g.hw * (1.0 + 1e-12)).max(g.radius);
    }
    View {
        regions,
        tops: tops
            .into_iter()
            .map(|p| TopTarget {
                center: part.cells[p].center,
                hw: part.cells[p].half_width,
                radius: summary.t_r(p),
            })
            .collect(),
        lo,
        hi,
        rmax,
        hwmax,
    }
}
