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
//! core = 2             # order of the vortex core: 2 (Gaussian), 4 or 6 (Gaussian-based
//!                      # cores of higher order; viscosity by the lattice's heat kernel)
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
//! snapshot_every = 0        # steps; and/or snapshot_interval (time); the last step always
//! snapshot_initial = false  # also the initial state (step 0): only when asked, it can be large
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
//!
//! The types of the file and their defaults are here; the checks of the values are in the
//! submodule `validate`.

use crate::energy_check::EnergyTolerance;
use crate::error::{Error, Result};
use crate::reinterpolation::history::History;
use crate::reinterpolation::{LatticeFilter, LatticeSpec, LatticeSums, RbfSettings, RbfSolver};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;
use std::path::Path;
use vortex_domain::TransportChoice;
use vortex_fmm::kernel::CoreOrder;
use vortex_fmm::periodic::Periodic;
use vortex_fmm::{BackendChoice, EvalParams, GridChoice, Method};

mod validate;
pub use validate::{
    MAX_MAGNITUDE, MAX_OVERLAP, MAX_RBF_ITERATIONS, MAX_STEPS, MIN_DECAY, MIN_LENGTH,
    MIN_MAGNITUDE, MIN_OVERLAP, MIN_RBF_TOLERANCE,
};

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
    /// Far-field gap in source core radii; a core of order 4 or 6 takes at least its least gap
    /// ([`CoreOrder::min_cutoff`]: 4.54 and 4.9, where its tail `|1 - q|` is the Gaussian's at
    /// 4).
    pub core_cutoff: f64,
    /// The order of the vortex core (`2 | 4 | 6`, [`CoreOrder`]): the Gaussian (the core
    /// paper's) or the Gaussian-based cores of Beale & Majda (1985) / Winckelmans & Leonard
    /// (1993) with smoothing error `O(sigma^4)`, `O(sigma^6)`. Honoured by every evaluation,
    /// the re-interpolation and the diagnostics; with a core of order above 2 the cores do not
    /// spread and the viscous term is the lattice's heat kernel
    /// ([`crate::reinterpolation::heat`]). Not written when 2 (earlier checkpoints restart).
    #[serde(deserialize_with = "de_core", skip_serializing_if = "is_gaussian")]
    pub core: CoreOrder,
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

/// Where the particle state of a run lives (`evaluation.state`): the planner's enum, beside
/// the backend and the grid.
pub use vortex_fmm::planner::StatePlace;

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

fn de_core<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<CoreOrder, D::Error> {
    let v = i64::deserialize(d)?;
    u32::try_from(v)
        .map_err(|_| format!("unknown core order {v} (the Gaussian cores have order 2, 4 or 6)"))
        .and_then(CoreOrder::try_from)
        .map_err(|e| serde::de::Error::custom(format!("evaluation.core: {e}")))
}

fn is_gaussian(c: &CoreOrder) -> bool {
    *c == CoreOrder::Second
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
            core: CoreOrder::Second,
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
    /// Also a snapshot of the initial state (step 0) when snapshots are scheduled; off by
    /// default (a snapshot of 1e8 particles takes minutes and tens of GiB).
    pub snapshot_initial: bool,
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
            snapshot_initial: false,
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
            core_cutoff: self
                .evaluation
                .core
                .default_cutoff(self.evaluation.core_cutoff),
            core: self.evaluation.core,
            periodic: self.periodic(),
            m2l: vortex_fmm::M2lKernel::Auto,
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
            core: self.evaluation.core,
            // the heat kernel of a re-interpolation: `Stepper::rbf_at`
            diffusion: 0.0,
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
            "nu={:e} dt={:e} domain={:?} evaluation=(method={} order={} theta={:e} leaf_size={} core_cutoff={:e} core={}) initial={:?} reinterpolation={:?}",
            self.nu, self.dt, self.domain, e.method, e.order, e.theta, e.leaf_size, e.core_cutoff, e.core, self.initial, self.reinterpolation
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
