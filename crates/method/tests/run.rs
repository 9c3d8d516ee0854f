//! The run command: restart bit for bit, outputs, configuration errors.

mod common;
use common::run_cpu;
use std::path::Path;
use vortex_method::checkpoint;
use vortex_method::config::Config;
use vortex_method::reinterpolation::LatticeFilter;
use vortex_method::run::RunOptions;

/// The run in one process on the CPU backend.
fn run_config(
    config: Config,
    out: &Path,
    restart: Option<&Path>,
) -> vortex_method::Result<vortex_method::run::RunSummary> {
    run_cpu(
        &vortex_domain::SelfComm,
        config,
        out,
        restart,
        &RunOptions::default(),
    )
}

const TINY: &str = r#"
nu = 0.05
dt = 0.1
t_end = 0.6
[domain]
periodic = true
image_levels = 1
[evaluation]
method = "fmm"
order = 6
[initial]
kind = "taylor-green"
n = 6
[reinterpolation]
ratio = 0.0
every = 2
strain = 0.0
[output]
diagnostics_every = 2
checkpoint_every = 3
snapshot_every = 3
snapshot_initial = true
progress = false
plots = false
"#;

#[test]
fn restart_continues_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let full = Config::from_str_named(TINY, "tiny.toml").unwrap();
    let a = dir.path().join("a");
    run_config(full.clone(), &a, None).unwrap();
    // the same run stopped after 3 steps (AB2 history and a re-interpolation behind it) ...
    let mut half = full.clone();
    half.t_end = 0.3;
    let b = dir.path().join("b");
    run_config(half, &b, None).unwrap();
    let ck_b = checkpoint::read(&b.join("checkpoint.bin")).unwrap();
    assert_eq!(ck_b.state.step, 3);
    assert!(ck_b.state.previous.is_some());
    // ... and continued to the end
    run_config(full.clone(), &b, Some(&b.join("checkpoint.bin"))).unwrap();
    let sa = checkpoint::read(&a.join("checkpoint.bin")).unwrap().state;
    let sb = checkpoint::read(&b.join("checkpoint.bin")).unwrap().state;
    assert_eq!(sa.step, 6);
    assert!(sa.reinterpolations >= 2);
    let bits = |p: &vortex_method::Particles| -> Vec<u64> {
        p.position
            .iter()
            .chain(&p.strength)
            .flat_map(|v| v.iter().map(|x| x.to_bits()))
            .chain(p.sigma.iter().map(|x| x.to_bits()))
            .collect()
    };
    assert_eq!(bits(&sa.particles), bits(&sb.particles));
    assert_eq!(sa, sb);
    // identical diagnostics (apart from the timing columns)
    let strip = |p: &Path| -> Vec<String> {
        std::fs::read_to_string(p.join("diagnostics.csv"))
            .unwrap()
            .lines()
            .map(|l| l.split(',').take(16).collect::<Vec<_>>().join(","))
            .collect()
    };
    assert_eq!(strip(&a), strip(&b));
    // header + steps 0, 2, 4, 6 and 3 (a checkpoint is written after a diagnostics row of its step)
    assert_eq!(strip(&a).len(), 1 + 5);
    for f in [
        "particles_000000.vtp",
        "particles_000006.vtp",
        "grid_000006.vtk",
        "spectrum_00000.6000.csv",
    ] {
        assert!(a.join(f).exists(), "{f} missing");
    }
    let vtp = String::from_utf8_lossy(&std::fs::read(a.join("particles_000006.vtp")).unwrap())
        .into_owned();
    assert!(vtp.contains("NumberOfPoints=\"216\"") && vtp.contains("Name=\"velocity\""));
    // the time series names every snapshot with its time, the same after the restart
    let pvd = std::fs::read_to_string(a.join("particles.pvd")).unwrap();
    let entries = vortex_method::vtp::read_pvd(&a.join("particles.pvd"));
    let want: Vec<(f64, String)> = [0, 3, 6]
        .iter()
        .map(|&s| (s as f64 * 0.1, format!("particles_{s:06}.vtp")))
        .collect();
    assert_eq!(entries.len(), want.len(), "{pvd}");
    for ((t, f), (wt, wf)) in entries.iter().zip(&want) {
        assert!(f == wf && (t - wt).abs() < 1e-12, "{pvd}");
    }
    assert_eq!(
        pvd,
        std::fs::read_to_string(b.join("particles.pvd")).unwrap()
    );
    // a checkpoint of another configuration is refused
    let mut other = full.clone();
    other.nu = 0.01;
    let e = run_config(
        other,
        &dir.path().join("c"),
        Some(&a.join("checkpoint.bin")),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("another configuration"), "{e}");
    // a file that is not a checkpoint is refused
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"not a checkpoint at all").unwrap();
    let e = checkpoint::read(&junk).unwrap_err().to_string();
    assert!(e.contains("wrong magic"), "{e}");
}

/// The configuration of `text`, which must be accepted.
fn accepted(text: &str) -> Config {
    Config::from_str_named(text, "ok.toml").unwrap()
}

/// The refusal of the configuration of `text`.
fn err(text: &str) -> String {
    Config::from_str_named(text, "bad.toml")
        .unwrap_err()
        .to_string()
}

const RING: &str = "nu = 0.0\ndt = 0.1\nt_end = 1.0\n[initial]\nkind = \"ring\"\nradius = 1.0\ncirculation = 1.0\ncore = 0.1\nspacing = 0.05\n";

#[test]
fn configuration_errors_name_the_file_and_the_key() {
    accepted(RING);
    let e = err(&format!("{RING}bogus = 1\n"));
    assert!(e.contains("bad.toml") && e.contains("bogus"), "{e}");
    let e = err(&RING.replace("nu = 0.0", "nu = -0.1"));
    assert!(
        e.contains("bad.toml") && e.contains("`nu`") && e.contains(">= 0"),
        "{e}"
    );
    let e = err(&RING.replace("dt = 0.1", "dt = 0.0"));
    assert!(e.contains("`dt`"), "{e}");
    let e = err(&format!("{RING}[reinterpolation]\nratio = 0.9\n"));
    assert!(e.contains("reinterpolation.ratio"), "{e}");
    let e = err(&format!("{RING}[domain]\nperiodic = true\n"));
    assert!(
        e.contains("domain.periodic") && e.contains("free-space"),
        "{e}"
    );
    let e = err(&format!("{RING}[evaluation]\nmethod = \"nonsense\"\n"));
    assert!(e.contains("evaluation.method"), "{e}");
    let e = err(&format!("{RING}[evaluation]\nmethd = \"fmm\"\n"));
    assert!(e.contains("methd"), "{e}");
    let e = err(&RING.replace("radius = 1.0\n", ""));
    assert!(e.contains("initial.radius"), "{e}");
    let tg = "nu = 0.01\ndt = 0.1\nt_end = 1.0\n[domain]\nperiodic = true\n[initial]\nkind = \"taylor-green\"\nn = 16\n";
    accepted(tg);
    let e = err(&format!("{tg}[reinterpolation]\nspacing = 0.3\n"));
    assert!(e.contains("does not fit the box"), "{e}");
    let c = accepted(tg);
    assert_eq!(c.rbf_settings().filter, LatticeFilter::default());
    let c = accepted(&format!(
        "{tg}[reinterpolation]\nfilter = {{ kind = \"none\" }}\n"
    ));
    assert_eq!(c.rbf_settings().filter, LatticeFilter::None);
    let c = accepted(&format!(
        "{tg}[reinterpolation.filter]\nkind = \"exponential\"\nstrength = 36.0\norder = 8.0\n"
    ));
    assert_eq!(
        c.reinterpolation.filter,
        LatticeFilter::Exponential {
            strength: 36.0,
            order: 8.0
        }
    );
    let e = err(&format!(
        "{tg}[reinterpolation]\nfilter = {{ kind = \"exponential\", strength = 36.0, order = 0.5 }}\n"
    ));
    assert!(
        e.contains("reinterpolation.filter") && e.contains("order"),
        "{e}"
    );
    let e = err(&format!(
        "{tg}[reinterpolation]\nfilter = {{ kind = \"gaussian\" }}\n"
    ));
    assert!(e.contains("gaussian"), "{e}");
    let e = err(&tg.replace("t_end = 1.0", "t_end = 1.05"));
    assert!(e.contains("whole number of steps"), "{e}");
    let e = err(&format!("{RING}[evaluation]\nbackend = \"opencl\"\n"));
    assert!(
        e.contains("evaluation.backend") && e.contains("opencl"),
        "{e}"
    );
    let e = err(&format!("{RING}[evaluation]\ngrid = \"octree\"\n"));
    assert!(e.contains("evaluation.grid") && e.contains("octree"), "{e}");
    let e = err(&format!(
        "{RING}[evaluation]\ngrid = \"uniform\"\nbackend = \"cpu\"\n"
    ));
    assert!(e.contains("evaluation.grid") && e.contains("GPU"), "{e}");
    let c = accepted(&format!("{RING}[evaluation]\ngrid = \"uniform\"\n"));
    assert_eq!(c.evaluation.grid, vortex_fmm::GridChoice::Uniform);
    // the grid is not part of the checkpoint fingerprint either
    assert_eq!(c.fingerprint(), accepted(RING).fingerprint());
    for b in ["auto", "cpu", "cuda"] {
        let c = accepted(&format!(
            "{RING}[evaluation]\nbackend = \"{b}\"\ndevice = 1\n"
        ));
        assert_eq!(c.evaluation.backend.to_string(), b);
        // the backend is not part of the checkpoint fingerprint
        assert_eq!(c.fingerprint(), accepted(RING).fingerprint());
    }
}

#[test]
fn a_missing_configuration_file_is_named() {
    let e = Config::from_file(Path::new("/nonexistent/x.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/x.toml"), "{e}");
}

#[test]
fn the_vortex_configurations_in_runs_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../runs");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("vortex-") && name.ends_with(".toml") {
            Config::from_file(&p).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 6, "{n} configurations");
    let big = Config::from_file(&dir.join("vortex-isotropic-256.toml")).unwrap();
    assert_eq!(
        (big.lattice_n(), big.evaluation.order, big.domain.periodic),
        (Some(256), 10, true)
    );
}
