//! Phase 7 of [`UniformFmm`]'s pipeline: M2L per level over the implicit stencil, with the
//! kernel of `UniformParams::m2l` below the top (rotations `u_m2l`, one block per target
//! cell; or the dense per-offset matrices `u_m2l_dense` of [`crate::uniform::dense_m2l`]).

use super::*;
use crate::uniform::dense_m2l::{compact_map, dense_launch, DenseM2l, CLASSES, DENSE_THREADS};
use vortex_cuda::launch::Uniform;

/// The dense M2L matrices of one order on the device (f32, the layout of
/// [`DenseM2l::mats`]) and the compact map of the coefficients.
pub(crate) struct DenseTables {
    order: usize,
    mats: CudaSlice<f32>,
    map: CudaSlice<i32>,
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

    /// Makes sure the dense matrices of order `p` are on the device.
    fn ensure_dense(&self, p: usize) -> GpuResult<()> {
        let mut d = self.dense.lock().expect("dense poisoned");
        if matches!(&*d, Some(x) if x.order == p) {
            return Ok(());
        }
        *d = None; // the previous order's matrices go first
        let t0 = Instant::now();
        let t = DenseM2l::new(p);
        let s = self.dev.stream();
        *d = Some(DenseTables {
            order: p,
            mats: s.clone_htod(&t.to_f32())?,
            map: s.clone_htod(&compact_map(p).0)?,
        });
        log::debug!(
            "uniform FMM: dense M2L matrices p = {p} ({:.1} MB) built in {:.0} ms",
            t.mats.len() as f64 * 4e-6,
            t0.elapsed().as_secs_f64() * 1e3
        );
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
        let dense = self.m2l_kernel(p) == M2lKernel::Dense && g.k >= 1;
        if dense {
            self.ensure_dense(p)?;
        }
        let dguard = self.dense.lock().expect("dense poisoned");
        tm.k_m2l = self.event_timed(|| {
            for l in 0..=g.k {
                if l == 0 && g.m < 3 {
                    continue; // every top cell is a neighbour of every other
                }
                match (&*dguard, dense && l >= 1) {
                    (Some(d), true) => self.m2l_level_dense(ps, xp, d, l)?,
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
    }

    /// The dense M2L of level `l >= 1`: per parity class, blocks of 32 targets.
    fn m2l_level_dense(
        &self,
        ps: &Pass,
        xp: &mut Expansions,
        d: &DenseTables,
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
        launch_dense(&ps.s, &k.uniform, &xp.mult, &mut xp.loc, d, &args, ln.tiles)
    }

    /// The dense M2L of one level on the device, alone (for tests and timings): `mult` holds
    /// the level's multipoles (`nl^3` cells of `3 * 2 * ncoef(p)` floats, the device layout),
    /// the locals of the targets with z in `zlo..zhi` come back (zero elsewhere); `w` is the
    /// cell width. Emulated by [`crate::uniform::dense_m2l::emulate_level`].
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
        let len = nl.pow(3) * 6 * ncoef(p);
        if mult.len() != len || nl < 2 || nl % 2 != 0 || zlo >= zhi || zhi > nl {
            return Err(GpuError::Unsupported(format!(
                "dense M2L level: nl {nl} (even, >= 2), planes {zlo}..{zhi}, {} floats (need {len})",
                mult.len()
            )));
        }
        self.ensure_dense(p)?;
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
        launch_dense(s, &k.uniform, &m, &mut loc, d, &args, ln.tiles)?;
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

fn launch_dense(
    s: &Arc<CudaStream>,
    k: &Uniform,
    mult: &CudaSlice<f32>,
    loc: &mut CudaSlice<f32>,
    d: &DenseTables,
    a: &DenseArgs,
    tiles: usize,
) -> GpuResult<()> {
    if tiles == 0 {
        return Ok(());
    }
    let cfg = LaunchConfig {
        grid_dim: (tiles as u32, CLASSES as u32, 1),
        block_dim: (DENSE_THREADS as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    // mult and loc hold the level's cells at level_off (nl even, sources wrapped or checked
    // against the level); mats and dmap of the module's order (ensure_dense)
    k.m2l_dense(
        s,
        cfg,
        mult,
        loc,
        &d.mats,
        &d.map,
        a.level_off,
        a.nl,
        a.periodic,
        a.w,
        a.z.0,
        a.z.1,
        a.q.0,
        a.q.1,
    )
}
