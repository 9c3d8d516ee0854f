//! The checks of a configuration's values, one section of the file after the other
//! ([`Config::validate`]): each refusal names the file, the key and the value; the physical limits
//! they use ([`MIN_MAGNITUDE`], [`MAX_MAGNITUDE`], [`MIN_LENGTH`], ...).

use super::*;

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
pub const MIN_DECAY: f64 = vortex_spectral::config::MIN_DECAY;

/// `v > 0` and finite, or the error naming `key`.
pub(super) fn positive(file: &str, key: &str, v: f64) -> Result<()> {
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
pub(super) fn length(file: &str, key: &str, v: f64) -> Result<()> {
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
pub(super) fn bounded_vector(file: &str, key: &str, v: &[f64]) -> Result<()> {
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

pub(super) fn bad(file: &str, key: &str, msg: impl Into<String>) -> Error {
    Error::Config {
        file: file.to_string(),
        key: key.to_string(),
        msg: msg.into(),
    }
}

impl Config {
    /// Time stepping, evaluation and domain.
    pub(super) fn validate_run(&self, file: &str) -> Result<()> {
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
        vortex_fmm::check_order(e.order, vortex_fmm::MAX_ORDER).map_err(|_| {
            bad(
                file,
                "evaluation.order",
                format!("must lie in 1..={}, got {}", vortex_fmm::MAX_ORDER, e.order),
            )
        })?;
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
        vortex_fmm::check_cutoff(e.core_cutoff, 0.0)
            .map_err(|why| bad(file, "evaluation.core_cutoff", why))?;
        self.validate_core(file)?;
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

    /// `evaluation.core`: what a core of order above 2 needs of the rest of the run (each
    /// refusal names the key that conflicts and the reason).
    fn validate_core(&self, file: &str) -> Result<()> {
        let core = self.evaluation.core;
        if core == vortex_fmm::kernel::CoreOrder::Second {
            return Ok(());
        }
        let r = &self.reinterpolation;
        if self.evaluation.state == super::StatePlace::Device {
            return Err(bad(
                file,
                "evaluation.core",
                format!(
                    "{core}: the GPU-resident step (evaluation.state = \"device\") has the \
                     Gaussian's lattice sums and lattice solve only; use state = \"host\" or \
                     \"auto\" (the host state with the GPU evaluations) or core = 2"
                ),
            ));
        }
        if !self.domain.periodic && self.nu > 0.0 {
            return Err(bad(
                file,
                "evaluation.core",
                format!(
                    "{core} with nu = {:e} in free space: core spreading solves the heat \
                     equation only for the Gaussian, and the heat kernel that carries the \
                     viscous term of the cores of order 4 and 6 acts on the periodic lattice; \
                     use core = 2, nu = 0 or a periodic box",
                    self.nu
                ),
            ));
        }
        if !self.domain.periodic && r.solver == crate::reinterpolation::RbfSolver::Direct {
            return Err(bad(
                file,
                "reinterpolation.solver",
                format!(
                    "\"direct\" factorises the Gaussian's Kronecker-product matrix; the free-space \
                     lattice matrix of the core of order {core} is a sum of such products: use \
                     solver = \"cg\""
                ),
            ));
        }
        if r.history == crate::reinterpolation::history::History::Carry {
            return Err(bad(
                file,
                "reinterpolation.history",
                format!(
                    "\"carry\" is derived for core spreading (the rates with the cores of their \
                     evaluation); the core of order {core} diffuses by the lattice's heat kernel: \
                     use history = \"restart\""
                ),
            ));
        }
        if !r.sums.is_direct() {
            return Err(bad(
                file,
                "reinterpolation.sums",
                format!(
                    "spreading deconvolves the Gaussian's transform; the core of order {core} \
                     needs sums = {{ kind = \"direct\" }}"
                ),
            ));
        }
        if self.nu > 0.0 && r.ratio == 0.0 && r.every == 0 && r.strain == 0.0 {
            return Err(bad(
                file,
                "evaluation.core",
                format!(
                    "{core} with nu > 0 diffuses at the re-interpolations (the lattice's heat \
                     kernel), and reinterpolation.ratio, .every and .strain are all off: set one"
                ),
            ));
        }
        Ok(())
    }

    /// The `[reinterpolation]` section.
    pub(super) fn validate_reinterpolation(&self, file: &str) -> Result<()> {
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
        vortex_fmm::check_cutoff(r.cutoff, 3.0)
            .map_err(|why| bad(file, "reinterpolation.cutoff", why))?;
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
    pub(super) fn validate_initial(&self, file: &str) -> Result<()> {
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
        self.validate_initial_magnitudes(file)?;
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
                    let k = need("k_peak", i.k_peak)?;
                    // the spectral solver's rule: the peak on the lattice's wavenumbers
                    if let Some(why) = vortex_spectral::initial::k_peak_error(k, n) {
                        return Err(bad(file, "initial.k_peak", why));
                    }
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

    /// The vectors and magnitudes of the initial condition: every component within
    /// [`MAX_MAGNITUDE`], the circulation, energy and strength not below [`MIN_MAGNITUDE`].
    fn validate_initial_magnitudes(&self, file: &str) -> Result<()> {
        let i = &self.initial;
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
        Ok(())
    }

    /// The viscosity against the periodic box: the cores must stay narrower than a quarter of
    /// the box until a re-interpolation resets them (core spreading, `sigma^2 = sigma0^2 +
    /// 2 nu t` after the last reset, core paper Eq. 11), and the slowest mode of the box may
    /// not decay below [`MIN_DECAY`] over the run (its energy would underflow).
    pub(super) fn validate_viscosity(&self, file: &str) -> Result<()> {
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
        if let Some(why) = vortex_spectral::config::excessive_decay(self.nu, self.t_end) {
            return Err(bad(file, "nu", why));
        }
        Ok(())
    }

    /// The periodic lattice of the re-interpolation (points, spacing against the box) and the
    /// diagnostics grid.
    pub(super) fn validate_lattice(&self, file: &str) -> Result<()> {
        let (i, r) = (&self.initial, &self.reinterpolation);
        if self.domain.periodic {
            let n = self
                .lattice_n()
                .ok_or_else(|| bad(file, "reinterpolation.n", "the periodic lattice needs n"))?;
            // the rule of initial.n: the lattice's FFTs (solve, diagnostics) need even sizes
            if n < 4 || n % 2 != 0 {
                return Err(bad(
                    file,
                    "reinterpolation.n",
                    format!("must be even and >= 4 (the lattice's FFTs), got {n}"),
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
    pub(super) fn validate_output(&self, file: &str) -> Result<()> {
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
        for (warn_key, key, warn, limit) in [
            (
                "health.cfl_warn",
                "health.cfl_limit",
                h.cfl_warn,
                h.cfl_limit,
            ),
            (
                "health.gradient_warn",
                "health.gradient_limit",
                h.gradient_warn,
                h.gradient_limit,
            ),
        ] {
            if !(warn > 0.0 && warn <= limit && limit.is_finite()) {
                // the key whose value is wrong on its own, else the limit below the warning
                let key = if !(warn > 0.0 && warn.is_finite()) {
                    warn_key
                } else {
                    key
                };
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

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn isotropic(n: usize, k_peak: f64) -> String {
        format!(
            "nu = 0.01\ndt = 0.01\nt_end = 0.1\n[domain]\nperiodic = true\n[initial]\n\
             kind = \"isotropic\"\nn = {n}\nk_peak = {k_peak:?}\nre_lambda = 20.0\nseed = 1\n"
        )
    }

    /// The peak of the isotropic spectrum must lie on the lattice's wavenumbers: refused by
    /// key beyond n/2 and at zero, accepted below n/2 (the spectral solver's rule).
    #[test]
    fn isotropic_peak_beyond_the_lattice_is_refused_by_key() {
        for (n, k) in [(8, 4.0), (8, 1e9), (16, 0.0), (16, -1.0)] {
            let e = Config::from_str_named(&isotropic(n, k), "iso.toml")
                .expect_err(&format!("n = {n}, k_peak = {k}"))
                .to_string();
            assert!(
                e.contains("initial.k_peak") && e.contains("iso.toml"),
                "{e}"
            );
        }
        for (n, k) in [(8, 3.0), (16, 4.0)] {
            Config::from_str_named(&isotropic(n, k), "iso.toml")
                .unwrap_or_else(|e| panic!("n = {n}, k_peak = {k}: {e}"));
        }
    }

    /// `evaluation.core`: 2, 4, 6 parse into the evaluation (with the core's least far-field
    /// gap) and the re-interpolation; any other value, and a core above 2 where a part of the
    /// run cannot take it, is refused naming the file, the key and the value.
    #[test]
    fn the_core_is_a_checked_key() {
        use vortex_fmm::kernel::CoreOrder;
        let base = isotropic(8, 3.0);
        let with = |extra: &str| format!("{base}[evaluation]\n{extra}\n");
        for (v, core) in [
            (2, CoreOrder::Second),
            (4, CoreOrder::Fourth),
            (6, CoreOrder::Sixth),
        ] {
            let c = Config::from_str_named(&with(&format!("core = {v}")), "c.toml").unwrap();
            assert_eq!(c.evaluation.core, core);
            let p = c.eval_params();
            assert_eq!(p.core, core);
            assert!(p.core_cutoff >= core.min_cutoff() && p.validate().is_ok());
            assert_eq!(c.rbf_settings().core, core);
            // written into the configuration as run only when not the Gaussian
            let text = toml::to_string(&c).unwrap();
            assert_eq!(text.contains("core = "), v != 2, "{text}");
            let back = Config::from_str_named(&text, "back.toml").unwrap();
            assert_eq!(back.evaluation.core, core);
        }
        for v in ["3", "0", "8", "-2", "\"4\""] {
            let e = Config::from_str_named(&with(&format!("core = {v}")), "c.toml")
                .expect_err(v)
                .to_string();
            assert!(e.contains("c.toml") && e.contains("core"), "{v}: {e}");
        }
        let e = Config::from_str_named(&with("core = 3"), "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("evaluation.core") && e.contains('3'), "{e}");
        for (extra, key) in [
            ("core = 4\nstate = \"device\"", "evaluation.core"),
            (
                "core = 6\n[reinterpolation]\nhistory = \"carry\"",
                "reinterpolation.history",
            ),
            (
                "core = 4\n[reinterpolation]\nsums = { kind = \"spread\", tolerance = 1e-6 }",
                "reinterpolation.sums",
            ),
        ] {
            let e = Config::from_str_named(&with(extra), "c.toml")
                .expect_err(extra)
                .to_string();
            assert!(e.contains(key) && e.contains("c.toml"), "{extra}: {e}");
        }
        // free space: the viscous heat kernel needs the periodic lattice, the solve CG
        let ring = "nu = 0.0\ndt = 0.01\nt_end = 0.1\n[initial]\nkind = \"ring\"\nradius = 1.0\n\
                    circulation = 1.0\ncore = 0.2\nspacing = 0.1\n[evaluation]\ncore = 4\n";
        let e = Config::from_str_named(ring, "r.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("reinterpolation.solver"), "{e}");
        let cg = format!("{ring}[reinterpolation]\nsolver = \"cg\"\n");
        Config::from_str_named(&cg, "r.toml").unwrap();
        let viscous = cg.replace("nu = 0.0", "nu = 0.01");
        let e = Config::from_str_named(&viscous, "r.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("evaluation.core") && e.contains("free space"),
            "{e}"
        );
    }
}
