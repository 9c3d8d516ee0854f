use method::config::Config;
use method::stepping::Simulation;
use std::time::Instant;

fn z_imp(p: &method::Particles) -> (f64, f64) {
    let (mut num, mut den) = (0.0, 0.0);
    for (x, a) in p.position.iter().zip(&p.strength) {
        let rho = (x[0] * x[0] + x[1] * x[1]).sqrt();
        let at = (-a[0] * x[1] + a[1] * x[0]) / rho;
        num += at * rho * rho * x[2];
        den += at * rho * rho;
    }
    (num / den, den)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (method_, spacing, core, dt, steps): (String, f64, f64, f64, u64) = (
        args[1].clone(),
        args[2].parse().unwrap(),
        args[3].parse().unwrap(),
        args[4].parse().unwrap(),
        args[5].parse().unwrap(),
    );
    let text = format!("nu = 0.0\ndt = {dt}\nt_end = 1.0\n[evaluation]\nmethod = \"{method_}\"\norder = 10\n[initial]\nkind = \"ring\"\nradius = 1.0\ncirculation = 1.0\ncore = {core}\nspacing = {spacing}\n[reinterpolation]\nratio = 0.0\ndrop = 1e-4\n");
    let cfg = Config::from_str_named(&text, "x").unwrap();
    let t0 = Instant::now();
    let ring = method::initial::rings_of(&cfg)[0];
    let mut sim = Simulation::new(cfg, fmm::CpuBackend).unwrap();
    println!(
        "init {:.2}s N={} U_saffman={:.6} {:?}",
        t0.elapsed().as_secs_f64(),
        sim.state.particles.len(),
        ring.saffman_speed(),
        sim.initial_report
    );
    let (z0, _) = z_imp(sim.particles());
    let f = sim.derivatives().unwrap().clone();
    let p = sim.particles();
    let (mut num, mut den) = (0.0, 0.0);
    for ((x, a), u) in p.position.iter().zip(&p.strength).zip(&f.velocity) {
        let rho = (x[0] * x[0] + x[1] * x[1]).sqrt();
        let at = (-a[0] * x[1] + a[1] * x[0]) / rho;
        let ur = (x[0] * u[0] + x[1] * u[1]) / rho;
        num += at * (rho * rho * u[2] + 3.0 * rho * ur * (x[2] - z0));
        den += at * rho * rho;
    }
    println!(
        "dZ/dt at t=0 = {:.6} ({:.2}%) eval {:.2}s",
        num / den,
        100.0 * (num / den / ring.saffman_speed() - 1.0),
        t0.elapsed().as_secs_f64()
    );
    let imp0 = sim.particles().linear_impulse();
    for _ in 0..steps {
        sim.step().unwrap();
    }
    let (z1, _) = z_imp(sim.particles());
    let imp1 = sim.particles().linear_impulse();
    let u = (z1 - z0) / sim.t();
    println!(
        "U from Z = {:.6} ({:.2}%), impulse {:?} -> {:?} ({:.2e}) total {:.2}s",
        u,
        100.0 * (u / ring.saffman_speed() - 1.0),
        imp0,
        imp1,
        (imp1[2] - imp0[2]) / imp0[2],
        t0.elapsed().as_secs_f64()
    );
}
