//! Time stepping: second-order Adams-Bashforth for positions and strengths (core paper Sec. 2),
//! started by one Heun (explicit trapezoidal RK2) step, so the scheme is second order
//! throughout. A re-interpolation replaces the particles; with `reinterpolation.history =
//! "restart"` (the default) the step after it is a Heun step again (two evaluations), with
//! `"carry"` (an option, not yet measured on a GPU) the AB2 history goes through the lattice
//! operator with them ([`crate::reinterpolation::history`], second order, one evaluation per
//! step). Diffusion is the
//! core spreading of [`crate::core_spreading`], evaluated exactly at each stage time; the cores
//! are reset by RBF re-interpolation when they have grown past a ratio or every `M` steps.
//!
//! With `f_n = f(y_n)` (velocity and stretching at step `n`):
//! * AB2:  `y_{n+1} = y_n + dt (3/2 f_n - 1/2 f_{n-1})`;
//! * Heun: `y* = y_n + dt f_n`, `y_{n+1} = y_n + dt/2 (f_n + f(y*))`, with the cores of `y*` at
//!   `t_{n+1}`.
//!
//! Time is `t_n = n dt` (no accumulated round-off), so a restart continues bit for bit.

use crate::config::Config;
use crate::core_spreading;
use crate::error::{Error, Result};
use crate::particles::Particles;
use crate::reinterpolation::history::{reinterpolate_with_history, History, PreviousRates};
use crate::reinterpolation::{reinterpolate, LatticeSpec, RbfReport, RbfSettings};
use crate::rhs::{Derivatives, RightHandSide};
use serde::{Deserialize, Serialize};
use vortex_fmm::kernel::CoreOrder;

/// Everything that evolves (what a checkpoint holds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Steps taken; `t = step * dt`.
    pub step: u64,
    /// Step of the last reset of the cores (start or re-interpolation).
    pub step_reset: u64,
    pub particles: Particles,
    /// `f_{n-1}` for Adams-Bashforth (`None`: the next step is a Heun step).
    pub previous: Option<Derivatives>,
    pub reinterpolations: u64,
}

impl State {
    /// The state of `particles` at the start: step 0, no history, no re-interpolation yet.
    pub fn initial(particles: Particles) -> State {
        State {
            step: 0,
            step_reset: 0,
            particles,
            previous: None,
            reinterpolations: 0,
        }
    }
}

/// Which scheme a step used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Heun,
    AdamsBashforth2,
}

/// What one step did.
#[derive(Clone, Debug)]
pub struct StepReport {
    pub scheme: Scheme,
    /// Evaluations of the right-hand side in this step beyond `f_n`.
    pub extra_evaluations: u32,
    pub reinterpolation: Option<RbfReport>,
}

/// The fixed parameters of the time stepping.
#[derive(Clone, Debug, PartialEq)]
pub struct Stepper {
    pub dt: f64,
    pub nu: f64,
    /// Periodic box length (positions wrapped, mean strength removed after each update).
    pub period: Option<f64>,
    pub lattice: LatticeSpec,
    /// Core radius of re-interpolated particles.
    pub sigma0: f64,
    pub rbf: RbfSettings,
    /// Re-interpolate when `sigma / sigma0 > ratio` (0: off).
    pub ratio: f64,
    /// Re-interpolate every this many steps (0: off).
    pub every: u64,
    /// Re-interpolate when [`Stepper::strain`] exceeds this (0: off).
    pub strain_limit: f64,
    /// Volume of a lattice cell, `h^3` (vorticity of a particle = `|alpha| / h^3`).
    pub cell_volume: f64,
    /// The AB2 history through a re-interpolation: carried or restarted.
    pub history: History,
    /// The core of the particles (`evaluation.core`): the Gaussian spreads its cores; the
    /// cores of order above 2 keep `sigma0` and diffuse by the lattice's heat kernel at each
    /// re-interpolation ([`crate::reinterpolation::cores`]).
    pub core: CoreOrder,
}

fn axpy(y: &mut [[f64; 3]], a: f64, x: &[[f64; 3]]) {
    for (y, x) in y.iter_mut().zip(x) {
        for c in 0..3 {
            y[c] += a * x[c];
        }
    }
}

fn ab2_combine(y: &mut [[f64; 3]], dt: f64, f: &[[f64; 3]], g: &[[f64; 3]]) {
    for ((y, f), g) in y.iter_mut().zip(f).zip(g) {
        for c in 0..3 {
            y[c] += dt * (1.5 * f[c] - 0.5 * g[c]);
        }
    }
}

/// The operations of one update on a particle state, wherever it lives (the host's
/// [`Particles`]: [`HostUpdate`]; device buffers: `vortex_resident`), over which
/// [`Stepper::update_with`] writes the scheme once. "Tidy" is the end of every stage: core
/// spreading to the stage time (viscosity `nu`, `elapsed` since the last reset, core paper
/// Eq. 11), wrapping into the periodic box and mean-strength removal.
pub trait UpdateOps {
    /// Velocity and stretching of the state's particles.
    type Rates;
    /// A copy of the state (the Heun predictor).
    type Predictor;
    /// Whether `prev` holds the rates of the state's particles (AB2 applies).
    fn is_history(&self, prev: &Self::Rates) -> bool;
    /// `y += dt (3/2 f - 1/2 g)` for positions and strengths.
    fn ab2(&mut self, dt: f64, f: &Self::Rates, g: &Self::Rates) -> Result<()>;
    /// A copy of the state moved by `dt f`.
    fn predictor(&mut self, dt: f64, f: &Self::Rates) -> Result<Self::Predictor>;
    /// Tidies the predictor.
    fn tidy_predictor(&mut self, star: &mut Self::Predictor, nu: f64, elapsed: f64) -> Result<()>;
    /// The rates at the predictor; the state's rates `f_n` travel with their particles where
    /// the predictor's move them (to other ranks).
    fn rates_at(&mut self, star: Self::Predictor, f_n: &mut Self::Rates) -> Result<Self::Rates>;
    /// `y += a f` for positions and strengths.
    fn add(&mut self, a: f64, f: &Self::Rates) -> Result<()>;
    /// Tidies the state.
    fn tidy(&mut self, nu: f64, elapsed: f64) -> Result<()>;
}

/// [`UpdateOps`] of the host's particles `p`, rates by `rhs`, `total` the sum for the mean
/// strength (of this rank's particles or of all ranks').
pub struct HostUpdate<'a, R> {
    pub stepper: &'a Stepper,
    pub p: &'a mut Particles,
    pub rhs: &'a mut R,
    pub total: &'a dyn Fn(&Particles) -> ([f64; 3], usize),
}

impl<R: RightHandSide> UpdateOps for HostUpdate<'_, R> {
    type Rates = Derivatives;
    type Predictor = Particles;

    fn is_history(&self, prev: &Derivatives) -> bool {
        prev.velocity.len() == self.p.len()
    }

    fn ab2(&mut self, dt: f64, f: &Derivatives, g: &Derivatives) -> Result<()> {
        ab2_combine(&mut self.p.position, dt, &f.velocity, &g.velocity);
        ab2_combine(&mut self.p.strength, dt, &f.stretching, &g.stretching);
        Ok(())
    }

    fn predictor(&mut self, dt: f64, f: &Derivatives) -> Result<Particles> {
        let mut star = self.p.clone();
        axpy(&mut star.position, dt, &f.velocity);
        axpy(&mut star.strength, dt, &f.stretching);
        Ok(star)
    }

    fn tidy_predictor(&mut self, star: &mut Particles, nu: f64, elapsed: f64) -> Result<()> {
        core_spreading::apply(star, nu, elapsed);
        self.stepper.tidy(star, self.total);
        Ok(())
    }

    fn rates_at(&mut self, star: Particles, _: &mut Derivatives) -> Result<Derivatives> {
        self.rhs.eval(&star)
    }

    fn add(&mut self, a: f64, f: &Derivatives) -> Result<()> {
        axpy(&mut self.p.position, a, &f.velocity);
        axpy(&mut self.p.strength, a, &f.stretching);
        Ok(())
    }

    fn tidy(&mut self, nu: f64, elapsed: f64) -> Result<()> {
        core_spreading::apply(self.p, nu, elapsed);
        self.stepper.tidy(self.p, self.total);
        Ok(())
    }
}

impl Stepper {
    pub fn from_config(c: &Config) -> Self {
        Self {
            dt: c.dt,
            nu: c.nu,
            period: c.periodic().map(|p| p.box_length),
            lattice: c.lattice_spec(),
            sigma0: c.sigma0(),
            rbf: c.rbf_settings(),
            ratio: c.reinterpolation.ratio,
            every: c.reinterpolation.every,
            strain_limit: c.reinterpolation.strain,
            cell_volume: c.lattice_h().powi(3),
            history: c.reinterpolation.history,
            core: c.evaluation.core,
        }
    }

    /// The viscosity of the core spreading: `nu` for the Gaussian, 0 for the cores of higher
    /// order (their viscous term is the heat kernel of the re-interpolation).
    pub fn spreading_nu(&self) -> f64 {
        if self.core == CoreOrder::Second {
            self.nu
        } else {
            0.0
        }
    }

    /// The settings of a re-interpolation `since_reset` steps after the last reset: the run's,
    /// with the heat kernel of that time for the cores of order above 2.
    pub fn rbf_at(&self, since_reset: u64) -> RbfSettings {
        let mut s = self.rbf.clone();
        if self.core != CoreOrder::Second {
            s.diffusion = self.nu * self.dt * since_reset as f64;
        }
        s
    }

    /// The Lagrangian strain accumulated since the last reset, bounded by
    /// `(t - t_reset) max_p |omega_p|` with `|omega_p| = |alpha_p| / h^3` and `max_alpha` the
    /// largest `|alpha_p|` over all particles: the velocity gradient that distorts the particle
    /// lattice is of the size of the vorticity where the particles carry strength (a shear
    /// `u = (g y, 0, 0)` has `|omega| = g`), and a uniform translation has none. Particles that
    /// carry no strength may distort freely: they induce nothing.
    pub fn strain(&self, since_reset: u64, max_alpha: f64) -> f64 {
        self.dt * since_reset as f64 * max_alpha / self.cell_volume
    }

    pub fn time(&self, step: u64) -> f64 {
        step as f64 * self.dt
    }

    /// Wraps the positions into the periodic box and removes the mean strength (`total` gives the
    /// total strength and the number of particles: of this rank's particles, or of all ranks').
    fn tidy(&self, p: &mut Particles, total: &dyn Fn(&Particles) -> ([f64; 3], usize)) {
        if let Some(l) = self.period {
            let per = vortex_fmm::periodic::Periodic {
                box_length: l,
                image_levels: 0,
            };
            for x in &mut p.position {
                *x = per.wrap(*x);
            }
            let (sum, n) = total(p);
            let n = n.max(1) as f64;
            let mean = sum.map(|c| c / n);
            for a in &mut p.strength {
                for c in 0..3 {
                    a[c] -= mean[c];
                }
            }
        }
    }

    /// Advances `st` by one step, given `f_n` = the derivatives at the current state.
    pub fn advance<R: RightHandSide>(
        &self,
        st: &mut State,
        f_n: Derivatives,
        rhs: &mut R,
    ) -> Result<StepReport> {
        let local = |p: &Particles| (p.total_strength(), p.len());
        let (scheme, extra) = self.update(st, f_n, rhs, &local)?;
        let p = &st.particles;
        let mut reinterpolation = None;
        let strain = self.strain(st.step - st.step_reset, p.max_strength());
        if self.reinterpolation_due(st.step - st.step_reset, p.max_core_ratio(), strain) {
            let (fresh, history, report) = self.reinterpolate(st)?;
            if fresh.is_empty() {
                return Err(Error::Rbf(format!(
                    "no particle left after re-interpolation at step {}",
                    st.step
                )));
            }
            st.particles = fresh;
            self.reset(st);
            st.previous = history;
            reinterpolation = Some(report);
        }
        Ok(StepReport {
            scheme,
            extra_evaluations: extra,
            reinterpolation,
        })
    }

    /// The update of one step without the re-interpolation: AB2 (or Heun, which evaluates `rhs`
    /// once more), core spreading to `t_{n+1}`, wrapping and mean-strength removal (periodic).
    /// Every particle is updated from its own values only, so `st` may hold any subset of the
    /// particles (one rank's) as long as `rhs` evaluates the whole set and `total` sums over it.
    /// Sets `st.previous = f_n` and counts the step.
    pub fn update<R: RightHandSide>(
        &self,
        st: &mut State,
        f_n: Derivatives,
        rhs: &mut R,
        total: &dyn Fn(&Particles) -> ([f64; 3], usize),
    ) -> Result<(Scheme, u32)> {
        let previous = st.previous.take();
        let mut ops = HostUpdate {
            stepper: self,
            p: &mut st.particles,
            rhs,
            total,
        };
        let (scheme, extra, f_n) =
            self.update_with(&mut ops, st.step, st.step_reset, f_n, previous)?;
        st.previous = Some(f_n);
        st.step += 1;
        Ok((scheme, extra))
    }

    /// The scheme of one update, written once over the operations `ops` of a state wherever it
    /// lives (host, device): AB2 from `f_n` and the history `previous` of the same particles,
    /// else Heun (the predictor `y* = y_n + dt f_n` with its cores at `t_{n+1}`, its rates, `y_n
    /// + dt/2 (f_n + f(y*))`); then core spreading to `t_{n+1}`, wrapping and mean-strength
    /// removal. `step` is the step being taken, `step_reset` the step of the last reset.
    /// Returns the scheme, the evaluations beyond `f_n`, and `f_n` (the next step's history).
    pub fn update_with<O: UpdateOps>(
        &self,
        ops: &mut O,
        step: u64,
        step_reset: u64,
        mut f_n: O::Rates,
        previous: Option<O::Rates>,
    ) -> Result<(Scheme, u32, O::Rates)> {
        let dt = self.dt;
        let elapsed = self.time(step + 1) - self.time(step_reset);
        let nu = self.spreading_nu();
        let (scheme, extra) = match previous {
            Some(prev) if ops.is_history(&prev) => {
                ops.ab2(dt, &f_n, &prev)?;
                (Scheme::AdamsBashforth2, 0)
            }
            _ => {
                let mut star = ops.predictor(dt, &f_n)?;
                ops.tidy_predictor(&mut star, nu, elapsed)?;
                let f_star = ops.rates_at(star, &mut f_n)?;
                ops.add(0.5 * dt, &f_n)?;
                ops.add(0.5 * dt, &f_star)?;
                (Scheme::Heun, 1)
            }
        };
        ops.tidy(nu, elapsed)?;
        Ok((scheme, extra, f_n))
    }

    /// The re-interpolation of `st.particles` after an update, with the AB2 history carried
    /// to the fresh particles when [`Stepper::history`] says so (`st.previous` holds the rates of
    /// the step before, evaluated `dt` ago). Returns the fresh particles, their history (`None`:
    /// restart) and the report; `st` is not changed.
    pub fn reinterpolate(&self, st: &State) -> Result<(Particles, Option<Derivatives>, RbfReport)> {
        let p = &st.particles;
        let rbf = self.rbf_at(st.step - st.step_reset);
        match (&st.previous, self.history) {
            (Some(rates), History::Carry) if rates.velocity.len() == p.len() => {
                let prev = PreviousRates {
                    rates,
                    nu: self.nu,
                    elapsed: self.time(st.step - 1) - self.time(st.step_reset),
                };
                let (fresh, h, report) =
                    reinterpolate_with_history(p, prev, &self.lattice, self.sigma0, &rbf)?;
                Ok((fresh, Some(h), report))
            }
            _ => {
                let (fresh, report) = reinterpolate(p, &self.lattice, self.sigma0, &rbf)?;
                Ok((fresh, None, report))
            }
        }
    }

    /// Whether the cores are reset now, `since_reset` steps after the last reset, with the
    /// largest `sigma / sigma0` over all particles `max_ratio` and the strain `strain`
    /// ([`Stepper::strain`]). For the cores of order above 2, which do not spread, the ratio is
    /// that a Gaussian would have reached, `sqrt(1 + 2 nu (t - t_reset)) / sigma0^2)`: the
    /// heat kernel of the re-interpolation acts as often as core spreading would be reset.
    pub fn reinterpolation_due(&self, since_reset: u64, max_ratio: f64, strain: f64) -> bool {
        let max_ratio = if self.core == CoreOrder::Second {
            max_ratio
        } else {
            core_spreading::sigma_at(self.sigma0, self.nu, self.dt * since_reset as f64)
                / self.sigma0
        };
        let due_ratio = self.ratio > 0.0 && max_ratio > self.ratio;
        let due_count = self.every > 0 && since_reset >= self.every;
        let due_strain = self.strain_limit > 0.0 && strain > self.strain_limit;
        due_ratio || due_count || due_strain
    }

    /// Book-keeping after the particles were replaced by re-interpolated ones: the core
    /// spreading restarts and the history is cleared (the caller sets the carried one, else the
    /// next step is a Heun step).
    pub fn reset(&self, st: &mut State) {
        st.step_reset = st.step;
        st.previous = None;
        st.reinterpolations += 1;
    }
}
