//! `vortex bench`: timings and accuracy of the engine, printed as tables for BENCHMARKS.md.
//!
//! * `vortex bench fmm`: per N and p, time per phase, the relative L2 errors of velocity and
//!   stretching against the f64 direct sum on a random sample of targets, the far-field
//!   translations (M2L, or M2P for the treecode) and P2P pairs per second of wall time, and on
//!   the GPU the speed-up over the CPU backend (same parameters, N <= `--cpu-max`).
//! * `vortex bench m2l`: time of one M2L translation, rotation-based O(p^3) vs plain O(p^4).
//! * `vortex bench spectral`, `vortex bench reinterp`: their own modules.

use super::bench_common::{announce, expected_share, need_work, thread_cpu_s};
use crate::planner::{request_at_sources, resolve, uniform_core_cutoff};
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use rand::{seq::index::sample, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;
use vortex_fmm::evaluators::direct::direct;
use vortex_fmm::expansions::{expansion_len, Complex64};
use vortex_fmm::operators::{Operators, Scratch};
use vortex_fmm::planner::Device;
use vortex_fmm::testsets::{generate, Distribution};
use vortex_fmm::{
    relative_l2_error, BackendChoice, EvalParams, Evaluation, GridChoice, M2lKernel, Method,
    TargetSpec, Targets,
};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchKind,
}

#[derive(Subcommand, Debug)]
pub enum BenchKind {
    /// Time per phase and error vs the direct sum, for several N and p.
    Fmm(FmmBench),
    /// Time of one M2L: rotation-based O(p^3) vs plain O(p^4).
    M2l(M2lBench),
    /// Pseudo-spectral solver: GPU-vs-CPU check, time per RK4 step per grid size.
    Spectral(super::bench_spectral::SpectralBench),
    /// Re-interpolation with the Gaussian sums by spreading: time per phase and error against
    /// the direct sums, per lattice size.
    Reinterp(super::bench_reinterp::ReinterpBench),
    /// The slab-decomposed FFT of the re-interpolation over the GPUs of the job (mpirun).
    SlabFft(super::bench_slab::SlabFftBench),
}

#[derive(Args, Debug)]
pub struct FmmBench {
    /// Particle counts, comma separated (e.g. 1e4,1e5,1e6).
    #[arg(long, value_delimiter = ',', default_value = "1e4,1e5")]
    pub n: Vec<f64>,
    /// Expansion orders, comma separated or a range like 4..14.
    #[arg(long, default_value = "4..14")]
    pub orders: String,
    #[arg(long, default_value = "fmm")]
    pub method: Method,
    #[arg(long, default_value_t = EvalParams::default().theta)]
    pub theta: f64,
    #[arg(long, default_value_t = 64)]
    pub leaf_size: usize,
    /// Minimum gap of a far interaction, in source core radii (default: that of
    /// `EvalParams::default()`, 4, on the adaptive octree; 4.4 on the uniform grid).
    #[arg(long)]
    pub core_cutoff: Option<f64>,
    /// Targets sampled for the error against the direct sum.
    #[arg(long, default_value_t = 1000)]
    pub samples: usize,
    /// uniform, ring or clumps.
    #[arg(long, default_value = "uniform")]
    pub distribution: Distribution,
    #[arg(long)]
    pub threads: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Compute backend: auto (GPU if usable), cpu or cuda.
    #[arg(long, default_value = "auto")]
    pub backend: BackendChoice,
    /// GPU index among the visible devices.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// On the GPU, also time the CPU backend (same parameters) for N up to this, for the
    /// speed-up column (0: never).
    #[arg(long, default_value_t = 1e6)]
    pub cpu_max: f64,
    /// adaptive (octree, lists on the host) or uniform (grid built on the GPU; CUDA, FMM).
    #[arg(long, default_value = "adaptive")]
    pub grid: GridChoice,
    /// Evaluations per (N, p); the table shows the fastest (the first one includes kernel
    /// compilation on the GPU, except on the uniform grid, whose kernels are compiled before).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// M2L kernel of the uniform grid below the top level: auto (the rule of
    /// `vortex_fmm::M2lKernel::resolve`), rotation, dense (per-offset matrices on the FP32
    /// pipes) or tensor (the same on the FP64 tensor cores).
    #[arg(long, default_value = "auto")]
    pub m2l: M2lKernel,
    /// Uniform grid on the GPU: after the timed evaluations, one more with every kernel
    /// timed by CUDA events, printed as a table per (N, p): launches, ms, bytes and flops,
    /// the roofline floor of each kernel on an H200 and the fraction of it reached.
    #[arg(long)]
    pub profile: bool,
}

#[derive(Args, Debug)]
pub struct M2lBench {
    #[arg(long, default_value = "2..20")]
    pub orders: String,
    /// Translations timed per order.
    #[arg(long, default_value_t = 20000)]
    pub count: usize,
}

/// Parses "4..14" (inclusive) or "4,6,8"; every order in `1..=MAX_ORDER`.
pub fn parse_orders(s: &str) -> Result<Vec<usize>> {
    let num = |x: &str| -> Result<usize> {
        x.trim()
            .parse()
            .map_err(|e| anyhow::anyhow!("--orders {s:?}: {x:?} is not an order ({e})"))
    };
    let orders: Vec<usize> = match s.split_once("..") {
        Some((a, b)) => {
            let (a, b) = (num(a)?, num(b)?);
            if a > b {
                bail!("--orders {s:?}: empty order range");
            }
            (a..=b).collect()
        }
        None => s.split(',').map(num).collect::<Result<_>>()?,
    };
    let max = vortex_fmm::MAX_ORDER;
    if let Some(p) = orders
        .iter()
        .find(|&&p| vortex_fmm::check_order(p, max).is_err())
    {
        bail!("--orders {s:?}: order {p} is outside 1..={max}");
    }
    Ok(orders)
}

/// Refuses particle counts that are not whole, positive numbers or cannot fit in memory
/// (the sources, their tree, fields and the sampled reference: about 400 B each).
fn check_sizes(ns: &[f64]) -> Result<()> {
    for &n in ns {
        if !(n >= 1.0 && n.fract() == 0.0 && n <= 1e15) {
            bail!("--n {n}: a particle count must be a whole number in 1..=1e15");
        }
        vortex_spectral::durable::check_memory(
            &format!("--n {n:e} (about 400 B per particle)"),
            n * 400.0,
        )
        .map_err(|e| anyhow::anyhow!(e))?;
    }
    Ok(())
}

pub fn run(args: &BenchArgs) -> Result<()> {
    match &args.what {
        BenchKind::Fmm(b) => bench_fmm(b),
        BenchKind::M2l(b) => bench_m2l(b),
        BenchKind::Spectral(b) => super::bench_spectral::run(b),
        BenchKind::Reinterp(b) => super::bench_reinterp::run(b),
        BenchKind::SlabFft(b) => super::bench_slab::run(b),
    }
}

/// The f64 direct sum at `idx` of `sources` (the reference of the error columns), announced
/// and bounded like the benchmark itself: timed on a few targets first when it is large.
fn reference_at(sources: &vortex_fmm::Sources, idx: &[usize]) -> Result<vortex_fmm::Fields> {
    let targets = |ids: &[usize]| Targets {
        position: ids.iter().map(|&i| sources.position[i]).collect(),
        strength: ids.iter().map(|&i| sources.strength[i]).collect(),
    };
    let n = sources.len();
    if idx.len() as f64 * n as f64 > 1e8 {
        // about 0.1 s of pairs measure the rate
        let probe = ((1e7 / n as f64) as usize).clamp(1, idx.len());
        let t0 = Instant::now();
        direct(sources, &targets(&idx[..probe]));
        let secs = t0.elapsed().as_secs_f64() * idx.len() as f64 / probe as f64;
        announce(
            "--samples",
            &format!(
                "the direct sum at {} sampled targets of N = {n} (the error's reference)",
                idx.len()
            ),
            secs,
        )?;
    }
    Ok(direct(sources, &targets(idx)))
}

fn bench_fmm(b: &FmmBench) -> Result<()> {
    // the global pool: an evaluator (a GPU context, a communicator) stays on this thread
    let orders = parse_orders(&b.orders)?;
    check_sizes(&b.n)?;
    need_work(
        "--samples",
        b.samples,
        "no target would be compared with the direct sum (the error columns would be empty)",
    )?;
    need_work("--repeat", b.repeat, "no evaluation would be timed")?;
    // theta, leaf size, cutoff and every order checked before the table's header is printed
    for &p in &orders {
        EvalParams {
            method: b.method,
            order: p,
            theta: b.theta,
            leaf_size: b.leaf_size,
            core_cutoff: b.core_cutoff.unwrap_or(EvalParams::default().core_cutoff),
            m2l: b.m2l,
            ..EvalParams::default()
        }
        .validate()?;
    }
    crate::set_global_threads(b.threads)?;
    crate::outln!(
        "# vortex bench fmm: backend {:?} grid {:?} (M2L {:?}) method {} theta {} leaf {} dist {:?} threads {} commit {}",
        resolve(b.backend),
        b.grid,
        b.m2l,
        b.method,
        b.theta,
        b.leaf_size,
        b.distribution,
        rayon::current_num_threads(),
        env!("VORTEX_GIT_COMMIT")
    );
    crate::outln!(
        "{:>9} {:>3} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10} {:>9} {:>10} {:>10} {:>8}",
        "N", "p", "tree", "lists", "P2M", "M2M", "M2L", "M2P", "L2L", "L2P", "P2P", "total", "err_vel", "err_str", "far", "far/s", "pairs/s", "vs CPU"
    );
    let on_gpu = resolve(b.backend) == Device::Cuda;
    for &nf in &b.n {
        let n = nf as usize;
        let sources = generate(b.distribution, n, b.seed, false);
        let mut rng = ChaCha8Rng::seed_from_u64(b.seed + 1);
        let idx = sample(&mut rng, n, b.samples.min(n)).into_vec();
        let reference = reference_at(&sources, &idx)?;
        for &p in &orders {
            let core_cutoff = b.core_cutoff.unwrap_or(match b.grid {
                GridChoice::Adaptive | GridChoice::Auto => EvalParams::default().core_cutoff,
                GridChoice::Uniform => uniform_core_cutoff(),
            });
            let params = EvalParams {
                method: b.method,
                order: p,
                theta: b.theta,
                leaf_size: b.leaf_size,
                core_cutoff,
                m2l: b.m2l,
                ..EvalParams::default()
            };
            let req = request_at_sources(&params, b.backend, b.grid, n);
            let mut engine =
                crate::planner::plan(&vortex_domain::SelfComm, 0, b.device, &req, &params)?;
            let mut best: Option<Evaluation> = None;
            for k in 0..b.repeat {
                let t0 = Instant::now();
                let ev = engine.evaluate(&sources, TargetSpec::Sources)?;
                if k == 0 {
                    announce(
                        "--repeat",
                        &format!("the other {} evaluations of N = {n}, p = {p}", b.repeat - 1),
                        t0.elapsed().as_secs_f64() * (b.repeat - 1) as f64,
                    )?;
                }
                if best.as_ref().is_none_or(|r| ev.times.total < r.times.total) {
                    best = Some(ev);
                }
            }
            let ev = best.expect("at least one evaluation");
            log::info!("N = {n} p = {p} on {}", engine.describe());
            let profile = if b.profile {
                Some(profile_once(engine.as_mut(), &sources)?)
            } else {
                None
            };
            let vel: Vec<[f64; 3]> = idx.iter().map(|&i| ev.fields.velocity[i]).collect();
            let st: Vec<[f64; 3]> = idx.iter().map(|&i| ev.fields.stretching[i]).collect();
            let t = &ev.times;
            let speedup = if on_gpu && (n as f64) <= b.cpu_max {
                let req = request_at_sources(&params, BackendChoice::Cpu, GridChoice::Adaptive, n);
                let mut cpu = crate::planner::plan(&vortex_domain::SelfComm, 0, 0, &req, &params)?;
                let cpu = cpu.evaluate(&sources, TargetSpec::Sources)?;
                format!("{:.1}x", cpu.times.total / t.total.max(1e-12))
            } else {
                "-".to_string()
            };
            let far_time = if b.method == Method::Treecode {
                t.m2p
            } else {
                t.m2l
            };
            crate::outln!(
                "{:>9} {:>3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>9.3} {:>10.3e} {:>10.3e} {:>9} {:>10.3e} {:>10.3e} {:>8}",
                n, p, t.tree, t.lists, t.p2m, t.m2m, t.m2l, t.m2p, t.l2l, t.l2p, t.p2p, t.total,
                relative_l2_error(&vel, &reference.velocity),
                relative_l2_error(&st, &reference.stretching),
                ev.stats.far_pairs,
                ev.stats.far_pairs as f64 / far_time.max(1e-12),
                ev.stats.p2p_interactions as f64 / t.p2p.max(1e-12),
                speedup
            );
            if let Some(table) = profile {
                crate::outln!("# kernels of one more evaluation, N = {n}, p = {p}:\n{table}");
            }
            if crate::console::stdout_closed() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// One evaluation with every kernel of the uniform grid timed (`vortex_gpu::uniform::profile`):
/// the table of its kernels; an error when nothing was profiled (not the uniform grid on a
/// GPU).
#[cfg(feature = "cuda")]
fn profile_once(
    engine: &mut dyn vortex_fmm::Evaluator,
    sources: &vortex_fmm::Sources,
) -> Result<String> {
    use vortex_gpu::uniform::profile;
    profile::start();
    let r = engine.evaluate(sources, TargetSpec::Sources);
    let prof = profile::finish();
    r?;
    if prof.kernels.is_empty() {
        bail!("--profile: no kernel was timed (the profile covers the uniform grid on a GPU: --backend cuda --grid uniform)");
    }
    Ok(prof.table(&profile::H200))
}

#[cfg(not(feature = "cuda"))]
fn profile_once(_: &mut dyn vortex_fmm::Evaluator, _: &vortex_fmm::Sources) -> Result<String> {
    bail!("--profile: this binary was built without the cuda feature")
}

fn bench_m2l(b: &M2lBench) -> Result<()> {
    let orders = parse_orders(&b.orders)?;
    need_work("--count", b.count, "no translation would be timed")?;
    // a first part of the translations of every order (at least 20 ms of them, doubled
    // until then) times the whole run before it starts: in CPU time of this thread (the
    // work), then stretched by the share of a core the benchmark gets, the smaller of the
    // share measured over the probes and the one the load average leaves (a load that
    // arrives after the probes is not seen by them)
    let (mut cpu, mut probe_cpu, mut probe_wall) = (0.0, 0.0, 0.0);
    for &p in &orders {
        let mut probe = b.count.min(16);
        loop {
            let (t0, c0) = (Instant::now(), thread_cpu_s());
            let (rot, dir) = time_m2l(p, probe, probe.div_ceil(4));
            let (wall, used) = (t0.elapsed().as_secs_f64(), thread_cpu_s() - c0);
            if wall >= 0.02 || probe >= b.count {
                // the probe's rates in CPU time: wall time per translation times the share
                let share = if used.is_finite() && wall > 0.0 {
                    (used / wall).clamp(1e-3, 1.0)
                } else {
                    1.0
                };
                cpu += (rot * b.count as f64 + dir * (b.count / 4).max(1) as f64) * share;
                probe_cpu += used;
                probe_wall += wall;
                break;
            }
            probe = (2 * probe).min(b.count);
        }
    }
    let measured = if probe_wall > 0.0 && probe_cpu.is_finite() && probe_cpu > 0.0 {
        (probe_cpu / probe_wall).clamp(1e-3, 1.0)
    } else {
        1.0
    };
    let (by_load, load) = expected_share();
    let share = measured.min(by_load).max(0.05);
    let estimate = if cpu.is_finite() {
        cpu / share
    } else {
        f64::NAN
    };
    announce(
        "--count",
        &format!(
            "{} translations of each of {} orders ({} of CPU time at {:.0} % of a core: \
             {:.0} % measured, {})",
            b.count,
            orders.len(),
            vortex_spectral::durable::duration_text(cpu),
            100.0 * share,
            100.0 * measured,
            match load {
                Some(l) => format!(
                    "load average {l:.1} on {} cores",
                    std::thread::available_parallelism().map_or(1, |n| n.get())
                ),
                None => "load unknown".into(),
            }
        ),
        estimate,
    )?;
    crate::outln!(
        "# vortex bench m2l: seconds per M2L (3 components), commit {}",
        env!("VORTEX_GIT_COMMIT")
    );
    crate::outln!(
        "{:>3} {:>12} {:>12} {:>8}",
        "p",
        "rotation",
        "direct",
        "speedup"
    );
    for p in orders {
        let (rot, dir) = time_m2l(p, b.count, (b.count / 4).max(1));
        crate::outln!("{:>3} {:>12.3e} {:>12.3e} {:>8.2}", p, rot, dir, dir / rot);
        if crate::console::stdout_closed() {
            break;
        }
    }
    Ok(())
}

/// Seconds of one M2L translation of order `p`, rotation-based (the mean of `count`) and plain
/// (the mean of `direct_count`).
fn time_m2l(p: usize, count: usize, direct_count: usize) -> (f64, f64) {
    let ops = Operators::new(p);
    let len = expansion_len(p);
    let m: Vec<Complex64> = (0..len)
        .map(|i| Complex64::new((i as f64 * 0.37).sin(), (i as f64 * 0.11).cos()))
        .collect();
    let mut l = vec![Complex64::new(0.0, 0.0); len];
    let mut scratch = Scratch::new(p);
    let (src, tgt) = ([0.1, -0.2, 0.05], [2.1, 1.3, -0.9]);
    // the driver caches one rotation per direction: time the translation itself
    let v: [f64; 3] = std::array::from_fn(|k| tgt[k] - src[k]);
    let dist = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let rot = ops.rotation(v);
    let t0 = Instant::now();
    for _ in 0..count {
        ops.m2l_with_rotation(&rot, dist, &m, &mut l, &mut scratch);
    }
    let rot = t0.elapsed().as_secs_f64() / count as f64;
    let t0 = Instant::now();
    for _ in 0..direct_count {
        ops.m2l_direct(src, tgt, &m, &mut l);
    }
    let dir = t0.elapsed().as_secs_f64() / direct_count as f64;
    std::hint::black_box(&l);
    (rot, dir)
}
