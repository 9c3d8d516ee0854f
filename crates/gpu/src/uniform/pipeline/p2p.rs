//! Phases 5-6 of [`UniformFmm`]'s pipeline: the P2P among the own particles, the far images
//! (periodic), and on a rank the halo leaves' P2M and P2P.

use super::*;

/// The name of the own P2P in the profile.
pub(super) const P2P_NAME: &str = "p2p_near";

impl UniformFmm {
    /// Phase 5, queued on the device: the P2P among the own particles between two events
    /// (periodic: the top multipoles downloaded first, for the far images on the host), on
    /// the pass's stream or on `side` (after the work queued so far on the pass's stream: the
    /// P2P then runs beside the far field; the caller waits for `end` before the L2P).
    pub(super) fn own_p2p(
        &self,
        ps: &Pass,
        tasks: &LeafTasks,
        mult: &CudaSlice<f32>,
        side: Option<&Arc<CudaStream>>,
        bytes: &mut Bytes,
    ) -> GpuResult<OwnP2p> {
        let (s, np) = (&ps.s, ps.np);
        let mut vel = s.alloc_zeros::<f32>(3 * np)?;
        let mut strf = s.alloc_zeros::<f32>(3 * np)?;
        bytes.add(&vel);
        bytes.add(&strf);
        let period = ps.period();
        // (on a rank the top level is complete only after the exchanges: `run_device`
        // downloads it then)
        let top = match ps.per {
            Some(_) if ps.region.is_whole() => Some(s.clone_dtoh(&mult.slice(0..top_len(ps)))?),
            _ => None,
        };
        let on = match side {
            Some(x) => {
                // the sorted particles, tasks and zeroed fields are queued on the pass's stream
                x.wait(&s.record_event(None)?)?;
                x
            }
            None => s,
        };
        let start = on.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        if tasks.ntasks > 0 {
            let (spos, sstr) = (&tasks.sorted.pos, &tasks.sorted.str);
            let k = self.kernels(ps.p)?;
            // the work (pairs) is set once the pair count is downloaded (`run_device`)
            let work = Work::flops(0.0, Unit::Fp32, 0.0);
            // tasks and runs index the np sorted particles (targets and sources alike)
            self.prof(P2P_NAME, 1, work, || {
                k.p2p.p2p_near(
                    on,
                    blocks(tasks.ntasks, P2P_THREADS),
                    spos,
                    sstr,
                    spos,
                    sstr,
                    &tasks.near,
                    &tasks.near_nsrc,
                    &tasks.runs,
                    period,
                    &mut vel,
                    &mut strf,
                )
            })?;
        }
        let end = on.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        Ok(OwnP2p {
            fields: RawFields { vel, strf },
            top,
            start,
            end,
        })
    }

    /// Phase 5, periodic: the far images on the host (f64) from the top multipoles `top`,
    /// while the P2P runs (on a rank: after the exchanges), into the (still zero) locals of
    /// the receiver level.
    pub(super) fn far_image_locals(
        &self,
        ps: &Pass,
        q: &PeriodicRun,
        top: &[f32],
        loc: &mut CudaSlice<f32>,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let t = Instant::now();
        let host = q.far_locals_f32(&ps.g, top);
        let a = ps.g.level_offset(q.receiver_level) * 2 * 3 * ncoef(ps.p);
        ps.s.memcpy_htod(&host, &mut loc.slice_mut(a..a + host.len()))?;
        tm.far_images = t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Phase 6 on a rank: the P2M tasks of the halo leaves and the P2P tasks from the halo
    /// particles `h` to the own planes next to the halo (one range when they coincide or
    /// touch), with their slices and source runs.
    pub(super) fn halo_tasks(
        &self,
        ps: &Pass,
        h: &Sorted,
        tasks: &mut LeafTasks,
        tm: &mut UniformTimes,
    ) -> GpuResult<HaloTasks> {
        let (s, region, plane) = (&ps.s, ps.region, ps.plane);
        let nhalo: usize = region.halo.iter().map(|r| (r.1 - r.0) * plane).sum();
        let ntasks = tasks.ntasks;
        let mut p2m = s.alloc_zeros::<i32>(i4(nhalo))?;
        let ranges = halo_targets(region, ps.per.is_some());
        let rpl = ps.runs_per_leaf;
        let nr: usize = ranges.iter().map(|r| (r.1 - r.0) * plane).sum();
        let mut near = s.alloc_zeros::<i32>(i4(ntasks))?;
        let mut nsrc = s.alloc_zeros::<i32>(ntasks.max(1))?;
        let mut runs = s.alloc_zeros::<i32>(i4(rpl * nr))?;
        let mut scratch = s.alloc_zeros::<i32>(i4(nr.max(ntasks)))?;
        let mut scratch2 = s.alloc_zeros::<i32>(i4(ntasks))?;
        let k = self.kernels(ps.p)?;
        tm.k_sort += self.event_timed(|| {
            let mut at = 0;
            for &(za, zb) in &region.halo {
                let (c0, cnt) = (za * plane, (zb - za) * plane);
                let (c0_i, cnt_i) = (c0 as i32, cnt as i32);
                let mut out = p2m.slice_mut(4 * at..4 * (at + cnt));
                // the halo's starts hold n^3 + 1 ints (c0 + cnt <= n^3)
                let cfg = grid1(cnt, 128);
                k.uniform
                    .p2m_tasks(s, cfg, &h.starts, c0_i, cnt_i, ps.leaf_base, &mut out)?;
                at += cnt;
            }
            let mut at = 0;
            for &(za, zb) in &ranges {
                let u0 = (za - region.own.0) * plane;
                let cnt = (zb - za) * plane;
                // the P2M and L2P tasks of the own leaves again: written to scratch
                let out = TaskOutputs {
                    p2m: scratch.as_view_mut(),
                    near: near.as_view_mut(),
                    nsrc: nsrc.as_view_mut(),
                    l2p: scratch2.as_view_mut(),
                    runs: runs.slice_mut(4 * rpl * at..4 * rpl * (at + cnt)),
                };
                let sl = tasks.slice_starts.slice(u0..u0 + cnt + 1);
                let starts = &tasks.sorted.starts;
                let leaves = (za * plane, cnt, ps.periodic_i());
                self.launch_leaf_tasks(
                    ps,
                    &k,
                    starts,
                    (&h.starts, &sl),
                    leaves,
                    out,
                    &mut tasks.pairs,
                )?;
                at += cnt;
            }
            Ok(())
        })?;
        Ok(HaloTasks {
            p2m,
            count: nhalo,
            ranges,
            near,
            nsrc,
            runs,
        })
    }

    /// Phase 6 on a rank: P2M at the halo leaves (never summed into parents: their owners
    /// did that) and the P2P from the halo particles `h` to the own planes next to them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn halo_p2m_p2p(
        &self,
        ps: &Pass,
        h: &Sorted,
        ht: &HaloTasks,
        tasks: &LeafTasks,
        xp: &mut Expansions,
        fl: &mut RawFields,
        tb: &Tables,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let (s, p, plane) = (&ps.s, ps.p, ps.plane);
        let period = ps.period();
        let k = self.kernels(p)?;
        tm.k_p2m += self.event_timed(|| {
            // one block per halo leaf (ht.count tasks indexing the halo's sorted particles
            // and the global leaf cells)
            k.fmm.p2m(
                s,
                blocks(ht.count, ncoef(p).div_ceil(32) * 32),
                &h.pos,
                &h.str,
                &ht.p2m,
                &xp.centers,
                &tb.knm,
                &mut xp.mult,
            )
        })?;
        tm.k_p2p += self.event_timed(|| {
            let mut at = 0;
            for &(za, zb) in &ht.ranges {
                let u0 = (za - ps.region.own.0) * plane;
                let cnt = (zb - za) * plane;
                let (ta, te) = (tasks.ss[u0] as usize, tasks.ss[u0 + cnt] as usize);
                if te > ta {
                    let near = ht.near.slice(4 * ta..4 * te);
                    let nsrc = ht.nsrc.slice(ta..te);
                    let rpl = ps.runs_per_leaf;
                    let hr = ht.runs.slice(4 * rpl * at..4 * rpl * (at + cnt));
                    // the tasks ta .. te of these planes index the own sorted particles, the
                    // runs (rpl per leaf, relative to hr) the halo's
                    k.p2p.p2p_near(
                        s,
                        blocks(te - ta, P2P_THREADS),
                        &tasks.sorted.pos,
                        &tasks.sorted.str,
                        &h.pos,
                        &h.str,
                        &near,
                        &nsrc,
                        &hr,
                        period,
                        &mut fl.vel,
                        &mut fl.strf,
                    )?;
                }
                at += cnt;
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// The own planes of `region` next to a halo plane (periodic: across the seam too), as
/// sorted disjoint ranges: the targets of the P2P from the halo particles.
fn halo_targets(region: &Region, periodic: bool) -> Ranges {
    let n = region.grid.n() as i64;
    let is_halo = |z: i64| {
        let z = if periodic { z.rem_euclid(n) } else { z };
        (0..n).contains(&z)
            && region
                .halo
                .iter()
                .any(|&(a, b)| (a..b).contains(&(z as usize)))
    };
    let mut out: Ranges = Vec::new();
    for z in region.own.0..region.own.1 {
        if is_halo(z as i64 - 1) || is_halo(z as i64 + 1) {
            match out.last_mut() {
                Some(last) if last.1 == z => last.1 = z + 1,
                _ => out.push((z, z + 1)),
            }
        }
    }
    out
}

/// Floats of the top level's multipoles (`m^3` cells).
pub(super) fn top_len(ps: &Pass) -> usize {
    ps.g.m.pow(3) * 2 * 3 * ncoef(ps.p)
}
