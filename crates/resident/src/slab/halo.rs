//! The halo of the slab Gaussian sums on the device: the rows of this rank's particles within
//! the Gaussians' reach of another rank's lattice planes (or of its own planes across the
//! periodic seam), selected, packed and exchanged without a pass on the host. The rule is the
//! host twin's, [`super::owners::halo_sends`] (tested in CI against an enumeration of the
//! images): a particle's periodic z cell, shifted by `-n`, `0` or `+n` planes, within the
//! destination's planes widened by the reach; its row travels with `z` shifted by the same
//! multiple of the box length. Per (destination, shift) the kernel `r_halo_flag` marks the
//! particles, the device scan numbers them, `r_halo_rows` writes their rows; the rows of all
//! destinations go in one all-to-all over the run's [`DeviceExchange`].

use crate::kernels::{per_element, Kernels};
use crate::lattice::scan;
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;
use vortex_cuda::{GpuError, GpuResult};
use vortex_domain::Comm;
use vortex_exchange::{DeviceExchange, Parts};

/// Doubles per halo row: x, y, z, alpha (3), sigma.
pub const ROW: usize = 7;

/// The halo rows this rank received (source rank order), on the device.
pub struct DeviceHalo {
    /// `ROW len` doubles (at least one).
    pub rows: CudaSlice<f64>,
    pub len: usize,
    /// Bytes this rank sent to other ranks.
    pub bytes: usize,
}

/// The particles `(pos, alpha, sigma, np)` of this rank as seen by the lattice of `n` planes per
/// side, split at `bounds`.
pub struct HaloSource<'a> {
    pub pos: &'a CudaSlice<f64>,
    pub alpha: &'a CudaSlice<f64>,
    pub sigma: &'a CudaSlice<f64>,
    pub np: usize,
}

fn exchange_err(e: vortex_exchange::ExchangeError) -> GpuError {
    GpuError::Unsupported(format!("halo exchange: {e}"))
}

/// The rows this rank sends to rank `q` with the periodic shift `shift` (planes of `n`),
/// packed on the device; `None` when there are none.
#[allow(clippy::too_many_arguments)]
fn rows_to(
    k: &Kernels,
    s: &Arc<CudaStream>,
    p: &HaloSource<'_>,
    (flag, starts): (&mut CudaSlice<i32>, &mut CudaSlice<i32>),
    (lo, hi): (i64, i64),
    shift: i32,
    (n, box_length): (usize, f64),
) -> GpuResult<Option<(CudaSlice<f64>, usize)>> {
    let h = box_length / n as f64;
    let (np_i, nz, half) = (p.np as i32, n as i32, 0.5 * box_length);
    let (lo_i, hi_i) = (lo as i32, hi as i32);
    // pos holds 3 np doubles, flag np ints
    let cfg = per_element(p.np);
    k.halo_flag(
        s, cfg, p.pos, np_i, half, h, nz, shift, lo_i, hi_i, &mut *flag,
    )?;
    scan(k, s, flag, p.np, starts)?;
    let total = s.clone_dtoh(&starts.slice(p.np..p.np + 1))?[0] as usize;
    if total == 0 {
        return Ok(None);
    }
    let mut out = s.alloc_zeros::<f64>(ROW * total)?;
    let dz = shift as f64 * box_length;
    // pos and a hold 3 np doubles, sigma np, flag np ints, starts np + 1 (the exclusive scan
    // of flag: starts[i] < total for every flagged i), out ROW total doubles
    let (f, st) = (&*flag, &*starts);
    let cfg = per_element(p.np);
    k.halo_rows(s, cfg, p.pos, p.alpha, p.sigma, np_i, f, st, dz, &mut out)?;
    Ok(Some((out, total)))
}

/// Collective: the halo rows of every rank for the lattice of `n` planes per side split by
/// `bounds`, within `reach` planes, exchanged over `exchange`.
#[allow(clippy::too_many_arguments)]
pub fn halo_on_device(
    comm: &dyn Comm,
    exchange: &mut dyn DeviceExchange,
    k: &Kernels,
    s: &Arc<CudaStream>,
    p: HaloSource<'_>,
    bounds: &[usize],
    n: usize,
    box_length: f64,
    reach: usize,
) -> GpuResult<DeviceHalo> {
    let (me, ranks) = (comm.rank(), comm.size());
    let mut flag = s.alloc_zeros::<i32>(p.np.max(1))?;
    let mut starts = s.alloc_zeros::<i32>(p.np + 1)?;
    // per destination, its pieces (one per shift) in shift order
    let mut pieces: Vec<Vec<(CudaSlice<f64>, usize)>> = (0..ranks).map(|_| Vec::new()).collect();
    let (n_i, r) = (n as i64, reach as i64);
    for (q, dest) in pieces.iter_mut().enumerate() {
        let (a, b) = (bounds[q] as i64, bounds[q + 1] as i64);
        if a == b || p.np == 0 {
            continue;
        }
        for shift in [-1i64, 0, 1] {
            let (lo, hi) = (a - r, b + r);
            // the shifted cells c + shift n, c in 0..n, must meet [lo, hi)
            if (q == me && shift == 0) || shift * n_i + n_i <= lo || shift * n_i >= hi {
                continue;
            }
            let bufs = (&mut flag, &mut starts);
            if let Some(piece) = rows_to(k, s, &p, bufs, (lo, hi), shift as i32, (n, box_length))? {
                dest.push(piece);
            }
        }
    }
    // the send buffer, by destination; the counts told to every rank
    let counts: Vec<usize> = pieces.iter().map(|v| v.iter().map(|x| x.1).sum()).collect();
    let total: usize = counts.iter().sum();
    let mut send = s.alloc_zeros::<f64>((ROW * total).max(1))?;
    let mut at = 0;
    for (piece, m) in pieces.iter().flatten() {
        s.memcpy_dtod(piece, &mut send.slice_mut(ROW * at..ROW * (at + m)))?;
        at += m;
    }
    let msgs: Vec<Vec<u8>> = counts
        .iter()
        .map(|c| (*c as u64).to_le_bytes().to_vec())
        .collect();
    let got: Vec<usize> = comm
        .alltoallv(&msgs)
        .iter()
        .map(|b| u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as usize)
        .collect();
    let ranges = |c: &[usize]| -> Vec<std::ops::Range<usize>> {
        let mut at = 0;
        c.iter()
            .map(|&m| {
                at += ROW * m;
                at - ROW * m..at
            })
            .collect()
    };
    let parts = Parts::new(me, ranges(&counts), ranges(&got)).map_err(exchange_err)?;
    let len: usize = got.iter().sum();
    let mut rows = s.alloc_zeros::<f64>((ROW * len).max(1))?;
    let bytes = exchange
        .alltoallv(comm, &send, &mut rows, &parts)
        .map_err(exchange_err)?;
    Ok(DeviceHalo { rows, len, bytes })
}

/// The halo rows into the particle arrays from particle `at` on (`pos`, `alpha`: 3 doubles per
/// particle, `sigma`: 1; room for `at + halo.len` particles).
pub fn split_rows(
    k: &Kernels,
    s: &Arc<CudaStream>,
    halo: &DeviceHalo,
    (pos, alpha, sigma): (
        &mut CudaSlice<f64>,
        &mut CudaSlice<f64>,
        &mut CudaSlice<f64>,
    ),
    at: usize,
) -> GpuResult<()> {
    let m = halo.len;
    if m == 0 {
        return Ok(());
    }
    if sigma.len() < at + m || pos.len() < 3 * (at + m) || alpha.len() < 3 * (at + m) {
        return Err(GpuError::Unsupported(format!(
            "halo rows: {m} rows from particle {at} into arrays of {} particles",
            sigma.len()
        )));
    }
    let m_i = m as i32;
    let (mut pv, mut av, mut sv) = (
        pos.slice_mut(3 * at..),
        alpha.slice_mut(3 * at..),
        sigma.slice_mut(at..),
    );
    // rows holds ROW m doubles, the views 3 m, 3 m and m from particle `at` (checked above)
    k.halo_split(
        s,
        per_element(m),
        &halo.rows,
        m_i,
        &mut pv,
        &mut av,
        &mut sv,
    )?;
    Ok(())
}
