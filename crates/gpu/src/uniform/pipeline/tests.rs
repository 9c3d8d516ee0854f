use super::*;
use crate::uniform::evaluate_reference;
use vortex_fmm::relative_l2_error;

#[test]
fn packing_into_staging_equals_the_layout_packing() {
    let s = vortex_fmm::testsets::standard(10_000, 3);
    let (p, a) = crate::layout::pack_sources(&s);
    let mut out = vec![0.0f32; 8 * s.len() + 5];
    pack_sources_into(&s, &mut out);
    assert_eq!(&out[..4 * s.len()], &p[..]);
    assert_eq!(&out[4 * s.len()..8 * s.len()], &a[..]);
}

#[test]
fn bad_parameters_are_errors_not_panics() {
    let s = vortex_fmm::testsets::standard(100, 3);
    for params in [
        UniformParams {
            order: 0,
            ..Default::default()
        },
        UniformParams {
            grid: Some((9, 1)),
            ..Default::default()
        },
        UniformParams {
            grid: Some((0, 1)),
            ..Default::default()
        },
    ] {
        assert!(params.validate().is_err());
        assert!(evaluate_reference(&s, &params).is_err());
    }
}

/// On a GPU: the device path against the CPU f64 uniform-grid FMM (same grid and lists;
/// the difference is the f32 arithmetic) and bitwise repeatable.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
)]
fn device_matches_the_f64_reference() {
    let fmm_ = UniformFmm::on_device(0).unwrap();
    let mut s = vortex_fmm::testsets::standard(20_000, 5);
    s.sigma.iter_mut().for_each(|v| *v *= 0.5);
    for (p, grid) in [(6, None), (8, Some((3, 1))), (8, Some((1, 3)))] {
        let params = UniformParams {
            order: p,
            grid,
            ..Default::default()
        };
        let want = evaluate_reference(&s, &params).unwrap();
        let (got, tm) = fmm_.evaluate(&s, &params).unwrap();
        let (again, _) = fmm_.evaluate(&s, &params).unwrap();
        assert_eq!(got, again, "not repeatable");
        let (eu, es) = got.relative_l2_errors(&want);
        println!(
            "p {p} grid {grid:?} (n {}): GPU vs CPU f64 {eu:.2e} / {es:.2e}",
            tm.n
        );
        assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
    }
}

/// On a GPU: the periodic device path against the periodic f64 twin (same grid, lists,
/// far images and surface correction), repeatable, and refusing a non-zero total
/// strength.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
)]
fn periodic_device_matches_the_f64_reference() {
    use crate::uniform::reference::evaluate_reference_periodic;
    let fmm_ = UniformFmm::on_device(0).unwrap();
    let per = Periodic::default();
    let mut s = vortex_fmm::testsets::generate(
        vortex_fmm::testsets::Distribution::Uniform,
        20_000,
        7,
        true,
    );
    s.sigma.iter_mut().for_each(|v| *v *= 0.5);
    // a few particles outside the box: wrapped on both paths
    s.position[3][0] += 2.0 * per.box_length;
    s.position[11][2] -= per.box_length;
    for (p, grid) in [
        (8, None),
        (10, Some((3, 1))),
        (8, Some((1, 3))),
        (6, Some((1, 2))),
    ] {
        let params = UniformParams {
            order: p,
            grid,
            ..Default::default()
        };
        let want = evaluate_reference_periodic(&s, &params, &per).unwrap();
        let (got, tm) = fmm_.evaluate_periodic(&s, &params, &per).unwrap();
        let (again, _) = fmm_.evaluate_periodic(&s, &params, &per).unwrap();
        assert_eq!(got, again, "not repeatable");
        let (eu, es) = got.relative_l2_errors(&want);
        println!(
            "periodic p {p} grid {grid:?} (n {}): GPU vs CPU f64 {eu:.2e} / {es:.2e}, far images {:.2} ms",
            tm.n,
            tm.far_images * 1e3
        );
        assert!(eu < 2e-5 && es < 2e-4, "{eu:.2e} {es:.2e}");
    }
    let mut bad = s.clone();
    bad.strength[0][1] += 1.0;
    let e = fmm_
        .evaluate_periodic(&bad, &UniformParams::default(), &per)
        .unwrap_err();
    assert!(e.to_string().contains("total strength"), "{e}");
}

/// On a GPU: the dense M2L kernels of one level (FP32 pipes, FP64 tensor cores) against
/// their f64 host emulation on random multipoles (free space with a z slab, periodic),
/// p = 4..14.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
)]
fn dense_m2l_kernel_matches_its_emulation() {
    use crate::uniform::dense_m2l::{emulate_level, DenseM2l};
    use crate::uniform::M2lKernel;
    let fmm_ = UniformFmm::on_device(0).unwrap();
    let mut state = 0x2545f4914f6cdd1du64;
    let mut rnd = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let cases = [
        (4, 8, false, (0, 8)),
        (6, 8, false, (3, 6)),
        (10, 8, false, (0, 8)),
        (10, 6, true, (0, 6)),
        (14, 4, false, (1, 4)),
    ];
    let kernels = [M2lKernel::Dense, M2lKernel::Tensor];
    for (kernel, (p, nl, periodic, zr)) in kernels
        .into_iter()
        .flat_map(|k| cases.into_iter().map(move |c| (k, c)))
    {
        // a width exact in f32 (the kernels take it as f32): the tensor kernel's products and
        // sums are f64, so its error is the f32 rounding of the inputs and outputs alone
        let w: f64 = 0.109375;
        let nf = 2 * ncoef(p);
        let cells = nl * nl * nl;
        // multipoles of cells of width w: degree n scaled by w^n, Im c(n, 0) = 0
        let mut mult = vec![0.0f64; cells * 3 * nf];
        for (i, x) in mult.iter_mut().enumerate() {
            let k = (i % nf) / 2;
            let n = (0..=p).find(|&n| (n + 1) * (n + 2) / 2 > k).unwrap();
            let m = k - n * (n + 1) / 2;
            if !(m == 0 && i % 2 == 1) {
                *x = rnd() * w.powi(n as i32);
            }
        }
        let m32: Vec<f32> = mult.iter().map(|&x| x as f32).collect();
        let m64: Vec<f64> = m32.iter().map(|&x| x as f64).collect();
        let got = fmm_
            .dense_m2l_level_by(kernel, p, nl, periodic, w, zr.0, zr.1, &m32)
            .unwrap();
        let mut want = vec![0.0; cells * 3 * nf];
        emulate_level(
            &DenseM2l::new(p),
            nl,
            periodic,
            w,
            zr.0,
            zr.1,
            &m64,
            &mut want,
        );
        let got64: Vec<f64> = got.iter().map(|&x| x as f64).collect();
        let e = relative_l2_error_flat(&got64, &want);
        println!(
            "{kernel:?} M2L p {p} nl {nl} periodic {periodic} planes {zr:?}: device vs f64 {e:.2e}"
        );
        // FP32: accumulation over 189 offsets of up to 128-term rows, ~sqrt(24000) 6e-8 =
        // 9e-6 at worst, 2.19e-6 measured at p = 10 on an H100; FP64 tensor cores: the f32
        // rounding of the stored locals, 6e-8
        let tol = match kernel {
            M2lKernel::Tensor => 2e-7,
            _ => 5e-6,
        };
        assert!(e < tol, "{kernel:?} p {p}: {e:.2e}");
        // nothing written outside the planes
        for c in 0..cells {
            if c / (nl * nl) < zr.0 || c / (nl * nl) >= zr.1 {
                assert!(got[c * 3 * nf..(c + 1) * 3 * nf].iter().all(|&x| x == 0.0));
            }
        }
    }
}

fn relative_l2_error_flat(got: &[f64], want: &[f64]) -> f64 {
    let d: f64 = got.iter().zip(want).map(|(a, b)| (a - b).powi(2)).sum();
    let n: f64 = want.iter().map(|b| b * b).sum();
    (d / n).sqrt()
}

/// On a GPU: the whole evaluation with the dense M2L against the rotation M2L (velocity
/// relative error below 1e-6 at p = 10, the f32 level) and both against the f64 twin,
/// free space and periodic; repeatable.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
)]
fn dense_and_rotation_m2l_agree_on_whole_evaluations() {
    use crate::uniform::{evaluate_reference_periodic, M2lKernel};
    let fmm_ = UniformFmm::on_device(0).unwrap();
    let mut s = vortex_fmm::testsets::standard(200_000, 9);
    s.sigma.iter_mut().for_each(|v| *v *= 0.5);
    let per = Periodic::default();
    let mut sp = vortex_fmm::testsets::generate(
        vortex_fmm::testsets::Distribution::Uniform,
        50_000,
        3,
        true,
    );
    sp.sigma.iter_mut().for_each(|v| *v *= 0.5);
    for (p, periodic) in [(10, false), (6, false), (10, true), (14, false)] {
        let run = |m2l: M2lKernel| {
            let params = UniformParams {
                order: p,
                m2l,
                ..Default::default()
            };
            let (f, tm) = if periodic {
                fmm_.evaluate_periodic(&sp, &params, &per).unwrap()
            } else {
                fmm_.evaluate(&s, &params).unwrap()
            };
            (f, tm, params)
        };
        let (rot, tr, params) = run(M2lKernel::Rotation);
        let (den, td, _) = run(M2lKernel::Dense);
        let (again, _, _) = run(M2lKernel::Dense);
        assert_eq!(den, again, "dense not repeatable");
        let (ten, tt, _) = run(M2lKernel::Tensor);
        let (again, _, _) = run(M2lKernel::Tensor);
        assert_eq!(ten, again, "tensor not repeatable");
        let want = if periodic {
            evaluate_reference_periodic(&sp, &params, &per).unwrap()
        } else {
            evaluate_reference(&s, &params).unwrap()
        };
        let (eu, es) = den.relative_l2_errors(&rot);
        let (eur, edr) = (
            relative_l2_error(&rot.velocity, &want.velocity),
            relative_l2_error(&den.velocity, &want.velocity),
        );
        println!(
            "p {p} periodic {periodic} n {}: dense vs rotation {eu:.2e} / {es:.2e}; vs f64 rotation {eur:.2e} dense {edr:.2e}; M2L kernel {:.4} s -> {:.4} s",
            td.n, tr.k_m2l, td.k_m2l
        );
        assert!(eu < 1e-6 && es < 1e-5, "{eu:.2e} {es:.2e}");
        assert!(
            edr < 2e-5 && edr < 2.0 * eur + 1e-7,
            "{edr:.2e} vs {eur:.2e}"
        );
        let (etu, ets) = ten.relative_l2_errors(&rot);
        let etr = relative_l2_error(&ten.velocity, &want.velocity);
        println!(
            "p {p} periodic {periodic}: tensor vs rotation {etu:.2e} / {ets:.2e}; vs f64 {etr:.2e}; M2L kernel {:.4} s",
            tt.k_m2l
        );
        assert!(etu < 1e-6 && ets < 1e-5, "{etu:.2e} {ets:.2e}");
        assert!(
            etr < 2e-5 && etr < 2.0 * eur + 1e-7,
            "{etr:.2e} vs {eur:.2e}"
        );
    }
}

/// On a GPU: the P2P kernel against the f64 direct sum where every pair is near (a grid of
/// 2^3 leaves, every leaf a neighbour of every other: no far field), with core radii spread
/// so that the pairs cover the three branches of `kernel_factors` (rho < 1, the closed
/// form, and the singular kernel beyond rho^2 = 44), bitwise repeatable, on both streams
/// (the P2P beside the far field, and alone while profiled).
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
)]
fn near_field_matches_the_f64_direct_sum_on_every_branch() {
    use crate::uniform::profile;
    use vortex_fmm::evaluators::direct::direct;
    let fmm_ = UniformFmm::on_device(0).unwrap();
    for seed in [11u64, 12] {
        let mut s = vortex_fmm::testsets::standard(6_000, seed);
        // core radii log-uniform in [5e-3, 0.1] of the unit cube: rho from 0 to ~350
        let mut state = 0x9e3779b97f4a7c15u64 ^ seed;
        for sg in s.sigma.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            *sg = 5e-3 * (20f64).powf(u);
        }
        let targets = vortex_fmm::Targets {
            position: s.position.clone(),
            strength: s.strength.clone(),
        };
        let want = direct(&s, &targets);
        let params = UniformParams {
            order: 4,
            grid: Some((2, 0)),
            ..Default::default()
        };
        let (got, tm) = fmm_.evaluate(&s, &params).unwrap();
        let (again, _) = fmm_.evaluate(&s, &params).unwrap();
        assert_eq!(got, again, "not repeatable");
        profile::start();
        let profiled = fmm_.evaluate(&s, &params);
        let prof = profile::finish();
        assert_eq!(got, profiled.unwrap().0, "the profiled evaluation differs");
        assert!(prof
            .kernels
            .iter()
            .any(|k| k.name == "p2p_near" && k.launches == 1));
        assert_eq!(tm.p2p_pairs, (s.len() * s.len()) as u64);
        let (eu, es) = got.relative_l2_errors(&want);
        println!("near field only, seed {seed}: GPU vs f64 direct {eu:.2e} / {es:.2e}");
        // f32 sums of 6000 terms: ~1e-6
        assert!(eu < 1e-5 && es < 1e-4, "{eu:.2e} {es:.2e}");
    }
}
