//! Communication volume of the decomposition with simulated ranks (threads), for the scaling
//! tables of `docs/SCALING.md`.
//!
//! `comm_volume N[,N...] R[,R...|Rmin-Rmax] [--distribution uniform|ring|clumps] [--periodic] [--ranks]`
//!
//! e.g. `comm_volume 1e5,1e6,1e7 1-8`. Every rank holds a contiguous piece of the set (the
//! input distribution of `mpirun vortex eval`). The evaluation runs with a backend that
//! computes nothing, so a row costs the partition, the redistribution, the locally essential
//! tree and the interaction lists only (the lists decide which multipoles M2Lcomm brings).
//! Prints one row per (N, R): bytes sent per rank in P2Pcomm (pruned subtrees and halo
//! particles) and in M2Lcomm (requests, branch multipoles, requested multipoles), maximum and
//! mean over the ranks, the halo particles and the multipoles received (maximum over ranks),
//! and the wall time of the row; with `--ranks`, also one line per rank.

#[path = "common/null_backend.rs"]
mod null_backend;

use null_backend::NullBackend;
use vortex_domain::{evaluate_distributed, Comm, DomainParams, ThreadComm};
use vortex_fmm::periodic::Periodic;
use vortex_fmm::testsets::{generate, Distribution};
use vortex_fmm::EvalParams;

/// A list of counts: `1e5,1e6` or a range `1-8` (or both, comma-separated).
fn list(s: &str) -> Result<Vec<usize>, String> {
    let num = |v: &str| {
        v.parse::<f64>()
            .map(|x| x as usize)
            .map_err(|_| format!("'{v}' is not a number"))
    };
    let mut out = Vec::new();
    for p in s.split(',') {
        match p.split_once('-') {
            Some((a, b)) => out.extend(num(a)?..=num(b)?),
            None => out.push(num(p)?),
        }
    }
    Ok(out)
}

/// Communication volume of the decomposition per (N, R).
#[derive(clap::Parser)]
struct Args {
    /// Particle counts, e.g. `1e5,1e6`.
    #[arg(default_value = "1e5", value_parser = list)]
    ns: ::std::vec::Vec<usize>,
    /// Rank counts, e.g. `1-8` or `2,4`.
    #[arg(default_value = "1-8", value_parser = list)]
    rs: ::std::vec::Vec<usize>,
    /// Particle distribution: uniform, ring or clumps.
    #[arg(long, default_value = "uniform")]
    distribution: Distribution,
    /// Periodic box (side 2 pi, two image levels).
    #[arg(long)]
    periodic: bool,
    /// One line per rank as well.
    #[arg(long)]
    ranks: bool,
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let (ns, rs, dist, periodic, per_rank) = (
        args.ns,
        args.rs,
        args.distribution,
        args.periodic,
        args.ranks,
    );
    let params = EvalParams {
        periodic: periodic.then_some(Periodic {
            box_length: 2.0 * std::f64::consts::PI,
            image_levels: 2,
        }),
        ..Default::default()
    };
    println!(
        "# {dist:?}{}, p = {}, theta = {}, leaf {}, granularity {}, rayon threads {}",
        if periodic { " periodic" } else { "" },
        params.order,
        params.theta,
        params.leaf_size,
        DomainParams::default().granularity,
        rayon::current_num_threads()
    );
    println!(
        "# bytes sent per rank; p2p = P2Pcomm, m2l = M2Lcomm; halo = halo particles received, \
         mp = multipoles received below branch cells (max over ranks)"
    );
    println!(
        "{:>9} {:>2} {:>12} {:>12} {:>12} {:>12} {:>9} {:>8} {:>7}",
        "N", "R", "p2p_max", "p2p_mean", "m2l_max", "m2l_mean", "halo", "mp", "wall_s"
    );
    for &n in &ns {
        let s = generate(dist, n, 1, periodic);
        for &ranks in &rs {
            let t0 = std::time::Instant::now();
            let out = ThreadComm::run(ranks, |comm| {
                let ls = s.rank_piece(comm.rank(), comm.size());
                let lt = ls.as_targets();
                let e = evaluate_distributed(
                    comm,
                    &NullBackend,
                    &params,
                    &DomainParams::default(),
                    &ls,
                    &lt,
                )
                .unwrap();
                (e.stats, e.work[comm.rank()])
            });
            let wall = t0.elapsed().as_secs_f64();
            let max = |f: &dyn Fn(&vortex_domain::CommStats) -> u64| {
                out.iter().map(|(st, _)| f(st)).max().unwrap_or(0)
            };
            let mean = |f: &dyn Fn(&vortex_domain::CommStats) -> u64| {
                out.iter().map(|(st, _)| f(st)).sum::<u64>() as f64 / ranks as f64
            };
            println!(
                "{n:>9} {ranks:>2} {:>12} {:>12.0} {:>12} {:>12.0} {:>9} {:>8} {wall:>7.2}",
                max(&|st| st.bytes_p2p),
                mean(&|st| st.bytes_p2p),
                max(&|st| st.bytes_m2l),
                mean(&|st| st.bytes_m2l),
                max(&|st| st.halo_particles),
                max(&|st| st.m2l_cells_used),
            );
            if per_rank {
                println!("#   rank work summary redistribute p2p m2l halo_particles remote_cells m2l_sent m2l_used");
                for (r, (st, w)) in out.iter().enumerate() {
                    println!(
                        "#   {r} {w} {} {} {} {} {} {} {} {}",
                        st.bytes_summary,
                        st.bytes_redistribute,
                        st.bytes_p2p,
                        st.bytes_m2l,
                        st.halo_particles,
                        st.remote_cells,
                        st.m2l_cells_sent,
                        st.m2l_cells_used
                    );
                }
            }
        }
    }
}
