//! The lattice operations of the distributed step on one rank's planes: the blob vorticity at
//! the points of its planes from its own particles and the halo of the other ranks'
//! ([`super::exchange::halo_rows`]) on a local lattice that carries the halo planes as cells
//! (x and y wrap, z is open: the images across the seam arrive shifted), then the Fourier
//! steps over the slabs (`crate::slab_fourier::SlabFourier`): the RBF solve of the
//! re-interpolation (fresh particles on the rank's planes) and the Biot-Savart velocity and
//! spectrum of the diagnostics. The same sums as [`crate::lattice`] on one GPU (core paper
//! Eq. 3-4), in the slab layout `((z - z0) n + y) n + x` of the transforms.

use super::halo::{halo_on_device, split_rows, HaloSource};
use super::owners::Owners;
use crate::kernels::{per_element, Kernels};
use crate::lattice::{bin_rows, gaussian_sums_at, reach, Planes, Rows};
use crate::state::DeviceParticles;
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;
use vortex_cuda::{GpuError, GpuResult};
use vortex_domain::Comm;
use vortex_exchange::DeviceExchange;
use vortex_method::reinterpolation::Lattice;

/// Axes a slab's local lattice wraps: x and y (bits 0 and 1).
pub const SLAB_AXES: i32 = 3;

/// One rank's part of the periodic `n^3` lattice of the box `[-L/2, L/2)^3` split at
/// `bounds` along z, with `reach` halo planes on each side.
#[derive(Clone, Debug, PartialEq)]
pub struct SlabLattice {
    pub n: usize,
    pub box_length: f64,
    pub bounds: Vec<usize>,
    pub rank: usize,
    pub reach: usize,
    /// Who owns which leaf plane of the particles' slabs (none on one rank): the owners of a
    /// finer grid's planes ([`SlabLattice::fine_bounds`]).
    pub owners: Option<Owners>,
}

impl SlabLattice {
    /// The slab of `rank` for Gaussians of core up to `sigma_max` truncated at `cutoff` cores;
    /// refuses a reach that would meet its own periodic image (`2 reach + 1 > n`).
    pub fn new(
        n: usize,
        box_length: f64,
        bounds: Vec<usize>,
        rank: usize,
        cutoff: f64,
        sigma_max: f64,
    ) -> GpuResult<Self> {
        let h = box_length / n as f64;
        let reach = reach(cutoff, sigma_max, h);
        if 2 * reach + 1 > n {
            return Err(GpuError::Unsupported(format!(
                "Gaussian sums on a periodic lattice of {n} points per side reach {reach} cells \
                 each way (cores too large for the box: 2 reach + 1 must be <= {n})"
            )));
        }
        Ok(Self {
            n,
            box_length,
            bounds,
            rank,
            reach,
            owners: None,
        })
    }

    /// The lattice with the particles' slab owners `owners`.
    pub fn with_owners(self, owners: Owners) -> Self {
        Self {
            owners: Some(owners),
            ..self
        }
    }

    /// The plane bounds of a grid of `m` planes over the box by the particles' owners (the
    /// whole grid on rank 0 without owners).
    pub fn fine_bounds(&self, m: usize) -> Vec<usize> {
        match &self.owners {
            Some(o) => o.lattice_bounds(m, self.box_length),
            None => vec![0, m],
        }
    }

    pub fn h(&self) -> f64 {
        self.box_length / self.n as f64
    }

    /// The own planes `z0..z1`.
    pub fn own(&self) -> (usize, usize) {
        (self.bounds[self.rank], self.bounds[self.rank + 1])
    }

    /// Points of the own planes.
    pub fn points(&self) -> usize {
        let (a, b) = self.own();
        self.n * self.n * (b - a)
    }

    /// The local lattice: the own planes and `reach` halo planes each side as cells.
    pub fn local(&self) -> Lattice {
        let (a, b) = self.own();
        let h = self.h();
        let o = -0.5 * self.box_length;
        Lattice {
            origin: [o, o, o + (a as f64 - self.reach as f64) * h],
            h,
            dims: [self.n, self.n, b - a + 2 * self.reach],
            periodic: false,
        }
    }

    /// The own planes in the local lattice, output in the slab layout.
    pub fn planes(&self) -> Planes {
        let (a, b) = self.own();
        Planes {
            z_first: self.reach,
            z_count: b - a,
            xfast: true,
        }
    }

    /// The global ids of the own points in the lattice order over the own planes (`(i n + j)
    /// n + k`, x slowest, `k` from the own planes fastest): the ids of the fresh particles of
    /// [`to_lattice_order`]'s rows, on one rank `0..n^3`; filled row by row on the host's
    /// threads.
    pub fn point_ids(&self) -> Vec<u64> {
        use rayon::prelude::*;
        let (a, b) = self.own();
        let (n, zc) = (self.n as u64, b - a);
        let mut ids = vec![0u64; self.points()];
        if zc == 0 {
            return ids;
        }
        ids.par_chunks_mut(zc).enumerate().for_each(|(row, out)| {
            // row = i n + j
            let first = row as u64 * n + a as u64;
            for (k, id) in out.iter_mut().enumerate() {
                *id = first + k as u64;
            }
        });
        ids
    }
}

/// The rows of `field` (three doubles per own point of `lat` in the slab layout of the
/// transforms, `((k - z0) n + j) n + i`) in the lattice order of [`SlabLattice::point_ids`].
pub fn to_lattice_order(
    k: &Kernels,
    s: &Arc<CudaStream>,
    field: &CudaSlice<f64>,
    lat: &SlabLattice,
) -> GpuResult<CudaSlice<f64>> {
    let m = lat.points();
    if field.len() < 3 * m {
        return Err(GpuError::Unsupported(format!(
            "a slab field of {} doubles for {m} lattice points",
            field.len()
        )));
    }
    let mut out = s.alloc_zeros::<f64>((3 * m).max(1))?;
    let (a, b) = lat.own();
    // field holds 3 m doubles (checked), out 3 m
    k.lattice_order(
        s,
        per_element(m),
        field,
        lat.n as i32,
        (b - a) as i32,
        &mut out,
    )?;
    Ok(out)
}

/// Collective: the Gaussian sums of every rank's particles at this rank's lattice planes
/// (`lat`), the slab layout of [`crate::slab_fourier`] (`3 n^2` doubles per own plane): the own
/// particles and the halo of the other ranks' ones (exchanged on the device,
/// [`super::halo::halo_on_device`]), binned on the local lattice of the own planes and the
/// halo planes. Returns the field and the bytes this rank sent.
#[allow(clippy::too_many_arguments)]
pub fn slab_vorticity(
    comm: &dyn Comm,
    exchange: &mut dyn DeviceExchange,
    k: &Kernels,
    s: &Arc<CudaStream>,
    p: &DeviceParticles,
    lat: &SlabLattice,
    cutoff: f64,
    sigma_max: f64,
) -> GpuResult<(CudaSlice<f64>, usize)> {
    let (l, n) = (lat.box_length, lat.n);
    let mut laps = crate::laps::Laps::new(s, "slab vorticity");
    let source = HaloSource {
        pos: &p.pos,
        alpha: &p.alpha,
        sigma: &p.sigma,
        np: p.n,
    };
    let halo = halo_on_device(comm, exchange, k, s, source, &lat.bounds, n, l, lat.reach)?;
    laps.lap("halo");
    let m = p.n + halo.len;
    let own = |src: &CudaSlice<f64>, w: usize| -> GpuResult<CudaSlice<f64>> {
        let mut d = s.alloc_zeros::<f64>((m * w).max(1))?;
        if p.n > 0 {
            s.memcpy_dtod(&src.slice(0..p.n * w), &mut d.slice_mut(0..p.n * w))?;
        }
        Ok(d)
    };
    let (mut pos, mut alpha, mut sigma) = (own(&p.pos, 3)?, own(&p.alpha, 3)?, own(&p.sigma, 1)?);
    split_rows(k, s, &halo, (&mut pos, &mut alpha, &mut sigma), p.n)?;
    laps.lap("join");
    let local = lat.local();
    let rows = Rows {
        n: m,
        pos: &pos,
        alpha: &alpha,
        sigma: &sigma,
    };
    let b = bin_rows(k, s, rows, &local, SLAB_AXES)?;
    laps.lap("bin");
    let field = gaussian_sums_at(
        k,
        s,
        &b,
        &local,
        SLAB_AXES,
        l,
        lat.planes(),
        cutoff,
        sigma_max,
    )?;
    laps.lap("sums");
    Ok((field, halo.bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulate;
    use crate::slab::owners::{halo_sends, Owners};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Position, strength, core radius.
    type Blob = ([f64; 3], [f64; 3], f64);

    /// The rows of every rank's own planes in the lattice order (`emulate::lattice_order`, the
    /// kernel's thread map) carry the global ids of [`SlabLattice::point_ids`]: over the
    /// ranks, every lattice point once, each row the value of its point (1 to 4 ranks, uneven
    /// and empty slabs).
    #[test]
    fn lattice_order_rows_carry_their_point_ids() {
        let n = 7usize;
        let value = |id: usize| [id as f64, -(id as f64), 0.5 * id as f64];
        for bounds in [
            vec![0, n],
            vec![0, 3, n],
            vec![0, 1, 1, 5, n],
            vec![0, 2, 4, 6, n],
        ] {
            let mut seen = vec![false; n * n * n];
            for rank in 0..bounds.len() - 1 {
                let lat = SlabLattice::new(n, 1.0, bounds.clone(), rank, 2.0, 0.01).unwrap();
                let (z0, z1) = lat.own();
                // the slab layout of the own planes: ((k - z0) n + j) n + i
                let slab: Vec<[f64; 3]> = (0..lat.points())
                    .map(|t| {
                        let (i, j, k) = (t % n, (t / n) % n, z0 + t / (n * n));
                        value((i * n + j) * n + k)
                    })
                    .collect();
                let rows = emulate::lattice_order(&slab, n, z1 - z0);
                let ids = lat.point_ids();
                assert_eq!(rows.len(), ids.len());
                for (row, &id) in rows.iter().zip(&ids) {
                    assert_eq!(*row, value(id as usize), "bounds {bounds:?}, rank {rank}");
                    assert!(!seen[id as usize], "id {id} twice");
                    seen[id as usize] = true;
                }
            }
            assert!(
                seen.iter().all(|&s| s),
                "bounds {bounds:?}: a point without a row"
            );
        }
    }

    /// The host twin of [`slab_vorticity`] on every rank (own particles plus the halo of
    /// [`halo_sends`], shifted across the seam, on the local lattice with x, y wrapped) equals
    /// the one-rank periodic sums of the device algorithm at the same planes, for 1 to 4 ranks,
    /// uneven slabs and leaf planes that do not line up with the lattice.
    #[test]
    fn slab_sums_equal_the_one_rank_sums() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (l, n, cutoff) = (2.0, 12usize, 3.0);
        let np = 2000;
        let pos: Vec<[f64; 3]> = (0..np)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-0.5 * l..0.5 * l)))
            .collect();
        let alpha: Vec<[f64; 3]> = (0..np)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
            .collect();
        let h = l / n as f64;
        let sigma: Vec<f64> = (0..np).map(|_| rng.gen_range(0.7..1.0) * h).collect();
        let sigma_max = sigma.iter().copied().fold(0.0, f64::max);
        let whole =
            emulate::gaussian_sums(&pos, &alpha, &sigma, &Lattice::periodic_box(n, l), cutoff);
        for (ranks, nleaf) in [(1usize, 8usize), (2, 8), (3, 9), (4, 16), (3, 6)] {
            let owners = Owners {
                lo: (-0.5 * l) as f32,
                inv_w: (nleaf as f64 / l) as f32,
                plane_owner: (0..nleaf).map(|z| (z * ranks / nleaf) as i32).collect(),
                ranks,
            };
            let bounds = owners.lattice_bounds(n, l);
            let owner: Vec<usize> = pos.iter().map(|x| owners.owner_of(x[2])).collect();
            // what each rank sends to each
            let mut recv: Vec<Vec<Blob>> = vec![Vec::new(); ranks];
            let lat0 = SlabLattice::new(n, l, bounds.clone(), 0, cutoff, sigma_max).unwrap();
            for me in 0..ranks {
                let mine: Vec<usize> = (0..np).filter(|&i| owner[i] == me).collect();
                let z: Vec<f64> = mine.iter().map(|&i| pos[i][2]).collect();
                let sends = halo_sends(&z, me, &bounds, n, l, lat0.reach);
                for (q, list) in sends.iter().enumerate() {
                    for &(i, s) in list {
                        let p = mine[i as usize];
                        let mut x = pos[p];
                        x[2] += s as f64 * l;
                        recv[q].push((x, alpha[p], sigma[p]));
                    }
                }
            }
            for (me, halo) in recv.iter().enumerate() {
                let lat = SlabLattice::new(n, l, bounds.clone(), me, cutoff, sigma_max).unwrap();
                let own = (0..np).filter(|&i| owner[i] == me);
                let (mut p, mut a, mut g) = (Vec::new(), Vec::new(), Vec::new());
                for i in own {
                    p.push(pos[i]);
                    a.push(alpha[i]);
                    g.push(sigma[i]);
                }
                for &(x, w, s) in halo {
                    p.push(x);
                    a.push(w);
                    g.push(s);
                }
                // the largest core of all ranks decides the reach, as on the device
                p.push([0.0, 0.0, -0.5 * l + bounds[me] as f64 * h]);
                a.push([0.0; 3]);
                g.push(sigma_max);
                let got = emulate::gaussian_sums_at(
                    &p,
                    &a,
                    &g,
                    &lat.local(),
                    [true, true, false],
                    l,
                    lat.planes(),
                    cutoff,
                );
                // the slab layout ((k - z0) n + j) n + i against the one-rank lattice order
                let z0 = bounds[me];
                let ids = (0..lat.points()).map(|t| {
                    let (i, j, k) = (t % n, (t / n) % n, z0 + t / (n * n));
                    (i * n + j) * n + k
                });
                assert_eq!(got.len(), lat.points());
                for (t, id) in ids.enumerate() {
                    let want = whole[id];
                    let scale = want.iter().map(|v| v.abs()).fold(1e-3, f64::max);
                    for c in 0..3 {
                        let d = (got[t][c] - want[c]).abs() / scale;
                        assert!(
                            d < 1e-12,
                            "R {ranks} rank {me} point {id}: {:?} vs {want:?}",
                            got[t]
                        );
                    }
                }
            }
        }
    }
}
