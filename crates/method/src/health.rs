//! Health of a run: one verdict per step that every check shares, so that a run never goes on
//! silently with a wrong result and the checkpoint kept after a blow-up is the last good one.
//!
//! * [`check_step`]: stability of the explicit step (AB2 of `docs/CONVENTIONS.md`): the advective
//!   CFL number `dt * max|u| / h` (`h` the lattice spacing) and `dt * max|grad u|`, for which the
//!   stretching rate `max_i |s_i| / |alpha_i|` (`s = (alpha . grad) u`, so `|s|/|alpha| <= |grad u|`)
//!   is the proxy; each against a warning and a refusal threshold ([`Limits`]).
//! * [`first_non_finite`]: a NaN or infinite velocity or stretching from any evaluation method.
//! * [`check_memory`]: an estimate against `MemAvailable` of `/proc/meminfo`, before allocating.
//!
//! Other checks (e.g. the energy of a decaying flow) report through the same [`Verdict`]; the run
//! writes a checkpoint only for a state whose verdict is not [`Verdict::Refuse`].

use crate::particles::Particles;
use crate::rhs::Derivatives;
use serde::{Deserialize, Serialize};

/// The outcome of a check.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing wrong.
    Healthy,
    /// Suspicious: logged, the run goes on.
    Warn(String),
    /// Wrong: the run stops with this reason, and the state is not checkpointed.
    Refuse(String),
}

impl Verdict {
    /// The worse of two verdicts (the first one's reason when equally bad).
    pub fn worst(self, other: Verdict) -> Verdict {
        match (&self, &other) {
            (Verdict::Refuse(_), _) => self,
            (_, Verdict::Refuse(_)) => other,
            (Verdict::Warn(_), _) => self,
            (_, Verdict::Warn(_)) => other,
            _ => Verdict::Healthy,
        }
    }

    /// Whether the state may be checkpointed.
    pub fn passes(&self) -> bool {
        !matches!(self, Verdict::Refuse(_))
    }
}

/// Thresholds of the stability check (configuration table `[health]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Warn above this advective CFL number `dt * max|u| / h`.
    pub cfl_warn: f64,
    /// Refuse (stop the run) above this CFL number.
    pub cfl_limit: f64,
    /// Warn above this `dt * max|s|/|alpha|` (dimensionless; the stretching rate is 1/time).
    pub gradient_warn: f64,
    /// Refuse above this `dt * max|s|/|alpha|`.
    pub gradient_limit: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            cfl_warn: 1.0,
            cfl_limit: 4.0,
            gradient_warn: 0.5,
            gradient_limit: 2.0,
        }
    }
}

/// What [`check_step`] looks at (global maxima over the ranks).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepMeasures {
    /// Time step.
    pub dt: f64,
    /// Lattice spacing `h` (length).
    pub h: f64,
    /// `max_i |u_i|` (length / time).
    pub max_speed: f64,
    /// `max_i |s_i| / |alpha_i|` (1 / time), the proxy of `max |grad u|`.
    pub max_rate: f64,
}

impl StepMeasures {
    /// Advective CFL number `dt * max|u| / h`.
    pub fn cfl(&self) -> f64 {
        self.dt * self.max_speed / self.h
    }

    /// `dt * max|s|/|alpha|`.
    pub fn gradient(&self) -> f64 {
        self.dt * self.max_rate
    }
}

/// This rank's `[max|u|, max|s|/|alpha|]` (particles with zero strength are skipped in the rate).
pub fn local_measures(f: &Derivatives, p: &Particles) -> [f64; 2] {
    let norm = |v: &[f64; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let speed = f.velocity.iter().map(norm).fold(0.0, f64::max);
    let rate = f
        .stretching
        .iter()
        .zip(&p.strength)
        .filter_map(|(s, a)| {
            let na = norm(a);
            (na > 0.0).then(|| norm(s) / na)
        })
        .fold(0.0, f64::max);
    [speed, rate]
}

/// The stability verdict of one step.
pub fn check_step(m: &StepMeasures, limits: &Limits) -> Verdict {
    let (cfl, grad) = (m.cfl(), m.gradient());
    let what = format!(
        "advective CFL dt*max|u|/h = {cfl:.3} (dt = {}, max|u| = {:.4e}, h = {:.4e}), \
         dt*max|s|/|alpha| = {grad:.3}",
        m.dt, m.max_speed, m.h
    );
    if !(cfl.is_finite() || m.h.is_nan()) || !grad.is_finite() {
        return Verdict::Refuse(format!("non-finite stability measure: {what}"));
    }
    if cfl > limits.cfl_limit || grad > limits.gradient_limit {
        return Verdict::Refuse(format!(
            "unstable time step: {what} above the limits {} / {} (health.cfl_limit / \
             health.gradient_limit); reduce dt",
            limits.cfl_limit, limits.gradient_limit
        ));
    }
    if cfl > limits.cfl_warn || grad > limits.gradient_warn {
        return Verdict::Warn(format!(
            "large time step: {what} above the warning levels {} / {} (health.cfl_warn / \
             health.gradient_warn); the results may be inaccurate",
            limits.cfl_warn, limits.gradient_warn
        ));
    }
    Verdict::Healthy
}

/// The first non-finite velocity or stretching: `(field name, index)`.
pub fn first_non_finite(f: &Derivatives) -> Option<(&'static str, usize)> {
    let bad = |v: &[[f64; 3]]| v.iter().position(|x| x.iter().any(|c| !c.is_finite()));
    bad(&f.velocity)
        .map(|i| ("velocity", i))
        .or_else(|| bad(&f.stretching).map(|i| ("stretching", i)))
}

/// The memory estimates are shared with the spectral solver and the binary.
pub use vortex_spectral::durable::{available_memory, check_memory, check_memory_against};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_thresholds() {
        let l = Limits::default();
        let m = |dt: f64| StepMeasures {
            dt,
            h: 0.5,
            max_speed: 1.0,
            max_rate: 0.1,
        };
        assert_eq!(check_step(&m(0.1), &l), Verdict::Healthy);
        assert!(matches!(check_step(&m(1.0), &l), Verdict::Warn(_)));
        assert!(matches!(check_step(&m(5.0), &l), Verdict::Refuse(_)));
        let mut g = m(0.1);
        g.max_rate = 30.0;
        assert!(matches!(check_step(&g, &l), Verdict::Refuse(s) if s.contains("max|s|")));
        g.max_rate = f64::NAN;
        assert!(!check_step(&g, &l).passes());
        let w = Verdict::Warn("a".into());
        assert_eq!(w.clone().worst(Verdict::Healthy), w);
        assert!(!w.worst(Verdict::Refuse("b".into())).passes());
    }

    #[test]
    fn measures_and_non_finite() {
        let p = Particles {
            position: vec![[0.0; 3]; 2],
            strength: vec![[2.0, 0.0, 0.0], [0.0; 3]],
            sigma: vec![0.1; 2],
            ..Default::default()
        };
        let mut f = Derivatives {
            velocity: vec![[3.0, 4.0, 0.0], [0.0, 1.0, 0.0]],
            stretching: vec![[0.0, 1.0, 0.0], [9.0, 0.0, 0.0]],
        };
        assert_eq!(local_measures(&f, &p), [5.0, 0.5]);
        assert_eq!(first_non_finite(&f), None);
        f.stretching[1][2] = f64::NAN;
        assert_eq!(first_non_finite(&f), Some(("stretching", 1)));
        f.velocity[0][0] = f64::INFINITY;
        assert_eq!(first_non_finite(&f), Some(("velocity", 0)));
    }

    #[test]
    fn memory_refusal_names_both_amounts() {
        let e =
            check_memory_against("x", 3.0 * 1024f64.powi(3), Some(1024f64.powi(3))).unwrap_err();
        assert!(e.contains("3.000 GiB") && e.contains("1.000 GiB"), "{e}");
        assert!(check_memory_against("x", 1.0, Some(2.0)).is_ok());
        assert!(check_memory_against("x", f64::INFINITY, Some(2.0)).is_err());
    }
}
