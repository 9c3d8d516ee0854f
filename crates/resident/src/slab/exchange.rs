//! The device side of the slab exchanges: the owner of every particle from its packed f32
//! position (`r_slab_owner`), rows gathered on the device by index (`r_gather_rows`), and the
//! two exchanges of the distributed step through the host (`Comm::alltoallv` of f64 rows):
//! * [`migrate`]: the particles that left the rank's slab go to their owners with every array
//!   that travels with them (state, predictor, the Adams-Bashforth history) and their global
//!   ids; the kept rows are compacted on the device, the arrivals appended in rank order;
//!
//! (The halo of the Gaussian sums travels on the device: [`super::halo`].)

#[cfg(doc)]
use super::owners::migration_lists;
use super::owners::Owners;
use crate::kernels::{per_element, Kernels};
use crate::lattice::scan;
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;
use vortex_cuda::{GpuError, GpuResult};
use vortex_domain::Comm;

/// Where this rank's particles belong, on the device: per rank `q` the indices of the particles
/// it owns (increasing; the rule of the host twin [`migration_lists`]) and their count.
pub struct Ownership {
    /// `lists[q]`: `counts[q]` indices (at least one element allocated).
    pub lists: Vec<CudaSlice<i32>>,
    pub counts: Vec<usize>,
    pub me: usize,
}

impl Ownership {
    /// Particles of this rank owned elsewhere.
    pub fn leaving(&self) -> usize {
        (0..self.counts.len())
            .filter(|&q| q != self.me)
            .map(|q| self.counts[q])
            .sum()
    }
}

/// The owners of `n` particles from their packed rows (`8 n` floats: the layout of
/// `vortex_gpu::uniform::pipeline::pack_sources_into`, as `r_pack` writes it), as per-rank
/// index lists on the device (rank `me` is this one).
pub fn owners_of(
    k: &Kernels,
    s: &Arc<CudaStream>,
    packed: &CudaSlice<f32>,
    n: usize,
    owners: &Owners,
    me: usize,
) -> GpuResult<Ownership> {
    let ranks = owners.ranks;
    let mut own = Ownership {
        lists: Vec::with_capacity(ranks),
        counts: vec![0; ranks],
        me,
    };
    if n == 0 {
        for _ in 0..ranks {
            own.lists.push(s.alloc_zeros::<i32>(1)?);
        }
        return Ok(own);
    }
    let table = s.clone_htod(&owners.plane_owner)?;
    let mut owner = s.alloc_zeros::<i32>(n)?;
    let (n_i, nleaf) = (n as i32, owners.plane_owner.len() as i32);
    // packed holds at least n float4 positions (8 n floats), plane_owner nleaf ints, owner n
    let (lo, inv_w) = (owners.lo, owners.inv_w);
    k.slab_owner(
        s,
        per_element(n),
        packed,
        n_i,
        lo,
        inv_w,
        nleaf,
        &table,
        &mut owner,
    )?;
    let mut flag = s.alloc_zeros::<i32>(n)?;
    let mut starts = s.alloc_zeros::<i32>(n + 1)?;
    for q in 0..ranks {
        let q_i = q as i32;
        // owner and flag hold n ints
        k.flag_owner(s, per_element(n), &owner, n_i, q_i, &mut flag)?;
        scan(k, s, &flag, n, &mut starts)?;
        let count = s.clone_dtoh(&starts.slice(n..n + 1))?[0] as usize;
        let mut idx = s.alloc_zeros::<i32>(count.max(1))?;
        // flag n ints, starts n + 1 (its exclusive scan: starts[i] < count for flagged i)
        k.compact_index(s, per_element(n), &flag, &starts, n_i, &mut idx)?;
        own.counts[q] = count;
        own.lists.push(idx);
    }
    Ok(own)
}

/// Rows `idx` of `src` (rows of `width` doubles) in a fresh buffer of `len.max(m) * width`
/// doubles (the gathered rows first).
fn gather(
    k: &Kernels,
    s: &Arc<CudaStream>,
    src: &CudaSlice<f64>,
    width: usize,
    idx: &CudaSlice<i32>,
    m: usize,
    len: usize,
) -> GpuResult<CudaSlice<f64>> {
    let mut dst = s.alloc_zeros::<f64>((len.max(m) * width).max(1))?;
    if m == 0 {
        return Ok(dst);
    }
    let (w_i, m_i) = (width as i32, m as i32);
    // idx holds m indices of rows of src (each below src.len() / width: the caller's lists
    // index its particles), dst at least m width doubles
    k.gather_rows(s, per_element(m * width), src, w_i, idx, m_i, &mut dst)?;
    Ok(dst)
}

fn upload_idx(s: &Arc<CudaStream>, idx: &[u32]) -> GpuResult<CudaSlice<i32>> {
    let v: Vec<i32> = idx.iter().map(|&i| i as i32).collect();
    Ok(s.clone_htod(if v.is_empty() { &[0][..] } else { &v[..] })?)
}

/// What one migration moved on this rank.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moved {
    pub sent: usize,
    pub received: usize,
    pub bytes: usize,
}

/// Removes the (sorted, distinct) indices `leaving` from `ids` in place, keeping the order
/// of the rest: each run between two leavers moves down once (no second vector of all ids).
fn remove_leavers(ids: &mut Vec<u64>, leaving: &[u32]) {
    let Some(&first) = leaving.first() else {
        return;
    };
    let mut to = first as usize;
    for (w, &i) in leaving.iter().enumerate() {
        let from = i as usize + 1;
        let end = leaving.get(w + 1).map_or(ids.len(), |&e| e as usize);
        ids.copy_within(from..end, to);
        to += end - from;
    }
    ids.truncate(to);
}

/// Collective: moves the particles owned by other ranks (`own`) to their owners. `arrays` are
/// the per-particle device arrays (rows of the given width, `n` rows each) that travel
/// together; `ids` their global ids. On return every array holds the kept rows in their order
/// followed by the arrivals (source rank order), `n` and `ids` updated. Only the leavers' rows
/// and indices cross to the host.
pub fn migrate(
    comm: &dyn Comm,
    k: &Kernels,
    s: &Arc<CudaStream>,
    arrays: &mut [(&mut CudaSlice<f64>, usize)],
    n: &mut usize,
    ids: &mut Vec<u64>,
    own: &Ownership,
) -> GpuResult<Moved> {
    let (me, ranks) = (comm.rank(), comm.size());
    if own.counts.iter().sum::<usize>() != *n || ids.len() != *n || own.counts.len() != ranks {
        return Err(GpuError::Unsupported(format!(
            "migration of {} particles with owner counts {:?} and {} ids",
            n,
            own.counts,
            ids.len()
        )));
    }
    let mut laps = crate::laps::Laps::new(s, "migration");
    let send: Vec<Vec<u32>> = (0..ranks)
        .map(|q| -> GpuResult<Vec<u32>> {
            if q == me || own.counts[q] == 0 {
                return Ok(Vec::new());
            }
            let v = s.clone_dtoh(&own.lists[q].slice(0..own.counts[q]))?;
            Ok(v.into_iter().map(|i| i as u32).collect())
        })
        .collect::<GpuResult<_>>()?;
    let order: Vec<u32> = send.iter().flatten().copied().collect();
    let width: usize = arrays.iter().map(|a| a.1).sum();
    let send_idx = upload_idx(s, &order)?;
    laps.lap("lists");
    // the leaving rows, array by array
    let mut leaving = Vec::with_capacity(arrays.len());
    for (a, w) in arrays.iter() {
        let g = gather(k, s, a, *w, &send_idx, order.len(), 0)?;
        leaving.push(s.clone_dtoh(&g)?);
    }
    // rows of (id, array rows) per destination
    let mut bufs = vec![Vec::new(); ranks];
    let mut at = 0;
    for (q, list) in send.iter().enumerate() {
        let b = &mut bufs[q];
        b.reserve(list.len() * 8 * (1 + width));
        for &i in list {
            b.extend_from_slice(&ids[i as usize].to_le_bytes());
            for (v, (_, w)) in leaving.iter().zip(arrays.iter()) {
                b.extend_from_slice(bytemuck::cast_slice(&v[at * w..(at + 1) * w]));
            }
            at += 1;
        }
    }
    laps.lap("leavers down + pack");
    let recv = comm.alltoallv(&bufs);
    laps.lap("alltoallv");
    let row_bytes = 8 * (1 + width);
    let arrived: usize = recv.iter().map(|b| b.len() / row_bytes).sum();
    let mut host: Vec<Vec<f64>> = arrays
        .iter()
        .map(|(_, w)| Vec::with_capacity(arrived * w))
        .collect();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    remove_leavers(ids, &sorted);
    laps.lap("ids");
    for b in &recv {
        for row in b.chunks_exact(row_bytes) {
            ids.push(u64::from_le_bytes(row[..8].try_into().expect("8 bytes")));
            let vals: Vec<f64> = bytemuck::pod_collect_to_vec(&row[8..]);
            let mut j = 0;
            for (h, (_, w)) in host.iter_mut().zip(arrays.iter()) {
                h.extend_from_slice(&vals[j..j + w]);
                j += w;
            }
        }
    }
    // compact the kept rows (the device's own list), append the arrivals
    let kept = own.counts[me];
    let total = kept + arrived;
    for ((a, w), h) in arrays.iter_mut().zip(&host) {
        let mut fresh = gather(k, s, a, *w, &own.lists[me], kept, total)?;
        if !h.is_empty() {
            s.memcpy_htod(h, &mut fresh.slice_mut(kept * *w..total * *w))?;
        }
        **a = fresh;
    }
    laps.lap("compact + arrivals up");
    *n = total;
    Ok(Moved {
        sent: order.len(),
        received: arrived,
        bytes: bytes_to_others(&bufs, me),
    })
}

/// Bytes of the messages `bufs` (by destination rank) that leave rank `me`.
fn bytes_to_others(bufs: &[Vec<u8>], me: usize) -> usize {
    bufs.iter()
        .enumerate()
        .filter(|(q, _)| *q != me)
        .map(|(_, b)| b.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::remove_leavers;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// In-place removal equals the filter of the kept indices, for leavers at the ends,
    /// adjacent leavers, none and all.
    #[test]
    fn leavers_leave_and_the_rest_keeps_its_order() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for (len, p) in [
            (0, 0.5),
            (1, 1.0),
            (50, 0.0),
            (50, 1.0),
            (1000, 0.1),
            (1000, 0.7),
        ] {
            let ids: Vec<u64> = (0..len).map(|_| rng.gen()).collect();
            let leaving: Vec<u32> = (0..len as u32).filter(|_| rng.gen_bool(p)).collect();
            let want: Vec<u64> = (0..len)
                .filter(|i| leaving.binary_search(&(*i as u32)).is_err())
                .map(|i| ids[i])
                .collect();
            let mut got = ids.clone();
            remove_leavers(&mut got, &leaving);
            assert_eq!(got, want, "{len} ids, {} leaving", leaving.len());
        }
    }
}
