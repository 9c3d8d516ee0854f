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
        let eu = relative_l2_error(&got.velocity, &want.velocity);
        let es = relative_l2_error(&got.stretching, &want.stretching);
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
        let eu = relative_l2_error(&got.velocity, &want.velocity);
        let es = relative_l2_error(&got.stretching, &want.stretching);
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
