//! [`evaluate_distributed`]: one whole evaluation for particles held in any distribution: the
//! inputs and parameters checked to agree over the ranks, the partition built from the sorted
//! keys, the particles routed to their owners, the locally essential tree's evaluation
//! ([`crate::essential`]) and the fields returned in the caller's order.

use super::redistribute::{
    keyed_sorted_in, return_fields, route_sources_parts, route_targets_parts,
};
use super::*;

pub(super) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Fails on every rank unless every rank passed the same parameters.
pub(super) fn check_same_params<C: Comm + ?Sized>(
    comm: &C,
    params: &EvalParams,
    dp: &DomainParams,
) -> Result<(), DomainError> {
    let text = format!("{params:?} {dp:?}");
    let h = (fnv(&text) & ((1u64 << 52) - 1)) as f64;
    let mut v = [h, -h];
    comm.allreduce_f64(&mut v, ReduceOp::Max);
    if v[0] != -v[1] {
        return Err(DomainError::MismatchedParameters {
            rank: comm.rank(),
            params: text,
        });
    }
    Ok(())
}

/// Exclusive prefix of every rank's counts: `offsets[r]` = first global index of rank `r`.
pub(super) fn global_offsets<C: Comm + ?Sized>(comm: &C, counts: &[u64]) -> Vec<Vec<u64>> {
    let mut w = Writer::new();
    counts.iter().for_each(|&c| w.u64(c));
    let all = comm.allgatherv(&w.buf);
    let mut acc = vec![0u64; counts.len()];
    let mut out = vec![Vec::new(); counts.len()];
    for buf in &all {
        let mut rd = Reader::new(buf);
        for k in 0..counts.len() {
            out[k].push(acc[k]);
            acc[k] += rd.u64();
        }
    }
    for k in 0..counts.len() {
        out[k].push(acc[k]);
    }
    out
}

pub(super) fn validate_local(
    params: &EvalParams,
    sources: &Sources,
    targets: &Targets,
) -> Result<(), FmmError> {
    params.validate()?;
    if !sources.is_empty() {
        sources.validate()?;
    } else if !sources.strength.is_empty() || !sources.sigma.is_empty() {
        return Err(FmmError::LengthMismatch {
            what: "sources",
            position: 0,
            other: sources.strength.len().max(sources.sigma.len()),
        });
    }
    if !targets.is_empty() {
        targets.validate()?;
    }
    Ok(())
}

/// Velocity and stretching at this rank's `targets` induced by the `sources` of all ranks,
/// with any initial distribution of the particles over the ranks. Collective: every rank calls
/// it with the same `params`. The result is independent of the number of ranks (to round-off)
/// and equals `vortex_fmm::evaluate` on the concatenation (in rank order) of all ranks' inputs.
///
/// Phases: [`check_inputs`], then the direct sum on every rank ([`direct_on_every_rank`]) or
/// Morton keys ([`sorted_keys`]), the partition, the routing of the particles to their owners
/// ([`route_to_owners`]), the locally essential evaluation and the fields' return.
pub fn evaluate_distributed<C: Comm + ?Sized, B: Backend>(
    comm: &C,
    backend: &B,
    params: &EvalParams,
    dparams: &DomainParams,
    sources: &Sources,
    targets: &Targets,
) -> Result<DistributedEvaluation, DomainError> {
    let t0 = Instant::now();
    let mut stats = CommStats::default();
    let mut times = PhaseTimes::default();
    let mut rec = Record::new(&mut stats, &mut times);
    let nranks = comm.size();
    let offsets = check_inputs(comm, params, dparams, sources, targets)?;
    if params.method == Method::Direct {
        let fields = direct_on_every_rank(comm, params, sources, targets, rec.stats, rec.times);
        rec.times.total = t0.elapsed().as_secs_f64();
        return Ok(DistributedEvaluation {
            fields,
            times,
            stats,
            work: vec![0; nranks],
        });
    }
    rec.lap("checks");
    let tp = Instant::now();
    // positions (wrapped when periodic): the records carry them, borrowed, not copied
    let wrapped = |pos: &[[f64; 3]]| -> Option<Vec<[f64; 3]>> {
        params
            .periodic
            .map(|p| pos.par_iter().map(|&x| p.wrap(x)).collect())
    };
    let (src_wrapped, tgt_wrapped) = (wrapped(&sources.position), wrapped(&targets.position));
    let src_pos = src_wrapped.as_deref().unwrap_or(&sources.position);
    let tgt_pos = tgt_wrapped.as_deref().unwrap_or(&targets.position);
    let keyed = sorted_keys(comm, params, &offsets, src_pos, tgt_pos, sources, targets);
    rec.lap("keys");
    let part = partition_of(comm, &keyed, params, dparams);
    rec.stats.bytes_summary += part.build_bytes(nranks);
    rec.stats.t_partition = tp.elapsed().as_secs_f64();
    rec.lap("partition");

    let tr = Instant::now();
    let (own_s, own_t) = route_to_owners(
        comm,
        &part,
        keyed,
        (src_pos, tgt_pos),
        sources,
        targets,
        rec.stats,
    );
    drop((src_wrapped, tgt_wrapped));
    rec.stats.t_redistribute += tr.elapsed().as_secs_f64();
    rec.lap("redistribute");

    let fields = essential::evaluate_owned_with(
        comm, backend, params, dparams, &part, &own_s, &own_t, &mut rec,
    )?;

    // fields back to the ranks and positions they came from
    let tr = Instant::now();
    let out = return_fields(
        comm,
        &offsets[1],
        &own_t.gid,
        &fields,
        targets.len(),
        rec.stats,
    );
    drop(fields);
    rec.stats.t_redistribute += tr.elapsed().as_secs_f64();
    rec.lap("fields back");
    rec.times.total = t0.elapsed().as_secs_f64();
    Ok(DistributedEvaluation {
        fields: out,
        times,
        stats,
        work: part.work_per_rank(),
    })
}

/// The checks of a distributed evaluation (same parameters everywhere, valid input on every
/// rank, sources and targets somewhere, zero total strength when periodic); returns the
/// global offsets of the ranks' sources (`[0]`) and targets (`[1]`). Collective.
pub(super) fn check_inputs<C: Comm + ?Sized>(
    comm: &C,
    params: &EvalParams,
    dparams: &DomainParams,
    sources: &Sources,
    targets: &Targets,
) -> Result<Vec<Vec<u64>>, DomainError> {
    let nranks = comm.size();
    check_same_params(comm, params, dparams)?;
    let local = validate_local(params, sources, targets).map_err(DomainError::from);
    // global sizes, ids and (periodic) total strength
    let mut tot = [0.0f64; 7];
    for a in &sources.strength {
        for c in 0..3 {
            tot[c] += a[c];
            tot[3] += a[c].abs();
        }
    }
    essential::agree(comm, local)?;
    let offsets = global_offsets(comm, &[sources.len() as u64, targets.len() as u64]);
    let (ns, nt) = (offsets[0][nranks], offsets[1][nranks]);
    if ns == 0 {
        return Err(FmmError::Empty("sources").into());
    }
    if nt == 0 {
        return Err(FmmError::Empty("targets").into());
    }
    if params.periodic.is_some() {
        comm.allreduce_f64(&mut tot[..4], ReduceOp::Sum);
        let total = Sources {
            position: vec![[0.0; 3]; 2],
            strength: vec![[tot[0], tot[1], tot[2]], [0.0; 3]],
            sigma: vec![1.0; 2],
        };
        // same test as vortex_fmm::periodic::check_total_strength, on the global sums
        let norm = (tot[0] * tot[0] + tot[1] * tot[1] + tot[2] * tot[2]).sqrt();
        if norm > 1e-10 * tot[3].max(f64::MIN_POSITIVE) {
            vortex_fmm::periodic::check_total_strength(&total)?;
        }
    }
    Ok(offsets)
}

/// The direct sum (O(N^2) anyway): every rank gathers every source and sums at its targets.
pub(super) fn direct_on_every_rank<C: Comm + ?Sized>(
    comm: &C,
    params: &EvalParams,
    sources: &Sources,
    targets: &Targets,
    stats: &mut CommStats,
    times: &mut PhaseTimes,
) -> Fields {
    let mut w = Writer::new();
    for i in 0..sources.len() {
        w.vec3(sources.position[i]);
        w.vec3(sources.strength[i]);
        w.f64(sources.sigma[i]);
    }
    stats.bytes_redistribute += (w.len() * (comm.size() - 1)) as u64;
    let all = comm.allgatherv(&w.buf);
    let mut s = Sources::default();
    for buf in &all {
        let mut rd = Reader::new(buf);
        while !rd.done() {
            s.position.push(rd.vec3());
            s.strength.push(rd.vec3());
            s.sigma.push(rd.f64());
        }
    }
    vortex_fmm::backend::timed(&mut times.p2p, || {
        if targets.is_empty() {
            return Fields::default();
        }
        match &params.periodic {
            None => direct::direct_core(params.core, &s, targets),
            Some(p) => direct::direct_periodic_core(params.core, &s, targets, p),
        }
    })
}

/// The global cube, the global ids and the sorted `(Morton key, global id, index)` of the
/// sources and targets of this rank.
pub(super) struct Keyed {
    pub(super) cube: vortex_fmm::tree::BoundingCube,
    pub(super) sgid: Vec<u64>,
    pub(super) tgid: Vec<u64>,
    pub(super) s_sorted: Vec<(u64, u64, u32)>,
    /// empty when `same`
    pub(super) t_sorted: Vec<(u64, u64, u32)>,
    /// the targets equal the sources on every rank (the vortex method): they are not routed
    /// on their own (same keys, same owners, same order), only copied
    pub(super) same: bool,
}

/// Morton keys once, for the partition counts and the routing (positions wrapped when
/// periodic). Collective (the cube, and whether the targets are the sources on every rank).
#[allow(clippy::too_many_arguments)]
pub(super) fn sorted_keys<C: Comm + ?Sized>(
    comm: &C,
    params: &EvalParams,
    offsets: &[Vec<u64>],
    src_pos: &[[f64; 3]],
    tgt_pos: &[[f64; 3]],
    sources: &Sources,
    targets: &Targets,
) -> Keyed {
    let me = comm.rank();
    let cube = match &params.periodic {
        None => partition::global_cube(comm, &[src_pos, tgt_pos]),
        Some(p) => vortex_fmm::tree::BoundingCube {
            lo: [-0.5 * p.box_length; 3],
            width: p.box_length,
        },
    };
    let sgid: Vec<u64> = (0..sources.len() as u64)
        .into_par_iter()
        .map(|i| offsets[0][me] + i)
        .collect();
    let tgid: Vec<u64> = (0..targets.len() as u64)
        .into_par_iter()
        .map(|i| offsets[1][me] + i)
        .collect();
    let s_sorted = keyed_sorted_in(cube, src_pos, &sgid);
    let bits = |a: &[[f64; 3]], b: &[[f64; 3]]| {
        a.len() == b.len()
            && a.par_iter()
                .zip(b.par_iter())
                .all(|(x, y)| x.map(f64::to_bits) == y.map(f64::to_bits))
    };
    let mut same =
        [(bits(src_pos, tgt_pos) && bits(&sources.strength, &targets.strength)) as u8 as f64];
    comm.allreduce_f64(&mut same, ReduceOp::Min);
    let same = same[0] == 1.0;
    let t_sorted = if same {
        Vec::new()
    } else if src_pos == tgt_pos {
        // targets at the sources (the vortex method): same order, ids shifted
        let shift = offsets[1][me].wrapping_sub(offsets[0][me]);
        s_sorted
            .par_iter()
            .map(|t| (t.0, t.1.wrapping_add(shift), t.2))
            .collect()
    } else {
        keyed_sorted_in(cube, tgt_pos, &tgid)
    };
    Keyed {
        cube,
        sgid,
        tgid,
        s_sorted,
        t_sorted,
        same,
    }
}

/// The partition of the Morton curve over the ranks from the sorted keys. Collective.
pub(super) fn partition_of<C: Comm + ?Sized>(
    comm: &C,
    keyed: &Keyed,
    params: &EvalParams,
    dparams: &DomainParams,
) -> Partition {
    let sk: Vec<u64> = keyed.s_sorted.par_iter().map(|t| t.0).collect();
    let tk: Vec<u64> = if keyed.same {
        Vec::new()
    } else {
        keyed.t_sorted.par_iter().map(|t| t.0).collect()
    };
    let tk = if keyed.same { &sk } else { &tk };
    Partition::build(
        comm,
        keyed.cube,
        &sk,
        tk,
        params.leaf_size,
        dparams.granularity,
    )
}

/// The particles moved to their owners under `part`, sorted by (key, global id); `pos` are
/// the (wrapped) positions of the sources and the targets. Collective.
pub(super) fn route_to_owners<C: Comm + ?Sized>(
    comm: &C,
    part: &Partition,
    keyed: Keyed,
    pos: (&[[f64; 3]], &[[f64; 3]]),
    sources: &Sources,
    targets: &Targets,
    stats: &mut CommStats,
) -> (OwnedSources, OwnedTargets) {
    let own_s = route_sources_parts(
        comm,
        part,
        &keyed.s_sorted,
        &keyed.sgid,
        pos.0,
        &sources.strength,
        &sources.sigma,
        stats,
    );
    drop(keyed.s_sorted);
    let own_t = if keyed.same {
        // equal counts on every rank: equal global ids
        OwnedTargets {
            gid: own_s.gid.clone(),
            key: own_s.key.clone(),
            targets: Targets {
                position: own_s.sources.position.clone(),
                strength: own_s.sources.strength.clone(),
            },
        }
    } else {
        route_targets_parts(
            comm,
            part,
            &keyed.t_sorted,
            &keyed.tgid,
            pos.1,
            &targets.strength,
            stats,
        )
    };
    (own_s, own_t)
}
