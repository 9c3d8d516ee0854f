//! Phase 7 of [`UniformFmm`]'s pipeline: M2L per level over the implicit stencil, with the
//! kernel of `UniformParams::m2l` below the top (rotations `u_m2l`, one block per target
//! cell; or the dense per-offset matrices of [`crate::uniform::dense_m2l`], on the FP32 pipes,
//! `u_m2l_dense`, or on the FP64 tensor cores, `u_m2l_tensor`).

use super::*;
use crate::uniform::dense_m2l::{
    compact_map, dense_launch, dofs, padded_dofs, tensor_groups, DenseM2l, CLASSES, DENSE_THREADS,
    TENSOR_THREADS,
};
use vortex_cuda::launch::Uniform;

/// The dense M2L matrices of one order on the device (the layout of [`DenseM2l::mats`]: f32
/// for `u_m2l_dense`, f64 for `u_m2l_tensor`, each made at its first use) and the compact
/// map of the coefficients.
pub(crate) struct DenseTables {
    order: usize,
    mats: Option<CudaSlice<f32>>,
    mats64: Option<CudaSlice<f64>>,
    map: CudaSlice<i32>,
}

impl DenseTables {
    /// The matrices of `kernel` (`Dense` or `Tensor`), built by `ensure_dense`.
    fn matrices(&self, kernel: M2lKernel) -> Matrices<'_> {
        match kernel {
            M2lKernel::Tensor => Matrices::F64(self.mats64.as_ref().expect("ensure_dense")),
            _ => Matrices::F32(self.mats.as_ref().expect("ensure_dense")),
        }
    }
}

/// The device matrices of one dense kernel.
enum Matrices<'a> {
    F32(&'a CudaSlice<f32>),
    F64(&'a CudaSlice<f64>),
}

impl UniformFmm {
    /// Takes the M2L kernel and the core of `params` for the evaluations that follow (called
    /// by the entry points).
    pub(crate) fn select_m2l(&self, params: &UniformParams) {
        *self.m2l.lock().expect("m2l poisoned") = params.m2l;
        *self.core.lock().expect("uniform core poisoned") = params.core;
    }

    /// The M2L kernel below the top at order `p` (logged with its reason when it changes).
    fn m2l_kernel(&self, p: usize) -> M2lKernel {
        let (k, why) = self.m2l.lock().expect("m2l poisoned").resolve(p);
        static LAST: Mutex<Option<(usize, M2lKernel)>> = Mutex::new(None);
        let mut last = LAST.lock().expect("m2l log poisoned");
        if *last != Some((p, k)) {
            log::info!("uniform grid M2L at p = {p}: {k:?} ({why})");
            *last = Some((p, k));
        }
        k
    }

    /// Makes sure the dense matrices of order `p` for `kernel` (`Dense`: f32, `Tensor`: f64)
    /// are on the device.
    fn ensure_dense(&self, p: usize, kernel: M2lKernel) -> GpuResult<()> {
        let mut d = self.dense.lock().expect("dense poisoned");
        let s = self.dev.stream();
        if !matches!(&*d, Some(x) if x.order == p) {
            *d = None; // the previous order's matrices go first
            *d = Some(DenseTables {
                order: p,
                mats: None,
                mats64: None,
                map: s.clone_htod(&compact_map(p).0)?,
            });
        }
        let t = d.as_mut().expect("made above");
        let need = match kernel {
            M2lKernel::Tensor => t.mats64.is_none(),
            _ => t.mats.is_none(),
        };
        if need {
            // built in f64 on the host for the precision asked (not kept on the host)
            let t0 = Instant::now();
            let host = DenseM2l::new(p);
            match kernel {
                M2lKernel::Tensor => t.mats64 = Some(s.clone_htod(&host.mats)?),
                _ => t.mats = Some(s.clone_htod(&host.to_f32())?),
            }
            log::debug!(
                "uniform FMM: dense M2L matrices p = {p} for {kernel:?} ({} values) built in {:.0} ms",
                host.mats.len(),
                t0.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(())
    }

    /// Phase 7: M2L per level over the implicit stencil (level 0 skipped when every top cell
    /// is a neighbour of every other; level 0 always by rotations), the target cells
    /// overlapping the own planes.
    pub(super) fn m2l_pass(
        &self,
        ps: &Pass,
        xp: &mut Expansions,
        tb: &Tables,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let (g, p) = (&ps.g, ps.p);
        if ps.region.is_whole() {
            tm.m2l_translations = crate::uniform::m2l_count(g);
        }
        let kernel = self.m2l_kernel(p);
        let dense = matches!(kernel, M2lKernel::Dense | M2lKernel::Tensor) && g.k >= 1;
        if dense {
            self.ensure_dense(p, kernel)?;
        }
        let dguard = self.dense.lock().expect("dense poisoned");
        tm.k_m2l = self.event_timed(|| {
            for l in 0..=g.k {
                if l == 0 && g.m < 3 {
                    continue; // every top cell is a neighbour of every other
                }
                match (&*dguard, dense && l >= 1) {
                    (Some(d), true) => self.m2l_level_dense(ps, xp, d, kernel, l)?,
                    _ => self.m2l_level_rotation(ps, xp, tb, l)?,
                }
            }
            Ok(())
        })?;
        Ok(())
    }

    /// The rotation-based M2L of level `l`: one block per target cell.
    fn m2l_level_rotation(
        &self,
        ps: &Pass,
        xp: &mut Expansions,
        tb: &Tables,
        l: usize,
    ) -> GpuResult<()> {
        let (s, g, p) = (&ps.s, &ps.g, ps.p);
        let (r_i, trt, periodic_i) = (tb.r as i32, tr_threads(p), ps.periodic_i());
        let k = self.kernels(p)?;
        let (off, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
        let top = (l == 0) as i32;
        let w = g.width(l) as f32;
        let (c0, cnt) = ps.region.level_cells(l);
        // one block per target cell c0 .. c0 + cnt of level l (inside the level); the
        // stencil's offsets are at most R = tb.r (ensure_tables)
        // per target the translations of its list (189 below the top, fewer at the faces
        // of a free-space grid: counted as 189) and the sources read from L2; the locals
        // read and written
        let nsrc = if l == 0 { g.n_at(0).pow(3) } else { 189 };
        let e = (6 * ncoef(p) * 4) as f64;
        let flops = (cnt * nsrc) as f64 * profile::rotation_flops(p, 1);
        let work = Work::flops(flops, Unit::Fp32, 2.0 * e * cnt as f64);
        self.prof(&format!("u_m2l rotation L{l}"), 1, work, || {
            k.uniform.m2l(
                s,
                blocks(cnt, trt),
                &xp.mult,
                &mut xp.loc,
                &tb.rots,
                &tb.z_m2l,
                &tb.toff,
                r_i,
                off,
                nl,
                top,
                periodic_i,
                w,
                c0 as i32,
            )
        })
    }

    /// The dense M2L of level `l >= 1` by `kernel` (`Dense` or `Tensor`): per parity class,
    /// blocks of 32 targets.
    fn m2l_level_dense(
        &self,
        ps: &Pass,
        xp: &mut Expansions,
        d: &DenseTables,
        kernel: M2lKernel,
        l: usize,
    ) -> GpuResult<()> {
        let (g, p) = (&ps.g, ps.p);
        let nl = g.n_at(l);
        let (c0, cnt) = ps.region.level_cells(l);
        let (zlo, zhi) = (c0 / (nl * nl), (c0 + cnt) / (nl * nl));
        let ln = dense_launch(nl, zlo, zhi);
        let k = self.kernels(p)?;
        let args = DenseArgs {
            level_off: g.level_offset(l) as i32,
            nl: nl as i32,
            periodic: ps.periodic_i(),
            w: g.width(l) as f32,
            z: (zlo as i32, zhi as i32),
            q: (ln.q0 as i32, ln.qcount as i32),
        };
        // every block: 189 products of the DP x DP matrix with 96 columns (padded rows and
        // zero columns included, as executed); the multipoles and locals of the level
        let dp = padded_dofs(p) as f64;
        let flops = (ln.tiles * CLASSES) as f64 * 189.0 * 2.0 * dp * dp * 96.0;
        let (unit, word, name) = match kernel {
            M2lKernel::Tensor => (Unit::Fp64Tensor, 8.0, "u_m2l_tensor"),
            _ => (Unit::Fp32, 4.0, "u_m2l_dense"),
        };
        let bytes = 2.0 * (cnt * 6 * ncoef(p) * 4) as f64 + 189.0 * dp * dp * word;
        let work = Work::flops(flops, unit, bytes);
        let mats = d.matrices(kernel);
        self.prof(&format!("{name} L{l}"), 1, work, || {
            launch_dense(
                &ps.s,
                &k.uniform,
                &xp.mult,
                &mut xp.loc,
                d,
                mats,
                &args,
                ln.tiles,
            )
        })
    }

    /// [`UniformFmm::dense_m2l_level_by`] with the FP32 kernel (`u_m2l_dense`).
    #[allow(clippy::too_many_arguments)]
    pub fn dense_m2l_level(
        &self,
        p: usize,
        nl: usize,
        periodic: bool,
        w: f64,
        zlo: usize,
        zhi: usize,
        mult: &[f32],
    ) -> GpuResult<Vec<f32>> {
        self.dense_m2l_level_by(M2lKernel::Dense, p, nl, periodic, w, zlo, zhi, mult)
    }

    /// The dense M2L of one level on the device by `kernel` (`Dense` or `Tensor`), alone (for
    /// tests and timings): `mult` holds the level's multipoles (`nl^3` cells of
    /// `3 * 2 * ncoef(p)` floats, the device layout), the locals of the targets with z in
    /// `zlo..zhi` come back (zero elsewhere); `w` is the cell width. Emulated by
    /// [`crate::uniform::dense_m2l::emulate_level`].
    #[allow(clippy::too_many_arguments)]
    pub fn dense_m2l_level_by(
        &self,
        kernel: M2lKernel,
        p: usize,
        nl: usize,
        periodic: bool,
        w: f64,
        zlo: usize,
        zhi: usize,
        mult: &[f32],
    ) -> GpuResult<Vec<f32>> {
        let len = nl.pow(3) * 6 * ncoef(p);
        if mult.len() != len || nl < 2 || nl % 2 != 0 || zlo >= zhi || zhi > nl {
            return Err(GpuError::Unsupported(format!(
                "dense M2L level: nl {nl} (even, >= 2), planes {zlo}..{zhi}, {} floats (need {len})",
                mult.len()
            )));
        }
        if !matches!(kernel, M2lKernel::Dense | M2lKernel::Tensor) {
            return Err(GpuError::Unsupported(format!(
                "dense M2L level by {kernel:?}: Dense or Tensor"
            )));
        }
        self.ensure_dense(p, kernel)?;
        let guard = self.dense.lock().expect("dense poisoned");
        let d = guard.as_ref().expect("built above");
        let s = self.dev.stream();
        let m = s.clone_htod(mult)?;
        let mut loc = s.alloc_zeros::<f32>(len)?;
        let ln = dense_launch(nl, zlo, zhi);
        let k = self.kernels(p)?;
        let args = DenseArgs {
            level_off: 0,
            nl: nl as i32,
            periodic: periodic as i32,
            w: w as f32,
            z: (zlo as i32, zhi as i32),
            q: (ln.q0 as i32, ln.qcount as i32),
        };
        let mats = d.matrices(kernel);
        launch_dense(s, &k.uniform, &m, &mut loc, d, mats, &args, ln.tiles)?;
        Ok(s.clone_dtoh(&loc)?)
    }
}

/// The scalar arguments of `u_m2l_dense`.
struct DenseArgs {
    level_off: i32,
    nl: i32,
    periodic: i32,
    w: f32,
    z: (i32, i32),
    q: (i32, i32),
}

/// One dense M2L launch of a level: `u_m2l_dense` for f32 matrices, `u_m2l_tensor` for f64.
#[allow(clippy::too_many_arguments)]
fn launch_dense(
    s: &Arc<CudaStream>,
    k: &Uniform,
    mult: &CudaSlice<f32>,
    loc: &mut CudaSlice<f32>,
    d: &DenseTables,
    mats: Matrices<'_>,
    a: &DenseArgs,
    tiles: usize,
) -> GpuResult<()> {
    if tiles == 0 {
        return Ok(());
    }
    let (threads, groups) = match mats {
        Matrices::F32(_) => (DENSE_THREADS, 1),
        Matrices::F64(_) => (TENSOR_THREADS, tensor_groups(tiles * CLASSES)),
    };
    let cfg = LaunchConfig {
        grid_dim: (tiles as u32, CLASSES as u32, groups as u32),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    // mult and loc hold the level's cells at level_off (nl even, sources wrapped or checked
    // against the level); mats and dmap of the module's order (ensure_dense)
    let (off, nl, per, w, (zlo, zhi), (q0, qn)) = (a.level_off, a.nl, a.periodic, a.w, a.z, a.q);
    match mats {
        Matrices::F32(m) => k.m2l_dense(
            s, cfg, mult, loc, m, &d.map, off, nl, per, w, zlo, zhi, q0, qn,
        ),
        Matrices::F64(m) => {
            // several offset groups: their sums per group, then added in order (repeatable)
            let cells = (nl as usize).pow(3);
            let dp = padded_dofs(d.order);
            let len = if groups > 1 {
                groups * cells * 3 * dp
            } else {
                1
            };
            // SAFETY: every element the sum kernel reads is written by u_m2l_tensor (each
            // target cell of the planes, by one block per group, at every slot it reads)
            let mut part = unsafe { s.alloc::<f64>(len) }?;
            let g = groups as i32;
            k.m2l_tensor(
                s, cfg, mult, loc, m, &d.map, &mut part, off, nl, per, w, zlo, zhi, q0, qn, g,
            )?;
            if groups > 1 {
                let n = (zhi - zlo) as usize * (nl as usize).pow(2) * 3 * dofs(d.order);
                // part holds groups nl^3 3 DP doubles, loc the level's cells at off
                let cfg = grid1(n, THREADS);
                k.m2l_tensor_sum(s, cfg, &part, loc, &d.map, off, nl, zlo, zhi, g)?;
            }
            Ok(())
        }
    }
}
