//! Translation speed of a vortex ring against Saffman's formula, and the impulse drift over a
//! few steps: `cargo run --release -p vortex-method --example ringspeed -- --method fmm
//! --spacing 0.05 --core 0.1 --dt 0.05 --steps 4`.

use clap::Parser;
use std::time::Instant;
use vortex_method::config::Config;
use vortex_method::DistSimulation;

/// Ring speed against Saffman's formula (radius 1, circulation 1, inviscid).
#[derive(Parser)]
struct Args {
    /// Evaluation method: direct, treecode, fmm or ppm.
    #[arg(long, default_value = "fmm")]
    method: String,
    /// Particle spacing (lattice step) along the ring.
    #[arg(long, default_value_t = 0.05)]
    spacing: f64,
    /// Gaussian core radius of the ring.
    #[arg(long, default_value_t = 0.1)]
    core: f64,
    /// Time step.
    #[arg(long, default_value_t = 0.05)]
    dt: f64,
    /// Steps to take.
    #[arg(long, default_value_t = 4)]
    steps: u64,
}

/// The impulse-weighted centroid `Z = sum a_t rho^2 z / sum a_t rho^2` (Saffman's ring position).
fn z_imp(p: &vortex_method::Particles) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (x, a) in p.position.iter().zip(&p.strength) {
        let rho = (x[0] * x[0] + x[1] * x[1]).sqrt();
        let at = (-a[0] * x[1] + a[1] * x[0]) / rho;
        num += at * rho * rho * x[2];
        den += at * rho * rho;
    }
    num / den
}

/// `dZ/dt` from the velocities (`a_t / rho` is carried by the flow).
fn dz_dt(p: &vortex_method::Particles, velocity: &[[f64; 3]], z0: f64) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for ((x, a), u) in p.position.iter().zip(&p.strength).zip(velocity) {
        let rho = (x[0] * x[0] + x[1] * x[1]).sqrt();
        let at = (-a[0] * x[1] + a[1] * x[0]) / rho;
        let ur = (x[0] * u[0] + x[1] * u[1]) / rho;
        num += at * (rho * rho * u[2] + 3.0 * rho * ur * (x[2] - z0));
        den += at * rho * rho;
    }
    num / den
}

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let a = Args::parse();
    let text = format!(
        "nu = 0.0\ndt = {}\nt_end = 1.0\n[evaluation]\nmethod = \"{}\"\norder = 10\n\
         [initial]\nkind = \"ring\"\nradius = 1.0\ncirculation = 1.0\ncore = {}\n\
         spacing = {}\n[reinterpolation]\nratio = 0.0\ndrop = 1e-4\n",
        a.dt, a.method, a.core, a.spacing
    );
    let cfg = Config::from_str_named(&text, "ringspeed")?;
    let t0 = Instant::now();
    let saffman = vortex_method::initial::rings_of(&cfg)[0].saffman_speed();
    let mut sim = DistSimulation::new(&vortex_domain::SelfComm, cfg, vortex_fmm::CpuBackend)?;
    println!(
        "init {:.2} s, N = {}, U_saffman = {saffman:.6}, {:?}",
        t0.elapsed().as_secs_f64(),
        sim.state.particles.len(),
        sim.initial_report
    );
    let z0 = z_imp(&sim.state.particles);
    let f = sim.derivatives()?.clone();
    let u0 = dz_dt(&sim.state.particles, &f.velocity, z0);
    println!(
        "dZ/dt at t = 0: {u0:.6} ({:.2} %), {:.2} s",
        100.0 * (u0 / saffman - 1.0),
        t0.elapsed().as_secs_f64()
    );
    let imp0 = sim.state.particles.linear_impulse();
    for _ in 0..a.steps {
        sim.step()?;
    }
    let u = (z_imp(&sim.state.particles) - z0) / sim.t();
    let imp1 = sim.state.particles.linear_impulse();
    println!(
        "U from Z: {u:.6} ({:.2} %), impulse {imp0:?} -> {imp1:?} ({:.2e}), {:.2} s",
        100.0 * (u / saffman - 1.0),
        (imp1[2] - imp0[2]) / imp0[2],
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
