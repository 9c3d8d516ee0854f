//! Periodic evaluations against the independent Fourier-space sum of Gaussian blobs.

use fmm::periodic::{fourier_reference, Periodic};
use fmm::testsets::{generate, Distribution};
use fmm::{evaluate, relative_l2_error, CpuBackend, EvalParams, Method, Targets};
use std::f64::consts::PI;

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
fn sample(s: &fmm::Sources, step: usize) -> Targets {
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
        let ev_ = relative_l2_error(&ev.fields.velocity, &reference.velocity);
        let es = relative_l2_error(&ev.fields.stretching, &reference.stretching);
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
    assert!(relative_l2_error(&b.fields.velocity, &a.fields.velocity) < 1e-10);
    assert!(relative_l2_error(&b.fields.stretching, &a.fields.stretching) < 1e-10);
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
