//! The uniform-grid FMM over the ranks of a [`vortex_domain::Comm`], one GPU per rank (slab
//! decomposition of [`super::slab`]; its f64 CPU twin is [`super::distributed_reference`]).
//!
//! Per rank:
//! 1. agree on the grid (two small reductions) and split the leaf planes into slabs;
//! 2. redistribution: particles outside the rank's slab go to their owners (alltoallv of f64
//!    rows; in a time-stepping code only few move; when none does, one pass computing the
//!    leaf planes and one small reduction, nothing sent or copied);
//! 3. the device pipeline of [`UniformFmm`] over the rank's [`Region`]: sort of the own
//!    particles, P2M of the own leaves, M2M over the cells overlapping the slab, download of
//!    the partial coarse multipoles other ranks need and of the leaf multipoles other ranks'
//!    leaf-level M2L reads beyond their particle halo, then the P2P among the own particles is
//!    queued and, while the device runs it, the host exchanges
//!    * the halo: the particles of the leaf plane on each side (the P2P's reach), as the f32
//!      rows the device reads (`float4` position and `1/sigma`, `float4` strength: 32 bytes
//!      per particle, bitwise what the owner packs), alltoallv;
//!    * the leaf multipoles of the further planes the leaf-level M2L reads (2 and 3 planes
//!      away: [`SlabPlan::leaf_mult_planes`]), computed by their owners;
//!    * the coarse multipoles ([`super::slab::exchange_coarse`]: the partial multipoles of
//!      the levels above the leaves that other ranks' stencils reach, summed in rank order);
//! 4. the halo particles are uploaded and sorted apart (their leaves are not the rank's),
//!    P2M of the halo leaves, the P2P from the halo to the own planes next to it, upload of
//!    the received leaf and completed coarse multipoles, M2L, L2L and L2P over the cells of
//!    the slab;
//! 5. the fields of particles received in step 2 go back to their senders; the result is in
//!    the input order of `local`.

use super::periodic::wrapped;
use super::pipeline::{HaloRows, PeriodicRun, RankExchange, Region};
use super::slab::{
    assume_in_slab, exchange_coarse, exchange_leaf_multipoles, halo_lists, intersect,
    pack_checking_slab, redistribute, window_pos, CoarseBytes, Owned, Parts, Ranges, SlabPlan,
};
use super::{UniformFmm, UniformParams, UniformTimes};
use crate::device::{GpuError, GpuResult};
use cudarc::driver::CudaSlice;
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use vortex_domain::{Comm, ReduceOp};
use vortex_fmm::expansions::ncoef;
use vortex_fmm::periodic::Periodic;
use vortex_fmm::{Fields, Sources};

/// Bytes of one halo particle (two `float4`).
const HALO_ROW: usize = 32;

/// Wall times (seconds) and volumes of one distributed evaluation on one rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DistributedUniformTimes {
    /// Agreeing on the grid (reductions of bounds and counts).
    pub plan: f64,
    /// Particles to their owners, and their fields back.
    pub redistribute: f64,
    /// Halo selection, packing and exchange (on the host while the device computes the P2P
    /// among the own particles: inside `device.p2p`).
    pub halo: f64,
    /// Coarse multipoles: download after the M2M, exchange and sum (overlapped like the
    /// halo), upload.
    pub coarse: f64,
    /// The device pipeline (its phases include the overlapped exchanges).
    pub device: UniformTimes,
    /// Wall time of the whole call.
    pub total: f64,
    /// Bytes sent by this rank.
    pub bytes_redistribute: usize,
    pub bytes_halo: usize,
    pub bytes_coarse: usize,
    /// Bytes an allreduce of the whole coarse levels would move per rank (not used).
    pub bytes_coarse_allreduce: usize,
    /// Owned and halo particles, particles moved out / in by the redistribution.
    pub owned: usize,
    pub halo_particles: usize,
    pub moved_out: usize,
    pub moved_in: usize,
    /// This rank's leaf planes.
    pub planes: (usize, usize),
}

impl DistributedUniformTimes {
    /// Bytes sent by this rank in all exchanges.
    pub fn bytes(&self) -> usize {
        self.bytes_redistribute + self.bytes_halo + self.bytes_coarse
    }
}

/// The exchanges of one rank, called by the device pipeline while the device computes the
/// P2P among the own particles.
struct Exchange<'a> {
    comm: &'a dyn Comm,
    plan: &'a SlabPlan,
    /// The host copy of the owned particles (`None`: they live on the device only, the
    /// halo is read from the device sort).
    owned: Option<&'a Owned<'a>>,
    /// Floats per cell of the multipole array.
    cell_len: usize,
    /// Received halo rows, by source rank.
    halo: Vec<Vec<u8>>,
    halo_seconds: f64,
    halo_bytes: usize,
    coarse_seconds: f64,
    coarse_bytes: CoarseBytes,
}

impl<'a> Exchange<'a> {
    /// The exchanges of this rank for order `p` (`owned`: the host copy of the particles,
    /// if any).
    fn new(comm: &'a dyn Comm, plan: &'a SlabPlan, owned: Option<&'a Owned<'a>>, p: usize) -> Self {
        Exchange {
            comm,
            plan,
            owned,
            cell_len: 6 * ncoef(p),
            halo: Vec::new(),
            halo_seconds: 0.0,
            halo_bytes: 0,
            coarse_seconds: 0.0,
            coarse_bytes: CoarseBytes::default(),
        }
    }

    /// The device times `dev` and this exchange's times and volumes into `tm` (`n_own`
    /// particles owned).
    fn times_into(&self, dev: UniformTimes, n_own: usize, tm: &mut DistributedUniformTimes) {
        tm.device = dev;
        tm.halo = self.halo_seconds;
        tm.bytes_halo = self.halo_bytes;
        tm.halo_particles = self.halo.iter().map(|b| b.len() / HALO_ROW).sum();
        tm.owned = n_own;
        tm.coarse = self.coarse_seconds;
        tm.bytes_coarse = self.coarse_bytes.sent;
        tm.bytes_coarse_allreduce = self.coarse_bytes.allreduce;
    }

    /// The halo exchange of a rank whose particles live on the device: the rows of the own
    /// planes in other ranks' halos read from the device sort (contiguous per plane range).
    fn halo_from_device(&mut self, rows: &dyn HaloRows, t: Instant) -> GpuResult<usize> {
        let me = self.plan.rank;
        let mut send: Vec<Vec<u8>> = vec![Vec::new(); self.plan.ranks()];
        for (r, buf) in send.iter_mut().enumerate() {
            if r == me {
                continue;
            }
            for h in self.plan.halo(r) {
                if let Some(zr) = intersect(h, self.plan.own(me)) {
                    buf.extend(rows.rows(zr)?.iter().flat_map(|f| f.to_le_bytes()));
                }
            }
        }
        self.halo_bytes += send.iter().map(Vec::len).sum::<usize>();
        self.halo = self.comm.alltoallv(&send);
        self.halo_seconds += t.elapsed().as_secs_f64();
        Ok(self.halo.iter().map(|b| b.len() / HALO_ROW).sum())
    }
}

impl RankExchange for Exchange<'_> {
    fn coarse_ranges(&self) -> Vec<Ranges> {
        let me = self.plan.rank;
        (0..self.plan.grid.k)
            .map(|l| {
                self.plan
                    .needed(me, l)
                    .into_iter()
                    .map(|zr| {
                        let (a, b) = self.plan.cell_index_range(l, zr);
                        (a * self.cell_len, b * self.cell_len)
                    })
                    .collect()
            })
            .collect()
    }

    fn coarse_parts(&self) -> Vec<(Ranges, Ranges)> {
        let me = self.plan.rank;
        (0..self.plan.grid.k)
            .map(|l| {
                let plane = self.plan.grid.n_at(l).pow(2) * self.cell_len;
                let window = self.plan.needed(me, l);
                let floats = |v: Vec<(usize, usize)>| {
                    v.into_iter()
                        .map(|(a, b)| {
                            let at = window_pos(&window, a);
                            (at * plane, (at + b - a) * plane)
                        })
                        .collect()
                };
                (
                    floats(self.plan.coarse_sent(l)),
                    floats(self.plan.coarse_received(l)),
                )
            })
            .collect()
    }

    fn leaf_ranges(&self) -> Vec<(usize, usize)> {
        let k = self.plan.grid.k;
        self.plan
            .leaf_mult_sends()
            .into_iter()
            .map(|zr| {
                let (a, b) = self.plan.cell_index_range(k, zr);
                (a * self.cell_len, b * self.cell_len)
            })
            .collect()
    }

    fn leaf_multipoles(&mut self, parts: &[&[f32]]) -> GpuResult<Parts<f32>> {
        let t = Instant::now();
        let k = self.plan.grid.k;
        let (recv, bytes) = exchange_leaf_multipoles(self.comm, self.plan, parts, self.cell_len);
        self.halo_bytes += bytes;
        let out = recv
            .into_iter()
            .map(|(zr, w)| {
                let (a, b) = self.plan.cell_index_range(k, zr);
                ((a * self.cell_len, b * self.cell_len), w)
            })
            .collect();
        self.halo_seconds += t.elapsed().as_secs_f64();
        Ok(out)
    }

    fn check_slab(&mut self, outside: usize) -> GpuResult<()> {
        if self.owned.is_some() {
            return Ok(()); // the host path placed every particle in its slab
        }
        let mut v = [outside as f64];
        self.comm.allreduce_f64(&mut v, ReduceOp::Max);
        if v[0] > 0.0 {
            return Err(GpuError::Unsupported(format!(
                "a rank has {} particles outside its slab of leaf planes (rank {}: {outside} \
                 outside {:?}): the caller must hand every particle to the owner of its plane \
                 (SlabPlan::leaf_z_f32, SlabPlan::owner)",
                v[0],
                self.plan.rank,
                self.plan.own(self.plan.rank)
            )));
        }
        Ok(())
    }

    fn halo_count(&mut self, rows: &dyn HaloRows) -> GpuResult<usize> {
        let t = Instant::now();
        let Some(owned) = self.owned else {
            return self.halo_from_device(rows, t);
        };
        let lists = halo_lists(self.plan, owned);
        let send: Vec<Vec<u8>> = lists
            .iter()
            .map(|l| {
                let mut b = vec![0u8; HALO_ROW * l.len()];
                b.par_chunks_mut(HALO_ROW).zip(l).for_each(|(row, &i)| {
                    let (x, w, sg) = owned.get(i);
                    let v = [
                        x[0] as f32,
                        x[1] as f32,
                        x[2] as f32,
                        (1.0 / sg) as f32,
                        w[0] as f32,
                        w[1] as f32,
                        w[2] as f32,
                        0.0,
                    ];
                    for (q, f) in v.iter().enumerate() {
                        row[4 * q..4 * q + 4].copy_from_slice(&f.to_le_bytes());
                    }
                });
                b
            })
            .collect();
        self.halo_bytes += send.iter().map(Vec::len).sum::<usize>();
        self.halo = self.comm.alltoallv(&send);
        self.halo_seconds += t.elapsed().as_secs_f64();
        Ok(self.halo.iter().map(|b| b.len() / HALO_ROW).sum())
    }

    fn pack_halo(&self, out: &mut [f32]) {
        let nh: usize = self.halo.iter().map(|b| b.len() / HALO_ROW).sum();
        let (ph, ah) = out[..8 * nh].split_at_mut(4 * nh);
        let mut at = 0;
        for buf in &self.halo {
            let c = buf.len() / HALO_ROW;
            ph[4 * at..4 * (at + c)]
                .par_chunks_mut(4)
                .zip(ah[4 * at..4 * (at + c)].par_chunks_mut(4))
                .zip(buf.par_chunks_exact(HALO_ROW))
                .for_each(|((p, a), row)| {
                    let f =
                        |q: usize| f32::from_le_bytes(row[4 * q..4 * q + 4].try_into().unwrap());
                    p.copy_from_slice(&[f(0), f(1), f(2), f(3)]);
                    a.copy_from_slice(&[f(4), f(5), f(6), f(7)]);
                });
            at += c;
        }
    }

    fn coarse(&mut self, windows: &mut [Vec<f32>]) -> GpuResult<()> {
        let t = Instant::now();
        self.coarse_bytes = exchange_coarse(self.comm, self.plan, windows, self.cell_len);
        self.coarse_seconds += t.elapsed().as_secs_f64();
        Ok(())
    }

    fn add_seconds(&mut self, s: f64) {
        self.coarse_seconds += s;
    }
}

/// Packs the owned particles (`n` rows) in the layout of `layout::pack_sources_into`.
fn pack_owned(owned: &Owned, p: &mut [f32], a: &mut [f32]) {
    if owned.kept.is_none() && owned.received.is_empty() {
        crate::layout::pack_sources_into(owned.local, p, a);
        return;
    }
    p.par_chunks_mut(4)
        .zip(a.par_chunks_mut(4))
        .enumerate()
        .for_each(|(i, (p, a))| {
            let (x, w, sg) = owned.get(i);
            p.copy_from_slice(&[x[0] as f32, x[1] as f32, x[2] as f32, (1.0 / sg) as f32]);
            a.copy_from_slice(&[w[0] as f32, w[1] as f32, w[2] as f32, 0.0]);
        });
}

/// Collective: velocity and stretching of this rank's `local` particles (input order,
/// `1/(4 pi)` applied), the particles of every rank acting as sources, on `fmm`'s device.
/// Every rank needs at least one particle in its slab after the redistribution (an error on
/// every rank otherwise).
pub fn evaluate_distributed(
    comm: &dyn Comm,
    fmm: &UniformFmm,
    local: &Sources,
    params: &UniformParams,
) -> GpuResult<(Fields, DistributedUniformTimes)> {
    let mut out = Fields::default();
    let tm = evaluate_distributed_into(comm, fmm, local, params, &mut out)?;
    Ok((out, tm))
}

/// [`evaluate_distributed`] into `out` (resized to `local`; kept arrays save the
/// first-touch page faults of fresh ones when nothing is redistributed).
pub fn evaluate_distributed_into(
    comm: &dyn Comm,
    fmm: &UniformFmm,
    local: &Sources,
    params: &UniformParams,
    out: &mut Fields,
) -> GpuResult<DistributedUniformTimes> {
    let t_all = Instant::now();
    let plan = SlabPlan::agree(comm, local, params)?;
    fmm.select_m2l(params);
    let plan_s = t_all.elapsed().as_secs_f64();
    run_planned(comm, fmm, &plan, local, params, None, out, (t_all, plan_s))
}

/// Collective, periodic: velocity and stretching of this rank's `local` particles (input
/// order, `1/(4 pi)` applied, zero-mean velocity; positions anywhere: wrapped into the box)
/// in the periodic box of `periodic`, the particles of every rank acting as sources, on
/// `fmm`'s device: the method of [`UniformFmm::evaluate_periodic`] over slabs (its f64 twin
/// is [`super::distributed_reference::evaluate_distributed_reference_periodic`]). The grid
/// is fixed by the box, the global count and the global largest core radius (reductions),
/// so it does not depend on the number of ranks; the halo, the leaf multipoles and the
/// coarse windows wrap around the seam; the surface correction comes from the reduced
/// dipole tensor. Errors as the single-GPU path's, on every rank.
pub fn evaluate_distributed_periodic(
    comm: &dyn Comm,
    fmm: &UniformFmm,
    local: &Sources,
    params: &UniformParams,
    periodic: &Periodic,
    out: &mut Fields,
) -> GpuResult<DistributedUniformTimes> {
    let t_all = Instant::now();
    let (plan, sums) = SlabPlan::agree_periodic(comm, local, params, periodic)?;
    fmm.select_m2l(params);
    let corr = sums.surface_correction(periodic.box_length);
    let run = PeriodicRun::new(fmm, &plan.grid, params.order, periodic, Some(corr))?;
    let inside = wrapped(local, periodic);
    let plan_s = t_all.elapsed().as_secs_f64();
    let t = (t_all, plan_s);
    run_planned(comm, fmm, &plan, &inside, params, Some(&run), out, t)
}

/// The redistribution, the device pipeline over this rank's slab and the fields' return
/// (`t`: the start of the call and the seconds spent on the plan).
#[allow(clippy::too_many_arguments)]
fn run_planned(
    comm: &dyn Comm,
    fmm: &UniformFmm,
    plan: &SlabPlan,
    local: &Sources,
    params: &UniformParams,
    per: Option<&PeriodicRun>,
    out: &mut Fields,
    (t_all, plan_s): (Instant, f64),
) -> GpuResult<DistributedUniformTimes> {
    let mut tm = DistributedUniformTimes {
        plan: plan_s,
        ..Default::default()
    };
    let me = plan.rank;

    // with more than one rank, first assume that no particle left its slab (checked by the
    // packing, in its pass over the particles); redistribute when the check fails anywhere
    let mut attempt = if comm.size() > 1 { 0 } else { 1 };
    let owned = loop {
        let t = Instant::now();
        let owned = if attempt == 0 {
            assume_in_slab(comm, plan, local)
        } else {
            redistribute(comm, plan, local)
        };
        (tm.moved_out, tm.moved_in) = owned.moved();
        tm.redistribute += t.elapsed().as_secs_f64();
        if owned.min_owned == 0 && attempt == 0 {
            attempt += 1; // a rank without particles may receive some
            continue;
        }
        if owned.min_owned == 0 {
            return Err(GpuError::Unsupported(
                "a rank has no particle in its slab (the device path needs at least one)".into(),
            ));
        }
        let moved = AtomicBool::new(false);
        let check = (attempt == 0).then_some(&moved);
        match run_owned(comm, fmm, plan, &owned, params, per, check, &mut tm, out) {
            Err(_) if moved.load(Ordering::Relaxed) => attempt += 1,
            Err(e) => return Err(e),
            Ok(()) => break owned,
        }
    };
    let n_own = owned.len();

    let t = Instant::now();
    let (in_order, back) = owned.return_fields(comm, std::mem::take(out));
    *out = in_order;
    tm.bytes_redistribute = owned.bytes + back;
    tm.redistribute += t.elapsed().as_secs_f64();
    tm.total = t_all.elapsed().as_secs_f64();
    log::debug!(
        "rank {me}: planes {:?}, {n_own} owned + {} halo particles, {:.1} MB sent, {:.3} s",
        tm.planes,
        tm.halo_particles,
        tm.bytes() as f64 * 1e-6,
        tm.total
    );
    Ok(tm)
}

/// The device pipeline over this rank's region for the particles `owned`; with
/// `check_slab` (`moved`), the packing also checks that every particle lies in its rank's
/// slab (one reduction) and fails, setting `moved`, when one does not on any rank.
#[allow(clippy::too_many_arguments)]
fn run_owned(
    comm: &dyn Comm,
    fmm: &UniformFmm,
    plan: &SlabPlan,
    owned: &Owned,
    params: &UniformParams,
    per: Option<&PeriodicRun>,
    check_slab: Option<&AtomicBool>,
    tm: &mut DistributedUniformTimes,
    out: &mut Fields,
) -> GpuResult<()> {
    let me = plan.rank;
    let n_own = owned.len();
    tm.planes = plan.own(me);
    let pack = |up: &mut [f32]| {
        let (p, a) = up[..8 * n_own].split_at_mut(4 * n_own);
        let Some(moved) = check_slab else {
            pack_owned(owned, p, a);
            return Ok(());
        };
        let mut out = [pack_checking_slab(owned, plan, p, a) as f64];
        comm.allreduce_f64(&mut out, ReduceOp::Max);
        if out[0] > 0.0 {
            moved.store(true, Ordering::Relaxed);
            return Err(GpuError::Unsupported(
                "particles left their slabs: redistribution needed".into(),
            ));
        }
        Ok(())
    };
    let region = Region {
        grid: plan.grid,
        own: plan.own(me),
        halo: plan.halo(me),
    };
    let mut ex = Exchange::new(comm, plan, Some(owned), params.order);
    // one rank: nothing to exchange (the pipeline is then the single-GPU one)
    let hook: Option<&mut dyn RankExchange> = if comm.size() > 1 { Some(&mut ex) } else { None };
    let dev = fmm.run_region(params.order, n_own, &pack, &region, hook, per, out)?;
    ex.times_into(dev, n_own, tm);
    Ok(())
}

impl UniformFmm {
    /// Collective, periodic, on device buffers (the device-resident time step over slabs):
    /// velocity and stretching of this rank's `np` particles, the particles of every rank
    /// acting as sources, in the periodic box of `periodic` (the method of
    /// [`evaluate_distributed_periodic`], whose f64 twin is
    /// [`super::distributed_reference::evaluate_distributed_reference_periodic`]).
    ///
    /// Contract:
    /// * `plan` is the same on every rank: [`SlabPlan::periodic`] from the global particle
    ///   count and the global largest core radius (the caller's reductions), for the ranks of
    ///   `comm`, with the box of `periodic` and these `params`;
    /// * `input` holds `8 np` floats in the layout of [`super::pipeline::pack_sources_into`]
    ///   (`float4 (x, y, z, 1/sigma)` rows, then `float4 (ax, ay, az, 0)` rows), positions
    ///   inside the box `[-L/2, L/2)^3`, and every particle in this rank's slab: its leaf
    ///   plane [`SlabPlan::leaf_z_f32`] (the device sort's f32 arithmetic) among the planes
    ///   of [`SlabPlan::own`] (equivalently [`SlabPlan::owner`] of the plane is this rank);
    ///   the caller migrates particles between steps. A particle outside its slab is an
    ///   error on every rank (counted after the device sort, one reduction), never a wrong
    ///   result; so are a plan that does not fit `comm`, the box or the input, and a rank
    ///   without particles (`np = 0`);
    /// * out: `6 np` floats, `(u, s)` per particle in input order, the raw sums like
    ///   [`UniformFmm::evaluate_device`]: **without** `1/(4 pi)` and without the surface
    ///   correction (the caller has the dipole sums: `vortex_fmm::periodic::surface_velocity`
    ///   of the dipole tensor reduced over the ranks).
    ///
    /// Per rank: the own particles sorted, P2M and M2M over the cells overlapping the slab;
    /// the halo particles (read from the device sort, one plane on each side, wrapping
    /// around the seam), the leaf multipoles the leaf-level M2L reads beyond them and the
    /// coarse partial multipoles are exchanged while the device runs the own P2P; then the
    /// far images from the completed top level, M2L, L2L, L2P. With one rank this is
    /// [`UniformFmm::evaluate_device`] on the plan's grid.
    #[allow(clippy::too_many_arguments)]
    pub fn evaluate_device_slab(
        &self,
        comm: &dyn Comm,
        plan: &SlabPlan,
        input: &CudaSlice<f32>,
        np: usize,
        params: &UniformParams,
        periodic: &Periodic,
    ) -> GpuResult<(CudaSlice<f32>, DistributedUniformTimes)> {
        let t_all = Instant::now();
        check_slab_call(comm, plan, input.len(), np, params, periodic)?;
        self.select_m2l(params);
        let me = plan.rank;
        let run = PeriodicRun::new(self, &plan.grid, params.order, periodic, None)?;
        let region = Region {
            grid: plan.grid,
            own: plan.own(me),
            halo: plan.halo(me),
        };
        let mut ex = Exchange::new(comm, plan, None, params.order);
        let hook: Option<&mut dyn RankExchange> =
            if comm.size() > 1 { Some(&mut ex) } else { None };
        let mut tm = DistributedUniformTimes {
            plan: t_all.elapsed().as_secs_f64(),
            planes: plan.own(me),
            ..Default::default()
        };
        let (out6, dev) =
            self.run_device_region(params.order, np, input, &region, hook, Some(&run))?;
        ex.times_into(dev, np, &mut tm);
        tm.total = t_all.elapsed().as_secs_f64();
        Ok((out6, tm))
    }
}

/// Collective: the checks of [`UniformFmm::evaluate_device_slab`] before any work, with the
/// same outcome on every rank (a local refusal is reported by every rank).
fn check_slab_call(
    comm: &dyn Comm,
    plan: &SlabPlan,
    input_len: usize,
    np: usize,
    params: &UniformParams,
    periodic: &Periodic,
) -> GpuResult<()> {
    let g = &plan.grid;
    let l = periodic.box_length;
    let local = if let Err(e) = params.validate() {
        Some(e.to_string())
    } else if let Err(e) = periodic.validate() {
        Some(e.to_string())
    } else if plan.ranks() != comm.size() || plan.rank != comm.rank() {
        Some(format!(
            "a slab plan of {} ranks for rank {} of {}",
            plan.ranks(),
            comm.rank(),
            comm.size()
        ))
    } else if !g.periodic || (g.side - l).abs() > 1e-12 * l || (g.lo[2] + 0.5 * l).abs() > 1e-12 * l
    {
        Some(format!(
            "the plan's grid (periodic {}, side {}) is not the box of side {l}",
            g.periodic, g.side
        ))
    } else if np == 0 {
        Some("no particle in this rank's slab (the device path needs at least one)".into())
    } else if input_len < 8 * np {
        Some(format!(
            "a device input of {input_len} floats for {np} particles (need {})",
            8 * np
        ))
    } else {
        None
    };
    let mut v = [local.is_some() as u8 as f64];
    comm.allreduce_f64(&mut v, ReduceOp::Max);
    match local {
        Some(m) => Err(GpuError::Unsupported(format!(
            "evaluate_device_slab on rank {}: {m}",
            comm.rank()
        ))),
        None if v[0] > 0.0 => Err(GpuError::Unsupported(
            "evaluate_device_slab: another rank refused its input".into(),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uniform::evaluate_reference;
    use vortex_domain::ThreadComm;
    use vortex_fmm::relative_l2_error;

    /// On a GPU: R = 1, 2, 3 simulated ranks sharing device 0 against the single-rank f64
    /// twin (the f32 error of the kernels), and the ranks against each other.
    #[test]
    #[cfg_attr(
        not(feature = "gpu-tests"),
        ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
    )]
    fn device_ranks_match_the_f64_reference() {
        let mut s = vortex_fmm::testsets::standard(30_000, 5);
        s.sigma.iter_mut().for_each(|v| *v *= 0.5);
        let params = UniformParams {
            order: 6,
            grid: Some((3, 2)),
            ..Default::default()
        };
        let want = evaluate_reference(&s, &params).unwrap();
        let mut first: Option<Fields> = None;
        for ranks in [1, 2, 3] {
            let parts = ThreadComm::run(ranks, |c| {
                let idx: Vec<usize> = (c.rank()..s.len()).step_by(ranks).collect();
                let mine = gather(&s, &idx);
                let f = UniformFmm::on_device(0).unwrap();
                let (got, _) = evaluate_distributed(c, &f, &mine, &params).unwrap();
                (idx, got)
            });
            let got = assemble(s.len(), parts);
            let (eu, es) = got.relative_l2_errors(&want);
            println!("R = {ranks}: GPU vs CPU f64 {eu:.2e} / {es:.2e}");
            assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
            if let Some(f) = &first {
                let d = relative_l2_error(&got.velocity, &f.velocity);
                println!("R = {ranks} vs R = 1: {d:.2e}");
                assert!(d < 1e-5);
            } else {
                first = Some(got);
            }
        }
    }

    /// A zero-total-strength set in the box `[-pi, pi)^3`, cores halved, a few positions
    /// moved by whole box lengths.
    fn periodic_set(n: usize, seed: u64) -> Sources {
        let mut s = vortex_fmm::testsets::generate(
            vortex_fmm::testsets::Distribution::Uniform,
            n,
            seed,
            true,
        );
        s.sigma.iter_mut().for_each(|v| *v *= 0.5);
        let l = Periodic::default().box_length;
        s.position[3][0] += 2.0 * l;
        s.position[11][2] -= l;
        s
    }

    /// The fields of `n` particles from the ranks' parts (input indices, fields).
    fn assemble(n: usize, parts: Vec<(Vec<usize>, Fields)>) -> Fields {
        let mut got = Fields::zeros(n);
        for (idx, f) in parts {
            for (q, &i) in idx.iter().enumerate() {
                got.velocity[i] = f.velocity[q];
                got.stretching[i] = f.stretching[q];
            }
        }
        got
    }

    fn gather(s: &Sources, idx: &[usize]) -> Sources {
        let mut out = Sources::default();
        for &i in idx {
            out.position.push(s.position[i]);
            out.strength.push(s.strength[i]);
            out.sigma.push(s.sigma[i]);
        }
        out
    }

    /// On a GPU: periodic slabs for R = 1..4 simulated ranks sharing device 0 (particles
    /// dealt round-robin: most move) against the single-rank periodic f64 twin, on grids
    /// with uneven slabs, one-plane slabs and k = 0, and the ranks against R = 1.
    #[test]
    #[cfg_attr(
        not(feature = "gpu-tests"),
        ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
    )]
    fn periodic_device_ranks_match_the_f64_reference() {
        use crate::uniform::evaluate_reference_periodic;
        let per = Periodic::default();
        let s = periodic_set(30_000, 7);
        for (p, grid, ranks) in [
            (8, (1, 3), &[1, 2, 3, 4][..]),
            (8, (3, 1), &[2, 4][..]),
            (6, (3, 0), &[2, 3][..]),
        ] {
            let params = UniformParams {
                order: p,
                grid: Some(grid),
                ..Default::default()
            };
            let want = evaluate_reference_periodic(&s, &params, &per).unwrap();
            let mut first: Option<Fields> = None;
            for &r in ranks {
                let parts = ThreadComm::run(r, |c| {
                    let idx: Vec<usize> = (c.rank()..s.len()).step_by(r).collect();
                    let f = UniformFmm::on_device(0).unwrap();
                    let mut got = Fields::default();
                    let mine = gather(&s, &idx);
                    evaluate_distributed_periodic(c, &f, &mine, &params, &per, &mut got).unwrap();
                    (idx, got)
                });
                let got = assemble(s.len(), parts);
                let (eu, es) = got.relative_l2_errors(&want);
                println!("periodic {grid:?} p {p} R = {r}: GPU vs CPU f64 {eu:.2e} / {es:.2e}");
                assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
                match &first {
                    Some(f) => {
                        let d = relative_l2_error(&got.velocity, &f.velocity);
                        println!("  vs the first R: {d:.2e}");
                        assert!(d < 1e-5);
                    }
                    None => first = Some(got),
                }
            }
        }
    }

    /// On a GPU: [`UniformFmm::evaluate_device_slab`] on device buffers, each rank holding
    /// exactly its slab's particles (decided by `SlabPlan::leaf_z_f32` and `owner` from the
    /// packed f32 positions), R = 1..4, against the periodic f64 twin once `1/(4 pi)` and
    /// the surface correction of the reduced dipole sums are applied; and a particle outside
    /// its slab is an error on every rank.
    #[test]
    #[cfg_attr(
        not(feature = "gpu-tests"),
        ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
    )]
    fn device_slab_entry_matches_the_f64_reference() {
        use crate::uniform::evaluate_reference_periodic;
        use crate::uniform::periodic::pack_sources_periodic;
        use crate::uniform::slab::allreduce_sums;
        let per = Periodic::default();
        let s = periodic_set(30_000, 8);
        let params = UniformParams {
            order: 8,
            grid: Some((3, 1)),
            ..Default::default()
        };
        let want = evaluate_reference_periodic(&s, &params, &per).unwrap();
        let smax = s.max_sigma();
        for ranks in [1, 2, 3, 4] {
            let parts = ThreadComm::run(ranks, |c| {
                let plan = SlabPlan::periodic(c, &per, s.len(), smax, &params).unwrap();
                let (pos4, _, _) = pack_sources_periodic(&s, &per);
                let idx: Vec<usize> = (0..s.len())
                    .filter(|&i| {
                        let x = [pos4[4 * i], pos4[4 * i + 1], pos4[4 * i + 2]];
                        plan.owner(plan.leaf_z_f32(x)) == c.rank()
                    })
                    .collect();
                let mine = gather(&s, &idx);
                let (p, a, sums) = pack_sources_periodic(&mine, &per);
                let corr = allreduce_sums(c, &sums).surface_correction(per.box_length);
                let f = UniformFmm::on_device(0).unwrap();
                let st = f.device().stream();
                let input = st.clone_htod(&[p, a].concat()).unwrap();
                let (out6, tm) = f
                    .evaluate_device_slab(c, &plan, &input, mine.len(), &params, &per)
                    .unwrap();
                assert_eq!(tm.planes, plan.own(c.rank()));
                let raw = st.clone_dtoh(&out6).unwrap();
                let mut got = Fields::zeros(mine.len());
                for (q, h) in raw.chunks_exact(6).enumerate() {
                    let inv = vortex_fmm::kernel::INV_4PI;
                    got.velocity[q] = std::array::from_fn(|d| h[d] as f64 * inv - corr[d]);
                    got.stretching[q] = std::array::from_fn(|d| h[3 + d] as f64 * inv);
                }
                // a particle of the next rank's slab given to this one: refused everywhere
                let err = if ranks > 1 {
                    let next = (c.rank() + 1) % ranks;
                    let stray = (0..s.len())
                        .find(|&i| {
                            let x = [pos4[4 * i], pos4[4 * i + 1], pos4[4 * i + 2]];
                            plan.owner(plan.leaf_z_f32(x)) == next
                        })
                        .unwrap();
                    let mut more = idx.clone();
                    if c.rank() == 0 {
                        more.push(stray);
                    }
                    let (p, a, _) = pack_sources_periodic(&gather(&s, &more), &per);
                    let input = st.clone_htod(&[p, a].concat()).unwrap();
                    let e = f
                        .evaluate_device_slab(c, &plan, &input, more.len(), &params, &per)
                        .unwrap_err();
                    Some(e.to_string())
                } else {
                    None
                };
                (idx, got, err)
            });
            let mut fields = Vec::new();
            for (idx, f, err) in parts {
                if let Some(e) = err {
                    assert!(e.contains("outside its slab"), "{e}");
                }
                fields.push((idx, f));
            }
            let got = assemble(s.len(), fields);
            let (eu, es) = got.relative_l2_errors(&want);
            println!("device slabs R = {ranks}: GPU vs CPU f64 {eu:.2e} / {es:.2e}");
            assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
        }
    }
}
