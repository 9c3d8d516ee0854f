//! Every CPU engine with every core (`EvalParams::core`: 2, 4, 6) against the f64 direct sum
//! of the same core, on fresh random sets (the seed is printed with any failure): the adaptive
//! plan's direct, treecode, FMM and PPM in free space, the FMM and PPM in a periodic box, at
//! the sources and at separate targets.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vortex_fmm::evaluator::errors_against_direct;
use vortex_fmm::kernel::CoreOrder;
use vortex_fmm::periodic::Periodic;
use vortex_fmm::testsets::{generate, Distribution};
use vortex_fmm::{CpuBackend, EvalParams, Method, PlanEvaluator, TargetSpec, Targets};

#[test]
fn every_cpu_engine_honours_every_core() {
    let seed: u64 = rand::random();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for periodic in [None, Some(Periodic::default())] {
        let s = generate(Distribution::Uniform, 1500, rng.gen(), periodic.is_some());
        let points = Targets::points(
            (0..100)
                .map(|_| std::array::from_fn(|_| rng.gen_range(-3.0..3.0)))
                .collect(),
        );
        let methods: &[Method] = match periodic {
            None => &[Method::Direct, Method::Treecode, Method::Fmm, Method::Ppm],
            Some(_) => &[Method::Fmm, Method::Ppm],
        };
        for core in CoreOrder::ALL {
            for &method in methods {
                let params = EvalParams {
                    method,
                    order: 10,
                    leaf_size: 32,
                    core,
                    core_cutoff: core.default_cutoff(EvalParams::default().core_cutoff),
                    periodic,
                    ..Default::default()
                };
                let mut ev = PlanEvaluator::new(CpuBackend, params).unwrap();
                for spec in [TargetSpec::Sources, TargetSpec::Points(&points)] {
                    let (eu, es) = errors_against_direct(&mut ev, &s, spec).unwrap();
                    let what = format!(
                        "seed {seed}, core {core}, {method}, periodic {}, at {}",
                        periodic.is_some(),
                        spec.kind()
                    );
                    assert!(eu < 1e-4, "{what}: velocity {eu:.2e}");
                    if matches!(spec, TargetSpec::Sources) {
                        assert!(es < 1e-3, "{what}: stretching {es:.2e}");
                    }
                }
            }
        }
    }
}
