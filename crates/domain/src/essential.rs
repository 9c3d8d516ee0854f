//! The locally essential tree (LET) of a rank and one distributed evaluation.
//!
//! Every rank holds the particles of its branch cells (see [`crate::partition`]). One
//! evaluation:
//! 1. **summary** (allreduce): tight radii and largest core radii of the partition-tree cells,
//!    and the shallowest / deepest target leaf level below each branch cell;
//! 2. **P2Pcomm** (sparse all-to-all): for every other rank `r`, the cells of this rank's
//!    subtrees that `r`'s dual traversal may visit, pruned by a conservative acceptance test
//!    against `r`'s target branch cells (all possible target cell sizes and positions inside
//!    them, the top target cells above them, the core-radius gap, the 27 periodic images), and
//!    the particles of the leaves `r` may pair in P2P;
//! 3. the **extended source tree** (replicated top tree + own subtrees + received cells) and the
//!    local target tree (top cells above own branch cells + own subtrees) go through the
//!    *unchanged* dual traversal ([`vortex_fmm::lists::InteractionLists::build_checked`]), which
//!    reports any truncated remote cell it would have split: an error, never a silent
//!    difference;
//! 4. **M2Lcomm**: every rank asks each owner (sparse all-to-all of cell keys, 9 bytes a cell)
//!    for the multipoles of exactly the received cells that its far lists use: a received
//!    cell that the traversal only opened, or paired in P2P, needs none. Then `upward` on the
//!    backend; the branch multipoles are all-gathered and the top tree's multipoles built from
//!    them by M2M in the single-rank order; the requested multipoles follow (all-to-all); both
//!    are written into the backend with `set_multipoles`. (A sender-side conservative test,
//!    "may the receiver accept this cell?", was measured to prune nothing: the receiver's
//!    target cells are unknown below its branch cells, and some target size and position
//!    always accepts; the request costs one latency and < 0.3 % of the bytes.)
//! 5. the periodic far images from the (replicated) root multipole, `downward`, `near_field`.
//!
//! Every target cell therefore sees exactly the interaction lists of the single-rank run, and
//! the results agree with it to round-off whatever the number of ranks.

use crate::comm::{bytes_allreduce, bytes_sent, Comm, ReduceOp};
use crate::ext_tree::{assemble, max_of, radius2_of, subtree_cells, Assembled, NodeInfo};
use crate::partition::{key_span, Partition};
use crate::wire::{Reader, Writer};
use crate::{CommStats, DomainError, Record};
use rayon::prelude::*;
use std::collections::HashMap;
use std::time::Instant;
use vortex_fmm::backend::{timed, Backend, FarField, PhaseTimes, Plan};
use vortex_fmm::lists::{CsrList, InteractionLists, ListParams, COMPLETE, NO_PARTICLES, TRUNCATED};
use vortex_fmm::operators::{Operators, Scratch};
use vortex_fmm::tree::MAX_LEVEL;
use vortex_fmm::{EvalParams, Expansions, FarMethod, Fields, Sources, Targets};

/// Sources owned by this rank, sorted by (Morton key, global id).
#[derive(Clone, Debug, Default)]
pub struct OwnedSources {
    pub gid: Vec<u64>,
    pub key: Vec<u64>,
    pub sources: Sources,
}

/// Targets owned by this rank, sorted by (Morton key, global id).
#[derive(Clone, Debug, Default)]
pub struct OwnedTargets {
    pub gid: Vec<u64>,
    pub key: Vec<u64>,
    pub targets: Targets,
}

const SQRT3: f64 = 1.732_050_807_568_877_2;
/// Values per partition cell in the summary: src r^2, src sigma_max, tgt r^2, -min leaf level,
/// max leaf level.
const SUMMARY: usize = 5;

/// A target branch cell of another rank, as far as this rank can know it.
struct Region {
    lo: [f64; 3],
    hi: [f64; 3],
    level: u32,
    hw: f64,
    radius: f64,
    min_leaf: u32,
    max_leaf: u32,
}

/// A target cell of the top tree of another rank (an internal cell).
struct TopTarget {
    center: [f64; 3],
    hw: f64,
    radius: f64,
}

/// What this rank knows of another rank's target cells.
struct View {
    regions: Vec<Region>,
    tops: Vec<TopTarget>,
    lo: [f64; 3],
    hi: [f64; 3],
    rmax: f64,
    hwmax: f64,
}

struct Mac {
    theta: f64,
    core_cutoff: f64,
    period: Option<f64>,
    /// PPM: radii of the criterion are `f * half_width` (see `ListParams`).
    sphere: Option<f64>,
}

impl Mac {
    /// Whether the acceptance criterion may fail for a target of radius at most `rt` whose
    /// centre is at least `d` from the source centre (conservative by a relative 1e-9).
    #[inline]
    fn may_fail(&self, rt: f64, rs: f64, sigma: f64, d: f64) -> bool {
        let rsum = rt + rs;
        !(rsum < self.theta * d * (1.0 - 1e-9) && d - rsum >= self.core_cutoff * sigma + 1e-9 * d)
    }

    fn images(&self) -> impl Iterator<Item = [f64; 3]> + '_ {
        let n = if self.period.is_some() { 27 } else { 1 };
        (0..n).map(move |i| match self.period {
            None => [0.0; 3],
            Some(l) => {
                let s = vortex_fmm::lists::image_shift(i as u8);
                [s[0] as f64 * l, s[1] as f64 * l, s[2] as f64 * l]
            }
        })
    }

    /// Smallest distance from the images of `c` to the box `[lo, hi]`.
    fn box_dist(&self, c: [f64; 3], lo: [f64; 3], hi: [f64; 3]) -> f64 {
        self.images()
            .map(|s| {
                (0..3)
                    .map(|k| {
                        let x = c[k] + s[k];
                        let g = (lo[k] - x).max(x - hi[k]).max(0.0);
                        g * g
                    })
                    .sum::<f64>()
            })
            .fold(f64::INFINITY, f64::min)
            .sqrt()
    }

    /// Whether rank `view`'s traversal may need the children (internal `s`) or the particles
    /// (leaf `s`) of source cell `s`.
    #[allow(clippy::too_many_arguments)]
    fn needs_open(
        &self,
        view: &View,
        center: [f64; 3],
        level: u32,
        hw: f64,
        rs: f64,
        sigma: f64,
        leaf: bool,
    ) -> bool {
        // radius of a cell in the criterion: tight (bounded by sqrt(3) hw), or the PPM sphere
        let rs = self.sphere.map_or(rs, |f| f * hw);
        let rad = |tight: f64, h: f64| self.sphere.map_or(tight, |f| f * h);
        let cube_r = |h: f64| {
            self.sphere
                .map_or(SQRT3 * h * (1.0 + 1e-12), |f| f * h * (1.0 + 1e-12))
        };
        if !leaf {
            for t in &view.tops {
                if t.hw < hw
                    && self.may_fail(
                        rad(t.radius, t.hw),
                        rs,
                        sigma,
                        self.box_dist(center, t.center, t.center),
                    )
                {
                    return true;
                }
            }
        }
        let rmax = self
            .sphere
            .map_or(view.rmax, |f| f * view.hwmax * (1.0 + 1e-12));
        if view.regions.is_empty()
            || !self.may_fail(rmax, rs, sigma, self.box_dist(center, view.lo, view.hi))
        {
            return false;
        }
        for b in &view.regions {
            let bound = cube_r(b.hw).max(rad(b.radius, b.hw));
            if !self.may_fail(bound, rs, sigma, self.box_dist(center, b.lo, b.hi)) {
                continue;
            }
            let mut h = b.hw;
            for l in b.level..=b.max_leaf {
                let relevant = l >= b.min_leaf || (!leaf && l > level);
                if relevant {
                    let (rt, shrink) = if l == b.level {
                        (rad(b.radius, b.hw), b.hw)
                    } else {
                        (cube_r(h), h)
                    };
                    let lo = b.lo.map(|x| x + shrink);
                    let hi = b.hi.map(|x| x - shrink);
                    let lo2: [f64; 3] = std::array::from_fn(|k| lo[k].min(hi[k]));
                    let hi2: [f64; 3] = std::array::from_fn(|k| lo[k].max(hi[k]));
                    if self.may_fail(rt, rs, sigma, self.box_dist(center, lo2, hi2)) {
                        return true;
                    }
                }
                h *= 0.5;
            }
        }
        false
    }
}

/// Whether partition cell `c` is a leaf of the global source tree.
fn src_leaf(part: &Partition, c: usize) -> bool {
    let pc = &part.cells[c];
    pc.n_src <= part.leaf_size as u64 || pc.level >= MAX_LEVEL
}

fn key_range(keys: &[u64], level: u32, key: u64) -> std::ops::Range<usize> {
    let end = key + key_span(level);
    keys.partition_point(|&k| k < key)..keys.partition_point(|&k| k < end)
}

/// Agrees on failure: if any rank has an error, every rank returns one (no hang).
pub(crate) fn agree<C: Comm + ?Sized, T>(
    comm: &C,
    r: Result<T, DomainError>,
) -> Result<T, DomainError> {
    let mut flag = [if r.is_err() {
        (comm.rank() + 1) as f64
    } else {
        0.0
    }];
    comm.allreduce_f64(&mut flag, ReduceOp::Max);
    match r {
        Err(e) => Err(e),
        Ok(v) if flag[0] == 0.0 => Ok(v),
        Ok(_) => Err(DomainError::Remote {
            rank: flag[0] as usize - 1,
        }),
    }
}

fn write_source(w: &mut Writer, gid: u64, s: &Sources, i: usize) {
    w.u64(gid);
    w.vec3(s.position[i]);
    w.vec3(s.strength[i]);
    w.f64(s.sigma[i]);
}

/// Evaluates the fields at the owned targets (in their sorted order) of the owned sources of
/// all ranks. Collective.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_owned<C: Comm + ?Sized, B: Backend>(
    comm: &C,
    backend: &B,
    params: &EvalParams,
    part: &Partition,
    src: &OwnedSources,
    tgt: &OwnedTargets,
    stats: &mut CommStats,
    times: &mut PhaseTimes,
) -> Result<Fields, DomainError> {
    let dp = crate::DomainParams::default();
    let mut rec = Record::new(stats, times);
    evaluate_owned_with(comm, backend, params, &dp, part, src, tgt, &mut rec)
}

/// What every phase of one rank's evaluation reads: the communicator, the parameters, the
/// partition and the owned particles.
struct Ctx<'a, C: ?Sized> {
    comm: &'a C,
    params: &'a EvalParams,
    dparams: &'a crate::DomainParams,
    part: &'a Partition,
    src: &'a OwnedSources,
    tgt: &'a OwnedTargets,
    me: usize,
    nranks: usize,
}

/// The partition cells' summary after the allreduce, and this rank's own subtrees.
struct Summary {
    own_src: Vec<(u32, u64)>,
    own_tgt: Vec<(u32, u64)>,
    v: Vec<f64>,
}

impl Summary {
    /// Source radius of partition cell `c`.
    fn s_r(&self, c: usize) -> f64 {
        self.v[c * SUMMARY].sqrt()
    }
    /// Largest source core radius of partition cell `c`.
    fn s_sig(&self, c: usize) -> f64 {
        self.v[c * SUMMARY + 1]
    }
    /// Target radius of partition cell `c`.
    fn t_r(&self, c: usize) -> f64 {
        self.v[c * SUMMARY + 2].sqrt()
    }
    /// Shallowest target leaf level below branch cell `c`.
    fn t_min(&self, c: usize) -> u32 {
        (-self.v[c * SUMMARY + 3]) as u32
    }
    /// Deepest target leaf level below branch cell `c`.
    fn t_max(&self, c: usize) -> u32 {
        self.v[c * SUMMARY + 4] as u32
    }
}

/// What P2Pcomm brought: the halo particles and the cells below other ranks' branch cells
/// (with the rank each came from); the received cells are added to the source nodes.
struct Halo {
    sources: OwnedSources,
    below: HashMap<(u32, u64), usize>,
}

/// The extended source tree (own and halo particles), the local target tree and the merged
/// sources (`None`: no halo, the own sources are the extended set).
struct Trees {
    merged: Option<OwnedSources>,
    ext: Assembled,
    tt: Assembled,
}

/// The far-field method of the plan and the conservative acceptance test of P2Pcomm.
fn far_setup(params: &EvalParams) -> (FarMethod, Mac) {
    let far_field = FarField::of_method(params.method).expect("the direct sum has no plan");
    let far = FarMethod::new(far_field, params.order);
    let mac = Mac {
        theta: params.theta,
        core_cutoff: params.core_cutoff,
        period: params.periodic.map(|p| p.box_length),
        sphere: far.sphere_radius_factor(),
    };
    (far, mac)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn evaluate_owned_with<C: Comm + ?Sized, B: Backend>(
    comm: &C,
    backend: &B,
    params: &EvalParams,
    dparams: &crate::DomainParams,
    part: &Partition,
    src: &OwnedSources,
    tgt: &OwnedTargets,
    rec: &mut Record<'_>,
) -> Result<Fields, DomainError> {
    let cx = Ctx {
        comm,
        params,
        dparams,
        part,
        src,
        tgt,
        me: comm.rank(),
        nranks: comm.size(),
    };
    let (far, mac) = far_setup(params);
    let t0 = Instant::now();
    // 1. summary
    let summary = summarize(&cx, rec);
    let (mut src_nodes, own_st) = own_source_tree(&cx, &summary);
    rec.lap("assemble own tree");
    // 2. P2Pcomm
    let t_p2p = Instant::now();
    let own_branches: Vec<usize> = part
        .branches_of(cx.me)
        .filter(|&b| part.cells[b].n_src > 0)
        .map(|b| own_st.index[&(part.cells[b].level, part.cells[b].key)])
        .collect();
    let send = p2p_pack(&cx, &summary, &mac, &own_st, &own_branches);
    rec.stats.bytes_p2p += bytes_sent(cx.me, &send);
    rec.lap("P2Pcomm pack");
    let recv = comm.alltoallv(&send);
    drop(send);
    rec.lap("P2Pcomm exchange");
    let halo = p2p_unpack(&cx, &recv, &mut src_nodes);
    drop(recv);
    let n_halo = halo.sources.gid.len();
    rec.stats.halo_particles += n_halo as u64;
    rec.stats.remote_cells += halo.below.len() as u64;
    rec.stats.t_p2pcomm += t_p2p.elapsed().as_secs_f64();
    rec.lap("P2Pcomm unpack");
    // 3. extended source tree, local target tree, lists
    let Halo {
        sources: halo_sources,
        below,
    } = halo;
    let trees = essential_trees(&cx, &summary, &src_nodes, halo_sources, rec);
    let lists = interaction_lists(&cx, &trees, mac.sphere, rec)?;
    // M2Lcomm requests
    let t_req = Instant::now();
    let (recv_cells, let_cells) =
        m2l_requests(&cx, &trees.ext, &lists, &below, &own_st, rec.stats)?;
    rec.stats.t_m2lcomm += t_req.elapsed().as_secs_f64();
    rec.lap("M2Lcomm requests");
    log::debug!(
        "rank {}: {} own + {} halo sources, {} source cells ({} received), {} target cells, {} near and {} far pairs",
        cx.me,
        src.gid.len(),
        n_halo,
        trees.ext.tree.cells.len(),
        below.len(),
        trees.tt.tree.cells.len(),
        lists.near.len(),
        lists.far.len()
    );
    // 4. upward, M2Lcomm
    let Trees { merged, ext, tt } = trees;
    let ext_src = merged.as_ref().unwrap_or(src);
    let plan = Plan {
        order: params.order,
        core: params.core,
        far_field: far.far_field(),
        source_tree: ext.tree,
        target_tree: tt.tree,
        lists,
        periodic: params.periodic,
    };
    let ext_index = ext.index;
    let prepared = upward_and_export(
        backend,
        &plan,
        ext_src,
        tgt,
        &own_st,
        &own_branches,
        &ext_index,
        &let_cells,
        rec,
    );
    let (state, bm, lets) = agree(comm, prepared)?;
    rec.lap("get multipoles");
    let t_m2l = Instant::now();
    let mut pm = branch_allgather(&cx, &far, &own_st, &own_branches, &bm, rec.stats);
    rec.lap("M2Lcomm branch allgather");
    top_tree_m2m(part, &far, &mut pm);
    rec.lap("top tree M2M");
    let (set_cells, set_data) = m2l_exchange(&cx, &far, &lets, &pm, &recv_cells, &ext_index, rec);
    rec.stats.t_m2lcomm += t_m2l.elapsed().as_secs_f64();
    rec.lap("M2Lcomm unpack");
    // 5. far images, downward, near field
    let result = downward_phases(backend, &plan, state, &set_cells, &set_data, rec);
    let mut fields = agree(comm, result)?;
    if let Some(p) = &params.periodic {
        subtract_surface_distributed(&cx, p.box_length, &mut fields, rec.stats);
    }
    rec.lap("periodic correction");
    rec.times.total += t0.elapsed().as_secs_f64();
    Ok(fields)
}

/// Phase 1: this rank's own subtrees and the summary of the partition cells (radii, largest
/// cores, target leaf levels), reduced over the ranks.
fn summarize<C: Comm + ?Sized>(cx: &Ctx<'_, C>, rec: &mut Record<'_>) -> Summary {
    let (part, src, tgt) = (cx.part, cx.src, cx.tgt);
    let np = part.cells.len();
    let (own_src, own_tgt, mut v) = timed(&mut rec.times.tree, || {
        let mut own_src: Vec<(u32, u64)> = Vec::new();
        let mut own_tgt: Vec<(u32, u64)> = Vec::new();
        let mut summ = vec![0.0f64; np * SUMMARY];
        for c in 0..np {
            summ[c * SUMMARY + 3] = f64::NEG_INFINITY;
            summ[c * SUMMARY + 4] = f64::NEG_INFINITY;
        }
        let pos_s = &src.sources.position;
        let pos_t = &tgt.targets.position;
        let per_cell: Vec<[f64; 3]> = part
            .cells
            .par_iter()
            .map(|pc| {
                let rs = key_range(&src.key, pc.level, pc.key);
                let rt = key_range(&tgt.key, pc.level, pc.key);
                [
                    radius2_of(pc.center, &pos_s[rs.clone()]),
                    max_of(&src.sources.sigma[rs]),
                    radius2_of(pc.center, &pos_t[rt]),
                ]
            })
            .collect();
        for (c, v) in per_cell.iter().enumerate() {
            summ[c * SUMMARY..c * SUMMARY + 3].copy_from_slice(v);
        }
        for b in part.branches_of(cx.me) {
            let pc = &part.cells[b];
            if pc.n_src > 0 {
                let r = key_range(&src.key, pc.level, pc.key);
                subtree_cells(&src.key[r], pc.level, pc.key, part.leaf_size, &mut own_src);
            }
            if pc.n_tgt > 0 {
                let (lo, hi) = target_leaf_levels(tgt, pc, part.leaf_size, &mut own_tgt);
                summ[b * SUMMARY + 3] = -(lo as f64);
                summ[b * SUMMARY + 4] = hi as f64;
            }
        }
        (own_src, own_tgt, summ)
    });
    rec.lap("own subtrees + summary");
    cx.comm.allreduce_f64(&mut v, ReduceOp::Max);
    rec.stats.bytes_summary += bytes_allreduce(cx.nranks, v.len());
    rec.lap("summary allreduce");
    Summary {
        own_src,
        own_tgt,
        v,
    }
}

/// Appends the target subtree of branch cell `pc` to `own_tgt` and returns the shallowest and
/// deepest leaf level in it.
fn target_leaf_levels(
    tgt: &OwnedTargets,
    pc: &crate::partition::PCell,
    leaf_size: usize,
    own_tgt: &mut Vec<(u32, u64)>,
) -> (u32, u32) {
    let r = key_range(&tgt.key, pc.level, pc.key);
    let start = own_tgt.len();
    subtree_cells(&tgt.key[r], pc.level, pc.key, leaf_size, own_tgt);
    // leaf levels: a cell is a leaf when no later cell of the subtree is its child
    let cells = &own_tgt[start..];
    let (mut lo, mut hi) = (u32::MAX, 0u32);
    for (i, &(l, k)) in cells.iter().enumerate() {
        let leaf = cells
            .get(i + 1)
            .is_none_or(|&(l2, k2)| !(l2 == l + 1 && k2 & !(key_span(l) - 1) == k));
        if leaf {
            lo = lo.min(l);
            hi = hi.max(l);
        }
    }
    (lo, hi)
}

/// The replicated nodes of the source tree (top cells and branch cells, remote ones
/// truncated) with this rank's own subtrees, and the tree they assemble.
fn own_source_tree<C: Comm + ?Sized>(
    cx: &Ctx<'_, C>,
    summary: &Summary,
) -> (HashMap<(u32, u64), NodeInfo>, Assembled) {
    let part = cx.part;
    let mut src_nodes: HashMap<(u32, u64), NodeInfo> = HashMap::new();
    for (c, pc) in part.cells.iter().enumerate() {
        if pc.n_src == 0 {
            continue;
        }
        let kind = if !pc.is_branch() {
            COMPLETE
        } else if src_leaf(part, c) {
            NO_PARTICLES
        } else {
            TRUNCATED
        };
        src_nodes.insert(
            (pc.level, pc.key),
            NodeInfo {
                level: pc.level,
                key: pc.key,
                radius: Some(summary.s_r(c)),
                sigma_max: Some(summary.s_sig(c)),
                kind,
            },
        );
    }
    for &(l, k) in &summary.own_src {
        src_nodes.insert((l, k), NodeInfo::own(l, k));
    }
    let own_st = assemble(
        part.cube,
        src_nodes.values().copied(),
        &cx.src.key,
        &cx.src.sources.position,
        Some(&cx.src.sources.sigma),
        part.leaf_size,
    );
    (src_nodes, own_st)
}

/// What this rank knows of rank `r`'s target cells: its target branch cells and the top
/// cells above them.
fn view_of(part: &Partition, summary: &Summary, r: usize) -> View {
    let mut regions = Vec::new();
    let mut tops: Vec<usize> = Vec::new();
    for b in part.branches_of(r) {
        let pc = &part.cells[b];
        if pc.n_tgt == 0 {
            continue;
        }
        regions.push(Region {
            lo: pc.center.map(|x| x - pc.half_width),
            hi: pc.center.map(|x| x + pc.half_width),
            level: pc.level,
            hw: pc.half_width,
            radius: summary.t_r(b),
            min_leaf: summary.t_min(b),
            max_leaf: summary.t_max(b),
        });
        let mut a = pc.parent;
        while let Some(p) = a {
            tops.push(p);
            a = part.cells[p].parent;
        }
    }
    tops.sort_unstable();
    tops.dedup();
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    let mut rmax: f64 = 0.0;
    let mut hwmax: f64 = 0.0;
    for g in &regions {
        hwmax = hwmax.max(g.hw);
        for k in 0..3 {
            lo[k] = lo[k].min(g.lo[k]);
            hi[k] = hi[k].max(g.hi[k]);
        }
        rmax = rmax.max(SQRT3 * g.hw * (1.0 + 1e-12)).max(g.radius);
    }
    View {
        regions,
        tops: tops
            .into_iter()
            .map(|p| TopTarget {
                center: part.cells[p].center,
                hw: part.cells[p].half_width,
                radius: summary.t_r(p),
            })
            .collect(),
        lo,
        hi,
        rmax,
        hwmax,
    }
}

/// Phase 2 (P2Pcomm), sending side: per destination rank, the cells of this rank's subtrees
/// that its traversal may visit and the particles of the leaves it may pair in P2P.
fn p2p_pack<C: Comm + ?Sized>(
    cx: &Ctx<'_, C>,
    summary: &Summary,
    mac: &Mac,
    own_st: &Assembled,
    own_branches: &[usize],
) -> Vec<Vec<u8>> {
    let views: Vec<View> = (0..cx.nranks)
        .map(|r| view_of(cx.part, summary, r))
        .collect();
    let (me, src, sabotage) = (cx.me, cx.src, cx.dparams.sabotage_halo);
    (0..cx.nranks)
        .into_par_iter()
        .map(|r| {
            if r == me {
                return Vec::new();
            }
            p2p_message(src, sabotage, mac, &views[r], own_st, own_branches)
        })
        .collect()
}

/// The P2Pcomm message for the rank of `view`: the pruned cell records, then the particles of
/// the opened leaves.
fn p2p_message(
    src: &OwnedSources,
    sabotage_halo: bool,
    mac: &Mac,
    view: &View,
    own_st: &Assembled,
    own_branches: &[usize],
) -> Vec<u8> {
    let tree = &own_st.tree;
    let mut recs = Writer::new();
    let mut nrec = 0u32;
    let mut leaves = Vec::new();
    let open = |c: usize| {
        let cell = &tree.cells[c];
        if sabotage_halo && cell.is_leaf() {
            return false;
        }
        mac.needs_open(
            view,
            cell.center,
            cell.level,
            cell.half_width,
            cell.radius,
            own_st.sigma_max[c],
            cell.is_leaf(),
        )
    };
    let mut stack: Vec<(usize, bool)> = own_branches
        .iter()
        .rev()
        .filter(|&&b| open(b))
        .map(|&b| (b, true))
        .collect();
    while let Some((c, is_branch)) = stack.pop() {
        let cell = &tree.cells[c];
        let opened = is_branch || open(c);
        recs.u8(cell.level as u8);
        recs.u64(cell.key);
        recs.f64(cell.radius);
        recs.f64(own_st.sigma_max[c]);
        recs.u8(cell.is_leaf() as u8 | (opened as u8) << 1 | (is_branch as u8) << 2);
        nrec += 1;
        if opened {
            if cell.is_leaf() {
                leaves.push(c);
            } else {
                for ch in cell.children.clone().rev() {
                    stack.push((ch, false));
                }
            }
        }
    }
    let mut w = Writer::new();
    w.u32(nrec);
    w.buf.extend_from_slice(&recs.buf);
    for c in leaves {
        let r = tree.cells[c].range.clone();
        w.u32(r.len() as u32);
        for i in r {
            write_source(&mut w, src.gid[i], &src.sources, i);
        }
    }
    w.buf
}

/// Phase 2 (P2Pcomm), receiving side: the cells received (added to `src_nodes`) and the halo
/// particles.
fn p2p_unpack<C: Comm + ?Sized>(
    cx: &Ctx<'_, C>,
    recv: &[Vec<u8>],
    src_nodes: &mut HashMap<(u32, u64), NodeInfo>,
) -> Halo {
    let mut halo = OwnedSources::default();
    // cells below the branch cells received, and the rank they came from
    let mut below: HashMap<(u32, u64), usize> = HashMap::new();
    for (q, buf) in recv.iter().enumerate() {
        if q == cx.me || buf.is_empty() {
            continue;
        }
        let mut rd = Reader::new(buf);
        let n = rd.u32();
        let mut with_particles = 0usize;
        for _ in 0..n {
            let level = rd.u8() as u32;
            let key = rd.u64();
            let radius = rd.f64();
            let sigma = rd.f64();
            let flags = rd.u8();
            let (leaf, opened, branch) = (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
            let kind = if opened {
                COMPLETE
            } else if leaf {
                NO_PARTICLES
            } else {
                TRUNCATED
            };
            if opened && leaf {
                with_particles += 1;
            }
            if !branch {
                below.insert((level, key), q);
            }
            src_nodes.insert(
                (level, key),
                NodeInfo {
                    level,
                    key,
                    radius: Some(radius),
                    sigma_max: Some(sigma),
                    kind,
                },
            );
        }
        for _ in 0..with_particles {
            let m = rd.u32();
            for _ in 0..m {
                halo.gid.push(rd.u64());
                let x = rd.vec3();
                halo.key.push(cx.part.key(x));
                halo.sources.position.push(x);
                halo.sources.strength.push(rd.vec3());
                halo.sources.sigma.push(rd.f64());
            }
        }
        assert!(rd.done(), "trailing bytes in the LET message of rank {q}");
    }
    Halo {
        sources: halo,
        below,
    }
}

/// Phase 3: the extended source tree (own sources and the halo) and the local target tree
/// (top cells above own target branch cells, and own subtrees).
fn essential_trees<C: Comm + ?Sized>(
    cx: &Ctx<'_, C>,
    summary: &Summary,
    src_nodes: &HashMap<(u32, u64), NodeInfo>,
    halo: OwnedSources,
    rec: &mut Record<'_>,
) -> Trees {
    let part = cx.part;
    timed(&mut rec.times.tree, || {
        let merged = (!halo.gid.is_empty()).then(|| merge_sorted(cx.src, halo));
        let all = merged.as_ref().unwrap_or(cx.src);
        crate::lap(rec.stats, &mut rec.last, "merge halo");
        let ext = assemble(
            part.cube,
            src_nodes.values().copied(),
            &all.key,
            &all.sources.position,
            Some(&all.sources.sigma),
            part.leaf_size,
        );
        crate::lap(rec.stats, &mut rec.last, "assemble LET");
        let tt = assemble(
            part.cube,
            target_nodes(cx.me, part, summary),
            &cx.tgt.key,
            &cx.tgt.targets.position,
            None,
            part.leaf_size,
        );
        crate::lap(rec.stats, &mut rec.last, "assemble target tree");
        Trees { merged, ext, tt }
    })
}

/// The nodes of rank `me`'s target tree: the top cells above its target branch cells and its
/// own subtrees (a lone root when it has no targets).
fn target_nodes(me: usize, part: &Partition, summary: &Summary) -> Vec<NodeInfo> {
    let mut tnodes: Vec<NodeInfo> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for b in part.branches_of(me) {
        if part.cells[b].n_tgt == 0 {
            continue;
        }
        let mut a = part.cells[b].parent;
        while let Some(p) = a {
            if seen.insert(p) {
                let pc = &part.cells[p];
                tnodes.push(NodeInfo {
                    level: pc.level,
                    key: pc.key,
                    radius: Some(summary.t_r(p)),
                    sigma_max: None,
                    kind: COMPLETE,
                });
            }
            a = part.cells[p].parent;
        }
    }
    tnodes.extend(summary.own_tgt.iter().map(|&(l, k)| NodeInfo::own(l, k)));
    if tnodes.is_empty() {
        tnodes.push(NodeInfo {
            level: 0,
            key: 0,
            radius: Some(0.0),
            sigma_max: None,
            kind: COMPLETE,
        });
    }
    tnodes
}

/// Phase 3: the unchanged dual traversal on the extended source tree; a truncated remote cell
/// it would have split fails on every rank.
fn interaction_lists<C: Comm + ?Sized>(
    cx: &Ctx<'_, C>,
    trees: &Trees,
    sphere: Option<f64>,
    rec: &mut Record<'_>,
) -> Result<InteractionLists, DomainError> {
    let (ext, tt) = (&trees.ext, &trees.tt);
    let lists = timed(&mut rec.times.lists, || {
        if cx.tgt.gid.is_empty() {
            let empty = CsrList {
                offsets: vec![0; tt.tree.cells.len() + 1],
                sources: Vec::new(),
            };
            return Ok(InteractionLists {
                near: empty.clone(),
                far: empty,
            });
        }
        let lp = ListParams {
            theta: cx.params.theta,
            core_cutoff: cx.params.core_cutoff,
            period: cx.params.periodic.map(|p| p.box_length),
            sphere_radius_factor: sphere,
        };
        let (lists, violations) =
            InteractionLists::build_checked(&tt.tree, &ext.tree, &ext.sigma_max, &lp, &ext.kind);
        if violations > 0 {
            Err(DomainError::IncompleteEssentialTree {
                rank: cx.me,
                violations,
            })
        } else {
            Ok(lists)
        }
    });
    rec.lap("lists");
    let lists = agree(cx.comm, lists)?;
    rec.lap("lists agree");
    Ok(lists)
}

/// Phase 4 (M2Lcomm requests): the remote cells below branch cells that the far lists use,
/// per owner (only those need a multipole: a received cell the traversal opened or paired in
/// P2P does not), and the cells of this rank whose multipoles each rank asked for.
#[allow(clippy::type_complexity)]
fn m2l_requests<C: Comm + ?Sized>(
    cx: &Ctx<'_, C>,
    ext: &Assembled,
    lists: &InteractionLists,
    below: &HashMap<(u32, u64), usize>,
    own_st: &Assembled,
    stats: &mut CommStats,
) -> Result<(Vec<Vec<(u32, u64)>>, Vec<Vec<(u32, u64)>>), DomainError> {
    let me = cx.me;
    let mut recv_cells: Vec<Vec<(u32, u64)>> = vec![Vec::new(); cx.nranks];
    {
        // owner of each received cell below the branch cells (in the extended tree's order)
        let mut owner = vec![u32::MAX; ext.tree.cells.len()];
        for (lk, &q) in below {
            owner[ext.index[lk]] = q as u32;
        }
        let mut used = vec![false; owner.len()];
        for s in &lists.far.sources {
            used[s.cell as usize] = true;
        }
        for (c, (&u, &q)) in used.iter().zip(&owner).enumerate() {
            if u && q != u32::MAX {
                let cell = &ext.tree.cells[c];
                recv_cells[q as usize].push((cell.level, cell.key));
            }
        }
    }
    stats.m2l_cells_used += recv_cells.iter().map(|v| v.len() as u64).sum::<u64>();
    let send: Vec<Vec<u8>> = recv_cells
        .iter()
        .map(|cells| {
            let mut w = Writer::new();
            for &(l, k) in cells {
                w.u8(l as u8);
                w.u64(k);
            }
            w.buf
        })
        .collect();
    stats.bytes_m2l += bytes_sent(me, &send);
    let recv = cx.comm.alltoallv(&send);
    drop(send);
    let let_cells: Vec<Vec<(u32, u64)>> = recv
        .iter()
        .enumerate()
        .map(|(q, buf)| {
            let mut rd = Reader::new(buf);
            let mut v = Vec::with_capacity(buf.len() / 9);
            while q != me && !rd.done() {
                let l = rd.u8() as u32;
                let k = rd.u64();
                v.push((l, k));
            }
            v
        })
        .collect();
    drop(recv);
    let unknown = let_cells
        .iter()
        .flatten()
        .filter(|lk| !own_st.index.contains_key(lk))
        .count();
    agree(
        cx.comm,
        if unknown > 0 {
            Err(DomainError::MissingMultipoles {
                rank: me,
                cells: unknown,
            })
        } else {
            Ok(())
        },
    )?;
    stats.m2l_cells_sent += let_cells.iter().map(|v| v.len() as u64).sum::<u64>();
    Ok((recv_cells, let_cells))
}

/// Phase 4: `prepare` and `upward` on the backend, then the multipoles of this rank's branch
/// cells and of the cells each rank asked for.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn upward_and_export<B: Backend>(
    backend: &B,
    plan: &Plan,
    ext_src: &OwnedSources,
    tgt: &OwnedTargets,
    own_st: &Assembled,
    own_branches: &[usize],
    ext_index: &HashMap<(u32, u64), usize>,
    let_cells: &[Vec<(u32, u64)>],
    rec: &mut Record<'_>,
) -> Result<(B::State, Expansions, Vec<Expansions>), DomainError> {
    let mut state = timed(&mut rec.times.transfer, || {
        backend.prepare(plan, &ext_src.sources, &tgt.targets)
    })?;
    rec.lap("backend prepare");
    backend.upward(plan, &mut state, rec.times)?;
    rec.lap("backend upward");
    let own_b: Vec<usize> = own_branches
        .iter()
        .map(|&b| {
            let c = &own_st.tree.cells[b];
            ext_index[&(c.level, c.key)]
        })
        .collect();
    let bm = backend.multipoles(plan, &state, &own_b)?;
    let lets: Vec<Expansions> = let_cells
        .iter()
        .map(|cells| {
            let idx: Vec<usize> = cells.iter().map(|lk| ext_index[lk]).collect();
            backend.multipoles(plan, &state, &idx)
        })
        .collect::<Result<_, _>>()?;
    Ok((state, bm, lets))
}

/// Phase 4 (M2Lcomm): every rank's branch multipoles `bm` to everyone; the multipoles of the
/// partition cells (`None` where not a branch cell with sources).
fn branch_allgather<C: Comm + ?Sized>(
    cx: &Ctx<'_, C>,
    far: &FarMethod,
    own_st: &Assembled,
    own_branches: &[usize],
    bm: &Expansions,
    stats: &mut CommStats,
) -> Vec<Option<Expansions>> {
    let part = cx.part;
    let len = far.flat_len();
    let bm = bm.to_flat();
    let mut w = Writer::new();
    for (k, &b) in own_branches.iter().enumerate() {
        let c = &own_st.tree.cells[b];
        w.u8(c.level as u8);
        w.u64(c.key);
        w.f64s(&bm[k * len..(k + 1) * len]);
    }
    stats.bytes_m2l += (w.len() * (cx.nranks - 1)) as u64;
    let all_b = cx.comm.allgatherv(&w.buf);
    let pindex: HashMap<(u32, u64), usize> = part
        .cells
        .iter()
        .enumerate()
        .map(|(i, c)| ((c.level, c.key), i))
        .collect();
    let mut pm: Vec<Option<Expansions>> = vec![None; part.cells.len()];
    let mut m = vec![0.0; len];
    for buf in &all_b {
        let mut rd = Reader::new(buf);
        while !rd.done() {
            let l = rd.u8() as u32;
            let k = rd.u64();
            rd.f64s_into(&mut m);
            pm[pindex[&(l, k)]] = Some(far.from_flat(&m));
        }
    }
    pm
}

/// Phase 4: the multipoles of the replicated top tree by M2M from the branch multipoles,
/// children in the order of the single-rank upward pass.
fn top_tree_m2m(part: &Partition, far: &FarMethod, pm: &mut [Option<Expansions>]) {
    let ops = Operators::new(far.order());
    let mut scratch = Scratch::new(far.order());
    for c in (0..part.cells.len()).rev() {
        let pc = &part.cells[c];
        if pc.is_branch() || pc.n_src == 0 {
            continue;
        }
        let mut m = far.zeros(1);
        for ch in pc.children.clone() {
            let cc = &part.cells[ch];
            if cc.n_src > 0 {
                let child = pm[ch].as_ref().expect("multipole of a partition cell");
                far.m2m(
                    &ops,
                    &mut scratch,
                    (cc.center, cc.half_width),
                    (pc.center, pc.half_width),
                    child,
                    &mut m,
                );
            }
        }
        pm[c] = Some(m);
    }
}

/// Phase 4 (M2Lcomm): the requested multipoles (all-to-all), and with the top tree's and
/// the other ranks' branch multipoles the cells and data for `set_multipoles`.
#[allow(clippy::too_many_arguments)]
fn m2l_exchange<C: Comm + ?Sized>(
    cx: &Ctx<'_, C>,
    far: &FarMethod,
    lets: &[Expansions],
    pm: &[Option<Expansions>],
    recv_cells: &[Vec<(u32, u64)>],
    ext_index: &HashMap<(u32, u64), usize>,
    rec: &mut Record<'_>,
) -> (Vec<usize>, Expansions) {
    let me = cx.me;
    let len = far.flat_len();
    let send: Vec<Vec<u8>> = lets
        .iter()
        .map(|m| {
            let mut w = Writer::new();
            w.f64s(&m.to_flat());
            w.buf
        })
        .collect();
    rec.stats.bytes_m2l += bytes_sent(me, &send);
    let recv = cx.comm.alltoallv(&send);
    drop(send);
    rec.lap("M2Lcomm exchange");
    let mut set_cells = Vec::new();
    let mut set_data: Vec<f64> = Vec::new();
    for (c, pc) in cx.part.cells.iter().enumerate() {
        if pc.n_src == 0 || (pc.is_branch() && pc.owner == Some(me)) {
            continue;
        }
        set_cells.push(ext_index[&(pc.level, pc.key)]);
        let m = pm[c].as_ref().expect("multipole of a partition cell");
        set_data.extend(m.to_flat());
    }
    for (q, buf) in recv.iter().enumerate() {
        if q == me {
            continue;
        }
        assert_eq!(
            buf.len(),
            recv_cells[q].len() * len * 8,
            "M2Lcomm size from rank {q}"
        );
        let mut rd = Reader::new(buf);
        let mut m = vec![0.0; len];
        for lk in &recv_cells[q] {
            rd.f64s_into(&mut m);
            set_cells.push(ext_index[lk]);
            set_data.extend_from_slice(&m);
        }
    }
    (set_cells, far.from_flat(&set_data))
}

/// Phase 5: the imported multipoles, the periodic far images, `downward`, `near_field` and
/// the fields (sorted order).
fn downward_phases<B: Backend>(
    backend: &B,
    plan: &Plan,
    mut state: B::State,
    set_cells: &[usize],
    set_data: &Expansions,
    rec: &mut Record<'_>,
) -> Result<Fields, DomainError> {
    let state_ref = &mut state;
    backend.set_multipoles(plan, state_ref, set_cells, set_data)?;
    rec.lap("backend set_multipoles");
    if let Some(p) = &plan.periodic {
        timed(&mut rec.times.m2l, || -> Result<(), DomainError> {
            let (cells, data) =
                vortex_fmm::evaluators::periodic_far_images(backend, plan, state_ref, p)?;
            Ok(backend.add_locals(plan, state_ref, &cells, &data)?)
        })?;
    }
    backend.downward(plan, state_ref, rec.times)?;
    rec.lap("backend downward");
    backend.near_field(plan, state_ref, rec.times)?;
    rec.lap("backend near field");
    let mut t = 0.0;
    let f = timed(&mut t, || backend.fields(plan, state))?;
    rec.times.transfer += t;
    rec.lap("backend fields");
    Ok(f)
}

/// Phase 6: subtracts the surface-term velocity of the dipole moment of all ranks' sources
/// (wrapped positions; each rank's moment, summed over the ranks).
fn subtract_surface_distributed<C: Comm + ?Sized>(
    cx: &Ctx<'_, C>,
    box_length: f64,
    fields: &mut Fields,
    stats: &mut CommStats,
) {
    let m = vortex_fmm::periodic::dipole_moment(&cx.src.sources);
    let mut d: Vec<f64> = m.iter().flatten().copied().collect();
    cx.comm.allreduce_f64(&mut d, ReduceOp::Sum);
    stats.bytes_summary += bytes_allreduce(cx.nranks, 9);
    let d: [[f64; 3]; 3] = std::array::from_fn(|c| std::array::from_fn(|l| d[3 * c + l]));
    let corr = vortex_fmm::periodic::surface_velocity(&d, box_length);
    vortex_fmm::periodic::subtract_surface(&mut fields.velocity, corr);
}

/// The union of two sets sorted by (key, global id), sorted likewise.
fn merge_sorted(a: &OwnedSources, mut b: OwnedSources) -> OwnedSources {
    let ord = |s: &OwnedSources, i: usize| (s.key[i], s.gid[i]);
    if !(1..b.gid.len()).all(|i| ord(&b, i - 1) < ord(&b, i)) {
        // (the halo arrives sorted: rank order is Morton order, leaves in Morton order)
        let mut p: Vec<usize> = (0..b.gid.len()).collect();
        p.par_sort_unstable_by_key(|&i| ord(&b, i));
        b = OwnedSources {
            gid: p.iter().map(|&i| b.gid[i]).collect(),
            key: p.iter().map(|&i| b.key[i]).collect(),
            sources: Sources {
                position: p.iter().map(|&i| b.sources.position[i]).collect(),
                strength: p.iter().map(|&i| b.sources.strength[i]).collect(),
                sigma: p.iter().map(|&i| b.sources.sigma[i]).collect(),
            },
        };
    }
    // (from a?, index) in merged order
    let (na, nb) = (a.gid.len(), b.gid.len());
    let mut from: Vec<(bool, u32)> = Vec::with_capacity(na + nb);
    let (mut i, mut j) = (0, 0);
    while i < na && j < nb {
        if ord(a, i) < ord(&b, j) {
            from.push((true, i as u32));
            i += 1;
        } else {
            from.push((false, j as u32));
            j += 1;
        }
    }
    from.extend((i..na).map(|i| (true, i as u32)));
    from.extend((j..nb).map(|j| (false, j as u32)));
    fn pick<T: Copy + Send + Sync>(from: &[(bool, u32)], a: &[T], b: &[T]) -> Vec<T> {
        from.par_iter()
            .map(|&(x, i)| if x { a[i as usize] } else { b[i as usize] })
            .collect()
    }
    OwnedSources {
        gid: pick(&from, &a.gid, &b.gid),
        key: pick(&from, &a.key, &b.key),
        sources: Sources {
            position: pick(&from, &a.sources.position, &b.sources.position),
            strength: pick(&from, &a.sources.strength, &b.sources.strength),
            sigma: pick(&from, &a.sources.sigma, &b.sources.sigma),
        },
    }
}

/// The assembled source tree type, for tests.
#[allow(dead_code)]
pub(crate) type Ext = Assembled;
