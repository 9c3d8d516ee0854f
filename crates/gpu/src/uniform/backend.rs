//! [`UniformBackend`]: the CUDA backend with the uniform grid as its whole-evaluation path.
//!
//! `fmm::evaluate_at_sources` (the vortex method's right-hand side: every particle a target)
//! asks a backend first for an evaluation of its own ([`fmm::Backend::evaluate_at_sources`]);
//! this backend answers FMM evaluations, free space or periodic, with [`UniformFmm`] (the grid
//! sorted and evaluated on the device) and leaves everything else (other methods, separate
//! targets such as diagnostic grids, MPI ranks' locally essential trees) to the adaptive
//! [`CudaBackend`] it wraps. When the uniform grid refuses a set (a box too small for the
//! cores, a grid too large for the device), it logs why once and the adaptive path evaluates.

use super::{UniformFmm, UniformParams, UniformTimes};
use crate::backend::{CudaBackend, CudaState};
use crate::device::GpuResult;
use fmm::evaluators::PlanStats;
use fmm::{Backend, EvalParams, Evaluation, FmmError, Method, PhaseTimes, Plan, Sources, Targets};
use std::sync::atomic::{AtomicBool, Ordering};

/// The adaptive CUDA backend plus the uniform-grid path for evaluations at the sources.
pub struct UniformBackend {
    adaptive: CudaBackend,
    uniform: UniformFmm,
    /// Gap of a far interaction in core radii on the grid (`UniformParams::core_cutoff`).
    core_cutoff: f64,
    /// Whether the fallback to the adaptive path was logged already.
    fell_back: AtomicBool,
}

impl UniformBackend {
    /// Both paths on visible device `index` (an error, never a panic, without a GPU).
    pub fn new(index: usize) -> GpuResult<Self> {
        let adaptive = CudaBackend::new(index)?;
        let uniform = UniformFmm::new(adaptive.device().clone());
        Ok(Self {
            adaptive,
            uniform,
            core_cutoff: UniformParams::default().core_cutoff,
            fell_back: AtomicBool::new(false),
        })
    }

    /// The uniform-grid FMM (for its own entry points).
    pub fn uniform(&self) -> &UniformFmm {
        &self.uniform
    }
}

impl UniformTimes {
    /// The phases in the terms of `fmm::PhaseTimes`: `tree` = sort on the device, `p2m` = P2M
    /// + M2M, `l2l` = L2L + L2P, `transfer` = host packing, upload and download.
    pub fn phase_times(&self) -> PhaseTimes {
        PhaseTimes {
            tree: self.sort,
            p2m: self.upward,
            m2l: self.m2l,
            l2l: self.downward,
            p2p: self.p2p,
            transfer: self.host_prepare + self.upload + self.download,
            total: self.total,
            ..Default::default()
        }
    }

    /// The work counts in the terms of `fmm::evaluators::PlanStats` (far pairs = M2L
    /// translations, depth = levels below the top).
    pub fn plan_stats(&self) -> PlanStats {
        PlanStats {
            depth: self.k,
            far_pairs: self.m2l_translations as usize,
            p2p_interactions: self.p2p_pairs,
            ..Default::default()
        }
    }
}

impl Backend for UniformBackend {
    type State = CudaState;

    fn name(&self) -> String {
        format!("{} + uniform grid", self.adaptive.name())
    }
    fn prepare(
        &self,
        plan: &Plan,
        sources: &Sources,
        targets: &Targets,
    ) -> Result<CudaState, FmmError> {
        self.adaptive.prepare(plan, sources, targets)
    }
    fn upward(&self, plan: &Plan, st: &mut CudaState, t: &mut PhaseTimes) -> Result<(), FmmError> {
        self.adaptive.upward(plan, st, t)
    }
    fn downward(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        t: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        self.adaptive.downward(plan, st, t)
    }
    fn near_field(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        t: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        self.adaptive.near_field(plan, st, t)
    }
    fn fields(&self, plan: &Plan, st: CudaState) -> Result<fmm::Fields, FmmError> {
        self.adaptive.fields(plan, st)
    }
    fn multipoles(
        &self,
        plan: &Plan,
        st: &CudaState,
        cells: &[usize],
    ) -> Result<Vec<f64>, FmmError> {
        self.adaptive.multipoles(plan, st, cells)
    }
    fn add_locals(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        cells: &[usize],
        data: &[f64],
    ) -> Result<(), FmmError> {
        self.adaptive.add_locals(plan, st, cells, data)
    }
    fn set_multipoles(
        &self,
        plan: &Plan,
        st: &mut CudaState,
        cells: &[usize],
        data: &[f64],
    ) -> Result<(), FmmError> {
        self.adaptive.set_multipoles(plan, st, cells, data)
    }

    fn evaluate_at_sources(
        &self,
        params: &EvalParams,
        sources: &Sources,
    ) -> Option<Result<Evaluation, FmmError>> {
        if params.method != Method::Fmm {
            return None;
        }
        let up = UniformParams {
            order: params.order,
            core_cutoff: self.core_cutoff.max(params.core_cutoff),
            ..Default::default()
        };
        let run = match &params.periodic {
            None => self.uniform.evaluate(sources, &up),
            Some(q) => self.uniform.evaluate_periodic(sources, &up, q),
        };
        match run {
            Ok((fields, t)) => Some(Ok(Evaluation {
                fields,
                times: t.phase_times(),
                stats: t.plan_stats(),
            })),
            Err(e) => {
                if !self.fell_back.swap(true, Ordering::Relaxed) {
                    log::warn!("uniform grid not used ({e}): the adaptive octree evaluates");
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uniform::reference::{evaluate_reference, evaluate_reference_periodic};
    use fmm::periodic::Periodic;
    use fmm::relative_l2_error;

    /// On a GPU: `fmm::evaluate_at_sources` through this backend gives the uniform grid's
    /// result (against its f64 twin with the same grid parameters, free space and periodic),
    /// and a treecode evaluation goes through the adaptive plan (the same numbers as the
    /// wrapped `CudaBackend`). Skipped without a GPU.
    #[test]
    fn evaluations_at_the_sources_take_the_uniform_grid() {
        if !crate::available() {
            println!("no usable CUDA device: UniformBackend test SKIPPED");
            return;
        }
        let be = UniformBackend::new(0).unwrap();
        let s = fmm::testsets::generate(fmm::testsets::Distribution::Uniform, 20_000, 9, true);
        let twin = UniformParams {
            order: 8,
            core_cutoff: be.core_cutoff.max(EvalParams::default().core_cutoff),
            ..Default::default()
        };
        for periodic in [None, Some(Periodic::default())] {
            let params = EvalParams {
                method: Method::Fmm,
                order: 8,
                periodic,
                ..Default::default()
            };
            let got = fmm::evaluate_at_sources(&be, &params, &s).unwrap();
            let want = match &periodic {
                None => evaluate_reference(&s, &twin).unwrap(),
                Some(q) => evaluate_reference_periodic(&s, &twin, q).unwrap(),
            };
            let eu = relative_l2_error(&got.fields.velocity, &want.velocity);
            let es = relative_l2_error(&got.fields.stretching, &want.stretching);
            println!(
                "UniformBackend periodic {}: vs f64 twin {eu:.2e} / {es:.2e}",
                periodic.is_some()
            );
            assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
            assert!(got.stats.far_pairs > 0 && got.times.total > 0.0);
        }
        let tree = EvalParams {
            method: Method::Treecode,
            order: 8,
            ..Default::default()
        };
        let got = fmm::evaluate_at_sources(&be, &tree, &s).unwrap();
        let want = fmm::evaluate(&be.adaptive, &tree, &s, &s.as_targets()).unwrap();
        let eu = relative_l2_error(&got.fields.velocity, &want.fields.velocity);
        println!("UniformBackend treecode vs the adaptive CUDA backend {eu:.2e}");
        assert!(eu < 1e-6, "{eu:.2e}");
    }
}
