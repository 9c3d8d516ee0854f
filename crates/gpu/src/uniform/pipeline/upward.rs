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
        tm.k_p2m = self.event_timed(|| {
            let f = self.func(p, "u_centers")?;
            for l in 0..=k {
                let (off, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let w = g.width(l);
                let mut b = s.launch_builder(&f);
                b.arg(&off)
                    .arg(&nl)
                    .arg(&g.lo[0])
                    .arg(&g.lo[1])
                    .arg(&g.lo[2])
                    .arg(&w);
                b.arg(&mut centers);
                // SAFETY: u_centers(int level_off, int nl, double lox, loy, loz, double w,
                // float4* centers): the arguments in this order and of these types; centers
                // holds one float4 per cell of every level, level l at level_off .. level_off
                // + nl^3; threads c >= nl^3 return.
                unsafe { b.launch(grid1(g.n_at(l).pow(3), THREADS)) }?;
            }
            let f = self.func(p, "p2m")?;
            let mut b = s.launch_builder(&f);
            b.arg(&tasks.sorted.pos)
                .arg(&tasks.sorted.str)
                .arg(&tasks.p2m)
                .arg(&centers)
                .arg(&tb.knm);
            b.arg(&mut mult);
            // SAFETY: p2m(const float4* spos, sstr, const int4* tasks, const float4* centers,
            // const float* knm, float2* mult) of fmm.cu: the arguments in this order and of
            // these types; one block per own leaf (nown tasks), P2M_THREADS = NC rounded up to
            // a warp threads; the tasks index the np sorted particles and the global cells
            // of mult (3 NC complex each) and centers.
            unsafe { b.launch(blocks(ps.nown, ncoef(p).div_ceil(32) * 32)) }?;
            Ok(())
        })?;
        tm.k_m2m = self.event_timed(|| {
            let f = self.func(p, "u_m2m")?;
            for l in (0..k).rev() {
                let (poff, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let coff = g.level_offset(l + 1) as i32;
                let dist = (0.5 * 3f64.sqrt() * g.width(l + 1)) as f32;
                let (c0, cnt) = ps.region.level_cells(l);
                let c0_i = c0 as i32;
                let mut b = s.launch_builder(&f);
                b.arg(&mut mult)
                    .arg(&tb.rots)
                    .arg(&tb.z_m2m)
                    .arg(&tb.toff)
                    .arg(&r_i);
                b.arg(&poff).arg(&nl).arg(&coff).arg(&dist).arg(&c0_i);
                // SAFETY: u_m2m(float2* mult, const float* rots, ztab, const int* toff, int R,
                // parent_off, nl, child_off, float dist, int c0): the arguments in this order
                // and of these types; one block per parent c0 .. c0 + cnt of level l (inside
                // the level), tr_threads(p) = TR_THREADS threads; the rotation records cover
                // offsets up to R = tb.r >= the grid's largest (ensure_tables).
                unsafe { b.launch(blocks(cnt, trt)) }?;
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
