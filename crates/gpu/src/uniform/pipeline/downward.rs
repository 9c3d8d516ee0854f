//! Phases 8-9 of [`UniformFmm`]'s pipeline: L2L and L2P, the fields scattered back to input order,
//! the download.

use super::*;

impl UniformFmm {
    /// Phase 8: L2L level by level downwards over the cells overlapping the own planes, then
    /// L2P at the own particles (slices of `UNIFORM_EVAL_BLOCK` targets), after `p2p_end`
    /// (the P2P on another stream, which adds into the same fields) when given.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn downward_pass(
        &self,
        ps: &Pass,
        tasks: &LeafTasks,
        xp: &mut Expansions,
        fl: &mut RawFields,
        tb: &Tables,
        p2p_end: Option<&CudaEvent>,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let (s, g, p) = (&ps.s, &ps.g, ps.p);
        let (r_i, trt) = (tb.r as i32, tr_threads(p));
        let k = self.kernels(p)?;
        tm.k_l2l = self.event_timed(|| {
            for l in 1..=g.k {
                let (coff, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let poff = g.level_offset(l - 1) as i32;
                let dist = (0.5 * 3f64.sqrt() * g.width(l)) as f32;
                let (c0, cnt) = ps.region.level_cells(l);
                // one block per child c0 .. c0 + cnt of level l (inside the level)
                let e = (6 * ncoef(p) * 4) as f64;
                let flops = cnt as f64 * profile::rotation_flops(p, 2);
                let work = Work::flops(flops, Unit::Fp32, 2.25 * e * cnt as f64);
                self.prof("u_l2l", 1, work, || {
                    k.uniform.l2l(
                        s,
                        blocks(cnt, trt),
                        &mut xp.loc,
                        &tb.rots,
                        &tb.z_l2l,
                        &tb.toff,
                        r_i,
                        coff,
                        nl,
                        poff,
                        dist,
                        c0 as i32,
                    )
                })?;
            }
            Ok(())
        })?;
        if let Some(e) = p2p_end {
            s.wait(e)?;
        }
        tm.k_l2p = self.event_timed(|| {
            if tasks.ntasks == 0 {
                return Ok(());
            }
            // targets read and fields read and written, a leaf's locals per slice
            let e = (6 * ncoef(p) * 4) as f64;
            let bytes = 80.0 * ps.np as f64 + e * tasks.ntasks as f64;
            let flops = profile::l2p_flops(p) * ps.np as f64;
            let work = Work::flops(flops, Unit::Fp32, bytes);
            // EVAL_BLOCK = UNIFORM_EVAL_BLOCK threads per task (at most that many targets)
            self.prof("l2p", 1, work, || {
                k.fmm.l2p(
                    s,
                    blocks(tasks.ntasks, UNIFORM_EVAL_BLOCK),
                    &tasks.sorted.pos,
                    &tasks.sorted.str,
                    &tasks.l2p,
                    &xp.centers,
                    &xp.loc,
                    &tb.knm,
                    &mut fl.vel,
                    &mut fl.strf,
                )
            })
        })?;
        Ok(())
    }

    /// Phase 9 on the device: the fields of the sorted particles scattered to input order,
    /// `6 np` floats `(u, s)` per particle (the expansions and sorted rows freed first).
    pub(super) fn scatter_fields(
        &self,
        ps: &Pass,
        tasks: LeafTasks,
        xp: Expansions,
        fl: RawFields,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<CudaSlice<f32>> {
        let (s, np) = (&ps.s, ps.np);
        let np_i = np as i32;
        let mut out6 = s.alloc_zeros::<f32>(6 * np)?;
        bytes.add(&out6);
        tm.device_bytes = bytes.0;
        let Sorted {
            perm,
            pos,
            str: sstr,
            ..
        } = tasks.sorted;
        drop((xp.mult, xp.loc, pos, sstr));
        let k = self.kernels(ps.p)?;
        tm.k_scatter = self.event_timed(|| {
            // an index and six floats read, six written
            self.prof("u_scatter_fields", 1, Work::bytes(52.0 * np as f64), || {
                k.uniform.scatter_fields(
                    s,
                    grid1(np, THREADS),
                    &perm,
                    np_i,
                    &fl.vel,
                    &fl.strf,
                    &mut out6,
                )
            })
        })?;
        Ok(out6)
    }

    /// Phase 9 on the host: the fields `out6` (device, `6 np` raw floats) into `fields` (f64, `1/(4 pi)`,
    /// periodic: minus the surface correction), downloaded in pieces, each converted on the
    /// host while the next one is copied.
    pub(super) fn download(
        &self,
        out6: &CudaSlice<f32>,
        np: usize,
        per: Option<&PeriodicRun>,
        staging: &mut Staging,
        fields: &mut Fields,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let t = Instant::now();
        let s = self.dev.stream().clone();
        let host = pinned(&self.dev, &mut staging.down, 6 * np, 0)?;
        // every element is overwritten below: kept arrays of the right length are reused
        // as they are, others replaced by zeroed allocations (pages mapped lazily, at the
        // parallel writes, not by a serial fill)
        if fields.velocity.len() != np || fields.stretching.len() != np {
            fields.velocity = vec![[0.0; 3]; np];
            fields.stretching = vec![[0.0; 3]; np];
        }
        let chunk = np.div_ceil(DOWNLOAD_CHUNKS).max(1);
        // periodic: the zero-mean velocity (minus the surface term of cubic summation)
        let u0 = per
            .and_then(|q| q.correction.get().copied())
            .unwrap_or([0.0; 3]);
        let mut pending = Vec::with_capacity(DOWNLOAD_CHUNKS);
        for (c, h) in host.chunks_mut(6 * chunk).enumerate() {
            let a = 6 * c * chunk;
            s.memcpy_dtoh(&out6.slice(a..a + h.len()), &mut *h)?;
            pending.push((h, s.record_event(None)?));
        }
        for ((h, ev), (u, st)) in pending.into_iter().zip(
            fields
                .velocity
                .chunks_mut(chunk)
                .zip(fields.stretching.chunks_mut(chunk)),
        ) {
            ev.synchronize()?;
            u.par_iter_mut()
                .zip(st.par_iter_mut())
                .zip(h.par_chunks(6))
                .for_each(|((u, st), h)| {
                    *u = std::array::from_fn(|d| h[d] as f64 * INV_4PI - u0[d]);
                    *st = std::array::from_fn(|d| h[3 + d] as f64 * INV_4PI);
                });
        }
        s.synchronize()?;
        tm.download += t.elapsed().as_secs_f64();
        Ok(())
    }
}
