//! Rank-count independence under a real MPI: run with `mpirun -np R` (see `ci-mpi.sh`).
//! Every rank generates the same sets, evaluates its contiguous piece with
//! `vortex_domain::evaluate_distributed`, rank 0 gathers the fields in input order and compares them
//! with the single-rank `vortex_fmm::evaluate` (1e-12 relative). With `--bench N` it only reports the
//! bytes sent per rank and the phase times for a uniform set of N particles.

use mpi::Threading;
use vortex_domain::{evaluate_distributed, gather_to_root, Comm, DomainParams, MpiComm};
use vortex_fmm::periodic::Periodic;
use vortex_fmm::testsets::{self, Distribution};
use vortex_fmm::{CpuBackend, EvalParams, Fields, Method, Sources, Targets};

fn rel(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    let scale = b.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
    let d = a
        .iter()
        .flatten()
        .zip(b.iter().flatten())
        .fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
    d / scale.max(f64::MIN_POSITIVE)
}

fn local(comm: &MpiComm, s: &Sources) -> Sources {
    s.rank_piece(comm.rank(), comm.size())
}

fn main() {
    let (universe, _) = mpi::initialize_with_threading(Threading::Funneled).expect("MPI init");
    let comm = MpiComm::new(universe.world());
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--bench") {
        let n: usize = args[i + 1].parse().expect("--bench N");
        let s = testsets::standard(n, 1);
        let ls = local(&comm, &s);
        let p = EvalParams::default();
        let e = evaluate_distributed(
            &comm,
            &CpuBackend,
            &p,
            &DomainParams::default(),
            &ls,
            &ls.as_targets(),
        )
        .unwrap_or_else(|e| comm.abort(&e.to_string()));
        let line = format!(
            "N = {n}, R = {}, rank {}: bytes sent {} (p2p {}, m2l {}, redistribute {}, summary {}), halo particles {}, remote cells {}, total {:.3} s",
            comm.size(), comm.rank(), e.stats.bytes_total(), e.stats.bytes_p2p, e.stats.bytes_m2l,
            e.stats.bytes_redistribute, e.stats.bytes_summary, e.stats.halo_particles, e.stats.remote_cells, e.times.total
        );
        let all = comm.allgatherv(line.as_bytes());
        if comm.rank() == 0 {
            for l in all {
                println!("{}", String::from_utf8_lossy(&l));
            }
        }
        return;
    }
    let box_p = Periodic {
        box_length: 2.0 * std::f64::consts::PI,
        image_levels: 2,
    };
    let cases: Vec<(&str, Method, Option<Periodic>, Sources)> = vec![
        (
            "fmm uniform",
            Method::Fmm,
            None,
            testsets::standard(4000, 1),
        ),
        ("fmm clumps", Method::Fmm, None, testsets::clumps(4000, 2)),
        (
            "treecode ring",
            Method::Treecode,
            None,
            testsets::vortex_ring(3000, 3),
        ),
        (
            "fmm periodic uniform",
            Method::Fmm,
            Some(box_p),
            testsets::generate(Distribution::Uniform, 3000, 4, true),
        ),
        (
            "fmm periodic clumps",
            Method::Fmm,
            Some(box_p),
            testsets::generate(Distribution::Clumps, 3000, 5, true),
        ),
        (
            "treecode periodic",
            Method::Treecode,
            Some(box_p),
            testsets::generate(Distribution::Uniform, 3000, 6, true),
        ),
        (
            "ppm uniform",
            Method::Ppm,
            None,
            testsets::standard(3000, 7),
        ),
    ];
    let mut failed = false;
    for (name, method, periodic, s) in cases {
        let p = EvalParams {
            method,
            order: 6,
            leaf_size: 24,
            periodic,
            ..Default::default()
        };
        let ls = local(&comm, &s);
        let lt: Targets = ls.as_targets();
        let e = evaluate_distributed(
            &comm,
            &CpuBackend,
            &p,
            &DomainParams {
                granularity: 4,
                ..Default::default()
            },
            &ls,
            &lt,
        )
        .unwrap_or_else(|e| comm.abort(&format!("{name}: {e}")));
        let bytes = comm.allgatherv(&e.stats.bytes_total().to_le_bytes());
        let gathered: Option<Fields> = gather_to_root(&comm, &e.fields);
        if comm.rank() == 0 {
            let f = gathered.unwrap();
            let reference = vortex_fmm::evaluate(&CpuBackend, &p, &s, &s.as_targets())
                .unwrap()
                .fields;
            let (dv, ds) = (
                rel(&f.velocity, &reference.velocity),
                rel(&f.stretching, &reference.stretching),
            );
            let bytes: Vec<u64> = bytes
                .iter()
                .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap()))
                .collect();
            let ok = dv < 1e-12 && ds < 1e-12;
            println!(
                "{} {name}: R = {}: velocity {dv:.2e}, stretching {ds:.2e} relative to the single-rank run; bytes sent per rank {bytes:?}",
                if ok { "ok  " } else { "FAIL" },
                comm.size()
            );
            failed |= !ok;
        }
    }
    let mut flag = [failed as u8 as f64];
    comm.allreduce_f64(&mut flag, vortex_domain::ReduceOp::Max);
    if flag[0] != 0.0 {
        comm.abort("rank-count independence failed");
    }
}
