//! The diagnostics of a [`DistSimulation`] over ranks (the formulas and files are those of
//! [`crate::diagnostics`]): periodic, the velocity on the grid by the distributed evaluation;
//! free space, the particles gathered on rank 0.

use super::DistSimulation;
use crate::collective::agree;
use crate::config::GridVelocity;
use crate::diagnostics::{
    apply_heat, free_space_energy, free_space_enstrophy, global_moments, grid_diagnostics,
    vorticity_grid, vorticity_grid_velocity, Diagnostics,
};
use crate::error::Result;
use crate::rhs::Derivatives;
use vortex_fmm::{Backend, Targets};

/// The diagnostics of a simulation over ranks; `Some` on rank 0, `None` elsewhere. `f` are the
/// derivatives at this rank's particles. Periodic: the totals by sums over the ranks and the
/// velocity on the grid by the distributed evaluation with the grid points as targets (each rank
/// a contiguous piece), gathered on rank 0 for the spectral routines. Free space: the particles
/// and their velocities gathered on rank 0 in global-id order (the enstrophy needs the Gaussian
/// sums over all particles). Collective.
pub fn compute<B: Backend>(
    sim: &mut DistSimulation<'_, B>,
    f: &Derivatives,
    grid: Option<usize>,
) -> Result<Option<Diagnostics>> {
    let t0 = std::time::Instant::now();
    let comm = sim.comm;
    let mut d = Diagnostics {
        step: sim.state.step,
        t: sim.t(),
        re_lambda: f64::NAN,
        ..Default::default()
    };
    let core = sim.config.evaluation.core;
    // the diffusion substep pending since the last re-interpolation (cores of order above 2)
    let pending = if core == vortex_fmm::kernel::CoreOrder::Second {
        0.0
    } else {
        sim.config.nu * sim.config.dt * (sim.state.step - sim.state.step_reset) as f64
    };
    match (sim.config.periodic(), grid) {
        (Some(per), Some(n)) => {
            global_moments(comm, &sim.state.particles, &mut d);
            let l = per.box_length;
            if sim.config.output.grid_velocity == Some(GridVelocity::Vorticity) {
                let cutoff = sim.config.reinterpolation.cutoff;
                let Some((all, _)) = sim.gather(&[]) else {
                    return Ok(None);
                };
                let n = vorticity_grid(&sim.config, n);
                let mut velocity = vorticity_grid_velocity(&all, n, l, cutoff, core);
                apply_heat(&mut velocity, n, l, pending);
                grid_diagnostics(&mut d, &velocity, n, l, sim.config.nu);
                d.seconds = t0.elapsed().as_secs_f64();
                return Ok(Some(d));
            }
            let n3 = n * n * n;
            let (r, size) = (comm.rank(), comm.size());
            let (lo, hi) = (n3 * r / size, n3 * (r + 1) / size);
            let c = |i: usize| -0.5 * l + l * i as f64 / n as f64;
            let pts: Vec<[f64; 3]> = (lo..hi)
                .map(|g| [c(g / (n * n)), c((g / n) % n), c(g % n)])
                .collect();
            let p = &sim.state.particles;
            let fields = sim.rhs.evaluate_at(&p.to_sources(), &Targets::points(pts));
            let fields = agree(comm, fields)?;
            let Some(mut all) = vortex_domain::gather_to_root(comm, &fields) else {
                return Ok(None);
            };
            apply_heat(&mut all.velocity, n, l, pending);
            grid_diagnostics(&mut d, &all.velocity, n, l, sim.config.nu);
        }
        _ => {
            let Some((p, v)) = sim.gather(&[&f.velocity]) else {
                return Ok(None);
            };
            d.total_strength = p.total_strength();
            d.impulse = p.linear_impulse();
            d.centroid = p.centroid();
            d.n_particles = p.len();
            d.max_sigma = p.sigma.iter().copied().fold(0.0, f64::max);
            d.energy = free_space_energy(&p, &v[0]);
            d.enstrophy = free_space_enstrophy(&p, sim.config.reinterpolation.cutoff, core);
        }
    }
    d.seconds = t0.elapsed().as_secs_f64();
    Ok(Some(d))
}
