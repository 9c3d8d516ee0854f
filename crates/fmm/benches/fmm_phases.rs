//! Phase timings of the CPU FMM on the standard set, the library-level twin of
//! `vortex bench fmm` (which needs the whole workspace built).
//!
//! ```text
//! FMM_BENCH_N=1e5,1e6 FMM_BENCH_THETA=0.55 FMM_BENCH_THREADS=2 \
//!   cargo test --release -p vortex-fmm --bench fmm_phases -- --ignored --nocapture
//! ```
//!
//! Environment: `FMM_BENCH_N` (comma separated), `FMM_BENCH_ORDER` (8), `FMM_BENCH_THETA`
//! (0.55), `FMM_BENCH_THREADS` (all cores), `FMM_BENCH_REPEAT` (1, the fastest is shown),
//! `FMM_BENCH_DIST` (uniform, ring or clumps), `FMM_BENCH_SAMPLES` (1000 targets for the error
//! against the direct sum). Besides the phase times the table shows the M2L rate (translations
//! per second) and the P2P rate (ordered particle pairs per second).

use rand::{seq::index::sample, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vortex_fmm::evaluators::direct::direct;
use vortex_fmm::testsets::{generate, Distribution};
use vortex_fmm::{evaluate, relative_l2_error, CpuBackend, EvalParams, Method, Targets};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "measurement: cargo test --release -p vortex-fmm --bench fmm_phases -- --ignored --nocapture"]
fn fmm_phases() {
    let ns: Vec<usize> = std::env::var("FMM_BENCH_N")
        .unwrap_or_else(|_| "1e5".into())
        .split(',')
        .map(|s| s.trim().parse::<f64>().expect("FMM_BENCH_N") as usize)
        .collect();
    let order: usize = env_or("FMM_BENCH_ORDER", 8);
    let theta: f64 = env_or("FMM_BENCH_THETA", 0.55);
    let repeat: usize = env_or("FMM_BENCH_REPEAT", 1);
    let samples: usize = env_or("FMM_BENCH_SAMPLES", 1000);
    let dist: Distribution = std::env::var("FMM_BENCH_DIST")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(Distribution::Uniform);
    let mut pool = rayon::ThreadPoolBuilder::new();
    if let Some(t) = std::env::var("FMM_BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
    {
        pool = pool.num_threads(t);
    }
    let pool = pool.build().unwrap();
    println!(
        "# fmm_phases: p {order} theta {theta} dist {dist:?} threads {}",
        pool.current_num_threads()
    );
    println!(
        "{:>8} {:>6} {:>6} {:>6} {:>6} {:>7} {:>6} {:>6} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "N",
        "tree",
        "lists",
        "P2M",
        "M2M",
        "M2L",
        "L2L",
        "L2P",
        "P2P",
        "total",
        "err_vel",
        "err_str",
        "far",
        "M2L/s",
        "pairs/s"
    );
    for n in ns {
        let sources = generate(dist, n, 1, false);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let idx = sample(&mut rng, n, samples.min(n)).into_vec();
        let sample_targets = Targets {
            position: idx.iter().map(|&i| sources.position[i]).collect(),
            strength: idx.iter().map(|&i| sources.strength[i]).collect(),
        };
        let reference = pool.install(|| direct(&sources, &sample_targets));
        let targets = sources.as_targets();
        let params = EvalParams {
            method: Method::Fmm,
            order,
            theta,
            ..EvalParams::default()
        };
        let mut best: Option<vortex_fmm::Evaluation> = None;
        for _ in 0..repeat.max(1) {
            let ev = pool.install(|| evaluate(&CpuBackend, &params, &sources, &targets).unwrap());
            if best.as_ref().is_none_or(|b| ev.times.total < b.times.total) {
                best = Some(ev);
            }
        }
        let ev = best.unwrap();
        let vel: Vec<[f64; 3]> = idx.iter().map(|&i| ev.fields.velocity[i]).collect();
        let st: Vec<[f64; 3]> = idx.iter().map(|&i| ev.fields.stretching[i]).collect();
        let t = &ev.times;
        println!(
            "{:>8} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>7.2} {:>6.2} {:>6.2} {:>7.2} {:>7.2} {:>9.2e} {:>9.2e} {:>9} {:>9.2e} {:>9.2e}",
            n,
            t.tree,
            t.lists,
            t.p2m,
            t.m2m,
            t.m2l,
            t.l2l,
            t.l2p,
            t.p2p,
            t.total,
            relative_l2_error(&vel, &reference.velocity),
            relative_l2_error(&st, &reference.stretching),
            ev.stats.far_pairs,
            ev.stats.far_pairs as f64 / t.m2l.max(1e-12),
            ev.stats.p2p_interactions as f64 / t.p2p.max(1e-12)
        );
    }
}
