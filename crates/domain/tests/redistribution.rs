//! Redistribution of moving particles (simulated ranks): every particle keeps its global id and
//! its data, ends on the owner of its branch cell exactly once, and a second call after small
//! displacements moves only few particles.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vortex_domain::{
    redistribute_particles, Comm, CommStats, DomainParams, OwnedSources, ThreadComm,
};
use vortex_fmm::periodic::Periodic;
use vortex_fmm::{testsets, EvalParams, Sources};

const N: usize = 30_000;
const RANKS: usize = 3;

fn params(periodic: bool) -> EvalParams {
    EvalParams {
        leaf_size: 32,
        periodic: periodic.then_some(Periodic {
            box_length: 2.0 * std::f64::consts::PI,
            image_levels: 2,
        }),
        ..Default::default()
    }
}

/// Small displacement of particle `g` (reproducible, independent of the rank holding it).
fn displacement(g: u64, h: f64) -> [f64; 3] {
    let mut rng = ChaCha8Rng::seed_from_u64(g);
    std::array::from_fn(|_| h * (2.0 * rng.gen::<f64>() - 1.0))
}

/// Checks one rank's particles against the global set `all` (displaced by `shift`) and the
/// partition; returns the global ids held.
fn check_rank(
    comm: &ThreadComm,
    part: &vortex_domain::Partition,
    owned: &OwnedSources,
    all: &Sources,
    p: &EvalParams,
    shift: f64,
) -> Vec<u64> {
    for (i, &g) in owned.gid.iter().enumerate() {
        let d = displacement(g, shift);
        let mut x: [f64; 3] = std::array::from_fn(|k| all.position[g as usize][k] + d[k]);
        if let Some(per) = &p.periodic {
            x = per.wrap(x);
        }
        assert_eq!(owned.sources.position[i], x, "position of particle {g}");
        assert_eq!(owned.sources.strength[i], all.strength[g as usize]);
        assert_eq!(owned.sources.sigma[i], all.sigma[g as usize]);
        assert_eq!(owned.key[i], part.key(x));
        assert_eq!(
            part.owner_of(owned.key[i]),
            comm.rank(),
            "particle {g} on a foreign rank"
        );
    }
    assert!(owned
        .key
        .iter()
        .zip(&owned.gid)
        .collect::<Vec<_>>()
        .windows(2)
        .all(|w| w[0] <= w[1]));
    owned.gid.clone()
}

fn run(periodic: bool) {
    let all = testsets::generate(testsets::Distribution::Uniform, N, 7, periodic);
    let p = params(periodic);
    let spacing = 2.0 * std::f64::consts::PI / (N as f64).cbrt();
    let out = ThreadComm::run(RANKS, |comm| {
        let (r, n) = (comm.rank(), comm.size());
        // initial distribution: contiguous pieces of the input, ids = input positions
        let (b, e) = (N * r / n, N * (r + 1) / n);
        let mut owned = OwnedSources {
            gid: (b as u64..e as u64).collect(),
            key: vec![0; e - b],
            sources: Sources {
                position: all.position[b..e].to_vec(),
                strength: all.strength[b..e].to_vec(),
                sigma: all.sigma[b..e].to_vec(),
            },
        };
        let dp = DomainParams::default();
        let mut st1 = CommStats::default();
        let (part, first) = redistribute_particles(comm, &p, &dp, &owned, &mut st1);
        let ids1 = check_rank(comm, &part, &first, &all, &p, 0.0);
        // every particle moves by at most 1 % of the mean spacing, then a second call
        owned = first;
        for (i, &g) in owned.gid.iter().enumerate() {
            let d = displacement(g, 0.01 * spacing);
            for (x, dx) in owned.sources.position[i].iter_mut().zip(d) {
                *x += dx;
            }
        }
        let mut st2 = CommStats::default();
        let (part2, second) = redistribute_particles(comm, &p, &dp, &owned, &mut st2);
        let ids2 = check_rank(comm, &part2, &second, &all, &p, 0.01 * spacing);
        let mut sorted1 = ids1.clone();
        sorted1.sort_unstable();
        let kept = ids2
            .iter()
            .filter(|g| sorted1.binary_search(g).is_ok())
            .count();
        (
            ids1,
            ids2,
            kept,
            st1.bytes_redistribute,
            st2.bytes_redistribute,
        )
    });
    let mut seen1: Vec<u64> = out.iter().flat_map(|o| o.0.iter().copied()).collect();
    let mut seen2: Vec<u64> = out.iter().flat_map(|o| o.1.iter().copied()).collect();
    seen1.sort_unstable();
    seen2.sort_unstable();
    let expect: Vec<u64> = (0..N as u64).collect();
    assert_eq!(seen1, expect, "first call: every id exactly once");
    assert_eq!(seen2, expect, "second call: every id exactly once");
    let moved: usize = out.iter().map(|o| o.1.len() - o.2).sum();
    let b1: u64 = out.iter().map(|o| o.3).sum();
    let b2: u64 = out.iter().map(|o| o.4).sum();
    eprintln!(
        "periodic {periodic}: first call {b1} bytes, second call {moved} of {N} particles moved, {b2} bytes"
    );
    // 64 bytes per particle moved
    assert_eq!(b2, 64 * moved as u64);
    assert!(moved * 100 < N, "{moved} of {N} particles moved");
    assert!(b2 * 20 < b1, "second call {b2} bytes, first {b1}");
}

#[test]
fn small_displacements_move_few_particles_free_space() {
    run(false);
}

#[test]
fn small_displacements_move_few_particles_periodic() {
    run(true);
}
