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
        let k = &self.kernels(p)?.uniform;
        // input holds len ints, out len + 1; nb blocks of SCAN_THREADS = 256 threads
        // read in, write out, read and write out again: 16 bytes per element
        self.prof(
            "u_scan (3 kernels)",
            3,
            Work::bytes(16.0 * len as f64),
            || {
                k.scan_blocks(s, blocks(nb, 256), input, len_i, &mut *out, &mut sums)?;
                k.scan_sums(s, blocks(1, 256), &mut sums, nb_i, &mut *out, len_i)?;
                k.scan_add(s, grid1(len, THREADS), &mut *out, len_i, &sums)
            },
        )
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
        let k = self.kernels(p)?;
        let k = &k.uniform;
        *k_time += self.event_timed(|| {
            let per_particle = grid1(np, THREADS);
            let [lox, loy, loz] = lo;
            // counts: n^3 = nleaf ints (the cell index is clamped to the grid)
            let npf = np as f64;
            // a float4 read, cell and slot written, one atomic
            self.prof("u_cell_index", 1, Work::bytes(28.0 * npf), || {
                k.cell_index(
                    s,
                    per_particle,
                    &pos_in,
                    np_i,
                    lox,
                    loy,
                    loz,
                    inv_w,
                    n_i,
                    &mut cell,
                    &mut slot,
                    &mut counts,
                )
            })?;
            self.scan(p, &counts, nleaf, &mut starts)?;
            // starts: the scan of the counts, so starts[c] + slot < starts[c + 1]
            self.prof("u_scatter", 1, Work::bytes(16.0 * npf), || {
                k.scatter(s, per_particle, &cell, &slot, &starts, np_i, &mut perm0)
            })?;
            // one warp per leaf
            let per_leaf = grid1(32 * nleaf, THREADS);
            self.prof("u_sort_cells", 1, Work::bytes(8.0 * npf), || {
                k.sort_cells(s, per_leaf, &starts, nleaf_i, &perm0, &mut perm)
            })?;
            // an index and two float4 read, two float4 written
            self.prof("u_gather", 1, Work::bytes(68.0 * npf), || {
                k.gather(
                    s,
                    per_particle,
                    &perm,
                    np_i,
                    &pos_in,
                    &str_in,
                    &mut spos,
                    &mut sstr,
                )
            })
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
        let k = self.kernels(ps.p)?;
        tm.k_sort += self.event_timed(|| {
            let out = TaskOutputs {
                p2m: p2m.as_view_mut(),
                near: near.as_view_mut(),
                nsrc: near_nsrc.as_view_mut(),
                l2p: l2p.as_view_mut(),
                runs: runs.as_view_mut(),
            };
            let sources = (&sorted.starts, &slice_starts.as_view());
            let leaves = (ps.c_own, nown, ps.periodic_i());
            self.launch_leaf_tasks(ps, &k, &sorted.starts, sources, leaves, out, &mut pairs)
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
        let k = self.kernels(ps.p)?;
        *k_time += self.event_timed(|| {
            let own_starts = starts.slice(c_own..c_own + nown + 1);
            let cfg = grid1(nown, THREADS);
            self.prof("u_slices", 1, Work::bytes(8.0 * nown as f64), || {
                k.uniform
                    .slices(s, cfg, &own_starts, nown_i, slice_i, &mut nslices)
            })?;
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
        k: &UniformModule,
        starts: &CudaSlice<i32>,
        sources: (&CudaSlice<i32>, &CudaView<'_, i32>),
        (c0, cnt, periodic): (usize, usize, i32),
        mut out: TaskOutputs<'_>,
        pairs: &mut CudaSlice<u64>,
    ) -> GpuResult<()> {
        let (n_i, slice_i) = (ps.g.n() as i32, P2P_TARGETS as i32);
        // both starts hold n^3 + 1 ints (c0 + cnt <= n^3), the slice offsets cnt + 1 (their
        // last at most the task count); p2m holds cnt int4 at least, near, nsrc and l2p the
        // task count, runs ps.runs_per_leaf int4 per leaf
        // per leaf: 9 (18) runs of two starts read and an int4 written, P2M task; per
        // slice three tasks
        let bytes = cnt as f64 * (ps.runs_per_leaf as f64 * 24.0 + 24.0);
        self.prof("u_leaf_tasks", 1, Work::bytes(bytes), || {
            k.uniform.leaf_tasks(
                &ps.s,
                grid1(cnt, 128),
                starts,
                sources.0,
                sources.1,
                n_i,
                ps.leaf_base,
                slice_i,
                c0 as i32,
                cnt as i32,
                periodic,
                &mut out.p2m,
                &mut out.near,
                &mut out.nsrc,
                &mut out.l2p,
                &mut out.runs,
                pairs,
            )
        })
    }
}
