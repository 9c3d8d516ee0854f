//! Moving particles to their owners and fields back: sources and targets keyed by Morton key,
//! routed to the ranks that own their branch cells (sparse all-to-all, global ids kept), and the
//! fields returned to the ranks and order the caller gave them in ([`redistribute_sources`],
//! [`redistribute_targets`], [`redistribute_particles`]).

use super::*;

/// `(Morton key, global id, input index)` of every point, sorted by (key, global id).
pub(super) fn keyed_sorted(
    part: &Partition,
    position: &[[f64; 3]],
    gid: &[u64],
) -> Vec<(u64, u64, u32)> {
    keyed_sorted_in(part.cube, position, gid)
}

/// Where a particle of the received set comes from: `(key, gid, run, index)` with `run` the
/// sending rank (this rank: `index` into the caller's arrays; another: record `index` of its
/// message).
pub(super) type Routed = (u64, u64, u32, u32);

/// Sends every particle of `sorted` (see [`keyed_sorted`]) to the owner of its branch cell as a
/// record of `words` little-endian 64-bit words (`fill(input index, record)`; word 0 is the
/// global id, words 1..4 the position). Particles staying on this rank are not serialized.
/// Returns the particles now owned, sorted by (key, global id), and the received messages.
pub(super) fn route<C: Comm + ?Sized>(
    comm: &C,
    part: &Partition,
    sorted: &[(u64, u64, u32)],
    words: usize,
    fill: impl Fn(usize, &mut [u64]) + Sync,
    stats: &mut CommStats,
) -> (Vec<Routed>, Vec<Vec<u8>>) {
    let (n, me) = (comm.size(), comm.rank());
    let rb = 8 * words;
    // owners are non-decreasing along the Morton curve: one contiguous run per rank
    let mut bounds = vec![0usize; n + 1];
    for (r, b) in bounds.iter_mut().enumerate().skip(1) {
        *b = if r == n {
            sorted.len()
        } else {
            sorted.partition_point(|t| part.owner_of(t.0) < r)
        };
    }
    let send: Vec<Vec<u8>> = (0..n)
        .map(|r| {
            if r == me {
                return Vec::new();
            }
            let run = &sorted[bounds[r]..bounds[r + 1]];
            let mut buf = vec![0u8; run.len() * rb];
            buf.par_chunks_exact_mut(rb)
                .zip(run.par_iter())
                .for_each(|(out, t)| {
                    let mut w = [0u64; 16];
                    fill(t.2 as usize, &mut w[..words]);
                    wire::put_words(out, &w[..words]);
                });
            buf
        })
        .collect();
    stats.bytes_redistribute += comm::bytes_sent(comm.rank(), &send);
    let recv = comm.alltoallv(&send);
    drop(send);
    let total: usize = (bounds[me + 1] - bounds[me])
        + (0..n)
            .filter(|&q| q != me)
            .map(|q| recv[q].len() / rb)
            .sum::<usize>();
    let mut items: Vec<Routed> = Vec::with_capacity(total);
    let mut runs = 0;
    for (q, buf) in recv.iter().enumerate() {
        if q == me {
            let own = &sorted[bounds[me]..bounds[me + 1]];
            runs += !own.is_empty() as usize;
            items.par_extend(own.par_iter().map(|t| (t.0, t.1, q as u32, t.2)));
        } else {
            assert_eq!(buf.len() % rb, 0, "redistribution message of rank {q}");
            runs += !buf.is_empty() as usize;
            items.par_extend(buf.par_chunks_exact(rb).enumerate().map(|(j, c)| {
                let x = [1, 2, 3].map(|k| f64::from_bits(wire::word(c, k)));
                (part.key(x), wire::word(c, 0), q as u32, j as u32)
            }));
        }
    }
    if runs > 1 {
        // every run is sorted: the stable merge sort merges them
        items.par_sort_by_key(|t| (t.0, t.1));
    }
    (items, recv)
}

/// Value of word `k` of the record of `t` as `f64`, from this rank's arrays (`own(i)`) or the
/// message it came in.
#[inline]
pub(super) fn routed_f64(
    me: usize,
    recv: &[Vec<u8>],
    words: usize,
    t: &Routed,
    k: usize,
    own: impl Fn(usize) -> f64,
) -> f64 {
    if t.2 as usize == me {
        own(t.3 as usize)
    } else {
        let rb = 8 * words;
        let j = t.3 as usize * rb;
        f64::from_bits(wire::word(&recv[t.2 as usize][j..j + rb], k))
    }
}

pub(super) fn routed_vec3(
    me: usize,
    recv: &[Vec<u8>],
    words: usize,
    items: &[Routed],
    first: usize,
    own: &[[f64; 3]],
) -> Vec<[f64; 3]> {
    items
        .par_iter()
        .map(|t| std::array::from_fn(|c| routed_f64(me, recv, words, t, first + c, |i| own[i][c])))
        .collect()
}

/// Source records: gid, position, strength, core radius.
pub(super) const SRC_WORDS: usize = 8;
/// Target records: gid, position, strength.
pub(super) const TGT_WORDS: usize = 7;

#[allow(clippy::too_many_arguments)]
pub(super) fn route_sources_parts<C: Comm + ?Sized>(
    comm: &C,
    part: &Partition,
    sorted: &[(u64, u64, u32)],
    gid: &[u64],
    position: &[[f64; 3]],
    strength: &[[f64; 3]],
    sigma: &[f64],
    stats: &mut CommStats,
) -> OwnedSources {
    let fill = |i: usize, w: &mut [u64]| {
        w[0] = gid[i];
        for c in 0..3 {
            w[1 + c] = position[i][c].to_bits();
            w[4 + c] = strength[i][c].to_bits();
        }
        w[7] = sigma[i].to_bits();
    };
    let (items, recv) = route(comm, part, sorted, SRC_WORDS, fill, stats);
    let me = comm.rank();
    OwnedSources {
        key: items.par_iter().map(|t| t.0).collect(),
        gid: items.par_iter().map(|t| t.1).collect(),
        sources: Sources {
            position: routed_vec3(me, &recv, SRC_WORDS, &items, 1, position),
            strength: routed_vec3(me, &recv, SRC_WORDS, &items, 4, strength),
            sigma: items
                .par_iter()
                .map(|t| routed_f64(me, &recv, SRC_WORDS, t, 7, |i| sigma[i]))
                .collect(),
        },
    }
}

pub(super) fn route_sources<C: Comm + ?Sized>(
    comm: &C,
    part: &Partition,
    sorted: &[(u64, u64, u32)],
    gid: &[u64],
    s: &Sources,
    stats: &mut CommStats,
) -> OwnedSources {
    route_sources_parts(
        comm,
        part,
        sorted,
        gid,
        &s.position,
        &s.strength,
        &s.sigma,
        stats,
    )
}

pub(super) fn route_targets_parts<C: Comm + ?Sized>(
    comm: &C,
    part: &Partition,
    sorted: &[(u64, u64, u32)],
    gid: &[u64],
    position: &[[f64; 3]],
    strength: &[[f64; 3]],
    stats: &mut CommStats,
) -> OwnedTargets {
    let fill = |i: usize, w: &mut [u64]| {
        w[0] = gid[i];
        for c in 0..3 {
            w[1 + c] = position[i][c].to_bits();
            w[4 + c] = strength[i][c].to_bits();
        }
    };
    let (items, recv) = route(comm, part, sorted, TGT_WORDS, fill, stats);
    let me = comm.rank();
    OwnedTargets {
        key: items.par_iter().map(|t| t.0).collect(),
        gid: items.par_iter().map(|t| t.1).collect(),
        targets: Targets {
            position: routed_vec3(me, &recv, TGT_WORDS, &items, 1, position),
            strength: routed_vec3(me, &recv, TGT_WORDS, &items, 4, strength),
        },
    }
}

/// Field records: gid, velocity, stretching.
pub(super) const FIELD_WORDS: usize = 7;

/// Sends the fields at the owned targets (global ids `gid`) back to the ranks that hold them
/// in the caller's order (`offsets`: first global target id of each rank); returns this
/// rank's `n` fields in its order.
pub(super) fn return_fields<C: Comm + ?Sized>(
    comm: &C,
    offsets: &[u64],
    gid: &[u64],
    fields: &Fields,
    n: usize,
    stats: &mut CommStats,
) -> Fields {
    let (nranks, me) = (comm.size(), comm.rank());
    let by_rank: Vec<Vec<u32>> = if nranks == 1 {
        vec![(0..gid.len() as u32).collect()]
    } else {
        let dest: Vec<u32> = gid
            .par_iter()
            .map(|&g| (offsets.partition_point(|&o| o <= g) - 1) as u32)
            .collect();
        (0..nranks as u32)
            .map(|r| {
                (0..dest.len() as u32)
                    .into_par_iter()
                    .filter(|&i| dest[i as usize] == r)
                    .collect()
            })
            .collect()
    };
    let rb = 8 * FIELD_WORDS;
    let send: Vec<Vec<u8>> = by_rank
        .iter()
        .enumerate()
        .map(|(r, idx)| {
            if r == me {
                return Vec::new();
            }
            let mut buf = vec![0u8; idx.len() * rb];
            buf.par_chunks_exact_mut(rb)
                .zip(idx.par_iter())
                .for_each(|(out, &i)| {
                    let i = i as usize;
                    let (v, s) = (fields.velocity[i], fields.stretching[i]);
                    let w = [
                        gid[i],
                        v[0].to_bits(),
                        v[1].to_bits(),
                        v[2].to_bits(),
                        s[0].to_bits(),
                        s[1].to_bits(),
                        s[2].to_bits(),
                    ];
                    wire::put_words(out, &w);
                });
            buf
        })
        .collect();
    stats.bytes_redistribute += comm::bytes_sent(comm.rank(), &send);
    let recv = comm.alltoallv(&send);
    drop(send);
    let mut out = Fields::zeros(n);
    let base = offsets[me];
    // where each output comes from: (rank, index) packed, by an inverse permutation; then a
    // parallel gather
    let mut from = vec![u64::MAX; n];
    for &i in &by_rank[me] {
        from[(gid[i as usize] - base) as usize] = ((me as u64) << 32) | i as u64;
    }
    for (q, buf) in recv.iter().enumerate() {
        if q == me {
            continue;
        }
        assert_eq!(buf.len() % rb, 0, "field message of rank {q}");
        for (k, c) in buf.chunks_exact(rb).enumerate() {
            from[(wire::word(c, 0) - base) as usize] = ((q as u64) << 32) | k as u64;
        }
    }
    out.velocity
        .par_iter_mut()
        .zip(out.stretching.par_iter_mut())
        .zip(from.par_iter())
        .for_each(|((v, s), &f)| {
            if f == u64::MAX {
                return;
            }
            let (q, i) = ((f >> 32) as usize, (f & 0xffff_ffff) as usize);
            if q == me {
                *v = fields.velocity[i];
                *s = fields.stretching[i];
            } else {
                let c = &recv[q][i * rb..(i + 1) * rb];
                let g = |k: usize| f64::from_bits(wire::word(c, k));
                *v = [g(1), g(2), g(3)];
                *s = [g(4), g(5), g(6)];
            }
        });
    out
}

/// Sends every source to the owner of its branch cell; returns the owned sources sorted by
/// (key, global id). `gid[i]` is the global id of `sources[i]`.
pub fn redistribute_sources<C: Comm + ?Sized>(
    comm: &C,
    part: &Partition,
    gid: &[u64],
    sources: &Sources,
    stats: &mut CommStats,
) -> OwnedSources {
    let n = sources.len();
    let sorted = keyed_sorted(part, &sources.position, &gid[..n]);
    route_sources(comm, part, &sorted, gid, sources, stats)
}

/// Redistribution of particles that moved (the time stepper calls it every step): the
/// partition is rebuilt from the current positions (the particles are both sources and
/// targets, as in the vortex method) and every particle goes to the owner of its branch cell,
/// keeping its global id (`owned.gid`; on the first call any distribution with unique ids).
/// Periodic: positions are wrapped into the box. Returns the partition and this rank's
/// particles sorted by (Morton key, global id). After small displacements few particles
/// change rank: only those that crossed a cut of the Morton curve (the cuts themselves move by
/// the change of the per-cell counts). Collective.
pub fn redistribute_particles<C: Comm + ?Sized>(
    comm: &C,
    params: &EvalParams,
    dparams: &DomainParams,
    owned: &OwnedSources,
    stats: &mut CommStats,
) -> (Partition, OwnedSources) {
    let t0 = Instant::now();
    let position: Vec<[f64; 3]> = match &params.periodic {
        None => owned.sources.position.clone(),
        Some(p) => owned
            .sources
            .position
            .par_iter()
            .map(|&x| p.wrap(x))
            .collect(),
    };
    let cube = match &params.periodic {
        None => partition::global_cube(comm, &[&position]),
        Some(p) => vortex_fmm::tree::BoundingCube {
            lo: [-0.5 * p.box_length; 3],
            width: p.box_length,
        },
    };
    let sorted = keyed_sorted_in(cube, &position, &owned.gid);
    let keys: Vec<u64> = sorted.par_iter().map(|t| t.0).collect();
    let part = Partition::build(
        comm,
        cube,
        &keys,
        &keys,
        params.leaf_size,
        dparams.granularity,
    );
    drop(keys);
    stats.bytes_summary += part.build_bytes(comm.size());
    stats.t_partition += t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let s = Sources {
        position,
        strength: owned.sources.strength.clone(),
        sigma: owned.sources.sigma.clone(),
    };
    let out = route_sources(comm, &part, &sorted, &owned.gid, &s, stats);
    stats.t_redistribute += t1.elapsed().as_secs_f64();
    (part, out)
}

/// As [`keyed_sorted`] before the partition exists (the keys depend only on the cube).
pub(super) fn keyed_sorted_in(
    cube: vortex_fmm::tree::BoundingCube,
    position: &[[f64; 3]],
    gid: &[u64],
) -> Vec<(u64, u64, u32)> {
    assert!(
        position.len() <= u32::MAX as usize,
        "over 2^32 particles on one rank"
    );
    let mut k: Vec<(u64, u64, u32)> = position
        .par_iter()
        .zip(gid.par_iter())
        .enumerate()
        .map(|(i, (&x, &g))| {
            (
                vortex_fmm::tree::morton_key(cube.grid_coords(x)),
                g,
                i as u32,
            )
        })
        .collect();
    k.par_sort_unstable();
    k
}

/// As [`redistribute_sources`] for targets.
pub fn redistribute_targets<C: Comm + ?Sized>(
    comm: &C,
    part: &Partition,
    gid: &[u64],
    targets: &Targets,
    stats: &mut CommStats,
) -> OwnedTargets {
    let n = targets.len();
    let sorted = keyed_sorted(part, &targets.position, &gid[..n]);
    route_targets_parts(
        comm,
        part,
        &sorted,
        gid,
        &targets.position,
        &targets.strength,
        stats,
    )
}
