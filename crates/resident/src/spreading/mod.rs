//! The Gaussian sums of the re-interpolation by spreading and FFT on one GPU
//! (`reinterpolation.sums = { kind = "spread" }`): the device route of
//! `vortex_method::reinterpolation::spreading`, whose module documentation gives the formulas,
//! the design of the kernel and the fine grid from the tolerance, and the host twin (f64) the
//! GPU test compares with. Kernels in `kernels/spread.cu`:
//!
//! 1. the particles binned by tile of the fine grid (`s_tile_cells`, then the counting sort of
//!    [`crate::lattice::sort_into_cells`]);
//! 2. per component, the strengths spread tile by tile in shared memory, the tiles added to the
//!    grid (`s_spread_f` / `s_spread_d`), cuFFT R2C (or D2Z);
//! 3. the fine modes divided by the kernel's transform, multiplied by the core's Gaussian and
//!    folded onto the lattice spectrum (`s_fold_*`), straight into the pencil spectrum of the
//!    one-rank slab transforms ([`crate::slab_fourier::SlabFourier`]), whose solve then gives
//!    the strengths.
//!
//! The grid is `f32` where the tolerance allows ([`Precision::for_tolerance`]), `f64` below.
//! One core per call: after a re-interpolation every particle has `sigma0` and core spreading
//! keeps them equal; cores that differ by more than the tolerance allows ([`core_bin`]) are
//! reported, and the caller uses the direct sums.

pub mod device_slabs;
pub mod host_slabs;
pub mod slabs;

use crate::kernels::{per_element, Kernels};
use crate::laps::Laps;
use crate::lattice::{sort_into_cells, Binned, Rows};
use cudarc::cufft::{result as cufft_result, sys as cufft_sys, CudaFft};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use num_complex::Complex64;
use std::sync::Arc;
use vortex_cuda::launch::Spread;
use vortex_cuda::{GpuDevice, GpuError, GpuResult};
use vortex_method::reinterpolation::spreading::SpreadPlan;

/// The smallest tolerance of an `f32` grid: its round-off in the spread, the FFT and the
/// folding stays below it (measured against the host twin by the GPU test).
pub const F32_TOLERANCE: f64 = 1e-6;
/// Particles per chunk of `s_spread_*` (`SPREAD_CHUNK` in the source).
const CHUNK: usize = 32;
/// Threads of a spreading block and of `s_range` (`RANGE_THREADS`).
const THREADS: u32 = 256;
/// The shared memory a tile may take (three blocks fit an H100's 228 KB).
const SHARED_BUDGET: usize = 64 * 1024;

/// Precision of the fine grid and its FFT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    F64,
}

impl Precision {
    /// `f32` for tolerances from [`F32_TOLERANCE`] up, `f64` below.
    pub fn for_tolerance(tolerance: f64) -> Self {
        if tolerance >= F32_TOLERANCE {
            Self::F32
        } else {
            Self::F64
        }
    }

    pub fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F64 => 8,
        }
    }
}

/// Dynamic shared memory of one spreading block: the tile and its halo, `(tile + w)^3`
/// values, and per particle of a chunk `3 w` kernel values, its strength and 3 offsets.
pub fn shared_bytes(tile: usize, w: usize, p: Precision) -> usize {
    ((tile + w).pow(3) + CHUNK * 3 * w + CHUNK) * p.bytes() + CHUNK * 3 * 4
}

/// The tile edge: the largest divisor of `m` in `8..=32` whose block fits
/// [`SHARED_BUDGET`] (fewer halo points per grid point), 8 when none does.
pub fn tile_for(m: usize, w: usize, p: Precision) -> usize {
    (8..=32)
        .rev()
        .find(|&t| m % t == 0 && shared_bytes(t, w, p) <= SHARED_BUDGET)
        .unwrap_or(8)
}

/// Device bytes of a spreading plan: the grid, its spectrum and cuFFT's work area (as large
/// as the spectrum), and per lattice point the tile binning (cell, order, counts, the sorted
/// rows).
pub fn device_bytes(plan: &SpreadPlan, p: Precision) -> f64 {
    let (m, n3) = (plan.design.fine as f64, (plan.n as f64).powi(3));
    let b = p.bytes() as f64;
    m.powi(3) * b + 2.0 * (m * m * (m / 2.0 + 1.0) * 2.0 * b) + n3 * 80.0
}

/// The one core that stands for all of `[lo, hi]` (the middle variance), or `None` when
/// they differ by more than `tolerance` allows (the bins of
/// `vortex_method::reinterpolation::spreading::core_bins`).
pub fn core_bin(lo: f64, hi: f64, tolerance: f64) -> Option<f64> {
    let (vlo, vhi) = (lo * lo, hi * hi);
    (vhi <= vlo * (1.0 + std::f64::consts::E * tolerance / 2.0)).then(|| (0.5 * (vlo + vhi)).sqrt())
}

/// The smallest and largest of `x[..n]` on the device (the kernel `s_range`).
fn value_range(
    f: &Spread,
    s: &Arc<CudaStream>,
    x: &CudaSlice<f64>,
    n: usize,
) -> GpuResult<(f64, f64)> {
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 1024);
    let mut part = s.alloc_zeros::<f64>(2 * blocks)?;
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // x holds at least n doubles (the caller's), part 2 per block; blockDim.x =
    // RANGE_THREADS (its shared arrays)
    f.range(s, cfg, x, n as i32, &mut part)?;
    let v = s.clone_dtoh(&part)?;
    let lo = v.iter().step_by(2).copied().fold(f64::INFINITY, f64::min);
    let hi = v
        .iter()
        .skip(1)
        .step_by(2)
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    Ok((lo, hi))
}

/// The smallest and largest core `sigma[..n]` of particles on `dev`.
pub fn sigma_range(
    dev: &GpuDevice,
    s: &Arc<CudaStream>,
    sigma: &CudaSlice<f64>,
    n: usize,
) -> GpuResult<(f64, f64)> {
    value_range(&Spread::load(dev)?, s, sigma, n)
}

/// `d(q)` of the fold ([`SpreadPlan::axis_factors`]) on the device, computed once per core.
#[derive(Default)]
pub struct Factors(Vec<(u64, CudaSlice<f64>)>);

impl Factors {
    /// The `m` factors of `core` for `plan`.
    pub fn get(
        &mut self,
        s: &Arc<CudaStream>,
        plan: &SpreadPlan,
        core: f64,
    ) -> GpuResult<&CudaSlice<f64>> {
        let i = match self.0.iter().position(|(b, _)| *b == core.to_bits()) {
            Some(i) => i,
            None => {
                let d = s.clone_htod(&plan.axis_factors(core))?;
                self.0.push((core.to_bits(), d));
                self.0.len() - 1
            }
        };
        Ok(&self.0[i].1)
    }
}

/// The fine grid and its half spectrum in the plan's precision.
enum Buffers {
    F32 {
        grid: CudaSlice<f32>,
        spec: CudaSlice<f32>,
    },
    F64 {
        grid: CudaSlice<f64>,
        spec: CudaSlice<f64>,
    },
}

/// A spreading plan on the device: its kernels, cuFFT plan and buffers.
pub struct DeviceSpread {
    pub plan: SpreadPlan,
    pub precision: Precision,
    /// Fine points per tile edge.
    pub tile: usize,
    shared: usize,
    f: Spread,
    fft: CudaFft,
    buf: Buffers,
    factors: Factors,
}

fn fft_err(what: &'static str) -> impl Fn(cufft_result::CufftError) -> GpuError {
    move |e| GpuError::Unsupported(format!("cuFFT {what}: {e:?}"))
}

impl DeviceSpread {
    /// Compiles the kernels (once per device), plans the FFT and allocates the grid.
    pub fn new(dev: &GpuDevice, plan: SpreadPlan) -> GpuResult<Self> {
        let precision = Precision::for_tolerance(plan.tolerance);
        let (m, w) = (plan.design.fine, plan.design.kernel.width);
        let tile = tile_for(m, w, precision);
        let shared = shared_bytes(tile, w, precision);
        let f = Spread::load(dev)?;
        let spread = match precision {
            Precision::F32 => &f.spread_f,
            Precision::F64 => &f.spread_d,
        };
        spread.allow_dynamic_shared(shared)?;
        let s = dev.stream();
        let mi = m as i32;
        let (kind, buf) = match precision {
            Precision::F32 => (
                cufft_sys::cufftType::CUFFT_R2C,
                Buffers::F32 {
                    grid: s.alloc_zeros::<f32>(m * m * m)?,
                    spec: s.alloc_zeros::<f32>(2 * m * m * (m / 2 + 1))?,
                },
            ),
            Precision::F64 => (
                cufft_sys::cufftType::CUFFT_D2Z,
                Buffers::F64 {
                    grid: s.alloc_zeros::<f64>(m * m * m)?,
                    spec: s.alloc_zeros::<f64>(2 * m * m * (m / 2 + 1))?,
                },
            ),
        };
        let fft = CudaFft::plan_3d(mi, mi, mi, kind, s.clone()).map_err(fft_err("plan"))?;
        Ok(Self {
            plan,
            precision,
            tile,
            shared,
            f,
            fft,
            buf,
            factors: Factors::default(),
        })
    }

    /// The smallest and largest of `x[..n]`.
    pub fn range(
        &self,
        s: &Arc<CudaStream>,
        x: &CudaSlice<f64>,
        n: usize,
    ) -> GpuResult<(f64, f64)> {
        value_range(&self.f, s, x, n)
    }

    /// The particle rows sorted by tile of the fine grid.
    pub fn bin(&self, k: &Kernels, s: &Arc<CudaStream>, p: Rows<'_>) -> GpuResult<Binned> {
        let (m, n) = (self.plan.design.fine, p.n);
        let nt = m / self.tile;
        if n > i32::MAX as usize || nt.pow(3) >= i32::MAX as usize {
            return Err(GpuError::Unsupported(format!(
                "{n} particles on {} tiles: beyond i32 indices",
                nt.pow(3)
            )));
        }
        let mut cell = s.alloc_zeros::<i32>(n.max(1))?;
        let mut counts = s.alloc_zeros::<i32>(nt.pow(3))?;
        let g = self.plan.grid();
        let (n_i, m_i, t_i) = (n as i32, m as i32, self.tile as i32);
        // pos holds 3 n doubles, cell n ints, counts (m / tile)^3 (the kernel's tile indices
        // are clamped below m / tile per axis)
        let cfg = per_element(n);
        self.f.tile_cells(
            s,
            cfg,
            p.pos,
            n_i,
            g.origin,
            g.h,
            m_i,
            t_i,
            &mut cell,
            &mut counts,
        )?;
        sort_into_cells(k, s, p, &cell, counts)
    }

    /// The grid `=` the spread of component `comp` of the binned particles' strengths.
    pub fn spread(&mut self, s: &Arc<CudaStream>, b: &Binned, comp: usize) -> GpuResult<()> {
        let m = self.plan.design.fine;
        let kernel = self.plan.kernel();
        let g = self.plan.grid();
        let nt = m / self.tile;
        let (m_i, t_i, w_i, c_i) = (m as i32, self.tile as i32, kernel.width as i32, comp as i32);
        let cfg = LaunchConfig {
            grid_dim: (nt.pow(3) as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: self.shared as u32,
        };
        let beta = kernel.beta;
        let (o, hf) = (g.origin, g.h);
        // sp and sa hold the particles binned by the (m / tile)^3 tiles of `bin` (starts their
        // nt^3 + 1 offsets), the grid m^3 values; the dynamic shared memory of `shared_bytes`
        // is allowed by the attribute set in `new`
        match &mut self.buf {
            Buffers::F32 { grid, .. } => {
                s.memset_zeros(grid)?;
                self.f.spread_f(
                    s, cfg, &b.sp, &b.sa, &b.starts, m_i, t_i, w_i, beta, o, hf, c_i, grid,
                )
            }
            Buffers::F64 { grid, .. } => {
                s.memset_zeros(grid)?;
                self.f.spread_d(
                    s, cfg, &b.sp, &b.sa, &b.starts, m_i, t_i, w_i, beta, o, hf, c_i, grid,
                )
            }
        }
    }

    /// The grid's forward FFT into the half spectrum.
    pub fn transform(&mut self, s: &Arc<CudaStream>) -> GpuResult<()> {
        s.context().bind_to_thread()?;
        match &mut self.buf {
            Buffers::F32 { grid, spec } => {
                let (src, _g1) = grid.device_ptr(s);
                let (dst, _g2) = spec.device_ptr_mut(s);
                // SAFETY: the plan is an m^3 R2C of this stream; grid holds m^3 floats, spec
                // m^2 (m/2 + 1) complex.
                unsafe { cufft_result::exec_r2c(self.fft.handle(), src as *mut _, dst as *mut _) }
                    .map_err(fft_err("R2C"))
            }
            Buffers::F64 { grid, spec } => {
                let (src, _g1) = grid.device_ptr(s);
                let (dst, _g2) = spec.device_ptr_mut(s);
                // SAFETY: as above, D2Z on doubles.
                unsafe { cufft_result::exec_d2z(self.fft.handle(), src as *mut _, dst as *mut _) }
                    .map_err(fft_err("D2Z"))
            }
        }
    }

    /// Component `comp` of the lattice's pencil spectrum on one rank `out` (`3 clen` complex
    /// as f64 pairs, components interleaved, planes of constant z:
    /// [`crate::slab_fourier::SlabFourier::pencil_mut`]) `=` the fine spectrum deconvolved,
    /// times the Gaussian of `core`, folded.
    pub fn fold(
        &mut self,
        s: &Arc<CudaStream>,
        core: f64,
        out: &mut CudaSlice<f64>,
        comp: usize,
    ) -> GpuResult<()> {
        let (m, n) = (self.plan.design.fine, self.plan.n);
        let clen = n * n * (n / 2 + 1);
        if out.len() < 6 * clen {
            return Err(GpuError::Unsupported(format!(
                "a lattice spectrum of {} doubles for n = {n}",
                out.len()
            )));
        }
        let d = self.factors.get(s, &self.plan, core)?;
        let mut view = out.slice_mut(2 * comp..6 * clen);
        let (m_i, n_i) = (m as i32, n as i32);
        // spec holds m^2 (m/2 + 1) complex values (the R2C output), d m doubles; the view starts
        // at the component and the kernel writes every third complex value of it, clen in all
        // (the buffer's 3 clen complex values, checked above)
        let cfg = per_element(clen);
        match &self.buf {
            Buffers::F32 { spec, .. } => self.f.fold_f(s, cfg, spec, m_i, d, n_i, &mut view),
            Buffers::F64 { spec, .. } => self.f.fold_d(s, cfg, spec, m_i, d, n_i, &mut view),
        }
    }

    /// The three components' lattice spectra of the particles `p` with the one core `core`
    /// into `out` ([`DeviceSpread::fold`]).
    pub fn lattice_spectra(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        p: Rows<'_>,
        core: f64,
        out: &mut CudaSlice<f64>,
    ) -> GpuResult<()> {
        const SPREAD: [&str; 3] = ["spread x", "spread y", "spread z"];
        const FFT: [&str; 3] = ["FFT x", "FFT y", "FFT z"];
        const FOLD: [&str; 3] = ["fold x", "fold y", "fold z"];
        let mut laps = Laps::new(s, "spreading");
        let b = self.bin(k, s, p)?;
        laps.lap("tiles");
        for comp in 0..3 {
            self.spread(s, &b, comp)?;
            laps.lap(SPREAD[comp]);
            self.transform(s)?;
            laps.lap(FFT[comp]);
            self.fold(s, core, out, comp)?;
            laps.lap(FOLD[comp]);
        }
        Ok(())
    }
}

/// The one-rank pencil spectrum of the slab transforms (planes of constant z: element `(kz n +
/// ky) (n/2 + 1) + kx` holds the three components, complex numbers as pairs) in the layout of
/// `vortex_method::reinterpolation::spreading` (the host twin's): each component's half spectrum `(kx n + ky) (n/2 + 1) + kz` after the
/// other (a mode with `kx > n/2` the conjugate of `-k`).
pub fn half_spectra(pencil: &[f64], n: usize) -> Vec<Complex64> {
    let nh = n / 2 + 1;
    let clen = n * n * nh;
    let at = |kx: usize, ky: usize, kz: usize, c: usize| {
        let (kx, ky, kz, conj) = if kx < nh {
            (kx, ky, kz, false)
        } else {
            (n - kx, (n - ky) % n, (n - kz) % n, true)
        };
        let e = 2 * (3 * ((kz * n + ky) * nh + kx) + c);
        let v = Complex64::new(pencil[e], pencil[e + 1]);
        if conj {
            v.conj()
        } else {
            v
        }
    };
    let mut out = Vec::with_capacity(3 * clen);
    for c in 0..3 {
        for t in 0..clen {
            let (kx, ky, kz) = (t / (n * nh), (t / nh) % n, t % nh);
            out.push(at(kx, ky, kz, c));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use vortex_method::reinterpolation::spreading::{fold, grid};

    /// `fine_coordinate` of `kernels/spread.cu`.
    fn fine_coordinate(x: f64, origin: f64, hf: f64, m: usize) -> f64 {
        let mf = m as f64;
        let mut u = (x - origin) / hf;
        u -= mf * (u / mf).floor();
        if u >= 0.0 && u < mf {
            u
        } else {
            0.0
        }
    }

    fn wrap_index(i: i64, m: usize) -> usize {
        i.rem_euclid(m as i64) as usize
    }

    /// `s_tile_cells` and `spread_tiles` of `kernels/spread.cu` line by line on the host (f64,
    /// sequential): the tiles, the offsets into the halo, the flush.
    fn emulate_spread(plan: &SpreadPlan, tile: usize, pos: &[[f64; 3]], v: &[f64]) -> Vec<f64> {
        let m = plan.design.fine;
        emulate_tiles(plan, tile, None, pos, v, m * m * m)
    }

    /// `s_window_cells` and `spread_tiles<WINDOW = true>`: the window of `wl` planes from
    /// `zs`, stored `[j][y][x]`.
    fn emulate_window(
        plan: &SpreadPlan,
        tile: usize,
        (zs, wl): (usize, usize),
        pos: &[[f64; 3]],
        v: &[f64],
    ) -> Vec<f64> {
        let m = plan.design.fine;
        emulate_tiles(plan, tile, Some((zs, wl)), pos, v, wl * m * m)
    }

    /// `spread_tiles` of `kernels/spread.cu` line by line: the whole grid (`win = None`) or a
    /// window `(zs, wl)`.
    fn emulate_tiles(
        plan: &SpreadPlan,
        tile: usize,
        win: Option<(usize, usize)>,
        pos: &[[f64; 3]],
        v: &[f64],
        len: usize,
    ) -> Vec<f64> {
        let (m, k) = (plan.design.fine, plan.design.kernel);
        let g = plan.grid();
        let (w, nt) = (k.width, m / tile);
        let ntz = win.map_or(nt, |(_, wl)| wl.div_ceil(tile));
        let (pp, hh) = (tile + w, (w / 2) as i64);
        let mut out = vec![0.0; len];
        let coord = |x: &[f64; 3], c: usize| {
            let u = fine_coordinate(x[c], g.origin, g.h, m);
            match win {
                Some((zs, _)) if c == 2 => {
                    if u >= zs as f64 {
                        u - zs as f64
                    } else {
                        u - zs as f64 + m as f64
                    }
                }
                _ => u,
            }
        };
        let cell = |x: &[f64; 3]| -> [usize; 3] {
            std::array::from_fn(|c| {
                let top = if c == 2 { ntz } else { nt };
                ((coord(x, c) / tile as f64) as usize).min(top - 1)
            })
        };
        let index = |t0: [usize; 3], a: usize, bb: usize, c: usize| -> Option<usize> {
            let gi = |t: usize, o: usize| wrap_index((t * tile + o) as i64 - hh, m);
            let (gx, gy) = (gi(t0[0], a), gi(t0[1], bb));
            match win {
                None => Some((gx * m + gy) * m + gi(t0[2], c)),
                Some((_, wl)) => {
                    let mut j = (t0[2] * tile + c) as i64 - hh;
                    if wl == m {
                        j = j.rem_euclid(m as i64); // a window of the whole grid wraps
                    }
                    (0..wl as i64)
                        .contains(&j)
                        .then(|| (j as usize * m + gy) * m + gx)
                }
            }
        };
        let half = 0.5 * w as f64;
        for b in 0..nt * nt * ntz {
            let t0 = [b / (nt * ntz), (b / ntz) % nt, b % ntz];
            let mut sh = vec![0.0; pp.pow(3)];
            for (x, &val) in pos.iter().zip(v).filter(|(x, _)| cell(x) == t0) {
                let mut off = [0i64; 3];
                let mut kv = [[0.0; 16]; 3];
                for c in 0..3 {
                    let d = coord(x, c) - (t0[c] * tile) as f64;
                    let l0 = (d - half).ceil();
                    off[c] = l0 as i64 + hh;
                    for (a, kva) in kv[c][..w].iter_mut().enumerate() {
                        *kva = k.value((l0 + a as f64 - d) / half);
                    }
                }
                for a in 0..w {
                    for bb in 0..w {
                        let vv = val * kv[0][a] * kv[1][bb];
                        let (ox, oy, oz) = (off[0] + a as i64, off[1] + bb as i64, off[2]);
                        let p = pp as i64;
                        let inside = (0..p).contains(&ox)
                            && (0..p).contains(&oy)
                            && oz >= 0
                            && oz + w as i64 <= p;
                        assert!(inside, "a footprint beyond the halo: {ox} {oy} {oz}");
                        for c in 0..w {
                            sh[((ox * p + oy) * p + oz) as usize + c] += vv * kv[2][c];
                        }
                    }
                }
            }
            for (i, &val) in sh.iter().enumerate() {
                let (a, bb, c) = (i / (pp * pp), (i / pp) % pp, i % pp);
                match index(t0, a, bb, c) {
                    Some(gidx) => out[gidx] += val,
                    None => assert_eq!(val, 0.0, "a value outside the window"),
                }
            }
        }
        out
    }

    /// `fold_modes` of `kernels/spread.cu` on the host: the modes of the one-rank pencil
    /// spectrum (`t = (kz n + ky) nh + kx`), the alias ranges by floor division and the
    /// conjugate of `-q` for `qz < 0`.
    fn emulate_fold(spec: &[Complex64], m: usize, d: &[f64], n: usize) -> Vec<Complex64> {
        let (nh, mh, half) = (n / 2 + 1, m / 2 + 1, (m / 2) as i64);
        let fdiv = |a: i64, b: i64| a.div_euclid(b);
        let mut out = vec![Complex64::new(0.0, 0.0); n * n * nh];
        for (t, o) in out.iter_mut().enumerate() {
            let k = [t % nh, (t / nh) % n, t / (n * nh)].map(|v| v as i64);
            let nn = n as i64;
            let lo = k.map(|kc| fdiv(-half - kc, nn) + 1);
            let hi = k.map(|kc| fdiv(half - kc, nn));
            for jx in lo[0]..=hi[0] {
                let qx = k[0] + jx * nn;
                for jy in lo[1]..=hi[1] {
                    let qy = k[1] + jy * nn;
                    for jz in lo[2]..=hi[2] {
                        let qz = k[2] + jz * nn;
                        let f = d[wrap_index(qx, m)] * d[wrap_index(qy, m)] * d[wrap_index(qz, m)];
                        let v = if qz >= 0 {
                            spec[(wrap_index(qx, m) * m + wrap_index(qy, m)) * mh + qz as usize]
                        } else {
                            spec[(wrap_index(-qx, m) * m + wrap_index(-qy, m)) * mh
                                + (-qz) as usize]
                                .conj()
                        };
                        *o += v * f;
                    }
                }
            }
        }
        out
    }

    /// The device algorithm's index arithmetic (tiles, halo offsets, flush; alias ranges and
    /// conjugates) against the host twin's spread and fold, with footprints across every face
    /// and tiles of 8 and 16.
    #[test]
    fn emulated_kernels_match_the_host_twin() {
        let (n, l) = (32usize, 2.0 * std::f64::consts::PI);
        let h = l / n as f64;
        let plan = SpreadPlan::new(n, l, 0.8 * h, 1e-6).unwrap();
        let m = plan.design.fine;
        assert_eq!(m % 16, 0, "the test covers tiles of 8 and 16");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let pos: Vec<[f64; 3]> = (0..600)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-0.6 * l..0.6 * l)))
            .collect();
        let v: Vec<f64> = (0..pos.len()).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let k = plan.design.kernel;
        let g = plan.grid();
        let all: Vec<usize> = (0..pos.len()).collect();
        let mut want = vec![0.0; m * m * m];
        grid::spread(
            &k,
            &g,
            &pos,
            &v,
            &grid::Buckets::new(&k, &g, &pos, &all),
            &mut want,
        );
        for tile in [8usize, 16] {
            let got = emulate_spread(&plan, tile, &pos, &v);
            let err = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-12, "tile {tile}: {err:e}");
        }
        let fft = vortex_spectral::fft::Fft3::new(m);
        let mut spec = vec![Complex64::new(0.0, 0.0); fft.complex_len()];
        fft.forward(&want, &mut spec);
        let d = plan.axis_factors(0.9 * h);
        let mut host = vec![Complex64::new(0.0, 0.0); n * n * (n / 2 + 1)];
        fold::fold(&spec, m, &d, n, &mut host);
        // the emulated pencil against the host's half spectrum (half axis z): a mode with kz
        // <= n/2 is the host's own value (the same sums, to round-off); one with kz > n/2 the
        // conjugate of the host's -k, which the Hermitian pairs of the fine spectrum's qz = 0
        // and m/2 planes give only to their FFT round-off, amplified by the deconvolution
        let dev = emulate_fold(&spec, m, &d, n);
        let scale = host.iter().map(|b| b.norm()).fold(0.0, f64::max);
        let nh = n / 2 + 1;
        let (mut own, mut conj) = (0.0f64, 0.0f64);
        for (t, v) in dev.iter().enumerate() {
            let (kx, ky, kz) = (t % nh, (t / nh) % n, t / (n * nh));
            if kz < nh {
                own = own.max((v - host[(kx * n + ky) * nh + kz]).norm());
            } else {
                let w = host[(((n - kx) % n) * n + (n - ky) % n) * nh + n - kz].conj();
                conj = conj.max((v - w).norm());
            }
        }
        assert!(own <= 1e-13 * scale, "{own:e} of {scale:e}");
        assert!(conj <= 1e-9 * scale, "{conj:e} of {scale:e}");
    }

    /// The window variant of the kernel (`s_window_cells`, `spread_tiles<WINDOW = true>`)
    /// against the host twin of the spreading over slabs, on a window of each of 1 to 4 ranks
    /// (one wrapping past the last plane, one the whole grid), tiles of 8 and 16.
    #[test]
    fn emulated_window_matches_the_slab_twin() {
        use super::host_slabs::{fine_bounds_at_cuts, rank_share, spread_window};
        use super::slabs::FineSlabs;
        let (n, l) = (32usize, 2.0 * std::f64::consts::PI);
        let h = l / n as f64;
        let plan = SpreadPlan::new(n, l, 0.8 * h, 1e-6).unwrap();
        let m = plan.design.fine;
        let seed: u64 = rand::random();
        let (pos, str) = super::host_slabs::random_set(700, l, seed);
        for cuts in [vec![], vec![-2.5, 0.4, 1.9]] {
            let bounds = fine_bounds_at_cuts(&plan, &cuts);
            for r in 0..=cuts.len() {
                let slabs = FineSlabs::new(m, &bounds, plan.design.kernel.width, r);
                let (p, a) = rank_share(&pos, &str, l, &cuts, r);
                let v: Vec<f64> = a.iter().map(|x| x[1]).collect();
                let want = spread_window(&plan, &slabs, &p, &v).unwrap();
                let win = slabs.window(r);
                for tile in [8usize, 16] {
                    let got = emulate_window(&plan, tile, (win.start, win.len), &p, &v);
                    let err = got
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0, f64::max);
                    assert!(
                        err < 1e-12,
                        "seed {seed}, cuts {cuts:?} rank {r} tile {tile}: {err:e}"
                    );
                }
            }
        }
    }

    /// [`half_spectra`] reads back, in the host's layout, a pencil written from it.
    #[test]
    fn half_spectra_inverts_the_pencil_layout() {
        let n = 6usize;
        let nh = n / 2 + 1;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let host: Vec<Complex64> = (0..3 * n * n * nh)
            .map(|_| Complex64::new(rng.gen_range(-1.0..1.0), rng.gen_range(-1.0..1.0)))
            .collect();
        let mut pencil = vec![0.0; 6 * n * n * nh];
        for c in 0..3 {
            for kx in 0..nh {
                for ky in 0..n {
                    for kz in 0..nh {
                        let v = host[c * n * n * nh + (kx * n + ky) * nh + kz];
                        let e = 2 * (3 * ((kz * n + ky) * nh + kx) + c);
                        pencil[e] = v.re;
                        pencil[e + 1] = v.im;
                    }
                }
            }
        }
        let got = half_spectra(&pencil, n);
        for c in 0..3 {
            for kx in 0..nh {
                for ky in 0..n {
                    for kz in 0..nh {
                        let t = c * n * n * nh + (kx * n + ky) * nh + kz;
                        assert_eq!(got[t], host[t], "component {c}, mode ({kx}, {ky}, {kz})");
                    }
                }
            }
        }
    }

    #[test]
    fn tiles_divide_the_grid_and_fit_the_budget() {
        for (m, w, p) in [
            (600usize, 8usize, Precision::F32),
            (640, 8, Precision::F32),
            (896, 10, Precision::F64),
            (56, 10, Precision::F64),
            (40, 16, Precision::F64),
        ] {
            let t = tile_for(m, w, p);
            assert_eq!(m % t, 0, "{m} {w}");
            assert!(t == 8 || shared_bytes(t, w, p) <= SHARED_BUDGET);
        }
        assert_eq!(tile_for(640, 8, Precision::F32), 16);
    }

    #[test]
    fn one_core_within_the_tolerance() {
        assert_eq!(core_bin(0.3, 0.3, 1e-6), Some(0.3));
        assert!(core_bin(0.3, 0.3 * (1.0 + 1e-7), 1e-6).is_some());
        assert!(core_bin(0.3, 0.31, 1e-6).is_none());
    }
}
