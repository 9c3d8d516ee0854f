//! The Gaussian sums by spreading over slabs on the device: the phases of [`super::slabs`]
//! (spread onto the window, halo planes to their owners, 2-D transforms and the fold of `x`
//! and `y` per own fine plane, the transpose and the transforms along `z` of a
//! [`SlabFourier`] of depth `m`, the fold of `z`) into the lattice's pencil spectrum, where the
//! slab solve continues. The host twin is [`super::host_slabs`].
//!
//! The fine planes are doubles on several ranks (the halo exchange moves doubles); one
//! component at a time goes through the window, the halo and the plane transforms, the three
//! together through the transpose.

use super::slabs::FineSlabs;
use super::{shared_bytes, tile_for, Factors, Precision};
use crate::kernels::{per_element, Kernels};
use crate::laps::Laps;
use crate::lattice::{sort_into_cells, Binned, Rows};
use crate::slab_fourier::{Ranks, SlabFourier};
use cudarc::cufft::{result as cufft_result, sys as cufft_sys, CudaFft};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use std::sync::Arc;
use vortex_cuda::launch::Spread;
use vortex_cuda::{GpuDevice, GpuError, GpuResult};
use vortex_method::reinterpolation::spreading::SpreadPlan;

/// Threads of a spreading block.
const THREADS: u32 = 256;

fn fft_err(what: &'static str) -> impl Fn(cufft_result::CufftError) -> GpuError {
    move |e| GpuError::Unsupported(format!("cuFFT {what}: {e:?}"))
}

/// The spreading over slabs of one rank: kernels, plans and buffers of one fine split.
pub struct DeviceSlabSpread {
    pub plan: SpreadPlan,
    pub slabs: FineSlabs,
    /// Fine points per tile edge.
    pub tile: usize,
    shared: usize,
    f: Spread,
    /// D2Z of the own fine planes (`[y][x]`, batched; none on a rank without planes).
    planes: Option<CudaFft>,
    /// The fine layout's transpose and transforms along `z`.
    fine: SlabFourier,
    /// The window, `wl m^2` doubles; the halo messages; the own planes, `planes m^2`; their
    /// half spectra, `planes m (m/2 + 1)` complex.
    window: CudaSlice<f64>,
    send: CudaSlice<f64>,
    recv: CudaSlice<f64>,
    owned: CudaSlice<f64>,
    spec: CudaSlice<f64>,
    factors: Factors,
}

/// Device bytes of one rank's spreading over `slabs` for the lattice `n`: window, messages,
/// own planes and their spectra, and the fine layout's transforms.
pub fn slab_device_bytes(plan: &SpreadPlan, slabs: &FineSlabs) -> f64 {
    let m = plan.design.fine;
    let plane = (m * m) as f64 * 8.0;
    let own = slabs.owned(slabs.rank()).len() as f64;
    let window = slabs.window(slabs.rank()).len as f64;
    let fine = slabs
        .layout(plan.n)
        .map(|l| l.device_bytes() as f64)
        .unwrap_or(0.0);
    plane * (3.0 * window + own) + own * (m * (m / 2 + 1)) as f64 * 16.0 * 2.0 + fine
}

impl DeviceSlabSpread {
    /// Compiles the kernels (once per device), plans the transforms and allocates the buffers
    /// of this rank's part of `slabs`.
    pub fn new(
        dev: &GpuDevice,
        stream: Arc<CudaStream>,
        plan: SpreadPlan,
        slabs: FineSlabs,
    ) -> GpuResult<Self> {
        let (m, w) = (plan.design.fine, plan.design.kernel.width);
        let tile = tile_for(m, w, Precision::F64);
        let shared = shared_bytes(tile, w, Precision::F64);
        let f = Spread::load(dev)?;
        f.spread_window_d.allow_dynamic_shared(shared)?;
        let s = &stream;
        let me = slabs.rank();
        let own = slabs.owned(me).len();
        let planes = match own {
            0 => None,
            _ => {
                let (mi, mh) = (m as i32, (m / 2 + 1) as i32);
                let d2z = cufft_sys::cufftType::CUFFT_D2Z;
                let real = [mi, mi];
                let half = [mi, mh];
                let p = CudaFft::plan_many(
                    &real,
                    Some(&real),
                    1,
                    mi * mi,
                    Some(&half),
                    1,
                    mi * mh,
                    d2z,
                    own as i32,
                    s.clone(),
                )
                .map_err(fft_err("D2Z plan"))?;
                Some(p)
            }
        };
        let layout = slabs.layout(plan.n)?;
        let fine = SlabFourier::new(dev, stream.clone(), layout)?;
        let parts = slabs
            .halo_parts(m * m)
            .map_err(|e| GpuError::Unsupported(e.to_string()))?;
        Ok(Self {
            window: s.alloc_zeros::<f64>(slabs.window_len(m * m).max(1))?,
            send: s.alloc_zeros::<f64>(parts.send_extent().max(1))?,
            recv: s.alloc_zeros::<f64>(parts.recv_extent().max(1))?,
            owned: s.alloc_zeros::<f64>((own * m * m).max(1))?,
            spec: s.alloc_zeros::<f64>((2 * own * m * (m / 2 + 1)).max(1))?,
            plan,
            slabs,
            tile,
            shared,
            f,
            planes,
            fine,
            factors: Factors::default(),
        })
    }

    /// Component-wise, this rank's part of the lattice's pencil spectrum `out` (`3 clen`
    /// complex as f64 pairs, the lattice layout's pencil) from the particles `p` (each inside
    /// this rank's slab) with the one core `core`. `false` (and nothing written) when a
    /// particle's footprint leaves the window: the caller uses the direct sums. Collective.
    pub fn lattice_spectra(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        ranks: Ranks<'_>,
        p: Rows<'_>,
        core: f64,
        out: &mut CudaSlice<f64>,
    ) -> GpuResult<bool> {
        let mut laps = Laps::new(s, "spreading over slabs");
        let b = self.bin(k, s, p)?;
        if ranks_any(ranks.comm, b.is_none()) {
            return Ok(false);
        }
        let b = b.expect("every rank's particles are inside their windows");
        laps.lap("tiles");
        let mut factors = std::mem::take(&mut self.factors);
        let d = factors.get(s, &self.plan, core)?;
        for comp in 0..3 {
            self.spread(s, &b, comp)?;
            laps.lap("spread");
            self.halo(k, s, ranks.comm, &mut *ranks.exchange)?;
            laps.lap("halo");
            self.transform_planes(s)?;
            self.fold_xy(s, d, comp)?;
            laps.lap("planes");
        }
        self.fine.forward_from_slab(ranks)?;
        laps.lap("transpose and z");
        self.fold_z(s, d, out)?;
        self.factors = factors;
        laps.lap("fold z");
        Ok(true)
    }

    /// The particle rows sorted by window tile, or `None` when one's footprint leaves the
    /// window.
    fn bin(&self, k: &Kernels, s: &Arc<CudaStream>, p: Rows<'_>) -> GpuResult<Option<Binned>> {
        let (m, n) = (self.plan.design.fine, p.n);
        let win = self.slabs.window(self.slabs.rank());
        let (nt, ntz) = (m / self.tile, win.len.div_ceil(self.tile));
        if win.len == 0 && n > 0 {
            return Ok(None); // particles on a rank without fine planes: none of its slab
        }
        if n > i32::MAX as usize || nt * nt * ntz >= i32::MAX as usize {
            return Err(GpuError::Unsupported(format!(
                "{n} particles on {} tiles: beyond i32 indices",
                nt * nt * ntz
            )));
        }
        let mut cell = s.alloc_zeros::<i32>(n.max(1))?;
        let mut counts = s.alloc_zeros::<i32>((nt * nt * ntz).max(1))?;
        let mut bad = s.alloc_zeros::<i32>(1)?;
        let g = self.plan.grid();
        let w = self.plan.design.kernel.width as i32;
        let (m_i, t_i) = (m as i32, self.tile as i32);
        let (zs, wl) = (win.start as i32, win.len as i32);
        // pos holds 3 n doubles, cell n ints, counts nt^2 ntz (the kernel clamps the tile
        // indices below nt and ntz), bad one int
        self.f.window_cells(
            s,
            per_element(n),
            p.pos,
            n as i32,
            g.origin,
            g.h,
            m_i,
            t_i,
            w,
            zs,
            wl,
            &mut cell,
            &mut counts,
            &mut bad,
        )?;
        if s.clone_dtoh(&bad)?[0] != 0 {
            return Ok(None);
        }
        sort_into_cells(k, s, p, &cell, counts).map(Some)
    }

    /// The window `=` the spread of component `comp` of the binned particles.
    fn spread(&mut self, s: &Arc<CudaStream>, b: &Binned, comp: usize) -> GpuResult<()> {
        let m = self.plan.design.fine;
        let kernel = self.plan.kernel();
        let g = self.plan.grid();
        let win = self.slabs.window(self.slabs.rank());
        let (nt, ntz) = (m / self.tile, win.len.div_ceil(self.tile));
        s.memset_zeros(&mut self.window)?;
        if win.len == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: ((nt * nt * ntz) as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: self.shared as u32,
        };
        let (m_i, t_i, w_i, c_i) = (m as i32, self.tile as i32, kernel.width as i32, comp as i32);
        let (zs, wl) = (win.start as i32, win.len as i32);
        // sp and sa hold the particles binned by the window's nt^2 ntz tiles (starts their
        // offsets), the window wl m^2 doubles; the dynamic shared memory is allowed in `new`
        self.f.spread_window_d(
            s,
            cfg,
            &b.sp,
            &b.sa,
            &b.starts,
            m_i,
            t_i,
            w_i,
            kernel.beta,
            g.origin,
            g.h,
            c_i,
            zs,
            wl,
            &mut self.window,
        )
    }

    /// The own planes `=` the window planes of every rank that fall on them, added in rank
    /// order (collective).
    fn halo(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        comm: &dyn vortex_domain::Comm,
        exchange: &mut dyn vortex_exchange::DeviceExchange,
    ) -> GpuResult<()> {
        let sl = &self.slabs;
        let (me, plane) = (sl.rank(), self.plan.design.fine.pow(2));
        let err = |e: vortex_exchange::ExchangeError| GpuError::Unsupported(e.to_string());
        let parts = sl.halo_parts(plane).map_err(err)?;
        let mut at = 0;
        for d in 0..sl.ranks() {
            for run in sl.runs(me, d) {
                let j = sl.local(me, run.start).expect("runs lie in the window");
                let len = run.len() * plane;
                let src = self.window.slice(j * plane..j * plane + len);
                s.memcpy_dtod(&src, &mut self.send.slice_mut(at..at + len))?;
                at += len;
            }
        }
        exchange
            .alltoallv(comm, &self.send, &mut self.recv, &parts)
            .map_err(err)?;
        s.memset_zeros(&mut self.owned)?;
        let own0 = sl.owned(me).start;
        for q in 0..sl.ranks() {
            let mut at = parts.recv(q).start;
            for p in sl.runs(q, me).into_iter().flatten() {
                let o = (p - own0) * plane;
                let mut dst = self.owned.slice_mut(o..o + plane);
                let src = self.recv.slice(at..at + plane);
                // both views hold `plane` doubles
                k.axpy(s, per_element(plane), &mut dst, 1.0, &src, plane as i32)?;
                at += plane;
            }
        }
        Ok(())
    }

    /// The 2-D half spectra of the own planes.
    fn transform_planes(&mut self, s: &Arc<CudaStream>) -> GpuResult<()> {
        let Some(fft) = &self.planes else {
            return Ok(());
        };
        s.context().bind_to_thread()?;
        let (src, _g1) = self.owned.device_ptr(s);
        let (dst, _g2) = self.spec.device_ptr_mut(s);
        // SAFETY: the plan is a D2Z of `own` planes of m^2 doubles into as many m (m/2 + 1)
        // complex, the sizes of `owned` and `spec`.
        unsafe { cufft_result::exec_d2z(fft.handle(), src as *mut _, dst as *mut _) }
            .map_err(fft_err("D2Z"))
    }

    /// Component `comp` of the fine layout's slab spectrum from the plane spectra.
    fn fold_xy(&mut self, s: &Arc<CudaStream>, d: &CudaSlice<f64>, comp: usize) -> GpuResult<()> {
        let (m, n) = (self.plan.design.fine, self.plan.n);
        let own = self.slabs.owned(self.slabs.rank()).len();
        let count = own * n * (n / 2 + 1);
        if count == 0 {
            return Ok(());
        }
        let out = self.fine.slab_mut();
        // spec holds own m (m/2 + 1) complex, d m doubles, the slab spectrum 3 own n (n/2 + 1)
        // complex (the fine layout's slab_len)
        self.f.fold_xy_d(
            s,
            per_element(count),
            &self.spec,
            own as i32,
            m as i32,
            d,
            n as i32,
            comp as i32,
            out,
        )
    }

    /// The lattice's pencil spectrum `out` from the fine pencil.
    fn fold_z(
        &mut self,
        s: &Arc<CudaStream>,
        d: &CudaSlice<f64>,
        out: &mut CudaSlice<f64>,
    ) -> GpuResult<()> {
        let (m, n) = (self.plan.design.fine, self.plan.n);
        let cols = self.fine.layout().pencil_len() / m;
        if out.len() < 2 * n * cols {
            return Err(GpuError::Unsupported(format!(
                "a lattice pencil of {} doubles for {n} x {cols} modes",
                out.len()
            )));
        }
        if cols == 0 {
            return Ok(());
        }
        // the fine pencil holds m cols complex, d m doubles, out n cols complex (checked)
        self.f.fold_z(
            s,
            per_element(n * cols),
            self.fine.pencil(),
            m as i32,
            cols as i64,
            d,
            n as i32,
            out,
        )
    }
}

/// Whether `flag` holds on any rank (collective).
fn ranks_any(comm: &dyn vortex_domain::Comm, flag: bool) -> bool {
    let mut v = [flag as u8 as f64];
    comm.allreduce_f64(&mut v, vortex_domain::ReduceOp::Max);
    v[0] > 0.0
}
