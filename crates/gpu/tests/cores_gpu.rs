//! The GPU kernels with every core (2, 4, 6: `kernels/p2p.cu` compiled with `CORE_M`) against
//! the f64 direct sum of the same core on fresh random sets (the seed is printed with every
//! line): the adaptive plan on the CUDA backend (treecode, FMM, PPM; free space and periodic),
//! the all-pairs kernel, the uniform grid on one GPU and in slabs over one rank (free space and
//! periodic), and the uniform grid against its f64 twin of the same core. fp32 kernels: the
//! tolerances of the Gaussian's GPU tests.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vortex_fmm::evaluator::errors_against_direct;
use vortex_fmm::evaluators::direct::direct_core;
use vortex_fmm::kernel::CoreOrder;
use vortex_fmm::periodic::Periodic;
use vortex_fmm::testsets::{generate, Distribution};
use vortex_fmm::{EvalParams, Evaluator, Method, PlanEvaluator, TargetSpec, Targets};
use vortex_gpu::uniform::evaluator::grid_params;
use vortex_gpu::uniform::{evaluate_reference, evaluate_reference_periodic};
use vortex_gpu::{CudaBackend, UniformEvaluator, UniformSlabEvaluator};

fn params(method: Method, order: usize, core: CoreOrder, periodic: Option<Periodic>) -> EvalParams {
    EvalParams {
        method,
        order,
        core,
        core_cutoff: core.default_cutoff(EvalParams::default().core_cutoff),
        periodic,
        ..Default::default()
    }
}

fn check(what: &str, (eu, es): (f64, f64)) {
    println!("{what}: velocity {eu:.2e}, stretching {es:.2e}");
    assert!(eu < 1e-4 && es < 1e-3, "{what}: {eu:.2e} {es:.2e}");
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release -p vortex-gpu --features gpu-tests"
)]
fn every_gpu_kernel_honours_every_core() {
    let seed: u64 = rand::random();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for periodic in [None, Some(Periodic::default())] {
        let s = generate(Distribution::Uniform, 6000, rng.gen(), periodic.is_some());
        let points = Targets::points(
            (0..500)
                .map(|_| std::array::from_fn(|_| rng.gen_range(-3.0..3.0)))
                .collect(),
        );
        let tag = |core: CoreOrder, what: &str| {
            format!(
                "seed {seed} core {core} periodic {} {what}",
                periodic.is_some()
            )
        };
        for core in CoreOrder::ALL {
            // the adaptive plan on the CUDA backend
            for method in [Method::Treecode, Method::Fmm, Method::Ppm] {
                if method == Method::Treecode && periodic.is_some() {
                    continue; // refused by the planner (no far-image locals on the GPU)
                }
                let mut ev = PlanEvaluator::new(
                    CudaBackend::new(0).unwrap(),
                    params(method, 8, core, periodic),
                )
                .unwrap();
                for spec in [TargetSpec::Sources, TargetSpec::Points(&points)] {
                    let (eu, es) = errors_against_direct(&mut ev, &s, spec).unwrap();
                    let es = if matches!(spec, TargetSpec::Sources) {
                        es
                    } else {
                        0.0
                    };
                    check(
                        &tag(core, &format!("{method} at {}", spec.kind())),
                        (eu, es),
                    );
                }
            }
            // the all-pairs kernel (free space)
            if periodic.is_none() {
                let be = CudaBackend::new(0).unwrap();
                let t = s.as_targets();
                let (f, _) = be.all_pairs(core, &s, &t).unwrap();
                let want = direct_core(core, &s, &t);
                check(&tag(core, "all pairs"), f.relative_l2_errors(&want));
            }
            // the uniform grid (p = 10), one GPU and slabs over one rank
            let p = params(Method::Fmm, 10, core, periodic);
            let mut ev = UniformEvaluator::new(0, p.clone()).unwrap();
            let got = ev.evaluate(&s, TargetSpec::Sources).unwrap();
            let want = vortex_fmm::DirectEvaluator::new(p.clone())
                .evaluate(&s, TargetSpec::Sources)
                .unwrap();
            check(
                &tag(core, "uniform grid"),
                got.fields.relative_l2_errors(&want.fields),
            );
            let twin = grid_params(&p);
            assert_eq!(twin.core, core);
            let reference = match &periodic {
                None => evaluate_reference(&s, &twin).unwrap(),
                Some(q) => evaluate_reference_periodic(&s, &twin, q).unwrap(),
            };
            check(
                &tag(core, "uniform grid against its f64 twin"),
                got.fields.relative_l2_errors(&reference),
            );
            let comm = vortex_domain::SelfComm;
            let mut slabs = UniformSlabEvaluator::new(&comm, 0, p).unwrap();
            let got = slabs.evaluate(&s, TargetSpec::Sources).unwrap();
            check(
                &tag(core, "uniform slabs (one rank)"),
                got.fields.relative_l2_errors(&want.fields),
            );
        }
    }
}

/// The uniform grid's f64 twin (the CPU emulation of the device passes) with every core against
/// the direct sum of the same core, free space and periodic (runs without a GPU).
#[test]
fn the_uniform_twin_honours_every_core() {
    let seed: u64 = rand::random();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for periodic in [None, Some(Periodic::default())] {
        // 4000 particles: cores small enough (sigma = 2 pi / N^(1/3)) for 3 leaves per side of
        // width 4.9 sigma, the sixth-order core's least gap
        let s = generate(Distribution::Uniform, 4000, rng.gen(), periodic.is_some());
        for core in CoreOrder::ALL {
            let p = params(Method::Fmm, 10, core, periodic);
            let twin = grid_params(&p);
            let got = match &periodic {
                None => evaluate_reference(&s, &twin).unwrap(),
                Some(q) => evaluate_reference_periodic(&s, &twin, q).unwrap(),
            };
            let want = vortex_fmm::DirectEvaluator::new(p)
                .evaluate(&s, TargetSpec::Sources)
                .unwrap();
            check(
                &format!(
                    "seed {seed} core {core} periodic {} f64 twin",
                    periodic.is_some()
                ),
                got.relative_l2_errors(&want.fields),
            );
        }
    }
}
