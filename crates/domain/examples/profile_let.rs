//! Per-phase profile of [`vortex_domain::evaluate_distributed`] with simulated ranks (threads).
//!
//! `cargo run --release -p vortex-domain --example profile_let -- N R [--distribution uniform|ring|clumps] [--cpu] [--periodic]`
//!
//! With the `null` backend (default) the FMM kernels are skipped (multipoles and fields are
//! zeros), so the times are those of the decomposition alone: partition, exchanges, locally
//! essential tree and lists. The reference line is the single-rank `fmm` plan (tree + lists) of
//! the whole set, the CPU part of a GPU evaluation. Prints the maximum over ranks of every step.

#[path = "common/null_backend.rs"]
mod null_backend;

use null_backend::NullBackend;
use vortex_domain::{evaluate_distributed, Comm, DomainParams, ThreadComm};
use vortex_fmm::backend::PhaseTimes;
use vortex_fmm::periodic::Periodic;
use vortex_fmm::testsets::{generate, Distribution};
use vortex_fmm::{CpuBackend, EvalParams};

/// Per-phase profile of the distributed evaluation with simulated ranks.
#[derive(clap::Parser)]
struct Args {
    /// Particle count (e.g. `1e6`).
    #[arg(default_value = "1e6", value_parser = count)]
    n: usize,
    /// Simulated ranks (threads).
    #[arg(default_value_t = 1)]
    ranks: usize,
    /// Particle distribution: uniform, ring or clumps.
    #[arg(long, default_value = "uniform")]
    distribution: Distribution,
    /// Run the CPU kernels (default: a backend that computes nothing).
    #[arg(long)]
    cpu: bool,
    /// Periodic box (side 2 pi, two image levels).
    #[arg(long)]
    periodic: bool,
}

fn count(s: &str) -> Result<usize, String> {
    s.parse::<f64>()
        .map(|x| x as usize)
        .map_err(|_| format!("'{s}' is not a number"))
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let (n, ranks, dist, cpu, periodic) = (
        args.n,
        args.ranks,
        args.distribution,
        args.cpu,
        args.periodic,
    );
    let s = generate(dist, n, 1, periodic);
    let params = EvalParams {
        periodic: periodic.then_some(Periodic {
            box_length: 2.0 * std::f64::consts::PI,
            image_levels: 2,
        }),
        ..Default::default()
    };
    // reference: the single-rank plan (trees + lists) of the whole set
    let mut pt = PhaseTimes::default();
    let t = s.as_targets();
    let t_plan = std::time::Instant::now();
    drop(vortex_fmm::evaluators::plan(&params, &s, &t, &mut pt).unwrap());
    let t_plan = t_plan.elapsed().as_secs_f64();
    drop(t);
    println!(
        "# N = {n}, R = {ranks}, {dist:?}{}, backend {}, rayon threads {}",
        if periodic { " periodic" } else { "" },
        if cpu { "cpu" } else { "null" },
        rayon::current_num_threads()
    );
    println!(
        "reference single-rank fmm plan: {t_plan:.3} s (tree {:.3}, lists {:.3})",
        pt.tree, pt.lists
    );
    let t0 = std::time::Instant::now();
    let out = ThreadComm::run(ranks, |comm| {
        let ls = s.rank_piece(comm.rank(), comm.size());
        let lt = ls.as_targets();
        comm.barrier();
        let e = if cpu {
            evaluate_distributed(
                comm,
                &CpuBackend,
                &params,
                &DomainParams::default(),
                &ls,
                &lt,
            )
        } else {
            evaluate_distributed(
                comm,
                &NullBackend,
                &params,
                &DomainParams::default(),
                &ls,
                &lt,
            )
        }
        .unwrap();
        (e.stats, e.times)
    });
    println!("wall {:.3} s", t0.elapsed().as_secs_f64());
    let mut total = 0.0;
    println!("{:<28} {:>9} {:>9}", "step (max over ranks)", "s", "rank 0");
    for (k, (name, v0)) in out[0].0.profile.iter().enumerate() {
        let m = out
            .iter()
            .map(|(st, _)| st.profile.get(k).map_or(0.0, |p| p.1))
            .fold(0.0, f64::max);
        total += m;
        println!("{name:<28} {m:>9.4} {v0:>9.4}");
    }
    println!("{:<28} {:>9.4}", "sum", total);
    let st = &out[0].0;
    println!(
        "rank 0: total {:.3} s, P2Pcomm {} B, M2Lcomm {} B, halo {} particles",
        out[0].1.total, st.bytes_p2p, st.bytes_m2l, st.halo_particles
    );
}
