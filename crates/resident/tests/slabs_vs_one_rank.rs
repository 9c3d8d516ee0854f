//! The device-resident step over z slabs (R = 2, 3, 4 simulated ranks sharing device 0)
//! against the same step on one rank: Taylor-Green 24^3 and a random isotropic field, 10 steps
//! with a re-interpolation every 3 steps (Heun and AB2 steps, migrations, three
//! re-interpolations over the slabs), energy and enstrophy from the grid velocity over the
//! slabs; then the state gathered in global-id order on rank 0 against the one-rank state.
//! Both histories after a re-interpolation: restarted (a Heun step) and carried through the
//! lattice operator over the slabs (an AB2 step).
//! Needs a CUDA GPU: run with `--features gpu-tests` (ignored, reported as such, elsewhere).

use vortex_domain::{Comm, SelfComm, ThreadComm};
use vortex_method::{Config, Simulator};

fn config(kind: &str, history: &str) -> Config {
    let initial = match kind {
        "taylor-green" => "kind = \"taylor-green\"\nn = 24\noverlap = 1.0".to_string(),
        _ => {
            "kind = \"isotropic\"\nn = 24\noverlap = 0.8\nk_peak = 3.0\nre_lambda = 20.0\nseed = 3"
                .to_string()
        }
    };
    let text = format!(
        r#"
nu = 0.01
dt = 0.02
t_end = 0.2

[domain]
periodic = true
box_length = 6.283185307179586
image_levels = 3

[evaluation]
method = "fmm"
order = 8
theta = 0.5
# ranks as threads of one process on one GPU: NCCL refuses that, the pinned path runs
exchange = "pinned"

[initial]
{initial}

[reinterpolation]
every = 3
ratio = 1.2
history = "{history}"

[output]
grid = 24
grid_velocity = "vorticity"
"#
    );
    Config::from_str_named(&text, kind).unwrap()
}

/// Energy, enstrophy after 10 steps, and the gathered positions (rank 0).
fn run(comm: &dyn Comm, config: &Config) -> (f64, f64, Option<Vec<[f64; 3]>>) {
    let mut sim = vortex_resident::ResidentSimulation::new(comm, config.clone(), 0, None).unwrap();
    let mut reinterpolations = 0;
    for _ in 0..10 {
        let r = sim.step().unwrap();
        reinterpolations += r.reinterpolation.is_some() as u32;
    }
    assert_eq!(reinterpolations, 3);
    let d = sim.diagnostics(Some(24), false).unwrap().unwrap();
    let st = sim.gather_state().unwrap();
    (d.energy, d.enstrophy, st.map(|s| s.particles.position))
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --features gpu-tests"
)]
fn slabs_match_one_rank() {
    for (kind, history) in [
        ("taylor-green", "restart"),
        ("isotropic", "restart"),
        ("isotropic", "carry"),
    ] {
        let config = config(kind, history);
        let (e1, z1, x1) = run(&SelfComm, &config);
        let x1 = x1.unwrap();
        for ranks in [2, 3, 4] {
            let out = ThreadComm::run(ranks, |c| run(c, &config));
            let (e, z, x) = &out[0];
            let (de, dz) = ((e - e1).abs() / e1, (z - z1).abs() / z1);
            let x = x.as_ref().unwrap();
            // positions are wrapped into the box: compare them as points of the torus
            let l = config.domain.box_length;
            let dx = x
                .iter()
                .zip(&x1)
                .map(|(a, b)| {
                    (0..3)
                        .map(|c| {
                            let d = a[c] - b[c];
                            (d - l * (d / l).round()).abs()
                        })
                        .fold(0.0, f64::max)
                })
                .fold(0.0, f64::max);
            println!(
                "{kind} ({history}) R = {ranks}: energy {de:.2e}, enstrophy {dz:.2e}, positions {dx:.2e}"
            );
            assert!(
                de < 1e-6 && dz < 1e-6,
                "{kind} R = {ranks}: {de:.2e} {dz:.2e}"
            );
            assert!(
                dx < 1e-6,
                "{kind} R = {ranks}: positions differ by {dx:.2e}"
            );
        }
    }
}
