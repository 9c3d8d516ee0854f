//! The device-resident step against the host step on the CPU (f64): Taylor-Green 16^3, 8 steps
//! with a re-interpolation every 2 steps (Heun and AB2 steps, four device re-interpolations),
//! energy and enstrophy by the same definition (`output.grid_velocity = "vorticity"`). Needs a
//! CUDA GPU: run with `--features gpu-tests` (ignored, reported as such, elsewhere).

use vortex_domain::SelfComm;
use vortex_method::parallel::DistSimulation;
use vortex_method::{Config, Simulator};

const CONFIG: &str = r#"
nu = 0.01
dt = 0.05
t_end = 0.4

[domain]
periodic = true
box_length = 6.283185307179586
image_levels = 3

[evaluation]
method = "fmm"
order = 10
theta = 0.5

[initial]
kind = "taylor-green"
n = 16
overlap = 1.0

[reinterpolation]
every = 2
ratio = 1.2

[output]
grid = 16
grid_velocity = "vorticity"
"#;

fn energy_enstrophy(sim: &mut dyn Simulator) -> (f64, f64) {
    let d = sim.diagnostics(Some(16), false).unwrap().unwrap();
    (d.energy, d.enstrophy)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --features gpu-tests"
)]
fn resident_step_matches_the_host_step() {
    let config = Config::from_str_named(CONFIG, "device_vs_host").unwrap();
    let comm = SelfComm;
    let mut host = DistSimulation::new(&comm, config.clone(), vortex_fmm::CpuBackend).unwrap();
    let mut dev = vortex_resident::ResidentSimulation::new(&comm, config, 0, None).unwrap();
    let mut reinterpolations = 0;
    for _ in 0..8 {
        Simulator::step(&mut host).unwrap();
        let r = dev.step().unwrap();
        reinterpolations += r.reinterpolation.is_some() as u32;
    }
    assert_eq!(reinterpolations, 4);
    let (eh, zh) = energy_enstrophy(&mut host);
    let (ed, zd) = energy_enstrophy(&mut dev);
    let (de, dz) = ((ed - eh).abs() / eh, (zd - zh).abs() / zh);
    println!(
        "energy {ed:.10e} vs {eh:.10e} ({de:.2e}), enstrophy {zd:.10e} vs {zh:.10e} ({dz:.2e})"
    );
    assert!(de < 1e-5 && dz < 1e-5, "{de:.2e} {dz:.2e}");
}
