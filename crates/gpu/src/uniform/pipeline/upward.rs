//! Phase 4 of [`UniformFmm`]'s pipeline: cell centres, P2M, M2M, and on a rank the copies
//! of the multipoles other ranks need.

use super::*;

impl UniformFmm {
    /// Phase 4: cell centres of every level, P2M at the own leaves, M2M level by level
    /// upwards over the cells overlapping the own planes.
    pub(super) fn upward_pass(
        &self,
        ps: &Pass,
        tasks: &LeafTasks,
        tb: &Tables,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<Expansions> {
        let (s, g, p) = (&ps.s, &ps.g, ps.p);
        let k = g.k;
        let r_i = tb.r as i32;
        let len = g.total_cells() * 2 * 3 * ncoef(p);
        let mut mult = s.alloc_zeros::<f32>(len)?;
        let loc = s.alloc_zeros::<f32>(len)?;
        let mut centers = s.alloc_zeros::<f32>(4 * g.total_cells())?;
        bytes.add(&mult);
        bytes.add(&loc);
        bytes.add(&centers);
        let trt = tr_threads(p);
        let kern = self.kernels(p)?;
        tm.k_p2m = self.event_timed(|| {
            for l in 0..=k {
                let (off, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let w = g.width(l);
                // centers holds one float4 per cell of every level
                let [lox, loy, loz] = g.lo;
                let cfg = grid1(g.n_at(l).pow(3), THREADS);
                let work = Work::bytes(16.0 * g.n_at(l).pow(3) as f64);
                self.prof("u_centers", 1, work, || {
                    kern.uniform
                        .centers(s, cfg, off, nl, lox, loy, loz, w, &mut centers)
                })?;
            }
            // particles read, multipoles written
            let nbytes = 32.0 * ps.np as f64 + (ps.nown * 6 * ncoef(p) * 4) as f64;
            let work = Work::flops(profile::p2m_flops(p) * ps.np as f64, Unit::Fp32, nbytes);
            // one block per own leaf (nown tasks) of the np sorted particles
            self.prof("p2m", 1, work, || {
                kern.fmm.p2m(
                    s,
                    blocks(ps.nown, ncoef(p).div_ceil(32) * 32),
                    &tasks.sorted.pos,
                    &tasks.sorted.str,
                    &tasks.p2m,
                    &centers,
                    &tb.knm,
                    &mut mult,
                )
            })
        })?;
        tm.k_m2m = self.event_timed(|| {
            for l in (0..k).rev() {
                let (poff, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let coff = g.level_offset(l + 1) as i32;
                let dist = (0.5 * 3f64.sqrt() * g.width(l + 1)) as f32;
                let (c0, cnt) = ps.region.level_cells(l);
                // one block per parent c0 .. c0 + cnt of level l (inside the level); the
                // rotation records cover offsets up to R = tb.r (ensure_tables)
                // 8 children read, the parent written
                let e = (6 * ncoef(p) * 4) as f64;
                let work = Work::flops(
                    8.0 * cnt as f64 * profile::rotation_flops(p, 0),
                    Unit::Fp32,
                    9.0 * e * cnt as f64,
                );
                self.prof("u_m2m", 1, work, || {
                    kern.uniform.m2m(
                        s,
                        blocks(cnt, trt),
                        &mut mult,
                        &tb.rots,
                        &tb.z_m2m,
                        &tb.toff,
                        r_i,
                        poff,
                        nl,
                        coff,
                        dist,
                        c0 as i32,
                    )
                })?;
            }
            Ok(())
        })?;
        Ok(Expansions { mult, loc, centers })
    }

    /// Phase 4 on a rank: the partial coarse multipoles and the leaf multipoles other ranks
    /// need leave through the (idle) page-locked download buffer, copied on a second stream
    /// after the M2M, so that the P2P starts at once and the copies overlap it.
    pub(super) fn start_rank_copies<'b>(
        &self,
        ps: &Pass,
        e: &mut dyn RankExchange,
        mult: &CudaSlice<f32>,
        down: &'b mut Option<PinnedHostSlice<f32>>,
    ) -> GpuResult<RankCopies<'b>> {
        let coarse: Vec<_> = e
            .coarse_ranges()
            .into_iter()
            .zip(e.coarse_parts())
            .collect();
        let ranges = e.leaf_ranges();
        let total: usize = coarse
            .iter()
            .flat_map(|(_, (down, _))| down.iter().map(|&(x, y)| y - x))
            .chain(ranges.iter().map(|&(a, b)| b - a))
            .sum();
        let copy = self.copy_stream()?;
        copy.wait(&ps.s.record_event(None)?)?;
        let mut rest = pinned(&self.dev, down, total, 0)?;
        let mut windows: Vec<WindowCopy> = Vec::new();
        for (ranges, (down, _)) in coarse {
            let mut parts = Vec::new();
            for (x, y) in down {
                let (h, r) = rest.split_at_mut(y - x);
                let a = window_to_array(&ranges, x, y - x);
                copy.memcpy_dtoh(&mult.slice(a..a + y - x), &mut *h)?;
                parts.push((x, &*h));
                rest = r;
            }
            windows.push((ranges.iter().map(|(a, b)| b - a).sum(), parts));
        }
        let mut leaves = Vec::new();
        for (a, b) in ranges {
            let (h, r) = rest.split_at_mut(b - a);
            copy.memcpy_dtoh(&mult.slice(a..b), &mut *h)?;
            leaves.push(&*h);
            rest = r;
        }
        Ok(RankCopies {
            windows,
            leaves,
            done: copy.record_event(None)?,
        })
    }
}
