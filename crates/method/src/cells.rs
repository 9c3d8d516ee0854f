//! A cell list for sums of truncated Gaussians: neighbours within a radius, periodic-aware.
//!
//! Points are binned into cubic cells no smaller than the search radius (counting sort, so the
//! order inside a cell is the input order and every sum below is deterministic). In a periodic box
//! `[-L/2, L/2)^3` the cells tile the box and the search walks across its faces, adding the image
//! shift; a radius larger than the box visits several images, each exactly once.

use crate::core_spreading::zeta;
use rayon::prelude::*;
use vortex_fmm::kernel::CoreOrder;

pub struct CellList {
    lo: [f64; 3],
    cell: f64,
    dims: [usize; 3],
    /// `reach` cells in each direction are searched.
    reach: i64,
    start: Vec<usize>,
    order: Vec<usize>,
    period: Option<f64>,
    /// Positions (wrapped when periodic), in input order.
    points: Vec<[f64; 3]>,
}

fn wrap(x: [f64; 3], l: f64) -> [f64; 3] {
    x.map(|c| {
        let w = c - l * (c / l + 0.5).floor();
        if w >= 0.5 * l {
            w - l
        } else {
            w
        }
    })
}

impl CellList {
    /// Bins `points` for searches of radius `radius` (free space when `period` is `None`,
    /// otherwise the box `[-L/2, L/2)^3`).
    pub fn new(points: &[[f64; 3]], radius: f64, period: Option<f64>) -> Self {
        assert!(radius > 0.0 && radius.is_finite());
        let n = points.len();
        let (lo, cell, dims, reach, pts) = match period {
            Some(l) => {
                let nc = ((l / radius).floor() as usize).clamp(1, 512);
                let cell = l / nc as f64;
                let reach = (radius / cell).ceil() as i64;
                let pts: Vec<[f64; 3]> = points.iter().map(|&x| wrap(x, l)).collect();
                ([-0.5 * l; 3], cell, [nc; 3], reach, pts)
            }
            None => {
                let mut lo = [f64::INFINITY; 3];
                let mut hi = [f64::NEG_INFINITY; 3];
                for p in points {
                    for c in 0..3 {
                        lo[c] = lo[c].min(p[c]);
                        hi[c] = hi[c].max(p[c]);
                    }
                }
                if n == 0 {
                    lo = [0.0; 3];
                    hi = [0.0; 3];
                }
                // cells of at least the radius, and not (much) more cells than points
                let mut cell = radius;
                let count = |cell: f64| -> [usize; 3] {
                    std::array::from_fn(|c| ((hi[c] - lo[c]) / cell).floor() as usize + 1)
                };
                while {
                    let d = count(cell);
                    (d[0] * d[1] * d[2]) as f64 > 8.0 * n as f64 + 64.0
                } {
                    cell *= 1.5;
                }
                (lo, cell, count(cell), 1, points.to_vec())
            }
        };
        let ncells = dims[0] * dims[1] * dims[2];
        let mut lst = CellList {
            lo,
            cell,
            dims,
            reach,
            start: vec![0; ncells + 1],
            order: vec![0; n],
            period,
            points: pts,
        };
        let ids: Vec<usize> = lst.points.iter().map(|&x| lst.cell_of(x)).collect();
        for &c in &ids {
            lst.start[c + 1] += 1;
        }
        for c in 0..ncells {
            lst.start[c + 1] += lst.start[c];
        }
        let mut fill = lst.start.clone();
        for (i, &c) in ids.iter().enumerate() {
            lst.order[fill[c]] = i;
            fill[c] += 1;
        }
        lst
    }

    fn coord(&self, x: [f64; 3]) -> [i64; 3] {
        std::array::from_fn(|c| ((x[c] - self.lo[c]) / self.cell).floor() as i64)
    }

    fn cell_of(&self, x: [f64; 3]) -> usize {
        let k = self.coord(x);
        let k: [usize; 3] =
            std::array::from_fn(|c| k[c].clamp(0, self.dims[c] as i64 - 1) as usize);
        (k[0] * self.dims[1] + k[1]) * self.dims[2] + k[2]
    }

    /// Calls `f(j, d)` with `d = x - x_j` (nearest to `x` among the images searched) for every
    /// point `j` in the cells around `x`; the caller tests the distance.
    #[inline]
    pub fn for_each_candidate(&self, x: [f64; 3], mut f: impl FnMut(usize, [f64; 3])) {
        let x = match self.period {
            Some(l) => wrap(x, l),
            None => x,
        };
        let k = self.coord(x);
        let r = self.reach;
        for ox in -r..=r {
            for oy in -r..=r {
                for oz in -r..=r {
                    let o = [ox, oy, oz];
                    let mut idx = [0usize; 3];
                    let mut shift = [0.0; 3];
                    let mut skip = false;
                    for c in 0..3 {
                        let kk = k[c] + o[c];
                        let d = self.dims[c] as i64;
                        match self.period {
                            Some(l) => {
                                let img = kk.div_euclid(d);
                                idx[c] = kk.rem_euclid(d) as usize;
                                shift[c] = img as f64 * l;
                            }
                            None => {
                                if kk < 0 || kk >= d {
                                    skip = true;
                                }
                                idx[c] = kk.clamp(0, d - 1) as usize;
                            }
                        }
                    }
                    if skip {
                        continue;
                    }
                    let cid = (idx[0] * self.dims[1] + idx[1]) * self.dims[2] + idx[2];
                    for &j in &self.order[self.start[cid]..self.start[cid + 1]] {
                        let p = self.points[j];
                        f(
                            j,
                            [
                                x[0] - p[0] - shift[0],
                                x[1] - p[1] - shift[1],
                                x[2] - p[2] - shift[2],
                            ],
                        );
                    }
                }
            }
        }
    }
}

/// `omega(y_i) = sum_j alpha_j zeta_{sigma_j}(y_i - x_j)` at every target, the Gaussian truncated
/// at `cutoff * sigma_j` (rayon over targets, deterministic): [`core_sum`] of the Gaussian.
pub fn gaussian_sum(
    position: &[[f64; 3]],
    strength: &[[f64; 3]],
    sigma: &[f64],
    targets: &[[f64; 3]],
    cutoff: f64,
    period: Option<f64>,
) -> Vec<[f64; 3]> {
    core_sum(
        CoreOrder::Second,
        position,
        strength,
        sigma,
        targets,
        cutoff,
        period,
    )
}

/// `omega(y_i) = sum_j alpha_j zeta_{sigma_j}(y_i - x_j)` at every target with the core of order
/// `core` (`vortex_fmm::kernel::CoreOrder::zeta`), truncated at `cutoff * sigma_j` (rayon over
/// targets, deterministic).
pub fn core_sum(
    core: CoreOrder,
    position: &[[f64; 3]],
    strength: &[[f64; 3]],
    sigma: &[f64],
    targets: &[[f64; 3]],
    cutoff: f64,
    period: Option<f64>,
) -> Vec<[f64; 3]> {
    if position.is_empty() {
        return vec![[0.0; 3]; targets.len()];
    }
    let smax = sigma.iter().copied().fold(0.0, f64::max);
    let cells = CellList::new(position, cutoff * smax, period);
    targets
        .par_iter()
        .map(|&y| {
            let mut w = [0.0; 3];
            cells.for_each_candidate(y, |j, d| {
                let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
                let s = sigma[j];
                if r2 < cutoff * cutoff * s * s {
                    let z = match core {
                        CoreOrder::Second => zeta(r2, s),
                        _ => core.zeta(r2 / (s * s)) / (s * s * s),
                    };
                    for c in 0..3 {
                        w[c] += strength[j][c] * z;
                    }
                }
            });
            w
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn brute(
        pos: &[[f64; 3]],
        a: &[[f64; 3]],
        s: &[f64],
        y: [f64; 3],
        cutoff: f64,
        period: Option<f64>,
    ) -> [f64; 3] {
        let mut w = [0.0; 3];
        let imgs: Vec<[f64; 3]> = match period {
            None => vec![[0.0; 3]],
            Some(l) => {
                let mut v = vec![];
                for i in -3..=3 {
                    for j in -3..=3 {
                        for k in -3..=3 {
                            v.push([i as f64 * l, j as f64 * l, k as f64 * l]);
                        }
                    }
                }
                v
            }
        };
        for j in 0..pos.len() {
            for sh in &imgs {
                let d: [f64; 3] = std::array::from_fn(|c| y[c] - pos[j][c] - sh[c]);
                let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
                if r2 < cutoff * cutoff * s[j] * s[j] {
                    for c in 0..3 {
                        w[c] += a[j][c] * zeta(r2, s[j]);
                    }
                }
            }
        }
        w
    }

    #[test]
    fn cell_list_sum_equals_brute_force() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let l = 2.0;
        for &(period, smax) in &[(None, 0.2), (Some(l), 0.15), (Some(l), 0.6)] {
            let n = 300;
            let pos: Vec<[f64; 3]> = (0..n)
                .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
                .collect();
            let a: Vec<[f64; 3]> = (0..n)
                .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
                .collect();
            let s: Vec<f64> = (0..n).map(|_| rng.gen_range(0.5 * smax..smax)).collect();
            let ys: Vec<[f64; 3]> = (0..50)
                .map(|_| std::array::from_fn(|_| rng.gen_range(-1.3..1.3)))
                .collect();
            let got = gaussian_sum(&pos, &a, &s, &ys, 4.0, period);
            for (y, g) in ys.iter().zip(&got) {
                let b = brute(&pos, &a, &s, *y, 4.0, period);
                for c in 0..3 {
                    assert!(
                        (g[c] - b[c]).abs() < 1e-10 * (1.0 + b[c].abs()),
                        "{g:?} {b:?}"
                    );
                }
            }
        }
    }
}
