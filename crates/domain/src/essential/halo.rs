//! **P2Pcomm** (step 2 of [`super`]): for every other rank, the cells of this rank's subtrees
//! that its traversal may visit and the particles of the leaves it may pair in P2P, packed,
//! exchanged (sparse all-to-all) and unpacked.

use super::mac::{view_of, Mac, View};
use super::*;

/// Phase 2 (P2Pcomm), sending side: per destination rank, the cells of this rank's subtrees
/// that its traversal may visit and the particles of the leaves it may pair in P2P.
pub(super) fn p2p_pack<C: Comm + ?Sized>(
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
pub(super) fn p2p_message(
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
pub(super) fn p2p_unpack<C: Comm + ?Sized>(
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
