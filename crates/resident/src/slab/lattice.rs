//! The lattice operations of the distributed step on one rank's planes: the blob vorticity at
//! the points of its planes from its own particles and the halo of the other ranks'
//! ([`super::exchange::halo_rows`]) on a local lattice that carries the halo planes as cells
//! (x and y wrap, z is open: the images across the seam arrive shifted), then the Fourier
//! steps over the slabs (`crate::slab_fourier::SlabFourier`): the RBF solve of the
//! re-interpolation (fresh particles on the rank's planes) and the Biot-Savart velocity and
//! spectrum of the diagnostics. The same sums as [`crate::lattice`] on one GPU (core paper
//! Eq. 3-4), in the slab layout `((z - z0) n + y) n + x` of the transforms.

use super::exchange::halo_rows;
use crate::kernels::Kernels;
use crate::lattice::{bin_rows, gaussian_sums_at, reach, Planes, Rows};
use crate::state::DeviceParticles;
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;
use vortex_cuda::{GpuError, GpuResult};
use vortex_domain::Comm;
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
        })
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

    /// The global id (the one-rank lattice order `(i n + j) n + k`, x slowest) of the own
    /// points in the slab layout.
    pub fn point_ids(&self) -> Vec<u64> {
        let (a, b) = self.own();
        let n = self.n as u64;
        let mut ids = Vec::with_capacity(self.points());
        for k in a as u64..b as u64 {
            for j in 0..n {
                for i in 0..n {
                    ids.push((i * n + j) * n + k);
                }
            }
        }
        ids
    }
}

/// Collective: `omega` at the points of this rank's planes of `lat` (slab layout, `3` doubles
/// per point) from the blobs of every rank; `p` this rank's particles (positions wrapped into
/// the box), `sigma_max` the largest core over all ranks. Returns the field and the halo
/// bytes this rank sent.
pub fn slab_vorticity(
    comm: &dyn Comm,
    k: &Kernels,
    s: &Arc<CudaStream>,
    p: &DeviceParticles,
    lat: &SlabLattice,
    cutoff: f64,
    sigma_max: f64,
) -> GpuResult<(CudaSlice<f64>, usize)> {
    let (l, n) = (lat.box_length, lat.n);
    let halo = halo_rows(
        comm,
        k,
        s,
        (&p.pos, &p.alpha, &p.sigma, p.n),
        &lat.bounds,
        n,
        l,
        lat.reach,
    )?;
    let m = p.n + halo.len();
    let joined = |own: &CudaSlice<f64>, w: usize, extra: &[f64]| -> GpuResult<CudaSlice<f64>> {
        let mut d = s.alloc_zeros::<f64>((m * w).max(1))?;
        if p.n > 0 {
            s.memcpy_dtod(&own.slice(0..p.n * w), &mut d.slice_mut(0..p.n * w))?;
        }
        if !extra.is_empty() {
            s.memcpy_htod(extra, &mut d.slice_mut(p.n * w..m * w))?;
        }
        Ok(d)
    };
    let pos = joined(&p.pos, 3, &halo.pos)?;
    let alpha = joined(&p.alpha, 3, &halo.alpha)?;
    let sigma = joined(&p.sigma, 1, &halo.sigma)?;
    let local = lat.local();
    let rows = Rows {
        n: m,
        pos: &pos,
        alpha: &alpha,
        sigma: &sigma,
    };
    let b = bin_rows(k, s, rows, &local, SLAB_AXES)?;
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
    Ok((field, halo.bytes))
}
