//! The far-field passes, generic over [`FarOps`]: P2M and M2M upwards ([`upward`]), the M2L
//! (list order, or [`m2l_pass_batched`]: blocks of target cells, pairs sorted by direction,
//! translations of one direction batched), L2L and L2P downwards, and the treecode's direct
//! multipole evaluation.

use super::near::for_each_leaf;
use super::ops::{as_complex, as_complex_mut, FmmOps, M2L_BLOCK};
use super::*;

/// P2M at the source leaves, then M2M level by level upwards.
pub(super) fn upward<F: FarOps>(
    f: &F,
    plan: &Plan,
    src: &Sources,
    multipoles: &mut [f64],
    times: &mut PhaseTimes,
) {
    let len = f.flat_len();
    let tree = &plan.source_tree;
    timed(&mut times.p2m, || {
        multipoles
            .par_chunks_mut(len)
            .enumerate()
            .filter(|(c, _)| tree.cells[*c].is_leaf())
            .for_each(|(c, m)| {
                let cell = &tree.cells[c];
                let r = cell.range.clone();
                f.p2m(cell, &src.position[r.clone()], &src.strength[r], m);
            });
    });
    timed(&mut times.m2m, || {
        for l in (0..tree.levels.len().saturating_sub(1)).rev() {
            let split = tree.levels[l + 1].start * len;
            let (upper, lower) = multipoles.split_at_mut(split);
            let parents = tree.levels[l].clone();
            let child_base = tree.levels[l + 1].start;
            upper[parents.start * len..]
                .par_chunks_mut(len)
                .zip(parents)
                .for_each_init(
                    || f.scratch(),
                    |scratch, (m, p)| {
                        let cell = &tree.cells[p];
                        for c in cell.children.clone() {
                            let k = (c - child_base) * len;
                            f.m2m(&tree.cells[c], cell, &lower[k..k + len], m, scratch);
                        }
                    },
                );
        }
    });
}

/// M2L over the far lists, one task per target cell.
pub(super) fn m2l_pass<F: FarOps>(
    f: &F,
    plan: &Plan,
    multipoles: &[f64],
    locals: &mut [f64],
    times: &mut PhaseTimes,
) {
    let len = f.flat_len();
    timed(&mut times.m2l, || {
        locals.par_chunks_mut(len).enumerate().for_each_init(
            || f.scratch(),
            |scratch, (t, local)| {
                for s in plan.lists.far.row(t) {
                    let c = s.cell as usize * len;
                    f.m2l(plan, t, *s, &multipoles[c..c + len], local, scratch);
                }
            },
        );
    });
}

/// One far pair of an M2L block: direction key ([`FmmOps::key`]), target cell (index in the
/// block), source cell, distance between the centres.
pub(super) type M2lPair = ([i64; 3], u32, u32, f64);

/// FMM M2L in blocks of [`M2L_BLOCK`] consecutive target cells, one task per block: the
/// block's (target, source) pairs are sorted by direction, and the pairs of one direction go
/// through [`Operators::m2l_batch`] in groups of up to [`M2L_BATCH`], so each rotation is
/// looked up once per block (and built on its first use, [`RotationCache`]) and its entries
/// serve several translations at a time. A target's local receives its terms in the order
/// (direction, target, source cell, distance) of its block, whatever the thread count.
/// Periodic image pairs go the same way: their key and distance are those of the shifted
/// source centre, so they share the rotations and batches of unshifted pairs of equal direction.
pub(super) fn m2l_pass_batched(
    f: &FmmOps,
    plan: &Plan,
    multipoles: &[f64],
    locals: &mut [f64],
    times: &mut PhaseTimes,
) {
    let len = f.flat_len();
    let clen = len / 2;
    let p = f.ops.order();
    let multipoles = as_complex(multipoles);
    timed(&mut times.m2l, || {
        locals
            .par_chunks_mut(len * M2L_BLOCK)
            .enumerate()
            .for_each_init(
                || (BatchScratch::new(p), Vec::new()),
                |(scratch, pairs), (b, block)| {
                    let t0 = b * M2L_BLOCK;
                    let t1 = t0 + block.len() / len;
                    // (direction key, target in block, source cell, distance)
                    pairs.clear();
                    for t in t0..t1 {
                        for s in plan.lists.far.row(t) {
                            let (key, dist) = FmmOps::key(plan, t, *s);
                            pairs.push((key, (t - t0) as u32, s.cell, dist));
                        }
                    }
                    // unique sort keys (a target lists a source once per image, and images
                    // differ in direction), so the order is fixed
                    pairs.sort_unstable_by(|x: &M2lPair, y| {
                        (x.0, x.1, x.2)
                            .cmp(&(y.0, y.1, y.2))
                            .then(x.3.total_cmp(&y.3))
                    });
                    let block = as_complex_mut(block);
                    let mut i = 0;
                    while i < pairs.len() {
                        let key = pairs[i].0;
                        let run = i + pairs[i..].partition_point(|q| q.0 == key);
                        let rot = f.rotations.get(&f.ops, key);
                        for group in pairs[i..run].chunks(M2L_BATCH) {
                            let mut dist = [0.0; M2L_BATCH];
                            let mut src = [0usize; M2L_BATCH];
                            let mut dst = [0usize; M2L_BATCH];
                            for (k, q) in group.iter().enumerate() {
                                dist[k] = q.3;
                                src[k] = q.2 as usize * clen;
                                dst[k] = q.1 as usize * clen;
                            }
                            let l = group.len();
                            f.ops.m2l_batch(
                                &rot,
                                &dist[..l],
                                multipoles,
                                &src[..l],
                                block,
                                &dst[..l],
                                scratch,
                            );
                        }
                        i = run;
                    }
                },
            );
    });
}

/// L2L down the target tree, then L2P at its leaves.
pub(super) fn local_passes<F: FarOps>(
    f: &F,
    plan: &Plan,
    locals: &mut [f64],
    tgt: &Targets,
    fields: &mut Fields,
    times: &mut PhaseTimes,
) {
    let len = f.flat_len();
    let tt = &plan.target_tree;
    timed(&mut times.l2l, || {
        for l in 0..tt.levels.len().saturating_sub(1) {
            let split = tt.levels[l + 1].start * len;
            let (upper, lower) = locals.split_at_mut(split);
            let children = tt.levels[l + 1].clone();
            lower[..children.len() * len]
                .par_chunks_mut(len)
                .zip(children)
                .for_each_init(
                    || f.scratch(),
                    |scratch, (loc, c)| {
                        let p = tt.cells[c].parent.expect("non-root cell has a parent");
                        f.l2l(
                            &tt.cells[p],
                            &tt.cells[c],
                            &upper[p * len..(p + 1) * len],
                            loc,
                            scratch,
                        );
                    },
                );
        }
    });
    let locals = &*locals;
    timed(&mut times.l2p, || {
        for_each_leaf(tt, fields, |leaf, r, vel, str_| {
            f.l2p(
                &tt.cells[leaf],
                &locals[leaf * len..(leaf + 1) * len],
                &tgt.position[r.clone()],
                &tgt.strength[r],
                vel,
                str_,
            );
        });
    });
}

/// Treecode far field: every target leaf applies M2P for the far sources of itself and of
/// all its ancestors.
pub(super) fn treecode_far(
    f: &FmmOps,
    plan: &Plan,
    multipoles: &[f64],
    tgt: &Targets,
    fields: &mut Fields,
    times: &mut PhaseTimes,
) {
    let len = f.flat_len();
    let tt = &plan.target_tree;
    timed(&mut times.m2p, || {
        for_each_leaf(tt, fields, |leaf, r, vel, str_| {
            let mut cell = Some(leaf);
            while let Some(c) = cell {
                for s in plan.lists.far.row(c) {
                    let k = s.cell as usize * len;
                    f.ops.m2p(
                        plan.source_center(s.cell as usize, s.image),
                        as_complex(&multipoles[k..k + len]),
                        &tgt.position[r.clone()],
                        &tgt.strength[r.clone()],
                        vel,
                        str_,
                    );
                }
                cell = tt.cells[c].parent;
            }
        });
    });
}

/// Whether two trees have the same cells (the trees of one point set).
pub(super) fn same_tree(a: &Tree, b: &Tree) -> bool {
    a.cells.len() == b.cells.len()
        && a.cells
            .iter()
            .zip(&b.cells)
            .all(|(x, y)| x.range == y.range && x.children == y.children)
}
