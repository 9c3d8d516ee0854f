//! Who holds what: the rank of a particle (the leaf plane of its f32 position in the uniform
//! grid's slabs, as the device sort computes it), the lattice planes of each rank, and the
//! particles each rank sends for the Gaussian sums of another rank's planes (its halo: the
//! cells within the truncation reach, across the periodic seam with a shift of the box length).
//! Host logic only, so that the tests without a GPU check it against the one-rank result.

/// The leaf planes of the uniform grid and their ranks: a particle at `z` (wrapped into the
/// box, rounded to f32) lies in leaf plane `floor((z - lo) inv_w)` (clamped to the grid), the
/// rule of `vortex_gpu::uniform::sort::cell_of` and of the kernel `r_slab_owner`.
#[derive(Clone, Debug, PartialEq)]
pub struct Owners {
    /// Lower z of the grid (f32, as the device computes).
    pub lo: f32,
    /// Leaf planes per unit length (f32).
    pub inv_w: f32,
    /// The rank of each leaf plane (non-decreasing).
    pub plane_owner: Vec<i32>,
    /// Ranks.
    pub ranks: usize,
}

impl Owners {
    /// The leaf plane of a (wrapped) f64 coordinate, in the device's f32 arithmetic.
    pub fn leaf_plane(&self, z: f64) -> usize {
        let v = ((z as f32 - self.lo) * self.inv_w).floor();
        (v.max(0.0) as usize).min(self.plane_owner.len() - 1)
    }

    /// The rank owning a particle at (wrapped) `z`.
    pub fn owner_of(&self, z: f64) -> usize {
        self.plane_owner[self.leaf_plane(z)] as usize
    }

    /// The `R + 1` plane bounds of a periodic lattice of `n` planes `z_k = -L/2 + k L / n`:
    /// rank `r` holds the planes `bounds[r]..bounds[r + 1]`, those whose points it owns (so the
    /// fresh particles of a re-interpolation start on their owners).
    pub fn lattice_bounds(&self, n: usize, box_length: f64) -> Vec<usize> {
        let h = box_length / n as f64;
        let owner: Vec<usize> = (0..n)
            .map(|k| self.owner_of(-0.5 * box_length + k as f64 * h))
            .collect();
        (0..=self.ranks)
            .map(|r| owner.partition_point(|&o| o < r))
            .collect()
    }
}

/// Per destination rank, the indices of this rank's particles it receives and the shift of
/// each (`z + shift L`): the particles whose lattice cell, shifted by `-1, 0, +1` periods, lies
/// within `reach` cells of the destination's planes (`bounds`), except a rank's own particles
/// at no shift (already there). A particle reaches each destination at most once per shift
/// (`2 reach + 1 <= n`, checked by the caller's `check_reach`).
pub fn halo_sends(
    z: &[f64],
    me: usize,
    bounds: &[usize],
    n: usize,
    box_length: f64,
    reach: usize,
) -> Vec<Vec<(u32, i8)>> {
    let ranks = bounds.len() - 1;
    let h = box_length / n as f64;
    let (n_i, r) = (n as i64, reach as i64);
    let mut out = vec![Vec::new(); ranks];
    for (i, &zi) in z.iter().enumerate() {
        // the kernels' periodic cell rule (`cell_axis`)
        let c = (((zi + 0.5 * box_length) / h).floor() as i64).rem_euclid(n_i);
        for (q, dest) in out.iter_mut().enumerate() {
            let (a, b) = (bounds[q] as i64, bounds[q + 1] as i64);
            if a == b {
                continue;
            }
            for s in [-1i64, 0, 1] {
                if q == me && s == 0 {
                    continue;
                }
                let cs = c + s * n_i;
                if cs >= a - r && cs < b + r {
                    dest.push((i as u32, s as i8));
                }
            }
        }
    }
    out
}

/// Per destination rank, the indices of this rank's particles owned there (`owner[i] != me`),
/// and the indices kept, both in increasing order.
pub fn migration_lists(owner: &[i32], me: usize, ranks: usize) -> (Vec<Vec<u32>>, Vec<u32>) {
    let mut send = vec![Vec::new(); ranks];
    let mut keep = Vec::with_capacity(owner.len());
    for (i, &o) in owner.iter().enumerate() {
        if o as usize == me {
            keep.push(i as u32);
        } else {
            send[o as usize].push(i as u32);
        }
    }
    (send, keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn owners(nleaf: usize, ranks: usize, l: f64) -> Owners {
        Owners {
            lo: (-0.5 * l) as f32,
            inv_w: (nleaf as f64 / l) as f32,
            plane_owner: (0..nleaf).map(|z| (z * ranks / nleaf) as i32).collect(),
            ranks,
        }
    }

    /// Every lattice plane belongs to the rank owning its points, the bounds cover the
    /// lattice once, and a rank's planes lie inside its leaf planes.
    #[test]
    fn lattice_bounds_follow_the_leaf_owners() {
        let l = 2.0 * std::f64::consts::PI;
        for (nleaf, ranks, n) in [
            (16, 1, 64),
            (16, 2, 64),
            (16, 3, 64),
            (8, 4, 32),
            (32, 3, 48),
        ] {
            let o = owners(nleaf, ranks, l);
            let b = o.lattice_bounds(n, l);
            assert_eq!((b[0], b[ranks]), (0, n));
            for r in 0..ranks {
                for k in b[r]..b[r + 1] {
                    let z = -0.5 * l + k as f64 * l / n as f64;
                    assert_eq!(o.owner_of(z), r, "nleaf {nleaf} R {ranks} plane {k}");
                }
            }
        }
    }

    /// The halo lists give every rank each particle (and periodic image) within `reach` cells
    /// of its planes exactly once, together with its own particles: checked against a plain
    /// enumeration of the images of every particle.
    #[test]
    fn halo_sends_cover_each_image_once() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let l = 3.0;
        for (nleaf, ranks, n, reach) in
            [(8, 1, 16, 3), (8, 2, 16, 3), (16, 3, 32, 5), (8, 4, 16, 2)]
        {
            let o = owners(nleaf, ranks, l);
            let bounds = o.lattice_bounds(n, l);
            let z: Vec<f64> = (0..500).map(|_| rng.gen_range(-0.5 * l..0.5 * l)).collect();
            let owner: Vec<usize> = z.iter().map(|&v| o.owner_of(v)).collect();
            // each rank's sends
            let mut got = vec![Vec::new(); ranks];
            for me in 0..ranks {
                let mine: Vec<usize> = (0..z.len()).filter(|&i| owner[i] == me).collect();
                let zs: Vec<f64> = mine.iter().map(|&i| z[i]).collect();
                for (q, list) in halo_sends(&zs, me, &bounds, n, l, reach).iter().enumerate() {
                    for &(i, s) in list {
                        got[q].push((mine[i as usize], s as i64));
                    }
                }
            }
            let h = l / n as f64;
            for q in 0..ranks {
                let (a, b) = (
                    bounds[q] as i64 - reach as i64,
                    (bounds[q + 1] + reach) as i64,
                );
                let mut want = Vec::new();
                for (i, &zi) in z.iter().enumerate() {
                    let c = (((zi + 0.5 * l) / h).floor() as i64).rem_euclid(n as i64);
                    for s in [-1i64, 0, 1] {
                        let cs = c + s * n as i64;
                        let own = owner[i] == q && s == 0;
                        if cs >= a && cs < b && !own {
                            want.push((i, s));
                        }
                    }
                }
                got[q].sort_unstable();
                want.sort_unstable();
                assert_eq!(got[q], want, "R {ranks} rank {q}");
            }
        }
    }

    #[test]
    fn migration_lists_split_by_owner() {
        let owner = [0, 2, 1, 1, 0, 2];
        let (send, keep) = migration_lists(&owner, 1, 3);
        assert_eq!(keep, vec![2, 3]);
        assert_eq!(send, vec![vec![0, 4], vec![], vec![1, 5]]);
    }
}
