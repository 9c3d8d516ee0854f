//! The adaptive octree over the ranks of a [`Comm`] behind `vortex_fmm::Evaluator`:
//! [`DistributedEvaluator`] (any distribution of sources and targets: partition,
//! redistribution, locally essential trees, [`crate::evaluate_distributed`]) and
//! [`OwnedEvaluator`] (particles already at the owners of a partition, each at itself:
//! [`crate::evaluate_owned`], the vortex method's right-hand side between redistributions).

use crate::{evaluate_distributed, evaluate_owned, Comm, DomainError, DomainParams, Partition};
use crate::{OwnedSources, OwnedTargets};
use vortex_fmm::{
    Backend, EvalParams, Evaluation, Evaluator, FmmError, PhaseTimes, Sources, TargetSpec,
};

/// A domain error as the evaluator trait's error (FMM errors pass through).
fn fmm_error(e: DomainError) -> FmmError {
    match e {
        DomainError::Fmm(f) => f,
        e => FmmError::Backend(e.to_string()),
    }
}

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
        .map_err(fmm_error)?;
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

/// The evaluation of particles that sit at their owners under `part`, sorted by (Morton key,
/// global id) (`keys`, `gid`, one per source), each at itself: no partition or redistribution,
/// only the locally essential trees. Collective. Targets other than the sources themselves
/// (with their own or other stretching strengths) are refused: use [`DistributedEvaluator`].
pub struct OwnedEvaluator<'a, 'c, B: Backend> {
    comm: &'c dyn Comm,
    backend: B,
    params: EvalParams,
    part: &'a Partition,
    gid: &'a [u64],
    keys: &'a [u64],
}

impl<'a, 'c, B: Backend> OwnedEvaluator<'a, 'c, B> {
    /// Checks the parameters (the error names the bad one).
    pub fn new(
        comm: &'c dyn Comm,
        backend: B,
        params: EvalParams,
        part: &'a Partition,
        gid: &'a [u64],
        keys: &'a [u64],
    ) -> Result<Self, FmmError> {
        params.validate()?;
        Ok(Self {
            comm,
            backend,
            params,
            part,
            gid,
            keys,
        })
    }
}

impl<B: Backend> Evaluator for OwnedEvaluator<'_, '_, B> {
    fn evaluate(
        &mut self,
        sources: &Sources,
        targets: TargetSpec<'_>,
    ) -> Result<Evaluation, FmmError> {
        if !targets.at_sources() {
            return Err(FmmError::Backend(
                "the owned evaluation is at the sources themselves; separate targets go \
                 through the distributed evaluator"
                    .into(),
            ));
        }
        if self.gid.len() != sources.len() || self.keys.len() != sources.len() {
            return Err(FmmError::LengthMismatch {
                what: "global ids and keys of the owned sources",
                position: sources.len(),
                other: self.gid.len().min(self.keys.len()),
            });
        }
        let t0 = std::time::Instant::now();
        let owned = |v: &[u64]| v.to_vec();
        let tgt = OwnedTargets {
            gid: owned(self.gid),
            key: owned(self.keys),
            targets: targets.to_targets(sources)?.into_owned(),
        };
        let src = OwnedSources {
            gid: owned(self.gid),
            key: owned(self.keys),
            sources: sources.clone(),
        };
        let mut comm = Default::default();
        let mut times = PhaseTimes::default();
        let fields = evaluate_owned(
            self.comm,
            &self.backend,
            &self.params,
            self.part,
            &src,
            &tgt,
            &mut comm,
            &mut times,
        )
        .map_err(fmm_error)?;
        times.total = t0.elapsed().as_secs_f64();
        Ok(Evaluation {
            fields,
            times,
            stats: Default::default(),
            comm,
        })
    }
    fn describe(&self) -> String {
        format!(
            "adaptive octree of owned particles on {}, rank {} of {}",
            self.backend.name(),
            self.comm.rank(),
            self.comm.size()
        )
    }
    fn params(&self) -> &EvalParams {
        &self.params
    }
}
