//! `vortex bench reinterp`: the periodic re-interpolation with its Gaussian sums by spreading
//! (`reinterpolation.sums = { kind = "spread" }`) per lattice size, on the CPU (the f64 twin)
//! or one GPU: the time of each phase (binning, spread, FFT of the fine grid, deconvolution and
//! folding, the Fourier solve, the fresh particles), the direct route's two phases for
//! comparison (`dsums_ms`: the truncated sums at every lattice point with their binning;
//! `dsolve_ms`: its solve, the matrix truncated as the sums), and the relative L2 error of the
//! spread lattice values against the direct Gaussian sums (cutoff 8 core radii: truncation
//! `exp(-32)`) at sampled lattice points, beside the design's estimate.
//!
//! The particles are fresh random ones: the `n^3` lattice of the box `2 pi`, each point
//! displaced by a uniform vector of `[-h/2, h/2]^3`, strengths uniform in `[-1, 1]^3`, the
//! core `growth * overlap * h` (the cores at a re-interpolation have grown from `sigma0`).

use super::bench_common::show;
use crate::planner::resolve;
use anyhow::{bail, Context, Result};
use clap::Args;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::f64::consts::PI;
use std::time::Instant;
use vortex_fmm::expansions::Complex64;
use vortex_fmm::planner::Device;
use vortex_fmm::BackendChoice;
use vortex_method::cells::gaussian_sum;
use vortex_method::reinterpolation::spreading::{
    fold, jittered_lattice, SpreadPlan, SpreadTimes, UNTRUNCATED,
};
use vortex_method::reinterpolation::{fresh_particles, solve, Lattice, LatticeFilter, RbfSettings};
use vortex_method::Particles;
use vortex_spectral::fft::Fft3;

#[derive(Args, Debug)]
pub struct ReinterpBench {
    /// Lattice points per axis, comma separated (even; e.g. 64,128,256).
    #[arg(long, value_delimiter = ',', default_value = "64,128")]
    pub n: Vec<usize>,
    /// auto (the GPU when usable), cpu (the f64 twin) or cuda.
    #[arg(long, default_value = "auto")]
    pub backend: BackendChoice,
    /// GPU index among the visible devices.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Relative error of the lattice values (`reinterpolation.sums.tolerance`; on the GPU the
    /// grid is f32 from 1e-6 up).
    #[arg(long, default_value_t = 1e-6)]
    pub tolerance: f64,
    /// `sigma0 / h` of the fresh particles (`initial.overlap`).
    #[arg(long, default_value_t = 0.8)]
    pub overlap: f64,
    /// Core of the old particles over `sigma0` (at most `reinterpolation.ratio`).
    #[arg(long, default_value_t = 1.2)]
    pub growth: f64,
    /// Lattice points sampled for the error against the direct sums.
    #[arg(long, default_value_t = 2000)]
    pub samples: usize,
    /// Runs per size; the table shows the fastest of each phase.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// On the CPU, time the direct route for lattices up to this size only (its sums visit
    /// about 1500 particles per point).
    #[arg(long, default_value_t = 64)]
    pub direct_max: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Rayon threads of the host work (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Milliseconds of each phase of one re-interpolation (the fastest of the repeats).
#[derive(Clone, Copy, Debug)]
struct Phases {
    bin: f64,
    spread: f64,
    fft: f64,
    fold: f64,
    solve: f64,
    fresh: f64,
}

impl Phases {
    fn new() -> Self {
        Self {
            bin: f64::INFINITY,
            spread: f64::INFINITY,
            fft: f64::INFINITY,
            fold: f64::INFINITY,
            solve: f64::INFINITY,
            fresh: f64::INFINITY,
        }
    }

    fn keep_fastest(&mut self, o: &Phases) {
        self.bin = self.bin.min(o.bin);
        self.spread = self.spread.min(o.spread);
        self.fft = self.fft.min(o.fft);
        self.fold = self.fold.min(o.fold);
        self.solve = self.solve.min(o.solve);
        self.fresh = self.fresh.min(o.fresh);
    }

    fn total(&self) -> f64 {
        self.bin + self.spread + self.fft + self.fold + self.solve + self.fresh
    }
}

/// The direct route's milliseconds (the fastest of the repeats; `NaN`: not timed): the
/// truncated Gaussian sums at every lattice point (with their binning) and the solve.
#[derive(Clone, Copy, Debug)]
struct Direct {
    sums: f64,
    solve: f64,
}

impl Direct {
    const NOT_TIMED: Direct = Direct {
        sums: f64::NAN,
        solve: f64::NAN,
    };
}

/// One size: the phases, the lattice spectra (`3 clen`, for the error) and the direct route's
/// phases.
struct Measured {
    phases: Phases,
    spectra: Vec<Complex64>,
    direct: Direct,
    precision: &'static str,
}

/// The fresh random particles of the module documentation
/// (`vortex_method::reinterpolation::spreading::jittered_lattice`).
fn particles(n: usize, core: f64, seed: u64) -> Particles {
    let (pos, alpha) = jittered_lattice(n, 2.0 * PI, seed);
    Particles::new(pos, alpha, core)
}

/// Bytes per lattice point besides the fine grid: the particles (56), the lattice spectra and
/// the strengths (72), the lattice values of the error (24) and slack.
const BYTES_PER_POINT: f64 = 200.0;

/// The arguments that are not lattice sizes, each refused by name before any work: the
/// overlap by the rule of `initial.overlap`, the old cores narrower than a quarter of the box
/// (the rule of a run's cores), at least one sample and one repeat.
fn check_arguments(b: &ReinterpBench) -> Result<()> {
    use vortex_method::config::{MAX_OVERLAP, MIN_OVERLAP};
    if !(MIN_OVERLAP..=MAX_OVERLAP).contains(&b.overlap) {
        bail!(
            "--overlap {}: sigma0 / h must lie in [{MIN_OVERLAP}, {MAX_OVERLAP}] (the range of \
             initial.overlap)",
            show(b.overlap)
        );
    }
    if !(b.growth >= 1.0 && b.growth.is_finite()) {
        bail!(
            "--growth {}: the old cores are at least sigma0 (>= 1)",
            show(b.growth)
        );
    }
    for &n in &b.n {
        // the old cores' radius growth * overlap * h against a quarter of the box, L / 4
        let quarter = n as f64 / 4.0;
        if b.growth * b.overlap > quarter {
            bail!(
                "--growth {} with --overlap {} and --n {n}: old cores of radius {:.3} h are \
                 wider than a quarter of the box ({quarter} h); the periodic sums need a box at \
                 least 4 core radii wide",
                show(b.growth),
                show(b.overlap),
                b.growth * b.overlap
            );
        }
    }
    super::bench_common::need_work(
        "--samples",
        b.samples,
        "no lattice point would be compared with the direct sums (the error would be NaN)",
    )?;
    super::bench_common::need_work("--repeat", b.repeat, "no re-interpolation would be timed")?;
    Ok(())
}

pub fn run(b: &ReinterpBench) -> Result<()> {
    let device = resolve(b.backend);
    for &n in &b.n {
        if n < 4 || n % 2 != 0 || n > 4096 {
            bail!("--n {n}: a lattice size must be even and in 4..=4096");
        }
    }
    check_arguments(b)?;
    let mut plans = Vec::new();
    for &n in &b.n {
        if n < 4 || n % 2 != 0 || n > 4096 {
            bail!("--n {n}: a lattice size must be even and in 4..=4096");
        }
        let sigma0 = b.overlap * 2.0 * PI / n as f64;
        let t0 = Instant::now();
        let plan = SpreadPlan::new(n, 2.0 * PI, sigma0, b.tolerance)
            .map_err(|e| anyhow::anyhow!("--tolerance {:e}, --n {n}: {e}", b.tolerance))?;
        let plan_s = t0.elapsed().as_secs_f64();
        // every size estimated before the first allocation
        let fine_host = if device == Device::Cpu {
            plan.host_bytes()
        } else {
            0.0
        };
        vortex_spectral::durable::check_memory(
            &format!("--n {n} ({}^3 fine grid)", plan.design.fine),
            fine_host + BYTES_PER_POINT * (n as f64).powi(3),
        )
        .map_err(|e| anyhow::anyhow!(e))?;
        plans.push((plan, plan_s));
    }
    let pool = crate::thread_pool(b.threads)?;
    pool.install(|| run_in_pool(b, device, &plans))
}

fn run_in_pool(b: &ReinterpBench, device: Device, plans: &[(SpreadPlan, f64)]) -> Result<()> {
    crate::outln!(
        "# vortex bench reinterp: backend {device:?} tolerance {:e} overlap {} growth {} \
         threads {} commit {}",
        b.tolerance,
        b.overlap,
        b.growth,
        rayon::current_num_threads(),
        env!("VORTEX_GIT_COMMIT")
    );
    crate::outln!(
        "{:>5} {:>5} {:>3} {:>4} {:>7} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "n", "m", "w", "prec", "plan_s", "bin_ms", "spread_ms", "fft_ms", "fold_ms", "solve_ms",
        "fresh_ms", "total_ms", "dsums_ms", "dsolve_ms", "err", "estimate"
    );
    for (plan, plan_s) in plans {
        let n = plan.n;
        let sigma0 = plan.sigma_min;
        let p = particles(n, b.growth * sigma0, b.seed);
        let m = match device {
            Device::Cpu => measure_cpu(b, plan, &p)?,
            Device::Cuda => measure_cuda(b, plan, &p)?,
        };
        let err = sampled_error(b, plan, &p, &m.spectra)?;
        crate::outln!(
            "{:>5} {:>5} {:>3} {:>4} {:>7.2} {:>8.2} {:>9.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2e} {:>9.2e}",
            n,
            plan.design.fine,
            plan.design.kernel.width,
            m.precision,
            plan_s,
            m.phases.bin,
            m.phases.spread,
            m.phases.fft,
            m.phases.fold,
            m.phases.solve,
            m.phases.fresh,
            m.phases.total(),
            m.direct.sums,
            m.direct.solve,
            err,
            plan.design.white,
        );
        if crate::console::stdout_closed() {
            break;
        }
    }
    Ok(())
}

/// The relative L2 error of the lattice values of `spectra` against the direct Gaussian sums
/// (cutoff 8 core radii) at `samples` random lattice points.
fn sampled_error(
    b: &ReinterpBench,
    plan: &SpreadPlan,
    p: &Particles,
    spectra: &[Complex64],
) -> Result<f64> {
    let n = plan.n;
    let lat = Lattice::periodic_box(n, 2.0 * PI);
    let mut rng = ChaCha8Rng::seed_from_u64(b.seed + 1);
    let idx = sample(&mut rng, lat.len(), b.samples.min(lat.len())).into_vec();
    let targets: Vec<[f64; 3]> = idx.iter().map(|&i| lat.point(i)).collect();
    let direct = gaussian_sum(
        &p.position,
        &p.strength,
        &p.sigma,
        &targets,
        8.0,
        Some(2.0 * PI),
    );
    let fft = Fft3::new(n);
    let clen = fft.complex_len();
    if spectra.len() != 3 * clen {
        bail!("{} spectral values for n = {n}", spectra.len());
    }
    let (mut d, mut r) = (0.0, 0.0);
    for c in 0..3 {
        let mut w = spectra[c * clen..(c + 1) * clen].to_vec();
        let v = fold::lattice_values(&fft, &mut w);
        for (&i, y) in idx.iter().zip(&direct) {
            d += (v[i] - y[c]).powi(2);
            r += y[c] * y[c];
        }
    }
    Ok((d / r).sqrt())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The host twin: phases of `lattice_spectra_timed`, the solve, the fresh particles; the
/// direct route (cell-list sums and the separable solve) for `n <= direct_max`.
fn measure_cpu(b: &ReinterpBench, plan: &SpreadPlan, p: &Particles) -> Result<Measured> {
    let n = plan.n;
    let sigma0 = plan.sigma_min;
    let lat = Lattice::periodic_box(n, 2.0 * PI);
    let filter = LatticeFilter::default();
    let inv_eig = fold::inverse_eigenvalues(n, lat.h, sigma0, UNTRUNCATED, &filter)
        .map_err(|e| anyhow::anyhow!(e))?;
    let fft = Fft3::new(n);
    let settings = RbfSettings {
        filter,
        ..Default::default()
    };
    let mut best = Phases::new();
    let mut spectra = Vec::new();
    for rep in 0..b.repeat {
        let t_rep = Instant::now();
        let mut t = SpreadTimes::default();
        let w = plan
            .lattice_spectra_timed(&p.position, &p.strength, &p.sigma, &mut t)
            .map_err(|e| anyhow::anyhow!(e))?;
        spectra = w.concat();
        let t0 = Instant::now();
        let mut beta = vec![[0.0; 3]; n * n * n];
        for (c, mut wc) in w.into_iter().enumerate() {
            for (bj, x) in beta
                .iter_mut()
                .zip(fold::solve_spectrum(&fft, &mut wc, &inv_eig, sigma0))
            {
                bj[c] = x;
            }
        }
        let solve_ms = ms(t0);
        let t1 = Instant::now();
        let fresh = fresh_particles(&lat, sigma0, &beta, &settings);
        let fresh_ms = ms(t1);
        log::debug!("{} fresh particles", fresh.0.len());
        best.keep_fastest(&Phases {
            bin: t.bin * 1e3,
            spread: t.spread * 1e3,
            fft: t.fft * 1e3,
            fold: t.fold * 1e3,
            solve: solve_ms,
            fresh: fresh_ms,
        });
        if rep == 0 {
            super::bench_common::announce(
                "--repeat",
                &format!("the other {} re-interpolations of n = {n}", b.repeat - 1),
                t_rep.elapsed().as_secs_f64() * (b.repeat - 1) as f64,
            )?;
        }
    }
    let direct = if n <= b.direct_max {
        let t0 = Instant::now();
        let omega = gaussian_sum(
            &p.position,
            &p.strength,
            &p.sigma,
            &lat.points(),
            settings.cutoff,
            Some(2.0 * PI),
        );
        let sums = ms(t0);
        let t1 = Instant::now();
        solve(&lat, sigma0, &omega, &settings).context("the direct route's solve")?;
        Direct {
            sums,
            solve: ms(t1),
        }
    } else {
        Direct::NOT_TIMED
    };
    Ok(Measured {
        phases: best,
        spectra,
        direct,
        precision: "f64",
    })
}

/// Refuses a size whose spreading grid and particles do not fit the device's free memory.
#[cfg(feature = "cuda")]
fn check_fits(dev: &vortex_gpu::GpuDevice, plan: &SpreadPlan) -> Result<()> {
    use vortex_resident::spreading::{device_bytes, Precision};
    let n = plan.n;
    let precision = Precision::for_tolerance(plan.tolerance);
    let need = device_bytes(plan, precision) + BYTES_PER_POINT * (n as f64).powi(3);
    let (free, _) = dev.mem_info()?;
    if need > free as f64 {
        bail!(
            "--n {n}: the spreading grid of {}^3 points and the particles need about {:.2} GiB \
             on {}, {:.2} GiB are free",
            plan.design.fine,
            need / (1u64 << 30) as f64,
            dev.name(),
            free as f64 / (1u64 << 30) as f64
        );
    }
    Ok(())
}

#[cfg(feature = "cuda")]
fn measure_cuda(b: &ReinterpBench, plan: &SpreadPlan, p: &Particles) -> Result<Measured> {
    use vortex_domain::SelfComm;
    use vortex_exchange::{TransportChoice, DEFAULT_TIMEOUT};
    use vortex_resident::kernels::Kernels;
    use vortex_resident::lattice::{lattice_particles, Planes};
    use vortex_resident::reinterpolation::inverse_eigenvalues;
    use vortex_resident::slab::lattice::{slab_vorticity, to_lattice_order, SlabLattice};
    use vortex_resident::slab_fourier::{Ranks, SlabAxis, SlabFourier, SlabLayout};
    use vortex_resident::spreading::{half_spectra, DeviceSpread, Precision};
    use vortex_resident::state::DeviceParticles;

    let dev = vortex_gpu::GpuDevice::get(b.device).context("--backend cuda")?;
    let s = dev.stream().clone();
    let n = plan.n;
    check_fits(&dev, plan)?;
    let k = Kernels::load(&dev)?;
    let mut sp = DeviceSpread::new(&dev, plan.clone())?;
    let dp = DeviceParticles::upload(&s, p)?;
    // the transforms and the Gaussian sums of the run on one rank: one slab of every plane
    let comm = SelfComm;
    let mut x = vortex_exchange::open(&comm, s.clone(), TransportChoice::Auto, DEFAULT_TIMEOUT)?;
    let layout = SlabLayout::new(n, &[0, n], 0, SlabAxis::Z)?;
    let mut f = SlabFourier::new(&dev, s.clone(), layout)?;
    let lat = Lattice::periodic_box(n, 2.0 * PI);
    let settings = RbfSettings::default();
    let slab = SlabLattice::new(n, 2.0 * PI, vec![0, n], 0, settings.cutoff, p.sigma[0])?;
    let sigma0 = plan.sigma_min;
    let filter = LatticeFilter::default();
    let c = (2.0 * PI * sigma0 * sigma0).powf(-1.5);
    let exact = s.clone_htod(
        &inverse_eigenvalues(n, lat.h, sigma0, UNTRUNCATED, &filter)
            .map_err(|e| anyhow::anyhow!(e))?,
    )?;
    let core = p.sigma[0];
    let sync = || s.synchronize().context("synchronize");
    let mut best = Phases::new();
    // one untimed run first: kernel compilation, cuFFT plan warm-up
    for rep in 0..=b.repeat.max(1) {
        sync()?;
        let t0 = Instant::now();
        if rep == 2 {
            // the first timed run (rep 1) measures the rest
            super::bench_common::announce(
                "--repeat",
                &format!("the other {} re-interpolations of n = {n}", b.repeat - 1),
                best.total() * 1e-3 * (b.repeat - 1) as f64,
            )?;
        }
        let binned = sp.bin(&k, &s, (&dp).into())?;
        sync()?;
        let mut ph = Phases {
            bin: ms(t0),
            spread: 0.0,
            fft: 0.0,
            fold: 0.0,
            solve: 0.0,
            fresh: 0.0,
        };
        for comp in 0..3 {
            let t = Instant::now();
            sp.spread(&s, &binned, comp)?;
            sync()?;
            ph.spread += ms(t);
            let t = Instant::now();
            sp.transform(&s)?;
            sync()?;
            ph.fft += ms(t);
            let t = Instant::now();
            sp.fold(&s, core, f.pencil_mut(), comp)?;
            sync()?;
            ph.fold += ms(t);
        }
        drop(binned);
        let t = Instant::now();
        let mut field = s.alloc_zeros::<f64>(3 * n * n * n)?;
        let ranks = Ranks {
            comm: &comm,
            exchange: &mut *x,
        };
        f.solve_rbf_pencil(ranks, &mut field, &exact, c)?;
        sync()?;
        ph.solve = ms(t);
        let t = Instant::now();
        let alpha = to_lattice_order(&k, &s, &field, &slab)?;
        let fresh = lattice_particles(
            &k,
            &s,
            n,
            lat.origin[0],
            lat.h,
            sigma0,
            Planes::all(&lat),
            alpha,
        )?;
        sync()?;
        ph.fresh = ms(t);
        drop(fresh);
        if rep > 0 {
            best.keep_fastest(&ph);
        }
    }
    // the spectra, for the error
    let binned = sp.bin(&k, &s, (&dp).into())?;
    for comp in 0..3 {
        sp.spread(&s, &binned, comp)?;
        sp.transform(&s)?;
        sp.fold(&s, core, f.pencil_mut(), comp)?;
    }
    drop(binned);
    let spectra = half_spectra(&s.clone_dtoh(f.pencil_mut())?, n);
    // the direct route on the device: binning, truncated sums at every point, the solve
    let truncated = s.clone_htod(
        &inverse_eigenvalues(n, lat.h, sigma0, settings.cutoff, &filter)
            .map_err(|e| anyhow::anyhow!(e))?,
    )?;
    let mut direct = Direct {
        sums: f64::INFINITY,
        solve: f64::INFINITY,
    };
    for _ in 0..b.repeat.max(1) {
        sync()?;
        let t = Instant::now();
        let cutoff = settings.cutoff;
        let (mut field, _) = slab_vorticity(&comm, &mut *x, &k, &s, &dp, &slab, cutoff, core)?;
        sync()?;
        direct.sums = direct.sums.min(ms(t));
        let t = Instant::now();
        let ranks = Ranks {
            comm: &comm,
            exchange: &mut *x,
        };
        f.solve_rbf(ranks, &mut field, &truncated, c)?;
        sync()?;
        direct.solve = direct.solve.min(ms(t));
    }
    Ok(Measured {
        phases: best,
        spectra,
        direct,
        precision: match sp.precision {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        },
    })
}

#[cfg(not(feature = "cuda"))]
fn measure_cuda(_: &ReinterpBench, _: &SpreadPlan, _: &Particles) -> Result<Measured> {
    bail!("--backend cuda: this binary was built without the cuda feature")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(n: usize, tolerance: f64) -> ReinterpBench {
        ReinterpBench {
            n: vec![n],
            backend: BackendChoice::Cpu,
            device: 0,
            tolerance,
            overlap: 0.8,
            growth: 1.2,
            samples: 300,
            repeat: 1,
            direct_max: n,
            seed: 5,
            threads: None,
        }
    }

    /// The host twin's lattice values against the direct Gaussian sums at the sampled points:
    /// within the tolerance asked for (1e-9, the f64 figure of the spreading design), and the
    /// direct route timed.
    #[test]
    fn the_cpu_route_meets_the_tolerance_against_the_direct_sums() {
        let b = bench(16, 1e-9);
        let sigma0 = b.overlap * 2.0 * PI / 16.0;
        let plan = SpreadPlan::new(16, 2.0 * PI, sigma0, b.tolerance).unwrap();
        let p = particles(16, b.growth * sigma0, b.seed);
        let m = measure_cpu(&b, &plan, &p).unwrap();
        let err = sampled_error(&b, &plan, &p, &m.spectra).unwrap();
        assert!(err < 1e-9, "{err:e}");
        assert!(m.direct.sums.is_finite() && m.direct.solve.is_finite());
        assert!(m.phases.total().is_finite());
    }

    /// A bad size, tolerance or growth is refused before any work, naming the flag.
    #[test]
    fn bad_arguments_are_refused_by_name() {
        let e = run(&bench(15, 1e-6)).unwrap_err().to_string();
        assert!(e.contains("--n 15"), "{e}");
        let e = run(&bench(16, 1e-20)).unwrap_err().to_string();
        assert!(e.contains("--tolerance"), "{e}");
        let mut b = bench(16, 1e-6);
        b.growth = 0.5;
        let e = run(&b).unwrap_err().to_string();
        assert!(e.contains("--growth 0.5"), "{e}");
        for (overlap, growth, flag) in [
            (-1.0, 1.2, "--overlap -1"),
            (0.0, 1.2, "--overlap 0"),
            (f64::NAN, 1.2, "--overlap NaN"),
            (f64::INFINITY, 1.2, "--overlap inf"),
            (0.8, 1e308, "--growth 1e308"),
            (0.8, f64::INFINITY, "--growth inf"),
        ] {
            let mut b = bench(16, 1e-6);
            (b.overlap, b.growth) = (overlap, growth);
            let e = run(&b).unwrap_err().to_string();
            assert!(e.contains(flag), "{flag}: {e}");
        }
        for (samples, repeat, flag) in [(0, 1, "--samples 0"), (10, 0, "--repeat 0")] {
            let mut b = bench(16, 1e-6);
            (b.samples, b.repeat) = (samples, repeat);
            let e = run(&b).unwrap_err().to_string();
            assert!(e.contains(flag), "{flag}: {e}");
        }
    }
}
