//! The distributed uniform-grid FMM in f64 on the CPU: the algorithm of
//! [`super::distributed`] (slab decomposition of [`super::slab`]) with the stages of the f64
//! twin ([`super::reference`]). Run under `vortex_domain::ThreadComm` it is what CI checks: for
//! R = 1, 2, 3 ranks it agrees with the single-rank [`super::evaluate_reference`] (same grid
//! and lists, only the summation order of the coarse multipoles changes) to round-off.
//!
//! Per rank: agree on the grid, send particles outside the slab to their owners, exchange the
//! halo particles (one plane), P2M of the own leaves and M2M over the cells overlapping the
//! slab, the coarse-level exchange, the exchange of the leaf multipoles beyond the particle
//! halo, P2M of the halo leaves, M2L / L2L over the cells overlapping the
//! slab, L2P and P2P of the own leaves, fields back to the input order.

use super::periodic::{far_images_for, wrapped};
use super::reference::RefFmm;
use super::slab::{
    assume_in_slab, exchange_coarse, exchange_halo_f64, exchange_leaf_multipoles,
    pack_checking_slab, redistribute, CoarseBytes, SlabPlan,
};
use super::UniformParams;
use crate::device::GpuResult;
use vortex_domain::{Comm, ReduceOp};
use vortex_fmm::expansions::Complex64;
use vortex_fmm::periodic::Periodic;
use vortex_fmm::{Fields, Sources};

/// Counts of one distributed f64 evaluation on one rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DistributedReferenceStats {
    /// Particles owned after the redistribution, and halo particles received.
    pub owned: usize,
    pub halo: usize,
    /// Particles sent to / received from other ranks by the redistribution.
    pub moved_out: usize,
    pub moved_in: usize,
    /// Bytes sent: redistribution (and the fields' return), halo, coarse multipoles.
    pub bytes_redistribute: usize,
    pub bytes_halo: usize,
    pub bytes_coarse: usize,
}

/// Collective: velocity and stretching of this rank's `local` particles (input order,
/// `1/(4 pi)` applied), every rank's particles acting as sources.
pub fn evaluate_distributed_reference(
    comm: &dyn Comm,
    local: &Sources,
    params: &UniformParams,
) -> GpuResult<(Fields, DistributedReferenceStats)> {
    let plan = SlabPlan::agree(comm, local, params)?;
    run_slabs(comm, &plan, local, params, None)
}

/// Collective, periodic: velocity and stretching of this rank's `local` particles (input
/// order, `1/(4 pi)` applied, positions anywhere: wrapped into the box) in the periodic box
/// of `periodic`, every rank's particles acting as sources: the method of
/// [`super::evaluate_reference_periodic`] over slabs. The grid is fixed by the box, the
/// global particle count and the global largest core radius; the halo planes, the leaf
/// multipoles and the coarse windows wrap around the seam; the top level is complete on
/// every rank after the coarse exchange, so the far-image locals and the surface correction
/// (of the reduced dipole tensor) are the same on every rank. Errors as the single-rank
/// twin's (on every rank).
pub fn evaluate_distributed_reference_periodic(
    comm: &dyn Comm,
    local: &Sources,
    params: &UniformParams,
    periodic: &Periodic,
) -> GpuResult<(Fields, DistributedReferenceStats)> {
    let (plan, sums) = SlabPlan::agree_periodic(comm, local, params, periodic)?;
    let inside = wrapped(local, periodic);
    let per = (periodic, sums.surface_correction(periodic.box_length));
    run_slabs(comm, &plan, &inside, params, Some(per))
}

/// The distributed f64 method over the slabs of `plan` (periodic: `per` = the box and the
/// surface correction, `local` wrapped into the box).
fn run_slabs(
    comm: &dyn Comm,
    plan: &SlabPlan,
    local: &Sources,
    params: &UniformParams,
    per: Option<(&Periodic, [f64; 3])>,
) -> GpuResult<(Fields, DistributedReferenceStats)> {
    // as the device path: assume the particles in their slabs, check it in the packing's
    // pass (here into scratch buffers), redistribute when any rank fails the check
    let mut owned = assume_in_slab(comm, plan, local);
    let in_slabs = comm.size() > 1 && owned.min_owned > 0 && {
        let n = local.len();
        let (mut p, mut a) = (vec![0.0f32; 4 * n], vec![0.0f32; 4 * n]);
        let mut out = [pack_checking_slab(&owned, plan, &mut p, &mut a) as f64];
        comm.allreduce_f64(&mut out, ReduceOp::Max);
        out[0] == 0.0
    };
    if !in_slabs {
        owned = redistribute(comm, plan, local);
    }
    let (halo, bytes_halo) = exchange_halo_f64(comm, plan, &owned);
    let mut set = owned.to_sources();
    let n_own = set.len();
    set.position.extend_from_slice(&halo.position);
    set.strength.extend_from_slice(&halo.strength);
    set.sigma.extend_from_slice(&halo.sigma);

    let mut f = RefFmm::new(plan.grid, params.order, &set);
    f.core = params.core;
    let (bytes_leaf, coarse) = upward_and_exchanges(comm, plan, &mut f);
    let g = plan.grid;
    if let Some((q, _)) = per {
        // the top level is complete now (coarse windows, or at k = 0 the leaf exchange)
        f.far_images(&far_images_for(&g, params.order, q));
    }
    let own = plan.own(plan.rank);
    for l in 0..=g.k {
        f.m2l(l, plan.cells(plan.rank, l));
    }
    for l in 1..=g.k {
        f.l2l(l, plan.cells(plan.rank, l));
    }
    let mut fields = f.fields(own, n_own);
    if let Some((_, corr)) = per {
        for v in &mut fields.velocity {
            (0..3).for_each(|c| v[c] -= corr[c]);
        }
    }
    let (moved_out, moved_in) = owned.moved();
    let (out, bytes_back) = owned.return_fields(comm, fields);
    Ok((
        out,
        DistributedReferenceStats {
            owned: n_own,
            halo: halo.len(),
            moved_out,
            moved_in,
            bytes_redistribute: owned.bytes + bytes_back,
            bytes_halo: bytes_halo + bytes_leaf,
            bytes_coarse: coarse.sent,
        },
    ))
}

/// P2M of the own leaves, M2M over the cells overlapping the slab, the coarse-level
/// exchange, the leaf multipoles beyond the particle halo from their owners, P2M of the halo
/// leaves. Returns the bytes of the leaf exchange and those of the coarse one.
fn upward_and_exchanges(comm: &dyn Comm, plan: &SlabPlan, f: &mut RefFmm) -> (usize, CoarseBytes) {
    let (g, me) = (plan.grid, plan.rank);
    let own = plan.own(me);
    f.p2m(own);
    for l in (0..g.k).rev() {
        f.m2m(l, plan.cells(me, l));
    }
    // coarse levels: windows of the needed planes (their ranges concatenated), as
    // interleaved f64
    let len = f.len;
    let to_f64 = |c: &[Complex64]| -> Vec<f64> { c.iter().flat_map(|c| [c.re, c.im]).collect() };
    let mut windows: Vec<Vec<f64>> = (0..g.k)
        .map(|l| {
            plan.needed(me, l)
                .into_iter()
                .flat_map(|zr| {
                    let (a, b) = plan.cell_index_range(l, zr);
                    to_f64(&f.mult[a * len..b * len])
                })
                .collect()
        })
        .collect();
    let coarse = exchange_coarse(comm, plan, &mut windows, 2 * len);
    let put = |f: &mut RefFmm, (a, b): (usize, usize), w: &[f64]| {
        for (dst, src) in f.mult[a * len..b * len].iter_mut().zip(w.chunks_exact(2)) {
            *dst = Complex64::new(src[0], src[1]);
        }
    };
    for (l, w) in windows.iter().enumerate() {
        let mut at = 0;
        for zr in plan.needed(me, l) {
            let (a, b) = plan.cell_index_range(l, zr);
            put(f, (a, b), &w[at..at + 2 * len * (b - a)]);
            at += 2 * len * (b - a);
        }
    }
    // leaf multipoles beyond the particle halo, from their owners
    let leaf = |zr: (usize, usize)| plan.cell_index_range(g.k, zr);
    let parts: Vec<Vec<f64>> = plan
        .leaf_mult_sends()
        .into_iter()
        .map(|zr| {
            let (a, b) = leaf(zr);
            to_f64(&f.mult[a * len..b * len])
        })
        .collect();
    let (recv, bytes_leaf) = exchange_leaf_multipoles(comm, plan, &parts, 2 * len);
    for (zr, w) in recv {
        put(f, leaf(zr), &w);
    }
    for zr in plan.halo(me) {
        f.p2m(zr);
    }
    (bytes_leaf, coarse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uniform::{evaluate_reference, evaluate_reference_periodic};
    use vortex_domain::ThreadComm;
    use vortex_fmm::evaluators::direct::direct;
    use vortex_fmm::relative_l2_error;

    /// Splits `s` over `ranks`: particle `i` to rank `i % ranks` (so every rank holds
    /// particles of every slab and the redistribution moves most of them).
    fn scatter(s: &Sources, ranks: usize, r: usize) -> (Sources, Vec<usize>) {
        let idx: Vec<usize> = (r..s.len()).step_by(ranks).collect();
        let mut out = Sources::default();
        for &i in &idx {
            out.position.push(s.position[i]);
            out.strength.push(s.strength[i]);
            out.sigma.push(s.sigma[i]);
        }
        (out, idx)
    }

    fn run(s: &Sources, params: &UniformParams, ranks: usize) -> (Fields, usize) {
        let parts = ThreadComm::run(ranks, |c| {
            let (mine, idx) = scatter(s, ranks, c.rank());
            let (f, st) = evaluate_distributed_reference(c, &mine, params).unwrap();
            assert_eq!(f.velocity.len(), mine.len());
            (f, idx, st)
        });
        let mut out = Fields::zeros(s.len());
        let mut coarse = 0;
        for (f, idx, st) in parts {
            coarse += st.bytes_coarse;
            for (q, &i) in idx.iter().enumerate() {
                out.velocity[i] = f.velocity[q];
                out.stretching[i] = f.stretching[q];
            }
        }
        (out, coarse)
    }

    fn check(s: &Sources, params: &UniformParams, ranks: &[usize], tol: f64) {
        let want = evaluate_reference(s, params).unwrap();
        for &r in ranks {
            let (got, coarse) = run(s, params, r);
            let (eu, es) = got.relative_l2_errors(&want);
            println!(
                "R = {r}, grid {:?}: vs single rank {eu:.1e} / {es:.1e}, coarse bytes {coarse}",
                params.grid
            );
            assert!(eu < tol && es < tol, "R = {r}: {eu:.2e} {es:.2e}");
        }
    }

    fn small_cores(np: usize, seed: u64) -> Sources {
        let mut s = vortex_fmm::testsets::standard(np, seed);
        s.sigma.iter_mut().for_each(|v| *v = 0.02);
        s
    }

    /// R = 1, 2, 3 (uneven split of 12 planes: 4 each; of 16: 5, 5, 6) against the single-rank
    /// f64 twin, and against the direct sum.
    #[test]
    fn ranks_agree_with_the_single_rank_twin() {
        let s = small_cores(3000, 11);
        for grid in [(3, 2), (2, 3)] {
            let params = UniformParams {
                order: 6,
                grid: Some(grid),
                ..Default::default()
            };
            check(&s, &params, &[1, 2, 3], 1e-12);
        }
        let params = UniformParams {
            order: 8,
            grid: Some((2, 3)),
            ..Default::default()
        };
        let want = direct(&s, &s.as_targets());
        let (got, _) = run(&s, &params, 3);
        let (eu, es) = got.relative_l2_errors(&want);
        println!("R = 3 vs direct: {eu:.1e} / {es:.1e}");
        assert!(eu < 1e-4 && es < 1e-3, "{eu:.2e} {es:.2e}");
    }

    /// Slabs narrower than the M2L stencil: 8 planes over 3 ranks (2, 3, 3 planes: the leaf
    /// multipoles come from two ranks on each side), 4 planes over 4 ranks, and k = 0 (every
    /// plane interacts).
    #[test]
    fn narrow_slabs_take_the_halo_from_further_ranks() {
        let s = small_cores(2000, 12);
        for (grid, ranks) in [((1, 3), vec![3]), ((1, 2), vec![4]), ((5, 0), vec![2, 3])] {
            let params = UniformParams {
                order: 6,
                grid: Some(grid),
                ..Default::default()
            };
            check(&s, &params, &ranks, 1e-12);
        }
    }

    /// Fewer leaf planes than ranks is an error on every rank, as are invalid sources on one.
    #[test]
    fn refusals_are_errors_on_every_rank() {
        let s = small_cores(500, 13);
        let params = UniformParams {
            order: 4,
            grid: Some((1, 1)),
            ..Default::default()
        };
        let errs = ThreadComm::run(3, |c| {
            let (mine, _) = scatter(&s, 3, c.rank());
            evaluate_distributed_reference(c, &mine, &params).unwrap_err()
        });
        assert!(errs
            .iter()
            .all(|e| e.to_string().contains("cannot be split")));
        let errs = ThreadComm::run(2, |c| {
            let (mut mine, _) = scatter(&s, 2, c.rank());
            if c.rank() == 1 {
                mine.sigma[0] = -1.0;
            }
            evaluate_distributed_reference(c, &mine, &UniformParams::default()).unwrap_err()
        });
        assert!(errs.iter().all(|e| e.to_string().contains("non-positive")));
    }

    /// Ranks that hold exactly their slab's particles (a time step without movers): nothing
    /// is redistributed, the result is the single-rank one.
    #[test]
    fn ranks_holding_their_slabs_move_nothing() {
        let s = small_cores(3000, 15);
        let params = UniformParams {
            order: 6,
            grid: Some((3, 2)),
            ..Default::default()
        };
        let want = evaluate_reference(&s, &params).unwrap();
        let ext = crate::uniform::Extent::of(&s.position, &s.sigma).unwrap();
        for ranks in [2, 3] {
            let plan =
                SlabPlan::with_grid(0, ranks, params.grid_for(&ext, s.len()), s.len()).unwrap();
            let parts = ThreadComm::run(ranks, |c| {
                let idx: Vec<usize> = (0..s.len())
                    .filter(|&i| plan.owner(plan.leaf_z(s.position[i])) == c.rank())
                    .collect();
                let mut mine = Sources::default();
                for &i in &idx {
                    mine.position.push(s.position[i]);
                    mine.strength.push(s.strength[i]);
                    mine.sigma.push(s.sigma[i]);
                }
                let (f, st) = evaluate_distributed_reference(c, &mine, &params).unwrap();
                assert_eq!(st.bytes_redistribute, 0);
                (f, idx)
            });
            let mut got = Fields::zeros(s.len());
            for (f, idx) in parts {
                for (q, &i) in idx.iter().enumerate() {
                    got.velocity[i] = f.velocity[q];
                    got.stretching[i] = f.stretching[q];
                }
            }
            let (eu, es) = got.relative_l2_errors(&want);
            assert!(eu < 1e-12 && es < 1e-12, "R = {ranks}: {eu:.2e} {es:.2e}");
        }
    }

    /// A rank without particles (all of them given to rank 0) still takes part.
    #[test]
    fn empty_rank_and_everything_moving() {
        let s = small_cores(1500, 14);
        let params = UniformParams {
            order: 6,
            grid: Some((2, 2)),
            ..Default::default()
        };
        let want = evaluate_reference(&s, &params).unwrap();
        let got = ThreadComm::run(2, |c| {
            let mine = if c.rank() == 0 {
                s.clone()
            } else {
                Sources::default()
            };
            let (f, st) = evaluate_distributed_reference(c, &mine, &params).unwrap();
            if c.rank() == 0 {
                assert!(st.moved_out > 0);
            }
            f
        });
        let e = relative_l2_error(&got[0].velocity, &want.velocity);
        assert!(e < 1e-12, "{e:.2e}");
        assert!(got[1].velocity.is_empty());
    }

    /// A zero-total-strength set in the box `[-pi, pi)^3` with cores `sigma`, a few
    /// positions moved by whole box lengths (wrapped by every path).
    fn periodic_set(n: usize, seed: u64, sigma: f64) -> Sources {
        let mut s = vortex_fmm::testsets::generate(
            vortex_fmm::testsets::Distribution::Uniform,
            n,
            seed,
            true,
        );
        s.sigma.iter_mut().for_each(|v| *v = sigma);
        let l = Periodic::default().box_length;
        for (i, x) in s.position.iter_mut().enumerate().step_by(97) {
            x[i % 3] += l * ((i % 5) as f64 - 2.0);
        }
        s
    }

    fn run_periodic(s: &Sources, params: &UniformParams, per: &Periodic, ranks: usize) -> Fields {
        let parts = ThreadComm::run(ranks, |c| {
            let (mine, idx) = scatter(s, ranks, c.rank());
            let (f, _) = evaluate_distributed_reference_periodic(c, &mine, params, per).unwrap();
            (f, idx)
        });
        let mut out = Fields::zeros(s.len());
        for (f, idx) in parts {
            for (q, &i) in idx.iter().enumerate() {
                out.velocity[i] = f.velocity[q];
                out.stretching[i] = f.stretching[q];
            }
        }
        out
    }

    /// Periodic slabs for R = 1..4 against the single-rank periodic twin: even and uneven
    /// slabs (4 planes over 3 ranks: 1, 1, 2; 6 over 4: 1, 2, 1, 2), slabs of one plane
    /// (narrower than the stencil: the halo and the leaf multipoles come from further ranks
    /// and across the seam; at 3 planes over 2 ranks the halo below and above is one plane),
    /// k = 0 (the top level is the leaf level) and the M2L over the box images (m = 3).
    #[test]
    fn periodic_ranks_agree_with_the_single_rank_twin() {
        let per = Periodic::default();
        let s = periodic_set(1200, 21, 0.1);
        for (grid, ranks) in [
            ((1, 2), &[1, 2, 3, 4][..]),
            ((3, 1), &[2, 3, 4][..]),
            ((1, 3), &[3, 4][..]),
            ((3, 0), &[2, 3][..]),
        ] {
            let params = UniformParams {
                order: 6,
                grid: Some(grid),
                ..Default::default()
            };
            let want = evaluate_reference_periodic(&s, &params, &per).unwrap();
            for &r in ranks {
                let got = run_periodic(&s, &params, &per, r);
                let (eu, es) = got.relative_l2_errors(&want);
                println!("periodic R = {r}, grid {grid:?}: vs single rank {eu:.1e} / {es:.1e}");
                assert!(
                    eu < 1e-12 && es < 1e-12,
                    "R = {r} {grid:?}: {eu:.2e} {es:.2e}"
                );
            }
        }
    }

    /// The periodic grid depends on the global count and core radius only (not on R), and a
    /// non-zero total strength, split over the ranks, is refused on every rank.
    #[test]
    fn periodic_grid_is_global_and_refusals_are_collective() {
        let per = Periodic::default();
        let s = periodic_set(4000, 22, 0.12);
        let params = UniformParams {
            order: 4,
            ..Default::default()
        };
        let single = params
            .grid_for_periodic(&crate::uniform::Extent::periodic(&per, 0.12), s.len())
            .unwrap();
        for ranks in [1, 2, 3] {
            let grids = ThreadComm::run(ranks, |c| {
                let (mine, _) = scatter(&s, ranks, c.rank());
                SlabPlan::agree_periodic(c, &mine, &params, &per)
                    .unwrap()
                    .0
                    .grid
            });
            assert!(grids.iter().all(|g| *g == single), "R = {ranks}: {grids:?}");
        }
        let mut bad = s.clone();
        bad.strength[7][0] += 1.0;
        let errs = ThreadComm::run(3, |c| {
            let (mine, _) = scatter(&bad, 3, c.rank());
            evaluate_distributed_reference_periodic(c, &mine, &params, &per).unwrap_err()
        });
        assert!(
            errs.iter()
                .all(|e| e.to_string().contains("total strength")),
            "{errs:?}"
        );
    }
}
