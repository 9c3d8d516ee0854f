//! End-to-end tests of the fast evaluators against the f64 direct sum.

use vortex_fmm::evaluators::direct::direct;
use vortex_fmm::testsets::{clumps, standard, vortex_ring};
use vortex_fmm::{evaluate, relative_l2_error, CpuBackend, EvalParams, Method, Sources, Targets};

fn errors(sources: &Sources, targets: &Targets, params: &EvalParams) -> (f64, f64) {
    let reference = direct(sources, targets);
    let ev = evaluate(&CpuBackend, params, sources, targets).expect("evaluation");
    ev.fields.relative_l2_errors(&reference)
}

fn params(method: Method, order: usize, leaf: usize) -> EvalParams {
    EvalParams {
        method,
        order,
        leaf_size: leaf,
        ..EvalParams::default()
    }
}

#[test]
fn fmm_meets_accuracy_on_standard_set() {
    let s = standard(3000, 11);
    let (ev, es) = errors(&s, &s.as_targets(), &params(Method::Fmm, 10, 32));
    assert!(ev < 1e-4 && es < 1e-3, "velocity {ev:e}, stretching {es:e}");
}

#[test]
fn treecode_meets_accuracy_on_standard_set() {
    let s = standard(3000, 12);
    let (ev, es) = errors(&s, &s.as_targets(), &params(Method::Treecode, 10, 32));
    assert!(ev < 1e-4 && es < 1e-3, "velocity {ev:e}, stretching {es:e}");
}

#[test]
fn ppm_meets_accuracy_and_agrees_with_fmm() {
    for s in [standard(2000, 31), vortex_ring(2000, 32)] {
        let t = s.as_targets();
        let (ev, es) = errors(&s, &t, &params(Method::Ppm, 10, 32));
        assert!(
            ev < 1e-4 && es < 1e-3,
            "ppm: velocity {ev:e}, stretching {es:e}"
        );
        let a = evaluate(&CpuBackend, &params(Method::Ppm, 10, 32), &s, &t).unwrap();
        let b = evaluate(&CpuBackend, &params(Method::Fmm, 10, 32), &s, &t).unwrap();
        let d = relative_l2_error(&a.fields.velocity, &b.fields.velocity);
        assert!(d < 1e-4, "ppm vs fmm: {d:e}");
    }
}

#[test]
fn fmm_error_falls_with_order() {
    let s = standard(2000, 13);
    let t = s.as_targets();
    let e: Vec<f64> = [3, 6, 9, 12]
        .iter()
        .map(|&p| {
            // a wide core cutoff: the far field's singular-kernel error (~1e-6 at 4 core
            // radii) would otherwise be the floor that p = 12 cannot go below
            let pr = EvalParams {
                core_cutoff: 8.0,
                ..params(Method::Fmm, p, 16)
            };
            errors(&s, &t, &pr).0
        })
        .collect();
    for w in e.windows(2) {
        assert!(w[1] < 0.5 * w[0], "errors do not fall with p: {e:?}");
    }
}

#[test]
fn fmm_meets_accuracy_on_clustered_sets() {
    for s in [vortex_ring(3000, 14), clumps(3000, 15)] {
        let (ev, es) = errors(&s, &s.as_targets(), &params(Method::Fmm, 10, 32));
        assert!(ev < 1e-4 && es < 1e-3, "velocity {ev:e}, stretching {es:e}");
    }
}

#[test]
fn separate_targets_get_velocity_only() {
    let s = standard(2000, 16);
    let pts = standard(500, 17).position;
    let t = Targets::points(pts);
    let (ev, _) = errors(&s, &t, &params(Method::Fmm, 10, 32));
    assert!(ev < 1e-4, "velocity {ev:e}");
    let ev = evaluate(&CpuBackend, &params(Method::Fmm, 6, 32), &s, &t).unwrap();
    assert!(ev.fields.stretching.iter().all(|v| v == &[0.0; 3]));
}

#[test]
fn coincident_particles_give_finite_results() {
    let mut s = standard(500, 18);
    for i in 0..100 {
        s.position[i] = s.position[0];
    }
    let t = s.as_targets();
    for m in [Method::Direct, Method::Treecode, Method::Fmm, Method::Ppm] {
        let ev = evaluate(&CpuBackend, &params(m, 8, 16), &s, &t).unwrap();
        assert!(ev
            .fields
            .velocity
            .iter()
            .chain(&ev.fields.stretching)
            .flatten()
            .all(|x| x.is_finite()));
    }
    let (ev, es) = errors(&s, &t, &params(Method::Fmm, 10, 16));
    assert!(ev < 1e-4 && es < 1e-3, "velocity {ev:e}, stretching {es:e}");
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let s = standard(4000, 19);
    let t = s.as_targets();
    let run = |threads: usize, method: Method| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| evaluate(&CpuBackend, &params(method, 8, 32), &s, &t).unwrap())
    };
    for m in [Method::Fmm, Method::Treecode, Method::Direct, Method::Ppm] {
        let (a, b) = (run(1, m), run(3, m));
        // every output is reduced by one task in a fixed order: bitwise equal
        assert_eq!(a.fields, b.fields, "{m} differs between 1 and 3 threads");
    }
}

#[test]
fn bad_input_is_rejected_with_a_clear_error() {
    let mut s = standard(100, 20);
    let t = s.as_targets();
    let p = EvalParams::default();
    s.sigma[7] = -1.0;
    let e = evaluate(&CpuBackend, &p, &s, &t).unwrap_err().to_string();
    assert!(e.contains("element 7") && e.contains("-1"), "{e}");
    s.sigma[7] = 0.1;
    s.position[3][1] = f64::NAN;
    let e = evaluate(&CpuBackend, &p, &s, &t).unwrap_err().to_string();
    assert!(e.contains("element 3") && e.contains("NaN"), "{e}");
    let e = evaluate(&CpuBackend, &p, &Sources::default(), &t)
        .unwrap_err()
        .to_string();
    assert!(e.contains("N = 0"), "{e}");
    let bad = EvalParams {
        order: 0,
        ..EvalParams::default()
    };
    let e = evaluate(&CpuBackend, &bad, &standard(10, 1), &t)
        .unwrap_err()
        .to_string();
    assert!(e.contains("p = 0"), "{e}");
}

/// Core radii no smaller than the set's bounding-box diagonal over `MAX_CUTOFF`: with the
/// largest admissible core cutoff every pair of cells is then inside it (cells of one point have
/// radius 0 and would otherwise pass any opening angle).
fn wide_cores(mut s: Sources) -> Sources {
    let (mut lo, mut hi) = ([f64::MAX; 3], [f64::MIN; 3]);
    for p in &s.position {
        for d in 0..3 {
            lo[d] = lo[d].min(p[d]);
            hi[d] = hi[d].max(p[d]);
        }
    }
    let diagonal = (0..3).map(|d| (hi[d] - lo[d]).powi(2)).sum::<f64>().sqrt();
    let floor = 1.01 * diagonal / vortex_fmm::MAX_CUTOFF;
    for sigma in &mut s.sigma {
        *sigma = sigma.max(floor);
    }
    s
}

/// With a tiny opening angle and the largest core cutoff over cores wider than the set / cutoff,
/// nothing is well separated and the FMM is the near field alone:
/// the mutual P2P of a self-evaluation (each pair of points visited once, both sides updated)
/// must then reproduce the f64 direct sum to the accuracy of the kernel table, on uniform,
/// clustered, coincident and mixed-core-radius sets, in every leaf size.
#[test]
fn near_field_alone_matches_direct_sum() {
    let mut coincident = standard(700, 21);
    for i in 0..60 {
        coincident.position[i] = coincident.position[0];
    }
    let mut mixed = wide_cores(clumps(900, 22));
    for i in (0..mixed.len()).step_by(3) {
        mixed.sigma[i] *= 1.7; // leaves with differing core radii are summed one-sidedly
    }
    for (name, s) in [
        ("uniform", wide_cores(standard(1200, 23))),
        ("clumps", wide_cores(clumps(1200, 24))),
        ("coincident", wide_cores(coincident)),
        ("mixed sigma", mixed),
    ] {
        let t = s.as_targets();
        let reference = direct(&s, &t);
        for leaf in [1, 5, 16, 64] {
            let p = EvalParams {
                theta: 1e-3,
                core_cutoff: vortex_fmm::MAX_CUTOFF,
                ..params(Method::Fmm, 4, leaf)
            };
            let ev = evaluate(&CpuBackend, &p, &s, &t).unwrap();
            assert_eq!(ev.stats.far_pairs, 0);
            let (ev_, es) = ev.fields.relative_l2_errors(&reference);
            assert!(
                ev_ < 1e-12 && es < 1e-12,
                "{name}, leaf {leaf}: velocity {ev_:e}, stretching {es:e}"
            );
        }
    }
}

/// A self-evaluation (mutual P2P) and the same points given as separate targets with a
/// negligibly different strength (one-sided P2P) agree to round-off, and the mutual one is
/// bitwise independent of the thread count on a clustered set too.
#[test]
fn mutual_and_one_sided_near_fields_agree() {
    for s in [standard(3000, 25), clumps(3000, 26)] {
        let t = s.as_targets();
        let mut t2 = t.clone();
        t2.strength[0][0] *= 1.0 + 1e-15; // not bitwise the sources: one-sided path
        let p = params(Method::Fmm, 6, 32);
        let a = evaluate(&CpuBackend, &p, &s, &t).unwrap();
        let b = evaluate(&CpuBackend, &p, &s, &t2).unwrap();
        let (dv, ds) = a.fields.relative_l2_errors(&b.fields);
        assert!(
            dv < 1e-13 && ds < 1e-13,
            "velocity {dv:e}, stretching {ds:e}"
        );
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| evaluate(&CpuBackend, &p, &s, &t).unwrap())
        };
        assert_eq!(run(1).fields, run(4).fields);
    }
}

/// Every CPU engine behind `vortex_fmm::Evaluator`, for every kind of targets, free space and
/// periodic, against the f64 direct sum on the same fresh random inputs, through the common
/// trait (`vortex_fmm::evaluator::errors_against_direct`, which the GPU engines' tests use too).
#[test]
fn every_cpu_evaluator_matches_the_direct_sum_through_the_trait() {
    use rand::{Rng, SeedableRng};
    use vortex_fmm::evaluator::errors_against_direct;
    use vortex_fmm::periodic::Periodic;
    use vortex_fmm::{DirectEvaluator, Evaluator, PlanEvaluator, TargetSpec};
    let seed = rand::random::<u64>();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let free = standard(1000, seed);
    let periodic = vortex_fmm::testsets::generate(
        vortex_fmm::testsets::Distribution::Uniform,
        1000,
        seed,
        true,
    );
    let other: Vec<[f64; 3]> = (0..1000)
        .map(|_| std::array::from_fn(|_| rng.gen_range(-1e-3..1e-3)))
        .collect();
    let points = Targets {
        position: (0..200)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-3.0..3.0)))
            .collect(),
        strength: (0..200)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-1e-3..1e-3)))
            .collect(),
    };
    for per in [None, Some(Periodic::default())] {
        let s = if per.is_some() { &periodic } else { &free };
        for method in [Method::Direct, Method::Treecode, Method::Fmm, Method::Ppm] {
            let p = EvalParams {
                periodic: per,
                ..params(method, 10, 32)
            };
            let mut engines: Vec<Box<dyn Evaluator>> =
                vec![Box::new(PlanEvaluator::new(CpuBackend, p.clone()).unwrap())];
            if method == Method::Direct {
                engines.push(Box::new(DirectEvaluator::new(p.clone())));
            }
            for ev in &mut engines {
                for spec in [
                    TargetSpec::Sources,
                    TargetSpec::SourcesWith(&other),
                    TargetSpec::Points(&points),
                ] {
                    let (eu, es) = errors_against_direct(ev.as_mut(), s, spec).unwrap();
                    let tol = if method == Method::Direct {
                        1e-14
                    } else {
                        1e-4
                    };
                    assert!(
                        eu < tol && es < 10.0 * tol,
                        "seed {seed}: {} {method} periodic {} at {}: {eu:.2e} / {es:.2e}",
                        ev.describe(),
                        per.is_some(),
                        spec.kind()
                    );
                }
            }
        }
    }
}

/// The stretching at the sources with other strengths is not that of the sources' own
/// strengths (the targets' strengths reach the engine), and a wrong length is refused.
#[test]
fn other_strengths_at_the_sources_reach_the_engine() {
    use vortex_fmm::{Evaluator, PlanEvaluator, TargetSpec};
    let s = standard(800, 4);
    let mut ev = PlanEvaluator::new(CpuBackend, params(Method::Fmm, 6, 16)).unwrap();
    let own = ev.evaluate(&s, TargetSpec::Sources).unwrap();
    let doubled: Vec<[f64; 3]> = s.strength.iter().map(|a| a.map(|x| 2.0 * x)).collect();
    let other = ev.evaluate(&s, TargetSpec::SourcesWith(&doubled)).unwrap();
    // the same velocity to round-off (the self-evaluation sums each near pair once for both)
    let ev_u = relative_l2_error(&other.fields.velocity, &own.fields.velocity);
    assert!(ev_u < 1e-13, "velocity: {ev_u:e}");
    let e = relative_l2_error(
        &other.fields.stretching,
        &own.fields
            .stretching
            .iter()
            .map(|a| a.map(|x| 2.0 * x))
            .collect::<Vec<_>>(),
    );
    assert!(
        e < 1e-12,
        "stretching is linear in the target strengths: {e:e}"
    );
    assert!(ev
        .evaluate(&s, TargetSpec::SourcesWith(&doubled[1..]))
        .is_err());
}

/// The cores of order 4 and 6 in the near field, the singular far field beyond their minimal
/// cutoff: the FMM (self-evaluation, mutual P2P) and separate targets (one-sided P2P) against
/// the f64 direct sum of the same core, as accurate as the Gaussian's at its default cutoff;
/// a cutoff below the order's minimum is refused with the key's name.
#[test]
fn high_order_cores_meet_accuracy_against_their_direct_sum() {
    use vortex_fmm::evaluators::direct::direct_core;
    use vortex_fmm::kernel::CoreOrder;
    let s = standard(3000, 41);
    let pts = Targets::points(standard(400, 42).position);
    for core in CoreOrder::ALL {
        let p = EvalParams {
            core,
            core_cutoff: core.default_cutoff(EvalParams::default().core_cutoff),
            ..params(Method::Fmm, 10, 32)
        };
        for t in [s.as_targets(), pts.clone()] {
            let reference = direct_core(core, &s, &t);
            let ev = evaluate(&CpuBackend, &p, &s, &t).unwrap();
            let e = relative_l2_error(&ev.fields.velocity, &reference.velocity);
            assert!(e < 1e-4, "{core:?}: velocity {e:e}");
            if t.strength.iter().any(|a| a != &[0.0; 3]) {
                let e = relative_l2_error(&ev.fields.stretching, &reference.stretching);
                assert!(e < 1e-3, "{core:?}: stretching {e:e}");
            }
        }
        // the cores differ: a high-order core against the Gaussian's direct sum is far off
        if core != CoreOrder::Second {
            let gauss = direct(&s, &pts);
            let e = relative_l2_error(&direct_core(core, &s, &pts).velocity, &gauss.velocity);
            assert!(e > 1e-3, "{core:?}: {e:e}");
            let bad = EvalParams {
                core,
                core_cutoff: 4.0,
                ..params(Method::Fmm, 10, 32)
            };
            let err = evaluate(&CpuBackend, &bad, &s, &pts)
                .unwrap_err()
                .to_string();
            assert!(err.contains("core_cutoff") && err.contains("4"), "{err}");
        }
    }
}
