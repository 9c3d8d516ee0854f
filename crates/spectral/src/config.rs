//! The TOML configuration of a run (`vortex spectral CONFIG.toml`).
//!
//! ```toml
//! n = 64                    # grid points per direction (even, >= 8)
//! nu = 0.01                 # kinematic viscosity (> 0 unless inviscid = true)
//! # inviscid = true         # allow nu = 0
//! dealias = "three-halves"  # or "two-thirds"
//! t_end = 10.0
//! dt = 0.01                 # fixed step; or give cfl (and optionally dt_max) instead
//! # cfl = 0.5
//! # dt_max = 0.05
//! diagnostics_interval = 0.1  # time between rows of energy.csv (default: every step)
//! spectrum_times = [0.0, 5.0, 10.0]
//! field_times = [10.0]      # velocity fields on the grid
//! field_formats = ["npy", "vtk"]
//! vorticity = false         # also write the vorticity with the fields
//! checkpoint_interval = 1.0   # time between checkpoints (default: only at the end)
//! threads = 0               # rayon threads, 0 = all cores
//! backend = "auto"          # "auto" (the GPU when usable, else the CPU), "cpu" or "cuda"
//!
//! [health]                  # the per-step stability check
//! cfl_warn = 1.0            # warn above dt * max(|u|+|v|+|w|) / dx
//! cfl_limit = 2.5           # stop with an error above
//!
//! [initial]
//! kind = "taylor-green"     # "taylor-green", "taylor-green-2d" or "isotropic"
//! amplitude = 1.0           # Taylor-Green only
//! # k_peak = 4.0            # isotropic only, with seed and one of energy / re_lambda
//! # seed = 1
//! # re_lambda = 100.0
//! ```

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Dealiasing rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dealias {
    /// Zero-padding to `3n/2` points for the products (exact for quadratic terms). Default.
    #[default]
    ThreeHalves,
    /// Truncation of all modes with `|k_i| >= n/3`, products on the `n^3` grid.
    TwoThirds,
}

/// Where the time stepping runs (key `backend`).
///
/// `auto` (the default) takes the CUDA backend when the binary was built with the `cuda` feature
/// and a CUDA driver, NVRTC, cuFFT and a device are present, and the CPU otherwise: the 3/2-rule
/// step is about two orders of magnitude faster on a GPU, and machines without one run unchanged.
/// The backends agree to round-off (about 1e-13 relative over many steps), not bit for bit; a run
/// restarted on the same backend reproduces the uninterrupted run bit for bit, so set `cpu` or
/// `cuda` explicitly where restarts must be bitwise across machines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// The GPU when usable, else the CPU.
    #[default]
    Auto,
    /// The CPU reference (rayon threads).
    Cpu,
    /// The CUDA backend (cuFFT, double precision); an error when no GPU can be used.
    Cuda,
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Backend::Auto),
            "cpu" => Ok(Backend::Cpu),
            "cuda" => Ok(Backend::Cuda),
            _ => Err(format!(
                "unknown backend {s:?} (expected \"auto\", \"cpu\" or \"cuda\")"
            )),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Auto => "auto",
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
        })
    }
}

/// Which initial field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InitialKind {
    /// 3-D Taylor-Green vortex.
    TaylorGreen,
    /// 2-D Taylor-Green vortex (exact solution).
    TaylorGreen2d,
    /// Random isotropic field.
    Isotropic,
}

/// The `[initial]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitialConfig {
    /// Kind of initial field (`kind`, as in the vortex method; `type` is refused, naming it).
    pub kind: InitialKind,
    /// Amplitude of the Taylor-Green fields (default 1).
    #[serde(default)]
    pub amplitude: Option<f64>,
    /// Peak wavenumber of the isotropic spectrum.
    #[serde(default)]
    pub k_peak: Option<f64>,
    /// Energy of the isotropic field.
    #[serde(default)]
    pub energy: Option<f64>,
    /// `Re_lambda` of the isotropic field.
    #[serde(default)]
    pub re_lambda: Option<f64>,
    /// Seed of the isotropic field.
    #[serde(default)]
    pub seed: Option<u64>,
}

/// A whole configuration file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Grid points per direction.
    pub n: usize,
    /// Kinematic viscosity.
    pub nu: f64,
    /// Allow `nu = 0`.
    #[serde(default)]
    pub inviscid: bool,
    /// Dealiasing rule.
    #[serde(default)]
    pub dealias: Dealias,
    /// End time.
    pub t_end: f64,
    /// Fixed time step.
    #[serde(default)]
    pub dt: Option<f64>,
    /// CFL number for an adaptive step (`dt = cfl * dx / max(|u|+|v|+|w|)`).
    #[serde(default)]
    pub cfl: Option<f64>,
    /// Largest adaptive step.
    #[serde(default)]
    pub dt_max: Option<f64>,
    /// Simulation time between rows of energy.csv (default: every step); the key of
    /// `vortex run`'s `[output]` for the same interval.
    #[serde(default)]
    pub diagnostics_interval: Option<f64>,
    /// Times at which spectra are written.
    #[serde(default)]
    pub spectrum_times: Vec<f64>,
    /// Times at which velocity fields are written.
    #[serde(default)]
    pub field_times: Vec<f64>,
    /// Field formats: "npy" and/or "vtk".
    #[serde(default = "default_formats")]
    pub field_formats: Vec<String>,
    /// Also write vorticity fields.
    #[serde(default)]
    pub vorticity: bool,
    /// Simulation time between checkpoints (as `vortex run`'s `output.checkpoint_interval`).
    #[serde(default)]
    pub checkpoint_interval: Option<f64>,
    /// Wall-clock minutes between checkpoints besides `checkpoint_interval` (default 30; 0: off).
    #[serde(default = "default_wall_minutes")]
    pub checkpoint_wall_minutes: f64,
    /// How many checkpoints are kept (`checkpoint.bin` the newest, `checkpoint.bin.1` ...;
    /// default 2).
    #[serde(default = "default_kept")]
    pub checkpoints_kept: usize,
    /// Stop (keeping the last checkpoint that passed) when the energy exceeds this factor
    /// times its initial value (default 2; decaying flows only lose energy).
    #[serde(default = "default_growth")]
    pub energy_growth_limit: f64,
    /// Rayon threads (0 = all).
    #[serde(default)]
    pub threads: usize,
    /// Compute backend.
    #[serde(default)]
    pub backend: Backend,
    /// Per-step stability thresholds.
    #[serde(default)]
    pub health: Health,
    /// Initial condition.
    pub initial: InitialConfig,
}

/// The per-step stability check (`[health]`, the keys of `vortex run`'s): the advective CFL
/// number `dt max(|u|+|v|+|w|) / dx` of every step, a warning above `cfl_warn`, an error
/// above `cfl_limit` (RK4 on the advective eigenvalues is stable to about 2.8).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Health {
    /// Warn (once) above this CFL number.
    pub cfl_warn: f64,
    /// Stop with an error above this CFL number.
    pub cfl_limit: f64,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            cfl_warn: 1.0,
            cfl_limit: 2.5,
        }
    }
}

fn default_wall_minutes() -> f64 {
    30.0
}

fn default_kept() -> usize {
    2
}

fn default_growth() -> f64 {
    2.0
}

fn default_formats() -> Vec<String> {
    vec!["npy".into()]
}

/// Keys of earlier configurations and the keys both solvers use for them now (one vocabulary:
/// `*_interval` is simulation time, `*_every` a number of steps, `[initial] kind`).
pub const RENAMED: &[(&str, &str)] = &[
    ("stats_every", "diagnostics_interval"),
    ("checkpoint_every", "checkpoint_interval"),
    ("initial.type", "initial.kind"),
];

/// Refuses a key of `renamed` (`table.key` or a top-level `key`) present in the TOML `text`,
/// naming the key to use; text that does not parse is left to the full parse.
pub fn refuse_renamed(text: &str, file: &str, renamed: &[(&str, &str)]) -> Result<(), ConfigError> {
    let Ok(table) = text.parse::<toml::Table>() else {
        return Ok(());
    };
    for (old, new) in renamed {
        let present = match old.split_once('.') {
            Some((t, k)) => table
                .get(t)
                .and_then(|v| v.as_table())
                .is_some_and(|t| t.contains_key(k)),
            None => table.contains_key(*old),
        };
        if present {
            return Err(ConfigError::Invalid {
                file: file.to_string(),
                key: old.to_string(),
                msg: format!("not a key (any more): use `{new}` (the same key in both solvers)"),
            });
        }
    }
    Ok(())
}

/// A configuration error naming the file and, where it applies, the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// File name.
        file: String,
        /// Cause.
        source: std::io::Error,
    },
    /// TOML syntax, an unknown or missing key, a wrong type.
    #[error("{file}: {msg}")]
    Parse {
        /// File name.
        file: String,
        /// The parser's message (names the key).
        msg: String,
    },
    /// A value out of range.
    #[error("{file}: key `{key}`: {msg}")]
    Invalid {
        /// File name.
        file: String,
        /// The offending key.
        key: String,
        /// What is wrong.
        msg: String,
    },
}

impl Config {
    /// Read and validate a configuration file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = crate::inputs::read_config(path).map_err(|e| match e {
            crate::durable::DurableError::Os { source, .. } => ConfigError::Read {
                file: file.clone(),
                source,
            },
            e => ConfigError::Parse {
                file: file.clone(),
                msg: e.to_string(),
            },
        })?;
        Self::from_str_named(&text, &file)
    }

    /// Parse and validate TOML text; `file` names it in errors.
    pub fn from_str_named(text: &str, file: &str) -> Result<Config, ConfigError> {
        refuse_renamed(text, file, RENAMED)?;
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            file: file.to_string(),
            msg: e.to_string().trim_end().replace('\n', " | "),
        })?;
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// Check ranges; `file` names the source in errors.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        self.validate_run(file)?;
        self.validate_outputs(file)?;
        self.validate_initial(file)
    }

    /// Grid, viscosity, end time and time step.
    fn validate_run(&self, file: &str) -> Result<(), ConfigError> {
        let bad = invalid(file);
        if self.n < 8 || self.n % 2 != 0 || self.n > 1 << 16 {
            return Err(bad(
                "n",
                format!(
                    "grid size must be even, at least 8 and at most 65536, got {}",
                    self.n
                ),
            ));
        }
        if !self.nu.is_finite() || self.nu < 0.0 {
            return Err(bad(
                "nu",
                format!("viscosity must be >= 0, got {}", self.nu),
            ));
        }
        if self.nu == 0.0 && !self.inviscid {
            return Err(bad(
                "nu",
                "viscosity must be > 0 (set inviscid = true for an Euler run)".into(),
            ));
        }
        if self.nu > MAX_VELOCITY.powi(2) {
            return Err(bad(
                "nu",
                format!(
                    "{:e} is above {:e}: no flow in the box [-pi, pi)^3 has such a viscosity",
                    self.nu,
                    MAX_VELOCITY.powi(2)
                ),
            ));
        }
        if !(self.t_end.is_finite() && self.t_end >= 0.0) {
            return Err(bad("t_end", format!("must be >= 0, got {}", self.t_end)));
        }
        if let Some(why) = excessive_decay(self.nu, self.t_end) {
            // either may be the mistake: both named
            return Err(bad("nu` with `t_end", why));
        }
        match (self.dt, self.cfl) {
            (Some(_), Some(_)) => {
                return Err(bad("cfl", "give either dt or cfl, not both".into()));
            }
            (None, None) => return Err(bad("dt", "give dt (fixed step) or cfl".into())),
            (Some(dt), None) if !(dt.is_finite() && dt > 0.0) => {
                return Err(bad("dt", format!("must be > 0, got {dt}")));
            }
            (Some(dt), None) if self.t_end / dt > MAX_STEPS => {
                return Err(bad(
                    "dt",
                    format!(
                        "t_end / dt = {:.3e} steps, more than {MAX_STEPS:e}: no run takes that \
                         many; check dt and t_end",
                        self.t_end / dt
                    ),
                ));
            }
            (None, Some(c)) if !(c.is_finite() && c > 0.0) => {
                return Err(bad("cfl", format!("must be > 0, got {c}")));
            }
            (None, Some(c)) if c < MIN_CFL => {
                return Err(bad(
                    "cfl",
                    format!(
                        "{c:e} is below {MIN_CFL:e}: steps that far below the stability limit \
                         (about 1) multiply the run time without changing the result"
                    ),
                ));
            }
            (None, Some(c)) if c > 1.0 => {
                log::warn!(
                    "{}",
                    crate::text::compact_numbers(&format!(
                        "{file}: cfl = {c} exceeds about 0.9, the RK4 stability limit of \
                         spectral advection; the run may blow up"
                    ))
                );
            }
            _ => {}
        }
        if let Some(d) = self.dt_max {
            if !(d.is_finite() && d > 0.0) {
                return Err(bad(
                    "dt_max",
                    format!("must be > 0 and finite (leave it out for no limit), got {d}"),
                ));
            }
            // every step is at most dt_max: the rule of dt for the fewest steps there can be
            if self.t_end / d > MAX_STEPS {
                return Err(bad(
                    "dt_max",
                    format!(
                        "t_end / dt_max = {:.3e} steps at least (no step is longer than \
                         dt_max), more than {MAX_STEPS:e}: no run takes that many; check dt_max \
                         and t_end",
                        self.t_end / d
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Output intervals, health limits, checkpoints and field formats.
    fn validate_outputs(&self, file: &str) -> Result<(), ConfigError> {
        let bad = invalid(file);
        for (key, v) in [
            ("diagnostics_interval", self.diagnostics_interval),
            ("checkpoint_interval", self.checkpoint_interval),
        ] {
            if let Some(x) = v {
                if !(x.is_finite() && x > 0.0) {
                    return Err(bad(key, format!("must be > 0, got {x}")));
                }
            }
        }
        let h = &self.health;
        if !(h.cfl_warn > 0.0 && h.cfl_limit >= h.cfl_warn && h.cfl_limit.is_finite()) {
            // the key whose value is wrong on its own, else the limit below the warning
            let key = if !(h.cfl_warn > 0.0 && h.cfl_warn.is_finite()) {
                "health.cfl_warn"
            } else {
                "health.cfl_limit"
            };
            return Err(bad(
                key,
                format!(
                    "need 0 < cfl_warn <= cfl_limit, got {} and {}",
                    h.cfl_warn, h.cfl_limit
                ),
            ));
        }
        if !(self.checkpoint_wall_minutes.is_finite() && self.checkpoint_wall_minutes >= 0.0) {
            return Err(bad(
                "checkpoint_wall_minutes",
                format!("must be >= 0, got {}", self.checkpoint_wall_minutes),
            ));
        }
        if !(1..=crate::durable::MAX_KEPT).contains(&self.checkpoints_kept) {
            return Err(bad(
                "checkpoints_kept",
                format!(
                    "must lie in 1..={} (each kept checkpoint is a whole copy of the state), \
                     got {}",
                    crate::durable::MAX_KEPT,
                    self.checkpoints_kept
                ),
            ));
        }
        if self.energy_growth_limit.is_nan() || self.energy_growth_limit <= 1.0 {
            return Err(bad(
                "energy_growth_limit",
                format!("must be > 1, got {}", self.energy_growth_limit),
            ));
        }
        for (key, times) in [
            ("spectrum_times", &self.spectrum_times),
            ("field_times", &self.field_times),
        ] {
            if let Some(&x) = times.iter().find(|&&x| !(x.is_finite() && x >= 0.0)) {
                return Err(bad(
                    key,
                    format!("time {x} is not a time of the run (finite, >= 0): it would never be written"),
                ));
            }
            // a later leg (a restart with a larger t_end) writes them: said, not refused
            if let Some(&x) = times.iter().find(|&&x| x > self.t_end * (1.0 + 1e-9)) {
                log::warn!(
                    "{file}: {key}: time {x} is after t_end = {}: not written by this run (a \
                     restart with a later t_end writes it)",
                    self.t_end
                );
            }
        }
        // two times whose files would share a name: the later one replaces the earlier
        for (key, times, name) in [
            (
                "spectrum_times",
                &self.spectrum_times,
                crate::file_names::spectrum_file_name as fn(f64) -> String,
            ),
            ("field_times", &self.field_times, |t| {
                format!("velocity_{}.npy", crate::file_names::field_time_tag(t))
            }),
        ] {
            if let Some((a, b, f)) = colliding_names(times, name) {
                return Err(bad(
                    key,
                    format!(
                        "times {a} and {b} would both be written to {f} (file names keep 4 \
                         decimals of the time): the second would replace the first; give times \
                         at least 1e-4 apart"
                    ),
                ));
            }
        }
        // the steps land on every output time: an interval below the step would shorten every
        // step to it (and multiply the run time) instead of writing at each step
        if let Some(dt) = self.dt.or(self.dt_max) {
            for (key, v) in [
                ("diagnostics_interval", self.diagnostics_interval),
                ("checkpoint_interval", self.checkpoint_interval),
            ] {
                if let Some(x) = v.filter(|&x| x < dt * (1.0 - 1e-9)) {
                    return Err(bad(
                        key,
                        format!(
                            "{x} is shorter than the time step {dt}: every step would be \
                             shortened to it; give an interval of at least dt (or leave \
                             diagnostics_interval out for a row every step)"
                        ),
                    ));
                }
            }
        }
        for f in &self.field_formats {
            if f != "npy" && f != "vtk" {
                return Err(bad(
                    "field_formats",
                    format!("unknown format {f:?} (expected \"npy\" or \"vtk\")"),
                ));
            }
        }
        Ok(())
    }

    /// The keys of the initial field that its kind needs, and no others.
    fn validate_initial(&self, file: &str) -> Result<(), ConfigError> {
        let bad = invalid(file);
        let ini = &self.initial;
        match ini.kind {
            InitialKind::TaylorGreen | InitialKind::TaylorGreen2d => {
                if let Some(a) = ini.amplitude {
                    if !(a.abs() >= MIN_VELOCITY && a.abs() <= MAX_VELOCITY) {
                        return Err(bad(
                            "initial.amplitude",
                            format!(
                                "must be finite and between {MIN_VELOCITY:e} and \
                                 {MAX_VELOCITY:e} in magnitude (a field of zero or underflowing \
                                 energy has no scales, and its statistics are 0/0), got {a}"
                            ),
                        ));
                    }
                }
                for (key, present) in [
                    ("initial.k_peak", ini.k_peak.is_some()),
                    ("initial.energy", ini.energy.is_some()),
                    ("initial.re_lambda", ini.re_lambda.is_some()),
                    ("initial.seed", ini.seed.is_some()),
                ] {
                    if present {
                        return Err(bad(key, "only for kind = \"isotropic\"".into()));
                    }
                }
            }
            InitialKind::Isotropic => {
                if ini.amplitude.is_some() {
                    return Err(bad(
                        "initial.amplitude",
                        "only for the Taylor-Green fields; use energy or re_lambda".into(),
                    ));
                }
                match ini.k_peak {
                    Some(k) => {
                        if let Some(why) = crate::initial::k_peak_error(k, self.n) {
                            return Err(bad("initial.k_peak", why));
                        }
                    }
                    None => {
                        return Err(bad(
                            "initial.k_peak",
                            "missing (required for isotropic)".into(),
                        ))
                    }
                }
                if ini.seed.is_none() {
                    return Err(bad(
                        "initial.seed",
                        "missing (required for isotropic)".into(),
                    ));
                }
                match (ini.energy, ini.re_lambda) {
                    (Some(_), Some(_)) => {
                        return Err(bad(
                            "initial.re_lambda",
                            "give energy or re_lambda, not both".into(),
                        ))
                    }
                    (None, None) => {
                        return Err(bad(
                            "initial.energy",
                            "missing: give energy or re_lambda".into(),
                        ))
                    }
                    (Some(e), None)
                        if !(e >= MIN_VELOCITY.powi(2) && e <= MAX_VELOCITY.powi(2)) =>
                    {
                        return Err(bad(
                            "initial.energy",
                            format!(
                                "must lie between {:e} and {:e} (below, the field's statistics \
                                 underflow), got {e}",
                                MIN_VELOCITY.powi(2),
                                MAX_VELOCITY.powi(2)
                            ),
                        ))
                    }
                    (None, Some(r)) if !(r > 0.0 && r.is_finite()) || self.nu == 0.0 => {
                        return Err(bad(
                            "initial.re_lambda",
                            "needs re_lambda > 0 and nu > 0".into(),
                        ))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// The largest velocity scale a configuration may give (amplitude; energy up to its square):
/// far beyond any flow in the box, small enough that squares and products stay finite.
pub const MAX_VELOCITY: f64 = 1e6;

/// The smallest velocity scale (amplitude; energy down to its square): the statistics take
/// up to fourth powers of the velocity gradients, which must stay far from underflow.
pub const MIN_VELOCITY: f64 = 1e-6;

/// The smallest CFL number of an adaptive step.
pub const MIN_CFL: f64 = 1e-6;

/// The most steps of a fixed-step run.
pub const MAX_STEPS: f64 = 1e12;

/// The most the slowest mode of the box (`|k| = 1`) may decay over a run,
/// `exp(-2 nu t_end)`: below it the energy and the statistics underflow.
pub const MIN_DECAY: f64 = 1e-100;

/// Why a run of viscosity `nu` to `t_end` in a periodic box is refused: its slowest mode
/// (`|k| = 1`) decays below [`MIN_DECAY`]; `None` where it does not.
pub fn excessive_decay(nu: f64, t_end: f64) -> Option<String> {
    let decay = (-2.0 * nu * t_end).exp();
    (decay < MIN_DECAY).then(|| {
        format!(
            "nu = {nu:e} with t_end = {t_end}: the slowest mode of the box (|k| = 1) decays by \
             exp(-2 nu t_end) = {decay:.1e}, below {MIN_DECAY:e}: the energy underflows long \
             before t_end; lower nu or t_end"
        )
    })
}

/// The smallest initial energy a run accepts (whatever set it: amplitude, energy or
/// `re_lambda` with `nu`): below it the statistics underflow.
pub const MIN_ENERGY: f64 = 1e-24;

impl Config {
    /// Bytes of host memory a run of this configuration holds (the solver's four spectral
    /// fields and the padded products of the dealiasing rule, the initial field, the factors),
    /// for the check before allocating.
    pub fn memory_bytes(&self) -> f64 {
        let points = (self.n as f64).powi(3);
        let pad = match self.dealias {
            Dealias::ThreeHalves => 3.375,
            Dealias::TwoThirds => 1.0,
        };
        // 4 spectral fields x 3 components x n^3/2 complex (96 B), 2 factors (8 B), the
        // physical field (24 B); padded: 6 products + 1 complex plane (56 B per padded point)
        points * (128.0 + 56.0 * pad)
    }
}

/// Two distinct times of `times` (not the same time written twice) that `name` maps to one
/// file name, with that name.
fn colliding_names(times: &[f64], name: fn(f64) -> String) -> Option<(f64, f64, String)> {
    let mut named: Vec<(String, f64)> = times.iter().map(|&t| (name(t), t)).collect();
    named.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    named.windows(2).find_map(|w| {
        let same_time = (w[0].1 - w[1].1).abs() <= 1e-9 * w[0].1.abs().max(1.0);
        (w[0].0 == w[1].0 && !same_time).then(|| (w[0].1, w[1].1, w[0].0.clone()))
    })
}

/// The error maker of a configuration file's checks: `(key, message)` -> [`ConfigError::Invalid`].
fn invalid(file: &str) -> impl Fn(&str, String) -> ConfigError + '_ {
    move |key, msg| ConfigError::Invalid {
        file: file.to_string(),
        key: key.to_string(),
        msg,
    }
}
