//! The uniform grid as an [`vortex_fmm::Evaluator`]: [`UniformEvaluator`] on one GPU (free space or
//! periodic) and [`UniformSlabEvaluator`], the grid split into z slabs over the ranks of a
//! `vortex_domain::Comm`, one GPU per rank (free space or periodic). Both evaluate FMM fields at the sources
//! themselves ([`TargetSpec::Sources`]); the planner (`vortex_fmm::planner`) sends every other
//! request to the adaptive octree and refuses a uniform grid for it with the reason.

use super::{UniformFmm, UniformParams, UniformTimes};
use crate::device::GpuResult;
use vortex_domain::Comm;
use vortex_fmm::evaluators::PlanStats;
use vortex_fmm::{
    CommStats, EvalParams, Evaluation, Evaluator, FmmError, Method, PhaseTimes, Sources, TargetSpec,
};

impl UniformTimes {
    /// The phases in the terms of `vortex_fmm::PhaseTimes`: `tree` = sort on the device, `p2m` = P2M
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

    /// The work counts in the terms of `vortex_fmm::evaluators::PlanStats` (far pairs = M2L
    /// translations, depth = levels below the top).
    pub fn plan_stats(&self) -> PlanStats {
        PlanStats {
            depth: self.k,
            far_pairs: self.m2l_translations as usize,
            p2p_interactions: self.p2p_pairs,
            ..Default::default()
        }
    }

    /// Kernel-only seconds per phase and device memory, for logs.
    pub fn kernel_report(&self) -> String {
        format!(
            "{:.4} s of kernels (sort {:.4}, P2M {:.4}, M2M {:.4}, M2L {:.4}, L2L {:.4}, L2P {:.4}, P2P {:.4}, scatter {:.4}), {:.1} MB on the device",
            self.kernels(), self.k_sort, self.k_p2m, self.k_m2m, self.k_m2l, self.k_l2l,
            self.k_l2p, self.k_p2p, self.k_scatter, self.device_bytes as f64 / 1e6
        )
    }
}

/// The grid parameters of `params`: its order, its M2L kernel, its core, and its core cutoff
/// but at least the grid's default (`UniformParams::default().core_cutoff`, in source core
/// radii) and the core's least gap ([`vortex_fmm::kernel::CoreOrder::min_cutoff`]), so that
/// the adaptive octree's smaller default never shrinks the grid's leaves; one rule for every
/// caller (`vortex eval`, `vortex bench`, `vortex run`).
pub fn grid_params(params: &EvalParams) -> UniformParams {
    let d = UniformParams::default();
    UniformParams {
        order: params.order,
        core_cutoff: params
            .core_cutoff
            .max(d.core_cutoff)
            .max(params.core.min_cutoff()),
        core: params.core,
        m2l: params.m2l,
        ..d
    }
}

/// Refuses what the uniform grid does not evaluate (the planner does not send it).
fn check_request(params: &EvalParams, targets: &TargetSpec<'_>) -> Result<(), FmmError> {
    params.validate()?;
    if params.method != Method::Fmm {
        return Err(FmmError::BadParameter {
            name: "method",
            value: params.method.to_string(),
            reason: "the uniform grid evaluates the FMM only",
        });
    }
    if !matches!(targets, TargetSpec::Sources) {
        return Err(FmmError::BadParameter {
            name: "targets",
            value: targets.kind().to_string(),
            reason: "the uniform grid evaluates at the sources with their own strengths only",
        });
    }
    Ok(())
}

/// The uniform grid on one GPU, kept across evaluations (kernels, rotation tables, page-locked
/// buffers and the periodic far-image operators are reused).
pub struct UniformEvaluator {
    fmm: UniformFmm,
    params: EvalParams,
    /// Kernel times of the last evaluation, for logs.
    pub last: Option<UniformTimes>,
}

impl UniformEvaluator {
    /// Opens visible device `index` and compiles the kernels of `params.order` (an error,
    /// never a panic, without a GPU).
    pub fn new(index: usize, params: EvalParams) -> GpuResult<Self> {
        let fmm = UniformFmm::on_device(index)?;
        fmm.warm_up(params.order, params.core)?;
        Ok(Self {
            fmm,
            params,
            last: None,
        })
    }

    /// The grid engine (for its own entry points).
    pub fn uniform(&self) -> &UniformFmm {
        &self.fmm
    }
}

impl Evaluator for UniformEvaluator {
    fn evaluate(
        &mut self,
        sources: &Sources,
        targets: TargetSpec<'_>,
    ) -> Result<Evaluation, FmmError> {
        check_request(&self.params, &targets)?;
        let up = grid_params(&self.params);
        let run = match &self.params.periodic {
            None => self.fmm.evaluate(sources, &up),
            Some(q) => self.fmm.evaluate_periodic(sources, &up, q),
        };
        let (fields, t) = run.map_err(|e| FmmError::Backend(format!("uniform grid: {e}")))?;
        log::debug!("uniform grid {}^3 leaves: {}", t.n, t.kernel_report());
        let ev = Evaluation {
            fields,
            times: t.phase_times(),
            stats: t.plan_stats(),
            comm: CommStats::default(),
        };
        self.last = Some(t);
        Ok(ev)
    }
    fn describe(&self) -> String {
        let grid = self
            .last
            .as_ref()
            .map(|t| format!(" {}^3 leaves", t.n))
            .unwrap_or_default();
        format!("{} (uniform grid{grid})", self.fmm.device().name())
    }
    fn params(&self) -> &EvalParams {
        &self.params
    }
}

/// The uniform grid split into z slabs over the ranks of `comm`, one GPU per rank
/// ([`super::evaluate_distributed`]; periodic box: [`super::evaluate_distributed_periodic`]);
/// collective. Halo and coarse-multipole bytes are reported as P2Pcomm and M2Lcomm.
pub struct UniformSlabEvaluator<'c> {
    comm: &'c dyn Comm,
    fmm: UniformFmm,
    params: EvalParams,
    /// Leaves per side and slab planes of the last evaluation, for [`Evaluator::describe`].
    last: Option<(usize, usize)>,
}

impl<'c> UniformSlabEvaluator<'c> {
    /// Opens visible device `index` on this rank and compiles the kernels.
    pub fn new(comm: &'c dyn Comm, index: usize, params: EvalParams) -> GpuResult<Self> {
        let fmm = UniformFmm::on_device(index)?;
        fmm.warm_up(params.order, params.core)?;
        Ok(Self {
            comm,
            fmm,
            params,
            last: None,
        })
    }
}

impl Evaluator for UniformSlabEvaluator<'_> {
    fn evaluate(
        &mut self,
        sources: &Sources,
        targets: TargetSpec<'_>,
    ) -> Result<Evaluation, FmmError> {
        check_request(&self.params, &targets)?;
        let comm = self.comm;
        let up = grid_params(&self.params);
        let mut fields = vortex_fmm::Fields::default();
        let t = match &self.params.periodic {
            None => super::evaluate_distributed_into(comm, &self.fmm, sources, &up, &mut fields),
            Some(q) => {
                super::evaluate_distributed_periodic(comm, &self.fmm, sources, &up, q, &mut fields)
            }
        }
        .map_err(|e| FmmError::Backend(format!("uniform grid on rank {}: {e}", comm.rank())))?;
        let d = &t.device;
        let mut times = d.phase_times();
        times.transfer += t.plan;
        times.total = t.total;
        self.last = Some((d.n, t.planes.1 - t.planes.0));
        Ok(Evaluation {
            fields,
            times,
            stats: d.plan_stats(),
            comm: CommStats {
                bytes_redistribute: t.bytes_redistribute as u64,
                bytes_p2p: t.bytes_halo as u64,
                bytes_m2l: t.bytes_coarse as u64,
                halo_particles: t.halo_particles as u64,
                t_redistribute: t.redistribute,
                t_p2pcomm: t.halo,
                t_m2lcomm: t.coarse,
                ..Default::default()
            },
        })
    }
    fn describe(&self) -> String {
        let grid = self
            .last
            .map(|(n, planes)| format!(" {n}^3 leaves, slabs of {planes} planes"))
            .unwrap_or_default();
        format!(
            "{} (uniform grid{grid}, rank {} of {})",
            self.fmm.device().name(),
            self.comm.rank(),
            self.comm.size()
        )
    }
    fn params(&self) -> &EvalParams {
        &self.params
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uniform::reference::{evaluate_reference, evaluate_reference_periodic};
    use vortex_fmm::periodic::Periodic;

    /// The grid takes the order and the M2L kernel of the evaluation parameters, and never a
    /// core cutoff below its own default (no GPU needed: the parameters only).
    #[test]
    fn the_grid_parameters_come_from_the_evaluation_parameters() {
        use vortex_fmm::M2lKernel;
        let grid_default = UniformParams::default().core_cutoff;
        for m2l in [M2lKernel::Auto, M2lKernel::Rotation, M2lKernel::Dense] {
            for cutoff in [grid_default - 1.0, grid_default + 1.0] {
                let params = EvalParams {
                    order: 11,
                    core_cutoff: cutoff,
                    m2l,
                    ..Default::default()
                };
                let g = grid_params(&params);
                assert_eq!((g.order, g.m2l), (11, m2l));
                assert_eq!(g.core_cutoff, cutoff.max(grid_default));
            }
        }
        assert_eq!(UniformParams::default().m2l, M2lKernel::Auto);
    }

    /// The evaluator gives the uniform grid's result (against its f64 twin with the same grid
    /// parameters, free space and periodic) and refuses separate targets.
    #[test]
    #[cfg_attr(
        not(feature = "gpu-tests"),
        ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
    )]
    fn the_uniform_evaluator_matches_its_f64_twin() {
        let s = vortex_fmm::testsets::generate(
            vortex_fmm::testsets::Distribution::Uniform,
            20_000,
            9,
            true,
        );
        for periodic in [None, Some(Periodic::default())] {
            let params = EvalParams {
                method: Method::Fmm,
                order: 8,
                periodic,
                ..Default::default()
            };
            let mut ev = UniformEvaluator::new(0, params.clone()).unwrap();
            let got = ev.evaluate(&s, TargetSpec::Sources).unwrap();
            let twin = grid_params(&params);
            let want = match &periodic {
                None => evaluate_reference(&s, &twin).unwrap(),
                Some(q) => evaluate_reference_periodic(&s, &twin, q).unwrap(),
            };
            let (eu, es) = got.fields.relative_l2_errors(&want);
            println!(
                "UniformEvaluator periodic {}: vs f64 twin {eu:.2e} / {es:.2e}",
                periodic.is_some()
            );
            assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
            assert!(got.stats.far_pairs > 0 && got.times.total > 0.0);
            let t = s.as_targets();
            assert!(ev.evaluate(&s, TargetSpec::Points(&t)).is_err());
        }
    }

    /// Every GPU engine through `vortex_fmm::Evaluator` against the f64 direct sum on the same
    /// random inputs (`vortex_fmm::evaluator::errors_against_direct`, the check the CPU engines run
    /// in `crates/fmm/tests/evaluators.rs`); fp32 kernels, so tolerances of the FMM at p = 8.
    #[test]
    #[cfg_attr(
        not(feature = "gpu-tests"),
        ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
    )]
    fn every_gpu_evaluator_matches_the_direct_sum_through_the_trait() {
        use vortex_fmm::evaluator::errors_against_direct;
        use vortex_fmm::{PlanEvaluator, Targets};
        // a fixed seed, so that a failure reproduces (the messages name it)
        let seed = 417;
        for periodic in [None, Some(Periodic::default())] {
            let s = vortex_fmm::testsets::generate(
                vortex_fmm::testsets::Distribution::Uniform,
                4000,
                seed,
                periodic.is_some(),
            );
            let other: Vec<[f64; 3]> = s.strength.iter().rev().copied().collect();
            let points = Targets {
                position: s
                    .position
                    .iter()
                    .step_by(7)
                    .map(|x| x.map(|c| 0.9 * c))
                    .collect(),
                strength: s.strength.iter().step_by(7).copied().collect(),
            };
            for method in [Method::Treecode, Method::Fmm, Method::Ppm] {
                let params = EvalParams {
                    method,
                    order: 8,
                    periodic,
                    ..Default::default()
                };
                let mut ev =
                    PlanEvaluator::new(crate::CudaBackend::new(0).unwrap(), params).unwrap();
                if method == Method::Treecode && periodic.is_some() {
                    // no local-expansion pass for the far images on the GPU: an error (the
                    // planner refuses the combination before it gets here)
                    let e = ev.evaluate(&s, TargetSpec::Sources).unwrap_err();
                    assert!(e.to_string().contains("treecode"), "{e}");
                    continue;
                }
                for spec in [
                    TargetSpec::Sources,
                    TargetSpec::SourcesWith(&other),
                    TargetSpec::Points(&points),
                ] {
                    let (eu, es) = errors_against_direct(&mut ev, &s, spec).unwrap();
                    println!(
                        "seed {seed} {} {method} periodic {} at {}: {eu:.2e} / {es:.2e}",
                        ev.describe(),
                        periodic.is_some(),
                        spec.kind()
                    );
                    assert!(eu < 1e-4 && es < 1e-3, "{eu:.2e} {es:.2e}");
                }
            }
            // the uniform grid at p = 10 (above the default vortex_fmm::DEFAULT_ORDER = 8: at p = 8
            // its periodic truncation error on this small grid (3^3 leaves) is ~2e-4, that of its
            // f64 twin as well; the GPU adds fp32 round-off only:
            // the_uniform_evaluator_matches_its_f64_twin)
            let params = EvalParams {
                method: Method::Fmm,
                order: 10,
                periodic,
                ..Default::default()
            };
            let mut ev = UniformEvaluator::new(0, params).unwrap();
            let (eu, es) = errors_against_direct(&mut ev, &s, TargetSpec::Sources).unwrap();
            println!(
                "seed {seed} {} periodic {}: {eu:.2e} / {es:.2e}",
                ev.describe(),
                periodic.is_some()
            );
            assert!(eu < 1e-4 && es < 1e-3, "{eu:.2e} {es:.2e}");
        }
    }
}
