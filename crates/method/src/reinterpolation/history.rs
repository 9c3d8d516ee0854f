//! The Adams-Bashforth history carried through a re-interpolation, so that the step after it is
//! an AB2 step (one evaluation of the right-hand side) instead of a Heun restart (two).
//!
//! # What AB2 needs after a re-interpolation
//!
//! AB2 (core paper Sec. 2) advances `y_{n+2} = y_{n+1} + dt (3/2 f_{n+1} - 1/2 f_n)`, where
//! `f_n` is the rate of the *same* particle one step earlier. A re-interpolation after the update
//! to `t_{n+1}` replaces the old particles `p` (positions `x_p`, strengths `alpha_p`, cores
//! `sigma_p`) by fresh ones `j` on the lattice points `y_j` with the strengths
//!
//! `beta = L_{sigma}[x] alpha`,  `L_c[x] v = A^{-1} G_c[x] v`,
//!
//! `G_c[x]_{ip} = zeta_{c_p}(y_i - x_p)` (the Gaussian sums, core paper Eq. 3-4) and
//! `A_{ij} = zeta_{sigma0}(y_i - y_j)` (the lattice system of [`super::solve`]). A fresh particle
//! is a material element of the flow at `t_{n+1}`; its `f_n` is the rate of that element at
//! `t_n`. An error `e` in the history value moves the next step by `dt e / 2` (the weight of
//! `f_n` in AB2); with a re-interpolation every step those errors add up over `T / dt` steps to
//! `T e / 2`, so second order in time needs `e = O(dt^2)` (the starting-value condition of
//! linear multistep methods, Hairer, Norsett & Wanner, *Solving Ordinary Differential
//! Equations I*, 2nd ed., Springer 1993, Sec. III.2 and III.4). A Heun step from the fresh
//! particles needs no history (local error `O(dt^3)`) at the price of a second evaluation.
//!
//! # The construction
//!
//! The old particles *are* the material elements: old particle `p` sits at `x_p` at `t_{n+1}`
//! and its history `f_n(p) = (u_p, s_p)` (velocity and stretching rate, evaluated at `t_n`) is
//! the rate of the element that is now at `x_p`. So the history of the fresh particles is a
//! transfer *at the fixed time `t_{n+1}`* of a field known at the old particles to the lattice
//! points; no departure point is needed, the old positions already are the images of the
//! departure points. Both rates go through the lattice operator of the strengths:
//!
//! * **strength rates** `s` (rates of blob strengths, vorticity times volume) transform like the
//!   strengths: `s~ = L_{sigma(t_n)}[x] s`, with the cores `sigma_p(t_n) = (sigma0_p^2 + 2 nu
//!   (t_n - t_reset))^{1/2}` of the evaluation that gave `s` (core paper Eq. 11). Then
//!   `sum_j s~_j zeta_{sigma0}(y_i - y_j)` equals the stretching-rate field of `t_n` carried by
//!   the material elements, `sum_p s_p zeta_{sigma_p(t_n)}(y_i - x_p)`, at every lattice point,
//!   as `beta` reproduces the vorticity. (The cores of `t_{n+1}` would add a diffusion `nu dt
//!   lap s` to the history, an `e = O(nu dt)` and a first-order global error `nu T dt / 2`.)
//! * **velocities** `u` are point values, not strengths: `u~ = L_{sigma0}[x] u` (Gaussian sums
//!   with the fresh core `sigma0` for every old particle). On the lattice itself (`x_p = y_p`)
//!   `G_{sigma0}[y] = A`, so `L_{sigma0}[y] = I` and the history is returned unchanged; off the
//!   lattice `u~_j` is the Gaussian RBF interpolant through the values `u_p` at `x_p` evaluated
//!   at `y_j` (the interpolation of Barba, Leonard & Allen, Int. J. Numer. Meth. Fluids 47 (2005)
//!   387, the core paper's ref. [30], in the other direction).
//!
//! # Error
//!
//! Both operators reduce to the identity (`nu = 0` or a reset at `t_n`) when the old particles
//! sit on the lattice, so their error is the interpolation error `epsilon` of a smooth field
//! (of the size of the re-interpolation's own error on the vorticity) times the displacement
//! since the last reset, `O(k dt |u|)` after `k` steps (the unit tests below: `4e-3, 5e-4,
//! 7e-5` at `0.4, 0.2, 0.1 h`, a floor of `7e-5` at zero from the spherical truncation of the
//! Gaussian sums against the cube of the lattice matrix, amplified by its conditioning: the
//! transfer needs the default cutoff of 6 core radii, a cutoff of 4 made it fail).
//!
//! * **A re-interpolation every step** (the case of the order test): `e = O(dt epsilon)`. The
//!   re-interpolation's own error then depends on `dt` too (it acts once per step), so against
//!   a fine-`dt` reference neither scheme shows the order of the time stepping; both share that
//!   error and differ only in the history, and the carried history's distance to the restart
//!   falls as `dt^2` (observed orders 1.83 and 1.81 at `dt = 0.1, 0.05, 0.025`, 16^3
//!   Taylor-Green, `crates/method/tests/history.rs`), a forward-Euler step's as `dt` (0.77,
//!   0.90).
//! * **A re-interpolation every `tau`** (the strain criterion): `e = O(tau epsilon)` per
//!   re-interpolation, a global `O(dt epsilon T / 2)`: formally first order with the
//!   coefficient `epsilon`, a fraction `dt |grad u| / 2` of the error each re-interpolation
//!   commits anyway (same 16^3 case, `tau = 0.1`: carry 2.0e-4, 6.6e-5, 2.4e-5 against the
//!   restart's 1.2e-4, 4.2e-5, 1.2e-5 relative to a `dt / 8` reference, at `dt = 0.05, 0.025,
//!   0.0125`). Where the old particles have two evaluations of their own (`k >= 2`), carrying
//!   the increment `f_n - f_{n-1}` through the operator and subtracting it from the fresh
//!   rates would make this `O(dt epsilon)` as well; not done yet.
//!
//! The tempting alternatives are first order: the history `u_n(y_j)` of the *Eulerian* point
//! `y_j` misses the advection, `u_n(y_j) - u_n(X_j(t_n)) = dt (u . grad) u + O(dt^2)`, and the
//! fresh rates `f_{n+1}` themselves (a forward-Euler step) miss `dt df/dt`. With `nu > 0` and a
//! re-interpolation every `tau`, the stretching history differs from the stretching of the
//! fresh particles by the commutator of core spreading and stretching, `O(nu tau)`, a fraction
//! `dt / 2` per re-interpolation of the core-spreading error the method commits anyway.
//!
//! Filter: in a periodic box the lattice solve carries the transfer function of
//! `[reinterpolation] filter` ([`super::filter`]); both rates go through that same filtered
//! operator (host and device alike), so the history is filtered as the strengths are. On the
//! lattice the velocity operator is then `F` instead of the identity, a change confined to the
//! lattice-scale modes the filter damps in the vorticity too.
//!
//! Free space: the lattice and the dropped strengths are those of the vorticity; a fresh
//! particle at the fringe of the old cloud (within the cutoff of its edge) gets a velocity
//! history from a partly covered Gaussian sum, an `O(|u|)` error weighted by a strength near the
//! drop threshold.
//!
//! # Cost
//!
//! Three Gaussian sums (cores `sigma_p(t_{n+1})`, `sigma_p(t_n)`, `sigma0`) and nine lattice
//! solves instead of one and three, and no evaluation of the right-hand side: the restart's
//! second evaluation costs far more than two lattice operators.

use super::spreading::{plan_for, SpreadError, MAX_BINS};
use super::{fresh_particles, lattice_for, solve, Lattice, LatticeSpec, RbfReport, RbfSettings};
use crate::cells::core_sum;
use crate::core_spreading::sigma_at;
use crate::error::{Error, Result};
use crate::particles::Particles;
use crate::rhs::Derivatives;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use vortex_fmm::kernel::CoreOrder;

/// What the step after a re-interpolation uses as its Adams-Bashforth history
/// (`reinterpolation.history`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum History {
    /// The history goes through the lattice operator with the strengths ([`self`]): the next
    /// step is AB2, one evaluation. An option: not yet measured on a GPU.
    Carry,
    /// No history: the next step is a Heun step (two evaluations). The default.
    #[default]
    Restart,
}

/// The rates of the old particles at the previous step, as [`reinterpolate_with_history`]
/// needs them.
#[derive(Clone, Copy, Debug)]
pub struct PreviousRates<'a> {
    /// `f_n` of the old particles (aligned with them).
    pub rates: &'a Derivatives,
    /// Kinematic viscosity of the core spreading.
    pub nu: f64,
    /// `t_n - t_reset`: the time since the last reset at which `rates` were evaluated.
    pub elapsed: f64,
}

/// `L_c[x] v = A^{-1} G_c[x] v`: the lattice strengths (or values) on `lat` of the field
/// carried by the particles at `position` with values `v` and cores `cores` (Gaussian sums
/// truncated at `s.cutoff` core radii, or by spreading with `s.sums` in a periodic box, then
/// the lattice solve with the core `sigma0`).
pub fn lattice_operator(
    lat: &Lattice,
    period: Option<f64>,
    position: &[[f64; 3]],
    v: &[[f64; 3]],
    cores: &[f64],
    sigma0: f64,
    s: &RbfSettings,
) -> Result<(Vec<[f64; 3]>, RbfReport)> {
    let t0 = Instant::now();
    let spread_error = |e: SpreadError| Error::Rbf(format!("reinterpolation.sums: {e}"));
    if s.core != CoreOrder::Second && !s.sums.is_direct() {
        return Err(Error::Rbf(format!(
            "reinterpolation.sums = spread deconvolves the Gaussian's transform; the core of \
             order {} needs sums = {{ kind = \"direct\" }}",
            s.core
        )));
    }
    if let Some(plan) = plan_for(lat, &s.sums, sigma0).map_err(spread_error)? {
        match plan.lattice_strengths(position, v, cores, sigma0, &s.filter) {
            Ok(beta) => {
                let report = RbfReport {
                    lattice_points: lat.len(),
                    kept: lat.len(),
                    seconds: t0.elapsed().as_secs_f64(),
                    ..Default::default()
                };
                return Ok((beta, report));
            }
            Err(SpreadError::TooManyBins) => {
                log::info!(
                    "reinterpolation.sums: the particles' cores fall into more than {MAX_BINS} \
                     bins; this re-interpolation uses the direct sums"
                );
            }
            Err(e) => return Err(spread_error(e)),
        }
    }
    let pts = lat.points();
    let field = core_sum(s.core, position, v, cores, &pts, s.cutoff, period);
    solve(lat, sigma0, &field, s)
}

/// Re-interpolates `old` as [`super::reinterpolate`] does and carries the AB2 history `prev`
/// of the old particles to the fresh ones: the strength rates by the lattice operator with the
/// cores of the previous evaluation, the velocities by the lattice operator with the core
/// `sigma0` (see the module documentation). Returns the fresh particles, their history and the
/// report of the vorticity's solve (the residual the largest of the three, the time of all).
pub fn reinterpolate_with_history(
    old: &Particles,
    prev: PreviousRates<'_>,
    spec: &LatticeSpec,
    sigma0: f64,
    s: &RbfSettings,
) -> Result<(Particles, Derivatives, RbfReport)> {
    let t0 = Instant::now();
    let n = old.len();
    if prev.rates.velocity.len() != n || prev.rates.stretching.len() != n {
        return Err(Error::Rbf(format!(
            "the history to carry has {} velocities and {} stretching rates for {n} particles",
            prev.rates.velocity.len(),
            prev.rates.stretching.len()
        )));
    }
    let (lat, period) = lattice_for(old, spec);
    let x = &old.position;
    let (beta, mut report) =
        lattice_operator(&lat, period, x, &old.strength, &old.sigma, sigma0, s)?;
    let cores_n: Vec<f64> = old
        .sigma0
        .iter()
        .map(|&s0| sigma_at(s0, prev.nu, prev.elapsed))
        .collect();
    let (rates, r_s) =
        lattice_operator(&lat, period, x, &prev.rates.stretching, &cores_n, sigma0, s)?;
    let fresh_cores = vec![sigma0; n];
    let (vel, r_u) = lattice_operator(
        &lat,
        period,
        x,
        &prev.rates.velocity,
        &fresh_cores,
        sigma0,
        s,
    )?;
    let (p, kept) = fresh_particles(&lat, sigma0, &beta, s);
    let history = Derivatives {
        velocity: kept.iter().map(|&i| vel[i]).collect(),
        stretching: kept.iter().map(|&i| rates[i]).collect(),
    };
    report.residual = report.residual.max(r_s.residual).max(r_u.residual);
    for c in 0..3 {
        report.iterations[c] += r_s.iterations[c] + r_u.iterations[c];
    }
    report.kept = p.len();
    report.seconds = t0.elapsed().as_secs_f64();
    Ok((p, history, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reinterpolation::reinterpolate;
    use rand::{Rng, SeedableRng};

    fn random_field(n: usize, rng: &mut impl Rng) -> Vec<[f64; 3]> {
        (0..n)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
            .collect()
    }

    /// Particles with core `sigma0` on the lattice itself: `L_{sigma0} = A^{-1} A = I` up to the
    /// spherical truncation of the Gaussian sums against the cube of the lattice matrix
    /// (`exp(-cutoff^2 / 2)` times the conditioning on the finest scales; smooth values here).
    #[test]
    fn the_velocity_operator_is_the_identity_on_the_lattice() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for periodic in [true, false] {
            let lat = if periodic {
                Lattice::periodic_box(8, 2.0)
            } else {
                Lattice::covering([-1.0; 3], [0.75, 0.5, 1.0], 0.25)
            };
            let period = periodic.then_some(2.0);
            let x = lat.points();
            let ph: [f64; 3] = std::array::from_fn(|_| rng.gen_range(0.0..6.0));
            let v: Vec<[f64; 3]> = x
                .iter()
                .map(|y| {
                    let w = y.map(|c| std::f64::consts::PI * c); // periodic in the box of 2
                    [
                        (w[0] + ph[0]).sin(),
                        (w[1] - w[2] + ph[1]).cos(),
                        (w[2] + ph[2]).sin(),
                    ]
                })
                .collect();
            let sigma0 = lat.h;
            let cores = vec![sigma0; x.len()];
            let (got, _) = lattice_operator(
                &lat,
                period,
                &x,
                &v,
                &cores,
                sigma0,
                &RbfSettings::default(),
            )
            .unwrap();
            let err = got
                .iter()
                .zip(&v)
                .flat_map(|(a, b)| (0..3).map(move |c| (a[c] - b[c]).abs()))
                .fold(0.0, f64::max);
            assert!(err < 1e-5, "periodic {periodic}: {err:.2e}"); // measured 1.5e-6
        }
    }

    /// A smooth periodic field sampled at particles displaced from the lattice by the smooth
    /// divergence-free field `d (sin y, sin z, sin x) h` (as a flow moves them): the transfer
    /// reproduces it at the lattice points, with an error that shrinks with `d` (zero on the
    /// lattice, see the module documentation).
    #[test]
    fn the_velocity_transfer_error_vanishes_with_the_displacement() {
        let l = 2.0 * std::f64::consts::PI;
        let lat = Lattice::periodic_box(16, l);
        let u = |x: [f64; 3]| {
            [
                x[0].sin() * x[1].cos(),
                (x[1] + 2.0 * x[2]).cos(),
                (x[0] - x[2]).sin() + 0.3,
            ]
        };
        let err_at = |d: f64| {
            let x: Vec<[f64; 3]> = lat
                .points()
                .iter()
                .map(|y| {
                    let e = [y[1].sin(), y[2].sin(), y[0].sin()];
                    std::array::from_fn(|c| y[c] + d * lat.h * e[c])
                })
                .collect();
            let v: Vec<[f64; 3]> = x.iter().map(|&x| u(x)).collect();
            let cores = vec![lat.h; x.len()];
            let (got, _) = lattice_operator(
                &lat,
                Some(l),
                &x,
                &v,
                &cores,
                lat.h,
                &RbfSettings::default(),
            )
            .unwrap();
            got.iter()
                .zip(lat.points())
                .flat_map(|(g, y)| {
                    let w = u(y);
                    (0..3).map(move |c| (g[c] - w[c]).abs())
                })
                .fold(0.0, f64::max)
        };
        let (e0, e1, e2, e4) = (err_at(0.0), err_at(0.4), err_at(0.2), err_at(0.1));
        eprintln!(
            "transfer errors at d = 0, 0.4 h, 0.2 h, 0.1 h: {e0:.2e} {e1:.2e} {e2:.2e} {e4:.2e}"
        );
        assert!(e1 < 1e-2, "{e1}");
        assert!(e1 / e2 > 1.7 && e2 / e4 > 1.7, "{e1} {e2} {e4}");
    }

    /// The fresh particles are those of `reinterpolate`; the strength rates transform like the
    /// strengths with the cores of the previous evaluation: as `reinterpolate` of particles
    /// carrying the rates as strengths with those cores (periodic with `nu > 0`, the cores of
    /// the strengths larger; free space with `nu = 0`, where the lattice depends on the cores).
    #[test]
    fn strengths_as_reinterpolate_and_rates_like_strengths() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (nu, elapsed, dt) = (0.01, 0.3, 0.1);
        for (spec, sigma0, nu) in [
            (
                LatticeSpec::Periodic {
                    n: 8,
                    box_length: 2.0,
                },
                0.25,
                nu,
            ),
            (
                LatticeSpec::Free {
                    h: 0.2,
                    margin: 4.0,
                },
                0.2,
                0.0,
            ),
        ] {
            let n = 200;
            let x: Vec<[f64; 3]> = (0..n)
                .map(|_| std::array::from_fn(|_| rng.gen_range(-0.6..0.6)))
                .collect();
            let mut old = Particles::new(x, random_field(n, &mut rng), sigma0);
            crate::core_spreading::apply(&mut old, nu, elapsed + dt);
            let rates = Derivatives {
                velocity: random_field(n, &mut rng),
                stretching: random_field(n, &mut rng),
            };
            let s = RbfSettings {
                drop: 0.0,
                ..Default::default()
            };
            let prev = PreviousRates {
                rates: &rates,
                nu,
                elapsed,
            };
            let (fresh, hist, _) =
                reinterpolate_with_history(&old, prev, &spec, sigma0, &s).unwrap();
            let (want, _) = reinterpolate(&old, &spec, sigma0, &s).unwrap();
            assert_eq!(fresh, want);
            let mut as_strengths = old.clone();
            as_strengths.strength = rates.stretching.clone();
            crate::core_spreading::apply(&mut as_strengths, nu, elapsed);
            let (r, _) = reinterpolate(&as_strengths, &spec, sigma0, &s).unwrap();
            // reinterpolate removes the mean strength in a periodic box, the history keeps it
            let k = hist.stretching.len() as f64;
            let mean: [f64; 3] = match spec {
                LatticeSpec::Periodic { .. } => {
                    std::array::from_fn(|c| hist.stretching.iter().map(|v| v[c]).sum::<f64>() / k)
                }
                LatticeSpec::Free { .. } => [0.0; 3],
            };
            assert_eq!(hist.stretching.len(), fresh.len());
            assert_eq!(hist.velocity.len(), fresh.len());
            for (a, b) in hist.stretching.iter().zip(&r.strength) {
                for c in 0..3 {
                    assert!((a[c] - mean[c] - b[c]).abs() < 1e-9, "{a:?} {b:?}");
                }
            }
        }
    }
}
