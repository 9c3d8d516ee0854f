//! The pseudo-spectral Navier-Stokes solver.
//!
//! `du/dt = P[u x omega] + nu lap u` on the `n^3` grid of `[-pi, pi)^3` (rotational form; the pressure
//! and `grad |u|^2/2` are removed by the projection `P = I - k k / k^2`).
//!
//! **Time stepping**: classical RK4 for the nonlinear term with an integrating factor
//! `exp(nu k^2 t)` for viscosity (Lawson's RK4). The viscous term is then integrated exactly, so
//! (a) the step is limited by advection only, not by the viscous limit `nu k_max^2 dt < 2.8` that
//! an explicit treatment would impose at high `k`; (b) a flow whose nonlinear term vanishes after
//! projection (the 2-D Taylor-Green vortex) decays exactly as `exp(-nu k^2 t)` up to round-off,
//! whatever the step; (c) the scheme stays fourth order in `dt`.
//!
//! **Dealiasing**: the products are formed on a `3n/2` grid by zero padding (exact for quadratic
//! terms), or on the `n` grid after truncating `|k_i| >= n/3` (option "two-thirds"). The solution keeps
//! only the modes `|k_i| <= kcut` (`n/2 - 1` for the 3/2 rule, `ceil(n/3) - 1` for the 2/3 rule); the
//! Nyquist modes are always zero.
//!
//! **Memory**: four spectral vector fields (state, accumulator, stage, right-hand side: 12 complex
//! arrays of `n^2 (n/2+1)`), two factor arrays, six real arrays and one complex array on the padded
//! grid.

use crate::config::{Config, Dealias, InitialKind};
use crate::diagnostics::{self, Stats};
use crate::fft::{wavenumber, Fft3};
use crate::field::{wavevector, SpectralField, VelocityField};
use crate::initial;
use num_complex::Complex64;
use rayon::prelude::*;

/// Errors of the time stepping.
#[derive(Debug, thiserror::Error)]
pub enum SolverError {
    /// A non-finite value appeared in the velocity.
    #[error("non-finite velocity (NaN or Inf) at step {step} (t = {t}); the field blew up")]
    NonFinite {
        /// Step number at which the bad value appeared (1-based number of the step being taken).
        step: u64,
        /// Time at the start of that step.
        t: f64,
    },
    /// Bad parameters.
    #[error("{0}")]
    Invalid(String),
    /// A failure of the compute device or of its libraries (CUDA backend).
    #[error("CUDA backend: {0}")]
    Device(String),
}

/// How the step size is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StepMode {
    /// Fixed step.
    Fixed(f64),
    /// `dt = cfl * dx / max(|u|+|v|+|w|)`, at most `dt_max`.
    Cfl {
        /// CFL number.
        cfl: f64,
        /// Largest step.
        dt_max: f64,
    },
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepInfo {
    /// Step size used.
    pub dt: f64,
    /// CFL number `dt * max(|u|+|v|+|w|) / dx` at the start of the step.
    pub cfl: f64,
}

/// The solver state and its workspace.
pub struct Solver {
    n: usize,
    m: usize,
    nu: f64,
    dealias: Dealias,
    kcut: i64,
    clock: Clock,
    fft_n: Fft3,
    fft_m: Option<Fft3>,
    state: SpectralField,
    acc: SpectralField,
    stage: SpectralField,
    rhs: SpectralField,
    pad: Vec<Complex64>,
    phys: [Vec<f64>; 6],
    e_half: Vec<f64>,
    e_full: Vec<f64>,
    factor_dt: f64,
}

impl Solver {
    /// A solver for a configuration, starting from its initial condition.
    pub fn new(config: &Config) -> Result<Solver, SolverError> {
        config
            .validate("config")
            .map_err(|e| SolverError::Invalid(e.to_string()))?;
        let field = initial_field(config);
        check_initial_energy(config, &field)?;
        Solver::with_field(&field, config.nu, config.dealias, step_mode(config))
    }

    /// A solver starting from a given physical field (projected to divergence-free and truncated to
    /// the dealiased modes).
    pub fn with_field(
        field: &VelocityField,
        nu: f64,
        dealias: Dealias,
        mode: StepMode,
    ) -> Result<Solver, SolverError> {
        let n = field.n;
        let mut s = Solver::empty(n, nu, dealias, mode)?;
        let sf = SpectralField::from_physical_with(field, &s.fft_n);
        s.state = sf;
        s.truncate_project_state();
        Ok(s)
    }

    fn empty(n: usize, nu: f64, dealias: Dealias, mode: StepMode) -> Result<Solver, SolverError> {
        if n < 8 || n % 2 != 0 {
            return Err(SolverError::Invalid(format!(
                "grid size must be even and >= 8, got {n}"
            )));
        }
        if nu.is_nan() || nu < 0.0 {
            return Err(SolverError::Invalid(format!(
                "viscosity must be >= 0, got {nu}"
            )));
        }
        let (m, kcut) = product_grid(n, dealias);
        let fft_n = Fft3::new(n);
        let fft_m = if m != n { Some(Fft3::new(m)) } else { None };
        let mlen = m * m * m;
        let mclen = m * m * (m / 2 + 1);
        let clen = n * n * (n / 2 + 1);
        Ok(Solver {
            n,
            m,
            nu,
            dealias,
            kcut,
            clock: Clock::new(mode),
            fft_n,
            fft_m,
            state: SpectralField::zeros(n),
            acc: SpectralField::zeros(n),
            stage: SpectralField::zeros(n),
            rhs: SpectralField::zeros(n),
            pad: vec![Complex64::default(); mclen],
            phys: std::array::from_fn(|_| vec![0.0; mlen]),
            e_half: vec![0.0; clen],
            e_full: vec![0.0; clen],
            factor_dt: f64::NAN,
        })
    }

    /// Zero the modes outside the dealiased set and project onto divergence-free fields.
    fn truncate_project_state(&mut self) {
        let (n, kcut) = (self.n, self.kcut);
        let [a, b, c] = &mut self.state.c;
        project_truncate(n, kcut, a, b, c);
    }

    /// Current time.
    pub fn time(&self) -> f64 {
        self.clock.t
    }

    /// Number of steps taken.
    pub fn steps(&self) -> u64 {
        self.clock.steps
    }

    /// Grid size.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Size of the grid on which products are formed (`3n/2` or `n`).
    pub fn padded_n(&self) -> usize {
        self.m
    }

    /// Viscosity.
    pub fn nu(&self) -> f64 {
        self.nu
    }

    /// Dealiasing rule.
    pub fn dealias(&self) -> Dealias {
        self.dealias
    }

    /// Step mode.
    pub fn step_mode(&self) -> StepMode {
        self.clock.mode
    }

    /// Change the step mode (e.g. for convergence studies).
    pub fn set_step_mode(&mut self, mode: StepMode) {
        self.clock.mode = mode;
    }

    /// Largest retained wavenumber per direction, the `k_max` of `k_max eta`.
    pub fn kmax(&self) -> f64 {
        self.kcut as f64
    }

    /// Fourier coefficients of the velocity.
    pub fn spectral(&self) -> &SpectralField {
        &self.state
    }

    /// Replace the state (used by restart); sets time and step count.
    pub fn set_state(
        &mut self,
        state: SpectralField,
        t: f64,
        steps: u64,
    ) -> Result<(), SolverError> {
        if state.n != self.n || state.c.iter().any(|c| c.len() != self.state.c[0].len()) {
            return Err(SolverError::Invalid("state has the wrong size".into()));
        }
        self.state = state;
        self.clock.t = t;
        self.clock.steps = steps;
        Ok(())
    }

    /// Velocity on the physical `n^3` grid.
    pub fn velocity(&self) -> VelocityField {
        self.state.to_physical_with(&self.fft_n)
    }

    /// Vorticity on the physical `n^3` grid.
    pub fn vorticity(&self) -> VelocityField {
        self.state.curl().to_physical_with(&self.fft_n)
    }

    /// All statistics at the current time.
    pub fn stats(&self) -> Stats {
        diagnostics::stats_spectral(&self.state, self.nu, self.kmax(), self.clock.t)
    }

    /// Kinetic energy.
    pub fn energy(&self) -> f64 {
        diagnostics::energy_spectral(&self.state)
    }

    /// Shell spectrum `(k, E(k))`.
    pub fn spectrum(&self) -> Vec<(f64, f64)> {
        diagnostics::spectrum_spectral(&self.state)
    }

    /// The dealiased, projected nonlinear term `P[u x omega]` of the current state (for tests and
    /// analysis; the time loop uses the same code).
    pub fn nonlinear_term(&mut self) -> SpectralField {
        self.nonlinear(Stage::State);
        self.rhs.clone()
    }

    /// Advance one step with the configured step mode.
    pub fn step(&mut self) -> Result<StepInfo, SolverError> {
        self.step_limited(f64::INFINITY)
    }

    /// Advance one step, never beyond `dt_limit` (used to land on output times).
    pub fn step_limited(&mut self, dt_limit: f64) -> Result<StepInfo, SolverError> {
        // Stage 1 does not depend on dt: compute it first, then choose dt from its velocity.
        let umax = self.nonlinear(Stage::State);
        let (dt, cfl) = self.clock.choose(self.n, umax, dt_limit)?;
        self.update_factors(dt);
        let h = dt;
        // k1 = rhs. acc = Ef u + h/6 Ef k1; stage = Eh (u + h/2 k1)
        {
            let (u, k1, acc, st) = (&self.state, &self.rhs, &mut self.acc, &mut self.stage);
            let (ef, eh) = (&self.e_full, &self.e_half);
            for c in 0..3 {
                acc.c[c]
                    .par_iter_mut()
                    .zip(st.c[c].par_iter_mut())
                    .enumerate()
                    .for_each(|(i, (a, s))| {
                        let (uu, kk) = (u.c[c][i], k1.c[c][i]);
                        *a = (uu + kk * (h / 6.0)) * ef[i];
                        *s = (uu + kk * (h / 2.0)) * eh[i];
                    });
            }
        }
        self.nonlinear(Stage::Stage);
        // k2. acc += h/3 Eh k2; stage = Eh u + h/2 k2
        {
            let (u, k2, acc, st) = (&self.state, &self.rhs, &mut self.acc, &mut self.stage);
            let eh = &self.e_half;
            for c in 0..3 {
                acc.c[c]
                    .par_iter_mut()
                    .zip(st.c[c].par_iter_mut())
                    .enumerate()
                    .for_each(|(i, (a, s))| {
                        let kk = k2.c[c][i];
                        *a += kk * (eh[i] * h / 3.0);
                        *s = u.c[c][i] * eh[i] + kk * (h / 2.0);
                    });
            }
        }
        self.nonlinear(Stage::Stage);
        // k3. acc += h/3 Eh k3; stage = Ef u + h Eh k3
        {
            let (u, k3, acc, st) = (&self.state, &self.rhs, &mut self.acc, &mut self.stage);
            let (ef, eh) = (&self.e_full, &self.e_half);
            for c in 0..3 {
                acc.c[c]
                    .par_iter_mut()
                    .zip(st.c[c].par_iter_mut())
                    .enumerate()
                    .for_each(|(i, (a, s))| {
                        let kk = k3.c[c][i];
                        *a += kk * (eh[i] * h / 3.0);
                        *s = u.c[c][i] * ef[i] + kk * (eh[i] * h);
                    });
            }
        }
        let umax4 = self.nonlinear(Stage::Stage);
        // k4. u = acc + h/6 k4
        {
            let (u, k4, acc) = (&mut self.state, &self.rhs, &self.acc);
            for c in 0..3 {
                u.c[c]
                    .par_iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = acc.c[c][i] + k4.c[c][i] * (h / 6.0));
            }
        }
        self.clock
            .advance(dt, umax4.is_finite() && self.state_is_finite())?;
        Ok(StepInfo { dt, cfl })
    }

    fn state_is_finite(&self) -> bool {
        // Only the mean mode and a cheap sum: a NaN anywhere propagates to every mode in one step.
        self.state
            .c
            .iter()
            .all(|c| c.par_iter().all(|v| v.re.is_finite() && v.im.is_finite()))
    }

    fn update_factors(&mut self, dt: f64) {
        if dt == self.factor_dt {
            return;
        }
        let (n, nu) = (self.n, self.nu);
        self.e_half
            .par_iter_mut()
            .zip(self.e_full.par_iter_mut())
            .enumerate()
            .for_each(|(i, (h, f))| {
                let (kx, ky, kz) = wavevector(i, n);
                let k2 = kx * kx + ky * ky + kz * kz;
                *h = (-nu * k2 * dt * 0.5).exp();
                *f = (-nu * k2 * dt).exp();
            });
        self.factor_dt = dt;
    }

    /// `rhs = P[u x omega]` for `u` = the state or the stage. Returns `max(|u|+|v|+|w|)` on the product
    /// grid (infinite if a non-finite value is seen).
    fn nonlinear(&mut self, which: Stage) -> f64 {
        let (n, m, kcut) = (self.n, self.m, self.kcut);
        let input = match which {
            Stage::State => &self.state,
            Stage::Stage => &self.stage,
        };
        let fft = self.fft_m.as_ref().unwrap_or(&self.fft_n);
        let mh = m / 2 + 1;
        let nh = n / 2 + 1;
        // Velocity and vorticity on the product grid.
        for comp in 0..6 {
            let src = &input.c;
            self.pad
                .par_chunks_mut(m * mh)
                .enumerate()
                .for_each(|(px, slab)| {
                    let kx = wavenumber(px, m);
                    if kx.abs() > kcut {
                        slab.fill(Complex64::default());
                        return;
                    }
                    let ix = kx.rem_euclid(n as i64) as usize;
                    for py in 0..m {
                        let row = &mut slab[py * mh..(py + 1) * mh];
                        let ky = wavenumber(py, m);
                        if ky.abs() > kcut {
                            row.fill(Complex64::default());
                            continue;
                        }
                        let iy = ky.rem_euclid(n as i64) as usize;
                        let base = (ix * n + iy) * nh;
                        let lim = (kcut as usize + 1).min(mh);
                        let (fx, fy) = (kx as f64, ky as f64);
                        for (pz, out) in row.iter_mut().enumerate() {
                            if pz >= lim {
                                *out = Complex64::default();
                                continue;
                            }
                            let idx = base + pz;
                            let fz = pz as f64;
                            *out = match comp {
                                0..=2 => src[comp][idx],
                                3 => {
                                    Complex64::new(0.0, 1.0) * (src[2][idx] * fy - src[1][idx] * fz)
                                }
                                4 => {
                                    Complex64::new(0.0, 1.0) * (src[0][idx] * fz - src[2][idx] * fx)
                                }
                                _ => {
                                    Complex64::new(0.0, 1.0) * (src[1][idx] * fx - src[0][idx] * fy)
                                }
                            };
                        }
                    }
                });
            fft.inverse_band(&mut self.pad, &mut self.phys[comp], Some(kcut as usize));
        }
        // u x omega, in place of u; max(|u|+|v|+|w|).
        let umax = {
            let [p0, p1, p2, p3, p4, p5] = &mut self.phys;
            p0.par_iter_mut()
                .zip(p1.par_iter_mut())
                .zip(p2.par_iter_mut())
                .zip(p3.par_iter())
                .zip(p4.par_iter())
                .zip(p5.par_iter())
                .map(|(((((ux, uy), uz), wx), wy), wz)| {
                    let (a, b, c) = (*ux, *uy, *uz);
                    *ux = b * wz - c * wy;
                    *uy = c * wx - a * wz;
                    *uz = a * wy - b * wx;
                    let s = a.abs() + b.abs() + c.abs();
                    if s.is_finite() {
                        s
                    } else {
                        f64::INFINITY
                    }
                })
                .reduce(|| 0.0, f64::max)
        };
        // Back to spectral space, truncated.
        let scale = 1.0 / (m * m * m) as f64;
        for comp in 0..3 {
            fft.forward_band(&self.phys[comp], &mut self.pad, Some(kcut as usize));
            let pad = &self.pad;
            self.rhs.c[comp]
                .par_chunks_mut(n * nh)
                .enumerate()
                .for_each(|(ix, slab)| {
                    let kx = wavenumber(ix, n);
                    for iy in 0..n {
                        let ky = wavenumber(iy, n);
                        let row = &mut slab[iy * nh..(iy + 1) * nh];
                        if kx.abs() > kcut || ky.abs() > kcut {
                            row.fill(Complex64::default());
                            continue;
                        }
                        let px = kx.rem_euclid(m as i64) as usize;
                        let py = ky.rem_euclid(m as i64) as usize;
                        let base = (px * m + py) * mh;
                        for (iz, out) in row.iter_mut().enumerate() {
                            *out = if (iz as i64) <= kcut {
                                pad[base + iz] * scale
                            } else {
                                Complex64::default()
                            };
                        }
                    }
                });
        }
        let [a, b, c] = &mut self.rhs.c;
        project_truncate(n, kcut, a, b, c);
        umax
    }
}

#[derive(Clone, Copy)]
enum Stage {
    State,
    Stage,
}

/// Zero modes with any `|k_i| > kcut` and the mean, project the rest onto `k . v = 0`.
pub fn project_truncate(
    n: usize,
    kcut: i64,
    a: &mut [Complex64],
    b: &mut [Complex64],
    c: &mut [Complex64],
) {
    let nh = n / 2 + 1;
    a.par_chunks_mut(n * nh)
        .zip(b.par_chunks_mut(n * nh))
        .zip(c.par_chunks_mut(n * nh))
        .enumerate()
        .for_each(|(ix, ((sa, sb), sc))| {
            let kx = wavenumber(ix, n);
            for iy in 0..n {
                let ky = wavenumber(iy, n);
                for iz in 0..nh {
                    let i = iy * nh + iz;
                    let kz = iz as i64;
                    if kx.abs() > kcut
                        || ky.abs() > kcut
                        || kz > kcut
                        || (kx == 0 && ky == 0 && kz == 0)
                    {
                        sa[i] = Complex64::default();
                        sb[i] = Complex64::default();
                        sc[i] = Complex64::default();
                        continue;
                    }
                    let (fx, fy, fz) = (kx as f64, ky as f64, kz as f64);
                    let k2 = fx * fx + fy * fy + fz * fz;
                    let d = (sa[i] * fx + sb[i] * fy + sc[i] * fz) / k2;
                    sa[i] -= d * fx;
                    sb[i] -= d * fy;
                    sc[i] -= d * fz;
                }
            }
        });
}

/// Size `m` of the grid on which products are formed and the largest retained wavenumber `kcut`:
/// `(3n/2 rounded up to even, n/2 - 1)` for the 3/2 rule, `(n, ceil(n/3) - 1)` for the 2/3 rule.
pub fn product_grid(n: usize, dealias: Dealias) -> (usize, i64) {
    match dealias {
        Dealias::ThreeHalves => {
            let m = 3 * n / 2;
            (m + m % 2, n as i64 / 2 - 1)
        }
        Dealias::TwoThirds => (n, (n as f64 / 3.0).ceil() as i64 - 1),
    }
}

/// The initial velocity field of a configuration on its `n^3` grid.
pub fn initial_field(config: &Config) -> VelocityField {
    let n = config.n;
    let ini = &config.initial;
    match ini.kind {
        InitialKind::TaylorGreen | InitialKind::TaylorGreen2d => {
            let mut f = if ini.kind == InitialKind::TaylorGreen {
                initial::taylor_green(n)
            } else {
                initial::taylor_green_2d(n)
            };
            let a = ini.amplitude.unwrap_or(1.0);
            if a != 1.0 {
                for c in f.u.iter_mut() {
                    c.iter_mut().for_each(|v| *v *= a);
                }
            }
            f
        }
        InitialKind::Isotropic => initial::isotropic(
            n,
            &initial::IsotropicParams {
                k_peak: ini.k_peak.unwrap_or(4.0),
                energy: ini.energy,
                re_lambda: ini.re_lambda,
                seed: ini.seed.unwrap_or(0),
                nu: config.nu,
            },
        ),
    }
}

/// Refuses an initial field whose energy is not a finite value of at least
/// [`crate::config::MIN_ENERGY`] (an amplitude, an energy or a `re_lambda` with `nu` whose field
/// underflows), naming the key that set its scale.
pub fn check_initial_energy(config: &Config, field: &VelocityField) -> Result<(), SolverError> {
    let e = crate::diagnostics::energy(field);
    let max = crate::config::MAX_VELOCITY.powi(2);
    if e >= crate::config::MIN_ENERGY && e <= max {
        return Ok(());
    }
    let ini = &config.initial;
    let key = match (ini.kind, ini.re_lambda, ini.energy) {
        (InitialKind::Isotropic, Some(re), _) => {
            format!("initial.re_lambda = {re:e} with nu = {:e}", config.nu)
        }
        (InitialKind::Isotropic, None, Some(en)) => format!("initial.energy = {en:e}"),
        (InitialKind::Isotropic, None, None) => "initial.k_peak / initial.seed".to_string(),
        _ => format!("initial.amplitude = {:e}", ini.amplitude.unwrap_or(1.0)),
    };
    Err(SolverError::Invalid(format!(
        "{key}: the initial field's energy is {e:e}, outside [{:e}, {max:e}]: below, its \
         statistics would be 0 or NaN; above, its velocities (beyond {:e}) would need steps \
         far too short to end",
        crate::config::MIN_ENERGY,
        crate::config::MAX_VELOCITY
    )))
}

/// The step mode of a (validated) configuration.
pub fn step_mode(config: &Config) -> StepMode {
    match (config.dt, config.cfl) {
        (Some(dt), _) => StepMode::Fixed(dt),
        (None, Some(cfl)) => StepMode::Cfl {
            cfl,
            dt_max: config.dt_max.unwrap_or(f64::INFINITY),
        },
        (None, None) => unreachable!("validated"),
    }
}

/// The Fourier coefficients of a physical field, projected to divergence-free and truncated to the
/// modes kept with `dealias`: the state every backend starts from.
pub fn initial_state(field: &VelocityField, dealias: Dealias) -> SpectralField {
    let n = field.n;
    let (_, kcut) = product_grid(n, dealias);
    let mut s = SpectralField::from_physical_with(field, &Fft3::new(n));
    let [a, b, c] = &mut s.c;
    project_truncate(n, kcut, a, b, c);
    s
}

/// The time of a run and how it advances, shared by both steppers ([`Solver`] and
/// `gpu::GpuSolver`): the step mode, the steps taken, the time, and whether the CFL warning
/// was given.
#[derive(Clone, Debug)]
pub(crate) struct Clock {
    pub mode: StepMode,
    pub steps: u64,
    pub t: f64,
    cfl_warned: bool,
}

impl Clock {
    pub fn new(mode: StepMode) -> Self {
        Self {
            mode,
            steps: 0,
            t: 0.0,
            cfl_warned: false,
        }
    }

    /// The step and its CFL number ([`choose_dt`]) from `umax = max(|u|+|v|+|w|)` of the
    /// step's first stage on an `n^3` grid; a non-finite `umax` is the state blown up before
    /// this step.
    pub fn choose(
        &mut self,
        n: usize,
        umax: f64,
        dt_limit: f64,
    ) -> Result<(f64, f64), SolverError> {
        if !umax.is_finite() {
            return Err(SolverError::NonFinite {
                step: self.steps + 1,
                t: self.t,
            });
        }
        choose_dt(
            self.mode,
            umax,
            n,
            dt_limit,
            self.steps,
            &mut self.cfl_warned,
        )
    }

    /// One step of `dt` taken; `finite`: whether the new state is finite (else the error
    /// names this step and the time it started from).
    pub fn advance(&mut self, dt: f64, finite: bool) -> Result<(), SolverError> {
        self.steps += 1;
        self.t += dt;
        if finite {
            Ok(())
        } else {
            Err(SolverError::NonFinite {
                step: self.steps,
                t: self.t - dt,
            })
        }
    }
}

/// The step size for a step starting with `max(|u|+|v|+|w|) = umax` on an `n^3` grid, never beyond
/// `dt_limit`, and its CFL number. Warns once (through `cfl_warned`) when the CFL number exceeds 0.9.
/// `steps` is the number of steps taken before this one.
pub fn choose_dt(
    mode: StepMode,
    umax: f64,
    n: usize,
    dt_limit: f64,
    steps: u64,
    cfl_warned: &mut bool,
) -> Result<(f64, f64), SolverError> {
    let dx = 2.0 * std::f64::consts::PI / n as f64;
    let mut dt = match mode {
        StepMode::Fixed(dt) => dt,
        StepMode::Cfl { cfl, dt_max } => {
            if umax > 0.0 {
                (cfl * dx / umax).min(dt_max)
            } else {
                dt_max.min(dx)
            }
        }
    };
    if dt_limit < dt * (1.0 + 1e-9) {
        dt = dt_limit;
    }
    if !(dt > 0.0 && dt.is_finite()) {
        return Err(SolverError::Invalid(format!("bad time step {dt}")));
    }
    let cfl = dt * umax / dx;
    if cfl > 0.9 && !*cfl_warned {
        log::warn!(
            "CFL number {cfl:.3} at step {} exceeds about 0.9, the RK4 stability limit of spectral advection; reduce dt (further warnings suppressed)",
            steps + 1
        );
        *cfl_warned = true;
    }
    Ok((dt, cfl))
}
