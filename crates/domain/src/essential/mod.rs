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
//!
//! One submodule per step: `mac` (what another rank's traversal may visit), `halo` (step 2),
//! `trees` (step 3: the extended and local trees and their lists), `multipoles` (steps 4-5); this
//! module holds the types they share and runs them in order.

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

mod halo;
mod mac;
mod multipoles;
mod trees;
use halo::{p2p_pack, p2p_unpack};
use mac::{key_range, src_leaf, Mac};
use multipoles::{
    branch_allgather, downward_phases, m2l_exchange, m2l_requests, subtract_surface_distributed,
    top_tree_m2m, upward_and_export,
};
use trees::{essential_trees, interaction_lists};

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

/// The assembled source tree type, for tests.
#[allow(dead_code)]
pub(crate) type Ext = Assembled;
