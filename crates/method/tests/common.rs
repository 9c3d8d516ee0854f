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
