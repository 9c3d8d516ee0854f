//! Domain decomposition of the vortex FMM over ranks (MPI or simulated).
//!
//! * [`comm`]: the [`Comm`] trait and its implementations ([`SelfComm`], [`ThreadComm`],
//!   `MpiComm` with the `mpi` feature);
//! * [`watchdog`]: ends the job when a rank stops answering (a wait in a collective longer than
//!   a timeout), over any communicator;
//! * [`partition`]: the replicated partition tree, branch cells and their owners along the Morton
//!   curve, weighted by work;
//! * [`redistribute_sources`] / [`redistribute_targets`]: moving particles to their owners (keeping
//!   global ids); [`redistribute_particles`] rebuilds the partition from the current positions
//!   and redistributes (every time step);
//! * [`essential`]: the locally essential tree (halo particles and remote multipoles) and one
//!   evaluation on the owned particles;
//! * [`evaluate_distributed`]: the whole evaluation for particles held in any distribution, with
//!   results returned in the caller's order, and [`gather_to_root`] for writing files.
//!
//! The results do not depend on the number of ranks: every target cell gets the interaction
//! lists of the single-rank run (see [`essential`]).

pub mod comm;
pub mod essential;
pub mod evaluator;
pub mod ext_tree;
pub mod partition;
pub mod watchdog;
pub mod wire;

#[cfg(feature = "mpi")]
pub use comm::MpiComm;
pub use comm::{world, Comm, ReduceOp, SelfComm, ThreadComm, TransportChoice};
pub use essential::{evaluate_owned, OwnedSources, OwnedTargets};
pub use evaluator::{DistributedEvaluator, OwnedEvaluator};
pub use partition::Partition;

use rayon::prelude::*;
use std::time::Instant;
use vortex_fmm::backend::{Backend, PhaseTimes};
use vortex_fmm::evaluators::{direct, Method};
use vortex_fmm::{EvalParams, Fields, FmmError, Sources, Targets};
use wire::{Reader, Writer};

#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    #[error(transparent)]
    Fmm(#[from] FmmError),
    #[error("rank {rank}: the locally essential tree lacks cells the traversal needs ({violations} times): a bug in the conservative opening criterion")]
    IncompleteEssentialTree { rank: usize, violations: usize },
    #[error("rank {rank}: asked for the multipoles of {cells} cells it does not own: a bug in the M2Lcomm requests")]
    MissingMultipoles { rank: usize, cells: usize },
    #[error("rank {rank} failed (see its message)")]
    Remote { rank: usize },
    #[error("ranks disagree on the evaluation parameters (rank {rank}: {params})")]
    MismatchedParameters { rank: usize, params: String },
}

/// Parameters of the decomposition.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DomainParams {
    /// Target number of branch cells per rank (finer: better balance, larger replicated top).
    pub granularity: usize,
    /// Testing only: send no halo particles, to check that an incomplete locally essential
    /// tree is detected (the evaluation must fail on every rank).
    #[doc(hidden)]
    pub sabotage_halo: bool,
}

impl Default for DomainParams {
    fn default() -> Self {
        Self {
            granularity: 16,
            sabotage_halo: false,
        }
    }
}

/// Bytes sent by this rank and times of the communication phases (one record per
/// evaluation, shared with every engine through `vortex_fmm::Evaluation::comm`).
pub use vortex_fmm::CommStats;

/// The one timing record of an evaluation as its phases fill it: the backend phase times,
/// the communication counters and seconds, and the profile laps ([`CommStats::profile`]).
/// [`evaluate_distributed`] hands its record to the locally essential evaluation
/// ([`essential`]), so the laps of all its phases run on one clock.
pub(crate) struct Record<'a> {
    pub(crate) stats: &'a mut CommStats,
    pub(crate) times: &'a mut PhaseTimes,
    pub(crate) last: Instant,
}

impl<'a> Record<'a> {
    pub(crate) fn new(stats: &'a mut CommStats, times: &'a mut PhaseTimes) -> Self {
        Self {
            stats,
            times,
            last: Instant::now(),
        }
    }

    /// Records the time since the previous lap under `name` (accumulating repeated names).
    pub(crate) fn lap(&mut self, name: &'static str) {
        lap(self.stats, &mut self.last, name);
    }
}

/// [`Record::lap`] on the record's fields (for closures that hold another of its fields).
pub(crate) fn lap(stats: &mut CommStats, last: &mut Instant, name: &'static str) {
    let now = Instant::now();
    let dt = (now - *last).as_secs_f64();
    *last = now;
    match stats.profile.iter_mut().find(|(n, _)| *n == name) {
        Some((_, v)) => *v += dt,
        None => stats.profile.push((name, dt)),
    }
}

/// Result of [`evaluate_distributed`] on one rank.
#[derive(Clone, Debug)]
pub struct DistributedEvaluation {
    /// Fields at this rank's targets, in the caller's order.
    pub fields: Fields,
    pub times: PhaseTimes,
    pub stats: CommStats,
    /// Work (sources + targets) owned by each rank.
    pub work: Vec<u64>,
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Fails on every rank unless every rank passed the same parameters.
fn check_same_params<C: Comm + ?Sized>(
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
fn global_offsets<C: Comm + ?Sized>(comm: &C, counts: &[u64]) -> Vec<Vec<u64>> {
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

/// `(Morton key, global id, input index)` of every point, sorted by (key, global id).
fn keyed_sorted(part: &Partition, position: &[[f64; 3]], gid: &[u64]) -> Vec<(u64, u64, u32)> {
    keyed_sorted_in(part.cube, position, gid)
}

/// Where a particle of the received set comes from: `(key, gid, run, index)` with `run` the
/// sending rank (this rank: `index` into the caller's arrays; another: record `index` of its
/// message).
type Routed = (u64, u64, u32, u32);

/// Sends every particle of `sorted` (see [`keyed_sorted`]) to the owner of its branch cell as a
/// record of `words` little-endian 64-bit words (`fill(input index, record)`; word 0 is the
/// global id, words 1..4 the position). Particles staying on this rank are not serialized.
/// Returns the particles now owned, sorted by (key, global id), and the received messages.
fn route<C: Comm + ?Sized>(
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
fn routed_f64(
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

fn routed_vec3(
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
const SRC_WORDS: usize = 8;
/// Target records: gid, position, strength.
const TGT_WORDS: usize = 7;

#[allow(clippy::too_many_arguments)]
fn route_sources_parts<C: Comm + ?Sized>(
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

fn route_sources<C: Comm + ?Sized>(
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

fn route_targets_parts<C: Comm + ?Sized>(
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
const FIELD_WORDS: usize = 7;

/// Sends the fields at the owned targets (global ids `gid`) back to the ranks that hold them
/// in the caller's order (`offsets`: first global target id of each rank); returns this
/// rank's `n` fields in its order.
fn return_fields<C: Comm + ?Sized>(
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
    stats.bytes_summary += essential_bytes_partition(&part, comm.size());
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
fn keyed_sorted_in(
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

fn validate_local(
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
    rec.stats.bytes_summary += essential_bytes_partition(&part, nranks);
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
fn check_inputs<C: Comm + ?Sized>(
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
fn direct_on_every_rank<C: Comm + ?Sized>(
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
struct Keyed {
    cube: vortex_fmm::tree::BoundingCube,
    sgid: Vec<u64>,
    tgid: Vec<u64>,
    s_sorted: Vec<(u64, u64, u32)>,
    /// empty when `same`
    t_sorted: Vec<(u64, u64, u32)>,
    /// the targets equal the sources on every rank (the vortex method): they are not routed
    /// on their own (same keys, same owners, same order), only copied
    same: bool,
}

/// Morton keys once, for the partition counts and the routing (positions wrapped when
/// periodic). Collective (the cube, and whether the targets are the sources on every rank).
#[allow(clippy::too_many_arguments)]
fn sorted_keys<C: Comm + ?Sized>(
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
fn partition_of<C: Comm + ?Sized>(
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
fn route_to_owners<C: Comm + ?Sized>(
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

/// Bytes one rank sent while building the partition tree (allreduce of 16 counts per split).
fn essential_bytes_partition(part: &Partition, nranks: usize) -> u64 {
    let split = part.cells.iter().filter(|c| !c.is_branch()).count();
    comm::bytes_allreduce(nranks, 16 * split + 2)
}

/// Gathers every rank's `fields` (each in its caller's order) on rank 0, concatenated in rank
/// order, i.e. in the global input order. Returns `None` on the other ranks. Collective.
pub fn gather_to_root<C: Comm + ?Sized>(comm: &C, fields: &Fields) -> Option<Fields> {
    let mut w = Writer::new();
    for i in 0..fields.velocity.len() {
        w.vec3(fields.velocity[i]);
        w.vec3(fields.stretching[i]);
    }
    let send: Vec<Vec<u8>> = (0..comm.size())
        .map(|r| if r == 0 { w.buf.clone() } else { Vec::new() })
        .collect();
    let recv = comm.alltoallv(&send);
    if comm.rank() != 0 {
        return None;
    }
    let mut out = Fields::default();
    for buf in &recv {
        let mut rd = Reader::new(buf);
        while !rd.done() {
            out.velocity.push(rd.vec3());
            out.stretching.push(rd.vec3());
        }
    }
    Some(out)
}

/// Scatters a set held by rank 0 in contiguous, nearly equal pieces (rank `r` gets the `r`-th
/// piece): the input distribution of `mpirun vortex eval` when rank 0 reads the file.
/// Collective; `all` is ignored on the other ranks.
pub fn scatter_sources_from_root<C: Comm + ?Sized>(comm: &C, all: Option<&Sources>) -> Sources {
    let n = comm.size();
    let mut send = vec![Vec::new(); n];
    if comm.rank() == 0 {
        let s = all.expect("rank 0 must hold the set");
        for (r, buf) in send.iter_mut().enumerate() {
            let (b, e) = (s.len() * r / n, s.len() * (r + 1) / n);
            let mut w = Writer::new();
            for i in b..e {
                w.vec3(s.position[i]);
                w.vec3(s.strength[i]);
                w.f64(s.sigma[i]);
            }
            *buf = w.buf;
        }
    }
    let recv = comm.alltoallv(&send);
    let mut out = Sources::default();
    let mut rd = Reader::new(&recv[0]);
    while !rd.done() {
        out.position.push(rd.vec3());
        out.strength.push(rd.vec3());
        out.sigma.push(rd.f64());
    }
    out
}

/// As [`scatter_sources_from_root`] for targets.
pub fn scatter_targets_from_root<C: Comm + ?Sized>(comm: &C, all: Option<&Targets>) -> Targets {
    let n = comm.size();
    let mut send = vec![Vec::new(); n];
    if comm.rank() == 0 {
        let t = all.expect("rank 0 must hold the set");
        for (r, buf) in send.iter_mut().enumerate() {
            let (b, e) = (t.len() * r / n, t.len() * (r + 1) / n);
            let mut w = Writer::new();
            for i in b..e {
                w.vec3(t.position[i]);
                w.vec3(t.strength[i]);
            }
            *buf = w.buf;
        }
    }
    let recv = comm.alltoallv(&send);
    let mut out = Targets::default();
    let mut rd = Reader::new(&recv[0]);
    while !rd.done() {
        out.position.push(rd.vec3());
        out.strength.push(rd.vec3());
    }
    out
}
