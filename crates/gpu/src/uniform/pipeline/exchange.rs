//! Phase 5 on a rank: the host-side exchanges of [`RankExchange`] while the device runs the
//! P2P among the own particles.

use super::*;

impl UniformFmm {
    /// Phase 5 on a rank, on the host while the own P2P runs: the copies of phase 4 into the
    /// coarse windows; the halo particles, leaf and coarse multipoles exchanged; the halo
    /// particles uploaded and sorted apart (returned); the received multipoles uploaded.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn exchange(
        &self,
        ps: &Pass,
        e: &mut dyn RankExchange,
        copies: RankCopies<'_>,
        sorted: &Sorted,
        mult: &mut CudaSlice<f32>,
        staging_up: &mut Option<PinnedHostSlice<f32>>,
        tm: &mut UniformTimes,
        bytes: &mut Bytes,
    ) -> GpuResult<Option<Sorted>> {
        let s = &ps.s;
        let t_copy = Instant::now();
        copies.done.synchronize()?;
        let mut windows = Vec::new();
        for (len, parts) in copies.windows {
            let mut w = vec![0.0f32; len];
            for (x, h) in parts {
                w[x..x + h.len()].copy_from_slice(h);
            }
            windows.push(w);
        }
        e.add_seconds(t_copy.elapsed().as_secs_f64());
        let rows = SortedRows {
            sorted,
            copy: self.copy_stream()?,
            plane: ps.plane,
        };
        let nh = e.halo_count(&rows)?;
        let leaf_up = e.leaf_multipoles(&copies.leaves)?;
        e.coarse(&mut windows)?;
        // multipoles to upload (received leaves, completed coarse cells): float ranges of
        // the multipole array and their data
        let mut mult_up: Vec<(usize, &[f32])> =
            leaf_up.iter().map(|((a, _), w)| (*a, &w[..])).collect();
        for ((ranges, (_, up)), w) in e
            .coarse_ranges()
            .into_iter()
            .zip(e.coarse_parts())
            .zip(&windows)
        {
            mult_up.extend(
                up.into_iter()
                    .map(|(x, y)| (window_to_array(&ranges, x, y - x), &w[x..y])),
            );
        }
        let nm: usize = mult_up.iter().map(|(_, w)| w.len()).sum();
        // the own upload finished long ago: the staging buffer is free (one buffer for
        // the halo particles and the multipoles, so the copies run asynchronously)
        let up = pinned(
            &self.dev,
            staging_up,
            8 * nh + nm,
            CU_MEMHOSTALLOC_WRITECOMBINED,
        )?;
        let (hup, mut mup) = up.split_at_mut(8 * nh);
        let mut halo = None;
        if nh > 0 {
            e.pack_halo(hup);
            // SAFETY: every element is written by the copy below before any kernel reads it.
            let mut hin = unsafe { s.alloc::<f32>(8 * nh) }?;
            s.memcpy_htod(&*hup, &mut hin)?;
            let hs = self.sort(ps.p, &hin, nh, &ps.g, &mut tm.k_sort, bytes)?;
            halo = Some(hs);
        }
        let t = Instant::now();
        for (a, w) in mult_up {
            let (dst, r) = mup.split_at_mut(w.len());
            dst.copy_from_slice(w);
            s.memcpy_htod(&*dst, &mut mult.slice_mut(a..a + w.len()))?;
            mup = r;
        }
        e.add_seconds(t.elapsed().as_secs_f64());
        Ok(halo)
    }
}

/// The sorted own particles, read on the copy stream (which has waited for the upward pass,
/// so for the sort: `start_rank_copies`).
struct SortedRows<'a> {
    sorted: &'a Sorted,
    copy: Arc<CudaStream>,
    plane: usize,
}

impl HaloRows for SortedRows<'_> {
    fn rows(&self, (za, zb): (usize, usize)) -> GpuResult<Vec<f32>> {
        let st = &self.sorted.starts;
        let a = self
            .copy
            .clone_dtoh(&st.slice(za * self.plane..za * self.plane + 1))?[0];
        let b = self
            .copy
            .clone_dtoh(&st.slice(zb * self.plane..zb * self.plane + 1))?[0];
        let (a, b) = (a as usize, b as usize);
        if b <= a {
            return Ok(Vec::new());
        }
        let pos = self.copy.clone_dtoh(&self.sorted.pos.slice(4 * a..4 * b))?;
        let str = self.copy.clone_dtoh(&self.sorted.str.slice(4 * a..4 * b))?;
        Ok(pos
            .chunks_exact(4)
            .zip(str.chunks_exact(4))
            .flat_map(|(p, q)| p.iter().chain(q).copied())
            .collect())
    }
}
