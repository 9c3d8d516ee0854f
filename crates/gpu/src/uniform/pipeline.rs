//! [`UniformFmm`]: the uniform-grid FMM on one CUDA device (kernels of `kernels/uniform.cu`
//! plus `p2m`, `l2p` of `kernels/fmm.cu` and `p2p_near` of `kernels/p2p.cu`, one module).
//!
//! Phases (each ends with a synchronization, so the wall times are device times; the kernel
//! times come from CUDA events):
//! 1. host: bounding cube and largest core radius (parallel reduction), grid choice, f32
//!    packing (`layout::pack_sources`, parallel); the rotation records and z tables of the
//!    order are built and uploaded once and kept by the [`UniformFmm`];
//! 2. upload of the packed particles (two `float4` arrays);
//! 3. sort: cell index + histogram (atomics), exclusive scan, scatter, in-cell ordering by
//!    input index, gather into sorted buffers, leaf tasks (P2M, P2P slices of 32 targets with 9
//!    source runs, L2P); the slice offsets are the only mid-way download;
//! 4. upward: cell centres, P2M per leaf, M2M level by level (on a rank, the multipoles other
//!    ranks need are then copied on a second stream into page-locked memory, overlapping the
//!    P2P);
//! 5. P2P: `p2p_near` over the 9 runs of each leaf (on a rank: among the own particles, while
//!    the host exchanges the halo particles, leaf and coarse multipoles; then the halo particles
//!    are sorted apart, their leaves get P2M, and a second `p2p_near` adds the halo sources
//!    to the own planes next to them);
//! 6. M2L per level over the implicit stencil (one block per target cell);
//! 7. downward: L2L level by level, L2P (slices of 32 targets);
//! 8. scatter of the fields to input order (interleaved `(u, s)` per particle), one download
//!    (in 8 pieces into page-locked memory, each converted to f64 with `1/(4 pi)` on the host,
//!    in parallel, while the next piece is copied).

use super::grid::{Extent, UniformGrid};
use super::periodic::{far_image_locals, far_images_for, pack_sources_periodic_into};
use super::slab::{Parts, Ranges};
use super::sort::SCAN_BLOCK;
use super::stencil::RotationTable;
use super::{UniformParams, UniformTimes};
use crate::backend::{blocks, tr_threads, P2P_TARGETS, P2P_THREADS};
use crate::device::{GpuDevice, GpuError, GpuResult, UNIFORM};
use crate::tables::{knm_table, toff, z_tables};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use fmm::expansions::ncoef;
use fmm::expansions::{expansion_len, Complex64};
use fmm::kernel::INV_4PI;
use fmm::periodic::{FarImages, Periodic};
use fmm::{Fields, Sources};
use rayon::prelude::*;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Targets per L2P block in this module (`-DEVAL_BLOCK`): the P2P slice, so both kernels
/// share one task list.
pub const UNIFORM_EVAL_BLOCK: usize = P2P_TARGETS;
/// Pieces of the download, each converted on the host while the next one is copied.
const DOWNLOAD_CHUNKS: usize = 8;
/// Threads per block of the element-wise kernels.
const THREADS: usize = 256;

/// NVRTC defines of the module for order `p`.
pub fn uniform_defines(p: usize) -> [(&'static str, usize); 2] {
    [("ORDER", p), ("EVAL_BLOCK", UNIFORM_EVAL_BLOCK)]
}

/// Tables of one order on the device (built once, reused across evaluations).
struct Tables {
    order: usize,
    r: usize,
    rots: CudaSlice<f32>,
    z_m2m: CudaSlice<f32>,
    z_m2l: CudaSlice<f32>,
    z_l2l: CudaSlice<f32>,
    toff: CudaSlice<i32>,
    knm: CudaSlice<f32>,
}

/// Page-locked host buffers of the upload (`float4` positions then strengths, written by the
/// packing: write-combined) and of the download (6 floats per particle, read by the host:
/// cached), kept between evaluations and grown when too small.
#[derive(Default)]
struct Staging {
    up: Option<PinnedHostSlice<f32>>,
    down: Option<PinnedHostSlice<f32>>,
}

/// The uniform-grid FMM on one device; keeps the tables of the last order used and the
/// page-locked staging buffers (so transfers run at full PCIe speed from the second call on).
pub struct UniformFmm {
    dev: Arc<GpuDevice>,
    tables: Mutex<Option<Tables>>,
    staging: Mutex<Staging>,
    /// The far-image operator of the last periodic grid: (order, m, k, box length bits,
    /// image levels) and the operator.
    far: Mutex<Option<FarKey>>,
    /// A second stream, created at first use.
    copy: OnceLock<Arc<CudaStream>>,
}

type FarKey = ((usize, usize, usize, u64, usize), Arc<FarImages>);

/// A coarse window of `.0` floats and its parts downloaded into page-locked memory (offset in
/// the window, data).
type WindowCopy<'a> = (usize, Vec<(usize, &'a [f32])>);

/// The periodic part of one evaluation: box, far images, and the surface correction that the
/// packing computes.
pub(crate) struct PeriodicRun {
    pub box_length: f64,
    pub far: Arc<FarImages>,
    pub receiver_level: usize,
    /// Subtracted from every velocity (set by the packing).
    pub correction: OnceLock<[f64; 3]>,
}

impl PeriodicRun {
    /// The far-image locals of the receiver level (f32 pairs, grid order) from the top
    /// cells' multipoles `top` (f32 pairs, as downloaded).
    fn far_locals_f32(&self, g: &UniformGrid, top: &[f32]) -> Vec<f32> {
        let ops = self.far.operators();
        let top64: Vec<Complex64> = top
            .chunks_exact(2)
            .map(|c| Complex64::new(c[0] as f64, c[1] as f64))
            .collect();
        let nl = g.n_at(self.receiver_level);
        let mut locals = vec![Complex64::new(0.0, 0.0); nl.pow(3) * expansion_len(ops.order())];
        far_image_locals(&self.far, ops, g, &top64, &mut locals);
        locals
            .iter()
            .flat_map(|c| [c.re as f32, c.im as f32])
            .collect()
    }
}

/// Packs the sources into `out` (`8 N` floats): `float4 (x, y, z, 1/sigma)` rows, then
/// `float4 (ax, ay, az, 0)` rows ([`crate::layout::pack_sources_into`]).
pub fn pack_sources_into(s: &Sources, out: &mut [f32]) {
    let np = s.len();
    let (p, a) = out[..8 * np].split_at_mut(4 * np);
    crate::layout::pack_sources_into(s, p, a);
}

/// A pinned buffer of at least `len` floats in `slot` (reallocated when smaller).
fn pinned<'a>(
    dev: &GpuDevice,
    slot: &'a mut Option<PinnedHostSlice<f32>>,
    len: usize,
    flags: u32,
) -> GpuResult<&'a mut [f32]> {
    if slot.as_ref().map(|b| b.len() < len).unwrap_or(true) {
        *slot = None;
        // SAFETY: the contents are written before they are read (packing / download).
        *slot = Some(unsafe { dev.context().alloc_pinned_with_flags::<f32>(len, flags) }?);
    }
    Ok(&mut slot.as_mut().expect("allocated above").as_mut_slice()?[..len])
}

impl std::fmt::Debug for UniformFmm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UniformFmm")
            .field("device", &self.dev)
            .finish()
    }
}

/// One evaluation on a fresh [`UniformFmm`] (tables built for this call; keep a
/// [`UniformFmm`] to reuse them).
pub fn evaluate_uniform(
    dev: &Arc<GpuDevice>,
    sources: &Sources,
    params: &UniformParams,
) -> GpuResult<(Fields, UniformTimes)> {
    UniformFmm::new(dev.clone()).evaluate(sources, params)
}

fn grid1(n: usize, threads: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(threads).max(1) as u32, 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `[[i32; 4]]`-shaped device buffers are `int4` arrays: 4 `i32` per element.
fn i4(n: usize) -> usize {
    4 * n.max(1)
}

/// Sums the bytes of the buffers it is shown.
#[derive(Default)]
struct Bytes(usize);
impl Bytes {
    fn add<T>(&mut self, s: &CudaSlice<T>) {
        self.0 += s.len() * std::mem::size_of::<T>();
    }
}

/// The part of the grid one device evaluates: every leaf on one GPU; on a rank, the leaf
/// planes `own` (targets) inside `halo` (planes whose particles are present as sources).
/// Upward pass, M2L and L2L run over the cells overlapping the own planes at each level.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Region {
    pub grid: UniformGrid,
    pub own: (usize, usize),
    pub halo: (usize, usize),
}

impl Region {
    pub fn whole(grid: UniformGrid) -> Self {
        let n = grid.n();
        Region {
            grid,
            own: (0, n),
            halo: (0, n),
        }
    }
    pub fn is_whole(&self) -> bool {
        self.own == (0, self.grid.n())
    }
    /// First cell (level-local index) and count of the cells of level `l` overlapping the
    /// own planes (one contiguous range: z is the slowest index).
    pub fn level_cells(&self, l: usize) -> (usize, usize) {
        let s = self.grid.k - l;
        let nl = self.grid.n_at(l);
        let (a, b) = (self.own.0 >> s, ((self.own.1 - 1) >> s) + 1);
        (a * nl * nl, (b - a) * nl * nl)
    }
}

/// What a rank adds to the pipeline of its [`Region`] (`super::distributed`): the halo
/// particles and the coarse multipoles of the other ranks. The pipeline calls
/// `coarse_ranges` after the M2M (and downloads those ranges of the multipoles), then, with
/// the P2P among the own particles queued on the device, `halo_count` and `coarse` (the
/// host-side exchanges), `pack_halo`, and uploads the completed coarse windows.
pub(crate) trait RankExchange {
    /// Float ranges of the multipole array holding the coarse windows (levels `< k`).
    fn coarse_ranges(&self) -> Vec<(usize, usize)>;
    /// Per window, the float ranges (relative to its start) that `coarse` reads (downloaded;
    /// the rest of the window is left zero) and those it changes (uploaded).
    fn coarse_parts(&self) -> Vec<(Ranges, Ranges)>;
    /// Float ranges of the multipole array holding the leaf multipoles other ranks need
    /// (downloaded after the P2M, in this order, and handed to `leaf_multipoles`).
    fn leaf_ranges(&self) -> Vec<(usize, usize)>;
    /// Exchanges the leaf multipoles: this rank's parts (of `leaf_ranges`) in, the float
    /// ranges of the multipole array with the received leaf multipoles out.
    fn leaf_multipoles(&mut self, parts: &[&[f32]]) -> GpuResult<Parts<f32>>;
    /// Receives the halo particles; returns their count.
    fn halo_count(&mut self) -> GpuResult<usize>;
    /// Writes the halo particles into `out` (`8 nh` floats: position rows, then strength rows).
    fn pack_halo(&self, out: &mut [f32]);
    /// Completes the coarse windows (this rank's partial multipoles in, sums out).
    fn coarse(&mut self, windows: &mut [Vec<f32>]) -> GpuResult<()>;
    /// Adds to the time of the coarse exchange (copies between device and host).
    fn add_seconds(&mut self, s: f64);
}

/// Particles sorted into the leaves on the device.
struct Sorted {
    /// Input index of each sorted particle.
    perm: CudaSlice<i32>,
    /// `n^3 + 1` leaf offsets.
    starts: CudaSlice<i32>,
    pos: CudaSlice<f32>,
    str: CudaSlice<f32>,
}

impl UniformFmm {
    pub fn new(dev: Arc<GpuDevice>) -> Self {
        Self {
            dev,
            tables: Mutex::new(None),
            staging: Mutex::new(Staging::default()),
            far: Mutex::new(None),
            copy: OnceLock::new(),
        }
    }

    /// The device on visible index `index` (an error, never a panic, without a GPU).
    pub fn on_device(index: usize) -> GpuResult<Self> {
        Ok(Self::new(GpuDevice::get(index)?))
    }

    pub fn device(&self) -> &Arc<GpuDevice> {
        &self.dev
    }

    /// Compiles the module of order `p` now (otherwise at the first evaluation).
    pub fn warm_up(&self, p: usize) -> GpuResult<()> {
        self.dev.module(&UNIFORM, &uniform_defines(p))?;
        Ok(())
    }

    fn func(&self, p: usize, name: &str) -> GpuResult<CudaFunction> {
        self.dev.function(&UNIFORM, &uniform_defines(p), name)
    }

    /// The second stream of the device (copies that overlap the kernels of the first).
    fn copy_stream(&self) -> GpuResult<Arc<CudaStream>> {
        if let Some(c) = self.copy.get() {
            return Ok(c.clone());
        }
        let c = self.dev.context().new_stream()?;
        Ok(self.copy.get_or_init(|| c).clone())
    }

    /// Runs `f` between two CUDA events ([`GpuDevice::event_timed`]).
    fn event_timed(&self, f: impl FnOnce() -> GpuResult<()>) -> GpuResult<f64> {
        self.dev.event_timed(f)
    }

    /// Makes sure the tables of order `p` with offsets up to `r` are on the device.
    fn ensure_tables(&self, p: usize, r: usize) -> GpuResult<()> {
        let mut t = self.tables.lock().expect("tables poisoned");
        if matches!(&*t, Some(x) if x.order == p && x.r >= r) {
            return Ok(());
        }
        let s = self.dev.stream();
        let t0 = Instant::now();
        let rt = RotationTable::new(p, r);
        let (a, b, c) = z_tables(p);
        *t = Some(Tables {
            order: p,
            r,
            rots: s.clone_htod(&rt.records)?,
            z_m2m: s.clone_htod(&a)?,
            z_m2l: s.clone_htod(&b)?,
            z_l2l: s.clone_htod(&c)?,
            toff: s.clone_htod(&toff(p))?,
            knm: s.clone_htod(&knm_table(p))?,
        });
        log::debug!(
            "uniform FMM: rotation table p = {p}, r = {r} built in {:.0} ms",
            t0.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Exclusive scan of `input[..len]` into `out[..=len]` (`out[len]` = total): the three
    /// kernels emulated by `sort::exclusive_scan`.
    fn scan(
        &self,
        p: usize,
        input: &CudaSlice<i32>,
        len: usize,
        out: &mut CudaSlice<i32>,
    ) -> GpuResult<()> {
        let s = self.dev.stream();
        let nb = len.div_ceil(SCAN_BLOCK).max(1);
        let mut sums = s.alloc_zeros::<i32>(nb)?;
        let (len_i, nb_i) = (len as i32, nb as i32);
        let f = self.func(p, "u_scan_blocks")?;
        let mut b = s.launch_builder(&f);
        b.arg(input).arg(&len_i).arg(&mut *out).arg(&mut sums);
        unsafe { b.launch(blocks(nb, 256)) }?;
        let f = self.func(p, "u_scan_sums")?;
        let mut b = s.launch_builder(&f);
        b.arg(&mut sums).arg(&nb_i).arg(&mut *out).arg(&len_i);
        unsafe { b.launch(blocks(1, 256)) }?;
        let f = self.func(p, "u_scan_add")?;
        let mut b = s.launch_builder(&f);
        b.arg(&mut *out).arg(&len_i).arg(&sums);
        unsafe { b.launch(grid1(len, THREADS)) }?;
        Ok(())
    }

    /// Counting sort of `np` particles (`input`: `float4` position rows, then strength rows)
    /// into the leaves of `g`, in-cell order by input index; kernel time added to `k_time`.
    fn sort(
        &self,
        p: usize,
        input: &CudaSlice<f32>,
        np: usize,
        g: &UniformGrid,
        k_time: &mut f64,
        bytes: &mut Bytes,
    ) -> GpuResult<Sorted> {
        let s = self.dev.stream();
        let (pos_in, str_in) = (input.slice(..4 * np), input.slice(4 * np..8 * np));
        let (n, nleaf) = (g.n(), g.leaves());
        let (np_i, n_i, nleaf_i) = (np as i32, n as i32, nleaf as i32);
        let (lo, inv_w) = g.f32_params();
        let mut cell = s.alloc_zeros::<i32>(np)?;
        let mut slot = s.alloc_zeros::<i32>(np)?;
        let mut counts = s.alloc_zeros::<i32>(nleaf)?;
        let mut starts = s.alloc_zeros::<i32>(nleaf + 1)?;
        let mut perm0 = s.alloc_zeros::<i32>(np)?;
        let mut perm = s.alloc_zeros::<i32>(np)?;
        let mut spos = s.alloc_zeros::<f32>(4 * np)?;
        let mut sstr = s.alloc_zeros::<f32>(4 * np)?;
        for b in [&cell, &slot, &perm0, &perm, &counts, &starts] {
            bytes.add(b);
        }
        bytes.add(&spos);
        bytes.add(&sstr);
        *k_time += self.event_timed(|| {
            let f = self.func(p, "u_cell_index")?;
            let mut b = s.launch_builder(&f);
            b.arg(&pos_in).arg(&np_i);
            b.arg(&lo[0]).arg(&lo[1]).arg(&lo[2]).arg(&inv_w).arg(&n_i);
            b.arg(&mut cell).arg(&mut slot).arg(&mut counts);
            unsafe { b.launch(grid1(np, THREADS)) }?;
            self.scan(p, &counts, nleaf, &mut starts)?;
            let f = self.func(p, "u_scatter")?;
            let mut b = s.launch_builder(&f);
            b.arg(&cell)
                .arg(&slot)
                .arg(&starts)
                .arg(&np_i)
                .arg(&mut perm0);
            unsafe { b.launch(grid1(np, THREADS)) }?;
            let f = self.func(p, "u_sort_cells")?;
            let mut b = s.launch_builder(&f);
            b.arg(&starts).arg(&nleaf_i).arg(&perm0).arg(&mut perm);
            unsafe { b.launch(grid1(32 * nleaf, THREADS)) }?;
            let f = self.func(p, "u_gather")?;
            let mut b = s.launch_builder(&f);
            b.arg(&perm).arg(&np_i).arg(&pos_in).arg(&str_in);
            b.arg(&mut spos).arg(&mut sstr);
            unsafe { b.launch(grid1(np, THREADS)) }?;
            Ok(())
        })?;
        Ok(Sorted {
            perm,
            starts,
            pos: spos,
            str: sstr,
        })
    }

    /// Velocity and stretching of every source at every source (free space, input order,
    /// `1/(4 pi)` applied) and the phase times.
    pub fn evaluate(
        &self,
        sources: &Sources,
        params: &UniformParams,
    ) -> GpuResult<(Fields, UniformTimes)> {
        let mut f = Fields::default();
        let tm = self.evaluate_into(sources, params, &mut f)?;
        Ok((f, tm))
    }

    /// [`UniformFmm::evaluate`] into `out` (resized to the sources): a time-stepping caller
    /// that keeps `out` saves the first-touch page faults of fresh output arrays (~0.5 GB at
    /// N = 1e7).
    pub fn evaluate_into(
        &self,
        sources: &Sources,
        params: &UniformParams,
        out: &mut Fields,
    ) -> GpuResult<UniformTimes> {
        params.validate()?;
        let np = sources.len();
        let t = Instant::now();
        let ext = Extent::of(&sources.position, &sources.sigma).ok_or_else(|| {
            GpuError::Unsupported(
                "sources with a non-finite value or a non-positive core radius".into(),
            )
        })?;
        if sources.strength.len() != np || sources.sigma.len() != np {
            return Err(GpuError::Unsupported("sources of unequal lengths".into()));
        }
        let region = Region::whole(params.grid_for(&ext, np));
        let host = t.elapsed().as_secs_f64();
        let pack = |up: &mut [f32]| {
            pack_sources_into(sources, up);
            Ok(())
        };
        let mut tm = self.run_region(params.order, np, &pack, &region, None, None, out)?;
        tm.host_prepare += host;
        tm.total += host;
        Ok(tm)
    }

    /// Periodic velocity and stretching of every source at every source (input order,
    /// `1/(4 pi)` applied; zero-mean velocity) in the box `[-L/2, L/2)^3` of `periodic`
    /// (positions are wrapped): the lists of [`super::stencil`] cover the `3 x 3 x 3` box
    /// images, the far images come from `fmm::periodic::FarImages` (see [`super::periodic`]).
    /// Errors: a total strength that is not zero, a box too small for the cores, bad values.
    pub fn evaluate_periodic(
        &self,
        sources: &Sources,
        params: &UniformParams,
        periodic: &Periodic,
    ) -> GpuResult<(Fields, UniformTimes)> {
        super::periodic::check_call(sources, params, periodic)?;
        let np = sources.len();
        let t = Instant::now();
        // the largest core radius fixes the grid (the other sums come with the packing)
        let (_, _, sigma_max, ok) = super::grid::bounds(&sources.position, &sources.sigma);
        if !ok {
            return Err(GpuError::Unsupported(
                "sources with a non-finite value or a non-positive core radius".into(),
            ));
        }
        let g = params.grid_for_periodic(&Extent::periodic(periodic, sigma_max), np)?;
        let far = self.far_images(&g, params.order, periodic)?;
        let run = PeriodicRun {
            box_length: periodic.box_length,
            far,
            receiver_level: g.receiver_level(),
            correction: OnceLock::new(),
        };
        let host = t.elapsed().as_secs_f64();
        let pack = |up: &mut [f32]| {
            let (p, a) = up[..8 * np].split_at_mut(4 * np);
            let sums = pack_sources_periodic_into(sources, periodic, p, a);
            sums.check(periodic)?;
            let _ = run
                .correction
                .set(sums.surface_correction(periodic.box_length));
            Ok(())
        };
        let region = Region::whole(g);
        let mut f = Fields::default();
        let mut tm = self.run_region(params.order, np, &pack, &region, None, Some(&run), &mut f)?;
        tm.host_prepare += host;
        tm.total += host;
        Ok((f, tm))
    }

    /// The far-image operator of a periodic grid, order and box (its lattice sums take
    /// ~0.1 s: built once and kept for the next evaluation with the same key).
    fn far_images(
        &self,
        g: &UniformGrid,
        p: usize,
        periodic: &Periodic,
    ) -> GpuResult<Arc<FarImages>> {
        let key = (
            p,
            g.m,
            g.k,
            periodic.box_length.to_bits(),
            periodic.image_levels,
        );
        let mut slot = self.far.lock().expect("far images poisoned");
        if let Some((k, f)) = slot.as_ref() {
            if *k == key {
                return Ok(f.clone());
            }
        }
        let t = Instant::now();
        let f = Arc::new(far_images_for(g, p, periodic));
        log::debug!(
            "uniform FMM: far images (p = {p}, K = {}, {} receivers) built in {:.0} ms",
            periodic.image_levels,
            f.receivers().len(),
            t.elapsed().as_secs_f64() * 1e3
        );
        *slot = Some((key, f.clone()));
        Ok(f)
    }

    /// The pipeline over a [`Region`] of the grid for the `np` particles of its own leaves
    /// (`pack` writes them into the `8 np` floats of the upload buffer: `float4` position
    /// rows, then strength rows). On a rank, `ex` brings the halo particles (sorted apart:
    /// sources only) and completes the coarse multipoles; both exchanges run on the host
    /// while the device computes the P2P among the own particles. Fields of the `np`
    /// particles in their input order.
    #[allow(clippy::too_many_arguments)] // the one internal driver behind three entry points
    pub(crate) fn run_region(
        &self,
        p: usize,
        np: usize,
        pack: &dyn Fn(&mut [f32]) -> GpuResult<()>,
        region: &Region,
        ex: Option<&mut dyn RankExchange>,
        per: Option<&PeriodicRun>,
        fields: &mut Fields,
    ) -> GpuResult<UniformTimes> {
        check_region(p, np, region, ex.is_some(), per.is_some())?;
        let mut tm = UniformTimes::default();
        let mut bytes = Bytes::default();
        let s = self.dev.stream().clone();

        // ---- 1. host: packing, tables
        let t = Instant::now();
        let mut staging_guard = self.staging.lock().expect("staging poisoned");
        let staging: &mut Staging = &mut staging_guard;
        let up = pinned(
            &self.dev,
            &mut staging.up,
            8 * np,
            CU_MEMHOSTALLOC_WRITECOMBINED,
        )?;
        pack(up)?;
        tm.host_prepare = t.elapsed().as_secs_f64();

        // ---- 2. upload
        let t = Instant::now();
        // SAFETY: every element is written by the copy below before any kernel reads it.
        let mut input = unsafe { s.alloc::<f32>(8 * np) }?;
        s.memcpy_htod(&*up, &mut input)?;
        s.synchronize()?;
        bytes.add(&input);
        tm.upload = t.elapsed().as_secs_f64();

        let out6 = self.run_device(p, np, &input, region, ex, per, staging, &mut tm, &mut bytes)?;
        drop(input);
        self.download(&out6, np, per, staging, fields, &mut tm)?;
        tm.total = tm.host_prepare
            + tm.upload
            + tm.sort
            + tm.upward
            + tm.m2l
            + tm.downward
            + tm.p2p
            + tm.download;
        Ok(tm)
    }

    /// Velocity and stretching of `np` particles at themselves from their packed rows already
    /// on the device (`input`: `8 np` floats, the layout of [`pack_sources_into`]; periodic:
    /// positions inside the box), for a caller that keeps the particles on the device between
    /// evaluations: the fields stay on the device, `6 np` floats `(u, s)` per particle in input
    /// order, **without** the factor `1/(4 pi)` and (periodic) without the surface correction
    /// (both are the caller's: it has the sums of its particles). `sigma_max` is the largest
    /// core radius, `lo`/`hi` the bounds of the positions (free space; ignored when periodic).
    #[allow(clippy::too_many_arguments)]
    pub fn evaluate_device(
        &self,
        input: &CudaSlice<f32>,
        np: usize,
        bounds: ([f64; 3], [f64; 3]),
        sigma_max: f64,
        params: &UniformParams,
        periodic: Option<&Periodic>,
    ) -> GpuResult<(CudaSlice<f32>, UniformTimes)> {
        params.validate()?;
        if input.len() < 8 * np {
            return Err(GpuError::Unsupported(format!(
                "a device input of {} floats for {np} particles (need {})",
                input.len(),
                8 * np
            )));
        }
        let t = Instant::now();
        let (region, run) = match periodic {
            None => {
                let ext = Extent::from_bounds(bounds.0, bounds.1, sigma_max);
                (Region::whole(params.grid_for(&ext, np)), None)
            }
            Some(per) => {
                per.validate()
                    .map_err(|e| GpuError::Unsupported(e.to_string()))?;
                let g = params.grid_for_periodic(&Extent::periodic(per, sigma_max), np)?;
                let far = self.far_images(&g, params.order, per)?;
                let run = PeriodicRun {
                    box_length: per.box_length,
                    far,
                    receiver_level: g.receiver_level(),
                    correction: OnceLock::new(),
                };
                (Region::whole(g), Some(run))
            }
        };
        check_region(params.order, np, &region, false, run.is_some())?;
        let mut tm = UniformTimes {
            host_prepare: t.elapsed().as_secs_f64(),
            ..Default::default()
        };
        let mut bytes = Bytes::default();
        let mut staging_guard = self.staging.lock().expect("staging poisoned");
        let out6 = self.run_device(
            params.order,
            np,
            input,
            &region,
            None,
            run.as_ref(),
            &mut staging_guard,
            &mut tm,
            &mut bytes,
        )?;
        tm.total =
            tm.host_prepare + tm.sort + tm.upward + tm.m2l + tm.downward + tm.p2p + tm.download;
        Ok((out6, tm))
    }

    /// Phases 3-8 of the pipeline on particles already on the device (`input`, `8 np`
    /// floats): sort, upward pass, P2P (with the rank exchanges of `ex`), M2L, downward pass,
    /// and the fields scattered back to input order (`6 np` floats, raw sums: no `1/(4 pi)`).
    #[allow(clippy::too_many_arguments)]
    fn run_device(
        &self,
        p: usize,
        np: usize,
        input: &CudaSlice<f32>,
        region: &Region,
        mut ex: Option<&mut dyn RankExchange>,
        per: Option<&PeriodicRun>,
        staging: &mut Staging,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<CudaSlice<f32>> {
        let s = self.dev.stream().clone();
        let nc3 = 3 * ncoef(p);
        let g: UniformGrid = region.grid;
        let (n, k, m) = (g.n(), g.k, g.m);
        let plane = n * n;
        let (c_own, nown) = (region.own.0 * plane, (region.own.1 - region.own.0) * plane);
        let ncell = g.total_cells();
        (tm.n, tm.m, tm.k) = (n, m, k);
        let r = g.max_offset();
        self.ensure_tables(p, r)?;
        self.warm_up(p)?; // compiled at the first call only (not part of the times after it)

        // ---- 3. sort and tasks
        let t = Instant::now();
        let n_i = n as i32;
        let sorted = self.sort(p, input, np, &g, &mut tm.k_sort, bytes)?;
        let (perm, starts, spos, sstr) = (sorted.perm, sorted.starts, sorted.pos, sorted.str);
        let mut nslices = s.alloc_zeros::<i32>(nown.max(1))?;
        let mut slice_starts = s.alloc_zeros::<i32>(nown + 1)?;
        let (c_own_i, nown_i) = (c_own as i32, nown as i32);
        let slice = P2P_TARGETS;
        let slice_i = slice as i32;
        tm.k_sort += self.event_timed(|| {
            let f = self.func(p, "u_slices")?;
            let mut b = s.launch_builder(&f);
            let own_starts = starts.slice(c_own..c_own + nown + 1);
            b.arg(&own_starts)
                .arg(&nown_i)
                .arg(&slice_i)
                .arg(&mut nslices);
            unsafe { b.launch(grid1(nown, THREADS)) }?;
            self.scan(p, &nslices, nown, &mut slice_starts)?;
            Ok(())
        })?;
        drop(nslices);
        let ss = s.clone_dtoh(&slice_starts)?;
        let ntasks = ss[nown] as usize;
        let mut p2m_tasks = s.alloc_zeros::<i32>(i4(nown))?;
        let mut near_tasks = s.alloc_zeros::<i32>(i4(ntasks))?;
        let mut near_nsrc = s.alloc_zeros::<i32>(ntasks.max(1))?;
        let mut l2p_tasks = s.alloc_zeros::<i32>(i4(ntasks))?;
        let runs_per_leaf = if per.is_some() { 18 } else { 9 };
        let mut runs = s.alloc_zeros::<i32>(i4(runs_per_leaf * nown))?;
        let mut pairs = s.alloc_zeros::<u64>(1)?;
        for b in [&p2m_tasks, &near_tasks, &near_nsrc, &l2p_tasks, &runs] {
            bytes.add(b);
        }
        let leaf_base = g.level_offset(k) as i32;
        let periodic_i = per.is_some() as i32;
        tm.k_sort += self.event_timed(|| {
            let f = self.func(p, "u_leaf_tasks")?;
            let mut b = s.launch_builder(&f);
            b.arg(&starts)
                .arg(&starts)
                .arg(&slice_starts)
                .arg(&n_i)
                .arg(&leaf_base)
                .arg(&slice_i)
                .arg(&c_own_i)
                .arg(&nown_i)
                .arg(&periodic_i);
            b.arg(&mut p2m_tasks)
                .arg(&mut near_tasks)
                .arg(&mut near_nsrc)
                .arg(&mut l2p_tasks)
                .arg(&mut runs)
                .arg(&mut pairs);
            unsafe { b.launch(grid1(nown, 128)) }?;
            Ok(())
        })?;
        tm.sort = t.elapsed().as_secs_f64();

        // ---- 4. upward (own particles)
        let t = Instant::now();
        let guard = self.tables.lock().expect("tables poisoned");
        let tb = guard.as_ref().expect("tables built above");
        let r_i = tb.r as i32;
        let len = ncell * 2 * nc3;
        let mut mult = s.alloc_zeros::<f32>(len)?;
        let mut loc = s.alloc_zeros::<f32>(len)?;
        let mut centers = s.alloc_zeros::<f32>(4 * ncell)?;
        bytes.add(&mult);
        bytes.add(&loc);
        bytes.add(&centers);
        let trt = tr_threads(p);
        tm.k_p2m = self.event_timed(|| {
            let f = self.func(p, "u_centers")?;
            for l in 0..=k {
                let (off, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let w = g.width(l);
                let mut b = s.launch_builder(&f);
                b.arg(&off)
                    .arg(&nl)
                    .arg(&g.lo[0])
                    .arg(&g.lo[1])
                    .arg(&g.lo[2])
                    .arg(&w);
                b.arg(&mut centers);
                unsafe { b.launch(grid1(g.n_at(l).pow(3), THREADS)) }?;
            }
            let f = self.func(p, "p2m")?;
            let mut b = s.launch_builder(&f);
            b.arg(&spos)
                .arg(&sstr)
                .arg(&p2m_tasks)
                .arg(&centers)
                .arg(&tb.knm);
            b.arg(&mut mult);
            unsafe { b.launch(blocks(nown, ncoef(p).div_ceil(32) * 32)) }?;
            Ok(())
        })?;
        tm.k_m2m = self.event_timed(|| {
            let f = self.func(p, "u_m2m")?;
            for l in (0..k).rev() {
                let (poff, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let coff = g.level_offset(l + 1) as i32;
                let dist = (0.5 * 3f64.sqrt() * g.width(l + 1)) as f32;
                let (c0, cnt) = region.level_cells(l);
                let c0_i = c0 as i32;
                let mut b = s.launch_builder(&f);
                b.arg(&mut mult)
                    .arg(&tb.rots)
                    .arg(&tb.z_m2m)
                    .arg(&tb.toff)
                    .arg(&r_i);
                b.arg(&poff).arg(&nl).arg(&coff).arg(&dist).arg(&c0_i);
                unsafe { b.launch(blocks(cnt, trt)) }?;
            }
            Ok(())
        })?;
        // the partial coarse multipoles and the leaf multipoles other ranks need leave through
        // the (idle) page-locked download buffer, copied on a second stream after the M2M, so
        // that the P2P below starts at once and the copies overlap it
        let mut windows = Vec::new();
        let mut window_parts: Vec<WindowCopy> = Vec::new();
        let mut leaf_parts = Vec::new();
        let mut copies_done = None;
        if let Some(e) = ex.as_deref_mut() {
            let coarse: Vec<_> = e
                .coarse_ranges()
                .into_iter()
                .zip(e.coarse_parts())
                .collect();
            let ranges = e.leaf_ranges();
            let total: usize = coarse
                .iter()
                .flat_map(|(_, (down, _))| down.iter().map(|&(x, y)| y - x))
                .chain(ranges.iter().map(|&(a, b)| b - a))
                .sum();
            let copy = self.copy_stream()?;
            copy.wait(&s.record_event(None)?)?;
            let mut rest = pinned(&self.dev, &mut staging.down, total, 0)?;
            for ((a, b), (down, _)) in coarse {
                let mut parts = Vec::new();
                for (x, y) in down {
                    let (h, r) = rest.split_at_mut(y - x);
                    copy.memcpy_dtoh(&mult.slice(a + x..a + y), &mut *h)?;
                    parts.push((x, &*h));
                    rest = r;
                }
                window_parts.push((b - a, parts));
            }
            for (a, b) in ranges {
                let (h, r) = rest.split_at_mut(b - a);
                copy.memcpy_dtoh(&mult.slice(a..b), &mut *h)?;
                leaf_parts.push(&*h);
                rest = r;
            }
            copies_done = Some(copy.record_event(None)?);
        }
        tm.upward = t.elapsed().as_secs_f64();

        // ---- 5. P2P among the own particles, queued; the exchanges run on the host meanwhile
        let t = Instant::now();
        let mut vel = s.alloc_zeros::<f32>(3 * np)?;
        let mut strf = s.alloc_zeros::<f32>(3 * np)?;
        bytes.add(&vel);
        bytes.add(&strf);
        let period = per.map(|q| q.box_length as f32).unwrap_or(0.0);
        // periodic: the top multipoles leave for the host before the P2P is queued
        let top_mult = match per {
            Some(_) => Some(s.clone_dtoh(&mult.slice(0..m * m * m * 2 * nc3))?),
            None => None,
        };
        let e_p2p = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        if ntasks > 0 {
            let f = self.func(p, "p2p_near")?;
            let mut b = s.launch_builder(&f);
            b.arg(&spos).arg(&sstr).arg(&spos).arg(&sstr);
            b.arg(&near_tasks).arg(&near_nsrc).arg(&runs).arg(&period);
            b.arg(&mut vel).arg(&mut strf);
            unsafe { b.launch(blocks(ntasks, P2P_THREADS)) }?;
        }
        let e_p2p_end = s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        // periodic: the far images on the host (f64) while the P2P runs, into the (still zero)
        // locals of the receiver level
        if let (Some(q), Some(top)) = (per, top_mult) {
            let t = Instant::now();
            let lr = q.receiver_level;
            let host = q.far_locals_f32(&g, &top);
            let a = g.level_offset(lr) * 2 * nc3;
            s.memcpy_htod(&host, &mut loc.slice_mut(a..a + host.len()))?;
            tm.far_images = t.elapsed().as_secs_f64();
        }
        let mut halo = None;
        if let Some(e) = ex {
            let t_copy = Instant::now();
            if let Some(ev) = copies_done {
                ev.synchronize()?;
            }
            for (len, parts) in window_parts {
                let mut w = vec![0.0f32; len];
                for (x, h) in parts {
                    w[x..x + h.len()].copy_from_slice(h);
                }
                windows.push(w);
            }
            e.add_seconds(t_copy.elapsed().as_secs_f64());
            let nh = e.halo_count()?;
            let leaf_up = e.leaf_multipoles(&leaf_parts)?;
            e.coarse(&mut windows)?;
            // multipoles to upload (received leaves, completed coarse cells): float ranges of
            // the multipole array and their data
            let mut mult_up: Vec<(usize, &[f32])> =
                leaf_up.iter().map(|((a, _), w)| (*a, &w[..])).collect();
            for (((a, _), (_, up)), w) in e
                .coarse_ranges()
                .into_iter()
                .zip(e.coarse_parts())
                .zip(&windows)
            {
                mult_up.extend(up.into_iter().map(|(x, y)| (a + x, &w[x..y])));
            }
            let nm: usize = mult_up.iter().map(|(_, w)| w.len()).sum();
            // the own upload finished long ago: the staging buffer is free (one buffer for
            // the halo particles and the multipoles, so the copies run asynchronously)
            let up = pinned(
                &self.dev,
                &mut staging.up,
                8 * nh + nm,
                CU_MEMHOSTALLOC_WRITECOMBINED,
            )?;
            let (hup, mut mup) = up.split_at_mut(8 * nh);
            if nh > 0 {
                e.pack_halo(hup);
                let mut hin = unsafe { s.alloc::<f32>(8 * nh) }?;
                s.memcpy_htod(&*hup, &mut hin)?;
                let hs = self.sort(p, &hin, nh, &g, &mut tm.k_sort, bytes)?;
                halo = Some(hs);
            }
            let t = Instant::now();
            for (a, w) in mult_up {
                let (dst, r) = mup.split_at_mut(w.len());
                dst.copy_from_slice(w);
                s.memcpy_htod(&*dst, &mut mult.slice_mut(a..a + w.len()))?;
                mup = r;
            }
            e.add_seconds(t.elapsed().as_secs_f64());
        }
        e_p2p_end.synchronize()?;
        tm.k_p2p = e_p2p.elapsed_ms(&e_p2p_end)? as f64 * 1e-3;
        tm.p2p = t.elapsed().as_secs_f64();

        // ---- 6. halo leaves: P2M (never summed into parents: their owners did that) and
        // the P2P from the halo to the own planes next to it
        if let Some(h) = &halo {
            let t = Instant::now();
            let (n_lo, n_hi) = (
                (region.own.0 - region.halo.0) * plane,
                (region.halo.1 - region.own.1) * plane,
            );
            let mut halo_tasks = s.alloc_zeros::<i32>(i4(n_lo + n_hi))?;
            // own planes next to the halo (one range when they coincide or touch)
            let (z0, z1) = region.own;
            let mut ranges = Vec::new();
            if region.halo.0 < z0 {
                ranges.push((z0, z0 + 1));
            }
            if z1 < region.halo.1 {
                match ranges.last_mut() {
                    Some(last) if last.1 >= z1 - 1 => last.1 = z1,
                    _ => ranges.push((z1 - 1, z1)),
                }
            }
            let nr: usize = ranges.iter().map(|r| (r.1 - r.0) * plane).sum();
            let mut hnear = s.alloc_zeros::<i32>(i4(ntasks))?;
            let mut hnsrc = s.alloc_zeros::<i32>(ntasks.max(1))?;
            let mut hruns = s.alloc_zeros::<i32>(i4(9 * nr))?;
            let mut scratch = s.alloc_zeros::<i32>(i4(nr.max(ntasks)))?;
            let mut scratch2 = s.alloc_zeros::<i32>(i4(ntasks))?;
            tm.k_sort += self.event_timed(|| {
                let f = self.func(p, "u_p2m_tasks")?;
                for (c0, cnt, at) in [
                    (region.halo.0 * plane, n_lo, 0),
                    (region.own.1 * plane, n_hi, n_lo),
                ] {
                    if cnt == 0 {
                        continue;
                    }
                    let (c0_i, cnt_i) = (c0 as i32, cnt as i32);
                    let mut out = halo_tasks.slice_mut(4 * at..4 * (at + cnt));
                    let mut b = s.launch_builder(&f);
                    b.arg(&h.starts).arg(&c0_i).arg(&cnt_i).arg(&leaf_base);
                    b.arg(&mut out);
                    unsafe { b.launch(grid1(cnt, 128)) }?;
                }
                let f = self.func(p, "u_leaf_tasks")?;
                let mut at = 0;
                for &(za, zb) in &ranges {
                    let u0 = (za - region.own.0) * plane;
                    let cnt = (zb - za) * plane;
                    let (c0_i, cnt_i) = ((za * plane) as i32, cnt as i32);
                    let sl = slice_starts.slice(u0..u0 + cnt + 1);
                    let mut hr = hruns.slice_mut(4 * 9 * at..4 * 9 * (at + cnt));
                    let mut b = s.launch_builder(&f);
                    b.arg(&starts)
                        .arg(&h.starts)
                        .arg(&sl)
                        .arg(&n_i)
                        .arg(&leaf_base)
                        .arg(&slice_i)
                        .arg(&c0_i)
                        .arg(&cnt_i)
                        .arg(&0i32);
                    b.arg(&mut scratch)
                        .arg(&mut hnear)
                        .arg(&mut hnsrc)
                        .arg(&mut scratch2)
                        .arg(&mut hr)
                        .arg(&mut pairs);
                    unsafe { b.launch(grid1(cnt, 128)) }?;
                    at += cnt;
                }
                Ok(())
            })?;
            tm.k_p2m += self.event_timed(|| {
                let f = self.func(p, "p2m")?;
                let mut b = s.launch_builder(&f);
                b.arg(&h.pos)
                    .arg(&h.str)
                    .arg(&halo_tasks)
                    .arg(&centers)
                    .arg(&tb.knm);
                b.arg(&mut mult);
                unsafe { b.launch(blocks(n_lo + n_hi, ncoef(p).div_ceil(32) * 32)) }?;
                Ok(())
            })?;
            tm.k_p2p += self.event_timed(|| {
                let f = self.func(p, "p2p_near")?;
                let mut at = 0;
                for &(za, zb) in &ranges {
                    let u0 = (za - region.own.0) * plane;
                    let cnt = (zb - za) * plane;
                    let (ta, te) = (ss[u0] as usize, ss[u0 + cnt] as usize);
                    if te > ta {
                        let tasks = hnear.slice(4 * ta..4 * te);
                        let nsrc = hnsrc.slice(ta..te);
                        let hr = hruns.slice(4 * 9 * at..4 * 9 * (at + cnt));
                        let mut b = s.launch_builder(&f);
                        b.arg(&spos).arg(&sstr).arg(&h.pos).arg(&h.str);
                        b.arg(&tasks).arg(&nsrc).arg(&hr).arg(&period);
                        b.arg(&mut vel).arg(&mut strf);
                        unsafe { b.launch(blocks(te - ta, P2P_THREADS)) }?;
                    }
                    at += cnt;
                }
                Ok(())
            })?;
            tm.p2p += t.elapsed().as_secs_f64();
        }
        tm.p2p_pairs = s.clone_dtoh(&pairs)?[0];

        // ---- 7. M2L
        let t = Instant::now();
        if region.is_whole() {
            tm.m2l_translations = super::m2l_count(&g);
        }
        tm.k_m2l = self.event_timed(|| {
            let f = self.func(p, "u_m2l")?;
            for l in 0..=k {
                if l == 0 && m < 3 {
                    continue; // every top cell is a neighbour of every other
                }
                let (off, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let top = (l == 0) as i32;
                let w = g.width(l) as f32;
                let (c0, cnt) = region.level_cells(l);
                let c0_i = c0 as i32;
                let mut b = s.launch_builder(&f);
                b.arg(&mult)
                    .arg(&mut loc)
                    .arg(&tb.rots)
                    .arg(&tb.z_m2l)
                    .arg(&tb.toff);
                b.arg(&r_i).arg(&off).arg(&nl).arg(&top).arg(&periodic_i);
                b.arg(&w).arg(&c0_i);
                unsafe { b.launch(blocks(cnt, trt)) }?;
            }
            Ok(())
        })?;
        tm.m2l = t.elapsed().as_secs_f64();
        drop(halo);

        // ---- 8. downward: L2L, L2P
        let t = Instant::now();
        tm.k_l2l = self.event_timed(|| {
            let f = self.func(p, "u_l2l")?;
            for l in 1..=k {
                let (coff, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let poff = g.level_offset(l - 1) as i32;
                let dist = (0.5 * 3f64.sqrt() * g.width(l)) as f32;
                let (c0, cnt) = region.level_cells(l);
                let c0_i = c0 as i32;
                let mut b = s.launch_builder(&f);
                b.arg(&mut loc)
                    .arg(&tb.rots)
                    .arg(&tb.z_l2l)
                    .arg(&tb.toff)
                    .arg(&r_i);
                b.arg(&coff).arg(&nl).arg(&poff).arg(&dist).arg(&c0_i);
                unsafe { b.launch(blocks(cnt, trt)) }?;
            }
            Ok(())
        })?;
        tm.k_l2p = self.event_timed(|| {
            if ntasks == 0 {
                return Ok(());
            }
            let f = self.func(p, "l2p")?;
            let mut b = s.launch_builder(&f);
            b.arg(&spos)
                .arg(&sstr)
                .arg(&l2p_tasks)
                .arg(&centers)
                .arg(&loc);
            b.arg(&tb.knm).arg(&mut vel).arg(&mut strf);
            unsafe { b.launch(blocks(ntasks, UNIFORM_EVAL_BLOCK)) }?;
            Ok(())
        })?;
        tm.downward = t.elapsed().as_secs_f64();
        drop(guard);

        // ---- 9. back to input order
        let t = Instant::now();
        let np_i = np as i32;
        let mut out6 = s.alloc_zeros::<f32>(6 * np)?;
        bytes.add(&out6);
        tm.device_bytes = bytes.0;
        drop((mult, loc, spos, sstr));
        tm.k_scatter = self.event_timed(|| {
            let f = self.func(p, "u_scatter_fields")?;
            let mut b = s.launch_builder(&f);
            b.arg(&perm).arg(&np_i).arg(&vel).arg(&strf).arg(&mut out6);
            unsafe { b.launch(grid1(np, THREADS)) }?;
            Ok(())
        })?;
        tm.download = t.elapsed().as_secs_f64();
        Ok(out6)
    }

    /// Phase 9: the fields `out6` (device, `6 np` raw floats) into `fields` (f64, `1/(4 pi)`,
    /// periodic: minus the surface correction), downloaded in pieces, each converted on the
    /// host while the next one is copied.
    fn download(
        &self,
        out6: &CudaSlice<f32>,
        np: usize,
        per: Option<&PeriodicRun>,
        staging: &mut Staging,
        fields: &mut Fields,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let t = Instant::now();
        let s = self.dev.stream().clone();
        let host = pinned(&self.dev, &mut staging.down, 6 * np, 0)?;
        // every element is overwritten below: kept arrays of the right length are reused
        // as they are, others replaced by zeroed allocations (pages mapped lazily, at the
        // parallel writes, not by a serial fill)
        if fields.velocity.len() != np || fields.stretching.len() != np {
            fields.velocity = vec![[0.0; 3]; np];
            fields.stretching = vec![[0.0; 3]; np];
        }
        let chunk = np.div_ceil(DOWNLOAD_CHUNKS).max(1);
        // periodic: the zero-mean velocity (minus the surface term of cubic summation)
        let u0 = per
            .and_then(|q| q.correction.get().copied())
            .unwrap_or([0.0; 3]);
        let mut pending = Vec::with_capacity(DOWNLOAD_CHUNKS);
        for (c, h) in host.chunks_mut(6 * chunk).enumerate() {
            let a = 6 * c * chunk;
            s.memcpy_dtoh(&out6.slice(a..a + h.len()), &mut *h)?;
            pending.push((h, s.record_event(None)?));
        }
        for ((h, ev), (u, st)) in pending.into_iter().zip(
            fields
                .velocity
                .chunks_mut(chunk)
                .zip(fields.stretching.chunks_mut(chunk)),
        ) {
            ev.synchronize()?;
            u.par_iter_mut()
                .zip(st.par_iter_mut())
                .zip(h.par_chunks(6))
                .for_each(|((u, st), h)| {
                    *u = std::array::from_fn(|d| h[d] as f64 * INV_4PI - u0[d]);
                    *st = std::array::from_fn(|d| h[3 + d] as f64 * INV_4PI);
                });
        }
        s.synchronize()?;
        tm.download += t.elapsed().as_secs_f64();
        Ok(())
    }
}

/// Refuses what the pipeline cannot run: slabs or rank exchanges with a periodic box, no
/// particles or too many for i32 indices, a grid too large for the order.
fn check_region(p: usize, np: usize, region: &Region, ex: bool, per: bool) -> GpuResult<()> {
    if per && (ex || !region.is_whole()) {
        return Err(GpuError::Unsupported(
            "the periodic uniform grid runs on one device (no slabs)".into(),
        ));
    }
    if np == 0 || np > i32::MAX as usize / 8 {
        return Err(GpuError::Unsupported(format!(
            "{np} particles: need 1..={} for i32 indices",
            i32::MAX / 8
        )));
    }
    let g = region.grid;
    let (ncell, nleaf, nc3) = (g.total_cells(), g.leaves(), 3 * ncoef(p));
    if ncell.saturating_mul(2 * nc3) > i32::MAX as usize * 2 || nleaf > i32::MAX as usize / 16 {
        return Err(GpuError::Unsupported(format!(
            "grid of {}^3 leaves too large for order {p}",
            g.n()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uniform::evaluate_reference;
    use fmm::relative_l2_error;

    #[test]
    fn packing_into_staging_equals_the_layout_packing() {
        let s = fmm::testsets::standard(10_000, 3);
        let (p, a) = crate::layout::pack_sources(&s);
        let mut out = vec![0.0f32; 8 * s.len() + 5];
        pack_sources_into(&s, &mut out);
        assert_eq!(&out[..4 * s.len()], &p[..]);
        assert_eq!(&out[4 * s.len()..8 * s.len()], &a[..]);
    }

    #[test]
    fn bad_parameters_are_errors_not_panics() {
        let s = fmm::testsets::standard(100, 3);
        for params in [
            UniformParams {
                order: 0,
                ..Default::default()
            },
            UniformParams {
                grid: Some((9, 1)),
                ..Default::default()
            },
            UniformParams {
                grid: Some((0, 1)),
                ..Default::default()
            },
        ] {
            assert!(params.validate().is_err());
            assert!(evaluate_reference(&s, &params).is_err());
        }
    }

    /// On a GPU: the device path against the CPU f64 uniform-grid FMM (same grid and lists;
    /// the difference is the f32 arithmetic) and bitwise repeatable.
    #[test]
    #[cfg_attr(
        not(feature = "gpu-tests"),
        ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
    )]
    fn device_matches_the_f64_reference() {
        let fmm_ = UniformFmm::on_device(0).unwrap();
        let mut s = fmm::testsets::standard(20_000, 5);
        s.sigma.iter_mut().for_each(|v| *v *= 0.5);
        for (p, grid) in [(6, None), (8, Some((3, 1))), (8, Some((1, 3)))] {
            let params = UniformParams {
                order: p,
                grid,
                ..Default::default()
            };
            let want = evaluate_reference(&s, &params).unwrap();
            let (got, tm) = fmm_.evaluate(&s, &params).unwrap();
            let (again, _) = fmm_.evaluate(&s, &params).unwrap();
            assert_eq!(got, again, "not repeatable");
            let eu = relative_l2_error(&got.velocity, &want.velocity);
            let es = relative_l2_error(&got.stretching, &want.stretching);
            println!(
                "p {p} grid {grid:?} (n {}): GPU vs CPU f64 {eu:.2e} / {es:.2e}",
                tm.n
            );
            assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
        }
    }

    /// On a GPU: the periodic device path against the periodic f64 twin (same grid, lists,
    /// far images and surface correction), repeatable, and refusing a non-zero total
    /// strength.
    #[test]
    #[cfg_attr(
        not(feature = "gpu-tests"),
        ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
    )]
    fn periodic_device_matches_the_f64_reference() {
        use crate::uniform::reference::evaluate_reference_periodic;
        let fmm_ = UniformFmm::on_device(0).unwrap();
        let per = Periodic::default();
        let mut s = fmm::testsets::generate(fmm::testsets::Distribution::Uniform, 20_000, 7, true);
        s.sigma.iter_mut().for_each(|v| *v *= 0.5);
        // a few particles outside the box: wrapped on both paths
        s.position[3][0] += 2.0 * per.box_length;
        s.position[11][2] -= per.box_length;
        for (p, grid) in [
            (8, None),
            (10, Some((3, 1))),
            (8, Some((1, 3))),
            (6, Some((1, 2))),
        ] {
            let params = UniformParams {
                order: p,
                grid,
                ..Default::default()
            };
            let want = evaluate_reference_periodic(&s, &params, &per).unwrap();
            let (got, tm) = fmm_.evaluate_periodic(&s, &params, &per).unwrap();
            let (again, _) = fmm_.evaluate_periodic(&s, &params, &per).unwrap();
            assert_eq!(got, again, "not repeatable");
            let eu = relative_l2_error(&got.velocity, &want.velocity);
            let es = relative_l2_error(&got.stretching, &want.stretching);
            println!(
                "periodic p {p} grid {grid:?} (n {}): GPU vs CPU f64 {eu:.2e} / {es:.2e}, far images {:.2} ms",
                tm.n,
                tm.far_images * 1e3
            );
            assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
        }
        let mut bad = s.clone();
        bad.strength[0][1] += 1.0;
        let e = fmm_
            .evaluate_periodic(&bad, &UniformParams::default(), &per)
            .unwrap_err();
        assert!(e.to_string().contains("total strength"), "{e}");
    }
}
