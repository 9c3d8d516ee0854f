//! The CUDA backend against the CPU solver. The tests that need a GPU are ignored unless the
//! `gpu-tests` feature is on (then they fail without a GPU): on a GPU machine
//! `cargo test --release --workspace --features gpu-tests`. The NVRTC compilation of
//! `kernels/spectral.cu` needs the NVRTC library only (no GPU): it is ignored by default and
//! run with `-- --ignored nvrtc`, as `.ci/run` does.
#![cfg(feature = "cuda")]

use vortex_spectral::config::Dealias;
use vortex_spectral::field::SpectralField;
use vortex_spectral::gpu::{GpuSolver, SPECTRAL};
use vortex_spectral::solver::{initial_state, Solver, StepMode};
use vortex_spectral::{initial, VelocityField};

/// The GPU solver for this field (panics with the reason when no GPU can be used).
fn gpu_solver(f: &VelocityField, nu: f64, d: Dealias, mode: StepMode) -> GpuSolver {
    if let Err(why) = vortex_spectral::backend::cuda_usable() {
        panic!("no usable CUDA device: {why}");
    }
    GpuSolver::new(&initial_state(f, d), nu, d, mode, 0).expect("CUDA solver")
}

fn fields(n: usize) -> Vec<(&'static str, VelocityField, f64)> {
    let iso = initial::isotropic(
        n,
        &initial::IsotropicParams {
            k_peak: 4.0,
            energy: Some(0.5),
            re_lambda: None,
            seed: 7,
            nu: 0.01,
        },
    );
    vec![
        ("taylor-green", initial::taylor_green(n), 0.02),
        ("isotropic", iso, 0.01),
    ]
}

#[test]
#[ignore = "needs the NVRTC library: cargo test --release --workspace -- --ignored nvrtc (.ci/run)"]
fn kernels_compile_with_nvrtc() {
    assert!(
        vortex_cuda::nvrtc_present(),
        "the NVRTC library (libnvrtc.so.13) cannot be loaded: put its folder on LD_LIBRARY_PATH \
         (.ci/run installs it from PyPI: nvidia-cuda-nvrtc==13.0.*)"
    );
    for cc in [(9, 0), (8, 0)] {
        vortex_cuda::compile(&SPECTRAL, cc, &[]).unwrap();
    }
    println!("kernels/spectral.cu compiled with NVRTC");
}

#[test]
fn no_gpu_is_an_error_not_a_panic() {
    match vortex_spectral::backend::cuda_usable() {
        Ok(()) => println!("CUDA device present"),
        Err(why) => {
            println!("skipped: no CUDA device ({why})");
            let f = initial::taylor_green(8);
            let e = GpuSolver::new(
                &initial_state(&f, Dealias::ThreeHalves),
                0.01,
                Dealias::ThreeHalves,
                StepMode::Fixed(0.01),
                0,
            )
            .unwrap_err();
            assert!(!e.to_string().is_empty());
            let c = vortex_spectral::Config::from_str_named(
                "n = 8\nnu = 0.01\nt_end = 0.1\ndt = 0.01\nbackend = \"cuda\"\n[initial]\nkind = \"taylor-green\"\n",
                "x.toml",
            )
            .unwrap();
            let e = vortex_spectral::backend::new_stepper(&c, c.backend)
                .err()
                .unwrap();
            println!("backend = \"cuda\" here: {e}");
            // auto falls back to the CPU
            let s =
                vortex_spectral::backend::new_stepper(&c, vortex_spectral::Backend::Auto).unwrap();
            assert!(s.backend_name().starts_with("cpu"));
        }
    }
}

/// N steps (and the first nonlinear term) of the GPU stepper agree with the CPU stepper to
/// 1e-12 relative, for Taylor-Green and a random isotropic field, 32^3 and 48^3, both rules.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
)]
fn gpu_matches_cpu() {
    let steps = 10;
    for n in [32usize, 48] {
        for (name, f, dt) in fields(n) {
            for d in [Dealias::ThreeHalves, Dealias::TwoThirds] {
                let nu = 0.01;
                let mode = StepMode::Fixed(dt);
                let mut g = gpu_solver(&f, nu, d, mode);
                let mut c = Solver::with_field(&f, nu, d, mode).unwrap();
                let e0 = c.spectral().relative_diff(g.spectral().unwrap());
                assert_eq!(e0, 0.0, "uploaded state differs");
                let en = c
                    .nonlinear_term()
                    .relative_diff(&g.nonlinear_term().unwrap());
                for _ in 0..steps {
                    let a = c.step().unwrap();
                    let b = g.step().unwrap();
                    assert_eq!(a.dt, b.dt);
                    assert!((a.cfl - b.cfl).abs() <= 1e-12 * a.cfl, "{a:?} {b:?}");
                }
                let es = c.spectral().relative_diff(g.spectral().unwrap());
                println!(
                    "{name:>12} n = {n} {d:?}: nonlinear term rel. diff {en:.2e}, state after {steps} steps {es:.2e}"
                );
                assert!(en < 1e-12, "{name} {n} {d:?}: nonlinear term {en:e}");
                assert!(es < 1e-12, "{name} {n} {d:?}: state {es:e}");
            }
        }
    }
}

/// The adaptive step: dt from max(|u|+|v|+|w|) on the product grid agrees to round-off.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
)]
fn gpu_cfl_step_matches_cpu() {
    let f = initial::taylor_green(32);
    let mode = StepMode::Cfl {
        cfl: 0.5,
        dt_max: 1.0,
    };
    let mut g = gpu_solver(&f, 0.01, Dealias::ThreeHalves, mode);
    let mut c = Solver::with_field(&f, 0.01, Dealias::ThreeHalves, mode).unwrap();
    for _ in 0..5 {
        let a = c.step().unwrap();
        let b = g.step().unwrap();
        assert!((a.dt - b.dt).abs() <= 1e-13 * a.dt, "{a:?} {b:?}");
    }
    let e = c.spectral().relative_diff(g.spectral().unwrap());
    println!("CFL mode, 5 steps: state rel. diff {e:.2e}");
    assert!(e < 1e-12, "{e:e}");
}

/// Restart on the GPU: download after k steps, upload into a fresh solver, continue; the result
/// equals the uninterrupted run bit for bit.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
)]
fn gpu_restart_is_bit_for_bit() {
    let f = initial::taylor_green(32);
    let (nu, d, mode) = (0.01, Dealias::ThreeHalves, StepMode::Fixed(0.02));
    let mut a = gpu_solver(&f, nu, d, mode);
    for _ in 0..6 {
        a.step().unwrap();
    }
    let mut b = gpu_solver(&f, nu, d, mode);
    for _ in 0..3 {
        b.step().unwrap();
    }
    let mid = b.spectral().unwrap().clone();
    let (t, k) = (b.time(), b.steps());
    let mut r = gpu_solver(&f, nu, d, mode);
    r.set_state(mid, t, k).unwrap();
    for _ in 0..3 {
        r.step().unwrap();
    }
    assert_eq!(a.time().to_bits(), r.time().to_bits());
    let (sa, sr) = (a.spectral().unwrap().clone(), r.spectral().unwrap());
    for c in 0..3 {
        for (x, y) in sa.c[c].iter().zip(&sr.c[c]) {
            assert_eq!(x.re.to_bits(), y.re.to_bits());
            assert_eq!(x.im.to_bits(), y.im.to_bits());
        }
    }
    println!("GPU restart after 3 of 6 steps: bit for bit");
}

/// The projection kernel gives the host projection bit for bit (same rounding, no FMA).
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
)]
fn gpu_projection_matches_host_bitwise() {
    let f = fields(16).remove(1).1;
    let d = Dealias::TwoThirds;
    let mut g = gpu_solver(&f, 0.01, d, StepMode::Fixed(0.01));
    // a non-solenoidal, untruncated state
    let raw = SpectralField::from_physical(&f);
    g.set_state(raw, 0.0, 0).unwrap();
    g.project_state().unwrap();
    let host = initial_state(&f, d);
    assert_eq!(host.relative_diff(g.spectral().unwrap()), 0.0);
}
