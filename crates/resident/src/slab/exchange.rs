//! The device side of the slab exchanges: the owner of every particle from its packed f32
//! position (`r_slab_owner`), rows gathered on the device by index (`r_gather_rows`), and the
//! two exchanges of the distributed step through the host (`Comm::alltoallv` of f64 rows):
//! * [`migrate`]: the particles that left the rank's slab go to their owners with every array
//!   that travels with them (state, predictor, the Adams-Bashforth history) and their global
//!   ids; the kept rows are compacted on the device, the arrivals appended in rank order;
//! * [`halo_rows`]: copies of the particles within the Gaussian sums' reach of other ranks'
//!   lattice planes ([`super::owners::halo_sends`]), positions shifted across the periodic seam.

use super::owners::{halo_sends, migration_lists, Owners};
use crate::kernels::{per_element, Kernels};
use cudarc::driver::{CudaSlice, CudaStream, PushKernelArg};
use std::sync::Arc;
use vortex_cuda::{GpuError, GpuResult};
use vortex_domain::Comm;

/// The owner rank of each of `n` particles from their packed rows (`8 n` floats: the layout of
/// `vortex_gpu::uniform::pipeline::pack_sources_into`, as `r_pack` writes it).
pub fn owners_of(
    k: &Kernels,
    s: &Arc<CudaStream>,
    packed: &CudaSlice<f32>,
    n: usize,
    owners: &Owners,
) -> GpuResult<Vec<i32>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let table = s.clone_htod(&owners.plane_owner)?;
    let mut owner = s.alloc_zeros::<i32>(n)?;
    let (n_i, nleaf) = (n as i32, owners.plane_owner.len() as i32);
    let mut b = s.launch_builder(&k.slab_owner);
    b.arg(packed)
        .arg(&n_i)
        .arg(&owners.lo)
        .arg(&owners.inv_w)
        .arg(&nleaf)
        .arg(&table)
        .arg(&mut owner);
    // SAFETY: r_slab_owner(const float4* packed, int n, float lo, float inv_w, int nleaf, const
    // int* plane_owner, int* owner): the arguments in this order and of these types; packed holds
    // at least n float4 positions (8 n floats), plane_owner nleaf ints, owner n ints; threads i >=
    // n return.
    unsafe { b.launch(per_element(n)) }?;
    Ok(s.clone_dtoh(&owner)?)
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
    let mut b = s.launch_builder(&k.gather_rows);
    b.arg(src).arg(&w_i).arg(idx).arg(&m_i).arg(&mut dst);
    // SAFETY: r_gather_rows(const double* src, int width, const int* idx, int m, double* dst): the
    // arguments in this order and of these types; idx holds m indices of rows of src (each below
    // src.len() / width: the caller's lists index its particles), dst at least m width doubles;
    // threads t >= m width return.
    unsafe { b.launch(per_element(m * width)) }?;
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

/// Collective: moves the particles with `owner[i] != rank` to their owners. `arrays` are the
/// per-particle device arrays (rows of the given width, `n` rows each) that travel together;
/// `ids` their global ids. On return every array holds the kept rows in their order followed
/// by the arrivals (source rank order), `n` and `ids` updated.
pub fn migrate(
    comm: &dyn Comm,
    k: &Kernels,
    s: &Arc<CudaStream>,
    arrays: &mut [(&mut CudaSlice<f64>, usize)],
    n: &mut usize,
    ids: &mut Vec<u64>,
    owner: &[i32],
) -> GpuResult<Moved> {
    let (me, ranks) = (comm.rank(), comm.size());
    if owner.len() != *n || ids.len() != *n {
        return Err(GpuError::Unsupported(format!(
            "migration of {} particles with {} owners and {} ids",
            n,
            owner.len(),
            ids.len()
        )));
    }
    let (send, keep) = migration_lists(owner, me, ranks);
    let order: Vec<u32> = send.iter().flatten().copied().collect();
    let width: usize = arrays.iter().map(|a| a.1).sum();
    let send_idx = upload_idx(s, &order)?;
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
                for x in &v[at * w..(at + 1) * w] {
                    b.extend_from_slice(&x.to_le_bytes());
                }
            }
            at += 1;
        }
    }
    let recv = comm.alltoallv(&bufs);
    let row_bytes = 8 * (1 + width);
    let arrived: usize = recv.iter().map(|b| b.len() / row_bytes).sum();
    let mut host: Vec<Vec<f64>> = arrays
        .iter()
        .map(|(_, w)| Vec::with_capacity(arrived * w))
        .collect();
    let mut new_ids: Vec<u64> = keep.iter().map(|&i| ids[i as usize]).collect();
    for b in &recv {
        for row in b.chunks_exact(row_bytes) {
            let f =
                |j: usize| f64::from_le_bytes(row[8 * j..8 * j + 8].try_into().expect("8 bytes"));
            new_ids.push(u64::from_le_bytes(row[..8].try_into().expect("8 bytes")));
            let mut j = 1;
            for (h, (_, w)) in host.iter_mut().zip(arrays.iter()) {
                for _ in 0..*w {
                    h.push(f(j));
                    j += 1;
                }
            }
        }
    }
    // compact the kept rows, append the arrivals
    let keep_idx = upload_idx(s, &keep)?;
    let total = keep.len() + arrived;
    for ((a, w), h) in arrays.iter_mut().zip(&host) {
        let mut fresh = gather(k, s, a, *w, &keep_idx, keep.len(), total)?;
        if !h.is_empty() {
            s.memcpy_htod(h, &mut fresh.slice_mut(keep.len() * *w..total * *w))?;
        }
        **a = fresh;
    }
    *n = total;
    *ids = new_ids;
    Ok(Moved {
        sent: order.len(),
        received: arrived,
        bytes: bytes_to_others(&bufs, me),
    })
}

/// The halo of the Gaussian sums received by this rank: positions (shifted across the seam),
/// strengths and core radii of the other ranks' particles (and of this rank's periodic
/// images) within `reach` cells of its planes, in source rank order.
pub struct Halo {
    pub pos: Vec<f64>,
    pub alpha: Vec<f64>,
    pub sigma: Vec<f64>,
    pub bytes: usize,
}

impl Halo {
    pub fn len(&self) -> usize {
        self.sigma.len()
    }
    pub fn is_empty(&self) -> bool {
        self.sigma.is_empty()
    }
}

/// Collective: the halo rows of every rank ([`halo_sends`] for the lattice of `n` planes per
/// side split by `bounds`), `pos`, `alpha` (`3 np` doubles) and `sigma` (`np`) this rank's
/// particles on the device.
#[allow(clippy::too_many_arguments)]
pub fn halo_rows(
    comm: &dyn Comm,
    k: &Kernels,
    s: &Arc<CudaStream>,
    (pos, alpha, sigma, np): (&CudaSlice<f64>, &CudaSlice<f64>, &CudaSlice<f64>, usize),
    bounds: &[usize],
    n: usize,
    box_length: f64,
    reach: usize,
) -> GpuResult<Halo> {
    let me = comm.rank();
    // the z coordinates decide; the rows of the chosen particles are gathered on the device
    let z: Vec<f64> = if np == 0 {
        Vec::new()
    } else {
        let all = s.clone_dtoh(&pos.slice(0..3 * np))?;
        all.chunks_exact(3).map(|r| r[2]).collect()
    };
    let sends = halo_sends(&z, me, bounds, n, box_length, reach);
    let order: Vec<u32> = sends.iter().flatten().map(|&(i, _)| i).collect();
    let idx = upload_idx(s, &order)?;
    let m = order.len();
    let p = s.clone_dtoh(&gather(k, s, pos, 3, &idx, m, 0)?)?;
    let a = s.clone_dtoh(&gather(k, s, alpha, 3, &idx, m, 0)?)?;
    let g = s.clone_dtoh(&gather(k, s, sigma, 1, &idx, m, 0)?)?;
    let mut rows: Vec<Vec<f64>> = vec![Vec::new(); comm.size()];
    let mut at = 0;
    for (q, list) in sends.iter().enumerate() {
        rows[q].reserve(7 * list.len());
        for &(_, shift) in list {
            rows[q].extend_from_slice(&[
                p[3 * at],
                p[3 * at + 1],
                p[3 * at + 2] + shift as f64 * box_length,
                a[3 * at],
                a[3 * at + 1],
                a[3 * at + 2],
                g[at],
            ]);
            at += 1;
        }
    }
    // rows travel as their bytes (bytemuck casts: one copy each way)
    let bufs: Vec<Vec<u8>> = rows
        .iter()
        .map(|r| bytemuck::cast_slice(r).to_vec())
        .collect();
    drop(rows);
    let recv = comm.alltoallv(&bufs);
    let mut h = Halo {
        pos: Vec::new(),
        alpha: Vec::new(),
        sigma: Vec::new(),
        bytes: bytes_to_others(&bufs, me),
    };
    for b in &recv {
        let v: Vec<f64> = bytemuck::pod_collect_to_vec(b);
        for r in v.chunks_exact(7) {
            h.pos.extend_from_slice(&r[0..3]);
            h.alpha.extend_from_slice(&r[3..6]);
            h.sigma.push(r[6]);
        }
    }
    Ok(h)
}

/// Bytes of the messages `bufs` (by destination rank) that leave rank `me`.
fn bytes_to_others(bufs: &[Vec<u8>], me: usize) -> usize {
    bufs.iter()
        .enumerate()
        .filter(|(q, _)| *q != me)
        .map(|(_, b)| b.len())
        .sum()
}
