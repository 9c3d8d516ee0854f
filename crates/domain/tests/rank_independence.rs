//! Rank-count independence with simulated ranks (threads over channels): for R = 1..4 the
//! distributed evaluation agrees with the single-rank `vortex_fmm::evaluate` to 1e-12, for uniform and
//! clustered sets, free space and periodic, FMM, treecode and PPM.

use vortex_domain::{
    evaluate_distributed, gather_to_root, DistributedEvaluation, DomainError, DomainParams,
    ThreadComm,
};
use vortex_fmm::periodic::Periodic;
use vortex_fmm::testsets;
use vortex_fmm::{CpuBackend, EvalParams, Fields, Method, Sources, Targets};

/// Largest difference relative to the largest reference value, velocity and stretching.
fn rel_diff(a: &Fields, b: &Fields) -> (f64, f64) {
    let f = |x: &[[f64; 3]], y: &[[f64; 3]]| {
        assert_eq!(x.len(), y.len());
        let scale = y.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
        let d = x
            .iter()
            .flatten()
            .zip(y.iter().flatten())
            .fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
        d / scale.max(f64::MIN_POSITIVE)
    };
    (f(&a.velocity, &b.velocity), f(&a.stretching, &b.stretching))
}

/// Runs the distributed evaluation on `ranks` simulated ranks (contiguous pieces of the input)
/// and returns the gathered fields (input order) and the bytes sent per rank.
fn run(
    ranks: usize,
    params: &EvalParams,
    dp: DomainParams,
    s: &Sources,
    t: &Targets,
) -> (Fields, Vec<u64>) {
    let out = ThreadComm::run(ranks, |comm| {
        use vortex_domain::Comm;
        let (r, n) = (comm.rank(), comm.size());
        let (ls, lt) = (s.rank_piece(r, n), t.rank_piece(r, n));
        let e = evaluate_distributed(comm, &CpuBackend, params, &dp, &ls, &lt).unwrap();
        (gather_to_root(comm, &e.fields), e.stats.bytes_total())
    });
    let bytes = out.iter().map(|o| o.1).collect();
    (out.into_iter().next().unwrap().0.unwrap(), bytes)
}

fn check(name: &str, params: EvalParams, s: &Sources, t: &Targets, granularities: &[usize]) {
    let reference = vortex_fmm::evaluate(&CpuBackend, &params, s, t)
        .unwrap()
        .fields;
    for &g in granularities {
        for ranks in 1..=4 {
            let (f, bytes) = run(
                ranks,
                &params,
                DomainParams {
                    granularity: g,
                    ..Default::default()
                },
                s,
                t,
            );
            let (dv, ds) = rel_diff(&f, &reference);
            eprintln!("{name}: R = {ranks}, granularity {g}: velocity {dv:.2e}, stretching {ds:.2e}, bytes sent {bytes:?}");
            assert!(
                dv < 1e-12 && ds < 1e-12,
                "{name}: R = {ranks}: {dv:e} {ds:e}"
            );
        }
    }
}

/// [`check`] of the self-evaluation of `s` (every element a target) with [`params`].
fn check_self(name: &str, method: Method, periodic: bool, s: &Sources, granularities: &[usize]) {
    check(
        name,
        params(method, periodic),
        s,
        &s.as_targets(),
        granularities,
    );
}

fn params(method: Method, periodic: bool) -> EvalParams {
    EvalParams {
        method,
        order: 6,
        theta: 0.5,
        leaf_size: 24,
        periodic: periodic.then_some(Periodic {
            box_length: 2.0 * std::f64::consts::PI,
            image_levels: 2,
        }),
        ..Default::default()
    }
}

#[test]
fn fmm_uniform_free_space() {
    let s = testsets::standard(3000, 1);
    check_self("fmm uniform", Method::Fmm, false, &s, &[1, 4, 16]);
}

#[test]
fn fmm_clustered_free_space() {
    let s = testsets::clumps(3000, 2);
    check_self("fmm clumps", Method::Fmm, false, &s, &[2, 16]);
}

#[test]
fn treecode_uniform_and_clustered_free_space() {
    let s = testsets::standard(2000, 3);
    check_self("treecode uniform", Method::Treecode, false, &s, &[4]);
    let s = testsets::vortex_ring(2000, 4);
    check_self("treecode ring", Method::Treecode, false, &s, &[4]);
}

#[test]
fn fmm_periodic_uniform_and_clustered() {
    let s = testsets::generate(testsets::Distribution::Uniform, 2500, 5, true);
    check_self("fmm periodic uniform", Method::Fmm, true, &s, &[1, 8]);
    let mut s = testsets::generate(testsets::Distribution::Clumps, 2500, 6, true);
    for x in &mut s.position {
        for c in x.iter_mut() {
            *c *= 1.4; // clumps reaching across the box faces
        }
    }
    check_self("fmm periodic clumps", Method::Fmm, true, &s, &[4]);
}

#[test]
fn treecode_periodic() {
    let s = testsets::generate(testsets::Distribution::Uniform, 2000, 7, true);
    check_self("treecode periodic", Method::Treecode, true, &s, &[4]);
}

#[test]
fn ppm_free_space_and_periodic() {
    let s = testsets::standard(2000, 8);
    check_self("ppm uniform", Method::Ppm, false, &s, &[4]);
    let s = testsets::generate(testsets::Distribution::Uniform, 2000, 9, true);
    check_self("ppm periodic", Method::Ppm, true, &s, &[4]);
}

#[test]
fn separate_targets_and_direct() {
    let s = testsets::clumps(2000, 10);
    let grid: Vec<[f64; 3]> = (0..1000)
        .map(|k| {
            let (i, j, l) = (k % 10, (k / 10) % 10, k / 100);
            [
                i as f64 * 0.4 - 2.0,
                j as f64 * 0.4 - 2.0,
                l as f64 * 0.4 - 2.0,
            ]
        })
        .collect();
    let t = Targets::points(grid);
    check("fmm grid targets", params(Method::Fmm, false), &s, &t, &[4]);
    check_self("direct", Method::Direct, false, &s, &[4]);
}

/// The distributed self-evaluation of this rank's sources `ls` (every element a target).
fn evaluate_self<C: vortex_domain::Comm + ?Sized>(
    comm: &C,
    params: &EvalParams,
    dp: &DomainParams,
    ls: &Sources,
) -> Result<DistributedEvaluation, DomainError> {
    evaluate_distributed(comm, &CpuBackend, params, dp, ls, &ls.as_targets())
}

/// The error message of a failed evaluation (`Ok(())` where it succeeded).
fn failure(r: Result<DistributedEvaluation, DomainError>) -> Result<(), String> {
    r.map(|_| ()).map_err(|e| e.to_string())
}

/// Particles start on arbitrary ranks (not contiguous pieces): results come back in each
/// caller's order.
#[test]
fn scrambled_input_distribution() {
    let s = testsets::standard(2000, 11);
    let t = s.as_targets();
    let p = params(Method::Fmm, false);
    let reference = vortex_fmm::evaluate(&CpuBackend, &p, &s, &t)
        .unwrap()
        .fields;
    let n = 3;
    let which = |i: usize| (i * 7 + i / 3) % n;
    let out = ThreadComm::run(n, |comm| {
        use vortex_domain::Comm;
        let r = comm.rank();
        let idx: Vec<usize> = (0..s.len()).filter(|&i| which(i) == r).collect();
        let ls = Sources {
            position: idx.iter().map(|&i| s.position[i]).collect(),
            strength: idx.iter().map(|&i| s.strength[i]).collect(),
            sigma: idx.iter().map(|&i| s.sigma[i]).collect(),
        };
        let e = evaluate_self(comm, &p, &DomainParams::default(), &ls).unwrap();
        (idx, e.fields)
    });
    let mut f = Fields::zeros(s.len());
    for (idx, fl) in out {
        for (k, &i) in idx.iter().enumerate() {
            f.velocity[i] = fl.velocity[k];
            f.stretching[i] = fl.stretching[k];
        }
    }
    let (dv, ds) = rel_diff(&f, &reference);
    eprintln!("scrambled input, R = 3: velocity {dv:.2e}, stretching {ds:.2e}");
    assert!(dv < 1e-12 && ds < 1e-12);
}

/// Bad input on one rank fails every rank with an error (no hang).
#[test]
fn bad_input_on_one_rank_fails_all() {
    let s = testsets::standard(600, 12);
    let p = params(Method::Fmm, false);
    let out = ThreadComm::run(3, |comm| {
        use vortex_domain::Comm;
        let mut ls = s.rank_piece(comm.rank(), 3);
        if comm.rank() == 1 {
            ls.sigma[3] = -1.0;
        }
        failure(evaluate_self(comm, &p, &DomainParams::default(), &ls))
    });
    assert!(out.iter().all(|r| r.is_err()), "{out:?}");
    assert!(
        out[1].as_ref().unwrap_err().contains("core radius"),
        "{out:?}"
    );
}

/// A locally essential tree that lacks halo particles is detected on every rank, never
/// silently evaluated.
#[test]
fn incomplete_essential_tree_is_detected() {
    let s = testsets::standard(1500, 13);
    let p = params(Method::Fmm, false);
    let dp = DomainParams {
        granularity: 4,
        sabotage_halo: true,
    };
    let out = ThreadComm::run(3, |comm| {
        use vortex_domain::Comm;
        let ls = s.rank_piece(comm.rank(), 3);
        failure(evaluate_self(comm, &p, &dp, &ls))
    });
    assert!(out.iter().all(|r| r.is_err()), "{out:?}");
    assert!(
        out.iter()
            .any(|r| r.as_ref().unwrap_err().contains("locally essential tree")),
        "{out:?}"
    );
}
