//! The lattice operations of the re-interpolation and of the diagnostics on the device: the
//! particles binned into the cells of a lattice (counting sort: cell index and histogram,
//! exclusive scan, scatter, then the particles of each cell in index order, so the sums below
//! do not depend on the atomics' order), and the truncated Gaussian sums
//! `omega(y) = sum_j alpha_j zeta_{sigma_j}(y - x_j)` at every lattice point (the definition of
//! `vortex_method::cells::gaussian_sum`, core paper Eq. 3-4), gathered by one thread per point from
//! the cells within [`reach`] cells along each axis, row by row along z. Host emulations of
//! both: [`crate::emulate`].

use crate::kernels::{per_element, Kernels, SCAN_THREADS};
use crate::state::DeviceParticles;
use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use std::sync::Arc;
use vortex_cuda::{GpuError, GpuResult};
use vortex_method::reinterpolation::Lattice;

/// Cells of `lat.h` that a Gaussian of core `sigma_max` truncated at `cutoff * sigma_max`
/// reaches from a lattice point along each axis: a particle in cell `c` lies in `[c h, (c+1) h)`
/// (from the origin), so cells beyond `floor(R / h) + 1` are farther than `R`.
pub fn reach(cutoff: f64, sigma_max: f64, h: f64) -> usize {
    (cutoff * sigma_max / h).floor() as usize + 1
}

/// Refuses a reach that would visit a periodic cell twice.
pub fn check_reach(lat: &Lattice, reach: usize) -> GpuResult<()> {
    let nmin = lat.dims.iter().copied().min().unwrap_or(0);
    if lat.periodic && 2 * reach + 1 > nmin {
        return Err(GpuError::Unsupported(format!(
            "Gaussian sums on a periodic lattice of {nmin} points per side reach {reach} cells \
             each way (cores too large for the box: 2 reach + 1 must be <= {nmin})"
        )));
    }
    Ok(())
}

/// The particles sorted by lattice cell: `starts[c]..starts[c+1]` are cell `c`'s, with their
/// rows `sp = (x, y, z, sigma)` and `sa = (ax, ay, az, 0)` (`4 n` doubles each).
pub struct Binned {
    pub starts: CudaSlice<i32>,
    pub sp: CudaSlice<f64>,
    pub sa: CudaSlice<f64>,
}

fn cfg(blocks: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks.max(1) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Exclusive scan of `counts[..m]` into `starts[..=m]`.
pub fn scan(
    k: &Kernels,
    s: &Arc<CudaStream>,
    counts: &CudaSlice<i32>,
    m: usize,
    starts: &mut CudaSlice<i32>,
) -> GpuResult<()> {
    let nb = m.div_ceil(SCAN_THREADS as usize).max(1);
    let mut sums = s.alloc_zeros::<i32>(nb + 1)?;
    let (m_i, nb_i) = (m as i32, nb as i32);
    // nb blocks of SCAN_THREADS (the size of the kernel's shared array), then one
    let blocks = cfg(nb, SCAN_THREADS);
    k.scan_blocks(s, blocks, counts, m_i, &mut sums)?;
    k.scan_sums(s, cfg(1, SCAN_THREADS), &mut sums, nb_i)?;
    k.scan_apply(s, blocks, counts, m_i, &sums, starts)
}

/// Which axes of a lattice wrap (bits 0, 1, 2 for x, y, z: the `periodic` argument of the
/// kernels): a periodic box wraps all three; a slab of a periodic box (`crate::slab`) wraps x
/// and y and carries its neighbours' planes as halo cells along z.
pub fn periodic_axes(lat: &Lattice) -> i32 {
    if lat.periodic {
        7
    } else {
        0
    }
}

/// The planes `k in z_first..z_first + z_count` of a lattice at which Gaussian sums are
/// wanted, and the order of the output (`xfast`: `((k - z_first) ny + j) nx + i`, the layout of
/// the slab transforms; otherwise k fastest, the lattice order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planes {
    pub z_first: usize,
    pub z_count: usize,
    pub xfast: bool,
}

impl Planes {
    /// Every plane of `lat`, in lattice order.
    pub fn all(lat: &Lattice) -> Self {
        Self {
            z_first: 0,
            z_count: lat.dims[2],
            xfast: false,
        }
    }
}

/// The particle rows the binning reads: `3 n` positions and strengths, `n` core radii.
pub struct Rows<'a> {
    pub n: usize,
    pub pos: &'a CudaSlice<f64>,
    pub alpha: &'a CudaSlice<f64>,
    pub sigma: &'a CudaSlice<f64>,
}

impl<'a> From<&'a DeviceParticles> for Rows<'a> {
    fn from(p: &'a DeviceParticles) -> Self {
        Rows {
            n: p.n,
            pos: &p.pos,
            alpha: &p.alpha,
            sigma: &p.sigma,
        }
    }
}

/// Bins the particles into the cells of `lat` (periodic: positions wrapped; free space: the
/// cells at the lattice's faces take what lies beyond them).
pub fn bin(
    k: &Kernels,
    s: &Arc<CudaStream>,
    p: &DeviceParticles,
    lat: &Lattice,
) -> GpuResult<Binned> {
    bin_rows(k, s, p.into(), lat, periodic_axes(lat))
}

/// [`bin`] of particle rows along the axes `periodic` wraps (the others clamp at the faces).
pub fn bin_rows(
    k: &Kernels,
    s: &Arc<CudaStream>,
    p: Rows<'_>,
    lat: &Lattice,
    periodic: i32,
) -> GpuResult<Binned> {
    let n = p.n;
    let ncell = lat.len();
    if n > i32::MAX as usize || ncell >= i32::MAX as usize {
        return Err(GpuError::Unsupported(format!(
            "{n} particles on {ncell} cells: beyond i32 indices"
        )));
    }
    let mut cell = s.alloc_zeros::<i32>(n.max(1))?;
    let mut counts = s.alloc_zeros::<i32>(ncell)?;
    let [nx, ny, nz] = lat.dims.map(|d| d as i32);
    let (n_i, per) = (n as i32, periodic);
    let o = lat.origin;
    // counts: nx ny nz = ncell (the kernel's cell indices stay below it: clamped or wrapped)
    k.bin_count(
        s,
        per_element(n),
        p.pos,
        n_i,
        o[0],
        o[1],
        o[2],
        lat.h,
        nx,
        ny,
        nz,
        per,
        &mut cell,
        &mut counts,
    )?;
    sort_into_cells(k, s, p, &cell, counts)
}

/// The particle rows sorted by `cell` (one cell index per particle, below `counts.len()`;
/// `counts` the particles per cell, consumed as the fill counters): the exclusive scan of the
/// counts, the scatter, the particles of each cell in index order, their rows gathered.
pub fn sort_into_cells(
    k: &Kernels,
    s: &Arc<CudaStream>,
    p: Rows<'_>,
    cell: &CudaSlice<i32>,
    counts: CudaSlice<i32>,
) -> GpuResult<Binned> {
    let (n, ncell) = (p.n, counts.len());
    let n_i = n as i32;
    let mut starts = s.alloc_zeros::<i32>(ncell + 1)?;
    scan(k, s, &counts, ncell, &mut starts)?;
    let mut fill = counts; // reused as the fill counters
    s.memset_zeros(&mut fill)?;
    let mut order = s.alloc_zeros::<i32>(n.max(1))?;
    // starts[c] + fill[c] < starts[c + 1]: every write lands in order
    k.bin_scatter(s, per_element(n), cell, n_i, &starts, &mut fill, &mut order)?;
    let nc_i = ncell as i32;
    k.bin_sort(s, per_element(ncell), &starts, nc_i, &mut order)?;
    let mut sp = s.alloc_zeros::<f64>(4 * n.max(1))?;
    let mut sa = s.alloc_zeros::<f64>(4 * n.max(1))?;
    let cfg = per_element(n);
    k.bin_gather(
        s, cfg, &order, n_i, p.pos, p.alpha, p.sigma, &mut sp, &mut sa,
    )?;
    Ok(Binned { starts, sp, sa })
}

/// `omega` at every point of `lat` (`3` doubles per point, lattice order) from the binned
/// particles, the Gaussians truncated at `cutoff * sigma_j`, `sigma_max` the largest core.
/// Periodic lattices cover the box `[-L/2, L/2)^3`, `L = n h`.
pub fn gaussian_sums(
    k: &Kernels,
    s: &Arc<CudaStream>,
    b: &Binned,
    lat: &Lattice,
    cutoff: f64,
    sigma_max: f64,
) -> GpuResult<CudaSlice<f64>> {
    let reach = reach(cutoff, sigma_max, lat.h);
    check_reach(lat, reach)?;
    let box_length = if lat.periodic {
        lat.dims[0] as f64 * lat.h
    } else {
        0.0
    };
    let axes = periodic_axes(lat);
    gaussian_sums_at(
        k,
        s,
        b,
        lat,
        axes,
        box_length,
        Planes::all(lat),
        cutoff,
        sigma_max,
    )
}

/// [`gaussian_sums`] at the points of `planes` of `lat`, along the axes `periodic` wraps
/// (minimum images of period `box_length`). The caller checks the reach along the wrapped
/// axes ([`check_reach`]); along an open axis the lattice must hold every cell within reach
/// of `planes`.
#[allow(clippy::too_many_arguments)]
pub fn gaussian_sums_at(
    k: &Kernels,
    s: &Arc<CudaStream>,
    b: &Binned,
    lat: &Lattice,
    periodic: i32,
    box_length: f64,
    planes: Planes,
    cutoff: f64,
    sigma_max: f64,
) -> GpuResult<CudaSlice<f64>> {
    let reach = reach(cutoff, sigma_max, lat.h);
    if planes.z_first + planes.z_count > lat.dims[2] {
        return Err(GpuError::Unsupported(format!(
            "planes {}..{} of a lattice of {} planes",
            planes.z_first,
            planes.z_first + planes.z_count,
            lat.dims[2]
        )));
    }
    let npts = lat.dims[0] * lat.dims[1] * planes.z_count;
    let mut omega = s.alloc_zeros::<f64>(3 * npts.max(1))?;
    let [nx, ny, nz] = lat.dims.map(|d| d as i32);
    let reach_i = reach as i32;
    let rmax2 = (cutoff * sigma_max).powi(2);
    let (zf, zc, xf) = (
        planes.z_first as i32,
        planes.z_count as i32,
        planes.xfast as i32,
    );
    let o = lat.origin;
    // omega: 3 npts doubles for the npts = nx ny z_count points of the planes (checked inside
    // the lattice above); along wrapped axes check_reach keeps the visited cells inside the
    // lattice, along open axes the kernel skips cells beyond it
    k.gauss_lattice(
        s,
        cfg(npts.div_ceil(128), 128),
        &b.sp,
        &b.sa,
        &b.starts,
        o[0],
        o[1],
        o[2],
        lat.h,
        nx,
        ny,
        nz,
        periodic,
        reach_i,
        cutoff,
        box_length,
        rmax2,
        zf,
        zc,
        xf,
        &mut omega,
    )?;
    Ok(omega)
}

/// Fresh particles at the points of `planes` of the periodic `n^3` lattice of origin `o`
/// (every axis) and spacing `h`, in the order of [`gaussian_sums_at`]'s output for the same
/// planes, with strengths `alpha` (`3` doubles per point: the solved field) and core `sigma0`.
#[allow(clippy::too_many_arguments)]
pub fn lattice_particles(
    k: &Kernels,
    s: &Arc<CudaStream>,
    n: usize,
    o: f64,
    h: f64,
    sigma0: f64,
    planes: Planes,
    alpha: CudaSlice<f64>,
) -> GpuResult<DeviceParticles> {
    let m = n * n * planes.z_count;
    if alpha.len() < 3 * m {
        return Err(GpuError::Unsupported(format!(
            "{} strengths for {m} lattice points",
            alpha.len() / 3
        )));
    }
    let mut fresh = DeviceParticles {
        n: m,
        pos: s.alloc_zeros(3 * m.max(1))?,
        alpha,
        sigma: s.alloc_zeros(m.max(1))?,
        sigma0: s.alloc_zeros(m.max(1))?,
    };
    let n_i = n as i32;
    let (zf, zc, xf) = (
        planes.z_first as i32,
        planes.z_count as i32,
        planes.xfast as i32,
    );
    k.lattice_particles(
        s,
        per_element(m),
        n_i,
        o,
        h,
        sigma0,
        zf,
        zc,
        xf,
        &mut fresh.pos,
        &mut fresh.sigma,
        &mut fresh.sigma0,
    )?;
    Ok(fresh)
}
