//! Run configuration: TOML, unknown keys refused, every value checked with a message that names the
//! file and the key.
//!
//! ```toml
//! nu = 0.01            # kinematic viscosity (0: inviscid)
//! dt = 0.01            # time step (fixed)
//! t_end = 2.0          # final time (steps = round(t_end / dt))
//!
//! [domain]             # optional; free space by default
//! periodic = true
//! box_length = 6.283185307179586
//! image_levels = 4
//!
//! [evaluation]         # optional
//! method = "fmm"       # direct | treecode | fmm | ppm (whatever vortex_fmm::Method parses)
//! order = 10
//! theta = 0.5
//! leaf_size = 64
//! core_cutoff = 6.0
//! backend = "auto"     # auto | cpu | cuda: which vortex_fmm::Backend the binary builds for the run
//! device = 0           # GPU index for cuda (auto: the GPU when one is usable)
//! grid = "adaptive"    # adaptive | uniform | auto: uniform = the particles' FMM on a grid
//!                      # built on the GPU; auto = uniform where the planner finds it runs
//!
//! [initial]
//! kind = "taylor-green"  # taylor-green | taylor-green-2d | isotropic | ring | two-rings | blob
//! n = 32                 # grid / lattice points per direction (periodic kinds)
//! overlap = 1.0          # sigma0 / h
//!
//! [reinterpolation]    # optional
//! ratio = 1.2          # re-interpolate when sigma / sigma0 exceeds this ...
//! every = 0            # ... or every this many steps (0: never by count)
//! solver = "direct"    # direct (separable, exact) | cg (conjugate gradients)
//! tolerance = 1e-8     # relative residual the solve must reach
//! strain = 0.5         # ... or when (t - t_reset) max|alpha|/h^3 exceeds this (0: off)
//! history = "restart"  # restart (default: a Heun step after each re-interpolation, two
//!                      # evaluations) | carry (the AB2 history through the lattice operator:
//!                      # one evaluation per step; an option, not yet measured on a GPU)
//! # periodic box: the lattice solve interpolates the vorticity filtered by
//! # f(kx) f(ky) f(kz), f(k) = exp(-strength (|k|/k_N)^order) (default: Hou & Li's 36, 36);
//! # { kind = "none" }: exact interpolation
//! filter = { kind = "exponential", strength = 36.0, order = 36.0 }
//! sums = { kind = "direct" }  # | { kind = "spread", tolerance = 1e-6 } (reinterpolation::spreading)
//!
//! [output]             # optional
//! diagnostics_every = 10   # steps between rows of diagnostics.csv; and/or
//! # diagnostics_interval = 0.1  # simulation time between rows (the first step at or after)
//! checkpoint_every = 100    # steps; and/or checkpoint_interval (time)
//! snapshot_every = 0        # steps; and/or snapshot_interval (time)
//! energy_rise_warn = 1e-3   # decaying flow: warn when E rises above its lowest value by this
//! energy_rise_limit = 0.02  # ... and stop with an error above this
//! snapshot_format = "vtp"  # vtp (binary, with particles.pvd) | vtk (legacy ASCII)
//! checkpoint_wall_minutes = 30.0  # also a checkpoint this often by wall time (0: off)
//! checkpoints_kept = 2  # checkpoint.bin (newest), checkpoint.bin.1, ... (or checkpoint.manifest ...)
//!
//! [health]             # optional: the per-step stability check (crate::health)
//! cfl_warn = 1.0       # dt * max|u| / h
//! cfl_limit = 4.0
//! gradient_warn = 0.5  # dt * max|s| / |alpha|
//! gradient_limit = 2.0
//! ```

use crate::energy_check::EnergyTolerance;
use crate::error::{Error, Result};
use crate::reinterpolation::history::History;
use crate::reinterpolation::{LatticeFilter, LatticeSpec, LatticeSums, RbfSettings, RbfSolver};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;
use std::path::Path;
use vortex_domain::TransportChoice;
use vortex_fmm::periodic::Periodic;
use vortex_fmm::{BackendChoice, EvalParams, GridChoice, Method};

/// Keys refused with the key to use (the vocabulary shared with `vortex spectral`).
const RENAMED: &[(&str, &str)] = &[
    ("initial.type", "initial.kind"),
    ("output.stats_every", "output.diagnostics_interval"),
];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Kinematic viscosity.
    pub nu: f64,
    /// Time step.
    pub dt: f64,
    /// Final time.
    pub t_end: f64,
    #[serde(default)]
    pub domain: DomainConfig,
    #[serde(default)]
    pub evaluation: EvaluationConfig,
    pub initial: InitialConfig,
    #[serde(default)]
    pub reinterpolation: ReinterpolationConfig,
    #[serde(default)]
    pub output: OutputConfig,
    /// Stability thresholds of the per-step check ([`crate::health`]).
    #[serde(default)]
    pub health: crate::health::Limits,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DomainConfig {
    pub periodic: bool,
    /// Box length `L` (box `[-L/2, L/2)^3`).
    pub box_length: f64,
    /// Levels of periodic images above the root (see `vortex_fmm::periodic`).
    pub image_levels: usize,
}

impl Default for DomainConfig {
    fn default() -> Self {
        Self {
            periodic: false,
            box_length: 2.0 * PI,
            image_levels: 4,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvaluationConfig {
    #[serde(deserialize_with = "de_method")]
    pub method: Method,
    pub order: usize,
    pub theta: f64,
    pub leaf_size: usize,
    pub core_cutoff: f64,
    /// Compute backend: `"auto"` (the GPU when one is usable, else the CPU), `"cpu"` or `"cuda"`.
    /// The `vortex-method` crate runs any `vortex_fmm::Backend`; the binary builds the one named here (see
    /// [`crate::run::host_build`]). Not part of the checkpoint fingerprint: a run may be continued
    /// on another backend (bit-for-bit only on the same one).
    #[serde(deserialize_with = "de_backend")]
    pub backend: BackendChoice,
    /// GPU index for `backend = "cuda"`.
    pub device: usize,
    /// `"adaptive"` (octree built on the host; every method and backend) or `"uniform"` (the
    /// FMM of the particles at themselves on a uniform grid built on the GPU, free space or
    /// periodic, one rank; other evaluations stay adaptive) or `"auto"` (the uniform grid where
    /// the planner finds that it runs, else the octree). Like `backend`, not part of the
    /// checkpoint fingerprint.
    #[serde(deserialize_with = "de_grid")]
    pub grid: GridChoice,
    /// Where the particle state lives between steps: `"auto"` (on the GPU when the run is the
    /// device-resident step's case: backend `cuda`, grid `uniform`, periodic, one rank; else
    /// on the host), `"host"` or `"device"` (refused where the resident step does not apply).
    /// Not part of the checkpoint fingerprint.
    pub state: StatePlace,
    /// How the device buffers of a multi-GPU run travel between the ranks (the transposes of
    /// the slab FFT): `"auto"` (NCCL where it starts on every rank, else pinned host buffers
    /// and MPI, warned), `"nccl"` (or an error naming the library) or `"pinned"`. Not part of
    /// the checkpoint fingerprint.
    #[serde(deserialize_with = "de_exchange")]
    pub exchange: TransportChoice,
}

/// Where the particle state of a run lives (`evaluation.state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatePlace {
    #[default]
    Auto,
    /// The ranks' memory (`vortex_method::parallel::DistSimulation`).
    Host,
    /// One GPU for the whole run (the `vortex-resident` crate).
    Device,
}

/// How the diagnostics obtain the velocity on the periodic grid (`output.grid_velocity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GridVelocity {
    /// The FMM with the grid points as targets (the Biot-Savart law of the blobs).
    Fmm,
    /// The blob vorticity at the grid points (Gaussian sums), then Biot-Savart in Fourier
    /// space (what the device-resident step computes).
    Vorticity,
}

/// Deserializes a choice through its `FromStr`, whose error lists the valid values; the message
/// names the configuration key.
fn de_choice<'de, D, T>(d: D, key: &str) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr<Err = String>,
{
    let s = String::deserialize(d)?;
    s.parse()
        .map_err(|e: String| serde::de::Error::custom(format!("{key}: {e}")))
}

fn de_method<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Method, D::Error> {
    de_choice(d, "evaluation.method")
}

fn de_backend<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<BackendChoice, D::Error> {
    de_choice(d, "evaluation.backend")
}

fn de_exchange<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<TransportChoice, D::Error> {
    de_choice(d, "evaluation.exchange")
}

fn de_grid<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<GridChoice, D::Error> {
    de_choice(d, "evaluation.grid")
}

impl Default for EvaluationConfig {
    fn default() -> Self {
        let d = EvalParams::default();
        Self {
            method: d.method,
            order: d.order,
            theta: d.theta,
            leaf_size: d.leaf_size,
            core_cutoff: d.core_cutoff,
            backend: BackendChoice::Auto,
            device: 0,
            grid: GridChoice::Adaptive,
            state: StatePlace::Auto,
            exchange: TransportChoice::Auto,
        }
    }
}

/// Which initial condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InitialKind {
    /// 3-D Taylor-Green vortex of the spectral crate (periodic box of length 2 pi).
    TaylorGreen,
    /// 2-D Taylor-Green vortex (an exact Navier-Stokes solution decaying as exp(-2 nu t)).
    #[serde(rename = "taylor-green-2d")]
    TaylorGreen2d,
    /// Isotropic random field of the spectral crate.
    Isotropic,
    /// One vortex ring with a Gaussian core (free space).
    Ring,
    /// Two coaxial rings, leapfrogging or colliding head-on (free space).
    TwoRings,
    /// One Gaussian blob (tests of core spreading).
    Blob,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RingPair {
    Leapfrog,
    Collide,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitialConfig {
    pub kind: InitialKind,
    /// Grid points per direction of the periodic kinds (the spectral solver's grid).
    pub n: Option<usize>,
    /// `sigma0 / h` (core radius over lattice spacing); 1 in the core paper.
    #[serde(default = "one")]
    pub overlap: f64,
    // isotropic
    pub k_peak: Option<f64>,
    pub re_lambda: Option<f64>,
    pub energy: Option<f64>,
    pub seed: Option<u64>,
    // rings
    /// Ring radius `R`.
    pub radius: Option<f64>,
    /// Circulation `Gamma`.
    pub circulation: Option<f64>,
    /// Standard deviation `s` of the Gaussian core, `omega = Gamma / (2 pi s^2) exp(-d^2 / 2 s^2)`.
    pub core: Option<f64>,
    /// Lattice spacing `h` in free space.
    pub spacing: Option<f64>,
    /// Centre of the (first) ring / the blob.
    pub center: Option<[f64; 3]>,
    /// Axial distance between two rings.
    pub separation: Option<f64>,
    pub pair: Option<RingPair>,
    // blob
    /// Core radius of the blob.
    pub sigma: Option<f64>,
    /// Strength vector of the blob.
    pub strength: Option<[f64; 3]>,
}

fn one() -> f64 {
    1.0
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReinterpolationConfig {
    /// Re-interpolate when `sigma / sigma0` exceeds this (`> 1`); `0` disables the criterion.
    pub ratio: f64,
    /// Also re-interpolate every this many steps (0: never by count).
    pub every: u64,
    /// Also re-interpolate when the Lagrangian strain since the last reset,
    /// `(t - t_reset) max_p |omega_p|` (dimensionless), exceeds this (0: off). See
    /// [`crate::stepping::Stepper::strain`].
    pub strain: f64,
    /// `"direct"` (default: exact separable solve) or `"cg"` (conjugate gradients).
    pub solver: RbfSolver,
    /// Relative residual the solve must reach (where CG stops).
    pub tolerance: f64,
    pub max_iterations: usize,
    /// Truncation of the Gaussian sums, in core radii.
    pub cutoff: f64,
    /// Free space: drop strengths below `drop * max |alpha|`.
    pub drop: f64,
    /// Periodic lattice points per direction (default: `initial.n`).
    pub n: Option<usize>,
    /// Free-space lattice spacing (default: `initial.spacing`).
    pub spacing: Option<f64>,
    /// The Adams-Bashforth history through a re-interpolation: `"restart"` (default: the next
    /// step is a Heun step, two evaluations) or `"carry"` (through the lattice operator, the next
    /// step is AB2 with one evaluation; an option, not yet measured on a GPU). See
    /// [`crate::reinterpolation::history`].
    pub history: History,
    /// Transfer function of the periodic lattice solve
    /// ([`crate::reinterpolation::filter`]; default: `exp(-36 (|k|/k_N)^36)` per axis; ignored
    /// in free space and for the initial condition).
    pub filter: LatticeFilter,
    /// How the vorticity of the old blobs at the lattice points is computed
    /// ([`crate::reinterpolation::spreading`]; not written when direct, the default, so that
    /// earlier checkpoints restart).
    #[serde(skip_serializing_if = "LatticeSums::is_direct")]
    pub sums: LatticeSums,
}

impl Default for ReinterpolationConfig {
    fn default() -> Self {
        let r = RbfSettings::default();
        Self {
            ratio: 1.2,
            every: 0,
            // validation/isotropic/README.md: 0.5 keeps Taylor-Green stable to t = 20 (16^3) and
            // t = 10 (32^3), where core growth alone re-interpolates too rarely
            strain: 0.5,
            solver: r.solver,
            tolerance: r.tolerance,
            max_iterations: r.max_iterations,
            cutoff: r.cutoff,
            drop: r.drop,
            n: None,
            spacing: None,
            history: History::default(),
            filter: LatticeFilter::default(),
            sums: LatticeSums::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// Diagnostics (a row of `diagnostics.csv`) every this many steps (0: only first and last).
    pub diagnostics_every: u64,
    /// Points per direction of the grid on which the velocity is evaluated for energy, enstrophy
    /// and spectra in a periodic box (default: the lattice `n`).
    pub grid: Option<usize>,
    /// How the grid velocity is obtained (`"fmm"` or `"vorticity"`); default: the FMM on
    /// the host state, the vorticity on the device-resident state (the only one it has).
    pub grid_velocity: Option<GridVelocity>,
    /// Write the energy spectrum with each diagnostics row (periodic only).
    pub spectra: bool,
    /// VTK particle snapshots every this many steps (0: none; the last step is always written
    /// when nonzero).
    pub snapshot_every: u64,
    /// Format of the particle snapshots: `vtp` (binary XML PolyData plus `particles.pvd` with the
    /// physical times; default) or `vtk` (legacy ASCII).
    pub snapshot_format: SnapshotFormat,
    /// Checkpoints every this many steps (0: only at the end and by wall time).
    pub checkpoint_every: u64,
    /// Diagnostics rows also every this much simulation time (at the first step at or after
    /// each multiple; the key of `vortex spectral` for the same interval).
    pub diagnostics_interval: Option<f64>,
    /// Particle snapshots also every this much simulation time.
    pub snapshot_interval: Option<f64>,
    /// Checkpoints also every this much simulation time (as in `vortex spectral`).
    pub checkpoint_interval: Option<f64>,
    /// A checkpoint also after this many wall-clock minutes since the last one (0: off).
    pub checkpoint_wall_minutes: f64,
    /// Checkpoints kept: `checkpoint.bin` the newest, `checkpoint.bin.1` the one before ...
    /// (several ranks: `checkpoint.manifest`, `checkpoint.manifest.1` ... and their pieces).
    pub checkpoints_kept: usize,
    /// Stop when the energy exceeds this factor times its initial value.
    pub energy_growth_limit: f64,
    /// Decaying flow (no forcing): a rise of the energy above its lowest value so far by more
    /// than this fraction is a warning ([`crate::energy_check`]).
    pub energy_rise_warn: f64,
    /// ... and by more than this fraction an error that stops the run.
    pub energy_rise_limit: f64,
    /// Progress bar on stderr.
    pub progress: bool,
    /// PNG plots of energy and spectra at the end.
    pub plots: bool,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            diagnostics_every: 10,
            grid: None,
            grid_velocity: None,
            spectra: true,
            snapshot_every: 0,
            snapshot_format: SnapshotFormat::Vtp,
            checkpoint_every: 0,
            diagnostics_interval: None,
            snapshot_interval: None,
            checkpoint_interval: None,
            checkpoint_wall_minutes: 30.0,
            checkpoints_kept: 2,
            energy_growth_limit: 10.0,
            energy_rise_warn: EnergyTolerance::default().warn,
            energy_rise_limit: EnergyTolerance::default().limit,
            progress: true,
            plots: true,
        }
    }
}

/// Format of the particle snapshots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SnapshotFormat {
    /// XML VTK PolyData with appended raw binary data (`particles_STEP.vtp`) and the time series
    /// `particles.pvd` (see [`crate::vtp`]).
    Vtp,
    /// Legacy ASCII VTK (`particles_STEP.vtk`).
    Vtk,
}

/// The smallest magnitude of a circulation, strength or energy a configuration may give: below
/// it the vorticity of the particles and the energy underflow (their squares and the
/// diagnostics' products leave the double range).
pub const MIN_MAGNITUDE: f64 = 1e-12;

/// The most steps a run may have (`t_end / dt`).
pub const MAX_STEPS: f64 = 1e12;

/// The range of `initial.overlap` (`sigma0 / h`).
pub const MIN_OVERLAP: f64 = 0.05;
/// See [`MIN_OVERLAP`].
pub const MAX_OVERLAP: f64 = 4.0;

/// The smallest relative residual the re-interpolation may ask for.
pub const MIN_RBF_TOLERANCE: f64 = 1e-14;
/// The most conjugate-gradient iterations of a re-interpolation.
pub const MAX_RBF_ITERATIONS: usize = 100_000;

/// The most the energy of the slowest mode of the periodic box (`|k| = 1`) may decay over a
/// run, `exp(-2 nu t_end)`: below it the energy and the diagnostics' products underflow.
pub const MIN_DECAY: f64 = 1e-100;

/// `v > 0` and finite, or the error naming `key`.
fn positive(file: &str, key: &str, v: f64) -> Result<()> {
    if !(v > 0.0 && v.is_finite()) {
        return Err(bad(
            file,
            key,
            format!("must be positive and finite, got {v}"),
        ));
    }
    Ok(())
}

/// The smallest length (core radius, lattice spacing, ring radius) a configuration may give,
/// in the units of the box: below it the kernel's powers of `1/sigma` and the lattice counts
/// leave the range of the arithmetic long before any physics is resolved.
pub const MIN_LENGTH: f64 = 1e-8;

/// The largest magnitude of a coordinate, length, circulation, strength or energy a
/// configuration may give: far beyond any run, small enough that products stay finite.
pub const MAX_MAGNITUDE: f64 = 1e12;

/// A length in `[MIN_LENGTH, MAX_MAGNITUDE]`, or the error naming `key` and the value.
fn length(file: &str, key: &str, v: f64) -> Result<()> {
    positive(file, key, v)?;
    if !(MIN_LENGTH..=MAX_MAGNITUDE).contains(&v) {
        return Err(bad(
            file,
            key,
            format!("{v:e} is outside the physical range [{MIN_LENGTH:e}, {MAX_MAGNITUDE:e}]"),
        ));
    }
    Ok(())
}

/// Every component finite and at most [`MAX_MAGNITUDE`] in magnitude, or the error naming
/// `key` and the value.
fn bounded_vector(file: &str, key: &str, v: &[f64]) -> Result<()> {
    if v.iter().any(|x| !(x.abs() <= MAX_MAGNITUDE)) {
        return Err(bad(
            file,
            key,
            format!(
                "{v:?}: every component must be finite and at most {MAX_MAGNITUDE:e} in magnitude"
            ),
        ));
    }
    Ok(())
}

fn bad(file: &str, key: &str, msg: impl Into<String>) -> Error {
    Error::Config {
        file: file.to_string(),
        key: key.to_string(),
        msg: msg.into(),
    }
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn from_file(path: &Path) -> Result<Config> {
        let text =
            vortex_spectral::inputs::read_config(path).map_err(|e| Error::Other(e.to_string()))?;
        Self::from_str_named(&text, &path.display().to_string())
    }

    /// Parses and validates TOML text; `file` names it in error messages.
    pub fn from_str_named(text: &str, file: &str) -> Result<Config> {
        vortex_spectral::config::refuse_renamed(text, file, RENAMED).map_err(|e| match e {
            vortex_spectral::config::ConfigError::Invalid { file, key, msg } => {
                Error::Config { file, key, msg }
            }
            e => Error::Other(e.to_string()),
        })?;
        let c: Config = toml::from_str(text).map_err(|e| Error::ConfigParse {
            file: file.to_string(),
            msg: e.to_string().trim_end().to_string(),
        })?;
        c.validate(file)?;
        Ok(c)
    }

    /// Number of steps to `t_end`.
    pub fn steps(&self) -> u64 {
        (self.t_end / self.dt).round() as u64
    }

    pub fn method(&self) -> Method {
        self.evaluation.method
    }

    pub fn periodic(&self) -> Option<Periodic> {
        self.domain.periodic.then_some(Periodic {
            box_length: self.domain.box_length,
            image_levels: self.domain.image_levels,
        })
    }

    pub fn eval_params(&self) -> EvalParams {
        EvalParams {
            method: self.method(),
            order: self.evaluation.order,
            theta: self.evaluation.theta,
            leaf_size: self.evaluation.leaf_size,
            core_cutoff: self.evaluation.core_cutoff,
            core: vortex_fmm::kernel::CoreOrder::default(),
            periodic: self.periodic(),
        }
    }

    pub fn rbf_settings(&self) -> RbfSettings {
        RbfSettings {
            solver: self.reinterpolation.solver,
            tolerance: self.reinterpolation.tolerance,
            max_iterations: self.reinterpolation.max_iterations,
            cutoff: self.reinterpolation.cutoff,
            drop: if self.domain.periodic {
                0.0
            } else {
                self.reinterpolation.drop
            },
            filter: self.reinterpolation.filter,
            sums: self.reinterpolation.sums,
        }
    }

    /// Lattice points per direction of the periodic kinds.
    pub fn lattice_n(&self) -> Option<usize> {
        self.reinterpolation.n.or(self.initial.n)
    }

    /// Lattice spacing `h` (periodic: `L / n`).
    pub fn lattice_h(&self) -> f64 {
        if self.domain.periodic {
            self.domain.box_length / self.lattice_n().unwrap_or(1) as f64
        } else {
            self.reinterpolation
                .spacing
                .or(self.initial.spacing)
                .unwrap_or(f64::NAN)
        }
    }

    /// Core radius of freshly created particles, `overlap * h`.
    pub fn sigma0(&self) -> f64 {
        self.initial.overlap * self.lattice_h()
    }

    pub fn lattice_spec(&self) -> LatticeSpec {
        if self.domain.periodic {
            LatticeSpec::Periodic {
                n: self.lattice_n().unwrap_or(1),
                box_length: self.domain.box_length,
            }
        } else {
            LatticeSpec::Free {
                h: self.lattice_h(),
                margin: 4.0,
            }
        }
    }

    pub fn energy_tolerance(&self) -> EnergyTolerance {
        EnergyTolerance {
            warn: self.output.energy_rise_warn,
            limit: self.output.energy_rise_limit,
        }
    }

    /// What a checkpoint must agree on to be continued by this configuration (everything that
    /// changes the state's trajectory; `t_end` and the outputs may change).
    pub fn fingerprint(&self) -> String {
        let e = &self.evaluation;
        format!(
            "nu={:e} dt={:e} domain={:?} evaluation=(method={} order={} theta={:e} leaf_size={} core_cutoff={:e}) initial={:?} reinterpolation={:?}",
            self.nu, self.dt, self.domain, e.method, e.order, e.theta, e.leaf_size, e.core_cutoff, self.initial, self.reinterpolation
        )
    }

    /// The keys a restart must keep, flattened (`dotted.key -> value`): everything except
    /// `t_end`, `[output]`, `[health]` and `evaluation.backend`, `.device`, `.grid`, `.state`, `.exchange`.
    pub fn restart_keys(&self) -> std::collections::BTreeMap<String, String> {
        let text = toml::to_string(self).unwrap_or_default();
        let mut m = vortex_spectral::durable::flatten_toml(&text).unwrap_or_default();
        m.retain(|k, _| {
            !(k == "t_end"
                || k.starts_with("output.")
                || k.starts_with("health.")
                || k == "evaluation.backend"
                || k == "evaluation.device"
                || k == "evaluation.grid"
                || k == "evaluation.state"
                || k == "evaluation.exchange")
        });
        m
    }

    /// Checks ranges and consistency, one section of the file after the other.
    pub fn validate(&self, file: &str) -> Result<()> {
        self.validate_run(file)?;
        self.validate_reinterpolation(file)?;
        self.validate_initial(file)?;
        self.validate_viscosity(file)?;
        self.validate_output(file)
    }

    /// Time stepping, evaluation and domain.
    fn validate_run(&self, file: &str) -> Result<()> {
        let pos = |key: &str, v: f64| positive(file, key, v);
        if !(self.nu >= 0.0 && self.nu.is_finite()) {
            return Err(bad(
                file,
                "nu",
                format!("the viscosity must be >= 0 (0: inviscid), got {}", self.nu),
            ));
        }
        if self.nu > MAX_MAGNITUDE {
            return Err(bad(
                file,
                "nu",
                format!(
                    "{:e} is above {MAX_MAGNITUDE:e}: no flow in a box of this size has such a \
                     viscosity",
                    self.nu
                ),
            ));
        }
        pos("dt", self.dt)?;
        pos("t_end", self.t_end)?;
        if self.t_end / self.dt > MAX_STEPS {
            return Err(bad(
                file,
                "dt",
                format!(
                    "t_end / dt = {:.3e} steps, more than {MAX_STEPS:e}: no run takes that many \
                     (at a millisecond a step, 30 years); check dt and t_end",
                    self.t_end / self.dt
                ),
            ));
        }
        if self.t_end < self.dt {
            return Err(bad(
                file,
                "t_end",
                format!(
                    "t_end = {} is shorter than one step dt = {}",
                    self.t_end, self.dt
                ),
            ));
        }
        let steps = self.t_end / self.dt;
        if (steps - steps.round()).abs() > 1e-6 * steps.max(1.0) {
            return Err(bad(
                file,
                "t_end",
                format!(
                    "t_end = {} is not a whole number of steps dt = {} (t_end/dt = {steps})",
                    self.t_end, self.dt
                ),
            ));
        }
        // evaluation
        let e = &self.evaluation;
        if e.order == 0 || e.order > vortex_fmm::MAX_ORDER {
            return Err(bad(
                file,
                "evaluation.order",
                format!("must lie in 1..={}, got {}", vortex_fmm::MAX_ORDER, e.order),
            ));
        }
        if !(e.theta > 0.0 && e.theta < 1.0) {
            return Err(bad(
                file,
                "evaluation.theta",
                format!("the opening angle must lie in (0, 1), got {}", e.theta),
            ));
        }
        if e.grid == GridChoice::Uniform && e.backend == BackendChoice::Cpu {
            return Err(bad(
                file,
                "evaluation.grid",
                "\"uniform\" is built and evaluated on the GPU: backend must be \"cuda\" or \"auto\"",
            ));
        }
        if e.leaf_size == 0 {
            return Err(bad(file, "evaluation.leaf_size", "must be at least 1"));
        }
        if !(e.core_cutoff >= 0.0 && e.core_cutoff.is_finite()) {
            return Err(bad(
                file,
                "evaluation.core_cutoff",
                format!("must be >= 0, got {}", e.core_cutoff),
            ));
        }
        // domain
        if self.domain.periodic {
            pos("domain.box_length", self.domain.box_length)?;
            if self.domain.image_levels > 12 {
                return Err(bad(
                    file,
                    "domain.image_levels",
                    format!("at most 12, got {}", self.domain.image_levels),
                ));
            }
        }
        Ok(())
    }

    /// The `[reinterpolation]` section.
    fn validate_reinterpolation(&self, file: &str) -> Result<()> {
        // reinterpolation
        let r = &self.reinterpolation;
        if !(r.ratio == 0.0 || (r.ratio > 1.0 && r.ratio.is_finite())) {
            return Err(bad(
                file,
                "reinterpolation.ratio",
                format!("the core growth ratio sigma/sigma0 that triggers re-interpolation must be > 1 (or 0 to disable), got {}", r.ratio),
            ));
        }
        if !(r.tolerance >= MIN_RBF_TOLERANCE && r.tolerance < 1.0) {
            return Err(bad(
                file,
                "reinterpolation.tolerance",
                format!(
                    "must lie in [{MIN_RBF_TOLERANCE:e}, 1), got {:e}: a relative residual \
                     below about 1e-14 is under the round-off of the Gaussian sums in double \
                     precision, so no solve reaches it",
                    r.tolerance
                ),
            ));
        }
        if !(1..=MAX_RBF_ITERATIONS).contains(&r.max_iterations) {
            return Err(bad(
                file,
                "reinterpolation.max_iterations",
                format!(
                    "must lie in 1..={MAX_RBF_ITERATIONS}, got {} (conjugate gradients that \
                     have not converged in that many iterations are stagnating)",
                    r.max_iterations
                ),
            ));
        }
        if !(r.cutoff >= 3.0 && r.cutoff.is_finite()) {
            return Err(bad(
                file,
                "reinterpolation.cutoff",
                format!("must be >= 3 core radii, got {}", r.cutoff),
            ));
        }
        if !(r.drop >= 0.0 && r.drop < 1.0) {
            return Err(bad(
                file,
                "reinterpolation.drop",
                format!("must lie in [0, 1), got {}", r.drop),
            ));
        }
        if !(r.strain >= 0.0 && r.strain.is_finite()) {
            return Err(bad(
                file,
                "reinterpolation.strain",
                format!("must be >= 0 (0: off), got {}", r.strain),
            ));
        }
        r.filter
            .check()
            .map_err(|e| bad(file, "reinterpolation.filter", e))?;
        Ok(())
    }

    /// The initial condition and the periodic lattice it lives on.
    fn validate_initial(&self, file: &str) -> Result<()> {
        let pos = |key: &str, v: f64| positive(file, key, v);
        // initial condition
        let (i, r) = (&self.initial, &self.reinterpolation);
        pos("initial.overlap", i.overlap)?;
        if !(MIN_OVERLAP..=MAX_OVERLAP).contains(&i.overlap) {
            return Err(bad(
                file,
                "initial.overlap",
                format!(
                    "{:e} is outside [{MIN_OVERLAP}, {MAX_OVERLAP}]: sigma0 / h below it leaves \
                     the particles without overlap (the blob approximation does not converge), \
                     above it every Gaussian sum covers more than (2 cutoff overlap)^3 = {:.0e} \
                     lattice points per particle",
                    i.overlap,
                    (2.0 * r.cutoff * MAX_OVERLAP).powi(3)
                ),
            ));
        }
        let need = |key: &str, v: Option<f64>| -> Result<f64> {
            let v = v.ok_or_else(|| {
                bad(
                    file,
                    &format!("initial.{key}"),
                    format!("required for kind = \"{}\"", kind_name(i.kind)),
                )
            })?;
            pos(&format!("initial.{key}"), v)?;
            bounded_vector(file, &format!("initial.{key}"), &[v])?;
            if ["core", "sigma", "spacing", "radius", "separation"].contains(&key) {
                length(file, &format!("initial.{key}"), v)?;
            }
            Ok(v)
        };
        for (key, v) in [
            ("initial.center", i.center),
            ("initial.strength", i.strength),
        ] {
            if let Some(v) = v {
                bounded_vector(file, key, &v)?;
            }
        }
        for (key, v) in [
            ("initial.energy", i.energy),
            ("initial.re_lambda", i.re_lambda),
            ("initial.k_peak", i.k_peak),
            ("initial.circulation", i.circulation),
        ] {
            if let Some(v) = v {
                bounded_vector(file, key, &[v])?;
            }
        }
        for (key, v) in [
            ("initial.circulation", i.circulation.map(f64::abs)),
            ("initial.energy", i.energy),
            (
                "initial.strength",
                i.strength
                    .map(|s| s.iter().map(|x| x * x).sum::<f64>().sqrt()),
            ),
        ] {
            if let Some(v) = v.filter(|&v| v < MIN_MAGNITUDE) {
                return Err(bad(
                    file,
                    key,
                    format!(
                        "magnitude {v:e} is below {MIN_MAGNITUDE:e}: a field that weak has no \
                         dynamics, and its vorticity and energy underflow in double precision"
                    ),
                ));
            }
        }
        if let Some(h) = r.spacing {
            length(file, "reinterpolation.spacing", h)?;
        }
        match i.kind {
            InitialKind::TaylorGreen | InitialKind::TaylorGreen2d | InitialKind::Isotropic => {
                if !self.domain.periodic {
                    return Err(bad(
                        file,
                        "domain.periodic",
                        format!(
                            "kind = \"{}\" is a periodic field: set domain.periodic = true",
                            kind_name(i.kind)
                        ),
                    ));
                }
                if (self.domain.box_length - 2.0 * PI).abs() > 1e-12 {
                    return Err(bad(file, "domain.box_length", format!("the spectral fields live in the box [-pi, pi)^3: box_length must be 2 pi, got {}", self.domain.box_length)));
                }
                let n = i
                    .n
                    .ok_or_else(|| bad(file, "initial.n", "required: grid points per direction"))?;
                if n < 4 || n % 2 != 0 {
                    return Err(bad(
                        file,
                        "initial.n",
                        format!("must be even and >= 4, got {n}"),
                    ));
                }
                if i.kind == InitialKind::Isotropic {
                    need("k_peak", i.k_peak)?;
                    if let Some(re) = i.re_lambda {
                        pos("initial.re_lambda", re)?;
                        if self.nu == 0.0 {
                            return Err(bad(
                                file,
                                "initial.re_lambda",
                                "a Reynolds number needs nu > 0 (give initial.energy instead)",
                            ));
                        }
                    }
                    if let Some(e) = i.energy {
                        pos("initial.energy", e)?;
                    }
                }
            }
            InitialKind::Ring | InitialKind::TwoRings | InitialKind::Blob => {
                if self.domain.periodic {
                    return Err(bad(file, "domain.periodic", format!("kind = \"{}\" is a free-space initial condition (its total strength is not zero)", kind_name(i.kind))));
                }
                need("spacing", i.spacing.or(r.spacing))?;
                if i.kind == InitialKind::Blob {
                    need("sigma", i.sigma)?;
                    if i.strength.is_none() {
                        return Err(bad(
                            file,
                            "initial.strength",
                            "required for kind = \"blob\"",
                        ));
                    }
                } else {
                    let rad = need("radius", i.radius)?;
                    need("circulation", i.circulation.map(f64::abs))?;
                    let core = need("core", i.core)?;
                    if core >= 0.5 * rad {
                        return Err(bad(
                            file,
                            "initial.core",
                            format!(
                                "the core ({core}) must be thin compared with the radius ({rad})"
                            ),
                        ));
                    }
                    if i.kind == InitialKind::TwoRings {
                        need("separation", i.separation)?;
                        if i.pair.is_none() {
                            return Err(bad(
                                file,
                                "initial.pair",
                                "required for two rings: \"leapfrog\" or \"collide\"",
                            ));
                        }
                    }
                }
            }
        }
        self.validate_lattice(file)
    }

    /// The viscosity against the periodic box: the cores must stay narrower than a quarter of
    /// the box until a re-interpolation resets them (core spreading, `sigma^2 = sigma0^2 +
    /// 2 nu t` after the last reset, core paper Eq. 11), and the slowest mode of the box may
    /// not decay below [`MIN_DECAY`] over the run (its energy would underflow).
    fn validate_viscosity(&self, file: &str) -> Result<()> {
        let Some(p) = self.periodic() else {
            return Ok(());
        };
        let (sigma0, quarter) = (self.sigma0(), 0.25 * p.box_length);
        if sigma0 > quarter {
            return Err(bad(
                file,
                "initial.overlap",
                format!(
                    "cores of radius sigma0 = overlap * L / n = {sigma0:.4} are wider than a \
                     quarter of the box (L / 4 = {quarter:.4}): the periodic sums need a box at \
                     least 4 core radii wide; raise initial.n or lower initial.overlap"
                ),
            ));
        }
        let r = &self.reinterpolation;
        // the longest time between two resets of the cores (re-interpolation by core growth
        // or by count; a reset by strain cannot be foreseen)
        let mut reset = self.t_end;
        if r.ratio > 0.0 {
            let to_ratio = crate::core_spreading::time_to_ratio(sigma0, self.nu, r.ratio);
            reset = reset.min(to_ratio + self.dt);
        }
        if r.every > 0 {
            reset = reset.min(r.every as f64 * self.dt);
        }
        let sigma = crate::core_spreading::sigma_at(sigma0, self.nu, reset.max(self.dt));
        if !(sigma <= quarter) {
            return Err(bad(
                file,
                "nu",
                format!(
                    "nu = {:e}: core spreading (sigma^2 = sigma0^2 + 2 nu t) widens the cores \
                     from {sigma0:.4} to {sigma:.4e} within {:.4e} time units (before a \
                     re-interpolation resets them), beyond a quarter of the box (L / 4 = \
                     {quarter:.4}): lower nu or dt, or re-interpolate more often",
                    self.nu,
                    reset.max(self.dt)
                ),
            ));
        }
        let decay = (-2.0 * self.nu * self.t_end).exp();
        if decay < MIN_DECAY {
            return Err(bad(
                file,
                "nu",
                format!(
                    "nu = {:e} with t_end = {}: the slowest mode of the box (|k| = 1) decays by \
                     exp(-2 nu t_end) = {decay:.1e}, below {MIN_DECAY:e}: the energy underflows \
                     long before t_end; lower nu or t_end",
                    self.nu, self.t_end
                ),
            ));
        }
        Ok(())
    }

    /// The periodic lattice of the re-interpolation (points, spacing against the box) and the
    /// diagnostics grid.
    fn validate_lattice(&self, file: &str) -> Result<()> {
        let (i, r) = (&self.initial, &self.reinterpolation);
        if self.domain.periodic {
            let n = self
                .lattice_n()
                .ok_or_else(|| bad(file, "reinterpolation.n", "the periodic lattice needs n"))?;
            if n < 2 {
                return Err(bad(
                    file,
                    "reinterpolation.n",
                    "at least 2 points per direction",
                ));
            }
            if let Some(h) = r.spacing.or(i.spacing) {
                let m = self.domain.box_length / h;
                if (m - m.round()).abs() > 1e-9 * m || m.round() as usize != n {
                    return Err(bad(file, "reinterpolation.spacing", format!("a lattice of spacing {h} does not fit the box of length {} with n = {n} points", self.domain.box_length)));
                }
            }
            r.sums
                .check_run(Some(n), self.domain.box_length, self.sigma0())
                .map_err(|(key, e)| bad(file, key, e))?;
            if let Some(g) = self.output.grid {
                if g < 4 || g % 2 != 0 || g > 1 << 14 {
                    return Err(bad(
                        file,
                        "output.grid",
                        format!("must be even, >= 4 and at most 16384, got {g}"),
                    ));
                }
            }
        } else {
            r.sums
                .check_run(None, 0.0, self.sigma0())
                .map_err(|(key, e)| bad(file, key, e))?;
        }
        Ok(())
    }

    /// The `[output]` and `[health]` sections.
    fn validate_output(&self, file: &str) -> Result<()> {
        let o = &self.output;
        if !(o.energy_rise_warn > 0.0 && o.energy_rise_limit >= o.energy_rise_warn) {
            return Err(bad(
                file,
                "output.energy_rise_limit",
                format!(
                    "need 0 < energy_rise_warn <= energy_rise_limit, got {} and {}",
                    o.energy_rise_warn, o.energy_rise_limit
                ),
            ));
        }
        if !(self.output.checkpoint_wall_minutes >= 0.0
            && self.output.checkpoint_wall_minutes.is_finite())
        {
            return Err(bad(
                file,
                "output.checkpoint_wall_minutes",
                format!(
                    "must be >= 0 and finite, got {}",
                    self.output.checkpoint_wall_minutes
                ),
            ));
        }
        for (key, v) in [
            ("output.diagnostics_interval", o.diagnostics_interval),
            ("output.snapshot_interval", o.snapshot_interval),
            ("output.checkpoint_interval", o.checkpoint_interval),
        ] {
            if let Some(v) = v {
                positive(file, key, v)?;
            }
        }
        let max_kept = vortex_spectral::durable::MAX_KEPT;
        if !(1..=max_kept).contains(&self.output.checkpoints_kept) {
            return Err(bad(
                file,
                "output.checkpoints_kept",
                format!(
                    "must lie in 1..={max_kept} (each kept checkpoint is a whole copy of the \
                     state), got {}",
                    self.output.checkpoints_kept
                ),
            ));
        }
        let h = &self.health;
        for (key, warn, limit) in [
            ("health.cfl_limit", h.cfl_warn, h.cfl_limit),
            ("health.gradient_limit", h.gradient_warn, h.gradient_limit),
        ] {
            if !(warn > 0.0 && warn <= limit && limit.is_finite()) {
                return Err(bad(
                    file,
                    key,
                    format!("needs 0 < warning level <= limit < inf, got {warn} and {limit}"),
                ));
            }
        }
        if !(self.output.energy_growth_limit > 1.0) {
            return Err(bad(
                file,
                "output.energy_growth_limit",
                format!("must be > 1, got {}", self.output.energy_growth_limit),
            ));
        }
        Ok(())
    }
}

pub fn kind_name(k: InitialKind) -> &'static str {
    match k {
        InitialKind::TaylorGreen => "taylor-green",
        InitialKind::TaylorGreen2d => "taylor-green-2d",
        InitialKind::Isotropic => "isotropic",
        InitialKind::Ring => "ring",
        InitialKind::TwoRings => "two-rings",
        InitialKind::Blob => "blob",
    }
}
