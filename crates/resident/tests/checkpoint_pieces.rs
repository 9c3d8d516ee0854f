//! Checkpoints of the device-resident step on several ranks (simulated ranks sharing device 0),
//! through the run loop of `vortex run`: Taylor-Green 24^3, 4 steps on 2 ranks write a piece
//! per rank and the manifest; the state that 1, 2 and 3 ranks start from (read, uploaded,
//! downloaded again) is the written state bit for bit; the run continued on 1 and on 2 ranks
//! agrees with the uninterrupted run on 1 rank to the f32 FMM's round-off (energy and enstrophy
//! of every row, the particle positions, as `slabs_vs_one_rank.rs` bounds them: 1e-6).
//! Needs a CUDA GPU: run with `--features gpu-tests` (ignored, reported as such, elsewhere).

use std::path::{Path, PathBuf};
use vortex_domain::ThreadComm;
use vortex_method::checkpoint;
use vortex_method::run::{RunOptions, Simulation};
use vortex_method::{Config, Simulator, State};

fn config() -> Config {
    let text = r#"
nu = 0.01
dt = 0.02
t_end = 0.16

[domain]
periodic = true
box_length = 6.283185307179586
image_levels = 3

[evaluation]
method = "fmm"
order = 8
theta = 0.5

[initial]
kind = "taylor-green"
n = 24
overlap = 1.0

[reinterpolation]
every = 3
ratio = 1.2

[output]
grid = 24
grid_velocity = "vorticity"
diagnostics_every = 1
progress = false
plots = false
"#;
    Config::from_str_named(text, "taylor-green-24").unwrap()
}

/// `vortex run` of the resident step on `ranks` simulated ranks (all on device 0).
fn run(ranks: usize, out: &Path, restart: Option<&Path>, steps: Option<u64>) {
    let cfg = config();
    let opts = RunOptions {
        max_steps: steps,
        overwrite: false,
    };
    let res = ThreadComm::run(ranks, |comm| {
        let build: vortex_method::run::Build<'_> = Box::new(move |config, start| {
            let sim = vortex_resident::ResidentSimulation::new(comm, config, 0, start)?;
            Ok(Simulation::Gathered(Box::new(sim)))
        });
        vortex_method::run::run(comm, cfg.clone(), out, restart, &opts, build)
    });
    for (r, x) in res.into_iter().enumerate() {
        if let Err(e) = x {
            panic!("{} on {ranks} ranks, rank {r}: {e}", out.display());
        }
    }
}

/// `(step, energy, enstrophy)` of every row of `diagnostics.csv`.
fn rows(dir: &Path) -> Vec<(u64, f64, f64)> {
    let text = std::fs::read_to_string(dir.join("diagnostics.csv")).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (s, e, z) = (col("step"), col("energy"), col("enstrophy"));
    lines
        .map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            (
                v[s].parse().unwrap(),
                v[e].parse().unwrap(),
                v[z].parse().unwrap(),
            )
        })
        .collect()
}

/// The largest distance on the torus between the positions of two states.
fn position_diff(a: &State, b: &State, l: f64) -> f64 {
    assert_eq!(a.particles.len(), b.particles.len());
    a.particles
        .position
        .iter()
        .zip(&b.particles.position)
        .flat_map(|(x, y)| (0..3).map(move |c| x[c] - y[c]))
        .map(|d| (d - l * (d / l).round()).abs())
        .fold(0.0, f64::max)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --features gpu-tests"
)]
fn resident_pieces_restart_on_one_and_two_ranks() {
    let root: PathBuf =
        std::env::temp_dir().join(format!("vortex-resident-pieces-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let cfg = config();
    let full = root.join("full-1");
    run(1, &full, None, None);
    let written = root.join("written-2");
    run(2, &written, None, Some(4));
    let m = checkpoint::pieces::read_manifest(&written.join(checkpoint::MANIFEST_FILE)).unwrap();
    assert_eq!((m.step, m.pieces.len()), (4, 2));
    assert!(!written.join("checkpoint.bin").exists());
    let state = checkpoint::read_whole(&written).unwrap().state;
    // the state each number of ranks starts from: read, uploaded, downloaded again
    for ranks in [1, 2, 3] {
        let got = ThreadComm::run(ranks, |comm| {
            let r = checkpoint::read_restart(comm, &cfg, Some(&written))
                .unwrap()
                .unwrap();
            let mut sim =
                vortex_resident::ResidentSimulation::new(comm, cfg.clone(), 0, Some(r.local))
                    .unwrap();
            sim.gather_state().unwrap()
        });
        assert!(
            got[0].as_ref() == Some(&state),
            "{ranks} ranks do not start from the written state"
        );
    }
    let base = rows(&full);
    let end = checkpoint::read_whole(&full).unwrap().state;
    for ranks in [1, 2] {
        let d = root.join(format!("continued-on-{ranks}"));
        copy_dir(&written, &d);
        run(ranks, &d, Some(&d), None);
        let r = rows(&d);
        assert_eq!(r.len(), base.len(), "{ranks} ranks: rows {r:?}");
        let mut worst = [0.0f64; 2];
        for ((s, e, z), (t, f, w)) in base.iter().zip(&r) {
            assert_eq!(s, t);
            worst[0] = worst[0].max((e - f).abs() / e.abs());
            worst[1] = worst[1].max((z - w).abs() / z.abs());
        }
        let st = checkpoint::read_whole(&d).unwrap().state;
        let dx = position_diff(&st, &end, cfg.domain.box_length);
        println!(
            "written on 2, continued on {ranks}: energy {:.2e}, enstrophy {:.2e}, positions {dx:.2e}",
            worst[0], worst[1]
        );
        assert!(
            worst[0] < 1e-6 && worst[1] < 1e-6,
            "{ranks} ranks: {worst:?}"
        );
        assert!(dx < 1e-6, "{ranks} ranks: positions differ by {dx:.2e}");
        assert_eq!(
            (st.step, st.reinterpolations),
            (end.step, end.reinterpolations)
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}
