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

use super::pipeline::{RankExchange, Region};
use super::slab::{
    assume_in_slab, exchange_coarse, exchange_leaf_multipoles, halo_lists, pack_checking_slab,
    redistribute, window_pos, CoarseBytes, Owned, Parts, Ranges, SlabPlan,
};
use super::{UniformFmm, UniformParams, UniformTimes};
use crate::device::{GpuError, GpuResult};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use vortex_domain::{Comm, ReduceOp};
use vortex_fmm::expansions::ncoef;
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
    owned: &'a Owned<'a>,
    /// Floats per cell of the multipole array.
    cell_len: usize,
    /// Received halo rows, by source rank.
    halo: Vec<Vec<u8>>,
    halo_seconds: f64,
    halo_bytes: usize,
    coarse_seconds: f64,
    coarse_bytes: CoarseBytes,
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

    fn halo_count(&mut self) -> GpuResult<usize> {
        let t = Instant::now();
        let owned = self.owned;
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
    let mut tm = DistributedUniformTimes::default();
    let t = Instant::now();
    let plan = SlabPlan::agree(comm, local, params)?;
    fmm.select_m2l(params);
    let me = plan.rank;
    tm.plan = t.elapsed().as_secs_f64();

    // with more than one rank, first assume that no particle left its slab (checked by the
    // packing, in its pass over the particles); redistribute when the check fails anywhere
    let mut attempt = if comm.size() > 1 { 0 } else { 1 };
    let owned = loop {
        let t = Instant::now();
        let owned = if attempt == 0 {
            assume_in_slab(comm, &plan, local)
        } else {
            redistribute(comm, &plan, local)
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
        match run_owned(
            comm,
            fmm,
            &plan,
            &owned,
            params,
            attempt == 0,
            &moved,
            &mut tm,
            out,
        ) {
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
/// `check_slab`, the packing also checks that every particle lies in its rank's slab (one
/// reduction) and fails, setting `moved`, when one does not on any rank.
#[allow(clippy::too_many_arguments)]
fn run_owned(
    comm: &dyn Comm,
    fmm: &UniformFmm,
    plan: &SlabPlan,
    owned: &Owned,
    params: &UniformParams,
    check_slab: bool,
    moved: &AtomicBool,
    tm: &mut DistributedUniformTimes,
    out: &mut Fields,
) -> GpuResult<()> {
    let me = plan.rank;
    let n_own = owned.len();
    tm.planes = plan.own(me);
    let pack = |up: &mut [f32]| {
        let (p, a) = up[..8 * n_own].split_at_mut(4 * n_own);
        if !check_slab {
            pack_owned(owned, p, a);
            return Ok(());
        }
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
    let mut ex = Exchange {
        comm,
        plan,
        owned,
        cell_len: 6 * ncoef(params.order),
        halo: Vec::new(),
        halo_seconds: 0.0,
        halo_bytes: 0,
        coarse_seconds: 0.0,
        coarse_bytes: CoarseBytes::default(),
    };
    // one rank: nothing to exchange (the pipeline is then the single-GPU one)
    let hook: Option<&mut dyn RankExchange> = if comm.size() > 1 { Some(&mut ex) } else { None };
    let dev = fmm.run_region(params.order, n_own, &pack, &region, hook, None, out)?;
    tm.device = dev;
    tm.halo = ex.halo_seconds;
    tm.bytes_halo = ex.halo_bytes;
    tm.halo_particles = ex.halo.iter().map(|b| b.len() / HALO_ROW).sum();
    tm.owned = n_own;
    tm.coarse = ex.coarse_seconds;
    tm.bytes_coarse = ex.coarse_bytes.sent;
    tm.bytes_coarse_allreduce = ex.coarse_bytes.allreduce;
    Ok(())
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
                let mut mine = Sources::default();
                for &i in &idx {
                    mine.position.push(s.position[i]);
                    mine.strength.push(s.strength[i]);
                    mine.sigma.push(s.sigma[i]);
                }
                let f = UniformFmm::on_device(0).unwrap();
                let (got, _) = evaluate_distributed(c, &f, &mine, &params).unwrap();
                (idx, got)
            });
            let mut got = Fields::zeros(s.len());
            for (idx, f) in parts {
                for (q, &i) in idx.iter().enumerate() {
                    got.velocity[i] = f.velocity[q];
                    got.stretching[i] = f.stretching[q];
                }
            }
            let eu = relative_l2_error(&got.velocity, &want.velocity);
            let es = relative_l2_error(&got.stretching, &want.stretching);
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
}
