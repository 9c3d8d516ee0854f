//! What the ranks do together outside the evaluation: agreeing on the outcome of a step that
//! one rank may fail alone ([`agree`]), broadcasting bytes and numbers from rank 0, checking that
//! every rank holds the same text, and moving particle rows between rank 0 and the owners
//! ([`gather_rows`], [`scatter_rows`]: the gathers of the re-interpolation, one-rank
//! checkpoints and snapshots, in global-id order), and a state held in any distribution over
//! the ranks brought to the even split by global id ([`balance_by_gid`]: the pieces of a
//! checkpoint read on another number of ranks).

use crate::error::{Error, Result};
use crate::particles::Particles;
use crate::rhs::Derivatives;
use crate::stepping::State;
use rayon::prelude::*;
use vortex_domain::wire::{Reader, Writer};
use vortex_domain::{Comm, ReduceOp};

/// Agrees on the outcome of something every rank did (collective). When any rank failed, every
/// rank returns an error: the failing rank its own, the others [`Error::Rank`] with the rank and
/// message of the lowest failing rank (a rank that only saw another fail, such as
/// `DomainError::Remote`, is not chosen when a rank with the cause exists).
pub fn agree<T>(comm: &dyn Comm, r: Result<T>) -> Result<T> {
    if comm.size() == 1 {
        return r;
    }
    let mut w = Writer::new();
    if let Err(e) = &r {
        let (kind, origin, msg) = match e {
            Error::Rank { rank, msg } => (3u8, *rank, msg.clone()),
            e if e.is_remote() => (1, comm.rank(), e.to_string()),
            e => (2, comm.rank(), e.to_string()),
        };
        w.u8(kind);
        w.u64(origin as u64);
        w.buf.extend_from_slice(msg.as_bytes());
    }
    let all = comm.allgatherv(&w.buf);
    let pick = |k: u8| all.iter().position(|b| b.first() == Some(&k));
    let Some(chosen) = pick(2).or_else(|| pick(3)).or_else(|| pick(1)) else {
        return r;
    };
    let b = &all[chosen];
    let origin = u64::from_le_bytes(b[1..9].try_into().unwrap()) as usize;
    if origin == comm.rank() && r.is_err() {
        return r;
    }
    Err(Error::Rank {
        rank: origin,
        msg: String::from_utf8_lossy(&b[9..]).into_owned(),
    })
}

/// Rank 0's bytes on every rank. Collective.
pub fn broadcast_bytes(comm: &dyn Comm, bytes: &[u8]) -> Vec<u8> {
    if comm.size() == 1 {
        return bytes.to_vec();
    }
    let mine: &[u8] = if comm.rank() == 0 { bytes } else { &[] };
    comm.allgatherv(mine).swap_remove(0)
}

/// Rank 0's values on every rank. Collective.
pub fn broadcast_f64s(comm: &dyn Comm, v: &[f64]) -> Vec<f64> {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    broadcast_bytes(comm, &b)
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Fails on every rank unless every rank passed the same `text` (options, configuration).
/// Collective.
pub fn check_same(comm: &dyn Comm, what: &str, text: &str) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    let all = comm.allgatherv(text.as_bytes());
    if let Some(r) = all.iter().position(|b| b != &all[0]) {
        return Err(Error::Other(format!(
            "the ranks were started with different {what}: rank 0 has `{}`, rank {r} has `{}`",
            String::from_utf8_lossy(&all[0]),
            String::from_utf8_lossy(&all[r])
        )));
    }
    Ok(())
}

/// Largest payload of one collective of the gathers and scatters below (MPI counts are `i32`).
pub(crate) const MAX_MESSAGE: usize = 1 << 30;

/// Gathers rows of `width` values, produced by `row(i, out)` for this rank's items with global
/// ids `gid` (a permutation of `0..n` over all ranks), on rank 0 in global-id order (`n * width`
/// values); `None` on the other ranks. In rounds of at most 1 GiB. Collective.
pub fn gather_rows(
    comm: &dyn Comm,
    gid: &[u64],
    width: usize,
    n: usize,
    row: impl Fn(usize, &mut [f64]),
) -> Option<Vec<f64>> {
    let local = gid.len();
    let root = comm.rank() == 0;
    let mut out = if root { vec![0.0; n * width] } else { vec![] };
    if comm.size() == 1 {
        for (i, &g) in gid.iter().enumerate() {
            let g = g as usize;
            row(i, &mut out[g * width..(g + 1) * width]);
        }
        return Some(out);
    }
    let mut most = [local as f64];
    comm.allreduce_f64(&mut most, ReduceOp::Max);
    let chunk = (MAX_MESSAGE / (comm.size() * 8 * (width + 1))).max(1);
    let rounds = (most[0] as usize).div_ceil(chunk);
    let mut buf = vec![0.0; width];
    for k in 0..rounds {
        let mut w = Writer::new();
        let end = ((k + 1) * chunk).min(local);
        for (i, &g) in gid.iter().enumerate().take(end).skip(k * chunk) {
            w.u64(g);
            row(i, &mut buf);
            w.f64s(&buf);
        }
        let mut send = vec![Vec::new(); comm.size()];
        send[0] = w.buf;
        let recv = comm.alltoallv(&send);
        if root {
            for b in &recv {
                let mut rd = Reader::new(b);
                while !rd.done() {
                    let g = rd.u64() as usize;
                    rd.f64s_into(&mut out[g * width..(g + 1) * width]);
                }
            }
        }
    }
    root.then_some(out)
}

/// Scatters `n` rows of `width` values held by rank 0 in global-id order: rank `r` gets the ids
/// `n r / R .. n (r + 1) / R`. Returns this rank's ids and rows. `all` is ignored on the other
/// ranks; `n` must be known everywhere. In rounds of at most 1 GiB. Collective.
pub fn scatter_rows(
    comm: &dyn Comm,
    all: Option<Vec<f64>>,
    width: usize,
    n: usize,
) -> (Vec<u64>, Vec<f64>) {
    let (me, size) = (comm.rank(), comm.size());
    let lo = |r: usize| n * r / size;
    let gid: Vec<u64> = (lo(me) as u64..lo(me + 1) as u64).collect();
    if size == 1 {
        return (gid, all.expect("rank 0 holds the rows"));
    }
    let empty = Vec::new();
    let all = if me == 0 {
        all.as_ref().expect("rank 0 holds the rows")
    } else {
        &empty
    };
    let most = (0..size).map(|r| lo(r + 1) - lo(r)).max().unwrap_or(0);
    let chunk = (MAX_MESSAGE / (size * 8 * width.max(1))).max(1);
    let rounds = most.div_ceil(chunk);
    let mut out = Vec::with_capacity(gid.len() * width);
    for k in 0..rounds {
        let mut send = vec![Vec::new(); size];
        if me == 0 {
            for (r, s) in send.iter_mut().enumerate() {
                let b = (lo(r) + k * chunk).min(lo(r + 1));
                let e = (lo(r) + (k + 1) * chunk).min(lo(r + 1));
                let mut w = Writer::new();
                w.f64s(&all[b * width..e * width]);
                *s = w.buf;
            }
        }
        let recv = comm.alltoallv(&send);
        out.extend(
            recv[0]
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap())),
        );
    }
    (gid, out)
}

/// Values per particle in the gathers: position, strength, sigma, sigma0.
pub const PARTICLE_ROW: usize = 8;

pub(crate) fn particle_row(p: &Particles, i: usize, r: &mut [f64]) {
    r[0..3].copy_from_slice(&p.position[i]);
    r[3..6].copy_from_slice(&p.strength[i]);
    r[6] = p.sigma[i];
    r[7] = p.sigma0[i];
}

pub(crate) fn v3(r: &[f64]) -> [f64; 3] {
    [r[0], r[1], r[2]]
}

/// Particles and `extra` vector fields from rows of [`PARTICLE_ROW`] + 3 `extra` values.
pub(crate) fn from_rows(rows: &[f64], extra: usize) -> (Particles, Vec<Vec<[f64; 3]>>) {
    let width = PARTICLE_ROW + 3 * extra;
    let n = rows.len() / width.max(1);
    let mut p = Particles {
        position: Vec::with_capacity(n),
        strength: Vec::with_capacity(n),
        sigma: Vec::with_capacity(n),
        sigma0: Vec::with_capacity(n),
    };
    let mut ex: Vec<Vec<[f64; 3]>> = (0..extra).map(|_| Vec::with_capacity(n)).collect();
    for r in rows.chunks_exact(width) {
        p.position.push(v3(&r[0..3]));
        p.strength.push(v3(&r[3..6]));
        p.sigma.push(r[6]);
        p.sigma0.push(r[7]);
        for (k, e) in ex.iter_mut().enumerate() {
            e.push(v3(&r[PARTICLE_ROW + 3 * k..]));
        }
    }
    (p, ex)
}

/// The Adams-Bashforth history from the last two `extra` fields of [`from_rows`] (velocity,
/// then stretching).
fn history(ex: &mut Vec<Vec<[f64; 3]>>) -> Derivatives {
    let stretching = ex.pop().expect("two history fields");
    let velocity = ex.pop().expect("two history fields");
    Derivatives {
        velocity,
        stretching,
    }
}

pub(crate) fn rows_of(p: &Particles, extra: &[&[[f64; 3]]]) -> Vec<f64> {
    let width = PARTICLE_ROW + 3 * extra.len();
    let mut out = vec![0.0; p.len() * width];
    out.par_chunks_mut(width).enumerate().for_each(|(i, r)| {
        particle_row(p, i, r);
        for (k, e) in extra.iter().enumerate() {
            r[PARTICLE_ROW + 3 * k..PARTICLE_ROW + 3 * k + 3].copy_from_slice(&e[i]);
        }
    });
    out
}

pub(crate) fn permute<T: Copy + Send + Sync>(v: &[T], idx: &[usize]) -> Vec<T> {
    idx.par_iter().map(|&i| v[i]).collect()
}

/// All particles `p` of the ranks (this rank's with global ids `gid`, `n` over all ranks) in
/// global-id order on rank 0, with the per-particle vector fields `extra` (aligned with `p`);
/// `None` on the other ranks. Collective.
pub fn gather_particles(
    comm: &dyn Comm,
    gid: &[u64],
    n: usize,
    p: &Particles,
    extra: &[&[[f64; 3]]],
) -> Option<(Particles, Vec<Vec<[f64; 3]>>)> {
    let width = PARTICLE_ROW + 3 * extra.len();
    let rows = gather_rows(comm, gid, width, n, |i, r| {
        particle_row(p, i, r);
        for (k, e) in extra.iter().enumerate() {
            r[PARTICLE_ROW + 3 * k..PARTICLE_ROW + 3 * k + 3].copy_from_slice(&e[i]);
        }
    })?;
    Some(from_rows(&rows, extra.len()))
}

/// The global state in global-id order on rank 0 from every rank's `local` state (its
/// particles with global ids `gid`, `n` over all ranks; the step counters are the same on
/// every rank, the Adams-Bashforth history present on all ranks or none): what a checkpoint
/// holds, independent of the number of ranks. `None` on the other ranks. Collective.
pub fn gather_state(comm: &dyn Comm, gid: &[u64], n: usize, local: &State) -> Option<State> {
    let p = &local.particles;
    let (p, mut ex) = match &local.previous {
        Some(d) => gather_particles(comm, gid, n, p, &[&d.velocity, &d.stretching])?,
        None => gather_particles(comm, gid, n, p, &[])?,
    };
    let previous = local.previous.as_ref().map(|_| history(&mut ex));
    Some(State {
        step: local.step,
        step_reset: local.step_reset,
        particles: p,
        previous,
        reinterpolations: local.reinterpolations,
    })
}

/// Splits a global state in global-id order held by rank 0 (`None` on the other ranks) over
/// the ranks: rank `r` gets the ids `n r / R .. n (r + 1) / R`. Returns this rank's state, its
/// global ids and the number of particles over all ranks. Collective.
pub fn scatter_state(comm: &dyn Comm, global: Option<State>) -> (State, Vec<u64>, usize) {
    let head = match &global {
        Some(st) => {
            let n = st.particles.len();
            let prev = st
                .previous
                .as_ref()
                .is_some_and(|d| d.velocity.len() == n && d.stretching.len() == n);
            vec![
                st.step as f64,
                st.step_reset as f64,
                st.reinterpolations as f64,
                if prev { 1.0 } else { 0.0 },
                n as f64,
            ]
        }
        None => vec![0.0; 5],
    };
    let head = broadcast_f64s(comm, &head);
    let has_prev = head[3] == 1.0;
    let n = head[4] as usize;
    let extra = if has_prev { 2 } else { 0 };
    let rows = global.as_ref().map(|st| match (&st.previous, has_prev) {
        (Some(d), true) => rows_of(&st.particles, &[&d.velocity, &d.stretching]),
        _ => rows_of(&st.particles, &[]),
    });
    drop(global);
    let (gid, rows) = scatter_rows(comm, rows, PARTICLE_ROW + 3 * extra, n);
    let (particles, mut ex) = from_rows(&rows, extra);
    let previous = has_prev.then(|| history(&mut ex));
    let state = State {
        step: head[0] as u64,
        step_reset: head[1] as u64,
        particles,
        previous,
        reinterpolations: head[2] as u64,
    };
    (state, gid, n)
}

/// This rank's part of a state: its particles with their Adams-Bashforth history rows (when the
/// state has a history) and their global ids; the step counters are the same on every rank.
/// What a rank writes as its piece of a checkpoint, and what a simulation starts from.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalState {
    /// This rank's particles (and history rows) in the order of `ids`.
    pub state: State,
    /// Global ids of the particles (`0..n_global` over all ranks).
    pub ids: Vec<u64>,
    /// Particles over all ranks.
    pub n_global: usize,
}

impl LocalState {
    /// A global state in global-id order held by rank 0 (`None` on the other ranks) split over
    /// the ranks as [`scatter_state`] splits it; on one rank the state itself (no copy).
    /// Collective.
    pub fn scatter(comm: &dyn Comm, global: Option<State>) -> Self {
        if comm.size() == 1 {
            let state = global.expect("rank 0 holds the state");
            let n = state.particles.len();
            return Self {
                state,
                ids: (0..n as u64).collect(),
                n_global: n,
            };
        }
        let (state, ids, n_global) = scatter_state(comm, global);
        Self {
            state,
            ids,
            n_global,
        }
    }

    /// The global state in global-id order on rank 0 (`None` elsewhere), as [`gather_state`]
    /// assembles it; on one rank whose ids are already `0..n` in order, the state itself.
    /// Collective.
    pub fn into_global(self, comm: &dyn Comm) -> Option<State> {
        let in_order = self.ids.iter().enumerate().all(|(i, &g)| g == i as u64);
        if comm.size() == 1 && in_order && self.ids.len() == self.n_global {
            return Some(self.state);
        }
        gather_state(comm, &self.ids, self.n_global, &self.state)
    }
}

/// The rank `r` of the even split by global id (`n r / R <= g < n (r + 1) / R`) that holds
/// global id `g < n`.
fn split_owner(g: usize, n: usize, size: usize) -> usize {
    let lo = |r: usize| n * r / size;
    let mut r = ((g as u128 * size as u128) / n.max(1) as u128) as usize;
    r = r.min(size - 1);
    while r + 1 < size && lo(r + 1) <= g {
        r += 1;
    }
    while r > 0 && lo(r) > g {
        r -= 1;
    }
    r
}

/// Brings a state held in any distribution over the ranks (every global id of `0..n_global`
/// on exactly one rank, in any order; the Adams-Bashforth history on every rank that holds
/// particles or on none) to the even split of [`scatter_state`]: rank `r` ends with the ids
/// `n r / R .. n (r + 1) / R` in order, bit for bit the state a scatter of the whole state
/// in global-id order gives. In rounds of at most 1 GiB. An id out of range, twice or
/// missing is reported (`Err`, with the ids) after the exchange, so every rank takes part
/// in every round; the caller agrees on the outcome. Collective.
pub fn balance_by_gid(
    comm: &dyn Comm,
    local: LocalState,
) -> std::result::Result<LocalState, String> {
    let (me, size, n) = (comm.rank(), comm.size(), local.n_global);
    let lo = |r: usize| n * r / size;
    let (first, count) = (lo(me), lo(me + 1) - lo(me));
    let mut has = [local.state.previous.is_some() as u8 as f64];
    comm.allreduce_f64(&mut has, ReduceOp::Max);
    let extra = if has[0] > 0.0 { 2 } else { 0 };
    let mut problems: Vec<String> = Vec::new();
    let st = &local.state;
    let fields: Vec<&[[f64; 3]]> = match (&st.previous, extra) {
        (Some(d), 2) => vec![&d.velocity, &d.stretching],
        (None, 2) if !local.ids.is_empty() => {
            problems.push("particles without the Adams-Bashforth history of the others".into());
            vec![]
        }
        _ => vec![],
    };
    let width = PARTICLE_ROW + 3 * extra;
    let row = |i: usize, r: &mut [f64]| {
        particle_row(&st.particles, i, r);
        for (k, e) in fields.iter().enumerate() {
            r[PARTICLE_ROW + 3 * k..PARTICLE_ROW + 3 * k + 3].copy_from_slice(&e[i]);
        }
    };
    let mut rows = vec![0.0; count * width];
    let mut filled = vec![false; count];
    let mut twice: Vec<u64> = Vec::new();
    let mut place = |g: usize, src: &[f64]| {
        let k = g - first;
        if std::mem::replace(&mut filled[k], true) {
            twice.push(g as u64);
        }
        rows[k * width..(k + 1) * width].copy_from_slice(src);
    };
    let m = local.ids.len();
    let out_of_range: Vec<u64> = local
        .ids
        .iter()
        .copied()
        .filter(|&g| g as usize >= n)
        .collect();
    let mut buf = vec![0.0; width];
    let usable = fields.len() == extra;
    if size == 1 {
        for (i, &g) in local.ids.iter().enumerate() {
            if (g as usize) < n && usable {
                row(i, &mut buf);
                place(g as usize, &buf);
            }
        }
    } else {
        let mut most = [m as f64];
        comm.allreduce_f64(&mut most, ReduceOp::Max);
        let chunk = (MAX_MESSAGE / (size * 8 * (width + 1))).max(1);
        let rounds = (most[0] as usize).div_ceil(chunk);
        for k in 0..rounds {
            let mut w: Vec<Writer> = (0..size).map(|_| Writer::new()).collect();
            for (i, &g) in local
                .ids
                .iter()
                .enumerate()
                .take(((k + 1) * chunk).min(m))
                .skip(k * chunk)
            {
                if (g as usize) >= n || !usable {
                    continue;
                }
                row(i, &mut buf);
                let to = split_owner(g as usize, n, size);
                w[to].u64(g);
                w[to].f64s(&buf);
            }
            let send: Vec<Vec<u8>> = w.into_iter().map(|w| w.buf).collect();
            for b in comm.alltoallv(&send) {
                let mut rd = Reader::new(&b);
                while !rd.done() {
                    let g = rd.u64() as usize;
                    rd.f64s_into(&mut buf);
                    place(g, &buf);
                }
            }
        }
    }
    let few = |v: &[u64]| {
        let s: Vec<String> = v.iter().take(5).map(|g| g.to_string()).collect();
        format!("{}{}", s.join(", "), if v.len() > 5 { ", ..." } else { "" })
    };
    if !out_of_range.is_empty() {
        problems.push(format!(
            "{} global ids at or above the {n} particles ({})",
            out_of_range.len(),
            few(&out_of_range)
        ));
    }
    if !twice.is_empty() {
        problems.push(format!("global ids held twice ({})", few(&twice)));
    }
    let missing: Vec<u64> = (0..count)
        .filter(|&k| !filled[k])
        .map(|k| (first + k) as u64)
        .collect();
    if !missing.is_empty() && twice.is_empty() && out_of_range.is_empty() && usable {
        problems.push(format!(
            "{} global ids missing ({})",
            missing.len(),
            few(&missing)
        ));
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let (particles, mut ex) = from_rows(&rows, extra);
    drop(rows);
    let previous = (extra == 2).then(|| history(&mut ex));
    Ok(LocalState {
        state: State {
            particles,
            previous,
            ..local.state
        },
        ids: (first as u64..(first + count) as u64).collect(),
        n_global: n,
    })
}
