//! One interface for every evaluation engine: velocity and classical stretching
//! (`CONVENTIONS.md`, core paper Eq. 5-9) of a set of vortex elements at a set of targets.
//!
//! [`Evaluator`] is object safe: the [`crate::planner`] picks an engine (the direct sum, the
//! adaptive plan driving a [`Backend`] on the CPU or the GPU, the GPU uniform grid, their
//! distributed forms over `vortex_domain::Comm`) and hands it out as `Box<dyn Evaluator>`; callers
//! (`vortex eval`, `vortex bench`, the vortex method's right-hand side, its diagnostics) do not
//! know which one runs. An evaluator keeps what it can reuse between calls (a device, compiled
//! kernels, page-locked buffers, a grid's far-image operators): create it once, call it often.
//!
//! The particles cross this interface as host arrays ([`Sources`]). A device-resident engine
//! (particles kept on the GPU between time steps) fits as a further implementation whose
//! [`Evaluator::evaluate`] uploads only when the host data changed, or as a second trait over
//! device buffers that the same planner hands out; nothing here assumes host-side trees.

use crate::backend::{Backend, PhaseTimes};
pub use crate::evaluators::CommStats;
use crate::evaluators::{direct, evaluate, EvalParams, Evaluation, Method, PlanStats};
use crate::{periodic, FmmError, Sources, Targets};
use std::borrow::Cow;
use std::time::Instant;

/// Where the fields are wanted.
#[derive(Clone, Copy, Debug)]
pub enum TargetSpec<'a> {
    /// Every source at its own position, stretching of its own strength:
    /// `s_i = (alpha_i . grad) u(x_i)` (the vortex method's right-hand side).
    Sources,
    /// At the sources' positions, stretching of other strengths `a_i` (one per source):
    /// `(a_i . grad) u(x_i)`. The velocity is that of [`TargetSpec::Sources`].
    SourcesWith(&'a [[f64; 3]]),
    /// Separate points, each with the strength of the element sitting there (zero for plain
    /// evaluation points, whose stretching is then zero).
    Points(&'a Targets),
}

impl TargetSpec<'_> {
    /// Whether the targets sit at the sources (the first two kinds).
    pub fn at_sources(&self) -> bool {
        !matches!(self, TargetSpec::Points(_))
    }

    /// Short name for logs and refusals.
    pub fn kind(&self) -> TargetKind {
        match self {
            TargetSpec::Sources => TargetKind::Sources,
            TargetSpec::SourcesWith(_) => TargetKind::SourcesWith,
            TargetSpec::Points(_) => TargetKind::Points,
        }
    }

    /// The stretching strengths at the sources' positions (`None` for separate points);
    /// the error names the length mismatch.
    pub fn strengths_at_sources<'s>(
        &'s self,
        sources: &'s Sources,
    ) -> Result<Option<&'s [[f64; 3]]>, FmmError> {
        match self {
            TargetSpec::Sources => Ok(Some(&sources.strength)),
            TargetSpec::SourcesWith(a) => {
                if a.len() != sources.len() {
                    return Err(FmmError::LengthMismatch {
                        what: "target strengths at the sources",
                        position: sources.len(),
                        other: a.len(),
                    });
                }
                Ok(Some(a))
            }
            TargetSpec::Points(_) => Ok(None),
        }
    }

    /// The targets as plain [`Targets`] (borrowed for separate points).
    pub fn to_targets<'s>(&'s self, sources: &Sources) -> Result<Cow<'s, Targets>, FmmError> {
        Ok(match self {
            TargetSpec::Points(t) => Cow::Borrowed(*t),
            _ => Cow::Owned(Targets {
                position: sources.position.clone(),
                strength: self
                    .strengths_at_sources(sources)?
                    .expect("at the sources")
                    .to_vec(),
            }),
        })
    }
}

/// The kinds of [`TargetSpec`], for the planner's table and its logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    Sources,
    SourcesWith,
    Points,
}

impl std::fmt::Display for TargetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sources => "the sources themselves",
            Self::SourcesWith => "the sources with other stretching strengths",
            Self::Points => "separate targets",
        })
    }
}

/// An evaluation engine, ready to evaluate (see the module documentation).
pub trait Evaluator {
    /// Velocity and stretching induced by `sources` at `targets`, in the targets' order
    /// (`1/(4 pi)` included), with the phase times and work counts of this evaluation.
    /// Under MPI a distributed evaluator is collective: every rank calls it with its part.
    fn evaluate(
        &mut self,
        sources: &Sources,
        targets: TargetSpec<'_>,
    ) -> Result<Evaluation, FmmError>;
    /// What runs, for logs and reports (engine, device, grid).
    fn describe(&self) -> String;
    /// The parameters it evaluates with.
    fn params(&self) -> &EvalParams;
}

/// The O(N^2) f64 direct sum (free space or periodic Ewald-free image sum of
/// [`direct::direct_periodic`]): the reference of every other engine.
#[derive(Clone, Debug)]
pub struct DirectEvaluator {
    params: EvalParams,
}

impl DirectEvaluator {
    /// The direct sum with `params.periodic` (the other parameters are recorded, not used).
    pub fn new(params: EvalParams) -> Self {
        Self {
            params: EvalParams {
                method: Method::Direct,
                ..params
            },
        }
    }
}

impl Evaluator for DirectEvaluator {
    fn evaluate(
        &mut self,
        sources: &Sources,
        targets: TargetSpec<'_>,
    ) -> Result<Evaluation, FmmError> {
        let targets = targets.to_targets(sources)?;
        let t0 = Instant::now();
        sources.validate()?;
        targets.validate()?;
        if let Some(p) = &self.params.periodic {
            p.validate()?;
            periodic::check_input(p, sources, &targets.position)?;
        }
        let mut times = PhaseTimes::default();
        let fields = crate::backend::timed(&mut times.p2p, || match &self.params.periodic {
            None => direct::direct_core(self.params.core, sources, &targets),
            Some(p) => direct::direct_periodic_core(self.params.core, sources, &targets, p),
        });
        times.total = t0.elapsed().as_secs_f64();
        Ok(Evaluation {
            fields,
            times,
            stats: PlanStats {
                p2p_interactions: (sources.len() * targets.len()) as u64,
                ..PlanStats::default()
            },
            comm: CommStats::default(),
        })
    }
    fn describe(&self) -> String {
        "direct sum (f64, CPU)".into()
    }
    fn params(&self) -> &EvalParams {
        &self.params
    }
}

/// The adaptive octree: trees and lists built on the host ([`crate::evaluators::plan`]), the
/// phases run by `backend` (the f64 CPU reference or the CUDA backend), for every method
/// (treecode, FMM, PPM; the direct sum when `params.method` says so), free space or periodic.
pub struct PlanEvaluator<B: Backend> {
    pub backend: B,
    params: EvalParams,
}

impl<B: Backend> PlanEvaluator<B> {
    /// Checks the parameters (the error names the bad one).
    pub fn new(backend: B, params: EvalParams) -> Result<Self, FmmError> {
        params.validate()?;
        Ok(Self { backend, params })
    }
}

impl<B: Backend> Evaluator for PlanEvaluator<B> {
    fn evaluate(
        &mut self,
        sources: &Sources,
        targets: TargetSpec<'_>,
    ) -> Result<Evaluation, FmmError> {
        let targets = targets.to_targets(sources)?;
        evaluate(&self.backend, &self.params, sources, &targets)
    }
    fn describe(&self) -> String {
        format!("adaptive octree on {}", self.backend.name())
    }
    fn params(&self) -> &EvalParams {
        &self.params
    }
}

/// A preferred engine and a general one: when the first refuses an evaluation (for the GPU
/// uniform grid: a box too small for the cores, a grid too large for the device), the second
/// evaluates it, and the first refusal is logged at `warn`. Other errors of the first (bad
/// input) are returned as they are.
pub struct WithFallback<'a> {
    first: Box<dyn Evaluator + 'a>,
    then: Box<dyn Evaluator + 'a>,
    warned: bool,
}

impl<'a> WithFallback<'a> {
    pub fn new(first: Box<dyn Evaluator + 'a>, then: Box<dyn Evaluator + 'a>) -> Self {
        Self {
            first,
            then,
            warned: false,
        }
    }
}

impl Evaluator for WithFallback<'_> {
    fn evaluate(
        &mut self,
        sources: &Sources,
        targets: TargetSpec<'_>,
    ) -> Result<Evaluation, FmmError> {
        match self.first.evaluate(sources, targets) {
            Err(FmmError::Backend(e)) => {
                if !self.warned {
                    self.warned = true;
                    log::warn!(
                        "{} not used ({e}): {} evaluates",
                        self.first.describe(),
                        self.then.describe()
                    );
                }
                self.then.evaluate(sources, targets)
            }
            r => r,
        }
    }
    fn describe(&self) -> String {
        format!("{} (else {})", self.first.describe(), self.then.describe())
    }
    fn params(&self) -> &EvalParams {
        self.first.params()
    }
}

/// Relative L2 errors (velocity, stretching) of `ev` against the f64 direct sum with the same
/// periodic box, on the same inputs, both through [`Evaluator`]: the one check every engine's
/// test runs (CPU engines in `tests/evaluators.rs`, GPU engines in `vortex-gpu`).
pub fn errors_against_direct(
    ev: &mut dyn Evaluator,
    sources: &Sources,
    targets: TargetSpec<'_>,
) -> Result<(f64, f64), FmmError> {
    let got = ev.evaluate(sources, targets)?;
    let mut reference = DirectEvaluator::new(ev.params().clone());
    let want = reference.evaluate(sources, targets)?;
    Ok(got.fields.relative_l2_errors(&want.fields))
}
