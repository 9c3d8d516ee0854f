#![allow(dead_code)]
use std::f64::consts::PI;
use vortex_method::Particles;

/// A coarse ring of `m` blobs (one per cross-section), circulation `gamma`, core `sigma`.
pub fn coarse_ring(m: usize, radius: f64, z: f64, gamma: f64, sigma: f64) -> Particles {
    let mut p = Particles::default();
    let ds = 2.0 * PI * radius / m as f64;
    for i in 0..m {
        let phi = 2.0 * PI * (i as f64 + 0.5) / m as f64;
        let (s, c) = phi.sin_cos();
        p.push(
            [radius * c, radius * s, z],
            [-gamma * ds * s, gamma * ds * c, 0.0],
            sigma,
        );
    }
    p
}

/// Two coaxial coarse rings of `m` blobs of core `sigma` (radii 1 and 0.7, planes 0.4 apart,
/// unit circulation): they leapfrog.
pub fn leapfrogging_rings(m: usize, sigma: f64) -> Particles {
    let mut p = coarse_ring(m, 1.0, 0.0, 1.0, sigma);
    let q = coarse_ring(m, 0.7, 0.4, 1.0, sigma);
    for i in 0..q.len() {
        p.push(q.position[i], q.strength[i], sigma);
    }
    p
}

/// The right-hand side by the direct sum on the CPU, on one rank.
pub fn direct_rhs() -> vortex_method::parallel::DistRhs<'static, vortex_fmm::CpuBackend> {
    vortex_method::parallel::DistRhs::new(
        &vortex_domain::SelfComm,
        vortex_fmm::CpuBackend,
        vortex_fmm::EvalParams {
            method: vortex_fmm::Method::Direct,
            ..Default::default()
        },
    )
    .unwrap()
}

pub fn max_abs_diff(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| (0..3).map(move |c| (x[c] - y[c]).abs()))
        .fold(0.0, f64::max)
}

/// `vortex_method::run::run` of a configuration on the CPU backend (the state on the host ranks of
/// `comm`), as `vortex run --backend cpu` makes it. Collective.
pub fn run_cpu(
    comm: &dyn vortex_domain::Comm,
    config: vortex_method::Config,
    out: &std::path::Path,
    restart: Option<&std::path::Path>,
    opts: &vortex_method::run::RunOptions,
) -> vortex_method::Result<vortex_method::run::RunSummary> {
    let build = vortex_method::run::host_build(comm, vortex_fmm::CpuBackend, None);
    vortex_method::run::run(comm, config, out, restart, opts, build)
}

/// A stepper without viscosity, re-interpolation or core growth: time step `dt`, a free lattice
/// of spacing `h` (margin 4), core radius 0.1, the default history and core.
pub fn free_stepper(dt: f64, h: f64) -> vortex_method::stepping::Stepper {
    vortex_method::stepping::Stepper {
        dt,
        nu: 0.0,
        period: None,
        lattice: vortex_method::reinterpolation::LatticeSpec::Free { h, margin: 4.0 },
        sigma0: 0.1,
        rbf: vortex_method::reinterpolation::RbfSettings::default(),
        ratio: 0.0,
        every: 0,
        strain_limit: 0.0,
        cell_volume: 1.0,
        history: Default::default(),
        core: Default::default(),
    }
}
