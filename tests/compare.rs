//! `vortex compare` end to end on a tiny Taylor-Green case: both runs from the same field, the
//! comparison files, and the refusals (a run without a spectral twin, an earlier comparison).

mod common;
use std::path::Path;

fn vortex(args: &[&str]) -> (bool, String) {
    common::vortex_status(args, "info")
}

const TG8: &str = "nu = 0.05\ndt = 0.05\nt_end = 0.3\n[domain]\nperiodic = true\n\
    box_length = 6.283185307179586\nimage_levels = 2\n[evaluation]\nmethod = \"fmm\"\norder = 6\n\
    theta = 0.5\n[initial]\nkind = \"taylor-green\"\nn = 8\n[reinterpolation]\nratio = 1.2\n\
    [output]\ndiagnostics_every = 2\ngrid = 8\nprogress = false\n";

/// The rows of a CSV with a header, as numbers.
fn rows(path: &Path) -> Vec<Vec<f64>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|x| x.parse().unwrap()).collect())
        .collect()
}

#[test]
fn compare_runs_both_solvers_from_one_field_and_writes_the_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tg8.toml");
    std::fs::write(&cfg, TG8).unwrap();
    let out = dir.path().join("cmp");
    let (c, o) = (cfg.to_str().unwrap(), out.to_str().unwrap());
    let (ok, log) = vortex(&[
        "compare",
        c,
        "--out",
        o,
        "--backend",
        "cpu",
        "--threads",
        "2",
    ]);
    assert!(ok, "{log}");
    for f in [
        "comparison.csv",
        "comparison_spectra.csv",
        "comparison.png",
        "spectral.toml",
        "vortex/diagnostics.csv",
        "vortex/energy.png",
        "vortex/run.json",
        "spectral/energy.csv",
        "spectral/energy.png",
        "spectral/spectra.png",
    ] {
        assert!(out.join(f).is_file(), "{f} missing; log:\n{log}");
    }
    // one row per vortex diagnostics row (t = 0, 0.1, 0.2, 0.3), both solvers at each
    let r = rows(&out.join("comparison.csv"));
    let t: Vec<f64> = r.iter().map(|x| x[0]).collect();
    assert_eq!(t.len(), 4, "{t:?}");
    for (a, b) in t.iter().zip([0.0, 0.1, 0.2, 0.3]) {
        assert!((a - b).abs() < 1e-9, "{t:?}");
    }
    // the same field at t = 0: the unit Taylor-Green field has E = 1/8 on any grid; the blobs'
    // strengths interpolate its vorticity at the lattice points (RBF solve), so their velocity
    // there is the field's up to the interpolation error of an 8^3 lattice
    let (ev, es) = (r[0][1], r[0][2]);
    assert!((es - 0.125).abs() < 1e-12, "spectral E(0) = {es}");
    assert!(
        (ev / es - 1.0).abs() < 0.1,
        "vortex E(0) = {ev} against {es}"
    );
    // the columns of differences are those of the values
    for x in &r {
        assert!((x[5] - (x[1] / x[2] - 1.0)).abs() < 1e-9);
        assert!((x[6] - (x[3] / x[4] - 1.0)).abs() < 1e-9);
    }
    // both decay
    assert!(r[3][1] < r[0][1] && r[3][2] < r[0][2]);
    // the spectra at the common times, on the same wavenumbers
    let s = rows(&out.join("comparison_spectra.csv"));
    assert!(s.iter().any(|x| x[0] == 0.0) && s.iter().any(|x| (x[0] - 0.3).abs() < 1e-9));
    let png = std::fs::read(out.join("comparison.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    // the command says where the outputs went and how to look at them
    assert!(
        log.contains("comparison.png") && log.contains("look at"),
        "{log}"
    );
    // an earlier comparison is not replaced without --overwrite
    let (ok, err) = vortex(&["compare", c, "--out", o, "--backend", "cpu"]);
    assert!(
        !ok && err.contains("--overwrite") && err.contains("comparison.csv"),
        "{err}"
    );
}

#[test]
fn a_run_without_a_spectral_twin_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, key) in [
        (TG8.replace("6.283185307179586", "6.0"), "domain.box_length"),
        (
            "nu = 0.01\ndt = 0.1\nt_end = 1.0\n[initial]\nkind = \"blob\"\nsigma = 0.5\n\
             strength = [0.0, 0.0, 1.0]\nspacing = 0.5\n"
                .to_string(),
            "domain.periodic",
        ),
    ] {
        let cfg = dir.path().join("bad.toml");
        std::fs::write(&cfg, text).unwrap();
        let out = dir.path().join(key);
        let (ok, err) = vortex(&[
            "compare",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--backend",
            "cpu",
        ]);
        assert!(!ok && err.contains(key), "{key}: {err}");
        assert!(!out.exists(), "{key}: nothing is created");
    }
}
