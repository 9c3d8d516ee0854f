//! Domain decomposition of the vortex FMM over ranks (MPI or simulated).
//!
//! * [`comm`]: the [`Comm`] trait and its implementations ([`SelfComm`], [`ThreadComm`],
//!   `MpiComm` with the `mpi` feature);
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
pub mod ext_tree;
pub mod partition;
pub mod wire;

#[cfg(feature = "mpi")]
pub use comm::MpiComm;
pub use comm::{Comm, ReduceOp, SelfComm, ThreadComm};
pub use essential::{evaluate_owned, OwnedSources, OwnedTargets};
pub use partition::Partition;

use fmm::backend::{Backend, PhaseTimes};
use fmm::evaluators::{direct, Method};
use fmm::{EvalParams, Fields, FmmError, Sources, Targets};
use rayon::prelude::*;
use std::time::Instant;
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

/// Bytes sent by this rank (to other ranks) and times of the communication phases.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommStats {
    /// Partition counts and cell summaries (allreduce).
    pub bytes_summary: u64,
    /// Particles moved to their owners (and fields returned).
    pub bytes_redistribute: u64,
    /// P2Pcomm: pruned subtrees and halo particles.
    pub bytes_p2p: u64,
    /// M2Lcomm: requests (cell keys), branch multipoles (all-gather) and the requested
    /// multipoles (those the receiver's far lists use).
    pub bytes_m2l: u64,
    /// Halo particles received.
    pub halo_particles: u64,
    /// Remote cells received (below branch cells).
    pub remote_cells: u64,
    /// Multipoles of cells below branch cells sent to other ranks in M2Lcomm.
    pub m2l_cells_sent: u64,
    /// Remote cells below branch cells that this rank's far lists use (each needs the
    /// multipole received for it: a lower bound of what M2Lcomm must bring).
    pub m2l_cells_used: u64,
    pub t_partition: f64,
    pub t_redistribute: f64,
    pub t_p2pcomm: f64,
    pub t_m2lcomm: f64,
}

impl CommStats {
    pub fn bytes_total(&self) -> u64 {
        self.bytes_summary + self.bytes_redistribute + self.bytes_p2p + self.bytes_m2l
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

/// Sends every source to the owner of its branch cell; returns the owned sources sorted by
/// (key, global id). `gid[i]` is the global id of `sources[i]`.
pub fn redistribute_sources<C: Comm + ?Sized>(
    comm: &C,
    part: &Partition,
    gid: &[u64],
    sources: &Sources,
    stats: &mut CommStats,
) -> OwnedSources {
    let n = comm.size();
    let mut w: Vec<Writer> = (0..n).map(|_| Writer::new()).collect();
    for (i, &g) in gid.iter().enumerate().take(sources.len()) {
        let r = part.owner_of(part.key(sources.position[i]));
        let w = &mut w[r];
        w.u64(g);
        w.vec3(sources.position[i]);
        w.vec3(sources.strength[i]);
        w.f64(sources.sigma[i]);
    }
    let send: Vec<Vec<u8>> = w.into_iter().map(|w| w.buf).collect();
    stats.bytes_redistribute += sent(comm, &send);
    let recv = comm.alltoallv(&send);
    type Item = (u64, u64, [f64; 3], [f64; 3], f64);
    let mut items: Vec<Item> = Vec::new();
    for buf in &recv {
        let mut rd = Reader::new(buf);
        while !rd.done() {
            let g = rd.u64();
            let x = rd.vec3();
            let a = rd.vec3();
            let s = rd.f64();
            items.push((part.key(x), g, x, a, s));
        }
    }
    items.par_sort_unstable_by_key(|t| (t.0, t.1));
    let mut o = OwnedSources::default();
    for (k, g, x, a, s) in items {
        o.key.push(k);
        o.gid.push(g);
        o.sources.position.push(x);
        o.sources.strength.push(a);
        o.sources.sigma.push(s);
    }
    o
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
        Some(p) => owned.sources.position.iter().map(|&x| p.wrap(x)).collect(),
    };
    let cube = match &params.periodic {
        None => partition::global_cube(comm, &[&position]),
        Some(p) => fmm::tree::BoundingCube {
            lo: [-0.5 * p.box_length; 3],
            width: p.box_length,
        },
    };
    let mut keys: Vec<u64> = position
        .par_iter()
        .map(|&x| fmm::tree::morton_key(cube.grid_coords(x)))
        .collect();
    keys.par_sort_unstable();
    let part = Partition::build(
        comm,
        cube,
        &keys,
        &keys,
        params.leaf_size,
        dparams.granularity,
    );
    stats.bytes_summary += essential_bytes_partition(&part, comm.size());
    stats.t_partition += t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let s = Sources {
        position,
        strength: owned.sources.strength.clone(),
        sigma: owned.sources.sigma.clone(),
    };
    let out = redistribute_sources(comm, &part, &owned.gid, &s, stats);
    stats.t_redistribute += t1.elapsed().as_secs_f64();
    (part, out)
}

/// As [`redistribute_sources`] for targets.
pub fn redistribute_targets<C: Comm + ?Sized>(
    comm: &C,
    part: &Partition,
    gid: &[u64],
    targets: &Targets,
    stats: &mut CommStats,
) -> OwnedTargets {
    let n = comm.size();
    let mut w: Vec<Writer> = (0..n).map(|_| Writer::new()).collect();
    for (i, &g) in gid.iter().enumerate().take(targets.len()) {
        let r = part.owner_of(part.key(targets.position[i]));
        let w = &mut w[r];
        w.u64(g);
        w.vec3(targets.position[i]);
        w.vec3(targets.strength[i]);
    }
    let send: Vec<Vec<u8>> = w.into_iter().map(|w| w.buf).collect();
    stats.bytes_redistribute += sent(comm, &send);
    let recv = comm.alltoallv(&send);
    let mut items: Vec<(u64, u64, [f64; 3], [f64; 3])> = Vec::new();
    for buf in &recv {
        let mut rd = Reader::new(buf);
        while !rd.done() {
            let g = rd.u64();
            let x = rd.vec3();
            let a = rd.vec3();
            items.push((part.key(x), g, x, a));
        }
    }
    items.par_sort_unstable_by_key(|t| (t.0, t.1));
    let mut o = OwnedTargets::default();
    for (k, g, x, a) in items {
        o.key.push(k);
        o.gid.push(g);
        o.targets.position.push(x);
        o.targets.strength.push(a);
    }
    o
}

fn sent<C: Comm + ?Sized>(comm: &C, send: &[Vec<u8>]) -> u64 {
    send.iter()
        .enumerate()
        .filter(|(r, _)| *r != comm.rank())
        .map(|(_, b)| b.len() as u64)
        .sum()
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
/// and equals `fmm::evaluate` on the concatenation (in rank order) of all ranks' inputs.
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
    let me = comm.rank();
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
        // same test as fmm::periodic::check_total_strength, on the global sums
        let norm = (tot[0] * tot[0] + tot[1] * tot[1] + tot[2] * tot[2]).sqrt();
        if norm > 1e-10 * tot[3].max(f64::MIN_POSITIVE) {
            fmm::periodic::check_total_strength(&total)?;
        }
    }

    if params.method == Method::Direct {
        // O(N^2) anyway: every rank needs every source
        let mut w = Writer::new();
        for i in 0..sources.len() {
            w.vec3(sources.position[i]);
            w.vec3(sources.strength[i]);
            w.f64(sources.sigma[i]);
        }
        stats.bytes_redistribute += (w.len() * (nranks - 1)) as u64;
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
        let fields = fmm::backend::timed(&mut times.p2p, || {
            if targets.is_empty() {
                return Fields::default();
            }
            match &params.periodic {
                None => direct::direct(&s, targets),
                Some(p) => direct::direct_periodic(&s, targets, p),
            }
        });
        times.total = t0.elapsed().as_secs_f64();
        return Ok(DistributedEvaluation {
            fields,
            times,
            stats,
            work: vec![0; nranks],
        });
    }

    // positions (wrapped when periodic) and the global cube
    let tp = Instant::now();
    let (src_pos, tgt_pos, cube) = match &params.periodic {
        None => {
            let cube = partition::global_cube(comm, &[&sources.position, &targets.position]);
            (sources.position.clone(), targets.position.clone(), cube)
        }
        Some(p) => (
            sources
                .position
                .iter()
                .map(|&x| p.wrap(x))
                .collect::<Vec<_>>(),
            targets
                .position
                .iter()
                .map(|&x| p.wrap(x))
                .collect::<Vec<_>>(),
            fmm::tree::BoundingCube {
                lo: [-0.5 * p.box_length; 3],
                width: p.box_length,
            },
        ),
    };
    let keys = |pos: &[[f64; 3]]| {
        let mut k: Vec<u64> = pos
            .par_iter()
            .map(|&x| fmm::tree::morton_key(cube.grid_coords(x)))
            .collect();
        k.par_sort_unstable();
        k
    };
    let part = Partition::build(
        comm,
        cube,
        &keys(&src_pos),
        &keys(&tgt_pos),
        params.leaf_size,
        dparams.granularity,
    );
    stats.bytes_summary += essential_bytes_partition(&part, nranks);
    stats.t_partition = tp.elapsed().as_secs_f64();

    let tr = Instant::now();
    let sgid: Vec<u64> = (0..sources.len() as u64)
        .map(|i| offsets[0][me] + i)
        .collect();
    let tgid: Vec<u64> = (0..targets.len() as u64)
        .map(|i| offsets[1][me] + i)
        .collect();
    let src_w = Sources {
        position: src_pos,
        strength: sources.strength.clone(),
        sigma: sources.sigma.clone(),
    };
    let tgt_w = Targets {
        position: tgt_pos,
        strength: targets.strength.clone(),
    };
    let own_s = redistribute_sources(comm, &part, &sgid, &src_w, &mut stats);
    let own_t = redistribute_targets(comm, &part, &tgid, &tgt_w, &mut stats);
    stats.t_redistribute += tr.elapsed().as_secs_f64();

    let fields = essential::evaluate_owned_with(
        comm, backend, params, dparams, &part, &own_s, &own_t, &mut stats, &mut times,
    )?;

    // fields back to the ranks and positions they came from
    let tr = Instant::now();
    let mut w: Vec<Writer> = (0..nranks).map(|_| Writer::new()).collect();
    for (i, &g) in own_t.gid.iter().enumerate() {
        let r = offsets[1].partition_point(|&o| o <= g) - 1;
        let w = &mut w[r];
        w.u64(g);
        w.vec3(fields.velocity[i]);
        w.vec3(fields.stretching[i]);
    }
    let send: Vec<Vec<u8>> = w.into_iter().map(|w| w.buf).collect();
    stats.bytes_redistribute += sent(comm, &send);
    let recv = comm.alltoallv(&send);
    let mut out = Fields::zeros(targets.len());
    for buf in &recv {
        let mut rd = Reader::new(buf);
        while !rd.done() {
            let i = (rd.u64() - offsets[1][me]) as usize;
            out.velocity[i] = rd.vec3();
            out.stretching[i] = rd.vec3();
        }
    }
    stats.t_redistribute += tr.elapsed().as_secs_f64();
    times.total = t0.elapsed().as_secs_f64();
    Ok(DistributedEvaluation {
        fields: out,
        times,
        stats,
        work: part.work_per_rank(),
    })
}

/// Bytes one rank sent while building the partition tree (allreduce of 16 counts per split).
fn essential_bytes_partition(part: &Partition, nranks: usize) -> u64 {
    let split = part.cells.iter().filter(|c| !c.is_branch()).count();
    essential::comm_bytes_allreduce(nranks, 16 * split + 2)
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
