//! Periodic evaluations against the independent Fourier-space sum of Gaussian blobs.

use std::f64::consts::PI;
use vortex_fmm::periodic::{fourier_reference, Periodic};
use vortex_fmm::testsets::{generate, Distribution};
use vortex_fmm::{evaluate, relative_l2_error, CpuBackend, EvalParams, Method, Targets};

fn periodic_params(method: Method, order: usize, levels: usize) -> EvalParams {
    EvalParams {
        method,
        order,
        leaf_size: 32,
        periodic: Some(Periodic {
            box_length: 2.0 * PI,
            image_levels: levels,
        }),
        ..EvalParams::default()
    }
}

/// Sample of targets (every `step`-th source) for the slow Fourier reference.
fn sample(s: &vortex_fmm::Sources, step: usize) -> Targets {
    Targets {
        position: s.position.iter().step_by(step).copied().collect(),
        strength: s.strength.iter().step_by(step).copied().collect(),
    }
}

#[test]
fn periodic_fmm_and_treecode_match_fourier_reference() {
    let s = generate(Distribution::Uniform, 1000, 21, true);
    let t = sample(&s, 10);
    let reference = fourier_reference(&s, &t, 2.0 * PI, 8.3);
    for m in [Method::Fmm, Method::Ppm, Method::Treecode, Method::Direct] {
        let ev = evaluate(&CpuBackend, &periodic_params(m, 10, 4), &s, &t).unwrap();
        let (ev_, es) = ev.fields.relative_l2_errors(&reference);
        assert!(
            ev_ < 1e-4 && es < 1e-3,
            "{m}: velocity {ev_:e} stretching {es:e}"
        );
    }
}

#[test]
fn image_levels_converge() {
    let s = generate(Distribution::Uniform, 800, 22, true);
    let t = sample(&s, 8);
    let reference = fourier_reference(&s, &t, 2.0 * PI, 8.3);
    let err: Vec<f64> = (0..=3)
        .map(|k| {
            let ev = evaluate(&CpuBackend, &periodic_params(Method::Fmm, 10, k), &s, &t).unwrap();
            relative_l2_error(&ev.fields.velocity, &reference.velocity)
        })
        .collect();
    assert!(err[3] < 1e-4, "{err:?}");
    assert!(err[0] > err[3], "{err:?}");
}

#[test]
fn positions_outside_the_box_are_wrapped() {
    let s = generate(Distribution::Uniform, 500, 23, true);
    let mut shifted = s.clone();
    for (i, x) in shifted.position.iter_mut().enumerate() {
        x[i % 3] += 2.0 * PI * ((i % 5) as f64 - 2.0);
    }
    let p = periodic_params(Method::Fmm, 8, 3);
    let a = evaluate(&CpuBackend, &p, &s, &s.as_targets()).unwrap();
    let b = evaluate(&CpuBackend, &p, &shifted, &shifted.as_targets()).unwrap();
    let (ev, es) = b.fields.relative_l2_errors(&a.fields);
    assert!(ev < 1e-10 && es < 1e-10, "{ev:e} {es:e}");
}

#[test]
fn nonzero_total_strength_is_refused() {
    let s = generate(Distribution::Uniform, 100, 24, false);
    let e = evaluate(
        &CpuBackend,
        &periodic_params(Method::Fmm, 8, 2),
        &s,
        &s.as_targets(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("total strength"), "{e}");
}

/// The moment-free set of `vortex_fmm::testsets::moment_free` (cores 0.4, in `[-2, 2)^3`).
fn moment_free_set(quads: usize, seed: u64) -> vortex_fmm::Sources {
    vortex_fmm::testsets::moment_free(quads, seed, 2.0, 0.4)
}

#[test]
fn fourier_reference_matches_an_explicit_image_sum() {
    let s = moment_free_set(8, 25);
    let t = Targets::points(vec![[0.3, -1.1, 2.0], [-2.9, 0.4, 0.1], [1.5, 1.5, -3.0]]);
    let l = 2.0 * PI;
    let reference = fourier_reference(&s, &t, l, 8.3);
    let err = |k: i32| {
        let shifts: Vec<[f64; 3]> = (-k..=k)
            .flat_map(|x| (-k..=k).flat_map(move |y| (-k..=k).map(move |z| [x, y, z])))
            .map(|j| j.map(|c| c as f64 * l))
            .collect();
        let f = vortex_fmm::evaluators::direct::direct_shifted(&s, &t, &shifts);
        relative_l2_error(&f.velocity, &reference.velocity)
    };
    let (e3, e9) = (err(3), err(9));
    // the remainder of the absolutely convergent sum falls like 1/K^2 or faster
    assert!(
        e9 < 3e-3 && e9 < 0.3 * e3,
        "image sums: K=3 {e3:e}, K=9 {e9:e}"
    );
}

#[test]
fn near_field_reaches_across_faces_and_corners() {
    // clusters straddling a corner and a face: the close pairs exist only through the images
    let h = PI - 0.05;
    let mut s = vortex_fmm::Sources::default();
    let pts = [
        [h, h, h],
        [-h, -h, -h],
        [h, -h, h],
        [-h, h, -h],
        [h, 0.2, 0.1],
        [-h, 0.25, 0.05],
        [0.1, 0.3, -0.2],
        [-0.5, 1.0, 0.4],
    ];
    let a = [
        [1.0, 0.2, -0.3],
        [-0.4, 0.8, 0.1],
        [0.3, -0.7, 0.5],
        [-0.2, 0.1, -0.6],
        [0.5, 0.5, 0.2],
        [-0.7, -0.3, 0.4],
        [0.2, -0.4, -0.1],
        [0.0, 0.0, 0.0],
    ];
    for (p, al) in pts.iter().zip(a) {
        s.position.push(*p);
        s.strength.push(al);
        s.sigma.push(0.15);
    }
    vortex_fmm::testsets::subtract_mean_strength(&mut s);
    let t = s.as_targets();
    let reference = fourier_reference(&s, &t, 2.0 * PI, 8.3);
    for m in [Method::Fmm, Method::Ppm] {
        let params = EvalParams {
            leaf_size: 1,
            ..periodic_params(m, 10, 4)
        };
        let ev = evaluate(&CpuBackend, &params, &s, &t).unwrap();
        let (e, es) = ev.fields.relative_l2_errors(&reference);
        assert!(
            e < 1e-4 && es < 1e-3,
            "{m}: velocity {e:e} stretching {es:e}"
        );
    }
}

#[test]
fn shifting_every_particle_changes_nothing() {
    let s = generate(Distribution::Uniform, 1500, 26, true);
    let mut moved = s.clone();
    for x in &mut moved.position {
        x[0] += 0.731;
        x[1] -= 2.05;
        x[2] += 4.4;
    }
    let p = periodic_params(Method::Fmm, 10, 4);
    let a = evaluate(&CpuBackend, &p, &s, &s.as_targets()).unwrap();
    let b = evaluate(&CpuBackend, &p, &moved, &moved.as_targets()).unwrap();
    // the trees differ, so the results agree to the truncation error (about 5e-6 at p = 10
    // with 4 image levels), not to round-off
    let (ev, es) = b.fields.relative_l2_errors(&a.fields);
    assert!(ev < 1e-4 && es < 1e-3, "velocity {ev:e} stretching {es:e}");
}

#[test]
fn a_box_smaller_than_the_cores_is_refused() {
    let mut s = generate(Distribution::Uniform, 200, 27, true);
    s.sigma.iter_mut().for_each(|x| *x = 2.0);
    let e = evaluate(
        &CpuBackend,
        &periodic_params(Method::Fmm, 6, 2),
        &s,
        &s.as_targets(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("box_length") && e.contains("core radius"), "{e}");
    let bad = EvalParams {
        periodic: Some(Periodic {
            box_length: -1.0,
            image_levels: 2,
        }),
        ..EvalParams::default()
    };
    let e = evaluate(&CpuBackend, &bad, &s, &s.as_targets())
        .unwrap_err()
        .to_string();
    assert!(e.contains("box_length"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// The Ewald-split reference (vortex_fmm::periodic::ewald)

use vortex_fmm::periodic::{EwaldParams, EwaldReference};

fn ewald_with(s: &vortex_fmm::Sources, t: &Targets, split: Option<f64>) -> vortex_fmm::Fields {
    let p = EwaldParams {
        split_width: split,
        ..EwaldParams::default()
    };
    EwaldReference::new(s, &p, t.len())
        .unwrap()
        .evaluate(t)
        .unwrap()
}

/// Random targets with random strengths (so that the stretching is tested at points that are
/// not sources, including points outside the box).
fn random_targets(m: usize, seed: u64) -> Targets {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    Targets {
        position: (0..m)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-4.0..4.0)))
            .collect(),
        strength: (0..m)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
            .collect(),
    }
}

#[test]
fn ewald_matches_fourier_reference() {
    // the standard zero-mean set, and a set with three different core radii
    let s = generate(Distribution::Uniform, 400, 31, true);
    let mut mixed = generate(Distribution::Uniform, 300, 32, true);
    for (j, sg) in mixed.sigma.iter_mut().enumerate() {
        *sg *= [0.6, 0.8, 1.0][j % 3];
    }
    for (set, name) in [(&s, "uniform"), (&mixed, "mixed cores")] {
        let mut t = sample(set, 7);
        let extra = random_targets(30, 33);
        t.position.extend(extra.position);
        t.strength.extend(extra.strength);
        let reference = fourier_reference(set, &t, 2.0 * PI, 8.6);
        // a splitting width well above the cores, so that both parts matter
        for split in [None, Some(1.3)] {
            let f = ewald_with(set, &t, split);
            let (ev, es) = f.relative_l2_errors(&reference);
            eprintln!("{name}, s = {split:?}: velocity {ev:e} stretching {es:e}");
            assert!(
                ev < 1e-10 && es < 1e-10,
                "{name}, s = {split:?}: velocity {ev:e} stretching {es:e}"
            );
        }
    }
}

#[test]
fn ewald_does_not_depend_on_the_split() {
    let s = generate(Distribution::Uniform, 20_000, 34, true);
    let sigma = s.sigma[0];
    let t = sample(&s, 97);
    let fields: Vec<(f64, vortex_fmm::Fields)> = [sigma, 2.5 * sigma, 6.0 * sigma]
        .into_iter()
        .map(|w| (w, ewald_with(&s, &t, Some(w))))
        .collect();
    let (_, base) = &fields[1];
    for (w, f) in &fields {
        let (ev, es) = f.relative_l2_errors(base);
        eprintln!("s = {w}: velocity {ev:e} stretching {es:e}");
        assert!(
            ev < 1e-10 && es < 1e-10,
            "s = {w}: velocity {ev:e} stretching {es:e}"
        );
    }
}

#[test]
fn ewald_matches_periodic_direct_sum() {
    // an independent route: the 27 minimum images summed directly plus the far images and the
    // surface correction (crate::evaluators::direct::direct_periodic, p = 16, 6 image levels)
    let s = generate(Distribution::Uniform, 1500, 35, true);
    let t = sample(&s, 11);
    let f = ewald_with(&s, &t, None);
    let p = Periodic {
        box_length: 2.0 * PI,
        image_levels: 6,
    };
    let d = vortex_fmm::evaluators::direct::direct_periodic(&s, &t, &p);
    let (ev, es) = d.relative_l2_errors(&f);
    eprintln!("direct_periodic vs Ewald: velocity {ev:e} stretching {es:e}");
    // the lattice sum truncated at 6 levels differs by ~2e-7 (BENCHMARKS.md)
    assert!(ev < 2e-6 && es < 2e-6, "velocity {ev:e} stretching {es:e}");
}

#[test]
fn ewald_refuses_bad_input() {
    let s = generate(Distribution::Uniform, 100, 36, false);
    let e = EwaldReference::new(&s, &EwaldParams::default(), 10)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("total strength"), "{e}");
    let s = generate(Distribution::Uniform, 100, 36, true);
    let p = EwaldParams {
        split_width: Some(0.5 * s.sigma[0]),
        ..EwaldParams::default()
    };
    let e = EwaldReference::new(&s, &p, 10).err().unwrap().to_string();
    assert!(e.contains("split_width"), "{e}");
    let p = EwaldParams {
        tolerance: 0.0,
        ..EwaldParams::default()
    };
    let e = EwaldReference::new(&s, &p, 10).err().unwrap().to_string();
    assert!(e.contains("tolerance"), "{e}");
}

#[test]
fn periodic_fmm_matches_ewald_at_larger_n() {
    // N = 2e4: beyond what the O(N M k^3) Fourier sum can check
    let s = generate(Distribution::Uniform, 20_000, 37, true);
    let t = sample(&s, 50);
    let reference = ewald_with(&s, &t, None);
    let ev = evaluate(
        &CpuBackend,
        &periodic_params(Method::Fmm, 10, 4),
        &s,
        &s.as_targets(),
    )
    .unwrap();
    let u: Vec<[f64; 3]> = ev.fields.velocity.iter().step_by(50).copied().collect();
    let st: Vec<[f64; 3]> = ev.fields.stretching.iter().step_by(50).copied().collect();
    let e_u = relative_l2_error(&u, &reference.velocity);
    let e_s = relative_l2_error(&st, &reference.stretching);
    eprintln!("FMM p = 10, N = 2e4 vs Ewald: velocity {e_u:e} stretching {e_s:e}");
    assert!(
        e_u < 1e-4 && e_s < 1e-3,
        "velocity {e_u:e} stretching {e_s:e}"
    );
}

// ---------------------------------------------------------------------------------------------
// The periodic near field: image pairs (a, b, +s) and (b, a, -s) evaluated mutually

/// `sources` repeated over the 27 shifts `{-1,0,1}^3` of the box.
fn with_27_images(s: &vortex_fmm::Sources, box_length: f64) -> vortex_fmm::Sources {
    let mut out = vortex_fmm::Sources::default();
    for sx in -1..=1 {
        for sy in -1..=1 {
            for sz in -1..=1 {
                let sh = [sx, sy, sz].map(|k| k as f64 * box_length);
                for j in 0..s.len() {
                    let x = s.position[j];
                    out.position.push(std::array::from_fn(|c| x[c] + sh[c]));
                    out.strength.push(s.strength[j]);
                    out.sigma.push(s.sigma[j]);
                }
            }
        }
    }
    out
}

/// Small periodic test sets inside the box: uniform; with points on and next to the faces
/// and corners (pairs close only through an image) and coincident points; with three core
/// radii (leaves of mixed radii are summed one-sidedly).
fn small_periodic_sets(n: usize) -> Vec<(&'static str, vortex_fmm::Sources)> {
    let uniform = generate(Distribution::Uniform, n, 41, true);
    let mut faces = generate(Distribution::Uniform, n, 42, true);
    let h = PI - 0.01;
    let special = [
        [-PI, 0.3, -0.2],
        [h, 0.31, -0.21],
        [h, h, h],
        [-PI, -PI, -PI],
        [0.5, -PI, h],
        [0.5, h, -PI],
    ];
    for (k, x) in special.iter().enumerate() {
        faces.position[k] = *x;
    }
    for k in 10..20 {
        faces.position[k] = faces.position[10];
    }
    let mut mixed = generate(Distribution::Uniform, n, 43, true);
    for i in 0..mixed.len() {
        mixed.sigma[i] *= [1.0, 1.4, 0.7][i % 3];
    }
    vec![
        ("uniform", uniform),
        ("faces", faces),
        ("mixed sigma", mixed),
    ]
}

/// With no far field (tiny opening angle, the largest core cutoff) and no far images (`K = 0`), the
/// periodic FMM is the near field over the 27 minimum images alone: the mutual P2P of a
/// self-evaluation, image pairs included, must reproduce the f64 direct sum over 27 copies of
/// the sources (velocity less the surface term) to the accuracy of the kernel table, in every
/// leaf size, including one leaf for the whole box (the leaf against its own 26 images).
#[test]
fn periodic_near_field_alone_matches_the_27_image_direct_sum() {
    let l = 2.0 * PI;
    for (name, s) in small_periodic_sets(300) {
        let t = s.as_targets();
        let mut reference = vortex_fmm::evaluators::direct::direct(&with_27_images(&s, l), &t);
        let corr = vortex_fmm::periodic::surface_correction(&s, l);
        for v in &mut reference.velocity {
            (0..3).for_each(|c| v[c] -= corr[c]);
        }
        for leaf in [1, 5, 16, 64, 1000] {
            let p = EvalParams {
                theta: 1e-3,
                core_cutoff: vortex_fmm::MAX_CUTOFF,
                leaf_size: leaf,
                ..periodic_params(Method::Fmm, 4, 0)
            };
            let ev = evaluate(&CpuBackend, &p, &s, &t).unwrap();
            // cells of one point (or of coincident points) have radius 0: their expansions are
            // exact, and beyond MAX_CUTOFF core radii such a pair may be far without any error
            if leaf > 1 {
                assert_eq!(ev.stats.far_pairs, 0, "{name}, leaf {leaf}");
            }
            let (eu, es) = ev.fields.relative_l2_errors(&reference);
            assert!(
                eu < 1e-12 && es < 1e-12,
                "{name}, leaf {leaf}: velocity {eu:e}, stretching {es:e}"
            );
        }
    }
}

/// A periodic self-evaluation (mutual P2P over unshifted and image pairs) and the same points
/// given as separate targets with a negligibly different strength (one-sided P2P, the trusted
/// path) agree to round-off, at several leaf sizes including one leaf for the whole box; and
/// the self-evaluation is bitwise independent of the thread count.
#[test]
fn periodic_mutual_and_one_sided_near_fields_agree() {
    let mut sets = small_periodic_sets(3000);
    let mut tiny = generate(Distribution::Uniform, 40, 44, true);
    tiny.sigma.iter_mut().for_each(|x| *x = 0.6);
    sets.push(("tiny", tiny));
    for (name, s) in &sets {
        let t = s.as_targets();
        let mut t2 = t.clone();
        t2.strength[0][0] *= 1.0 + 1e-15; // not bitwise the sources: one-sided path
        for leaf in [8, 32, 64] {
            let p = EvalParams {
                leaf_size: leaf,
                ..periodic_params(Method::Fmm, 6, 2)
            };
            let a = evaluate(&CpuBackend, &p, s, &t).unwrap();
            let b = evaluate(&CpuBackend, &p, s, &t2).unwrap();
            let (dv, ds) = a.fields.relative_l2_errors(&b.fields);
            assert!(
                dv < 1e-13 && ds < 1e-13,
                "{name}, leaf {leaf}: velocity {dv:e}, stretching {ds:e}"
            );
        }
        let p = periodic_params(Method::Fmm, 6, 2);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| evaluate(&CpuBackend, &p, s, &t).unwrap())
        };
        assert_eq!(
            run(1).fields,
            run(4).fields,
            "{name}: 1 and 4 threads differ"
        );
    }
}
