//! The treecode's far field on the device: M2P (`m2p`), the multipoles of the far sources of
//! each target leaf and of its ancestors evaluated at the leaf's targets.

use super::{blocks, flat4, fmm_kernels, pack_m2p, CudaBackend, CudaState, EVAL_BLOCK};
use crate::device::GpuResult;
use vortex_fmm::backend::{timed, PhaseTimes, Plan};

impl CudaBackend {
    pub(super) fn treecode_far(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        times: &mut PhaseTimes,
    ) -> GpuResult<()> {
        let p = st.p;
        let s = self.dev.stream().clone();
        let mut wall = 0.0;
        let r: GpuResult<()> = timed(&mut wall, || {
            let (tasks, entries, evals) = pack_m2p(plan);
            st.times.m2p_evaluations = evals;
            if tasks.is_empty() {
                return Ok(());
            }
            let d_tasks = s.clone_htod(flat4(&tasks))?;
            let d_entries = s.clone_htod(flat4(&entries))?;
            let fmm = fmm_kernels(&self.dev, p)?;
            let mult = st.multipoles.as_ref().unwrap();
            let period = plan.periodic.map(|q| q.box_length).unwrap_or(0.0) as f32;
            st.times.m2p += self.event_timed(|| {
                fmm.m2p(
                    &s,
                    blocks(tasks.len(), EVAL_BLOCK),
                    &st.tpos,
                    &st.tstr,
                    &d_tasks,
                    &d_entries,
                    &st.scenters,
                    mult,
                    &st.knm,
                    period,
                    &mut st.vel,
                    &mut st.strf,
                )
            })?;
            Ok(())
        });
        times.m2p += wall;
        r
    }
}
