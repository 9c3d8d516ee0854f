//! `vortex config --defaults [vortex|spectral]`: prints a complete, commented configuration of
//! either solver with every key at its default (optional keys commented out). The tests check
//! that each parses and that no key of the schema is missing.

use anyhow::Result;
use clap::{Args, ValueEnum};

/// Which solver's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Solver {
    /// `vortex run` (the vortex particle method).
    Vortex,
    /// `vortex spectral` (the pseudo-spectral reference).
    Spectral,
}

#[derive(Args, Debug)]
pub struct ConfigArgs {
    /// Print the complete configuration with its defaults, commented.
    #[arg(long)]
    pub defaults: bool,
    /// Which solver.
    #[arg(value_enum, default_value = "vortex")]
    pub solver: Solver,
}

/// Every key of `vortex run`; the values are the defaults except where a key is required.
pub const VORTEX: &str = r#"# vortex run CONFIG.toml: every key, with its default (see docs/CONVENTIONS.md for units).
nu = 0.01              # kinematic viscosity (required; 0: inviscid)
dt = 0.05              # time step (required)
t_end = 2.0            # final time (required; steps = round(t_end / dt))

[domain]
periodic = true        # periodic box [-L/2, L/2)^3 (default false: free space; true here for taylor-green)
box_length = 6.283185307179586  # L
image_levels = 4       # levels of periodic images above the root

[evaluation]
method = "fmm"         # direct | treecode | fmm | ppm
order = 8              # expansion order p
theta = 0.55           # opening angle of the acceptance criterion
leaf_size = 64         # largest number of particles in a leaf
core_cutoff = 4.0      # far interactions only beyond this many core radii (core 4: at least 4.54, core 6: 4.9)
core = 2               # order of the vortex core: 2 (Gaussian) | 4 | 6 (smoothing error O(sigma^core); above 2: no core
                       # spreading, the viscous term by the lattice's heat kernel at each re-interpolation; host state only)
backend = "auto"       # auto | cpu | cuda (may change at a restart)
device = 0             # GPU index for cuda
grid = "adaptive"      # adaptive | uniform (GPU uniform grid) | auto (uniform where it runs)
state = "auto"         # auto | host | device (particles kept on the GPU: uniform grid, periodic, one rank)
exchange = "auto"      # auto | nccl | pinned (how the GPUs of a multi-GPU run exchange the slab FFT's spectra)

[initial]
kind = "taylor-green"  # taylor-green | taylor-green-2d | isotropic | ring | two-rings | blob (required)
n = 16                 # lattice points per direction (periodic kinds)
overlap = 1.0          # sigma0 / h
# k_peak = 4.0         # isotropic: peak wavenumber
# re_lambda = 50.0     # isotropic: Re_lambda (or energy)
# energy = 0.5         # isotropic: kinetic energy (or re_lambda)
# seed = 1             # isotropic: random seed
# radius = 1.0         # rings: ring radius R
# circulation = 1.0    # rings: circulation Gamma
# core = 0.1           # rings: Gaussian core s
# spacing = 0.05       # free space: lattice spacing h
# center = [0.0, 0.0, 0.0]  # rings / blob: centre
# separation = 1.0     # two rings: axial distance
# pair = "leapfrog"    # two rings: leapfrog | collide
# sigma = 0.2          # blob: core radius
# strength = [0.0, 0.0, 1.0]  # blob: strength vector

[reinterpolation]
ratio = 1.2            # re-interpolate when sigma / sigma0 exceeds this (0: never by ratio)
every = 0              # ... or every this many steps (0: never by count)
strain = 0.5           # ... or when (t - t_reset) max|alpha|/h^3 exceeds this (0: off)
solver = "direct"      # direct | cg
tolerance = 1e-8       # relative residual of the solve
max_iterations = 2000  # CG iterations at most
cutoff = 6.0           # truncation of the Gaussian sums, in core radii
drop = 1e-6            # free space: drop strengths below drop * max |alpha|
# n = 16               # periodic lattice points (default: initial.n)
# spacing = 0.05       # free-space lattice spacing (default: initial.spacing)
filter = { kind = "exponential", strength = 36.0, order = 36.0 }  # periodic: the lattice solve
#   interpolates the vorticity filtered by exp(-strength (|k|/k_N)^order) per axis
#   (docs/CONVENTIONS.md); kind "none": exact interpolation
history = "restart"    # restart: Heun (two evaluations) after a re-interpolation; carry: the
#   Adams-Bashforth history carried to the fresh particles (one evaluation per step)

[output]
diagnostics_every = 10 # a row of diagnostics.csv every this many steps
# diagnostics_interval = 0.1  # ... and/or every this much simulation time (first step at or after)
# grid = 16            # grid points per direction for energy and spectra (default: initial.n)
# grid_velocity = "fmm" # fmm | vorticity (default: fmm on the host state, vorticity on the device)
spectra = true         # spectrum with each diagnostics row (periodic)
snapshot_every = 0     # particle snapshots every this many steps (0: none; then also the last)
snapshot_initial = false  # also one of the initial state (step 0): set true to get it
# snapshot_interval = 1.0  # ... and/or every this much simulation time
snapshot_format = "vtp"  # vtp (binary XML VTK + particles.pvd with the times) | vtk (legacy ASCII)
checkpoint_every = 0   # checkpoints every this many steps (0: at the end and by wall time)
# checkpoint_interval = 1.0  # ... and/or every this much simulation time
checkpoint_wall_minutes = 30.0  # also a checkpoint this often by wall time (0: off)
checkpoints_kept = 2   # checkpoint.bin, checkpoint.bin.1, ... (several ranks: checkpoint.manifest, ...)
energy_growth_limit = 10.0  # stop when the energy exceeds this times its initial value
energy_rise_warn = 0.001    # decaying flow: warn when E rises above its lowest value by this
energy_rise_limit = 0.02    # ... and stop with an error above this
progress = true        # progress bar on stderr
plots = true           # energy.png and spectra.png at the end

[health]
cfl_warn = 1.0         # warn above this advective CFL dt * max|u| / h
cfl_limit = 4.0        # stop above this CFL
gradient_warn = 0.5    # warn above this dt * max|s|/|alpha|
gradient_limit = 2.0   # stop above this
"#;

/// Every key of `vortex spectral`.
pub const SPECTRAL: &str = r#"# vortex spectral CONFIG.toml: every key, with its default (see docs/CONVENTIONS.md for units).
n = 64                 # grid points per direction (required, even, >= 8)
nu = 0.01              # kinematic viscosity (required)
inviscid = false       # allow nu = 0
dealias = "three-halves"  # three-halves | two-thirds
t_end = 10.0           # end time (required)
dt = 0.01              # fixed step (or cfl)
# cfl = 0.5            # adaptive step dt = cfl * dx / max(|u|+|v|+|w|) (instead of dt)
# dt_max = 0.05        # largest adaptive step
# diagnostics_interval = 0.1  # time between rows of energy.csv (default: every step)
spectrum_times = []    # times at which spectra are written
field_times = []       # times at which velocity fields are written
field_formats = ["npy"]  # npy and/or vtk
vorticity = false      # also write vorticity fields
# checkpoint_interval = 1.0  # time between checkpoints (default: at the end and by wall time)
checkpoint_wall_minutes = 30.0  # also a checkpoint this often by wall time (0: off)
checkpoints_kept = 2   # checkpoint.bin, checkpoint.bin.1, ...
energy_growth_limit = 2.0  # stop when the energy exceeds this times its initial value
threads = 0            # rayon threads (0: all)
backend = "auto"       # auto | cpu | cuda

[health]
cfl_warn = 1.0         # warn above the advective CFL dt * max(|u|+|v|+|w|) / dx
cfl_limit = 2.5        # stop above this CFL (RK4 is stable to about 2.8)

[initial]
kind = "taylor-green"  # taylor-green | taylor-green-2d | isotropic
# amplitude = 1.0      # Taylor-Green amplitude
# k_peak = 4.0         # isotropic: peak wavenumber
# energy = 0.5         # isotropic: energy (or re_lambda)
# re_lambda = 50.0     # isotropic: Re_lambda (or energy)
# seed = 1             # isotropic: random seed
"#;

pub fn run(args: &ConfigArgs) -> Result<()> {
    if !args.defaults {
        anyhow::bail!(
            "nothing to do: `vortex config --defaults [vortex|spectral]` prints a configuration"
        );
    }
    let text = match args.solver {
        Solver::Vortex => VORTEX,
        Solver::Spectral => SPECTRAL,
    };
    crate::console::out(text.trim_end_matches('\n'));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of `text` with the leading `# ` of optional keys removed, flattened.
    fn all_keys(text: &str) -> std::collections::BTreeMap<String, String> {
        let uncommented: String = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.contains(" = ") => rest,
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        vortex_spectral::durable::flatten_toml(&uncommented).unwrap()
    }

    /// The template parses, and every key of the schema's defaults (a configuration with only
    /// the required keys, serialized back) is in it with the same value.
    fn check(template: &str, minimal_serialized: String) {
        let t = all_keys(template);
        let d = vortex_spectral::durable::flatten_toml(&minimal_serialized).unwrap();
        for (k, v) in &d {
            let got = t
                .get(k)
                .unwrap_or_else(|| panic!("key {k} missing in the template"));
            let same = got == v
                || matches!((got.parse::<f64>(), v.parse::<f64>()), (Ok(a), Ok(b)) if a == b);
            assert!(same, "{k}: template {got}, default {v}");
        }
    }

    #[test]
    fn vortex_template_parses_and_holds_every_default() {
        vortex_method::Config::from_str_named(VORTEX, "defaults").unwrap();
        let min = "nu = 0.01\ndt = 0.05\nt_end = 2.0\n[domain]\nperiodic = true\n\
                   [initial]\nkind = \"taylor-green\"\nn = 16\n";
        let c = vortex_method::Config::from_str_named(min, "minimal").unwrap();
        check(VORTEX, vortex_spectral::durable::to_toml(&c).unwrap());
    }

    #[test]
    fn spectral_template_parses_and_holds_every_default() {
        vortex_spectral::Config::from_str_named(SPECTRAL, "defaults").unwrap();
        let min =
            "n = 64\nnu = 0.01\nt_end = 10.0\ndt = 0.01\n[initial]\nkind = \"taylor-green\"\n";
        let c = vortex_spectral::Config::from_str_named(min, "minimal").unwrap();
        check(SPECTRAL, vortex_spectral::durable::to_toml(&c).unwrap());
    }
}
