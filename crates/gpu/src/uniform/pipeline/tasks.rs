//! Phase 3 of [`UniformFmm`]'s pipeline: the counting sort into the leaves and the task lists
//! of the own leaves.

use super::*;

impl UniformFmm {
    /// Exclusive scan of `input[..len]` into `out[..=len]` (`out[len]` = total): the three
    /// kernels emulated by `sort::exclusive_scan`.
    pub(super) fn scan(
        &self,
        p: usize,
        input: &CudaSlice<i32>,
        len: usize,
        out: &mut CudaSlice<i32>,
    ) -> GpuResult<()> {
        let s = self.dev.stream();
        let nb = len.div_ceil(SCAN_BLOCK).max(1);
        let mut sums = s.alloc_zeros::<i32>(nb)?;
        let (len_i, nb_i) = (len as i32, nb as i32);
        let f = self.func(p, "u_scan_blocks")?;
        let mut b = s.launch_builder(&f);
        b.arg(input).arg(&len_i).arg(&mut *out).arg(&mut sums);
        // SAFETY: u_scan_blocks(const int* in, int len, int* out, int* sums): the arguments in this
        // order and of these types; input holds len ints, out len + 1, sums nb = ceil(len /
        // SCAN_BLOCK); nb blocks of SCAN_THREADS = 256 threads (its launch bounds), SCAN_ITEMS
        // elements each, elements >= len skipped.
        unsafe { b.launch(blocks(nb, 256)) }?;
        let f = self.func(p, "u_scan_sums")?;
        let mut b = s.launch_builder(&f);
        b.arg(&mut sums).arg(&nb_i).arg(&mut *out).arg(&len_i);
        // SAFETY: u_scan_sums(int* sums, int nb, int* out, int len): the arguments in this order
        // and of these types; sums holds nb ints, out len + 1 (out[len] gets the total); one block
        // of SCAN_THREADS = 256 threads.
        unsafe { b.launch(blocks(1, 256)) }?;
        let f = self.func(p, "u_scan_add")?;
        let mut b = s.launch_builder(&f);
        b.arg(&mut *out).arg(&len_i).arg(&sums);
        // SAFETY: u_scan_add(int* out, int len, const int* sums): the arguments in this order and
        // of these types; out holds len + 1 ints, sums nb = ceil(len / SCAN_BLOCK); threads i >=
        // len do nothing.
        unsafe { b.launch(grid1(len, THREADS)) }?;
        Ok(())
    }

    /// Counting sort of `np` particles (`input`: `float4` position rows, then strength rows)
    /// into the leaves of `g`, in-cell order by input index; kernel time added to `k_time`.
    pub(super) fn sort(
        &self,
        p: usize,
        input: &CudaSlice<f32>,
        np: usize,
        g: &UniformGrid,
        k_time: &mut f64,
        bytes: &mut Bytes,
    ) -> GpuResult<Sorted> {
        let s = self.dev.stream();
        let (pos_in, str_in) = (input.slice(..4 * np), input.slice(4 * np..8 * np));
        let (n, nleaf) = (g.n(), g.leaves());
        let (np_i, n_i, nleaf_i) = (np as i32, n as i32, nleaf as i32);
        let (lo, inv_w) = g.f32_params();
        let mut cell = s.alloc_zeros::<i32>(np)?;
        let mut slot = s.alloc_zeros::<i32>(np)?;
        let mut counts = s.alloc_zeros::<i32>(nleaf)?;
        let mut starts = s.alloc_zeros::<i32>(nleaf + 1)?;
        let mut perm0 = s.alloc_zeros::<i32>(np)?;
        let mut perm = s.alloc_zeros::<i32>(np)?;
        let mut spos = s.alloc_zeros::<f32>(4 * np)?;
        let mut sstr = s.alloc_zeros::<f32>(4 * np)?;
        for b in [&cell, &slot, &perm0, &perm, &counts, &starts] {
            bytes.add(b);
        }
        bytes.add(&spos);
        bytes.add(&sstr);
        *k_time += self.event_timed(|| {
            let f = self.func(p, "u_cell_index")?;
            let mut b = s.launch_builder(&f);
            b.arg(&pos_in).arg(&np_i);
            b.arg(&lo[0]).arg(&lo[1]).arg(&lo[2]).arg(&inv_w).arg(&n_i);
            b.arg(&mut cell).arg(&mut slot).arg(&mut counts);
            // SAFETY: u_cell_index(const float4* pos, int np, float lox, loy, loz, float inv_w, int
            // n, int* cell, int* slot, int* counts): the arguments in this order and of these
            // types; pos_in holds np float4, cell and slot np ints, counts n^3 = nleaf (the cell
            // index is clamped to the grid); threads i >= np return.
            unsafe { b.launch(grid1(np, THREADS)) }?;
            self.scan(p, &counts, nleaf, &mut starts)?;
            let f = self.func(p, "u_scatter")?;
            let mut b = s.launch_builder(&f);
            b.arg(&cell)
                .arg(&slot)
                .arg(&starts)
                .arg(&np_i)
                .arg(&mut perm0);
            // SAFETY: u_scatter(const int* cell, const int* slot, const int* starts, int np, int*
            // perm): the arguments in this order and of these types; cell and slot hold np ints,
            // starts nleaf + 1 (the scan of the counts, so starts[c] + slot < starts[c + 1]), perm0
            // np; threads i >= np do nothing.
            unsafe { b.launch(grid1(np, THREADS)) }?;
            let f = self.func(p, "u_sort_cells")?;
            let mut b = s.launch_builder(&f);
            b.arg(&starts).arg(&nleaf_i).arg(&perm0).arg(&mut perm);
            // SAFETY: u_sort_cells(const int* starts, int ncells, const int* in, int* out): the
            // arguments in this order and of these types; starts holds nleaf + 1 ints, perm0 and
            // perm np; one warp per leaf (32 nleaf threads), warps >= nleaf return.
            unsafe { b.launch(grid1(32 * nleaf, THREADS)) }?;
            let f = self.func(p, "u_gather")?;
            let mut b = s.launch_builder(&f);
            b.arg(&perm).arg(&np_i).arg(&pos_in).arg(&str_in);
            b.arg(&mut spos).arg(&mut sstr);
            // SAFETY: u_gather(const int* perm, int np, const float4* pos_in, str_in, float4* pos,
            // float4* str): the arguments in this order and of these types; perm holds np indices
            // (< np), pos_in, str_in, spos and sstr np float4 each; threads k >= np return.
            unsafe { b.launch(grid1(np, THREADS)) }?;
            Ok(())
        })?;
        Ok(Sorted {
            perm,
            starts,
            pos: spos,
            str: sstr,
        })
    }

    /// Phase 3: the particles sorted into the leaves ([`Self::sort`]), the P2P / L2P slices
    /// of the own leaves ([`Self::leaf_slices`]), and the task lists of the own leaves (P2M per
    /// leaf, P2P and L2P per slice, the runs of source cells per leaf).
    pub(super) fn leaf_tasks(
        &self,
        ps: &Pass,
        input: &CudaSlice<f32>,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<LeafTasks> {
        let s = &ps.s;
        let sorted = self.sort(ps.p, input, ps.np, &ps.g, &mut tm.k_sort, bytes)?;
        let (slice_starts, ss) = self.leaf_slices(ps, &sorted.starts, &mut tm.k_sort)?;
        let nown = ps.nown;
        let ntasks = ss[nown] as usize;
        let mut p2m = s.alloc_zeros::<i32>(i4(nown))?;
        let mut near = s.alloc_zeros::<i32>(i4(ntasks))?;
        let mut near_nsrc = s.alloc_zeros::<i32>(ntasks.max(1))?;
        let mut l2p = s.alloc_zeros::<i32>(i4(ntasks))?;
        let mut runs = s.alloc_zeros::<i32>(i4(ps.runs_per_leaf * nown))?;
        let mut pairs = s.alloc_zeros::<u64>(1)?;
        for b in [&p2m, &near, &near_nsrc, &l2p, &runs] {
            bytes.add(b);
        }
        tm.k_sort += self.event_timed(|| {
            let f = self.func(ps.p, "u_leaf_tasks")?;
            let out = TaskOutputs {
                p2m: p2m.as_view_mut(),
                near: near.as_view_mut(),
                nsrc: near_nsrc.as_view_mut(),
                l2p: l2p.as_view_mut(),
                runs: runs.as_view_mut(),
            };
            let sources = (&sorted.starts, &slice_starts.as_view());
            let leaves = (ps.c_own, nown, ps.periodic_i());
            self.launch_leaf_tasks(ps, &f, &sorted.starts, sources, leaves, out, &mut pairs)
        })?;
        Ok(LeafTasks {
            sorted,
            slice_starts,
            ss,
            ntasks,
            p2m,
            near,
            near_nsrc,
            l2p,
            runs,
            pairs,
        })
    }

    /// Phase 3: the number of P2P / L2P slices of `P2P_TARGETS` targets of each own leaf,
    /// scanned into `nown + 1` offsets on the device, and downloaded (the only mid-way
    /// download: the task count sizes the task arrays).
    pub(super) fn leaf_slices(
        &self,
        ps: &Pass,
        starts: &CudaSlice<i32>,
        k_time: &mut f64,
    ) -> GpuResult<(CudaSlice<i32>, Vec<i32>)> {
        let s = &ps.s;
        let (c_own, nown) = (ps.c_own, ps.nown);
        let mut nslices = s.alloc_zeros::<i32>(nown.max(1))?;
        let mut slice_starts = s.alloc_zeros::<i32>(nown + 1)?;
        let (nown_i, slice_i) = (nown as i32, P2P_TARGETS as i32);
        *k_time += self.event_timed(|| {
            let f = self.func(ps.p, "u_slices")?;
            let mut b = s.launch_builder(&f);
            let own_starts = starts.slice(c_own..c_own + nown + 1);
            b.arg(&own_starts)
                .arg(&nown_i)
                .arg(&slice_i)
                .arg(&mut nslices);
            // SAFETY: u_slices(const int* starts, int ncells, int slice, int* out): the
            // arguments in this order and of these types; own_starts holds nown + 1 ints,
            // nslices nown (at least one); threads c >= nown do nothing.
            unsafe { b.launch(grid1(nown, THREADS)) }?;
            self.scan(ps.p, &nslices, nown, &mut slice_starts)?;
            Ok(())
        })?;
        drop(nslices);
        let ss = s.clone_dtoh(&slice_starts)?;
        Ok((slice_starts, ss))
    }

    /// Queues `u_leaf_tasks` for the `cnt` leaves from `c0` (index in the leaf level; `leaves`
    /// = `(c0, cnt, periodic flag)`): the targets in `starts`, the sources of the runs in
    /// `sources.0`, the slice offsets (`cnt + 1`, indexed from the first leaf) in `sources.1`;
    /// the P2P pairs added to `pairs`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_leaf_tasks(
        &self,
        ps: &Pass,
        f: &CudaFunction,
        starts: &CudaSlice<i32>,
        sources: (&CudaSlice<i32>, &CudaView<'_, i32>),
        (c0, cnt, periodic): (usize, usize, i32),
        mut out: TaskOutputs<'_>,
        pairs: &mut CudaSlice<u64>,
    ) -> GpuResult<()> {
        let (n_i, slice_i) = (ps.g.n() as i32, P2P_TARGETS as i32);
        let (c0_i, cnt_i) = (c0 as i32, cnt as i32);
        let mut b = ps.s.launch_builder(f);
        b.arg(starts)
            .arg(sources.0)
            .arg(sources.1)
            .arg(&n_i)
            .arg(&ps.leaf_base)
            .arg(&slice_i)
            .arg(&c0_i)
            .arg(&cnt_i)
            .arg(&periodic);
        b.arg(&mut out.p2m)
            .arg(&mut out.near)
            .arg(&mut out.nsrc)
            .arg(&mut out.l2p)
            .arg(&mut out.runs)
            .arg(pairs);
        // SAFETY: u_leaf_tasks(const int* starts, src_starts, slice_starts, int n, leaf_base,
        // slice, c0, ncells, periodic, int4* p2m_tasks, near_tasks, int* near_nsrc, int4*
        // l2p_tasks, runs, u64* pairs): the arguments in this order and of these types; both
        // starts hold n^3 + 1 ints (c0 + cnt <= n^3), the slice offsets cnt + 1 (their last
        // at most the task count), p2m cnt int4 at least, near, nsrc and l2p the task count,
        // runs 9 (18 when periodic: the kernel's rpl) int4 per leaf; threads u >= cnt return.
        unsafe { b.launch(grid1(cnt, 128)) }?;
        Ok(())
    }
}
