//! The device-resident step against the host step on the CPU (f64): Taylor-Green 16^3, 8 steps
//! with a re-interpolation every 2 steps (Heun and AB2 steps, four device re-interpolations),
//! energy and enstrophy by the same definition (`output.grid_velocity = "vorticity"`). Needs a
//! CUDA GPU: run with `--features gpu-tests` (ignored, reported as such, elsewhere).

use vortex_domain::SelfComm;
use vortex_method::parallel::DistSimulation;
use vortex_method::{Config, Simulator};
use vortex_resident::emulate::relative_l2 as rel;

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

/// `reinterpolation.history = "carry"`: after each re-interpolation the device carries the AB2
/// history through its lattice operator as the host does (`vortex_method::reinterpolation::
/// history`), and the next step is AB2 with one evaluation on both.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --features gpu-tests"
)]
fn resident_carried_history_matches_the_host() {
    let text = CONFIG.replace("ratio = 1.2\n", "ratio = 1.2\nhistory = \"carry\"\n");
    let config = Config::from_str_named(&text, "device_vs_host_carry").unwrap();
    assert_eq!(
        config.reinterpolation.history,
        vortex_method::reinterpolation::history::History::Carry
    );
    let comm = SelfComm;
    let mut host = DistSimulation::new(&comm, config.clone(), vortex_fmm::CpuBackend).unwrap();
    let mut dev = vortex_resident::ResidentSimulation::new(&comm, config, 0, None).unwrap();
    for k in 0..6 {
        let rh = Simulator::step(&mut host).unwrap();
        let rd = dev.step().unwrap();
        assert_eq!(rh.scheme, rd.scheme, "step {k}");
        assert_eq!(rd.extra_evaluations, (k == 0) as u32, "step {k}");
        if rd.reinterpolation.is_some() {
            let h = Simulator::gather_state(&mut host).unwrap().unwrap();
            let d = Simulator::gather_state(&mut dev).unwrap().unwrap();
            let (hp, dp) = (h.previous.unwrap(), d.previous.unwrap());
            let (ev, es) = (
                rel(&dp.velocity, &hp.velocity),
                rel(&dp.stretching, &hp.stretching),
            );
            println!("step {k}: carried velocity {ev:.2e}, stretching {es:.2e} (device vs host)");
            // as the emulation (f32 exponentials through the solve): 3.5e-3 and 7e-4 there
            assert!(ev < 1e-2 && es < 1e-2, "step {k}: {ev:.2e} {es:.2e}");
        }
    }
    let (eh, zh) = energy_enstrophy(&mut host);
    let (ed, zd) = energy_enstrophy(&mut dev);
    let (de, dz) = ((ed - eh).abs() / eh, (zd - zh).abs() / zh);
    println!("carry: energy {de:.2e}, enstrophy {dz:.2e} (device vs host)");
    assert!(de < 1e-5 && dz < 1e-5, "{de:.2e} {dz:.2e}");
}
