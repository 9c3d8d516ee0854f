//! Particle-particle sums on the device: P2P over the near lists (`p2p_near`, tasks of
//! `P2P_TARGETS` targets from [`crate::layout::NearLayout`]) and the all-pairs direct sum
//! (`p2p_all`).

use super::{blocks, flat4, CudaBackend, CudaState, P2P_TARGETS, P2P_THREADS};
use crate::device::GpuResult;
use crate::layout::{pack_sources, pack_targets, NearLayout};
use vortex_cuda::launch::P2p;
use vortex_fmm::backend::{timed, PhaseTimes, Plan};
use vortex_fmm::kernel::CoreOrder;
use vortex_fmm::{Fields, Sources, Targets};

impl CudaBackend {
    pub(super) fn near_impl(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        let s = self.dev.stream().clone();
        let p2p = P2p::load(&self.dev, plan.core.m())?;
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let lay = NearLayout::build(
                &plan.target_tree,
                &plan.source_tree,
                &plan.lists.near,
                P2P_TARGETS,
            );
            st.times.p2p_pairs = lay.pairs;
            if lay.tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(flat4(&lay.tasks))?;
            let d_nsrc = s.clone_htod(&lay.task_nsrc)?;
            let d_runs = s.clone_htod(flat4(&lay.runs))?;
            let period = plan.periodic.map(|q| q.box_length).unwrap_or(0.0) as f32;
            st.times.p2p += self.event_timed(|| {
                p2p.p2p_near(
                    &s,
                    blocks(lay.tasks.len(), P2P_THREADS),
                    &st.tpos,
                    &st.tstr,
                    &st.spos,
                    &st.sstr,
                    &d_tasks,
                    &d_nsrc,
                    &d_runs,
                    period,
                    &mut st.vel,
                    &mut st.strf,
                )
            })?;
            Ok(())
        });
        times.p2p += wall;
        r
    }

    /// Direct all-pairs sum on the device (free space) with the core `core`: fields (with
    /// `1/(4 pi)`, in the given order) and the kernel time in seconds.
    pub fn all_pairs(
        &self,
        core: CoreOrder,
        sources: &Sources,
        targets: &Targets,
    ) -> GpuResult<(Fields, f64)> {
        let s = self.dev.stream().clone();
        let p2p = P2p::load(&self.dev, core.m())?;
        let (sp, sa) = pack_sources(sources);
        let (tp, ta) = pack_targets(targets);
        let (d_sp, d_sa) = (s.clone_htod(&sp)?, s.clone_htod(&sa)?);
        let (d_tp, d_ta) = (s.clone_htod(&tp)?, s.clone_htod(&ta)?);
        let mut vel = s.alloc_zeros::<f32>(3 * targets.len())?;
        let mut strf = s.alloc_zeros::<f32>(3 * targets.len())?;
        let (nt, ns) = (targets.len() as i32, sources.len() as i32);
        let secs = self.event_timed(|| {
            p2p.p2p_all(
                &s,
                blocks(targets.len().div_ceil(128), 128),
                &d_tp,
                &d_ta,
                nt,
                &d_sp,
                &d_sa,
                ns,
                &mut vel,
                &mut strf,
            )
        })?;
        let st = CudaState {
            p: 0,
            nt: targets.len(),
            tpos: d_tp,
            tstr: d_ta,
            spos: d_sp,
            sstr: d_sa,
            vel,
            strf,
            scenters: s.alloc_zeros(1)?,
            tcenters: s.alloc_zeros(1)?,
            knm: s.alloc_zeros(1)?,
            multipoles: None,
            locals: None,
            rots: None,
            ppm: None,
            ppm_dev: None,
            times: self.last_kernel_times(),
        };
        Ok((self.fields_impl(st)?, secs))
    }
}
