#![allow(dead_code)]
use method::Particles;
use std::f64::consts::PI;

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

/// `method::run::run` of a configuration on the CPU backend (the state on the host ranks of
/// `comm`), as `vortex run --backend cpu` makes it. Collective.
pub fn run_cpu(
    comm: &dyn domain::Comm,
    config: method::Config,
    out: &std::path::Path,
    restart: Option<&std::path::Path>,
    opts: &method::run::RunOptions,
) -> method::Result<method::run::RunSummary> {
    let build = method::run::host_build(comm, fmm::CpuBackend, None);
    method::run::run(comm, config, out, restart, opts, build)
}
