//! The near field when the targets are the sources ([`near_field_mutual`]): each pair of near
//! leaves visited once and both updated (Newton's third law), in blocks of leaves coloured so that
//! no two blocks of one colour write the same leaf; in a periodic box the image pairs
//! `(a, b, +s)` and `(b, a, -s)` too. Every leaf receives its terms in an order fixed by the plan.

use super::*;

/// Leaves (in Morton order) per block of the mutual near-field schedule.
pub(super) const P2P_BLOCK_LEAVES: usize = 8;

/// The image that undoes image `image`: shift `-s` for shift `s` (see
/// [`crate::lists::image_shift`]: `i = 9 (sx+1) + 3 (sy+1) + (sz+1)`, so `-s` is `26 - i`).
#[inline]
pub(super) fn mirror_image(image: u8) -> u8 {
    26 - image
}

/// Whether the near entry `(target t, source s)` and its mirror `(s.cell, t, mirror)` are
/// visited as one mutual pair, and which of the two represents it.
///
/// Mutual when the source leaf's row names `t` through the mirror image (the unshifted pair
/// `(a, b)` mirrors `(b, a)`, the image pair `(a, b, +s)` mirrors `(b, a, -s)`; a leaf with
/// itself unshifted is its own mirror) and both leaves have one common core radius. The
/// representative is the smaller of `(t, image)` and `(s.cell, mirror)`, so each mutual pair
/// is listed once. Returns `None` for an entry to be summed one-sidedly, `Some(true)` for the
/// representative, `Some(false)` for the entry its mirror stands for.
pub(super) fn mutual_role(
    near: &crate::lists::CsrList,
    leaf_sigma: &[f64],
    t: usize,
    s: SourceRef,
) -> Option<bool> {
    let b = s.cell as usize;
    let m = mirror_image(s.image);
    let mirrored = (b == t && s.image == NO_SHIFT)
        || near
            .row(b)
            .binary_search(&SourceRef {
                cell: t as u32,
                image: m,
            })
            .is_ok();
    // NaN (a leaf of mixed core radii) never compares equal
    if !mirrored || leaf_sigma[t] != leaf_sigma[b] {
        return None;
    }
    Some((t, s.image) <= (b, m))
}

/// The near field of a self-evaluation, where every near pair of leaves whose lists name each
/// other is visited once ([`p2p_mutual`]: one kernel evaluation per pair of points serves both
/// directions; the leaf with itself visits each pair of points once). In a periodic box this
/// includes the image pairs: `(a, b, +s)` (leaf `b` seen from `a` through the shift `s`) and
/// `(b, a, -s)` are one interaction, evaluated once with `a`'s points shifted by `-s`; a leaf
/// and its own image (`a == b`, `s != 0`, when few leaves cover the box) pairs `+s` with `-s`.
///
/// Schedule: the leaves, in Morton order, form blocks of [`P2P_BLOCK_LEAVES`]; the pairs of
/// leaves between two blocks (or within one) form a task, and the tasks are coloured greedily
/// (in sorted order) so that no two tasks of one colour touch the same block. Colours run one
/// after the other, the tasks of one colour in parallel, the pairs of one task in sorted order:
/// every point receives its terms in an order fixed by the plan alone, whatever the thread
/// count. Near entries that are not mutual (a list that names a leaf whose own list does not
/// name it back through the mirror image, as the core-radius criterion of the lists is not
/// symmetric, or leaves with different core radii) are then summed one-sidedly, per target
/// leaf in list order.
pub(super) fn near_field_mutual(plan: &Plan, st: &mut CpuState) {
    let tt = &plan.target_tree;
    let near = &plan.lists.near;
    let mut leaves: Vec<usize> = tt.leaves().collect();
    leaves.sort_unstable_by_key(|&l| tt.cells[l].range.start);
    let mut block = vec![u32::MAX; tt.cells.len()];
    for (k, &l) in leaves.iter().enumerate() {
        block[l] = (k / P2P_BLOCK_LEAVES) as u32;
    }
    let n_blocks = leaves.len().div_ceil(P2P_BLOCK_LEAVES);
    // common core radius of each leaf (NaN when its points differ: never equal)
    let sigma = &st.sources.sigma;
    let leaf_sigma: Vec<f64> = (0..tt.cells.len())
        .into_par_iter()
        .map(|c| {
            let r = tt.cells[c].range.clone();
            match sigma[r.clone()].first() {
                Some(&s0) if tt.cells[c].is_leaf() && sigma[r].iter().all(|&s| s == s0) => s0,
                _ => f64::NAN,
            }
        })
        .collect();
    // mutual pairs (block x, block y, leaf x, leaf y, image of y seen from x) with
    // block x <= block y, and the rest
    let per_leaf: Vec<(Vec<[u32; 5]>, Vec<SourceRef>)> = leaves
        .par_iter()
        .map(|&t| {
            let (mut pairs, mut rest) = (Vec::new(), Vec::new());
            for s in near.row(t) {
                let b = s.cell as usize;
                match mutual_role(near, &leaf_sigma, t, *s) {
                    None => rest.push(*s),
                    Some(false) => {}
                    Some(true) => {
                        let q = if block[t] <= block[b] {
                            [block[t], block[b], t as u32, b as u32, s.image as u32]
                        } else {
                            let m = mirror_image(s.image) as u32;
                            [block[b], block[t], b as u32, t as u32, m]
                        };
                        pairs.push(q);
                    }
                }
            }
            (pairs, rest)
        })
        .collect();
    let mut rest_offsets = vec![0usize; tt.cells.len() + 1];
    for (&t, (_, r)) in leaves.iter().zip(&per_leaf) {
        rest_offsets[t + 1] = r.len();
    }
    for c in 0..tt.cells.len() {
        rest_offsets[c + 1] += rest_offsets[c];
    }
    let mut rest = vec![
        SourceRef {
            cell: 0,
            image: NO_SHIFT
        };
        rest_offsets[tt.cells.len()]
    ];
    let mut pairs = Vec::new();
    for (&t, (pr, r)) in leaves.iter().zip(per_leaf) {
        rest[rest_offsets[t]..rest_offsets[t + 1]].copy_from_slice(&r);
        pairs.extend(pr);
    }
    pairs.par_sort_unstable();
    // tasks: runs of one block pair; greedy edge colouring in task order
    let mut tasks: Vec<(u32, Range<usize>)> = Vec::new();
    let mut used: Vec<Vec<u64>> = vec![Vec::new(); n_blocks];
    let mut start = 0;
    while start < pairs.len() {
        let (ba, bb) = (pairs[start][0] as usize, pairs[start][1] as usize);
        let mut end = start + 1;
        while end < pairs.len() && pairs[end][0] as usize == ba && pairs[end][1] as usize == bb {
            end += 1;
        }
        let free = |c: usize, u: &[u64]| u.get(c / 64).is_none_or(|w| w & (1 << (c % 64)) == 0);
        let colour = (0..)
            .find(|&c| free(c, &used[ba]) && free(c, &used[bb]))
            .expect("a free colour");
        for b in [ba, bb] {
            let u = &mut used[b];
            if u.len() <= colour / 64 {
                u.resize(colour / 64 + 1, 0);
            }
            u[colour / 64] |= 1 << (colour % 64);
        }
        tasks.push((colour as u32, start..end));
        start = end;
    }
    tasks.sort_by_key(|t| t.0); // stable: task order within a colour kept
    let (table, packed, tgt) = (&st.table, &st.packed, &st.targets);
    let len = st.fields.len();
    let out = FieldPtr(
        st.fields.velocity.as_mut_ptr(),
        st.fields.stretching.as_mut_ptr(),
    );
    let out = &out;
    let mut c0 = 0;
    while c0 < tasks.len() {
        let colour = tasks[c0].0;
        let c1 = c0 + tasks[c0..].partition_point(|t| t.0 == colour);
        tasks[c0..c1]
            .par_iter()
            .for_each_init(Vec::new, |acc, (_, range)| {
                for q in &pairs[range.clone()] {
                    let (a, b, image) = (q[2] as usize, q[3] as usize, q[4] as u8);
                    let ra = tt.cells[a].range.clone();
                    let rb = tt.cells[b].range.clone();
                    assert!(ra.end <= len && rb.end <= len);
                    // SAFETY: the tasks of one colour touch disjoint blocks, hence disjoint leaves
                    // and point ranges; within the task `ra` and `rb` are disjoint unless a == b.
                    let (va, sa) = unsafe { out.slices(ra.clone()) };
                    let groups = packed.of(b);
                    acc.clear();
                    acc.resize(groups.len(), [f64x4::splat(0.0); 6]);
                    let (pos, str_) = (&tgt.position[ra.clone()], &tgt.strength[ra.clone()]);
                    let shift = plan.shift_of(image).unwrap_or([0.0; 3]);
                    let same_leaf = a == b && image == NO_SHIFT;
                    p2p_mutual(table, pos, str_, groups, shift, same_leaf, va, sa, acc);
                    if a == b {
                        // B's side of the leaf with itself (or with its own image) is A's
                        add_group_acc(acc, va, sa);
                    } else {
                        // SAFETY: as above, and a != b
                        let (vb, sb) = unsafe { out.slices(rb) };
                        add_group_acc(acc, vb, sb);
                    }
                }
            });
        c0 = c1;
    }
    for_each_leaf(tt, &mut st.fields, |leaf, r, vel, str_| {
        for s in &rest[rest_offsets[leaf]..rest_offsets[leaf + 1]] {
            p2p(
                table,
                &tgt.position[r.clone()],
                &tgt.strength[r.clone()],
                packed.of(s.cell as usize),
                plan.shift_of(s.image).unwrap_or([0.0; 3]),
                vel,
                str_,
            );
        }
    });
}

/// Velocity and stretching arrays written by the tasks of one colour of [`near_field_mutual`].
pub(super) struct FieldPtr(*mut [f64; 3], *mut [f64; 3]);

// SAFETY: the tasks that share a `FieldPtr` write disjoint ranges (see `near_field_mutual`).
unsafe impl Sync for FieldPtr {}

impl FieldPtr {
    /// # Safety
    /// `r` lies inside the arrays and no other live slice overlaps it.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slices(&self, r: Range<usize>) -> (&mut [[f64; 3]], &mut [[f64; 3]]) {
        (
            std::slice::from_raw_parts_mut(self.0.add(r.start), r.len()),
            std::slice::from_raw_parts_mut(self.1.add(r.start), r.len()),
        )
    }
}

/// Runs `f(leaf, range, velocity, stretching)` in parallel over the leaves of `tree`, each with
/// the disjoint slices of the outputs that belong to its points.
pub(super) fn for_each_leaf<F>(tree: &Tree, fields: &mut Fields, f: F)
where
    F: Fn(usize, Range<usize>, &mut [[f64; 3]], &mut [[f64; 3]]) + Sync,
{
    let mut leaves: Vec<usize> = tree.leaves().collect();
    leaves.sort_unstable_by_key(|&l| tree.cells[l].range.start);
    let mut work = Vec::with_capacity(leaves.len());
    let (mut vel, mut str_) = (&mut fields.velocity[..], &mut fields.stretching[..]);
    let mut start = 0;
    for &l in &leaves {
        let r = tree.cells[l].range.clone();
        let (_, v) = std::mem::take(&mut vel).split_at_mut(r.start - start);
        let (vl, vrest) = v.split_at_mut(r.len());
        let (_, s) = std::mem::take(&mut str_).split_at_mut(r.start - start);
        let (sl, srest) = s.split_at_mut(r.len());
        work.push((l, r.clone(), vl, sl));
        vel = vrest;
        str_ = srest;
        start = r.end;
    }
    work.into_par_iter()
        .with_max_len(1)
        .for_each(|(l, r, v, s)| f(l, r, v, s));
}
