use vortex_spectral::config::{Config, ConfigError};
use vortex_spectral::io;
use vortex_spectral::run::{run_config, RunError, RunOptions, CHECKPOINT_FILE};

const BASE: &str = r#"
n = 16
nu = 0.02
t_end = 0.5
dt = 0.025
diagnostics_interval = 0.05
spectrum_times = [0.0, 0.5]
field_times = [0.5]
field_formats = ["npy", "vtk"]
vorticity = true
checkpoint_interval = 0.25
threads = 2
[initial]
kind = "isotropic"
k_peak = 3.0
seed = 5
energy = 0.5
"#;

fn cfg(text: &str) -> Config {
    Config::from_str_named(text, "test.toml").unwrap()
}

/// The refusal of the configuration of `text` (file `x.toml`).
fn refusal(text: &str) -> ConfigError {
    Config::from_str_named(text, "x.toml").unwrap_err()
}

fn opts(dir: &std::path::Path, restart: Option<std::path::PathBuf>) -> RunOptions {
    RunOptions {
        out: dir.to_path_buf(),
        restart,
        progress: false,
        overwrite: false,
    }
}

#[test]
fn config_errors_name_file_and_key() {
    let e = refusal(&format!("{BASE}\nbogus_key = 1\n"));
    let s = e.to_string();
    assert!(s.contains("x.toml") && s.contains("bogus_key"), "{s}");
    let e = refusal(&BASE.replace("k_peak = 3.0", "k_peak = 3.0\nkpeak = 2"));
    assert!(e.to_string().contains("kpeak"), "{e}");
    let e = refusal(&BASE.replace("n = 16", "n = 17"));
    assert!(
        matches!(&e, ConfigError::Invalid { key, .. } if key == "n"),
        "{e}"
    );
    let e = refusal(&BASE.replace("n = 16", "n = 6"));
    assert!(e.to_string().contains("`n`"), "{e}");
    let e = refusal(&BASE.replace("nu = 0.02", "nu = -0.1"));
    assert!(
        matches!(&e, ConfigError::Invalid { key, .. } if key == "nu"),
        "{e}"
    );
    let e = refusal(&BASE.replace("nu = 0.02", "nu = 0.0"));
    assert!(e.to_string().contains("inviscid"), "{e}");
    let e = refusal(&BASE.replace("t_end = 0.5\n", ""));
    assert!(e.to_string().contains("t_end"), "{e}");
    let e = refusal(&BASE.replace("seed = 5\n", ""));
    assert!(e.to_string().contains("initial.seed"), "{e}");
    let e = refusal(&BASE.replace("dt = 0.025", "cfl = 0.5\ndt = 0.025"));
    assert!(e.to_string().contains("cfl"), "{e}");
    assert!(Config::from_str_named(
        &BASE.replace("nu = 0.02", "nu = 0.0\ninviscid = true"),
        "x.toml"
    )
    .is_ok());
    let e = Config::from_file(std::path::Path::new("/nonexistent/c.toml")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/c.toml"));
}

#[test]
fn run_writes_outputs_and_restart_is_bit_for_bit() {
    let d = tempfile::tempdir().unwrap();
    let full = d.path().join("full");
    let c = cfg(BASE);
    run_config(&c, &opts(&full, None)).unwrap();
    for f in [
        "energy.csv",
        "energy.png",
        "spectra.png",
        CHECKPOINT_FILE,
        "velocity_00000.5000.npy",
        "vorticity_00000.5000.npy",
        "fields_00000.5000.vtk",
        "spectrum_00000.0000.csv",
        "spectrum_00000.5000.csv",
    ] {
        assert!(full.join(f).exists(), "missing {f}");
    }
    let csv = std::fs::read_to_string(full.join("energy.csv")).unwrap();
    assert!(csv.starts_with("t,energy,enstrophy,dissipation,u_rms,taylor_microscale,re_lambda,integral_scale,eddy_turnover,kmax_eta\n"));
    assert_eq!(csv.lines().count(), 1 + 11, "{csv}");
    let npy = std::fs::read(full.join("velocity_00000.5000.npy")).unwrap();
    assert_eq!(npy.len() % 64, (16 * 16 * 16 * 3 * 8) % 64);
    assert!(String::from_utf8_lossy(&npy[..128]).contains("(16, 16, 16, 3)"));

    // Half run, then restart to the end.
    let half = d.path().join("half");
    let mut c1 = c.clone();
    c1.t_end = 0.25;
    run_config(&c1, &opts(&half, None)).unwrap();
    let ck = half.join("restart.bin");
    std::fs::copy(half.join(CHECKPOINT_FILE), &ck).unwrap();
    run_config(&c, &opts(&half, Some(ck))).unwrap();
    let a = io::read_checkpoint(&full.join(CHECKPOINT_FILE)).unwrap();
    let b = io::read_checkpoint(&half.join(CHECKPOINT_FILE)).unwrap();
    assert_eq!(a.steps, b.steps);
    assert_eq!(a.t.to_bits(), b.t.to_bits());
    assert!(
        a.data
            .iter()
            .zip(&b.data)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "restart differs"
    );
    let csv2 = std::fs::read_to_string(half.join("energy.csv")).unwrap();
    assert_eq!(csv2.lines().count(), csv.lines().count());
}

#[test]
fn corrupt_or_mismatched_checkpoint_is_rejected_without_overwriting() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("o");
    let mut c = cfg(BASE);
    c.t_end = 0.05;
    c.field_times.clear();
    run_config(&c, &opts(&out, None)).unwrap();
    let ck = out.join(CHECKPOINT_FILE);
    let before_ck = std::fs::read(&ck).unwrap();
    let before_csv = std::fs::read(out.join("energy.csv")).unwrap();
    // Flip one byte of the payload.
    let bad = d.path().join("bad.bin");
    let mut bytes = before_ck.clone();
    let i = bytes.len() - 100;
    bytes[i] ^= 0x55;
    std::fs::write(&bad, &bytes).unwrap();
    let mut c2 = c.clone();
    c2.t_end = 0.1;
    let e = run_config(&c2, &opts(&out, Some(bad.clone()))).unwrap_err();
    assert!(e.to_string().contains("checksum"), "{e}");
    // Truncated.
    std::fs::write(&bad, &before_ck[..before_ck.len() / 2]).unwrap();
    let e = run_config(&c2, &opts(&out, Some(bad.clone()))).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    // Not a checkpoint.
    std::fs::write(&bad, b"hello").unwrap();
    let e = run_config(&c2, &opts(&out, Some(bad.clone()))).unwrap_err();
    assert!(e.to_string().contains("magic"), "{e}");
    // Mismatched grid.
    let mut c3 = c2.clone();
    c3.n = 32;
    let e = run_config(&c3, &opts(&out, Some(ck.clone()))).unwrap_err();
    assert!(matches!(e, RunError::Mismatch { .. }), "{e}");
    assert_eq!(std::fs::read(&ck).unwrap(), before_ck);
    assert_eq!(std::fs::read(out.join("energy.csv")).unwrap(), before_csv);
}

#[test]
fn blow_up_stops_with_step_and_keeps_checkpoint() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("o");
    let text = r#"
n = 16
nu = 0.0
inviscid = true
t_end = 1000.0
dt = 2.0
checkpoint_interval = 2.0
[health]
cfl_warn = 1e9
cfl_limit = 1e9
[initial]
kind = "taylor-green"
amplitude = 20.0
"#;
    // with the default thresholds the per-step check refuses the first step (CFL about 100)
    let strict = cfg(&text
        .replace("1e9", "2.5")
        .replace("cfl_warn = 2.5", "cfl_warn = 1.0"));
    let e = run_config(&strict, &opts(&d.path().join("strict"), None)).unwrap_err();
    assert!(
        matches!(e, RunError::Unstable { step: 1, .. }) && e.to_string().contains("cfl_limit"),
        "{e}"
    );
    // without it, the blow-up checks: the thresholds off
    let c = cfg(text);
    let e = run_config(&c, &opts(&out, None)).unwrap_err();
    let s = e.to_string();
    // either the solver meets a non-finite value, or (here first) the energy check at a
    // checkpoint time refuses the state: no checkpoint of a blown-up state is written
    assert!(
        matches!(e, RunError::BlewUp { .. } | RunError::Unhealthy { .. }),
        "{s}"
    );
    assert!(s.contains("at step") || s.contains("blew up"), "{s}");
    if out.join(CHECKPOINT_FILE).exists() {
        let ck = io::read_checkpoint(&out.join(CHECKPOINT_FILE)).unwrap();
        assert!(ck.data.iter().all(|v| v.is_finite()));
    }
}

#[test]
fn backend_key_is_parsed_and_checked() {
    use vortex_spectral::Backend;
    assert_eq!(cfg(BASE).backend, Backend::Auto);
    assert_eq!(
        cfg(&format!("backend = \"cpu\"\n{BASE}")).backend,
        Backend::Cpu
    );
    assert_eq!(
        cfg(&format!("backend = \"cuda\"\n{BASE}")).backend,
        Backend::Cuda
    );
    let e = refusal(&format!("backend = \"gpu\"\n{BASE}"));
    let s = e.to_string();
    assert!(
        s.contains("x.toml") && s.contains("backend") && s.contains("gpu"),
        "{s}"
    );
    assert_eq!("cuda".parse::<Backend>(), Ok(Backend::Cuda));
    assert!("gpu".parse::<Backend>().is_err());
    // backend = "cuda" without a usable GPU is an error naming the reason, not a panic
    if let Err(why) = vortex_spectral::backend::cuda_usable() {
        let d = tempfile::tempdir().unwrap();
        let mut c = cfg(BASE);
        c.backend = Backend::Cuda;
        let e = run_config(&c, &opts(d.path(), None)).unwrap_err();
        assert!(e.to_string().contains(&why), "{e} / {why}");
    }
}

/// The whole run on the CPU and on the GPU: the final checkpoints agree to round-off.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --release --workspace --features gpu-tests"
)]
fn cpu_and_cuda_runs_agree() {
    if let Err(why) = vortex_spectral::backend::cuda_usable() {
        panic!("no usable CUDA device: {why}");
    }
    let d = tempfile::tempdir().unwrap();
    let mut ck = Vec::new();
    for b in [
        vortex_spectral::Backend::Cpu,
        vortex_spectral::Backend::Cuda,
    ] {
        let mut c = cfg(BASE);
        c.backend = b;
        let out = d.path().join(b.to_string());
        run_config(&c, &opts(&out, None)).unwrap();
        ck.push(io::read_checkpoint(&out.join(CHECKPOINT_FILE)).unwrap());
    }
    assert_eq!(ck[0].steps, ck[1].steps);
    let num: f64 = ck[0]
        .data
        .iter()
        .zip(&ck[1].data)
        .map(|(a, b)| (a - b) * (a - b))
        .sum();
    let den: f64 = ck[0].data.iter().map(|a| a * a).sum();
    let rel = (num / den).sqrt();
    println!(
        "cpu vs cuda run, {} steps: relative difference {rel:.2e}",
        ck[0].steps
    );
    assert!(rel < 1e-12, "{rel:e}");
}
