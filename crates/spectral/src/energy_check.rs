//! The physical check of a decaying run: without forcing, the kinetic energy of an
//! incompressible flow can only decrease (`dE/dt = -2 nu Z <= 0`, with `Z` the enstrophy), so a
//! rising energy history is a numerical instability, not physics.
//!
//! [`EnergyMonitor`] watches the energy of the diagnostics rows. A rise above the lowest energy
//! seen so far by more than `warn` (relative) is reported once per row as a warning; a rise by
//! more than `limit` is an error that names the step, so a run never ends with exit 0 on an
//! energy history that rises. The lowest energy rather than the previous row is the reference,
//! so a slow creep over many rows is caught as well as a jump.

use serde::{Deserialize, Serialize};

/// What one diagnostics row showed.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Energy did not rise beyond the warning tolerance.
    Decaying,
    /// Energy rose by `rise` (relative to the lowest so far), above the warning tolerance.
    Rising { rise: f64, message: String },
    /// Energy rose beyond the error bound (or is not finite).
    Unstable { message: String },
}

/// Tolerances of the energy check (relative rises over the lowest energy seen so far).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnergyTolerance {
    /// A relative rise above this is logged as a warning.
    pub warn: f64,
    /// A relative rise above this stops the run with an error.
    pub limit: f64,
}

impl Default for EnergyTolerance {
    fn default() -> Self {
        // A well-resolved decaying run loses energy every row; the FMM and the re-interpolation
        // change E by ~1e-6 relative. 1e-3 leaves room for round-off of a nearly inviscid run
        // (energy constant to ~1e-4 over a row), 2 % is far outside any physical history.
        Self {
            warn: 1e-3,
            limit: 0.02,
        }
    }
}

/// Watches the energy history of a decaying run (see the module doc).
#[derive(Clone, Debug)]
pub struct EnergyMonitor {
    tol: EnergyTolerance,
    /// Lowest energy so far and the step where it was seen.
    lowest: Option<(f64, u64)>,
}

impl EnergyMonitor {
    pub fn new(tol: EnergyTolerance) -> Self {
        Self { tol, lowest: None }
    }

    /// The verdict on the energy `energy` of the row at `step` (time `t`).
    pub fn observe(&mut self, step: u64, t: f64, energy: f64) -> Verdict {
        if !energy.is_finite() {
            return Verdict::Unstable {
                message: format!("energy {energy} at step {step} (t = {t}) is not finite"),
            };
        }
        let Some((low, low_step)) = self.lowest else {
            self.lowest = Some((energy, step));
            return Verdict::Decaying;
        };
        if energy <= low {
            self.lowest = Some((energy, step));
            return Verdict::Decaying;
        }
        let rise = (energy - low) / low.abs().max(f64::MIN_POSITIVE);
        let message = format!(
            "kinetic energy rose by {:.3} % in a decaying flow: {energy:.6e} at step {step} \
             (t = {t:.4}) against {low:.6e} at step {low_step}",
            100.0 * rise
        );
        if rise > self.tol.limit {
            Verdict::Unstable {
                message: format!(
                    "{message}, above the bound of {:.3} % (output.energy_rise_limit)",
                    100.0 * self.tol.limit
                ),
            }
        } else if rise > self.tol.warn {
            Verdict::Rising { rise, message }
        } else {
            Verdict::Decaying
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(history: &[f64], tol: EnergyTolerance) -> Vec<Verdict> {
        let mut m = EnergyMonitor::new(tol);
        history
            .iter()
            .enumerate()
            .map(|(i, &e)| m.observe(10 * i as u64, 0.1 * i as f64, e))
            .collect()
    }

    #[test]
    fn a_decaying_history_passes_and_round_off_is_tolerated() {
        let tol = EnergyTolerance::default();
        let hist: Vec<f64> = (0..50)
            .map(|i| 0.125 * (-0.05 * i as f64).exp() * (1.0 + 1e-5 * (i % 3) as f64))
            .collect();
        assert!(run(&hist, tol).iter().all(|v| *v == Verdict::Decaying));
    }

    #[test]
    fn a_slow_creep_is_warned_then_refused_with_the_step() {
        let tol = EnergyTolerance {
            warn: 1e-3,
            limit: 0.02,
        };
        // decays, then creeps up by 0.6 % per row: warnings, then an error at the row where the
        // rise over the lowest value passes 2 %
        let mut hist = vec![1.0, 0.99, 0.98];
        for k in 1..=6 {
            hist.push(0.98 * (1.0 + 0.006 * k as f64));
        }
        let v = run(&hist, tol);
        assert_eq!(
            v[..3],
            [Verdict::Decaying, Verdict::Decaying, Verdict::Decaying]
        );
        assert!(matches!(v[3], Verdict::Rising { .. }));
        let first_bad = v
            .iter()
            .position(|v| matches!(v, Verdict::Unstable { .. }))
            .expect("the creep must be refused");
        // rise at row 2 + k is 0.006 k: above 0.02 first for k = 4
        assert_eq!(first_bad, 2 + 4);
        let Verdict::Unstable { message } = &v[first_bad] else {
            unreachable!()
        };
        assert!(message.contains("step 60"), "{message}");
        assert!(message.contains("step 20"), "{message}");
    }

    #[test]
    fn non_finite_energy_is_unstable() {
        let v = run(&[1.0, f64::NAN], EnergyTolerance::default());
        assert!(matches!(v[1], Verdict::Unstable { .. }));
    }
}
