//! The AB2 history through a re-interpolation (`reinterpolation.history`,
//! `vortex_method::reinterpolation::history`): the 3-D Taylor-Green vorticity carried by the
//! Taylor-Green flow with a re-interpolation after every step; the carried history (one
//! evaluation per step) differs from the Heun restart (two) by `O(dt^2)`, a forward-Euler step
//! after each re-interpolation (the fresh rates as their own history) by `O(dt)`, so the order
//! test tells a wrong history from a right one.

use vortex_method::reinterpolation::history::History;
use vortex_method::rhs::{Derivatives, RightHandSide};
use vortex_method::stepping::{Scheme, State, Stepper};
use vortex_method::{Config, Particles, Result};

const T_END: f64 = 0.4;

/// The Taylor-Green velocity `u = (sin x cos y cos z, -cos x sin y cos z, 0)` as a prescribed
/// (steady, divergence-free) flow: `dx/dt = u(x)`, `d alpha/dt = (alpha . grad) u(x)`. Its rates
/// cost nothing, so the lattice can resolve the field and the steps can be many; the
/// re-interpolation, the stepping and the history are the method's own.
struct TaylorGreenFlow {
    evaluations: u64,
}

impl RightHandSide for TaylorGreenFlow {
    fn eval(&mut self, p: &Particles) -> Result<Derivatives> {
        self.evaluations += 1;
        let mut d = Derivatives::default();
        for (x, a) in p.position.iter().zip(&p.strength) {
            let (sx, cx) = x[0].sin_cos();
            let (sy, cy) = x[1].sin_cos();
            let (sz, cz) = x[2].sin_cos();
            d.velocity.push([sx * cy * cz, -cx * sy * cz, 0.0]);
            // rows: grad of u_1, u_2 (u_3 = 0)
            let g1 = [cx * cy * cz, -sx * sy * cz, -sx * cy * sz];
            let g2 = [sx * sy * cz, -cx * cy * cz, cx * sy * sz];
            let dot = |g: [f64; 3]| g[0] * a[0] + g[1] * a[1] + g[2] * a[2];
            d.stretching.push([dot(g1), dot(g2), 0.0]);
        }
        Ok(d)
    }
}

/// 16^3 particles of the Taylor-Green vorticity in the periodic box, re-interpolated every
/// `every` steps; `sums` is appended to `[reinterpolation]`.
fn config(dt: f64, every: u64, history: History, sums: &str) -> Config {
    let h = match history {
        History::Carry => "carry",
        History::Restart => "restart",
    };
    let text = format!(
        "nu = 0.01\ndt = {dt}\nt_end = {T_END}\n[domain]\nperiodic = true\n\
         [initial]\nkind = \"taylor-green\"\nn = 16\n\
         [reinterpolation]\nratio = 0.0\nstrain = 0.0\nevery = {every}\n\
         history = \"{h}\"\n{sums}"
    );
    Config::from_str_named(&text, "history.toml").unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    Carry,
    Restart,
    /// Restart's re-interpolation, then AB2 with the fresh rates as the history (forward Euler).
    Euler,
}

/// The strengths on the lattice at `T_END` (re-interpolated every `tau`, every step for
/// `tau = 0`) and the evaluations spent.
fn run(dt: f64, tau: f64, v: Variant) -> (Vec<[f64; 3]>, u64) {
    run_with(dt, tau, v, "")
}

/// [`run`] with `sums` appended to `[reinterpolation]`.
fn run_with(dt: f64, tau: f64, v: Variant, sums: &str) -> (Vec<[f64; 3]>, u64) {
    let history = match v {
        Variant::Carry => History::Carry,
        Variant::Restart | Variant::Euler => History::Restart,
    };
    let every = ((tau / dt).round() as u64).max(1);
    let cfg = config(dt, every, history, sums);
    let (particles, _) = vortex_method::initial::build(&cfg).unwrap();
    let stepper = Stepper::from_config(&cfg);
    let mut rhs = TaylorGreenFlow { evaluations: 0 };
    let mut st = State::initial(particles);
    let steps = (T_END / dt).round() as u64;
    for k in 0..steps {
        let f = rhs.eval(&st.particles).unwrap();
        let after_reset = k > 0 && st.step == st.step_reset;
        if v == Variant::Euler && after_reset {
            st.previous = Some(f.clone());
        }
        let r = stepper.advance(&mut st, f, &mut rhs).unwrap();
        let want = if k == 0 || (after_reset && v == Variant::Restart) {
            Scheme::Heun
        } else {
            Scheme::AdamsBashforth2
        };
        assert_eq!(r.scheme, want, "{v:?} step {k}");
    }
    assert_eq!(st.reinterpolations, steps / every);
    (st.particles.strength, rhs.evaluations)
}

fn rel(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    let (mut d, mut n) = (0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        for c in 0..3 {
            d += (x[c] - y[c]).powi(2);
            n += y[c] * y[c];
        }
    }
    (d / n).sqrt()
}

/// The lattice strengths at `T_END` of each variant at each `dt` (re-interpolated every step).
fn runs(dts: &[f64]) -> Vec<(Variant, Vec<Vec<[f64; 3]>>)> {
    let mut out = Vec::new();
    for v in [Variant::Carry, Variant::Restart, Variant::Euler] {
        let mut finals = Vec::new();
        for &dt in dts {
            let (s, e) = run(dt, 0.0, v);
            let steps = (T_END / dt).round() as u64;
            let want = match v {
                Variant::Restart => 2 * steps,
                _ => steps + 1,
            };
            assert_eq!(e, want, "{v:?}: one evaluation per step (two for Heun)");
            finals.push(s);
        }
        out.push((v, finals));
    }
    out
}

/// With a re-interpolation after every step the re-interpolation's own error depends on `dt`
/// (it acts once per step): against a fine-`dt` reference neither the restart nor the carried
/// history shows the order of the time stepping (the restart measured 0.5 and 0.3 at dt = 0.1,
/// 0.05, 0.025 against dt / 8). Both schemes share that error and differ only in the history, so
/// the carried history is second order when its distance to the Heun restart falls as `dt^2`;
/// a forward-Euler step after each re-interpolation falls as `dt`.
#[test]
fn carried_history_is_second_order_with_a_reinterpolation_every_step() {
    let dts = [0.1, 0.05, 0.025];
    let r = runs(&dts);
    let restart = &r[1].1;
    let order = |finals: &[Vec<[f64; 3]>]| -> (Vec<f64>, Vec<f64>) {
        let d: Vec<f64> = finals.iter().zip(restart).map(|(a, b)| rel(a, b)).collect();
        let p = d.windows(2).map(|w| (w[0] / w[1]).log2()).collect();
        (d, p)
    };
    let (dc, pc) = order(&r[0].1);
    let (de, pe) = order(&r[2].1);
    let e = |d: &[f64]| d.iter().map(|x| format!("{x:.3e}")).collect::<Vec<_>>();
    eprintln!("carry - restart: {:?}, observed orders {pc:.2?}", e(&dc));
    eprintln!("euler - restart: {:?}, observed orders {pe:.2?}", e(&de));
    // measured 1.83 and 1.81 (the higher-order terms at these dt)
    assert!(
        pc.iter().all(|&p| p > 1.6),
        "carried history: orders {pc:?}"
    );
    assert!(
        pe.iter().all(|&p| p > 0.7 && p < 1.3),
        "forward Euler: orders {pe:?}"
    );
    // the carried history is far closer to the restart than the first-order one
    assert!(dc[2] < 0.1 * de[2], "{dc:?} {de:?}");
}

/// `reinterpolation.sums = { kind = "spread" }`: the same run (the strengths and the three
/// lattice operators of the carried history at every step) through the spreading route as
/// through the direct sums truncated at 8 core radii (`exp(-32)`: the spreading route's sums
/// and matrix are untruncated), to the tolerance of the sums times the gain of the solve.
#[test]
fn spreading_sums_give_the_run_of_the_direct_sums() {
    let spread = "sums = { kind = \"spread\", tolerance = 1e-9 }\n";
    let (a, ea) = run_with(0.05, 0.0, Variant::Carry, spread);
    let (b, eb) = run_with(0.05, 0.0, Variant::Carry, "cutoff = 8.0\n");
    assert_eq!(ea, eb);
    let e = rel(&a, &b);
    eprintln!("spread vs direct sums, 8 re-interpolations with the carried history: {e:.2e}");
    assert!(e < 1e-6, "{e:e}");
}
