//! The multipole method's operators on the device: P2M (one leaf per block), M2M level by
//! level (rotation-based), and the downward pass as three named phases: M2L (rotation-based
//! O(p^3), or the plain O(p^4) kernel), L2L level by level, L2P.

use super::{
    blocks, flat4, fmm_kernels, leaf_tasks, pack_m2l_into, tr_threads, CudaBackend, CudaState,
    M2lKind, EVAL_BLOCK,
};
use crate::device::{GpuError, GpuResult};
use crate::tables::{direction_key, rot_stride, toff, z_tables, RotationBuilder};
use cudarc::driver::CudaSlice;
use rustc_hash::FxHashMap;
use vortex_cuda::launch::{Fmm, InPlace};
use vortex_fmm::backend::{timed, PhaseTimes, Plan};
use vortex_fmm::expansions::ncoef;
use vortex_fmm::lists::NO_SHIFT;

impl CudaBackend {
    pub(super) fn upward_impl(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        if st.ppm_dev.is_some() {
            return self.ppm_upward(plan, st, times);
        }
        if let Some(h) = st.ppm.as_mut() {
            // PPM: P2M and M2M on the host (f64); the multipoles go up with the M2L
            let tree = &plan.source_tree;
            vortex_fmm::backend::timed(&mut times.p2m, || h.p2m(tree));
            vortex_fmm::backend::timed(&mut times.m2m, || h.m2m(tree));
            return Ok(());
        }
        let p = st.p;
        let dev = &self.dev;
        let s = dev.stream().clone();
        let tree = &plan.source_tree;
        let fmm = fmm_kernels(dev, p)?;
        // P2M
        let p2m_threads = ncoef(p).div_ceil(32) * 32;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let tasks = leaf_tasks(tree);
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let mult = st.multipoles.as_mut().unwrap();
            st.times.p2m += self.event_timed(|| {
                fmm.p2m(
                    &s,
                    blocks(tasks.len(), p2m_threads),
                    &st.spos,
                    &st.sstr,
                    &d_tasks,
                    &st.scenters,
                    &st.knm,
                    mult,
                )
            })?;
            Ok(())
        });
        times.p2m += wall;
        r?;
        // M2M level by level (children -> parents), rotation-based; 8 directions
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let mut lt = LevelTranslations::new(p);
            for l in (0..tree.levels.len().saturating_sub(1)).rev() {
                let t0 = lt.tasks.len();
                for pc in tree.levels[l].clone() {
                    let cell = &tree.cells[pc];
                    if cell.is_leaf() {
                        continue;
                    }
                    let e0 = lt.entries.len();
                    for c in cell.children.clone() {
                        let cc = &tree.cells[c];
                        let v: [f64; 3] = std::array::from_fn(|k| cell.center[k] - cc.center[k]);
                        lt.push_entry(c, v, cc.half_width);
                    }
                    lt.tasks
                        .push([pc as i32, e0 as i32, lt.entries.len() as i32, 0]);
                }
                lt.levels.push((t0, lt.tasks.len()));
            }
            if lt.tasks.is_empty() {
                return Ok(());
            }
            let (zm2m, _, _) = z_tables(p);
            let d_z = s.clone_htod(&zm2m)?;
            let d_toff = s.clone_htod(&toff(p))?;
            let mult = st.multipoles.as_mut().unwrap();
            // in and out alias (children and parents are different cells)
            let t = self.launch_levels(&fmm, Translation::M2m, &lt, mult, &d_z, &d_toff)?;
            st.times.m2m += t;
            Ok(())
        });
        times.m2m += wall;
        r
    }

    /// The FMM downward pass: [`Self::fmm_m2l`], [`Self::fmm_l2l`], [`Self::fmm_l2p`], each
    /// timed into its phase.
    pub(super) fn fmm_downward(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        let p = st.p;
        let s = self.dev.stream().clone();
        let d_toff = s.clone_htod(&toff(p))?;
        let (_, zm2l, zl2l) = z_tables(p);
        let mut wall = 0.0;
        let r = timed(&mut wall, || self.fmm_m2l(plan, st, &d_toff, &zm2l));
        times.m2l += wall;
        r?;
        let mut wall = 0.0;
        let r = timed(&mut wall, || self.fmm_l2l(plan, st, &d_toff, &zl2l));
        times.l2l += wall;
        r?;
        let mut wall = 0.0;
        let r = timed(&mut wall, || self.fmm_l2p(plan, st));
        times.l2p += wall;
        r
    }

    /// M2L over the far lists into the target cells' locals (`m2l_rot` with the rotation
    /// records of the distinct directions, or `m2l_plain`).
    fn fmm_m2l(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        d_toff: &CudaSlice<i32>,
        zm2l: &[f32],
    ) -> GpuResult<()> {
        let p = st.p;
        let dev = &self.dev;
        let s = dev.stream().clone();
        let threads = tr_threads(p);
        if self.m2l == M2lKind::Plain && plan.lists.far.sources.iter().any(|s| s.image != NO_SHIFT)
        {
            return Err(GpuError::Unsupported(
                "plain M2L kernel: periodic images not supported".into(),
            ));
        }
        let mut bufs = self.m2l_bufs.lock().unwrap();
        let ndirs = pack_m2l_into(plan, p, self.m2l == M2lKind::Rotation, &mut bufs);
        let (tasks, entries, recs) = (&bufs.tasks, &bufs.entries, &bufs.recs);
        let keys_len = ndirs;
        st.times.m2l_translations = entries.len() as u64;
        st.times.m2l_directions = keys_len;
        if tasks.is_empty() {
            return Ok(());
        }
        let d_tasks = s.clone_htod(flat4(tasks))?;
        let d_entries = s.clone_htod(flat4(entries))?;
        let mult = st.multipoles.as_ref().unwrap();
        let loc = st.locals.as_mut().unwrap();
        let cfg = blocks(tasks.len(), threads);
        match self.m2l {
            M2lKind::Rotation => {
                let d_rots = s.clone_htod(&recs[..])?;
                let d_z = s.clone_htod(zm2l)?;
                let fmm = fmm_kernels(dev, p)?;
                st.times.m2l += self.event_timed(|| {
                    fmm.m2l_rot(
                        &s, cfg, mult, &mut *loc, &d_tasks, &d_entries, &d_rots, &d_z, d_toff, 0,
                    )
                })?;
                st.rots = Some(d_rots);
            }
            M2lKind::Plain => {
                let fmm = fmm_kernels(dev, p)?;
                st.times.m2l += self.event_timed(|| {
                    fmm.m2l_plain(
                        &s,
                        cfg,
                        mult,
                        &mut *loc,
                        &d_tasks,
                        &d_entries,
                        &st.tcenters,
                        &st.scenters,
                        &st.knm,
                        0,
                    )
                })?;
            }
        }
        Ok(())
    }

    /// L2L level by level (parents -> children), rotation-based.
    fn fmm_l2l(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        d_toff: &CudaSlice<i32>,
        zl2l: &[f32],
    ) -> GpuResult<()> {
        let p = st.p;
        let dev = &self.dev;
        let s = dev.stream().clone();
        let tt = &plan.target_tree;
        let mut lt = LevelTranslations::new(p);
        for l in 1..tt.levels.len() {
            let t0 = lt.tasks.len();
            for c in tt.levels[l].clone() {
                let cell = &tt.cells[c];
                let pc = cell.parent.expect("non-root cell has a parent");
                let parent = &tt.cells[pc];
                let v: [f64; 3] = std::array::from_fn(|k| cell.center[k] - parent.center[k]);
                let e0 = lt.entries.len() as i32;
                lt.push_entry(pc, v, cell.half_width);
                lt.tasks.push([c as i32, e0, e0 + 1, 0]);
            }
            lt.levels.push((t0, lt.tasks.len()));
        }
        if lt.tasks.is_empty() {
            return Ok(());
        }
        let d_z = s.clone_htod(zl2l)?;
        let fmm = fmm_kernels(dev, p)?;
        let loc = st.locals.as_mut().unwrap();
        // in and out alias (parents and children are different cells)
        let t = self.launch_levels(&fmm, Translation::L2l, &lt, loc, &d_z, d_toff)?;
        st.times.l2l += t;
        Ok(())
    }

    /// Uploads the translations `lt` and launches `m2m_rot` or `l2l_rot` (`kind`) once per
    /// level on `buf`, which holds both the input and the output cells; returns the kernel
    /// time.
    fn launch_levels(
        &self,
        fmm: &Fmm,
        kind: Translation,
        lt: &LevelTranslations,
        buf: &mut CudaSlice<f32>,
        d_z: &CudaSlice<f32>,
        d_toff: &CudaSlice<i32>,
    ) -> GpuResult<f64> {
        let s = self.dev.stream().clone();
        let threads = tr_threads(lt.p);
        let d_tasks = s.clone_htod(flat4(&lt.tasks))?;
        let d_entries = s.clone_htod(flat4(&lt.entries))?;
        let d_rots = s.clone_htod(&lt.recs)?;
        log::trace!(
            "{kind:?}: {} levels, {} tasks",
            lt.levels.len(),
            lt.tasks.len()
        );
        self.event_timed(|| {
            for &(a, b) in &lt.levels {
                if b == a {
                    continue;
                }
                let off = a as i32;
                // input and output alias one array: a level's tasks read one level and write
                // another (different cells), and the levels' launches are ordered on the stream
                let cells = InPlace::new(&mut *buf, &s);
                let (r, mut w) = (cells.ptr(), cells.ptr());
                let cfg = blocks(b - a, threads);
                let args = (&d_tasks, &d_entries, &d_rots);
                match kind {
                    Translation::M2m => fmm.m2m_rot(
                        &s, cfg, &r, &mut w, args.0, args.1, args.2, d_z, d_toff, off,
                    ),
                    Translation::L2l => fmm.l2l_rot(
                        &s, cfg, &r, &mut w, args.0, args.1, args.2, d_z, d_toff, off,
                    ),
                }?;
            }
            Ok(())
        })
    }

    /// L2P at the target leaves, in blocks of at most `EVAL_BLOCK` targets.
    fn fmm_l2p(&self, plan: &Plan, st: &mut CudaState) -> GpuResult<()> {
        let p = st.p;
        let s = self.dev.stream().clone();
        let tt = &plan.target_tree;
        let mut tasks: Vec<[i32; 4]> = Vec::new();
        for l in tt.leaves() {
            let r = tt.cells[l].range.clone();
            let mut first = r.start;
            while first < r.end {
                let n = EVAL_BLOCK.min(r.end - first);
                tasks.push([first as i32, n as i32, l as i32, 0]);
                first += n;
            }
        }
        if tasks.is_empty() {
            return Ok(());
        }
        let d_tasks = s.clone_htod(flat4(&tasks))?;
        let fmm = fmm_kernels(&self.dev, p)?;
        let loc = st.locals.as_ref().unwrap();
        st.times.l2p += self.event_timed(|| {
            fmm.l2p(
                &s,
                blocks(tasks.len(), EVAL_BLOCK),
                &st.tpos,
                &st.tstr,
                &d_tasks,
                &st.tcenters,
                loc,
                &st.knm,
                &mut st.vel,
                &mut st.strf,
            )
        })?;
        Ok(())
    }
}

/// Which rotation-based translation [`CudaBackend::launch_levels`] runs.
#[derive(Clone, Copy, Debug)]
enum Translation {
    /// `m2m_rot`: children into parents.
    M2m,
    /// `l2l_rot`: parents into children.
    L2l,
}

/// The M2M or L2L work of a tree level by level: tasks `(output cell, first entry, end entry,
/// 0)`, entries `(input cell, rotation, distance bits, 0)`, the rotation records of the
/// distinct directions and the task range of each level.
struct LevelTranslations {
    p: usize,
    rb: RotationBuilder,
    recs: Vec<f32>,
    keys: FxHashMap<[i64; 3], i32>,
    tasks: Vec<[i32; 4]>,
    entries: Vec<[i32; 4]>,
    levels: Vec<(usize, usize)>,
}

impl LevelTranslations {
    fn new(p: usize) -> Self {
        Self {
            p,
            rb: RotationBuilder::new(p),
            recs: Vec::new(),
            keys: FxHashMap::default(),
            tasks: Vec::new(),
            entries: Vec::new(),
            levels: Vec::new(),
        }
    }

    /// Appends the entry of input cell `from` translated by `v` (`half_width`: of the smaller
    /// cell), with the rotation of its direction (built when first met).
    fn push_entry(&mut self, from: usize, v: [f64; 3], half_width: f64) {
        let key = direction_key(v, half_width);
        let (rb, recs, p) = (&mut self.rb, &mut self.recs, self.p);
        let ri = *self.keys.entry(key).or_insert_with(|| {
            rb.push(v, recs);
            (recs.len() / rot_stride(p) - 1) as i32
        });
        let d = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt() as f32;
        self.entries.push([from as i32, ri, d.to_bits() as i32, 0]);
    }
}
