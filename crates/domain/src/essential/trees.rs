//! Step 3 of [`super`]: the extended source tree (replicated top tree, own subtrees, received
//! cells: the halo merged into the own sources by key) and the local target tree, and their
//! interaction lists by the unchanged dual traversal, which reports any truncated remote cell it
//! would have split.

use super::*;

/// Phase 3: the extended source tree (own sources and the halo) and the local target tree
/// (top cells above own target branch cells, and own subtrees).
pub(super) fn essential_trees<C: Comm + ?Sized>(
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
pub(super) fn target_nodes(me: usize, part: &Partition, summary: &Summary) -> Vec<NodeInfo> {
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
pub(super) fn interaction_lists<C: Comm + ?Sized>(
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

/// The union of two sets sorted by (key, global id), sorted likewise.
pub(super) fn merge_sorted(a: &OwnedSources, mut b: OwnedSources) -> OwnedSources {
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
