//! `vortex bench slab-fft`: the slab-decomposed FFT of the re-interpolation on the GPUs of the
//! job (under `mpirun`, one GPU per rank): the periodic RBF lattice solve of an `n^3` lattice
//! of three components (`vortex_resident::slab_fourier::SlabFourier::solve_rbf`: forward
//! transform, pointwise factor, inverse), its time per phase (2-D transforms of the own
//! planes, packing, the all-to-all exchanges, 1-D transforms along z), the bytes each rank
//! sends per transpose and their rate, and the result against the CPU twin on the same split
//! (`HostSlabFourier`, f64).

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;
use vortex_domain::{Comm, ReduceOp, TransportChoice};

#[derive(Args, Debug)]
pub struct SlabFftBench {
    /// Lattice sizes n (points per side), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "64,128,256")]
    pub n: Vec<usize>,
    /// How the GPUs exchange the spectra: auto | nccl | pinned.
    #[arg(long, default_value = "auto")]
    pub exchange: TransportChoice,
    /// Timed solves per size (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// Skip the check against the CPU twin (large n on few cores).
    #[arg(long)]
    pub no_check: bool,
}

pub fn run(b: &SlabFftBench) -> Result<()> {
    if b.repeat == 0 {
        bail!("--repeat 0: at least one timed solve");
    }
    if let Some(&n) = b.n.iter().find(|&&n| !(2..=2048).contains(&n)) {
        bail!("--n {n}: a lattice size must lie in 2..=2048");
    }
    crate::ranks::with_comm(|comm, local_rank| {
        #[cfg(feature = "cuda")]
        {
            cuda::run(b, comm, local_rank)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (comm, local_rank);
            bail!("vortex bench slab-fft needs the `cuda` feature")
        }
    })
}

/// The median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A random lattice field of rank `comm.rank()`'s planes (the same global field for any R).
fn field_piece(n: usize, planes: std::ops::Range<usize>) -> Vec<f64> {
    let plane = 3 * n * n;
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let mut all = vec![0.0; plane * planes.end];
    all.iter_mut().for_each(|v| *v = rng.gen_range(-1.0..1.0));
    all.split_off(plane * planes.start)
}

fn rel_l2(comm: &dyn Comm, a: &[f64], b: &[f64]) -> f64 {
    let mut s = [0.0, 0.0];
    for (x, y) in a.iter().zip(b) {
        s[0] += (x - y) * (x - y);
        s[1] += y * y;
    }
    comm.allreduce_f64(&mut s, ReduceOp::Sum);
    (s[0] / s[1].max(f64::MIN_POSITIVE)).sqrt()
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use vortex_method::reinterpolation::filter::LatticeFilter;
    use vortex_resident::reinterpolation::inverse_eigenvalues;
    use vortex_resident::slab_fourier::{
        even_bounds, HostSlabFourier, Ranks, SlabAxis, SlabFourier, SlabLayout, SlabTimes,
    };

    pub(super) fn run(b: &SlabFftBench, comm: &dyn Comm, local_rank: usize) -> Result<()> {
        let index = crate::planner::device_for_rank(comm, local_rank, 0);
        let dev = vortex_gpu::GpuDevice::get(index).context("bench slab-fft: the GPU")?;
        let s = dev.context().new_stream()?;
        let mut x = vortex_exchange::open(
            comm,
            s.clone(),
            b.exchange,
            vortex_exchange::DEFAULT_TIMEOUT,
        )
        .with_context(|| format!("--exchange {:?}", b.exchange))?;
        if comm.rank() == 0 {
            crate::outln!(
                "slab FFT: RBF solve (3 components, forward + inverse) on {} ranks, {} each, transport {}",
                comm.size(),
                dev.name(),
                x.transport()
            );
            crate::outln!("| n | ms per solve | 2-D planes | pack | exchange | along z | MB sent per transpose (rank 0) | GB/s per rank | error vs CPU |");
            crate::outln!("|---|---|---|---|---|---|---|---|---|");
        }
        for &n in &b.n {
            let layout =
                SlabLayout::new(n, &even_bounds(n, comm.size()), comm.rank(), SlabAxis::Z)?;
            let mine = field_piece(n, layout.planes(comm.rank()));
            let h = 2.0 * std::f64::consts::PI / n as f64;
            let eig = inverse_eigenvalues(n, h, 1.2 * h, 6.0, &LatticeFilter::default())
                .map_err(|e| anyhow::anyhow!("n = {n}: {e}"))?;
            let c = (2.0 * std::f64::consts::PI * 1.44 * h * h).powf(-1.5);
            let mut fft = SlabFourier::new(&dev, s.clone(), layout.clone())?;
            let d_eig = s.clone_htod(&eig)?;
            let mut times = Vec::new();
            let mut phases = SlabTimes::default();
            let mut out = Vec::new();
            for k in 0..=b.repeat {
                let mut f = s.clone_htod(if mine.is_empty() { &[0.0][..] } else { &mine })?;
                // the untimed phase pass: each phase synchronised (the second run), the
                // timed solves without synchronisation inside
                fft.set_timed(k == 1);
                comm.barrier();
                s.synchronize()?;
                let t = Instant::now();
                fft.solve_rbf(
                    Ranks {
                        comm,
                        exchange: &mut *x,
                    },
                    &mut f,
                    &d_eig,
                    c,
                )?;
                s.synchronize()?;
                let mut dt = [t.elapsed().as_secs_f64()];
                comm.allreduce_f64(&mut dt, ReduceOp::Max);
                if k == 1 {
                    phases = fft.take_times();
                } else if k > 1 {
                    times.push(dt[0]);
                }
                if k == b.repeat {
                    out = s.clone_dtoh(&f)?;
                    out.truncate(mine.len());
                }
            }
            if b.repeat == 1 {
                times.push(phases.planes + phases.pack + phases.exchange + phases.along_s);
            }
            let err = if b.no_check {
                f64::NAN
            } else {
                let mut host = HostSlabFourier::new(layout.clone());
                let mut f = mine.clone();
                host.solve_rbf(comm, &mut f, &eig, c)?;
                rel_l2(comm, &out, &f)
            };
            let per = layout.bytes_sent_per_transpose() as f64;
            let xfer = phases.exchange / phases.transposes.max(1) as f64;
            if comm.rank() == 0 {
                crate::outln!(
                    "| {n} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {err:.1e} |",
                    1e3 * median(&mut times),
                    1e3 * phases.planes,
                    1e3 * phases.pack,
                    1e3 * phases.exchange,
                    1e3 * phases.along_s,
                    per / 1e6,
                    per / xfer.max(1e-12) / 1e9,
                );
            }
            if !b.no_check && (err.is_nan() || err >= 1e-12) {
                bail!("n = {n}: the device solve differs from the CPU twin by {err:.2e} (bound 1e-12)");
            }
        }
        Ok(())
    }
}
