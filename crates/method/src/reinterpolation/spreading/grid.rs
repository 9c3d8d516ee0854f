//! Spreading of particle values onto the fine periodic grid with the ES kernel (host, f64).
//!
//! `b_l = sum_p v_p phi(x_l - x_p)` over the periodic images, `x_l = origin + h_f l`, `l` in
//! `[0, m)^3`, stored `(lx m + ly) m + lz` (z fastest, the layout of
//! `vortex_spectral::fft::Fft3`). Every particle adds its `w^3` footprint
//! ([`super::kernel::EsKernel::weights`] per axis).
//!
//! Parallel and deterministic: the particles are bucketed by the first x plane of their
//! footprint into an even number of chunks of at least `w` planes; the even chunks run in
//! parallel (their footprints, at most `w - 1` planes past their end, never reach the next
//! even chunk), then the odd ones, and within a chunk the particles go in index order, so the
//! sums are the same for any number of threads.

use super::kernel::{EsKernel, MAX_WIDTH};
use rayon::prelude::*;

/// The fine grid: `m^3` points of spacing `h = L / m` from `origin` (every axis).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FineGrid {
    pub m: usize,
    pub origin: f64,
    pub h: f64,
}

impl FineGrid {
    /// The grid coordinate of `x` along one axis, wrapped into `[0, m)`.
    #[inline]
    pub fn coordinate(&self, x: f64) -> f64 {
        let m = self.m as f64;
        let u = ((x - self.origin) / self.h).rem_euclid(m);
        if u >= m {
            0.0 // rem_euclid of a value just below a multiple of m can round up to m
        } else {
            u
        }
    }
}

/// The particles of one spreading, bucketed by chunk of x planes.
pub struct Buckets {
    /// Chunk boundaries in x planes (`chunks + 1` values, `0` to `m`).
    bounds: Vec<usize>,
    /// Particle indices, chunk after chunk, ascending within a chunk.
    order: Vec<usize>,
    /// `order[starts[c]..starts[c + 1]]` are chunk `c`'s.
    starts: Vec<usize>,
}

/// A raw pointer to the grid shared by the tasks of one colour (disjoint planes each).
#[derive(Clone, Copy)]
struct GridPtr(*mut f64);
// SAFETY: tasks of one colour write disjoint x planes of the grid (module documentation), and
// the grid outlives them (the scope of `spread`).
unsafe impl Send for GridPtr {}
// SAFETY: as above.
unsafe impl Sync for GridPtr {}

impl Buckets {
    /// Buckets the particles `subset` (indices into `position`) for `kernel` on `grid`.
    pub fn new(
        kernel: &EsKernel,
        grid: &FineGrid,
        position: &[[f64; 3]],
        subset: &[usize],
    ) -> Self {
        let (m, w) = (grid.m, kernel.width);
        // an even number of chunks of at least w planes (one chunk when the grid is narrow)
        let mut chunks = (m / w).min(64);
        chunks -= chunks % 2;
        let chunks = chunks.max(1);
        let bounds: Vec<usize> = (0..=chunks).map(|c| c * m / chunks).collect();
        let mut chunk_of_plane = vec![0usize; m];
        for c in 0..chunks {
            chunk_of_plane[bounds[c]..bounds[c + 1]].fill(c);
        }
        let half = 0.5 * w as f64;
        let chunk: Vec<usize> = subset
            .iter()
            .map(|&p| {
                let u = grid.coordinate(position[p][0]);
                let l0 = ((u - half).ceil() as i64).rem_euclid(m as i64) as usize;
                chunk_of_plane[l0]
            })
            .collect();
        let mut starts = vec![0usize; chunks + 1];
        for &c in &chunk {
            starts[c + 1] += 1;
        }
        for c in 0..chunks {
            starts[c + 1] += starts[c];
        }
        let mut fill = starts.clone();
        let mut order = vec![0usize; subset.len()];
        for (&p, &c) in subset.iter().zip(&chunk) {
            order[fill[c]] = p;
            fill[c] += 1;
        }
        Self {
            bounds,
            order,
            starts,
        }
    }
}

/// `out` (`m^3`, zeroed by the caller or holding earlier sums) `+=` the spread of `values[p]`
/// for the particles of `buckets`.
pub fn spread(
    kernel: &EsKernel,
    grid: &FineGrid,
    position: &[[f64; 3]],
    values: &[f64],
    buckets: &Buckets,
    out: &mut [f64],
) {
    let m = grid.m;
    assert_eq!(out.len(), m * m * m);
    assert!(kernel.width <= MAX_WIDTH && kernel.width <= m);
    let chunks = buckets.bounds.len() - 1;
    let ptr = GridPtr(out.as_mut_ptr());
    let run = |c: usize| {
        let g = ptr;
        for &p in &buckets.order[buckets.starts[c]..buckets.starts[c + 1]] {
            // SAFETY: this chunk's footprints touch x planes [bounds[c], bounds[c + 1] + w - 1)
            // (wrapped), which no other task of its colour touches; indices are below m^3.
            unsafe { add_footprint(kernel, grid, position[p], values[p], g.0) };
        }
    };
    if chunks == 1 {
        run(0);
    } else {
        for colour in 0..2 {
            (colour..chunks)
                .step_by(2)
                .collect::<Vec<_>>()
                .into_par_iter()
                .for_each(run);
        }
    }
}

/// Adds `v phi(x_l - x)` to the `w^3` points `l` of the footprint of `x`.
///
/// # Safety
/// `out` must point to `m^3` doubles that no other thread writes in the footprint's x planes.
unsafe fn add_footprint(kernel: &EsKernel, grid: &FineGrid, x: [f64; 3], v: f64, out: *mut f64) {
    let (m, w) = (grid.m, kernel.width);
    let mut wx = [0.0; MAX_WIDTH];
    let mut wy = [0.0; MAX_WIDTH];
    let mut wz = [0.0; MAX_WIDTH];
    let lx = kernel.weights(grid.coordinate(x[0]), &mut wx);
    let ly = kernel.weights(grid.coordinate(x[1]), &mut wy);
    let lz = kernel.weights(grid.coordinate(x[2]), &mut wz);
    let wrap = |l: i64| l.rem_euclid(m as i64) as usize;
    let z0 = wrap(lz);
    let contiguous = z0 + w <= m;
    for (a, &fa) in wx[..w].iter().enumerate() {
        let px = wrap(lx + a as i64);
        let va = v * fa;
        for (b, &fb) in wy[..w].iter().enumerate() {
            let py = wrap(ly + b as i64);
            let vab = va * fb;
            let row = out.add((px * m + py) * m);
            if contiguous {
                let r = std::slice::from_raw_parts_mut(row.add(z0), w);
                for (o, &fc) in r.iter_mut().zip(&wz[..w]) {
                    *o += vab * fc;
                }
            } else {
                for (c, &fc) in wz[..w].iter().enumerate() {
                    *row.add((z0 + c) % m) += vab * fc;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The bucketed parallel spread against a plain loop over the particles and every grid
    /// point (minimum-image distances), to round-off, with footprints that wrap across every
    /// face and a grid narrower than two kernels (one chunk).
    #[test]
    fn spread_matches_the_plain_sum() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let kernel = EsKernel {
            width: 5,
            beta: 12.0,
        };
        for m in [6usize, 24] {
            let lbox = 2.0;
            let grid = FineGrid {
                m,
                origin: -1.0,
                h: lbox / m as f64,
            };
            let n = 150;
            let pos: Vec<[f64; 3]> = (0..n)
                .map(|_| std::array::from_fn(|_| rng.gen_range(-1.3..1.3)))
                .collect();
            let vals: Vec<f64> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let subset: Vec<usize> = (0..n).filter(|p| p % 7 != 3).collect();
            let b = Buckets::new(&kernel, &grid, &pos, &subset);
            let mut out = vec![0.0; m * m * m];
            spread(&kernel, &grid, &pos, &vals, &b, &mut out);
            let half = 0.5 * kernel.width as f64 * grid.h;
            let mut want = vec![0.0; m * m * m];
            for &p in &subset {
                for (idx, o) in want.iter_mut().enumerate() {
                    let l = [idx / (m * m), (idx / m) % m, idx % m];
                    let mut f = 1.0;
                    for c in 0..3 {
                        let d = grid.origin + grid.h * l[c] as f64 - pos[p][c];
                        let d = d - lbox * (d / lbox).round();
                        f *= kernel.value(d / half);
                    }
                    *o += vals[p] * f;
                }
            }
            let err = out
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-13, "m {m}: {err:e}");
        }
    }
}
