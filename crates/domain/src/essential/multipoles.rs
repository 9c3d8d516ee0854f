//! **M2Lcomm** and the far field (steps 4-5 of [`super`]): the multipoles each rank's far lists
//! use, requested from their owners; the upward pass and the branch multipoles all-gathered, the
//! top tree's built by M2M in the single-rank order; the downward phases; the surface term of a
//! periodic box summed over the ranks.

use super::*;

/// Phase 4 (M2Lcomm requests): the remote cells below branch cells that the far lists use,
/// per owner (only those need a multipole: a received cell the traversal opened or paired in
/// P2P does not), and the cells of this rank whose multipoles each rank asked for.
#[allow(clippy::type_complexity)]
pub(super) fn m2l_requests<C: Comm + ?Sized>(
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
pub(super) fn upward_and_export<B: Backend>(
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
pub(super) fn branch_allgather<C: Comm + ?Sized>(
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
pub(super) fn top_tree_m2m(part: &Partition, far: &FarMethod, pm: &mut [Option<Expansions>]) {
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
pub(super) fn m2l_exchange<C: Comm + ?Sized>(
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
pub(super) fn downward_phases<B: Backend>(
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
pub(super) fn subtract_surface_distributed<C: Comm + ?Sized>(
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
