//! One interface over the CPU solver and the CUDA solver, so the run loop does not care which
//! one steps: [`Stepper`], built by [`new_stepper`] from the configuration's `backend`.

use crate::config::{Backend, Config, Dealias};
use crate::diagnostics::{self, Stats};
use crate::field::{SpectralField, VelocityField};
use crate::solver::{Solver, SolverError, StepInfo, StepMode};

/// A time stepper of the pseudo-spectral equations.
pub trait Stepper {
    /// "cpu (N threads)" or "cuda (device name)".
    fn backend_name(&self) -> String;
    /// Grid size.
    fn n(&self) -> usize;
    /// Current time.
    fn time(&self) -> f64;
    /// Steps taken.
    fn steps(&self) -> u64;
    /// Viscosity.
    fn nu(&self) -> f64;
    /// Dealiasing rule.
    fn dealias(&self) -> Dealias;
    /// Largest retained wavenumber per direction.
    fn kmax(&self) -> f64;
    /// Advance one step, never beyond `dt_limit`.
    fn step_limited(&mut self, dt_limit: f64) -> Result<StepInfo, SolverError>;
    /// The Fourier coefficients of the velocity on the host (the GPU backend downloads them).
    fn state(&mut self) -> Result<&SpectralField, SolverError>;
    /// Replace the state (restart); sets time and step count.
    fn set_state(&mut self, state: SpectralField, t: f64, steps: u64) -> Result<(), SolverError>;

    /// Advance one step.
    fn step(&mut self) -> Result<StepInfo, SolverError> {
        self.step_limited(f64::INFINITY)
    }
    /// All statistics at the current time.
    fn stats(&mut self) -> Result<Stats, SolverError> {
        let (nu, kmax, t) = (self.nu(), self.kmax(), self.time());
        Ok(diagnostics::stats_spectral(self.state()?, nu, kmax, t))
    }
    /// Shell spectrum.
    fn spectrum(&mut self) -> Result<Vec<(f64, f64)>, SolverError> {
        Ok(diagnostics::spectrum_spectral(self.state()?))
    }
    /// Kinetic energy.
    fn energy(&mut self) -> Result<f64, SolverError> {
        Ok(diagnostics::energy_spectral(self.state()?))
    }
    /// Velocity on the physical grid.
    fn velocity(&mut self) -> Result<VelocityField, SolverError> {
        Ok(self.state()?.to_physical())
    }
    /// Vorticity on the physical grid.
    fn vorticity(&mut self) -> Result<VelocityField, SolverError> {
        Ok(self.state()?.curl().to_physical())
    }
}

impl Stepper for Solver {
    fn backend_name(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }
    fn n(&self) -> usize {
        Solver::n(self)
    }
    fn time(&self) -> f64 {
        Solver::time(self)
    }
    fn steps(&self) -> u64 {
        Solver::steps(self)
    }
    fn nu(&self) -> f64 {
        Solver::nu(self)
    }
    fn dealias(&self) -> Dealias {
        Solver::dealias(self)
    }
    fn kmax(&self) -> f64 {
        Solver::kmax(self)
    }
    fn step_limited(&mut self, dt_limit: f64) -> Result<StepInfo, SolverError> {
        Solver::step_limited(self, dt_limit)
    }
    fn state(&mut self) -> Result<&SpectralField, SolverError> {
        Ok(self.spectral())
    }
    fn set_state(&mut self, state: SpectralField, t: f64, steps: u64) -> Result<(), SolverError> {
        Solver::set_state(self, state, t, steps)
    }
    fn velocity(&mut self) -> Result<VelocityField, SolverError> {
        Ok(Solver::velocity(self))
    }
    fn vorticity(&mut self) -> Result<VelocityField, SolverError> {
        Ok(Solver::vorticity(self))
    }
}

#[cfg(feature = "cuda")]
impl Stepper for crate::gpu::GpuSolver {
    fn backend_name(&self) -> String {
        format!("cuda ({})", self.device_name())
    }
    fn n(&self) -> usize {
        crate::gpu::GpuSolver::n(self)
    }
    fn time(&self) -> f64 {
        crate::gpu::GpuSolver::time(self)
    }
    fn steps(&self) -> u64 {
        crate::gpu::GpuSolver::steps(self)
    }
    fn nu(&self) -> f64 {
        crate::gpu::GpuSolver::nu(self)
    }
    fn dealias(&self) -> Dealias {
        crate::gpu::GpuSolver::dealias(self)
    }
    fn kmax(&self) -> f64 {
        crate::gpu::GpuSolver::kmax(self)
    }
    fn step_limited(&mut self, dt_limit: f64) -> Result<StepInfo, SolverError> {
        crate::gpu::GpuSolver::step_limited(self, dt_limit)
    }
    fn state(&mut self) -> Result<&SpectralField, SolverError> {
        self.spectral()
    }
    fn set_state(&mut self, state: SpectralField, t: f64, steps: u64) -> Result<(), SolverError> {
        crate::gpu::GpuSolver::set_state(self, state, t, steps)
    }
}

/// Why the CUDA backend cannot run here (`Err`), or `Ok(())` when it can (never panics).
pub fn cuda_usable() -> Result<(), String> {
    #[cfg(feature = "cuda")]
    {
        crate::gpu::probe(0).map(|_| ()).map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this build has no CUDA support (build with the `cuda` feature)".into())
    }
}

/// The concrete backend for a choice: `auto` becomes `cuda` when [`cuda_usable`], else `cpu`.
pub fn resolve(choice: Backend) -> Backend {
    match choice {
        Backend::Auto => match cuda_usable() {
            Ok(()) => Backend::Cuda,
            Err(why) => {
                log::debug!("backend auto: using the CPU ({why})");
                Backend::Cpu
            }
        },
        c => c,
    }
}

/// A stepper on backend `choice` starting from a physical field (projected and truncated).
pub fn stepper_with_field(
    field: &VelocityField,
    nu: f64,
    dealias: Dealias,
    mode: StepMode,
    choice: Backend,
) -> Result<Box<dyn Stepper>, SolverError> {
    match resolve(choice) {
        Backend::Cuda => cuda_stepper(field, nu, dealias, mode),
        _ => Ok(Box::new(Solver::with_field(field, nu, dealias, mode)?)),
    }
}

#[cfg(feature = "cuda")]
fn cuda_stepper(
    field: &VelocityField,
    nu: f64,
    dealias: Dealias,
    mode: StepMode,
) -> Result<Box<dyn Stepper>, SolverError> {
    let state = crate::solver::initial_state(field, dealias);
    Ok(Box::new(crate::gpu::GpuSolver::new(
        &state, nu, dealias, mode, 0,
    )?))
}

#[cfg(not(feature = "cuda"))]
fn cuda_stepper(
    _: &VelocityField,
    _: f64,
    _: Dealias,
    _: StepMode,
) -> Result<Box<dyn Stepper>, SolverError> {
    Err(SolverError::Device(cuda_usable().unwrap_err()))
}

/// The stepper of a configuration on backend `choice`, from its initial condition.
pub fn new_stepper(config: &Config, choice: Backend) -> Result<Box<dyn Stepper>, SolverError> {
    config
        .validate("config")
        .map_err(|e| SolverError::Invalid(e.to_string()))?;
    let field = crate::solver::initial_field(config);
    crate::solver::check_initial_energy(config, &field)?;
    stepper_with_field(
        &field,
        config.nu,
        config.dealias,
        crate::solver::step_mode(config),
        choice,
    )
}
