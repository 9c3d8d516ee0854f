//! Checks behind the cross-validation with the spectral solver (validation/taylor-green).

use vortex_fmm::Targets;
use vortex_method::validate::CrossCase;
use vortex_method::DistSimulation;

/// The stretching `(alpha . grad) u` returned by the evaluation equals a centred finite
/// difference of the evaluated velocity along `alpha`, on the periodic 3-D Taylor-Green particles
/// displaced off the lattice (so that the stretching is not zero by symmetry). This rules out a
/// sign or transpose error as the cause of the enstrophy deficit seen at 16^3.
#[test]
fn stretching_equals_the_velocity_gradient_along_alpha() {
    let case = CrossCase {
        n: 8,
        order: 10,
        ..Default::default()
    };
    let cfg = case.vortex_config().unwrap();
    let mut sim =
        DistSimulation::new(&vortex_domain::SelfComm, cfg, vortex_fmm::CpuBackend).unwrap();
    let h = 2.0 * std::f64::consts::PI / 8.0;
    // deterministic displacement: a smooth map, about 0.3 h
    for x in sim.state.particles.position.iter_mut() {
        let (a, b, c) = (x[0], x[1], x[2]);
        x[0] += 0.3 * h * (b + 0.3).sin();
        x[1] += 0.3 * h * (c - 0.7).sin();
        x[2] += 0.3 * h * (a + 1.1).cos();
    }
    // the derivatives first: the simulation may reorder its particles (by Morton key) there
    let f = sim.derivatives().unwrap().clone();
    let p = sim.state.particles.clone();
    let eps = 1e-4;
    let mut plus = Vec::new();
    let mut minus = Vec::new();
    for (x, a) in p.position.iter().zip(&p.strength) {
        plus.push([x[0] + eps * a[0], x[1] + eps * a[1], x[2] + eps * a[2]]);
        minus.push([x[0] - eps * a[0], x[1] - eps * a[1], x[2] - eps * a[2]]);
    }
    let up = sim
        .rhs
        .evaluate_at(&p.to_sources(), &Targets::points(plus))
        .unwrap();
    let um = sim
        .rhs
        .evaluate_at(&p.to_sources(), &Targets::points(minus))
        .unwrap();
    let (mut num, mut den) = (0.0, 0.0);
    for i in 0..p.len() {
        for c in 0..3 {
            let fd = (up.velocity[i][c] - um.velocity[i][c]) / (2.0 * eps);
            num += (fd - f.stretching[i][c]).powi(2);
            den += f.stretching[i][c].powi(2);
        }
    }
    let rel = (num / den).sqrt();
    println!(
        "stretching vs finite difference of the velocity along alpha: relative L2 {rel:.3e} (|S| rms {:.3e})",
        (den / p.len() as f64).sqrt()
    );
    assert!(den > 0.0);
    assert!(rel < 1e-4, "relative difference {rel}");
}
