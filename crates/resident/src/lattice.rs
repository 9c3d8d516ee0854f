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
use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
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
    let mut b = s.launch_builder(&k.scan_blocks);
    b.arg(counts).arg(&m_i).arg(&mut sums);
    // SAFETY: r_scan_blocks(const int* counts, int m, int* block_sums): the arguments in this order
    // and of these types; counts holds m ints (the caller's), sums nb + 1 for the nb = ceil(m /
    // SCAN_THREADS) blocks of SCAN_THREADS threads (the size of the kernel's shared array);
    // elements i >= m count as zero.
    unsafe { b.launch(cfg(nb, SCAN_THREADS)) }?;
    let mut b = s.launch_builder(&k.scan_sums);
    b.arg(&mut sums).arg(&nb_i);
    // SAFETY: r_scan_sums(int* bs, int nb): the arguments in this order and of these types; sums
    // holds nb + 1 ints (bs[nb] gets the total); one block of SCAN_THREADS threads, the size of its
    // shared array.
    unsafe { b.launch(cfg(1, SCAN_THREADS)) }?;
    let mut b = s.launch_builder(&k.scan_apply);
    b.arg(counts).arg(&m_i).arg(&sums).arg(starts);
    // SAFETY: r_scan_apply(const int* counts, int m, const int* block_sums, int* starts): the
    // arguments in this order and of these types; counts holds m ints, sums nb + 1 (gridDim.x =
    // nb), starts m + 1 (the caller's contract); the same nb blocks of SCAN_THREADS threads as the
    // first launch, elements i >= m written nowhere.
    unsafe { b.launch(cfg(nb, SCAN_THREADS)) }?;
    Ok(())
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
    let mut b = s.launch_builder(&k.bin_count);
    b.arg(p.pos)
        .arg(&n_i)
        .arg(&o[0])
        .arg(&o[1])
        .arg(&o[2])
        .arg(&lat.h);
    b.arg(&nx)
        .arg(&ny)
        .arg(&nz)
        .arg(&per)
        .arg(&mut cell)
        .arg(&mut counts);
    // SAFETY: r_bin_count(const double* pos, int n, double ox, oy, oz, double h, int nx, ny, nz,
    // int periodic (axis bits), int* cell, int* counts): the arguments in this order and of these
    // types; pos
    // holds 3 n doubles, cell n ints, counts nx ny nz = ncell (the kernel's cell indices stay below
    // it: clamped or wrapped); threads i >= n return.
    unsafe { b.launch(per_element(n)) }?;
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
    let mut b = s.launch_builder(&k.bin_scatter);
    b.arg(cell)
        .arg(&n_i)
        .arg(&starts)
        .arg(&mut fill)
        .arg(&mut order);
    // SAFETY: r_bin_scatter(const int* cell, int n, const int* starts, int* fill, int* order): the
    // arguments in this order and of these types; cell and order hold n ints, starts ncell + 1 (the
    // scan of the counts), fill ncell; starts[c] + fill[c] < starts[c + 1], so every write lands in
    // order; threads i >= n return.
    unsafe { b.launch(per_element(n)) }?;
    let nc_i = ncell as i32;
    let mut b = s.launch_builder(&k.bin_sort);
    b.arg(&starts).arg(&nc_i).arg(&mut order);
    // SAFETY: r_bin_sort(const int* starts, int ncell, int* order): the arguments in this order and
    // of these types; starts holds ncell + 1 ints, order n = starts[ncell]; one thread per cell,
    // threads c >= ncell return.
    unsafe { b.launch(per_element(ncell)) }?;
    let mut sp = s.alloc_zeros::<f64>(4 * n.max(1))?;
    let mut sa = s.alloc_zeros::<f64>(4 * n.max(1))?;
    let mut b = s.launch_builder(&k.bin_gather);
    b.arg(&order).arg(&n_i).arg(p.pos).arg(p.alpha).arg(p.sigma);
    b.arg(&mut sp).arg(&mut sa);
    // SAFETY: r_bin_gather(const int* order, int n, const double* pos, a, sigma, double4* sp,
    // double4* sa): the arguments in this order and of these types; order holds n ints (indices
    // below n), pos and alpha 3 n doubles, sigma n, sp and sa 4 n doubles (n double4); threads j >=
    // n return.
    unsafe { b.launch(per_element(n)) }?;
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
    let mut l = s.launch_builder(&k.gauss_lattice);
    l.arg(&b.sp).arg(&b.sa).arg(&b.starts);
    l.arg(&o[0]).arg(&o[1]).arg(&o[2]).arg(&lat.h);
    l.arg(&nx)
        .arg(&ny)
        .arg(&nz)
        .arg(&periodic)
        .arg(&reach_i)
        .arg(&cutoff)
        .arg(&box_length);
    l.arg(&rmax2).arg(&zf).arg(&zc).arg(&xf).arg(&mut omega);
    // SAFETY: r_gauss_lattice(const double4* sp, sa, const int* starts, double ox, oy, oz, double
    // h, int nx, ny, nz, int periodic, int reach, double cutoff, double box_length, double rmax2,
    // int z_first, int z_count, int xfast, double* omega): the arguments in this order and of
    // these types; sp and sa hold the binned particles, starts ncell + 1 ints of the same
    // lattice, omega 3 npts doubles for the npts = nx ny z_count points of the planes (checked
    // inside the lattice above); along wrapped axes check_reach keeps the visited cells inside
    // the lattice, along open axes the kernel skips cells beyond it; one thread per point,
    // threads t >= npts return.
    unsafe { l.launch(cfg(npts.div_ceil(128), 128)) }?;
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
    let mut b = s.launch_builder(&k.lattice_particles);
    b.arg(&n_i).arg(&o).arg(&h).arg(&sigma0);
    b.arg(&zf).arg(&zc).arg(&xf);
    b.arg(&mut fresh.pos)
        .arg(&mut fresh.sigma)
        .arg(&mut fresh.sigma0);
    // SAFETY: r_lattice_particles(int n, double o, double h, double sigma0, int z_first, int
    // z_count, int xfast, double* pos, double* sigma, double* s0): the arguments in this order
    // and of these types; pos holds 3 m doubles, sigma and sigma0 m (allocated above) for the m =
    // n^2 z_count points; one thread per point, threads t >= m return.
    unsafe { b.launch(per_element(m)) }?;
    Ok(fresh)
}
