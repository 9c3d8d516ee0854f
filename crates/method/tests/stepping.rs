//! Time stepping: one AB2 step and one Heun step against hand computation, second order in time.

mod common;
use common::{free_stepper, max_abs_diff};
use vortex_method::rhs::{Derivatives, RightHandSide};
use vortex_method::stepping::{Scheme, State, Stepper};
use vortex_method::{Particles, Result};

/// Solid-body rotation about z with angular speed 1, strengths decaying at rate 1/2.
struct Model;
impl RightHandSide for Model {
    fn eval(&mut self, p: &Particles) -> Result<Derivatives> {
        Ok(Derivatives {
            velocity: p.position.iter().map(|x| [-x[1], x[0], 0.0]).collect(),
            stretching: p.strength.iter().map(|a| a.map(|v| -0.5 * v)).collect(),
        })
    }
}

/// The stepper of the model: time step `dt` on a free lattice of spacing 1.
fn stepper(dt: f64) -> Stepper {
    free_stepper(dt, 1.0)
}

#[test]
#[allow(clippy::neg_multiply)] // the hand computation keeps the signs of the model ODE visible
fn one_ab2_and_one_heun_step_match_hand_computation() {
    let dt = 0.1;
    let s = stepper(dt);
    let mut st = State::initial(Particles::new(
        vec![[1.0, 0.0, 0.0]],
        vec![[2.0, 0.0, 0.0]],
        0.1,
    ));
    // Heun: y* = (1, 0.1, 0), f* = (-0.1, 1, 0); y1 = y0 + dt/2 ((0,1,0) + (-0.1,1,0))
    let f0 = Model.eval(&st.particles).unwrap();
    let r = s.advance(&mut st, f0.clone(), &mut Model).unwrap();
    assert_eq!(r.scheme, Scheme::Heun);
    let x1 = [1.0 - 0.05 * 0.1, 0.1, 0.0];
    // alpha: a* = 2 - 0.1, alpha1 = 2 + 0.05 (-1 - 0.95)
    let a1 = 2.0 + 0.05 * (-1.0 - 0.95);
    assert!(max_abs_diff(&st.particles.position, &[x1]) < 1e-15);
    assert!((st.particles.strength[0][0] - a1).abs() < 1e-15);
    assert_eq!(st.previous.as_ref().unwrap(), &f0);
    // AB2: y2 = y1 + dt (3/2 f(y1) - 1/2 f(y0))
    let f1 = Model.eval(&st.particles).unwrap();
    let r = s.advance(&mut st, f1, &mut Model).unwrap();
    assert_eq!(r.scheme, Scheme::AdamsBashforth2);
    let x2 = [
        x1[0] + dt * (1.5 * -x1[1] - 0.5 * 0.0),
        x1[1] + dt * (1.5 * x1[0] - 0.5 * 1.0),
        0.0,
    ];
    let a2 = a1 + dt * (1.5 * -0.5 * a1 - 0.5 * -1.0);
    assert!(
        max_abs_diff(&st.particles.position, &[x2]) < 1e-15,
        "{:?} {:?}",
        st.particles.position,
        x2
    );
    assert!((st.particles.strength[0][0] - a2).abs() < 1e-15);
    assert_eq!(st.step, 2);
}

fn run_model(dt: f64, t_end: f64) -> Particles {
    let s = stepper(dt);
    let mut st = State::initial(Particles::new(
        vec![[1.0, 0.5, 0.2]],
        vec![[1.0, -1.0, 0.5]],
        0.1,
    ));
    let n = (t_end / dt).round() as u64;
    for _ in 0..n {
        let f = Model.eval(&st.particles).unwrap();
        s.advance(&mut st, f, &mut Model).unwrap();
    }
    st.particles
}

#[test]
fn ab2_is_second_order_on_solid_body_rotation() {
    let t: f64 = 2.0;
    let (c, sn) = (t.cos(), t.sin());
    let exact_x = [1.0 * c - 0.5 * sn, 1.0 * sn + 0.5 * c, 0.2];
    let decay = (-0.5 * t).exp();
    let mut errs = vec![];
    for &dt in &[0.04, 0.02, 0.01] {
        let p = run_model(dt, t);
        let ex = max_abs_diff(&p.position, &[exact_x]);
        let ea = (p.strength[0][0] - decay).abs();
        errs.push(ex.max(ea));
    }
    let r1 = errs[0] / errs[1];
    let r2 = errs[1] / errs[2];
    eprintln!("solid body: errors {errs:?}, ratios {r1:.3} {r2:.3}");
    assert!(r1 > 3.6 && r1 < 4.4 && r2 > 3.6 && r2 < 4.4, "{errs:?}");
}

/// Two coaxial coarse rings leapfrogging (direct sum): halving dt divides the error by about 4.
#[test]
fn ab2_is_second_order_on_leapfrogging_rings() {
    let run = |dt: f64| -> Particles {
        let p = common::leapfrogging_rings(24, 0.35);
        let s = stepper(dt);
        let mut rhs = common::direct_rhs();
        let mut st = State::initial(p);
        for _ in 0..(1.6 / dt).round() as u64 {
            let f = rhs.eval(&st.particles).unwrap();
            s.advance(&mut st, f, &mut rhs).unwrap();
        }
        st.particles
    };
    let reference = run(0.0125);
    let errs: Vec<f64> = [0.2, 0.1, 0.05]
        .iter()
        .map(|&dt| max_abs_diff(&run(dt).position, &reference.position))
        .collect();
    // remove the reference's own error (Richardson): e(dt) - e(dt_ref) with e ~ dt^2
    let r1 = errs[0] / errs[1];
    let r2 = errs[1] / errs[2];
    eprintln!("leapfrogging rings: position errors {errs:?}, ratios {r1:.3} {r2:.3}");
    assert!(r1 > 3.3 && r1 < 4.7 && r2 > 3.3 && r2 < 4.7, "{errs:?}");
}
