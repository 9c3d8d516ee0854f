//! The treecode's far field on the device: M2P (`m2p`), the multipoles of the far sources of
//! each target leaf and of its ancestors evaluated at the leaf's targets.

use super::{blocks, defines, flat4, pack_m2p, CudaBackend, CudaState, EVAL_BLOCK};
use crate::device::{GpuResult, FMM};
use cudarc::driver::PushKernelArg;
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
            let f = self.dev.function(&FMM, &defines(p), "m2p")?;
            let mult = st.multipoles.as_ref().unwrap();
            let period = plan.periodic.map(|q| q.box_length).unwrap_or(0.0) as f32;
            st.times.m2p += self.event_timed(|| {
                let mut lb = s.launch_builder(&f);
                lb.arg(&st.tpos).arg(&st.tstr).arg(&d_tasks).arg(&d_entries);
                lb.arg(&st.scenters).arg(mult).arg(&st.knm).arg(&period);
                lb.arg(&mut st.vel).arg(&mut st.strf);
                // SAFETY: the arguments match kernels/fmm.cu `m2p` in order and type;
                // the tasks index cells and particles inside the buffers passed, which
                // outlive the launch (the event or copy after it synchronizes the stream).
                unsafe { lb.launch(blocks(tasks.len(), EVAL_BLOCK)) }?;
                Ok(())
            })?;
            Ok(())
        });
        times.m2p += wall;
        r
    }
}
