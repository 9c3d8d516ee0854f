//! `vortex bench spectral`: the pseudo-spectral solver's time per RK4 step on the CPU or the GPU.
//!
//! With `--backend cuda` (or `auto` resolving to it) it first runs the GPU stepper and the CPU
//! stepper side by side for a few steps on a small grid and prints their relative difference
//! (an error, non-zero exit, above `--tol`); then, per grid size, the median wall time of
//! `--steps` RK4 steps after warm-up, on the Taylor-Green vortex (Re = 1600, dt = 1e-3), and the
//! memory per grid point.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::time::Instant;
use vortex_spectral::backend::{resolve, stepper_with_field, Stepper};
use vortex_spectral::config::{Backend, Dealias};
use vortex_spectral::solver::{product_grid, StepMode};
use vortex_spectral::{initial, VelocityField};

#[derive(Args, Debug)]
pub struct SpectralBench {
    /// Grid sizes, comma separated (e.g. 64,128,256).
    #[arg(long, value_delimiter = ',', default_value = "64,128")]
    pub n: Vec<usize>,
    /// auto (the GPU when usable), cpu or cuda.
    #[arg(long, default_value = "auto", value_parser = parse_backend)]
    pub backend: Backend,
    /// three-halves or two-thirds.
    #[arg(long, default_value = "three-halves", value_parser = parse_dealias)]
    pub dealias: Dealias,
    /// Timed steps per grid size (the median is shown).
    #[arg(long, default_value_t = 10)]
    pub steps: usize,
    /// Rayon threads of the CPU solver (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Grid of the GPU-vs-CPU check.
    #[arg(long, default_value_t = 32)]
    pub check_n: usize,
    /// Steps of the GPU-vs-CPU check.
    #[arg(long, default_value_t = 5)]
    pub check_steps: usize,
    /// Largest accepted relative L2 difference between the GPU and CPU states.
    #[arg(long, default_value_t = 1e-12)]
    pub tol: f64,
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    s.parse()
}

fn parse_dealias(s: &str) -> Result<Dealias, String> {
    match s {
        "three-halves" => Ok(Dealias::ThreeHalves),
        "two-thirds" => Ok(Dealias::TwoThirds),
        _ => Err(format!(
            "unknown dealiasing rule {s:?} (expected three-halves or two-thirds)"
        )),
    }
}

const NU: f64 = 1.0 / 1600.0;

/// Bytes per grid point of the solver's arrays on `backend` (cuFFT work areas and FFT plans not
/// counted).
fn bytes_per_point(n: usize, dealias: Dealias, backend: Backend) -> f64 {
    let (m, _) = product_grid(n, dealias);
    let clen = n * n * (n / 2 + 1);
    let bytes = match backend {
        Backend::Cuda => vortex_spectral::gpu::layout::device_bytes(n, dealias),
        // four spectral vector fields, two factor arrays, one padded spectrum, six real arrays
        _ => 12 * clen * 16 + 2 * clen * 8 + m * m * (m / 2 + 1) * 16 + 6 * m * m * m * 8,
    };
    bytes as f64 / (n * n * n) as f64
}

/// GPU and CPU steppers side by side on a random isotropic field; the relative difference.
fn check(b: &SpectralBench) -> Result<f64> {
    let n = b.check_n;
    let f = initial::isotropic(
        n,
        &initial::IsotropicParams {
            k_peak: 4.0,
            energy: Some(0.5),
            re_lambda: None,
            seed: 1,
            nu: 0.01,
        },
    );
    let mode = StepMode::Fixed(0.01);
    let mut g = stepper_with_field(&f, 0.01, b.dealias, mode, Backend::Cuda)?;
    let mut c = stepper_with_field(&f, 0.01, b.dealias, mode, Backend::Cpu)?;
    for _ in 0..b.check_steps {
        g.step()?;
        c.step()?;
    }
    let gs = g.state()?.clone();
    Ok(c.state()?.relative_diff(&gs))
}

fn time_steps(s: &mut dyn Stepper, steps: usize, n: usize) -> Result<(f64, f64)> {
    for k in 0..2 {
        let t0 = Instant::now();
        s.step()?; // warm-up (plans, caches, clocks)
        if k == 1 {
            super::bench_common::announce(
                "--steps",
                &format!("{steps} timed steps of n = {n}"),
                t0.elapsed().as_secs_f64() * steps as f64,
            )?;
        }
    }
    let mut t = Vec::with_capacity(steps);
    for _ in 0..steps {
        let t0 = Instant::now();
        s.step()?; // the GPU step ends with a device-to-host read: the time is the device's
        t.push(t0.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok((t[t.len() / 2], t[0]))
}

pub fn run(b: &SpectralBench) -> Result<()> {
    use super::bench_common::need_work;
    need_work(
        "--steps",
        b.steps,
        "no step would be timed (the median of nothing)",
    )?;
    need_work(
        "--check-steps",
        b.check_steps,
        "the GPU-vs-CPU check would compare two unchanged initial fields",
    )?;
    if !(b.tol.is_finite() && b.tol >= 0.0) {
        bail!("--tol {}: must be a finite value >= 0", b.tol);
    }
    // every size estimated before the first allocation
    let flags = b.n.iter().map(|&n| ("--n", n));
    for (flag, n) in flags.chain([("--check-n", b.check_n)]) {
        if n < 8 || n % 2 != 0 || n > 1 << 16 {
            bail!("{flag} {n}: a grid size must be even and in 8..=65536");
        }
        let bytes = bytes_per_point(n, b.dealias, Backend::Cpu) * (n as f64).powi(3);
        vortex_spectral::durable::check_memory(&format!("a spectral grid of n = {n}"), bytes)
            .map_err(|e| anyhow::anyhow!(e))?;
    }
    let pool = crate::thread_pool(b.threads)?;
    pool.install(|| run_in_pool(b))
}

fn run_in_pool(b: &SpectralBench) -> Result<()> {
    let backend = resolve(b.backend);
    if b.backend == Backend::Cuda {
        vortex_spectral::backend::cuda_usable()
            .map_err(|e| anyhow::anyhow!("--backend cuda: {e}"))?;
    }
    crate::outln!(
        "# vortex bench spectral: backend {backend} dealias {:?} steps {} threads {} commit {}",
        b.dealias,
        b.steps,
        rayon::current_num_threads(),
        env!("VORTEX_GIT_COMMIT")
    );
    if backend == Backend::Cuda {
        let d = check(b).context("GPU-vs-CPU check")?;
        crate::outln!(
            "# check: GPU vs CPU, isotropic field {}^3, {} steps: relative L2 difference {d:.3e} (tolerance {:.1e})",
            b.check_n, b.check_steps, b.tol
        );
        if d.is_nan() || d > b.tol {
            bail!(
                "GPU and CPU steppers differ by {d:.3e} (relative L2) after {} steps on {}^3, above {:.1e}",
                b.check_steps,
                b.check_n,
                b.tol
            );
        }
    }
    crate::outln!(
        "{:>6} {:>6} {:>24} {:>12} {:>12} {:>14} {:>12}",
        "n",
        "m",
        "backend",
        "median_ms",
        "min_ms",
        "Mpoints*step/s",
        "bytes/point"
    );
    for &n in &b.n {
        let f: VelocityField = initial::taylor_green(n);
        let mut s = stepper_with_field(&f, NU, b.dealias, StepMode::Fixed(1e-3), backend)
            .with_context(|| format!("n = {n}"))?;
        let (med, min) = time_steps(s.as_mut(), b.steps, n)?;
        let (m, _) = product_grid(n, b.dealias);
        log::info!("n = {n}: energy after the timed steps {:.12}", s.energy()?);
        crate::outln!(
            "{:>6} {:>6} {:>24} {:>12.3} {:>12.3} {:>14.1} {:>12.0}",
            n,
            m,
            s.backend_name(),
            med * 1e3,
            min * 1e3,
            (n * n * n) as f64 / med / 1e6,
            bytes_per_point(n, b.dealias, backend)
        );
        if crate::console::stdout_closed() {
            break;
        }
    }
    Ok(())
}
