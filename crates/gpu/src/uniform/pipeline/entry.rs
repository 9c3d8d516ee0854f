//! The entry points of [`UniformFmm`] (host sources, periodic box, device buffers) and the
//! drivers of the pipeline over a [`Region`] (`run_region`, `run_device`).

use super::*;

impl UniformFmm {
    /// Velocity and stretching of every source at every source (free space, input order,
    /// `1/(4 pi)` applied) and the phase times.
    pub fn evaluate(
        &self,
        sources: &Sources,
        params: &UniformParams,
    ) -> GpuResult<(Fields, UniformTimes)> {
        let mut f = Fields::default();
        let tm = self.evaluate_into(sources, params, &mut f)?;
        Ok((f, tm))
    }

    /// [`UniformFmm::evaluate`] into `out` (resized to the sources): a time-stepping caller
    /// that keeps `out` saves the first-touch page faults of fresh output arrays (~0.5 GB at
    /// N = 1e7).
    pub fn evaluate_into(
        &self,
        sources: &Sources,
        params: &UniformParams,
        out: &mut Fields,
    ) -> GpuResult<UniformTimes> {
        params.validate()?;
        self.select_m2l(params);
        let np = sources.len();
        let t = Instant::now();
        let ext = Extent::of(&sources.position, &sources.sigma).ok_or_else(|| {
            GpuError::Unsupported(
                "sources with a non-finite value or a non-positive core radius".into(),
            )
        })?;
        if sources.strength.len() != np || sources.sigma.len() != np {
            return Err(GpuError::Unsupported("sources of unequal lengths".into()));
        }
        let region = Region::whole(params.grid_for(&ext, np));
        let host = t.elapsed().as_secs_f64();
        let pack = |up: &mut [f32]| {
            pack_sources_into(sources, up);
            Ok(())
        };
        let mut tm = self.run_region(params.order, np, &pack, &region, None, None, out)?;
        tm.host_prepare += host;
        tm.total += host;
        Ok(tm)
    }

    /// Periodic velocity and stretching of every source at every source (input order,
    /// `1/(4 pi)` applied; zero-mean velocity) in the box `[-L/2, L/2)^3` of `periodic`
    /// (positions are wrapped): the lists of [`crate::uniform::stencil`] cover the `3 x 3 x 3` box
    /// images, the far images come from `vortex_fmm::periodic::FarImages` (see [`crate::uniform::periodic`]).
    /// Errors: a total strength that is not zero, a box too small for the cores, bad values.
    pub fn evaluate_periodic(
        &self,
        sources: &Sources,
        params: &UniformParams,
        periodic: &Periodic,
    ) -> GpuResult<(Fields, UniformTimes)> {
        crate::uniform::periodic::check_call(sources, params, periodic)?;
        self.select_m2l(params);
        let np = sources.len();
        let t = Instant::now();
        // the largest core radius fixes the grid (the other sums come with the packing)
        let (_, _, sigma_max, ok) = crate::uniform::grid::bounds(&sources.position, &sources.sigma);
        if !ok {
            return Err(GpuError::Unsupported(
                "sources with a non-finite value or a non-positive core radius".into(),
            ));
        }
        let g = params.grid_for_periodic(&Extent::periodic(periodic, sigma_max), np)?;
        let far = self.far_images(&g, params.order, periodic)?;
        let run = PeriodicRun {
            box_length: periodic.box_length,
            far,
            receiver_level: g.receiver_level(),
            correction: OnceLock::new(),
        };
        let host = t.elapsed().as_secs_f64();
        let pack = |up: &mut [f32]| {
            let (p, a) = up[..8 * np].split_at_mut(4 * np);
            let sums = pack_sources_periodic_into(sources, periodic, p, a);
            sums.check(periodic)?;
            let _ = run
                .correction
                .set(sums.surface_correction(periodic.box_length));
            Ok(())
        };
        let region = Region::whole(g);
        let mut f = Fields::default();
        let mut tm = self.run_region(params.order, np, &pack, &region, None, Some(&run), &mut f)?;
        tm.host_prepare += host;
        tm.total += host;
        Ok((f, tm))
    }

    /// The far-image operator of a periodic grid, order and box (its lattice sums take
    /// ~0.1 s: built once and kept for the next evaluation with the same key).
    pub(crate) fn far_images(
        &self,
        g: &UniformGrid,
        p: usize,
        periodic: &Periodic,
    ) -> GpuResult<Arc<FarImages>> {
        let key = (
            p,
            g.m,
            g.k,
            periodic.box_length.to_bits(),
            periodic.image_levels,
        );
        let mut slot = self.far.lock().expect("far images poisoned");
        if let Some((k, f)) = slot.as_ref() {
            if *k == key {
                return Ok(f.clone());
            }
        }
        let t = Instant::now();
        let f = Arc::new(far_images_for(g, p, periodic));
        log::debug!(
            "uniform FMM: far images (p = {p}, K = {}, {} receivers) built in {:.0} ms",
            periodic.image_levels,
            f.receivers().len(),
            t.elapsed().as_secs_f64() * 1e3
        );
        *slot = Some((key, f.clone()));
        Ok(f)
    }

    /// The pipeline over a [`Region`] of the grid for the `np` particles of its own leaves
    /// (`pack` writes them into the `8 np` floats of the upload buffer: `float4` position
    /// rows, then strength rows). On a rank, `ex` brings the halo particles (sorted apart:
    /// sources only) and completes the coarse multipoles; both exchanges run on the host
    /// while the device computes the P2P among the own particles. Fields of the `np`
    /// particles in their input order.
    #[allow(clippy::too_many_arguments)] // the one internal driver behind three entry points
    pub(crate) fn run_region(
        &self,
        p: usize,
        np: usize,
        pack: &dyn Fn(&mut [f32]) -> GpuResult<()>,
        region: &Region,
        ex: Option<&mut dyn RankExchange>,
        per: Option<&PeriodicRun>,
        fields: &mut Fields,
    ) -> GpuResult<UniformTimes> {
        check_region(p, np, region, ex.is_some(), per.is_some())?;
        let wall = Instant::now();
        let mut tm = UniformTimes::default();
        let mut bytes = Bytes::default();
        let s = self.dev.stream().clone();

        // ---- 1. host: packing, tables
        let t = Instant::now();
        let mut staging_guard = self.staging.lock().expect("staging poisoned");
        let staging: &mut Staging = &mut staging_guard;
        let up = pinned(
            &self.dev,
            &mut staging.up,
            8 * np,
            CU_MEMHOSTALLOC_WRITECOMBINED,
        )?;
        pack(up)?;
        tm.host_prepare = t.elapsed().as_secs_f64();

        // ---- 2. upload
        let t = Instant::now();
        // SAFETY: every element is written by the copy below before any kernel reads it.
        let mut input = unsafe { s.alloc::<f32>(8 * np) }?;
        s.memcpy_htod(&*up, &mut input)?;
        s.synchronize()?;
        bytes.add(&input);
        tm.upload = t.elapsed().as_secs_f64();

        let out6 = self.run_device(p, np, &input, region, ex, per, staging, &mut tm, &mut bytes)?;
        drop(input);
        self.download(&out6, np, per, staging, fields, &mut tm)?;
        tm.total = wall.elapsed().as_secs_f64();
        Ok(tm)
    }

    /// Velocity and stretching of `np` particles at themselves from their packed rows already
    /// on the device (`input`: `8 np` floats, the layout of [`pack_sources_into`]; periodic:
    /// positions inside the box), for a caller that keeps the particles on the device between
    /// evaluations: the fields stay on the device, `6 np` floats `(u, s)` per particle in input
    /// order, **without** the factor `1/(4 pi)` and (periodic) without the surface correction
    /// (both are the caller's: it has the sums of its particles). `sigma_max` is the largest
    /// core radius, `lo`/`hi` the bounds of the positions (free space; ignored when periodic).
    #[allow(clippy::too_many_arguments)]
    pub fn evaluate_device(
        &self,
        input: &CudaSlice<f32>,
        np: usize,
        bounds: ([f64; 3], [f64; 3]),
        sigma_max: f64,
        params: &UniformParams,
        periodic: Option<&Periodic>,
    ) -> GpuResult<(CudaSlice<f32>, UniformTimes)> {
        params.validate()?;
        self.select_m2l(params);
        if input.len() < 8 * np {
            return Err(GpuError::Unsupported(format!(
                "a device input of {} floats for {np} particles (need {})",
                input.len(),
                8 * np
            )));
        }
        let t = Instant::now();
        let (region, run) = match periodic {
            None => {
                let ext = Extent::from_bounds(bounds.0, bounds.1, sigma_max);
                (Region::whole(params.grid_for(&ext, np)), None)
            }
            Some(per) => {
                per.validate()
                    .map_err(|e| GpuError::Unsupported(e.to_string()))?;
                let g = params.grid_for_periodic(&Extent::periodic(per, sigma_max), np)?;
                let run = PeriodicRun::new(self, &g, params.order, per, None)?;
                (Region::whole(g), Some(run))
            }
        };
        let host = t.elapsed().as_secs_f64();
        let (p, per) = (params.order, run.as_ref());
        let (out6, mut tm) = self.run_device_region(p, np, input, &region, None, per)?;
        tm.host_prepare += host;
        tm.total += host;
        Ok((out6, tm))
    }

    /// Phases 3-9 over `region` on particles already on the device (`input`, `8 np`
    /// floats), with the rank exchanges of `ex`: the raw fields in input order (`6 np`
    /// floats) and the phase times.
    pub(crate) fn run_device_region(
        &self,
        p: usize,
        np: usize,
        input: &CudaSlice<f32>,
        region: &Region,
        ex: Option<&mut dyn RankExchange>,
        per: Option<&PeriodicRun>,
    ) -> GpuResult<(CudaSlice<f32>, UniformTimes)> {
        check_region(p, np, region, ex.is_some(), per.is_some())?;
        let wall = Instant::now();
        let mut tm = UniformTimes::default();
        let mut bytes = Bytes::default();
        let mut staging_guard = self.staging.lock().expect("staging poisoned");
        let staging: &mut Staging = &mut staging_guard;
        let out6 = self.run_device(p, np, input, region, ex, per, staging, &mut tm, &mut bytes)?;
        tm.total = wall.elapsed().as_secs_f64();
        Ok((out6, tm))
    }

    /// Phases 3-9 of the pipeline on particles already on the device (`input`, `8 np`
    /// floats): sort, upward pass, P2P (with the rank exchanges of `ex`), M2L, downward pass,
    /// and the fields scattered back to input order (`6 np` floats, raw sums: no `1/(4 pi)`).
    /// Each phase is a method below; the wall time of each lands in `tm`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_device(
        &self,
        p: usize,
        np: usize,
        input: &CudaSlice<f32>,
        region: &Region,
        mut ex: Option<&mut dyn RankExchange>,
        per: Option<&PeriodicRun>,
        staging: &mut Staging,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<CudaSlice<f32>> {
        let ps = Pass::new(p, np, region, per, self.dev.stream().clone());
        (tm.n, tm.m, tm.k) = (ps.g.n(), ps.g.m, ps.g.k);
        self.ensure_tables(p, ps.g.max_offset())?;
        self.kernels(p)?; // compiled at the first call only (not part of the times after it)

        // ---- 3. sort and tasks
        let t = Instant::now();
        let mut tasks = self.leaf_tasks(&ps, input, tm, bytes)?;
        if let Some(e) = ex.as_deref_mut() {
            // particles outside the slab (all ranks agree before any exchange)
            let st = &tasks.sorted.starts;
            let (a, b) = (ps.c_own, ps.c_own + ps.nown);
            let first = ps.s.clone_dtoh(&st.slice(a..a + 1))?[0] as usize;
            let last = ps.s.clone_dtoh(&st.slice(b..b + 1))?[0] as usize;
            e.check_slab(first + (np - last))?;
        }
        tm.sort = t.elapsed().as_secs_f64();

        // ---- 4. upward (own particles); on a rank, the copies for the exchanges start
        let t = Instant::now();
        let guard = self.tables.lock().expect("tables poisoned");
        let tb = guard.as_ref().expect("tables built above");
        let mut xp = self.upward_pass(&ps, &tasks, tb, tm, bytes)?;
        let Staging { up, down } = staging;
        let copies = match ex.as_deref_mut() {
            Some(e) => Some(self.start_rank_copies(&ps, e, &xp.mult, down)?),
            None => None,
        };
        tm.upward = t.elapsed().as_secs_f64();

        // ---- 5. P2P among the own particles, queued; the exchanges run on the host meanwhile.
        // On one GPU (no exchanges) and unprofiled, the P2P runs on the second stream beside
        // the M2L and the L2L; the L2P waits for it.
        let t = Instant::now();
        let side = match (&ex, profile::enabled()) {
            (None, false) => Some(self.copy_stream()?),
            _ => None,
        };
        let own = self.own_p2p(&ps, &tasks, &xp.mult, side.as_ref(), bytes)?;
        let mut fl = own.fields;
        if let (Some(q), Some(top)) = (per, own.top) {
            self.far_image_locals(&ps, q, &top, &mut xp.loc, tm)?;
        }
        let halo = match (ex, copies) {
            (Some(e), Some(c)) => {
                self.exchange(&ps, e, c, &tasks.sorted, &mut xp.mult, up, tm, bytes)?
            }
            _ => None,
        };
        if side.is_none() {
            own.end.synchronize()?;
            tm.k_p2p = own.start.elapsed_ms(&own.end)? as f64 * 1e-3;
        }
        tm.p2p = t.elapsed().as_secs_f64();

        // ---- 6. halo leaves: P2M (never summed into parents: their owners did that) and
        // the P2P from the halo to the own planes next to it
        if let Some(h) = &halo {
            let t = Instant::now();
            let ht = self.halo_tasks(&ps, h, &mut tasks, tm)?;
            self.halo_p2m_p2p(&ps, h, &ht, &tasks, &mut xp, &mut fl, tb, tm)?;
            tm.p2p += t.elapsed().as_secs_f64();
        }
        // periodic on a rank: the top level is complete now (coarse windows, or at k = 0
        // the leaf multipoles and the halo's P2M): the far images from it
        if let (Some(q), false) = (per, ps.region.is_whole()) {
            let t = Instant::now();
            let top = ps.s.clone_dtoh(&xp.mult.slice(0..p2p::top_len(&ps)))?;
            self.far_image_locals(&ps, q, &top, &mut xp.loc, tm)?;
            tm.p2p += t.elapsed().as_secs_f64();
        }
        tm.p2p_pairs = ps.s.clone_dtoh(&tasks.pairs)?[0];
        if profile::enabled() {
            // targets and sources read once per slice and tile, fields written
            let pairs = tm.p2p_pairs as f64;
            let bytes = 56.0 * np as f64;
            let work = Work::flops(pairs * profile::P2P_PAIR_FLOPS, Unit::Fp32, bytes);
            profile::set_work(p2p::P2P_NAME, work);
        }

        // ---- 7. M2L
        let t = Instant::now();
        self.m2l_pass(&ps, &mut xp, tb, tm)?;
        tm.m2l = t.elapsed().as_secs_f64();
        drop(halo);

        // ---- 8. downward: L2L, L2P (after the P2P on the second stream)
        let t = Instant::now();
        let p2p_end = side.as_ref().map(|_| &own.end);
        self.downward_pass(&ps, &tasks, &mut xp, &mut fl, tb, p2p_end, tm)?;
        tm.downward = t.elapsed().as_secs_f64();
        drop(guard);
        if side.is_some() {
            // beside the far field: the P2P's column is its kernel time, and the total (the
            // wall time) less than the sum of the phases
            own.end.synchronize()?;
            tm.k_p2p = own.start.elapsed_ms(&own.end)? as f64 * 1e-3;
            tm.p2p = tm.k_p2p;
            tm.overlapped = true;
        }

        // ---- 9. back to input order
        let t = Instant::now();
        let out6 = self.scatter_fields(&ps, tasks, xp, fl, tm, bytes)?;
        tm.download = t.elapsed().as_secs_f64();
        Ok(out6)
    }
}
