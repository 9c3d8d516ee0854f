//! Accuracy and cost of the periodic FMM / PPM against the Ewald-split reference
//! (`vortex_fmm::periodic::ewald`) on the zero-mean standard set (`docs/CONVENTIONS.md`).
//!
//! ```text
//! cargo run --release -p vortex-fmm --example periodic_accuracy -- \
//!     --n 1e3,1e4,1e5,1e6 --method fmm --orders 10 --levels 0..5 --targets 1000
//! cargo run --release -p vortex-fmm --example periodic_accuracy -- --overhead --n 1e5,1e6
//! ```
//!
//! Accuracy mode: for each `N`, the periodic evaluation runs with every particle as a target
//! (`--eval-at all`, the production case) or only at the sampled targets (`--eval-at sample`,
//! cheaper; `--full-levels K` adds all-target rows at those `K`); the relative L2 errors of velocity and stretching are measured on `--targets`
//! particles sampled evenly from the set, against [`vortex_fmm::periodic::EwaldReference`] at
//! tolerance `1e-12`. One row per `(N, method, p, K)`.
//!
//! Overhead mode (`--overhead`): free-space and periodic evaluations of the same particles,
//! back to back (`--repeat` times each, the fastest kept), with the per-phase times and the
//! work counts (near / far pairs by image, P2P particle pairs, M2L of the far images).
//! `--only free|periodic` times one of the two (to profile it); the counts cover both. Next to
//! the wall times the CPU seconds of one evaluation are shown (all threads; with
//! `RAYON_NUM_THREADS=1` a measure that other jobs on the machine disturb much less).

use std::f64::consts::PI;
use std::time::Instant;
use vortex_fmm::backend::PhaseTimes;
use vortex_fmm::evaluators::{plan, PlanStats};
use vortex_fmm::expansions::{expansion_len, Complex64};
use vortex_fmm::lists::NO_SHIFT;
use vortex_fmm::operators::Operators;
use vortex_fmm::periodic::{outer_image_locals, EwaldParams, EwaldReference, Periodic};
use vortex_fmm::testsets::{generate, Distribution};
use vortex_fmm::{evaluate, relative_l2_error, CpuBackend, EvalParams, Method, Sources, Targets};

struct Args {
    n: Vec<usize>,
    methods: Vec<Method>,
    orders: Vec<usize>,
    levels: Vec<usize>,
    targets: usize,
    seed: u64,
    theta: Option<f64>,
    leaf: Option<usize>,
    eval_all: bool,
    /// Levels at which an all-target evaluation is added to sample-only rows.
    full_levels: Vec<usize>,
    overhead: bool,
    repeat: usize,
    /// Overhead mode: time only the free-space (`Some(false)`) or the periodic (`Some(true)`)
    /// evaluation (for a profiler); the counts are printed for both.
    only: Option<bool>,
}

fn parse_list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>, String> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<T>()
                .map_err(|_| format!("bad value '{x}'"))
        })
        .collect()
}

fn parse_count(s: &str) -> Result<usize, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("bad count '{s}'"))?;
    if !(v >= 1.0 && v.fract() == 0.0) {
        return Err(format!("bad count '{s}'"));
    }
    Ok(v as usize)
}

fn parse_levels(s: &str) -> Result<Vec<usize>, String> {
    if let Some((a, b)) = s.split_once("..") {
        let (a, b): (usize, usize) = (
            a.parse().map_err(|_| format!("bad range '{s}'"))?,
            b.parse().map_err(|_| format!("bad range '{s}'"))?,
        );
        Ok((a..=b).collect())
    } else {
        parse_list(s)
    }
}

/// Accuracy and cost of the periodic FMM / PPM against the Ewald-split reference.
#[derive(clap::Parser, Debug)]
struct Cli {
    /// Particle counts, comma separated (1e3 notation accepted).
    #[arg(long, default_value = "1e3,1e4")]
    n: String,
    /// Methods, comma separated (fmm, ppm, treecode, direct).
    #[arg(long = "method", default_value = "fmm")]
    methods: String,
    /// Expansion orders, comma separated.
    #[arg(long, default_value = "10")]
    orders: String,
    /// Image levels K: a list `0,2,4` or a range `0..5`.
    #[arg(long, default_value = "4")]
    levels: String,
    /// Targets sampled for the error.
    #[arg(long, default_value = "1000")]
    targets: String,
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// Opening angle (default: `EvalParams::default()`).
    #[arg(long)]
    theta: Option<f64>,
    /// Largest number of particles in a leaf.
    #[arg(long)]
    leaf: Option<usize>,
    /// Evaluate at every particle (`all`) or at the sampled targets only (`sample`).
    #[arg(long, default_value = "all", value_parser = ["all", "sample"])]
    eval_at: String,
    /// Levels at which an all-target evaluation is added to sample-only rows.
    #[arg(long, default_value = "")]
    full_levels: String,
    /// Overhead mode: free-space and periodic evaluations back to back.
    #[arg(long)]
    overhead: bool,
    /// Evaluations per case in overhead mode; the fastest is kept.
    #[arg(long, default_value = "1")]
    repeat: String,
    /// Overhead mode: time only the free-space or the periodic evaluation.
    #[arg(long, value_parser = ["free", "periodic"])]
    only: Option<String>,
}

fn args() -> Result<Args, String> {
    let c = <Cli as clap::Parser>::parse();
    let levels = |s: &str| {
        if s.is_empty() {
            Ok(Vec::new())
        } else {
            parse_levels(s)
        }
    };
    Ok(Args {
        n: c.n
            .split(',')
            .map(parse_count)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("--n: {e}"))?,
        methods: parse_list(&c.methods).map_err(|e| format!("--method: {e}"))?,
        orders: parse_list(&c.orders).map_err(|e| format!("--orders: {e}"))?,
        levels: levels(&c.levels).map_err(|e| format!("--levels: {e}"))?,
        targets: parse_count(&c.targets).map_err(|e| format!("--targets: {e}"))?,
        seed: c.seed,
        theta: c.theta,
        leaf: c.leaf,
        eval_all: c.eval_at == "all",
        full_levels: levels(&c.full_levels).map_err(|e| format!("--full-levels: {e}"))?,
        overhead: c.overhead,
        repeat: parse_count(&c.repeat).map_err(|e| format!("--repeat: {e}"))?,
        only: c.only.map(|o| o == "periodic"),
    })
}

fn params(a: &Args, method: Method, order: usize, periodic: Option<Periodic>) -> EvalParams {
    let d = EvalParams::default();
    EvalParams {
        method,
        order,
        theta: a.theta.unwrap_or(d.theta),
        leaf_size: a.leaf.unwrap_or(d.leaf_size),
        periodic,
        ..d
    }
}

fn sample(s: &Sources, m: usize) -> (Vec<usize>, Targets) {
    let step = (s.len() / m.max(1)).max(1);
    let idx: Vec<usize> = (0..s.len()).step_by(step).take(m).collect();
    let t = Targets {
        position: idx.iter().map(|&i| s.position[i]).collect(),
        strength: idx.iter().map(|&i| s.strength[i]).collect(),
    };
    (idx, t)
}

fn accuracy(a: &Args) -> Result<(), vortex_fmm::FmmError> {
    println!(
        "| N | method | p | K | boxes/dim | velocity error | stretching error | eval s | targets |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &n in &a.n {
        let s = generate(Distribution::Uniform, n, a.seed, true);
        let (idx, t) = sample(&s, a.targets);
        let t0 = Instant::now();
        let ewald = EwaldReference::new(&s, &EwaldParams::default(), t.len())?;
        let t_setup = t0.elapsed().as_secs_f64();
        let reference = ewald.evaluate(&t)?;
        eprintln!(
            "N = {n}: Ewald reference at {} targets in {:.1} s ({:.1} s structure factors; \
             s = {:.3}, r_c = {:.3}, {} modes)",
            t.len(),
            t0.elapsed().as_secs_f64(),
            t_setup,
            ewald.split_width(),
            ewald.real_space_radius(),
            ewald.modes()
        );
        let all = s.as_targets();
        for &m in &a.methods {
            for &p in &a.orders {
                for &k in &a.levels {
                    let per = Periodic {
                        box_length: 2.0 * PI,
                        image_levels: k,
                    };
                    let ep = params(a, m, p, Some(per));
                    let modes: &[bool] = if a.eval_all {
                        &[true]
                    } else if a.full_levels.contains(&k) {
                        &[false, true]
                    } else {
                        &[false]
                    };
                    for &eval_all in modes {
                        let (ev, u, st) = if eval_all {
                            let ev = evaluate(&CpuBackend, &ep, &s, &all)?;
                            let u: Vec<_> = idx.iter().map(|&i| ev.fields.velocity[i]).collect();
                            let st: Vec<_> = idx.iter().map(|&i| ev.fields.stretching[i]).collect();
                            (ev.times.total, u, st)
                        } else {
                            let ev = evaluate(&CpuBackend, &ep, &s, &t)?;
                            (ev.times.total, ev.fields.velocity, ev.fields.stretching)
                        };
                        let eu = relative_l2_error(&u, &reference.velocity);
                        let es = relative_l2_error(&st, &reference.stretching);
                        println!(
                        "| {n:.0e} | {m} | {p} | {k} | {} | {eu:.2e} | {es:.2e} | {ev:.2} | {} |",
                        per.boxes_per_dimension(),
                        if eval_all { "all" } else { "sample" }
                    );
                    }
                }
            }
        }
    }
    Ok(())
}

/// Pairs of the lists by image: (unshifted, shifted) for near and far.
fn pairs_by_image(list: &vortex_fmm::lists::CsrList) -> (usize, usize) {
    let shifted = list.sources.iter().filter(|s| s.image != NO_SHIFT).count();
    (list.len() - shifted, shifted)
}

/// Particle pairs through a shifted image, all and those whose leaf pair the source leaf's
/// list names back through the mirror image (`26 - image`), which the CPU backend evaluates
/// mutually in a self-evaluation (every leaf of the standard set has one core radius).
fn image_pair_counts(pl: &vortex_fmm::Plan) -> (u64, u64) {
    let (tt, st, near) = (&pl.target_tree, &pl.source_tree, &pl.lists.near);
    let mut all = 0u64;
    let mut mirrored = 0u64;
    for c in 0..tt.cells.len() {
        let nt = tt.cells[c].len() as u64;
        for r in near.row(c).iter().filter(|r| r.image != NO_SHIFT) {
            let n = nt * st.cells[r.cell as usize].len() as u64;
            all += n;
            let mirror = vortex_fmm::lists::SourceRef {
                cell: c as u32,
                image: 26 - r.image,
            };
            if near.row(r.cell as usize).binary_search(&mirror).is_ok() {
                mirrored += n;
            }
        }
    }
    (all, mirrored)
}

/// CPU seconds used so far by all threads of this process (sum of `/proc/self/task/*/schedstat`;
/// 0 where that is unavailable). Less sensitive than wall time to other jobs on the machine,
/// most of all with one thread (`RAYON_NUM_THREADS=1`: no idle workers spinning).
fn process_cpu_seconds() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .sum::<f64>()
        * 1e-9
}

/// The phase times of the fastest of `repeat` runs (by wall time), and the least CPU time of
/// one run.
fn best_of(
    repeat: usize,
    f: impl Fn() -> Result<vortex_fmm::Evaluation, vortex_fmm::FmmError>,
) -> Result<(PhaseTimes, f64), vortex_fmm::FmmError> {
    let mut best: Option<PhaseTimes> = None;
    let mut cpu = f64::INFINITY;
    for _ in 0..repeat {
        let c0 = process_cpu_seconds();
        let t = f()?.times;
        cpu = cpu.min(process_cpu_seconds() - c0);
        if best.as_ref().is_none_or(|b| t.total < b.total) {
            best = Some(t);
        }
    }
    Ok((best.expect("repeat >= 1"), cpu))
}

fn overhead(a: &Args) -> Result<(), vortex_fmm::FmmError> {
    for &n in &a.n {
        let s = generate(Distribution::Uniform, n, a.seed, true);
        let t = s.as_targets();
        for &m in &a.methods {
            for &p in &a.orders {
                let k = *a.levels.last().unwrap_or(&4);
                let per = Periodic {
                    box_length: 2.0 * PI,
                    image_levels: k,
                };
                let free = params(a, m, p, None);
                let peri = params(a, m, p, Some(per));
                // back to back: free, periodic
                let run = |ep: &EvalParams, periodic: bool| {
                    if a.only.is_some_and(|o| o != periodic) {
                        return Ok((PhaseTimes::default(), 0.0));
                    }
                    best_of(a.repeat, || evaluate(&CpuBackend, ep, &s, &t))
                };
                let (tf, cf) = run(&free, false)?;
                let (tp, cp) = run(&peri, true)?;
                println!(
                    "\nN = {n}, {m}, p = {p}, theta = {}, leaf = {}, K = {k}",
                    free.theta, free.leaf_size
                );
                println!("| phase | free s | periodic s | extra |");
                println!("|---|---|---|---|");
                for ((name, f), (_, q)) in tf.entries().iter().zip(tp.entries()) {
                    if *f == 0.0 && q == 0.0 {
                        continue;
                    }
                    let extra = if a.only.is_some() {
                        String::new() // one of the two not timed
                    } else {
                        format!("{:+.0} %", 100.0 * (q / f.max(1e-12) - 1.0))
                    };
                    println!("| {name} | {f:.3} | {q:.3} | {extra} |");
                }
                if a.only.is_none() {
                    println!(
                        "| CPU s (all threads, least of {}; {} threads) | {cf:.3} | {cp:.3} | \
                         {:+.0} % |",
                        a.repeat,
                        rayon::current_num_threads(),
                        100.0 * (cp / cf.max(1e-12) - 1.0)
                    );
                }
                // work counts of the two plans
                let mut scratch = PhaseTimes::default();
                let (pf, _, _) = plan(&free, &s, &t, &mut scratch)?;
                let (pp, _, _) = plan(&peri, &s, &t, &mut scratch)?;
                let (sf, sp) = (PlanStats::of(&pf), PlanStats::of(&pp));
                let (nf0, _) = pairs_by_image(&pf.lists.near);
                let (np0, np1) = pairs_by_image(&pp.lists.near);
                let (ff0, _) = pairs_by_image(&pf.lists.far);
                let (fp0, fp1) = pairs_by_image(&pp.lists.far);
                println!("| count | free | periodic (unshifted + images) | extra |");
                println!("|---|---|---|---|");
                println!(
                    "| depth / target cells | {} / {} | {} / {} | |",
                    sf.depth, sf.target_cells, sp.depth, sp.target_cells
                );
                println!(
                    "| near leaf pairs | {nf0} | {} ({np0} + {np1}) | {:+.1} % |",
                    sp.near_pairs,
                    100.0 * (sp.near_pairs as f64 / sf.near_pairs as f64 - 1.0)
                );
                println!(
                    "| P2P particle pairs | {} | {} | {:+.1} % |",
                    sf.p2p_interactions,
                    sp.p2p_interactions,
                    100.0 * (sp.p2p_interactions as f64 / sf.p2p_interactions as f64 - 1.0)
                );
                println!(
                    "| far cell pairs (M2L) | {ff0} | {} ({fp0} + {fp1}) | {:+.1} % |",
                    sp.far_pairs,
                    100.0 * (sp.far_pairs as f64 / sf.far_pairs as f64 - 1.0)
                );
                // particle pairs through an image; the CPU backend evaluates the near pairs of a
                // self-evaluation once for both partners (mutual P2P) when the source leaf's
                // list names the target back through the mirror image (unshifted pairs and
                // image pairs alike), the others one-sided
                let (image_p2p, image_mirrored) = image_pair_counts(&pp);
                let work_free = 0.5 * sf.p2p_interactions as f64;
                let work_peri = 0.5 * (sp.p2p_interactions - image_p2p) as f64
                    + 0.5 * image_mirrored as f64
                    + (image_p2p - image_mirrored) as f64;
                println!(
                    "| P2P work (mutual pairs count 1/2) | {work_free:.4e} | \
                     {work_peri:.4e} ({image_p2p} image pairs, {image_mirrored} of them \
                     mutual) | {:+.1} % |",
                    100.0 * (work_peri / work_free - 1.0)
                );
                // the extra time the extra pairs explain at the free-space cost per pair
                // (free-space timings needed)
                if a.only.is_none() {
                    let t_m2l = tf.m2l / sf.far_pairs.max(1) as f64;
                    let t_pair = tf.p2p / work_free.max(1.0);
                    let d_m2l = (sp.far_pairs as f64 - sf.far_pairs as f64) * t_m2l;
                    let d_p2p = (work_peri - work_free) * t_pair;
                    println!(
                        "| extra time explained by the pair counts | | M2L {d_m2l:.3} s + P2P \
                         {d_p2p:.3} s | {:+.1} % of the free total |",
                        100.0 * (d_m2l + d_p2p) / tf.total
                    );
                }
                // far pairs per target level
                let depth = sp.depth.max(sf.depth);
                let per_level = |pl: &vortex_fmm::Plan| {
                    let mut v = vec![0usize; depth + 1];
                    for c in 0..pl.target_tree.cells.len() {
                        v[pl.target_tree.cells[c].level as usize] += pl.lists.far.row(c).len();
                    }
                    v
                };
                let (lf, lp) = (per_level(&pf), per_level(&pp));
                for l in 0..=depth {
                    if lf[l] + lp[l] > 0 {
                        println!("| far pairs, target level {l} | {} | {} | |", lf[l], lp[l]);
                    }
                }
                // the far images: outer_image_locals with a zero multipole (cost independent of
                // the values); part of the periodic M2L time
                let ops = Operators::new(p);
                let root = vec![Complex64::new(0.0, 0.0); expansion_len(p)];
                let t0 = Instant::now();
                let locals = outer_image_locals(&ops, &per, &root, &pp.target_tree);
                println!(
                    "| far-image locals (outer_image_locals) | | {} cells, {:.3} s | |",
                    locals.len(),
                    t0.elapsed().as_secs_f64()
                );
            }
        }
    }
    Ok(())
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let r = if a.overhead {
        overhead(&a)
    } else {
        accuracy(&a)
    };
    if let Err(e) = r {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
