//! [`DistributedEvaluator`]: the adaptive octree over the ranks of a [`Comm`] (locally
//! essential trees, [`crate::evaluate_distributed`]) behind `fmm::Evaluator`.

use crate::{evaluate_distributed, Comm, DomainParams};
use fmm::{Backend, EvalParams, Evaluation, Evaluator, FmmError, Sources, TargetSpec};

/// The distributed adaptive evaluation with this rank's `backend`; collective: every rank
/// calls [`Evaluator::evaluate`] with its own sources and targets (any distribution), and gets
/// the fields at its targets, in their order. Its communication is in `Evaluation::comm`.
pub struct DistributedEvaluator<'c, B: Backend> {
    comm: &'c dyn Comm,
    backend: B,
    params: EvalParams,
    dparams: DomainParams,
    /// Work (sources + targets) owned by each rank in the last evaluation.
    pub work: Vec<u64>,
}

impl<'c, B: Backend> DistributedEvaluator<'c, B> {
    /// Checks the parameters (the error names the bad one).
    pub fn new(comm: &'c dyn Comm, backend: B, params: EvalParams) -> Result<Self, FmmError> {
        params.validate()?;
        Ok(Self {
            comm,
            backend,
            params,
            dparams: DomainParams::default(),
            work: Vec::new(),
        })
    }
}

impl<B: Backend> Evaluator for DistributedEvaluator<'_, B> {
    fn evaluate(
        &mut self,
        sources: &Sources,
        targets: TargetSpec<'_>,
    ) -> Result<Evaluation, FmmError> {
        let targets = targets.to_targets(sources)?;
        let e = evaluate_distributed(
            self.comm,
            &self.backend,
            &self.params,
            &self.dparams,
            sources,
            &targets,
        )
        .map_err(|e| match e {
            crate::DomainError::Fmm(f) => f,
            e => FmmError::Backend(e.to_string()),
        })?;
        self.work = e.work;
        Ok(Evaluation {
            fields: e.fields,
            times: e.times,
            stats: Default::default(),
            comm: e.stats,
        })
    }
    fn describe(&self) -> String {
        format!(
            "adaptive octree on {}, rank {} of {}",
            self.backend.name(),
            self.comm.rank(),
            self.comm.size()
        )
    }
    fn params(&self) -> &EvalParams {
        &self.params
    }
}
