//! Slab decomposition of the uniform grid over the ranks of a [`vortex_domain::Comm`]: what the CPU
//! twin ([`super::distributed_reference`]) and the device path ([`super::distributed`]) share.
//!
//! * The grid is the one the single-rank evaluation of the union of the ranks' particles
//!   would choose: global count, component-wise bounds and largest core radius are agreed by
//!   min / max / sum reductions, and [`Extent::from_bounds`] gives bitwise the cube of
//!   [`Extent::of`].
//! * Rank `r` owns the leaf planes `z` in `bounds[r]..bounds[r + 1]`, `bounds[r] = r n / R`
//!   (slabs along z, not x: with the x-fastest cell numbering of [`super::grid`] the cells of
//!   a slab are one contiguous index range at every level, so every kernel takes a first
//!   cell and a count, and an exchanged window of cells is one contiguous block of memory).
//!   A particle's leaf plane is computed from its f32 position exactly as the device sort
//!   computes it (`sort::cell_of`), so host and device agree on every ownership.
//! * Halo: the particles of the leaf planes within [`HALO`] (= 1, the reach of the P2P) of
//!   the slab. The leaf-level M2L stencil reaches 3 leaves: the multipoles of the leaves
//!   further than the particle halo ([`SlabPlan::leaf_mult_planes`]; at `k = 0` the leaf
//!   level is the top level, every leaf interacts, and these are all other planes) come from
//!   their owners ([`exchange_leaf_multipoles`]: a leaf's multipole is half the bytes of its
//!   particles and needs no P2M on the receiver). Both come from any rank that owns them, so
//!   a slab narrower than the stencil gets planes from further ranks.
//! * Coarse levels `l < k`: each rank builds partial multipoles of its own particles only (a
//!   cell straddling two slabs gets parts from both); rank `q` sends rank `r` its partial
//!   cells in the z-range `r`'s M2L needs at each level ([`SlabPlan::needed`]: the cells
//!   overlapping `r`'s slab widened by the stencil, -2..+3 around the parent pair, the whole
//!   level at the top), and each rank sums the parts in rank order ([`exchange_coarse`]).
//!   This sends a few planes per level instead of the whole coarse tree an allreduce would
//!   (both counted in [`CoarseBytes`]).

use super::grid::{Extent, UniformGrid};
use super::periodic::{periodic_sums, PeriodicSums};
use super::sort::cell_of;
use super::UniformParams;
use crate::device::{GpuError, GpuResult};
use rayon::prelude::*;
use std::sync::OnceLock;
use vortex_domain::{Comm, ReduceOp};
use vortex_fmm::periodic::Periodic;
use vortex_fmm::{Fields, Sources};

/// Leaf planes of particle halo on each side of a slab (the reach of the P2P: the 27
/// neighbours of a leaf). The leaf-level M2L reaches further ([`SlabPlan::leaf_mult_planes`]):
/// those leaves arrive as multipoles, computed by their owners.
pub const HALO: usize = 1;

/// The agreed grid and the slabs of the ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct SlabPlan {
    pub grid: UniformGrid,
    /// This rank.
    pub rank: usize,
    /// `R + 1` leaf planes: rank `r` owns `bounds[r]..bounds[r + 1]`.
    pub bounds: Vec<usize>,
    /// Particles over all ranks.
    pub np_global: usize,
}

impl SlabPlan {
    /// Collective: agrees on the global grid from every rank's `local` particles and splits
    /// its leaf planes as evenly as possible. Every rank gets the same error when a rank's
    /// particles are invalid, when there are none, or when there are fewer leaf planes than
    /// ranks.
    pub fn agree(comm: &dyn Comm, local: &Sources, params: &UniformParams) -> GpuResult<Self> {
        params.validate()?;
        let np = local.len();
        let lens_ok = local.strength.len() == np && local.sigma.len() == np;
        let (lo, hi, smax, ok) = super::grid::bounds(&local.position, &local.sigma);
        // one min-reduction: lower bounds, negated upper bounds and core radius, a bad flag
        let mut v = [
            lo[0],
            lo[1],
            lo[2],
            -hi[0],
            -hi[1],
            -hi[2],
            -smax,
            if ok && lens_ok { 0.0 } else { -1.0 },
        ];
        comm.allreduce_f64(&mut v, ReduceOp::Min);
        let mut cnt = [np as f64];
        comm.allreduce_f64(&mut cnt, ReduceOp::Sum);
        if v[7] < 0.0 {
            return Err(GpuError::Unsupported(
                "a rank has sources with a non-finite value, a non-positive core radius or \
                 unequal lengths"
                    .into(),
            ));
        }
        let np_global = cnt[0] as usize;
        if np_global == 0 {
            return Err(GpuError::Unsupported("no sources on any rank".into()));
        }
        let ext = Extent::from_bounds([v[0], v[1], v[2]], [-v[3], -v[4], -v[5]], -v[6]);
        let grid = params.grid_for(&ext, np_global);
        Self::with_grid(comm.rank(), comm.size(), grid, np_global)
    }

    /// The plan of a periodic box: the grid [`UniformParams::grid_for_periodic`] chooses for
    /// `np_global` particles of largest core radius `sigma_max` (both agreed over the ranks
    /// by the caller, so the grid does not depend on the number of ranks), split over the
    /// ranks of `comm`. Errors: invalid parameters or box, no particles, a box too small for
    /// the cores, fewer leaf planes than ranks.
    pub fn periodic(
        comm: &dyn Comm,
        periodic: &Periodic,
        np_global: usize,
        sigma_max: f64,
        params: &UniformParams,
    ) -> GpuResult<Self> {
        params.validate()?;
        periodic
            .validate()
            .map_err(|e| GpuError::Unsupported(e.to_string()))?;
        if np_global == 0 {
            return Err(GpuError::Unsupported("no sources on any rank".into()));
        }
        let grid = params.grid_for_periodic(&Extent::periodic(periodic, sigma_max), np_global)?;
        Self::with_grid(comm.rank(), comm.size(), grid, np_global)
    }

    /// Collective, periodic: the sums of every rank's `local` particles (validity, count,
    /// largest core radius, total strength, dipole tensor of the wrapped positions; see
    /// [`allreduce_sums`]), checked as the single-rank path checks them, and the plan of
    /// [`SlabPlan::periodic`]. Every rank gets the same result or the same error.
    pub fn agree_periodic(
        comm: &dyn Comm,
        local: &Sources,
        params: &UniformParams,
        periodic: &Periodic,
    ) -> GpuResult<(Self, PeriodicSums)> {
        params.validate()?;
        periodic
            .validate()
            .map_err(|e| GpuError::Unsupported(e.to_string()))?;
        let np = local.len();
        let lens_ok = local.strength.len() == np && local.sigma.len() == np;
        let mut sums = if lens_ok {
            periodic_sums(local, periodic)
        } else {
            PeriodicSums::zero()
        };
        sums.valid &= lens_ok;
        let mut cnt = [np as f64];
        comm.allreduce_f64(&mut cnt, ReduceOp::Sum);
        let sums = allreduce_sums(comm, &sums);
        if !sums.valid {
            return Err(GpuError::Unsupported(
                "a rank has sources with a non-finite value, a non-positive core radius or \
                 unequal lengths"
                    .into(),
            ));
        }
        let np_global = cnt[0] as usize;
        if np_global == 0 {
            return Err(GpuError::Unsupported("no sources on any rank".into()));
        }
        sums.check(periodic)?;
        let plan = Self::periodic(comm, periodic, np_global, sums.sigma_max, params)?;
        Ok((plan, sums))
    }

    /// The slabs of `ranks` ranks over `grid` (an error when `n < ranks`).
    pub fn with_grid(
        rank: usize,
        ranks: usize,
        grid: UniformGrid,
        np_global: usize,
    ) -> GpuResult<Self> {
        let n = grid.n();
        if n < ranks {
            return Err(GpuError::Unsupported(format!(
                "uniform grid of {n} leaf planes cannot be split over {ranks} ranks \
                 (at least one plane per rank)"
            )));
        }
        Ok(SlabPlan {
            grid,
            rank,
            bounds: (0..=ranks).map(|r| r * n / ranks).collect(),
            np_global,
        })
    }

    pub fn ranks(&self) -> usize {
        self.bounds.len() - 1
    }
    /// Leaves per side.
    pub fn n(&self) -> usize {
        self.grid.n()
    }
    /// Leaf planes owned by rank `r`.
    pub fn own(&self, r: usize) -> (usize, usize) {
        (self.bounds[r], self.bounds[r + 1])
    }
    /// Leaf planes of rank `r`'s particle halo, outside its slab: the [`HALO`] planes on
    /// each side, clamped to the grid in free space, wrapped around on a periodic grid
    /// (sorted disjoint ranges; none when the slab is the whole grid).
    pub fn halo(&self, r: usize) -> Ranges {
        let (z0, z1) = self.own(r);
        let n = self.n() as i64;
        let mut mask = vec![false; self.n()];
        for d in 1..=HALO as i64 {
            for z in [z0 as i64 - d, z1 as i64 - 1 + d] {
                if self.grid.periodic {
                    mask[z.rem_euclid(n) as usize] = true;
                } else if (0..n).contains(&z) {
                    mask[z as usize] = true;
                }
            }
        }
        mask[z0..z1].iter_mut().for_each(|m| *m = false);
        mask_ranges(&mask)
    }
    /// Leaf planes whose multipoles rank `r` receives from their owners: those its leaf-level
    /// M2L reads ([`SlabPlan::needed`] at level `k`: the whole grid when `k = 0`) outside its
    /// slab and its particle halo (sorted disjoint ranges).
    pub fn leaf_mult_planes(&self, r: usize) -> Vec<(usize, usize)> {
        let mut mask = vec![false; self.n()];
        for (a, b) in self.needed(r, self.grid.k) {
            mask[a..b].iter_mut().for_each(|m| *m = true);
        }
        let (z0, z1) = self.own(r);
        for (a, b) in self.halo(r).into_iter().chain([(z0, z1)]) {
            mask[a..b].iter_mut().for_each(|m| *m = false);
        }
        mask_ranges(&mask)
    }
    /// The leaf planes of this rank's slab whose multipoles it sends, in the order of
    /// [`exchange_leaf_multipoles`]' parts: for each other rank in rank order, its
    /// [`SlabPlan::leaf_mult_planes`] within this slab.
    pub fn leaf_mult_sends(&self) -> Vec<(usize, usize)> {
        let me = self.rank;
        (0..self.ranks())
            .filter(|&r| r != me)
            .flat_map(|r| {
                self.leaf_mult_planes(r)
                    .into_iter()
                    .filter_map(|zr| intersect(zr, self.own(me)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
    /// The rank owning leaf plane `z` (`z < n`).
    pub fn owner(&self, z: usize) -> usize {
        self.bounds.partition_point(|&b| b <= z) - 1
    }
    /// Leaf plane of a position, in the device's f32 arithmetic (the position cast to f32,
    /// then [`SlabPlan::leaf_z_f32`]). Periodic: pass the position wrapped into the box
    /// (`Periodic::wrap`), as the packing does.
    pub fn leaf_z(&self, x: [f64; 3]) -> usize {
        self.leaf_z_f32(x.map(|v| v as f32))
    }
    /// Leaf plane of an f32 position exactly as the device sort computes it
    /// (`sort::cell_of`: clamped to `0..n`), free space or periodic: a caller that keeps the
    /// particles on the device decides their owners ([`SlabPlan::owner`]) with it.
    pub fn leaf_z_f32(&self, x: [f32; 3]) -> usize {
        let (lo, inv_w) = self.grid.f32_params();
        cell_of(x, lo, inv_w, self.n())[2]
    }
    /// z-planes of the level-`l` cells overlapping rank `r`'s slab.
    pub fn cells(&self, r: usize, l: usize) -> (usize, usize) {
        let (z0, z1) = self.own(r);
        let s = self.grid.k - l;
        (z0 >> s, ((z1 - 1) >> s) + 1)
    }
    /// z-planes of the level-`l` cells whose multipoles the M2L of rank `r`'s cells of level
    /// `l` reads (the whole level at the top), as sorted disjoint ranges: one in free space;
    /// on a periodic grid the stencil wraps around (`stencil::m2l_range_periodic`), giving
    /// two ranges at the seam, or the whole level. The window of level `l` is the
    /// concatenation of these ranges ([`SlabPlan::window_pos`]). Rank `r`'s own cells of the
    /// level lie inside one of them.
    pub fn needed(&self, r: usize, l: usize) -> Ranges {
        let nl = self.grid.n_at(l);
        if l == 0 {
            return vec![(0, nl)];
        }
        let (a, b) = self.cells(r, l);
        if !self.grid.periodic {
            let lo = super::stencil::m2l_range(nl, false, a).0;
            let hi = super::stencil::m2l_range(nl, false, b - 1).1;
            return vec![(lo, hi + 1)];
        }
        let m = self.grid.m;
        let lo = super::stencil::m2l_range_periodic(nl, false, m, a).0;
        let hi = super::stencil::m2l_range_periodic(nl, false, m, b - 1).1 + 1;
        let n = nl as i64;
        if hi - lo >= n {
            return vec![(0, nl)];
        }
        let (a, b) = (lo.rem_euclid(n) as usize, hi.rem_euclid(n) as usize);
        if a < b {
            vec![(a, b)]
        } else {
            // wraps: the part from the seam up, then the part below it
            [(0, b), (a, nl)]
                .into_iter()
                .filter(|r| r.0 < r.1)
                .collect()
        }
    }
    /// Position (in planes) of plane `z` of level `l` in this rank's window (the
    /// concatenation of [`SlabPlan::needed`]); `z` must be in it.
    pub fn window_pos(&self, l: usize, z: usize) -> usize {
        window_pos(&self.needed(self.rank, l), z)
    }
    /// z-planes of level `l` (`< k`) whose completed multipoles differ from this rank's
    /// partial ones after [`exchange_coarse`]: the planes of the window
    /// ([`SlabPlan::needed`]) holding cells of other ranks (possibly overlapping ranges,
    /// each inside one range of the window).
    pub fn coarse_received(&self, l: usize) -> Vec<(usize, usize)> {
        let me = self.rank;
        (0..self.ranks())
            .filter(|&q| q != me)
            .flat_map(|q| {
                let cells = self.cells(q, l);
                self.needed(me, l)
                    .into_iter()
                    .filter_map(move |w| intersect(w, cells))
            })
            .collect()
    }
    /// z-planes of level `l` (`< k`) of this rank's window whose partial multipoles
    /// [`exchange_coarse`] reads: those sent to other ranks and those of its own cells that
    /// get parts from other ranks (possibly overlapping ranges; the rest of the window may
    /// be zero).
    pub fn coarse_sent(&self, l: usize) -> Vec<(usize, usize)> {
        let me = self.rank;
        let own = self.cells(me, l);
        let mut out: Vec<(usize, usize)> = (0..self.ranks())
            .filter(|&r| r != me)
            .flat_map(|r| {
                self.needed(r, l)
                    .into_iter()
                    .filter_map(move |w| intersect(w, own))
            })
            .collect();
        out.extend(
            self.coarse_received(l)
                .into_iter()
                .filter_map(|zr| intersect(zr, own)),
        );
        out
    }
    /// Index range (cells) of z-planes `zr` at level `l`.
    pub fn cell_index_range(&self, l: usize, zr: (usize, usize)) -> (usize, usize) {
        let nl = self.grid.n_at(l);
        let off = self.grid.level_offset(l);
        (off + zr.0 * nl * nl, off + zr.1 * nl * nl)
    }
}

/// The common part of two ranges, if any.
pub(crate) fn intersect(a: (usize, usize), b: (usize, usize)) -> Option<(usize, usize)> {
    let (lo, hi) = (a.0.max(b.0), a.1.min(b.1));
    (lo < hi).then_some((lo, hi))
}

/// The runs of `true` of `mask` as sorted disjoint ranges.
fn mask_ranges(mask: &[bool]) -> Ranges {
    let mut out: Ranges = Vec::new();
    for (z, _) in mask.iter().enumerate().filter(|(_, &m)| m) {
        match out.last_mut() {
            Some(last) if last.1 == z => last.1 = z + 1,
            _ => out.push((z, z + 1)),
        }
    }
    out
}

/// Position of plane `z` in the concatenation of the sorted disjoint `ranges` (which
/// contain it).
pub fn window_pos(ranges: &[(usize, usize)], z: usize) -> usize {
    let mut at = 0;
    for &(a, b) in ranges {
        if (a..b).contains(&z) {
            return at + z - a;
        }
        at += b - a;
    }
    panic!("plane {z} outside the window {ranges:?}");
}

/// One particle as 7 f64 (position, strength, core radius), little-endian.
const F64_ROW: usize = 56;

fn put_row(out: &mut Vec<u8>, x: [f64; 3], a: [f64; 3], s: f64) {
    for v in x.iter().chain(a.iter()).chain(std::iter::once(&s)) {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn rows_into(buf: &[u8], out: &mut Sources) {
    for r in buf.chunks_exact(F64_ROW) {
        let f = |k: usize| f64::from_le_bytes(r[8 * k..8 * k + 8].try_into().expect("8 bytes"));
        out.position.push([f(0), f(1), f(2)]);
        out.strength.push([f(3), f(4), f(5)]);
        out.sigma.push(f(6));
    }
}

/// The particles a rank owns after [`redistribute`]: its input particles that lie in its
/// slab (`kept`, in input order; all of them when `kept` is `None`, the usual case) followed
/// by those received from other ranks (in rank order). Owned index `i < n_kept` is input
/// particle `kept[i]`, the others `received[i - n_kept]`.
#[derive(Debug)]
pub struct Owned<'a> {
    pub local: &'a Sources,
    pub kept: Option<Vec<usize>>,
    pub received: Sources,
    /// Leaf plane of every owned particle (set by the redistribution, or by
    /// [`pack_checking_slab`] when the particles were assumed in their slab; computed at
    /// the first [`Owned::zleaf`] otherwise).
    zleaf: OnceLock<Vec<u32>>,
    /// Input indices sent to each rank (in the order sent).
    sent: Vec<Vec<usize>>,
    /// Particles received from each rank.
    recv_counts: Vec<usize>,
    /// Bytes this rank sent.
    pub bytes: usize,
    /// Whether any rank moved a particle (agreed by all ranks).
    any_moved: bool,
    /// The fewest particles a rank owns (agreed by all ranks).
    pub min_owned: usize,
}

impl Owned<'_> {
    pub fn n_kept(&self) -> usize {
        self.kept.as_ref().map_or(self.local.len(), |k| k.len())
    }
    pub fn len(&self) -> usize {
        self.n_kept() + self.received.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Position, strength, core radius of owned particle `i`.
    pub fn get(&self, i: usize) -> ([f64; 3], [f64; 3], f64) {
        let nk = self.n_kept();
        let (s, j) = if i < nk {
            (self.local, self.kept.as_ref().map_or(i, |k| k[i]))
        } else {
            (&self.received, i - nk)
        };
        (s.position[j], s.strength[j], s.sigma[j])
    }
    /// Leaf plane of every owned particle.
    pub fn zleaf(&self, plan: &SlabPlan) -> &[u32] {
        self.zleaf.get_or_init(|| {
            (0..self.len())
                .into_par_iter()
                .map(|i| plan.leaf_z(self.get(i).0) as u32)
                .collect()
        })
    }
    /// Particles sent away and received.
    pub fn moved(&self) -> (usize, usize) {
        (
            self.sent.iter().map(Vec::len).sum(),
            self.recv_counts.iter().sum(),
        )
    }
    /// The owned particles as one `Sources` (a copy).
    pub fn to_sources(&self) -> Sources {
        let mut out = Sources::default();
        for i in 0..self.len() {
            let (x, a, s) = self.get(i);
            out.position.push(x);
            out.strength.push(a);
            out.sigma.push(s);
        }
        out
    }

    /// Collective: the fields of the owned particles (owned order) back to the input order of
    /// `local` (those of received particles go back to their senders). Returns the fields and
    /// the bytes sent.
    pub fn return_fields(&self, comm: &dyn Comm, owned: Fields) -> (Fields, usize) {
        if !self.any_moved {
            return (owned, 0); // nothing moved anywhere: owned order is input order
        }
        let nk = self.n_kept();
        let mut send: Vec<Vec<u8>> = vec![Vec::new(); comm.size()];
        let mut at = nk;
        for (r, &c) in self.recv_counts.iter().enumerate() {
            for i in at..at + c {
                for v in owned.velocity[i].iter().chain(owned.stretching[i].iter()) {
                    send[r].extend_from_slice(&v.to_le_bytes());
                }
            }
            at += c;
        }
        let bytes = send.iter().map(Vec::len).sum();
        let recv = comm.alltoallv(&send);
        let mut out = Fields::zeros(self.local.len());
        for i in 0..nk {
            let j = self.kept.as_ref().map_or(i, |k| k[i]);
            out.velocity[j] = owned.velocity[i];
            out.stretching[j] = owned.stretching[i];
        }
        for (r, buf) in recv.iter().enumerate() {
            assert_eq!(buf.len(), 48 * self.sent[r].len(), "fields returned");
            for (row, &j) in buf.chunks_exact(48).zip(&self.sent[r]) {
                let f = |k: usize| f64::from_le_bytes(row[8 * k..8 * k + 8].try_into().unwrap());
                out.velocity[j] = [f(0), f(1), f(2)];
                out.stretching[j] = [f(3), f(4), f(5)];
            }
        }
        (out, bytes)
    }
}

/// Collective: sends every input particle outside this rank's slab to its owner (alltoallv
/// of f64 rows). One pass over the input computes the leaf planes and counts the particles
/// outside the slab; one small reduction tells whether any rank has a particle to move (and
/// the fewest particles a rank owns then): when none has, nothing is sent or copied.
pub fn redistribute<'a>(comm: &dyn Comm, plan: &SlabPlan, local: &'a Sources) -> Owned<'a> {
    let ranks = comm.size();
    let me = plan.rank;
    if ranks == 1 {
        // one slab holds every leaf: nothing moves, no halo (no leaf planes needed)
        return Owned {
            local,
            kept: None,
            received: Sources::default(),
            zleaf: OnceLock::new(),
            sent: vec![Vec::new()],
            recv_counts: vec![0],
            bytes: 0,
            any_moved: false,
            min_owned: local.len(),
        };
    }
    let (z0, z1) = plan.own(me);
    let mut z = vec![0u32; local.len()];
    let n_out: usize = z
        .par_iter_mut()
        .zip(local.position.par_iter())
        .map(|(z, &x)| {
            let q = plan.leaf_z(x);
            *z = q as u32;
            usize::from(!(z0..z1).contains(&q))
        })
        .sum();
    // largest count to move, fewest particles kept (negated: one max-reduction)
    let mut v = [n_out as f64, -((local.len() - n_out) as f64)];
    comm.allreduce_f64(&mut v, ReduceOp::Max);
    if v[0] == 0.0 {
        return Owned {
            local,
            kept: None,
            received: Sources::default(),
            zleaf: OnceLock::from(z),
            sent: vec![Vec::new(); ranks],
            recv_counts: vec![0; ranks],
            bytes: 0,
            any_moved: false,
            min_owned: (-v[1]) as usize,
        };
    }
    let outside: Vec<usize> = (0..local.len())
        .into_par_iter()
        .filter(|&i| !(z0..z1).contains(&(z[i] as usize)))
        .collect();
    let mut sent = vec![Vec::new(); ranks];
    for &i in &outside {
        sent[plan.owner(z[i] as usize)].push(i);
    }
    let mut send: Vec<Vec<u8>> = vec![Vec::new(); ranks];
    for (r, idx) in sent.iter().enumerate() {
        for &i in idx {
            put_row(
                &mut send[r],
                local.position[i],
                local.strength[i],
                local.sigma[i],
            );
        }
    }
    let bytes = send.iter().map(Vec::len).sum();
    let recv = comm.alltoallv(&send);
    let mut received = Sources::default();
    let mut recv_counts = vec![0; ranks];
    for (r, buf) in recv.iter().enumerate() {
        recv_counts[r] = buf.len() / F64_ROW;
        rows_into(buf, &mut received);
    }
    let (kept, mut zleaf) = if outside.is_empty() {
        (None, z)
    } else {
        let keep: Vec<usize> = (0..local.len())
            .filter(|&i| (z0..z1).contains(&(z[i] as usize)))
            .collect();
        let zk = keep.iter().map(|&i| z[i]).collect();
        (Some(keep), zk)
    };
    zleaf.extend(received.position.iter().map(|&x| plan.leaf_z(x) as u32));
    let mut least = [zleaf.len() as f64];
    comm.allreduce_f64(&mut least, ReduceOp::Min);
    Owned {
        local,
        kept,
        received,
        zleaf: OnceLock::from(zleaf),
        sent,
        recv_counts,
        bytes,
        any_moved: true,
        min_owned: least[0] as usize,
    }
}

/// Collective: this rank's input particles taken as its owned ones without looking at
/// them (a time-stepping code's usual case: no particle left its slab); one small reduction
/// gives the fewest particles a rank holds. The packing must then check the assumption
/// ([`pack_checking_slab`]) and fall back to [`redistribute`] when it fails on any rank:
/// that saves the separate pass over the particles of [`redistribute`].
pub fn assume_in_slab<'a>(comm: &dyn Comm, plan: &SlabPlan, local: &'a Sources) -> Owned<'a> {
    let ranks = comm.size();
    let mut least = [local.len() as f64];
    comm.allreduce_f64(&mut least, ReduceOp::Min);
    let _ = plan;
    Owned {
        local,
        kept: None,
        received: Sources::default(),
        zleaf: OnceLock::new(),
        sent: vec![Vec::new(); ranks],
        recv_counts: vec![0; ranks],
        bytes: 0,
        any_moved: false,
        min_owned: least[0] as usize,
    }
}

/// The packing of `layout::pack_sources_into` (`float4` position and `1/sigma` rows into
/// `p`, strength rows into `a`) of particles assumed in their slab ([`assume_in_slab`]), with
/// the leaf planes computed in the same pass (kept for the halo lists): the number of
/// particles outside this rank's slab, which must be zero on every rank for the assumption
/// to hold.
pub fn pack_checking_slab(owned: &Owned, plan: &SlabPlan, p: &mut [f32], a: &mut [f32]) -> usize {
    assert!(owned.kept.is_none() && owned.received.is_empty());
    let s = owned.local;
    let n = s.len();
    let (z0, z1) = plan.own(plan.rank);
    let (lo, inv_w) = plan.grid.f32_params();
    let mut z = vec![0u32; n];
    // blocks of particles (not one task per particle): the pass is bandwidth-bound
    const BLOCK: usize = 4096;
    let out = p[..4 * n]
        .par_chunks_mut(4 * BLOCK)
        .zip(a[..4 * n].par_chunks_mut(4 * BLOCK))
        .zip(z.par_chunks_mut(BLOCK))
        .enumerate()
        .map(|(b, ((p, a), z))| {
            let mut outside = 0;
            for (k, ((p, a), z)) in p
                .chunks_exact_mut(4)
                .zip(a.chunks_exact_mut(4))
                .zip(z.iter_mut())
                .enumerate()
            {
                let i = b * BLOCK + k;
                let x = s.position[i].map(|v| v as f32);
                let w = s.strength[i];
                p.copy_from_slice(&[x[0], x[1], x[2], (1.0 / s.sigma[i]) as f32]);
                a.copy_from_slice(&[w[0] as f32, w[1] as f32, w[2] as f32, 0.0]);
                let q = cell_of(x, lo, inv_w, plan.n())[2];
                *z = q as u32;
                outside += usize::from(!(z0..z1).contains(&q));
            }
            outside
        })
        .sum();
    let _ = owned.zleaf.set(z);
    out
}

/// Owned indices (in owned order) this rank sends to each rank as halo: its particles of the
/// leaf planes of the other rank's halo.
pub fn halo_lists(plan: &SlabPlan, owned: &Owned) -> Vec<Vec<usize>> {
    let me = plan.rank;
    let zleaf = owned.zleaf(plan);
    (0..plan.ranks())
        .map(|r| {
            if r == me {
                return Vec::new();
            }
            let planes: Ranges = plan
                .halo(r)
                .into_iter()
                .filter_map(|h| intersect(h, plan.own(me)))
                .collect();
            if planes.is_empty() {
                return Vec::new();
            }
            (0..owned.len())
                .into_par_iter()
                .filter(|&i| {
                    let z = zleaf[i] as usize;
                    planes.iter().any(|&(a, b)| (a..b).contains(&z))
                })
                .collect()
        })
        .collect()
}

/// Collective: the halo particles of this rank as f64 `Sources` (rank order, each sender's
/// owned order) and the bytes sent (56 per particle).
pub fn exchange_halo_f64(comm: &dyn Comm, plan: &SlabPlan, owned: &Owned) -> (Sources, usize) {
    let lists = halo_lists(plan, owned);
    let send: Vec<Vec<u8>> = lists
        .iter()
        .map(|l| {
            let mut b = Vec::with_capacity(F64_ROW * l.len());
            for &i in l {
                let (x, a, s) = owned.get(i);
                put_row(&mut b, x, a, s);
            }
            b
        })
        .collect();
    let bytes = send.iter().map(Vec::len).sum();
    let mut halo = Sources::default();
    for buf in comm.alltoallv(&send) {
        rows_into(&buf, &mut halo);
    }
    (halo, bytes)
}

/// Ranges (of planes or of floats), each `(start, end)`.
pub type Ranges = Vec<(usize, usize)>;
/// Ranges with their data.
pub type Parts<T> = Vec<((usize, usize), Vec<T>)>;

/// Collective: the leaf multipoles of [`SlabPlan::leaf_mult_planes`]. `parts[i]` holds this
/// rank's multipoles of the leaf planes `plan.leaf_mult_sends()[i]` (`cell_len` scalars per
/// leaf, in cell order). Returns the received leaf-plane ranges with their multipoles (each
/// leaf has one owner: nothing is summed) and the bytes sent.
pub fn exchange_leaf_multipoles<T: Scalar, P: AsRef<[T]>>(
    comm: &dyn Comm,
    plan: &SlabPlan,
    parts: &[P],
    cell_len: usize,
) -> (Parts<T>, usize) {
    let me = plan.rank;
    let plane = plan.n() * plan.n() * cell_len;
    let sends = plan.leaf_mult_sends();
    assert_eq!(sends.len(), parts.len(), "leaf multipole parts");
    let mut send: Vec<Vec<u8>> = vec![Vec::new(); plan.ranks()];
    let mut at = 0;
    for (r, buf) in send.iter_mut().enumerate() {
        if r == me {
            continue;
        }
        for zr in plan.leaf_mult_planes(r) {
            if let Some((a, b)) = intersect(zr, plan.own(me)) {
                assert_eq!(sends[at], (a, b));
                let part = parts[at].as_ref();
                assert_eq!(part.len(), (b - a) * plane);
                buf.reserve(part.len() * T::BYTES);
                part.iter().for_each(|v| v.put(buf));
                at += 1;
            }
        }
    }
    let bytes = send.iter().map(Vec::len).sum();
    let recv = comm.alltoallv(&send);
    let mut out = Vec::new();
    for (q, buf) in recv.iter().enumerate() {
        if q == me {
            continue;
        }
        let mut off = 0;
        for zr in plan.leaf_mult_planes(me) {
            if let Some((a, b)) = intersect(zr, plan.own(q)) {
                let len = (b - a) * plane * T::BYTES;
                let v: Vec<T> = buf[off..off + len]
                    .par_chunks_exact(T::BYTES)
                    .map(T::get)
                    .collect();
                out.push(((a, b), v));
                off += len;
            }
        }
        assert_eq!(off, buf.len(), "leaf multipoles received");
    }
    (out, bytes)
}

/// A scalar of the exchanged expansions (f64 on the CPU, f32 on the device).
pub trait Scalar: Copy + Default + std::ops::AddAssign + Send + Sync {
    const BYTES: usize;
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
}
impl Scalar for f64 {
    const BYTES: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        f64::from_le_bytes(b.try_into().expect("8 bytes"))
    }
}
impl Scalar for f32 {
    const BYTES: usize = 4;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        f32::from_le_bytes(b.try_into().expect("4 bytes"))
    }
}

/// Bytes of the coarse-level exchange.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CoarseBytes {
    /// Sent by this rank (the halo of cells).
    pub sent: usize,
    /// What an allreduce of the whole coarse levels would move per rank (for comparison).
    pub allreduce: usize,
}

/// Collective: completes the coarse multipoles. `windows[l]` (`l < k`) holds the cells of
/// the z-planes [`SlabPlan::needed`] of this rank at level `l` (its ranges concatenated),
/// `cell_len` scalars each, with this rank's partial multipoles (zero outside its cells); on
/// return, the sums over the ranks' parts in rank order (so every rank holds bitwise the
/// same sums of the cells it shares with others).
pub fn exchange_coarse<T: Scalar>(
    comm: &dyn Comm,
    plan: &SlabPlan,
    windows: &mut [Vec<T>],
    cell_len: usize,
) -> CoarseBytes {
    let me = plan.rank;
    let k = plan.grid.k;
    assert_eq!(windows.len(), k);
    let plane = |l: usize| plan.grid.n_at(l).pow(2) * cell_len;
    let mine: Vec<Ranges> = (0..k).map(|l| plan.needed(me, l)).collect();
    // the parts of rank q's cells in rank r's window, in the order of r's window ranges
    let parts = |r: usize, q: usize, l: usize| -> Ranges {
        let cells = plan.cells(q, l);
        plan.needed(r, l)
            .into_iter()
            .filter_map(|w| intersect(w, cells))
            .collect()
    };
    let send: Vec<Vec<u8>> = (0..plan.ranks())
        .map(|r| {
            let mut b = Vec::new();
            if r == me {
                return b;
            }
            for l in 0..k {
                for (a, e) in parts(r, me, l) {
                    let at = window_pos(&mine[l], a) * plane(l);
                    let w = &windows[l][at..at + (e - a) * plane(l)];
                    b.reserve(w.len() * T::BYTES);
                    w.iter().for_each(|v| v.put(&mut b));
                }
            }
            b
        })
        .collect();
    let sent = send.iter().map(Vec::len).sum();
    let recv = comm.alltoallv(&send);
    let mut acc: Vec<Vec<T>> = windows
        .iter()
        .map(|w| vec![T::default(); w.len()])
        .collect();
    for (q, buf) in recv.iter().enumerate() {
        if q == me {
            for (a, w) in acc.iter_mut().zip(windows.iter()) {
                a.par_iter_mut()
                    .zip(w.par_iter())
                    .for_each(|(a, &v)| *a += v);
            }
            continue;
        }
        let mut off = 0;
        for l in 0..k {
            for (a, e) in parts(me, q, l) {
                let at = window_pos(&mine[l], a) * plane(l);
                let len = (e - a) * plane(l);
                let part = &buf[off..off + len * T::BYTES];
                acc[l][at..at + len]
                    .par_iter_mut()
                    .zip(part.par_chunks_exact(T::BYTES))
                    .for_each(|(x, b)| *x += T::get(b));
                off += len * T::BYTES;
            }
        }
        assert_eq!(off, buf.len(), "coarse multipoles received");
    }
    for (w, a) in windows.iter_mut().zip(acc) {
        *w = a;
    }
    let allreduce = (0..k).map(|l| plan.grid.n_at(l).pow(3)).sum::<usize>() * cell_len * T::BYTES;
    CoarseBytes { sent, allreduce }
}

/// Collective: the [`PeriodicSums`] of every rank's particles (sums of the sums; largest core
/// radius; valid only when valid on every rank): two reductions, the same result on every
/// rank.
pub fn allreduce_sums(comm: &dyn Comm, s: &PeriodicSums) -> PeriodicSums {
    let mut v = vec![s.abs_strength, s.outside as f64, s.far as f64];
    v.extend(s.total_strength);
    v.extend(s.dipole.iter().flatten());
    comm.allreduce_f64(&mut v, ReduceOp::Sum);
    let mut m = [s.sigma_max, if s.valid { 0.0 } else { 1.0 }];
    comm.allreduce_f64(&mut m, ReduceOp::Max);
    PeriodicSums {
        valid: m[1] == 0.0,
        sigma_max: m[0],
        total_strength: [v[3], v[4], v[5]],
        abs_strength: v[0],
        dipole: std::array::from_fn(|c| std::array::from_fn(|l| v[6 + 3 * c + l])),
        outside: v[1] as usize,
        far: v[2] as usize,
    }
}
