//! The evaluation methods ([`Method`]) driven through one [`Backend`]: `direct` (O(N^2)
//! reference), the treecode (M2P), the FMM (M2L) and the PPM (pseudo-particle M2L), all
//! producing velocity and stretching in the targets' input order.
//!
//! [`evaluate`] validates the input, builds the trees and lists (the [`Plan`]) and drives a
//! [`Backend`] through the phases; it does not know which backend runs.

pub mod direct;

use crate::backend::{timed, Backend, FarField, PhaseTimes, Plan};
use crate::far::{Expansions, FarMethod};
use crate::kernel::CoreOrder;
use crate::lists::{cell_sigma_max, InteractionLists, ListParams};
use crate::operators::Operators;
use crate::periodic::{self, Periodic};
use crate::tree::{BoundingCube, Tree};
use crate::{Fields, FmmError, Sources, Targets, MAX_ORDER};
use std::str::FromStr;
use std::time::Instant;

/// Which evaluator to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    Direct,
    Treecode,
    Fmm,
    /// FMM tree with the pseudo-particle far field (core paper Sec. 3.3).
    Ppm,
}

impl FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "direct" => Ok(Self::Direct),
            "treecode" => Ok(Self::Treecode),
            "fmm" => Ok(Self::Fmm),
            "ppm" => Ok(Self::Ppm),
            _ => Err(format!(
                "unknown method '{s}' (expected direct, treecode, fmm or ppm)"
            )),
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Direct => "direct",
            Self::Treecode => "treecode",
            Self::Fmm => "fmm",
            Self::Ppm => "ppm",
        })
    }
}

/// Parameters of one evaluation. The defaults give a velocity error below 1e-4 on the
/// standard test set.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalParams {
    pub method: Method,
    /// Expansion order `p`.
    pub order: usize,
    /// Opening angle of the acceptance criterion.
    pub theta: f64,
    /// Largest number of points in a leaf.
    pub leaf_size: usize,
    /// Minimum gap of a far interaction in source core radii (for a core of order above 2 at
    /// least [`CoreOrder::min_cutoff`]).
    pub core_cutoff: f64,
    /// The order of the cores of the near field ([`crate::kernel::cores`]; the far field is
    /// singular beyond `core_cutoff`).
    pub core: CoreOrder,
    /// Periodic box and image levels (`None`: free space).
    pub periodic: Option<Periodic>,
    /// The M2L translation of the GPU uniform grid below its top level (the adaptive plan
    /// ignores it).
    pub m2l: crate::far::M2lKernel,
}

impl Default for EvalParams {
    fn default() -> Self {
        Self {
            method: Method::Fmm,
            order: crate::DEFAULT_ORDER,
            theta: 0.55,
            leaf_size: 64,
            core_cutoff: 4.0,
            core: CoreOrder::Second,
            periodic: None,
            m2l: crate::far::M2lKernel::Auto,
        }
    }
}

impl EvalParams {
    pub fn validate(&self) -> Result<(), FmmError> {
        crate::check_order(self.order, MAX_ORDER)?;
        if !(self.theta > 0.0 && self.theta < 1.0) {
            return Err(FmmError::BadParameter {
                name: "theta",
                value: self.theta.to_string(),
                reason: "the opening angle must lie in (0, 1)",
            });
        }
        if self.leaf_size == 0 {
            return Err(FmmError::BadParameter {
                name: "leaf_size",
                value: "0".into(),
                reason: "a leaf must hold at least one particle",
            });
        }
        if !(self.core_cutoff >= 0.0 && self.core_cutoff <= crate::MAX_CUTOFF) {
            return Err(FmmError::BadParameter {
                name: "core_cutoff",
                value: self.core_cutoff.to_string(),
                reason: "must be a number of core radii in [0, 12] (crate::MAX_CUTOFF: beyond \
                         it the Gaussian core is below round-off)",
            });
        }
        if self.core_cutoff < self.core.min_cutoff() {
            return Err(FmmError::CutoffTooSmall {
                core_cutoff: self.core_cutoff,
                core: self.core,
                min: self.core.min_cutoff(),
            });
        }
        if let Some(p) = &self.periodic {
            p.validate()?;
        }
        Ok(())
    }
}

/// The result of one evaluation: fields in the targets' input order, the phase timings and
/// the size of the work.
#[derive(Clone, Debug)]
pub struct Evaluation {
    pub fields: Fields,
    pub times: PhaseTimes,
    pub stats: PlanStats,
    /// Communication of a distributed evaluation (all zero on one rank).
    pub comm: CommStats,
}

/// Counts of the work of one evaluation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanStats {
    pub source_cells: usize,
    pub target_cells: usize,
    pub depth: usize,
    /// Leaf pairs of the near field.
    pub near_pairs: usize,
    /// Cell pairs of the far field (M2L for the FMM/PPM, M2P for the treecode).
    pub far_pairs: usize,
    /// Particle pairs summed directly (P2P).
    pub p2p_interactions: u64,
}

impl PlanStats {
    pub fn of(plan: &Plan) -> Self {
        let tt = &plan.target_tree;
        let p2p_interactions = (0..tt.cells.len())
            .map(|t| {
                let nt = tt.cells[t].len() as u64;
                plan.lists
                    .near
                    .row(t)
                    .iter()
                    .map(|s| nt * plan.source_tree.cells[s.cell as usize].len() as u64)
                    .sum::<u64>()
            })
            .sum();
        Self {
            source_cells: plan.source_tree.cells.len(),
            target_cells: tt.cells.len(),
            depth: plan.source_tree.depth().max(tt.depth()),
            near_pairs: plan.lists.near.len(),
            far_pairs: plan.lists.far.len(),
            p2p_interactions,
        }
    }
}

/// Builds the trees and lists of a fast evaluation (exposed for benchmarks and the GPU tests).
pub fn plan(
    params: &EvalParams,
    sources: &Sources,
    targets: &Targets,
    times: &mut PhaseTimes,
) -> Result<(Plan, Sources, Targets), FmmError> {
    let far_field = FarField::of_method(params.method).ok_or(FmmError::BadParameter {
        name: "method",
        value: "direct".into(),
        reason: "the direct sum has no plan",
    })?;
    let (source_tree, target_tree, sorted_sources, sorted_targets) = timed(&mut times.tree, || {
        let (src_pos, tgt_pos, cube) = match &params.periodic {
            None => (
                sources.position.clone(),
                targets.position.clone(),
                BoundingCube::around(&[&sources.position, &targets.position]),
            ),
            Some(p) => (
                sources.position.iter().map(|&x| p.wrap(x)).collect(),
                targets.position.iter().map(|&x| p.wrap(x)).collect(),
                BoundingCube {
                    lo: [-0.5 * p.box_length; 3],
                    width: p.box_length,
                },
            ),
        };
        let st = Tree::build(&src_pos, cube, params.leaf_size);
        let tt = Tree::build(&tgt_pos, cube, params.leaf_size);
        let ss = Sources {
            position: st.gather(&src_pos),
            strength: st.gather(&sources.strength),
            sigma: st.gather(&sources.sigma),
        };
        let ts = Targets {
            position: tt.gather(&tgt_pos),
            strength: tt.gather(&targets.strength),
        };
        (st, tt, ss, ts)
    });
    let lists = timed(&mut times.lists, || {
        let sigma_max = cell_sigma_max(&source_tree, &sorted_sources.sigma);
        let lp = ListParams {
            theta: params.theta,
            core_cutoff: params.core_cutoff,
            period: params.periodic.map(|p| p.box_length),
            sphere_radius_factor: FarMethod::new(far_field, params.order).sphere_radius_factor(),
        };
        InteractionLists::build(&target_tree, &source_tree, &sigma_max, &lp)
    });
    log::debug!(
        "plan: {} source cells, {} target cells, depth {}, {} near and {} far pairs",
        source_tree.cells.len(),
        target_tree.cells.len(),
        source_tree.depth(),
        lists.near.len(),
        lists.far.len()
    );
    Ok((
        Plan {
            order: params.order,
            core: params.core,
            far_field,
            source_tree,
            target_tree,
            lists,
            periodic: params.periodic,
        },
        sorted_sources,
        sorted_targets,
    ))
}

/// Refuses coordinates whose expansions would overflow: bounding-box edge `D` with
/// `D^(2p+2) > 1e300` (e.g. one particle at 1e50 with p = 10). Direct sums are not limited.
pub fn check_extent(params: &EvalParams, a: &[[f64; 3]], b: &[[f64; 3]]) -> Result<(), FmmError> {
    if params.method == Method::Direct {
        return Ok(());
    }
    let (mut lo, mut hi) = ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]);
    for x in a.iter().chain(b) {
        for c in 0..3 {
            lo[c] = lo[c].min(x[c]);
            hi[c] = hi[c].max(x[c]);
        }
    }
    let extent = (0..3).map(|c| hi[c] - lo[c]).fold(0.0, f64::max);
    if extent > 0.0 && (2 * params.order + 2) as f64 * extent.log10() > 300.0
        || extent.is_infinite()
    {
        return Err(FmmError::ExpansionOverflow {
            extent,
            order: params.order,
        });
    }
    Ok(())
}

/// Refuses an evaluation whose velocity or stretching is not finite, naming the element and,
/// where they can overflow double precision, the sources' largest strength and smallest core.
pub fn check_output(
    params: &EvalParams,
    ev: Evaluation,
    position: &[[f64; 3]],
    sources: &Sources,
) -> Result<Evaluation, FmmError> {
    let bad = |v: &[[f64; 3]]| v.iter().position(|x| x.iter().any(|c| !c.is_finite()));
    let hit = bad(&ev.fields.velocity)
        .map(|i| ("velocity", i))
        .or_else(|| bad(&ev.fields.stretching).map(|i| ("stretching", i)));
    match hit {
        Some((field, index)) => Err(FmmError::NonFiniteResult {
            method: format!("{:?}", params.method).to_lowercase(),
            field,
            index,
            position: position.get(index).copied().unwrap_or([f64::NAN; 3]),
            scales: overflow_scales(sources),
        }),
        None => Ok(ev),
    }
}

/// Velocity and stretching induced by `sources` at `targets` with the chosen method; the input
/// is checked first (finite, positive cores, coordinates the expansions can represent:
/// [`check_extent`]) and a non-finite result is refused with the element it concerns.
pub fn evaluate<B: Backend>(
    backend: &B,
    params: &EvalParams,
    sources: &Sources,
    targets: &Targets,
) -> Result<Evaluation, FmmError> {
    let ev = evaluate_unchecked(backend, params, sources, targets)?;
    check_output(params, ev, &targets.position, sources)
}

/// The sources' largest strength `|alpha|` and smallest core `sigma` when the velocity
/// scale `|alpha| / sigma^2` or the stretching scale `|alpha|^2 / sigma^3` leaves double
/// precision (the cause of a non-finite result), as a clause of the error; empty otherwise.
fn overflow_scales(sources: &Sources) -> String {
    let alpha = sources
        .strength
        .iter()
        .map(|a| a.iter().map(|c| c.abs()).fold(0.0, f64::max))
        .fold(0.0, f64::max);
    let sigma = sources.sigma.iter().copied().fold(f64::INFINITY, f64::min);
    // in logarithms: the scales themselves may overflow
    let (la, ls) = (alpha.log10(), sigma.log10());
    if alpha > 0.0 && sigma > 0.0 && (la - 2.0 * ls > 300.0 || 2.0 * la - 3.0 * ls > 300.0) {
        format!(
            ": the sources' largest strength |alpha| = {alpha:e} and smallest core sigma = \
             {sigma:e} put the velocity (|alpha| / sigma^2) or the stretching (|alpha|^2 / \
             sigma^3) beyond double precision; rescale the strengths"
        )
    } else {
        String::new()
    }
}

fn evaluate_unchecked<B: Backend>(
    backend: &B,
    params: &EvalParams,
    sources: &Sources,
    targets: &Targets,
) -> Result<Evaluation, FmmError> {
    params.validate()?;
    sources.validate()?;
    targets.validate()?;
    check_extent(params, &sources.position, &targets.position)?;
    if let Some(p) = &params.periodic {
        periodic::check_input(p, sources, &targets.position)?;
    }
    let t0 = Instant::now();
    let mut times = PhaseTimes::default();
    if params.method == Method::Direct {
        let fields = timed(&mut times.p2p, || match &params.periodic {
            None => direct::direct_core(params.core, sources, targets),
            Some(p) => direct::direct_periodic_core(params.core, sources, targets, p),
        });
        times.total = t0.elapsed().as_secs_f64();
        let n = (sources.len() * targets.len()) as u64;
        let stats = PlanStats {
            p2p_interactions: n,
            ..PlanStats::default()
        };
        return Ok(Evaluation {
            fields,
            times,
            stats,
            comm: Default::default(),
        });
    }
    let (plan, sorted_sources, sorted_targets) = plan(params, sources, targets, &mut times)?;
    let mut state = timed(&mut times.transfer, || {
        backend.prepare(&plan, &sorted_sources, &sorted_targets)
    })?;
    backend.upward(&plan, &mut state, &mut times)?;
    if let Some(p) = &plan.periodic {
        timed(&mut times.m2l, || -> Result<(), FmmError> {
            let (cells, data) = periodic_far_images(backend, &plan, &state, p)?;
            backend.add_locals(&plan, &mut state, &cells, &data)
        })?;
    }
    backend.downward(&plan, &mut state, &mut times)?;
    backend.near_field(&plan, &mut state, &mut times)?;
    let sorted = {
        let mut t = 0.0;
        let f = timed(&mut t, || backend.fields(&plan, state))?;
        times.transfer += t;
        f
    };
    let mut fields = Fields {
        velocity: plan.target_tree.scatter(&sorted.velocity),
        stretching: plan.target_tree.scatter(&sorted.stretching),
    };
    if let Some(p) = &plan.periodic {
        let corr = periodic::surface_correction(&sorted_sources, p.box_length);
        periodic::subtract_surface(&mut fields.velocity, corr);
    }
    times.total = t0.elapsed().as_secs_f64();
    Ok(Evaluation {
        fields,
        times,
        stats: PlanStats::of(&plan),
        comm: Default::default(),
    })
}

/// Local data of the far periodic images for the level-2 target cells (and shallower
/// leaves), in the plan's far-field representation ([`FarMethod::from_fmm_locals`]: FMM local
/// coefficients, or pseudo-particle potentials).
pub fn periodic_far_images<B: Backend>(
    backend: &B,
    plan: &Plan,
    state: &B::State,
    p: &Periodic,
) -> Result<(Vec<usize>, Expansions), FmmError> {
    let root_m = backend.multipoles(plan, state, &[0])?;
    let ops = Operators::new(plan.order);
    let far = FarMethod::of_plan(plan);
    // The FMM multipole of the whole box about its centre (the origin).
    let root = far.fmm_multipole(&ops, &plan.source_tree.cells[0], &root_m);
    let tt = &plan.target_tree;
    let locals = periodic::outer_image_locals(&ops, p, &root, tt);
    let cells: Vec<usize> = locals.iter().map(|l| l.0).collect();
    Ok((cells, far.from_fmm_locals(tt, &locals)))
}

/// Bytes and seconds of the communication of one distributed evaluation (all zero on one
/// rank). Bytes are those this rank sent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommStats {
    /// Partition counts and cell summaries (allreduce).
    pub bytes_summary: u64,
    /// Particles moved to their owners (and fields returned).
    pub bytes_redistribute: u64,
    /// P2Pcomm: pruned subtrees and halo particles.
    pub bytes_p2p: u64,
    /// M2Lcomm: requests (cell keys), branch multipoles (all-gather) and the requested
    /// multipoles (those the receiver's far lists use).
    pub bytes_m2l: u64,
    /// Halo particles received.
    pub halo_particles: u64,
    /// Remote cells received (below branch cells).
    pub remote_cells: u64,
    /// Multipoles of cells below branch cells sent to other ranks in M2Lcomm.
    pub m2l_cells_sent: u64,
    /// Remote cells below branch cells that this rank's far lists use (each needs the
    /// multipole received for it: a lower bound of what M2Lcomm must bring).
    pub m2l_cells_used: u64,
    /// Seconds of the partition (s).
    pub t_partition: f64,
    /// Seconds of the redistribution (s).
    pub t_redistribute: f64,
    /// Seconds of P2Pcomm (s).
    pub t_p2pcomm: f64,
    /// Seconds of M2Lcomm (s).
    pub t_m2lcomm: f64,
    /// Wall-clock seconds of the steps of the evaluation on this rank, in pipeline order
    /// (bookkeeping, exchanges and the backend phases), for profiling.
    pub profile: Vec<(&'static str, f64)>,
}

impl CommStats {
    /// Bytes sent in all (summary, redistribution, P2Pcomm, M2Lcomm).
    pub fn bytes_total(&self) -> u64 {
        self.bytes_summary + self.bytes_redistribute + self.bytes_p2p + self.bytes_m2l
    }

    /// Seconds spent communicating (partition, redistribution, P2Pcomm, M2Lcomm).
    pub fn seconds(&self) -> f64 {
        self.t_partition + self.t_redistribute + self.t_p2pcomm + self.t_m2lcomm
    }
}

impl FarField {
    /// The far field of an evaluation method (`None` for the direct sum: no plan).
    pub fn of_method(method: Method) -> Option<Self> {
        match method {
            Method::Fmm => Some(Self::Fmm),
            Method::Treecode => Some(Self::Treecode),
            Method::Ppm => Some(Self::Ppm),
            Method::Direct => None,
        }
    }
}
