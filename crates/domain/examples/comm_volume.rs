//! Communication volume of the decomposition with simulated ranks (threads), for the scaling
//! tables of `docs/SCALING.md`.
//!
//! `cargo run --release -p vortex-domain --example comm_volume -- N R [uniform|ring|clumps] [periodic]`
//!
//! Prints one line per rank: bytes sent per phase, halo particles, remote cells, multipoles
//! sent and used, and the phase times.

use domain::{evaluate_distributed, Comm, DomainParams, ThreadComm};
use fmm::periodic::Periodic;
use fmm::testsets::{generate, Distribution};
use fmm::{CpuBackend, EvalParams, Sources, Targets};

fn piece<T: Clone>(v: &[T], r: usize, n: usize) -> Vec<T> {
    v[v.len() * r / n..v.len() * (r + 1) / n].to_vec()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args
        .first()
        .map_or(100_000, |s| s.parse::<f64>().unwrap() as usize);
    let ranks: usize = args.get(1).map_or(2, |s| s.parse().unwrap());
    let dist: Distribution = args
        .get(2)
        .map_or(Distribution::Uniform, |s| s.parse().unwrap());
    let periodic = args.get(3).is_some_and(|s| s == "periodic");
    let s = generate(dist, n, 1, periodic);
    let params = EvalParams {
        periodic: periodic.then_some(Periodic {
            box_length: 2.0 * std::f64::consts::PI,
            image_levels: 2,
        }),
        ..Default::default()
    };
    let t0 = std::time::Instant::now();
    let out = ThreadComm::run(ranks, |comm| {
        let (r, nr) = (comm.rank(), comm.size());
        let ls = Sources {
            position: piece(&s.position, r, nr),
            strength: piece(&s.strength, r, nr),
            sigma: piece(&s.sigma, r, nr),
        };
        let lt = Targets {
            position: ls.position.clone(),
            strength: ls.strength.clone(),
        };
        let e = evaluate_distributed(
            comm,
            &CpuBackend,
            &params,
            &DomainParams::default(),
            &ls,
            &lt,
        )
        .unwrap();
        (e.stats, e.times, e.work[r])
    });
    println!(
        "# N = {n}, R = {ranks}, {dist:?}{}, p = {}, theta = {}, leaf {}; wall {:.2} s",
        if periodic { " periodic" } else { "" },
        params.order,
        params.theta,
        params.leaf_size,
        t0.elapsed().as_secs_f64()
    );
    println!("rank work summary redistribute p2p m2l total halo_particles remote_cells m2l_sent m2l_used t_p2pcomm t_m2lcomm t_total");
    for (r, (st, t, w)) in out.iter().enumerate() {
        println!(
            "{r} {w} {} {} {} {} {} {} {} {} {} {:.4} {:.4} {:.3}",
            st.bytes_summary,
            st.bytes_redistribute,
            st.bytes_p2p,
            st.bytes_m2l,
            st.bytes_total(),
            st.halo_particles,
            st.remote_cells,
            st.m2l_cells_sent,
            st.m2l_cells_used,
            st.t_p2pcomm,
            st.t_m2lcomm,
            t.total
        );
    }
}
