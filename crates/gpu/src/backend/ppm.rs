//! The pseudo-particle method's operators on the device (`kernels/ppm.cu`): P2M and M2M
//! (`ppm_p2m`, `ppm_apply_octant`), the M2L (`ppm_m2l`, fp32 pairs summed in f64), L2L and
//! L2P; or, for a tree whose children are not regular octants, the M2L on the device and the
//! rest on the host (f64).

use super::{
    blocks, flat4, leaf_tasks, ppm_threads, CudaBackend, CudaState, KernelTimes, PPM_L2P_BLOCKS,
    PPM_OPS,
};
use crate::device::GpuResult;
use crate::ppm::pack_ppm_m2l;
use cudarc::driver::CudaSlice;
use vortex_cuda::launch::Ppm;
use vortex_fmm::backend::{timed, PhaseTimes, Plan};
use vortex_fmm::ppm::PseudoParticles;

impl CudaBackend {
    /// PPM upward pass on the device: P2M (`ppm_p2m`, one leaf per block), then M2M level by
    /// level (`ppm_apply_octant`, one parent per block).
    pub(super) fn ppm_upward(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        let s = self.dev.stream().clone();
        let CudaState {
            spos,
            sstr,
            ppm_dev,
            times: kt,
            ..
        } = st;
        let d = ppm_dev.as_mut().expect("device PPM");
        let tree = &plan.source_tree;
        let ppm = d.kernels(&self.dev)?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let tasks = leaf_tasks(tree);
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            kt.p2m += self.event_timed(|| {
                ppm.ppm_p2m(
                    &s,
                    blocks(tasks.len(), PPM_OPS),
                    &*spos,
                    &*sstr,
                    &d_tasks,
                    &d.scells,
                    d.radius_factor,
                    &d.expo,
                    &d.wt,
                    &mut d.mult,
                )
            })?;
            Ok(())
        });
        times.p2m += wall;
        r?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            for l in (0..tree.levels.len().saturating_sub(1)).rev() {
                let tasks: Vec<[i32; 4]> = tree.levels[l]
                    .clone()
                    .filter(|&c| !tree.cells[c].is_leaf())
                    .map(|c| {
                        let ch = &tree.cells[c].children;
                        [c as i32, ch.start as i32, ch.len() as i32, 0]
                    })
                    .collect();
                if tasks.is_empty() {
                    continue;
                }
                kt.m2m += self.apply_octants(&ppm, &tasks, &d.soct, &d.m2m, &mut d.mult, 0)?;
            }
            Ok(())
        });
        times.m2m += wall;
        r
    }

    /// PPM downward pass on the device: M2L (`ppm_m2l`) into f64 locals that start from what
    /// `add_locals` left on the host, L2L level by level and L2P into the fields.
    pub(super) fn ppm_downward_device(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        let s = self.dev.stream().clone();
        let tt = &plan.target_tree;
        let CudaState {
            tpos,
            tstr,
            vel,
            strf,
            ppm,
            ppm_dev,
            times: kt,
            ..
        } = st;
        let h = ppm.as_mut().expect("PPM state");
        let d = ppm_dev.as_mut().expect("device PPM");
        let k = d.k;
        let mut d_loc = s.clone_htod(&h.locals)?;
        let ppm = d.kernels(&self.dev)?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let Some(m2l) = self.ppm_m2l_upload(plan, &h.ops, d.radius_factor, kt)? else {
                return Ok(());
            };
            kt.m2l += self.ppm_m2l_launch(&ppm, &m2l, k, &d.mult, &mut d_loc)?;
            Ok(())
        });
        times.m2l += wall;
        r?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            for l in 1..tt.levels.len() {
                let tasks: Vec<[i32; 4]> = tt.levels[l]
                    .clone()
                    .map(|c| [c as i32, tt.cells[c].parent.unwrap_or(0) as i32, 1, 0])
                    .collect();
                if tasks.is_empty() {
                    continue;
                }
                kt.l2l += self.apply_octants(&ppm, &tasks, &d.toct, &d.l2l, &mut d_loc, 1)?;
            }
            Ok(())
        });
        times.l2l += wall;
        r?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let tasks = leaf_tasks(tt);
            if tasks.is_empty() {
                return Ok(());
            }
            let nb = tasks.len().min(PPM_L2P_BLOCKS);
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let mut scratch = s.alloc_zeros::<f64>(nb * d.scratch_len.max(1))?;
            let ntasks = tasks.len() as i32;
            kt.l2p += self.event_timed(|| {
                ppm.ppm_l2p(
                    &s,
                    blocks(nb, PPM_OPS),
                    &*tpos,
                    &*tstr,
                    &d_tasks,
                    ntasks,
                    &d.tcells,
                    d.radius_factor,
                    &d.expo,
                    &d.up,
                    &d.w,
                    &d_loc,
                    &mut scratch,
                    &mut *vel,
                    &mut *strf,
                )
            })?;
            Ok(())
        });
        times.l2p += wall;
        r
    }

    /// PPM downward pass: M2L on the GPU (`ppm_m2l`), L2L and L2P on the host (or all on the
    /// device, see [`Self::ppm_downward_device`]).
    pub(super) fn ppm_downward(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        use rayon::prelude::*;
        if st.ppm_dev.is_some() {
            return self.ppm_downward_device(plan, st, times);
        }
        let s = self.dev.stream().clone();
        let tt = &plan.target_tree;
        let h = st.ppm.as_mut().expect("PPM state");
        let k = h.ops.count();
        let ppm = Ppm::load(&self.dev, k, h.ops.order())?;
        let mut wall = 0.0;
        let kt = &mut st.times;
        let r: GpuResult<()> = timed(&mut wall, || {
            let Some(m2l) = self.ppm_m2l_upload(plan, &h.ops, h.ops.radius_factor(), kt)? else {
                return Ok(());
            };
            let d_mult = s.clone_htod(&h.multipoles)?;
            let mut d_loc = s.alloc_zeros::<f64>(tt.cells.len() * 3 * k)?;
            kt.m2l += self.ppm_m2l_launch(&ppm, &m2l, k, &d_mult, &mut d_loc)?;
            let loc = s.clone_dtoh(&d_loc)?;
            s.synchronize()?;
            h.locals
                .par_iter_mut()
                .zip(loc.par_iter())
                .for_each(|(a, b)| *a += b);
            Ok(())
        });
        times.m2l += wall;
        r?;
        vortex_fmm::backend::timed(&mut times.l2l, || h.l2l(tt));
        vortex_fmm::backend::timed(&mut times.l2p, || h.l2p(tt));
        Ok(())
    }

    /// Launches `ppm_apply_octant` on `tasks` (one output cell each): M2M (`down` 0:
    /// children into parents) or L2L (`down` 1: parents into children) with the octant table
    /// `table` and the cells' octants `oct`, on the expansions `buf`; returns the kernel time.
    fn apply_octants(
        &self,
        ppm: &Ppm,
        tasks: &[[i32; 4]],
        oct: &CudaSlice<i32>,
        table: &CudaSlice<f64>,
        buf: &mut CudaSlice<f64>,
        down: i32,
    ) -> GpuResult<f64> {
        let s = self.dev.stream();
        let d_tasks = s.clone_htod(flat4(tasks))?;
        self.event_timed(|| {
            ppm.ppm_apply_octant(
                s,
                blocks(tasks.len(), PPM_OPS),
                &d_tasks,
                oct,
                table,
                buf,
                down,
            )
        })
    }

    /// The PPM M2L work of the plan's far lists packed and uploaded (`None`: no pair); records
    /// the number of translations.
    fn ppm_m2l_upload(
        &self,
        plan: &Plan,
        ops: &PseudoParticles,
        radius_factor: f64,
        kt: &mut KernelTimes,
    ) -> GpuResult<Option<PpmM2l>> {
        let s = self.dev.stream();
        let (tasks, entries, radii) = pack_ppm_m2l(plan, radius_factor);
        kt.m2l_translations = entries.len() as u64;
        kt.m2l_directions = 0;
        if tasks.is_empty() {
            return Ok(None);
        }
        let unit: Vec<f32> = ops
            .unit_points()
            .iter()
            .flat_map(|u| [u[0] as f32, u[1] as f32, u[2] as f32, 0.0])
            .collect();
        Ok(Some(PpmM2l {
            n: tasks.len(),
            tasks: s.clone_htod(flat4(&tasks))?,
            entries: s.clone_htod(flat4(&entries))?,
            radii: s.clone_htod(&radii)?,
            unit: s.clone_htod(&unit)?,
        }))
    }

    /// Launches `ppm_m2l` (`k` pseudo-particles) from the multipoles `mult` into the
    /// locals `loc`; returns the kernel time.
    fn ppm_m2l_launch(
        &self,
        ppm: &Ppm,
        w: &PpmM2l,
        k: usize,
        mult: &CudaSlice<f64>,
        loc: &mut CudaSlice<f64>,
    ) -> GpuResult<f64> {
        let s = self.dev.stream();
        self.event_timed(|| {
            ppm.ppm_m2l(
                s,
                blocks(w.n, ppm_threads(k)),
                mult,
                loc,
                &w.tasks,
                &w.entries,
                &w.radii,
                &w.unit,
            )
        })
    }
}

/// The PPM M2L work on the device: `n` tasks, their entries, the cell radii and the unit
/// sphere points.
struct PpmM2l {
    n: usize,
    tasks: CudaSlice<i32>,
    entries: CudaSlice<i32>,
    radii: CudaSlice<f32>,
    unit: CudaSlice<f32>,
}
