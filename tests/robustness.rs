//! Runs that survive a cluster: the `vortex` binary under signals, with corrupt checkpoints,
//! occupied output directories, impossible sizes and unstable steps (the cases of
//! `validation/robustness/README.md`). Every test spawns the binary.

mod common;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Exit status of a run stopped by a signal after its checkpoint (`vortex_spectral::durable`).
const EXIT_INTERRUPTED: i32 = 75;

/// A vortex-method run of a few hundred milliseconds: Taylor-Green on 6^3 particles (the case of
/// `validation/robustness/sigterm_restarts.sh`) with time step `dt` to `t_end`, no periodic
/// checkpoints, and `extra` lines of `[output]` or further tables.
fn tiny(dt: f64, t_end: f64, extra: &str) -> String {
    let case = include_str!("../validation/robustness/taylor-green-6.toml");
    let times = "dt = 0.05\nt_end = 3.0\n";
    assert!(case.contains(times));
    let case = case.replace(times, &format!("dt = {dt}\nt_end = {t_end}\n"));
    format!("{case}checkpoint_every = 0\n{extra}\n")
}

fn vortex() -> Command {
    common::vortex_command("warn")
}

fn run(args: &[&str]) -> Output {
    vortex().args(args).output().expect("spawn vortex")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `vortex particles --n N` written to DIR/p.npy; its path.
fn particles(dir: &Path, n: usize) -> PathBuf {
    let p = dir.join("p.npy");
    let n = n.to_string();
    assert!(run(&["particles", "--n", &n, "--out", s(&p)])
        .status
        .success());
    p
}

/// `vortex run CONFIG --out OUT`, which must succeed.
fn run_ok(config: &Path, out: &Path) {
    let o = run(&["run", s(config), "--out", s(out)]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `vortex run CONFIG --out OUT`, which must fail with status 1.
fn run_refused(config: &Path, out: &Path) -> Output {
    let o = run(&["run", s(config), "--out", s(out)]);
    assert_eq!(o.status.code(), Some(1));
    o
}

/// `vortex eval --particles PARTICLES --out OUT --backend cpu EXTRA...`.
fn eval_cpu(particles: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut a = vec![
        "eval",
        "--particles",
        s(particles),
        "--out",
        s(out),
        "--backend",
        "cpu",
    ];
    a.extend(extra);
    run(&a)
}

/// `vortex eval --particles PARTICLES --out OUT`, which must fail with status 1; its standard
/// error.
fn eval_refused(particles: &Path, out: &Path) -> String {
    let o = run(&["eval", "--particles", s(particles), "--out", s(out)]);
    assert_eq!(o.status.code(), Some(1));
    stderr(&o)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn spawn(args: &[&str]) -> Child {
    vortex()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vortex")
}

fn wait_for(cond: impl Fn() -> bool, what: &str) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(120), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn kill(child: &Child, sig: i32) {
    // SAFETY: a plain kill(2) of our own child process.
    let r = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill failed");
}

/// Runs `args` to the end, restarting from `out/checkpoint.bin` after each SIGTERM sent `delays`
/// after the start (once the signal handlers are in place); returns how many were interrupted.
fn run_interrupted(args: &[&str], out: &Path, delays: &[Duration]) -> usize {
    let ck = out.join("checkpoint.bin");
    let mut interrupted = 0;
    for (i, delay) in delays
        .iter()
        .chain(std::iter::once(&Duration::MAX))
        .enumerate()
    {
        let mut a: Vec<&str> = args.to_vec();
        if i > 0 {
            a.extend(["--restart", s(&ck)]);
        }
        let child = spawn(&a);
        if *delay != Duration::MAX {
            // config.toml is written after the handlers are installed
            wait_for(|| out.join("config.toml").exists(), "config.toml");
            std::thread::sleep(*delay);
            let _ = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        }
        let o = child.wait_with_output().unwrap();
        match o.status.code() {
            Some(0) => return interrupted,
            Some(EXIT_INTERRUPTED) => interrupted += 1,
            c => panic!("exit {c:?}: {}", stderr(&o)),
        }
    }
    panic!("did not finish after {} restarts", delays.len());
}

#[test]
fn sigterm_checkpoints_and_restarts_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "tg.toml", &tiny(0.05, 2.0, ""));
    let full = dir.path().join("full");
    run_ok(&cfg, &full);
    let want = std::fs::read(full.join("checkpoint.bin")).unwrap();
    let out = dir.path().join("cut");
    let delays = [Duration::from_millis(150), Duration::from_millis(60)];
    let n = run_interrupted(&["run", s(&cfg), "--out", s(&out)], &out, &delays);
    assert!(
        n >= 1,
        "no run was interrupted (the signal came after the end)"
    );
    let got = std::fs::read(out.join("checkpoint.bin")).unwrap();
    assert!(
        got == want,
        "restarted run differs from the uninterrupted one"
    );
    // the interrupted invocations are recorded
    let info = std::fs::read_to_string(out.join("run.json")).unwrap();
    assert!(info.contains("interrupted by signal 15"), "{info}");
    assert!(info.contains("\"commit\""));
}

#[test]
fn spectral_sigint_keeps_every_energy_row() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "sp.toml",
        "n = 16\nnu = 0.01\nt_end = 1000.0\ndt = 0.01\nthreads = 1\nbackend = \"cpu\"\n\
         [initial]\nkind = \"taylor-green\"\n",
    );
    let out = dir.path().join("sp");
    let child = spawn(&["spectral", s(&cfg), "--out", s(&out), "--no-progress"]);
    let csv = out.join("energy.csv");
    let rows = || {
        std::fs::read_to_string(&csv)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    wait_for(|| rows() >= 12, "energy rows");
    let seen = rows();
    kill(&child, libc::SIGINT);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(EXIT_INTERRUPTED), "{}", stderr(&o));
    assert!(rows() >= seen, "rows lost: {} < {seen}", rows());
    let ck = vortex_spectral::io::read_checkpoint(&out.join("checkpoint.bin")).unwrap();
    let last_t: f64 = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // the row is printed with 16 significant digits
    assert!(
        (ck.t - last_t).abs() <= 1e-14 * last_t.abs(),
        "checkpoint (t = {}) and last energy row (t = {last_t}) disagree",
        ck.t
    );
    assert!(out.join("config.toml").exists() && out.join("run.json").exists());
}

#[test]
fn flipped_bits_in_a_checkpoint_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "tg.toml", &tiny(0.1, 0.3, ""));
    let out = dir.path().join("o");
    run_ok(&cfg, &out);
    let ck = out.join("checkpoint.bin");
    let good = std::fs::read(&ck).unwrap();
    // a corrupt copy in the run's own directory (a restart appends to that run)
    let bad = out.join("bad.bin");
    let mut state = 0x9e3779b97f4a7c15u64;
    for _ in 0..6 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let bit = (state % (8 * good.len() as u64)) as usize;
        let mut b = good.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        std::fs::write(&bad, &b).unwrap();
        let o = run(&["run", s(&cfg), "--out", s(&out), "--restart", s(&bad)]);
        assert_eq!(o.status.code(), Some(1), "bit {bit} accepted");
        let e = stderr(&o);
        assert!(e.contains("checkpoint") && e.contains("bad.bin"), "{e}");
    }
    assert!(!out.join("bad.bin.tmp").exists());
}

#[test]
fn changed_configuration_at_restart_is_listed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "tg.toml", &tiny(0.1, 0.3, ""));
    let out = dir.path().join("o");
    assert!(run(&["run", s(&cfg), "--out", s(&out)]).status.success());
    let changed = write(
        dir.path(),
        "tg2.toml",
        &tiny(0.05, 0.6, "").replace("nu = 0.05", "nu = 0.02"),
    );
    let ck = out.join("checkpoint.bin");
    let o = run(&["run", s(&changed), "--out", s(&out), "--restart", s(&ck)]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("dt: checkpoint 0.1, this run 0.05") && e.contains("nu: checkpoint 0.05"),
        "{e}"
    );
    // t_end may change
    let longer = write(dir.path(), "tg3.toml", &tiny(0.1, 0.5, ""));
    let o = run(&["run", s(&longer), "--out", s(&out), "--restart", s(&ck)]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn occupied_output_directory_is_refused_unless_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let snap = write(dir.path(), "a.toml", &tiny(0.1, 0.2, "snapshot_every = 1"));
    let out = dir.path().join("o");
    assert!(run(&["run", s(&snap), "--out", s(&out)]).status.success());
    assert!(out.join("particles_000001.vtp").exists());
    // the initial state only with output.snapshot_initial = true
    assert!(!out.join("particles_000000.vtp").exists());
    let before = std::fs::read(out.join("checkpoint.bin")).unwrap();
    let plain = write(dir.path(), "b.toml", &tiny(0.1, 0.2, ""));
    let o = run_refused(&plain, &out);
    assert!(stderr(&o).contains("--overwrite"), "{}", stderr(&o));
    assert_eq!(std::fs::read(out.join("checkpoint.bin")).unwrap(), before);
    let o = run(&["run", s(&plain), "--out", s(&out), "--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!out.join("particles_000001.vtp").exists(), "stale snapshot");
    // the spectral solver follows the same rule
    let sp = write(
        dir.path(),
        "sp.toml",
        "n = 8\nnu = 0.01\nt_end = 0.02\ndt = 0.01\nbackend = \"cpu\"\n[initial]\nkind = \"taylor-green\"\n",
    );
    let o = run(&["spectral", s(&sp), "--out", s(&out), "--no-progress"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));
}

#[test]
fn spectral_cfl_check_failures_in_run_json_and_steps_zero() {
    let dir = tempfile::tempdir().unwrap();
    let sp = |dt: f64| {
        format!(
            "n = 8\nnu = 0.01\nt_end = {}\ndt = {dt}\nbackend = \"cpu\"\n\
             [initial]\nkind = \"taylor-green\"\n",
            4.0 * dt
        )
    };
    // max(|u|+|v|+|w|) = 1 on the grid: dt = 1 gives CFL 1.27, a warning; dt = 4 about 5,
    // refused at the first step
    let warn = write(dir.path(), "w.toml", &sp(1.0));
    let o = run(&[
        "spectral",
        s(&warn),
        "--out",
        s(&dir.path().join("w")),
        "--no-progress",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("above health.cfl_warn"),
        "{}",
        stderr(&o)
    );
    let bad = write(dir.path(), "b.toml", &sp(4.0));
    let out = dir.path().join("b");
    let o = run(&["spectral", s(&bad), "--out", s(&out), "--no-progress"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("health.cfl_limit"), "{}", stderr(&o));
    // the failed invocation is recorded with its error
    let info = std::fs::read_to_string(out.join("run.json")).unwrap();
    assert!(info.contains("\"status\": \"failed\""), "{info}");
    assert!(
        info.contains("health.cfl_limit") && info.contains("\"end\""),
        "{info}"
    );
    // a refused directory is left alone: no record of the refused invocation
    let o = run(&["spectral", s(&warn), "--out", s(&out), "--no-progress"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(out.join("run.json")).unwrap(), info);
    // `vortex run --steps 0`: the state at t = 0 written, said plainly
    let tg = write(dir.path(), "tg.toml", &tiny(0.1, 0.3, ""));
    let out = dir.path().join("z");
    let o = run(&["run", s(&tg), "--out", s(&out), "--steps", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("no step taken"), "{}", stderr(&o));
    assert!(out.join("checkpoint.bin").exists());
    let info = std::fs::read_to_string(out.join("run.json")).unwrap();
    assert!(info.contains("\"status\": \"completed\""), "{info}");
    // a vortex run that fails is recorded too
    let unstable = write(dir.path(), "u.toml", &tiny(5.0, 10.0, ""));
    let out = dir.path().join("u");
    run_refused(&unstable, &out);
    let info = std::fs::read_to_string(out.join("run.json")).unwrap();
    assert!(
        info.contains("\"status\": \"failed\"") && info.contains("unstable"),
        "{info}"
    );
}

#[test]
fn one_vocabulary_and_time_intervals_in_both_solvers() {
    let dir = tempfile::tempdir().unwrap();
    // outputs by simulation time: rows at t = 0, 0.2, 0.4, 0.5 (the end), a snapshot at
    // t = 0, 0.3 and the end; spectra named by the time as the spectral solver names them
    let cfg = tiny(
        0.1,
        0.5,
        "diagnostics_interval = 0.2\nsnapshot_interval = 0.3\ncheckpoint_interval = 0.25",
    )
    .replace("diagnostics_every = 5", "diagnostics_every = 0");
    let a = write(dir.path(), "a.toml", &cfg);
    let out = dir.path().join("a");
    run_ok(&a, &out);
    let steps: Vec<i64> = std::fs::read_to_string(out.join("diagnostics.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| (10.0 * l.split(',').next().unwrap().parse::<f64>().unwrap()).round() as i64)
        .collect();
    // step 3: the checkpoint at t = 0.3 (after 0.25) writes its row first
    assert_eq!(steps, [0, 2, 3, 4, 5]);
    for f in [
        "spectrum_00000.2000.csv",
        "spectrum_00000.5000.csv",
        "particles_000003.vtp",
        "particles_000005.vtp",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    assert!(!out.join("particles_000002.vtp").exists());
    // `[initial] type` is refused in both solvers, naming `kind`
    let bad = write(dir.path(), "b.toml", &cfg.replace("kind = ", "type = "));
    let o = run(&["run", s(&bad), "--out", s(&dir.path().join("b"))]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("initial.kind"), "{}", stderr(&o));
    let sp = "n = 8\nnu = 0.01\nt_end = 0.02\ndt = 0.01\nbackend = \"cpu\"\n\
              diagnostics_interval = 0.01\ncheckpoint_interval = 0.01\n\
              spectrum_times = [0.01]\n[initial]\nkind = \"taylor-green\"\n";
    let good = write(dir.path(), "sp.toml", sp);
    let out = dir.path().join("sp");
    let o = run(&["spectral", s(&good), "--out", s(&out), "--no-progress"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.join("spectrum_00000.0100.csv").exists());
    for (old, new) in [
        ("kind = ", "type = "),
        ("diagnostics_interval", "stats_every"),
        ("checkpoint_interval", "checkpoint_every"),
    ] {
        let p = write(dir.path(), "sp2.toml", &sp.replace(old, new));
        let o = run(&["spectral", s(&p), "--out", s(&dir.path().join("sp2"))]);
        assert_eq!(o.status.code(), Some(1));
        let want = old.trim_end_matches(" = ");
        assert!(
            stderr(&o).contains(&format!(
                "use `{}",
                if want == "kind" { "initial.kind" } else { want }
            )),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn overflowing_coordinates_and_unstable_steps_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = particles(dir.path(), 200);
    // move particle 7 to 1e50: the expansions would overflow
    let mut b = std::fs::read(&p).unwrap();
    let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
    let at = 10 + hl + 7 * 7 * 8;
    b[at..at + 8].copy_from_slice(&1e50f64.to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    let err = eval_refused(&p, &dir.path().join("e"));
    assert!(err.contains("overflow"), "{err}");
    // dt = 5 on Taylor-Green: advective CFL about 5, refused before the first step
    // re-interpolated every step, so that core spreading (checked first) stays in bounds
    let cfg = write(
        dir.path(),
        "tg.toml",
        &tiny(5.0, 50.0, "").replace("every = 4", "every = 1"),
    );
    let out = dir.path().join("cfl");
    let o = run_refused(&cfg, &out);
    let e = stderr(&o);
    assert!(e.contains("unstable time step") && e.contains("CFL"), "{e}");
    assert!(
        !out.join("checkpoint.bin").exists(),
        "an unstable state was checkpointed"
    );
}

#[test]
fn impossible_sizes_are_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let o = run(&[
        "particles",
        "--n",
        "1e12",
        "--out",
        s(&dir.path().join("p.npy")),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("GiB") && e.contains("available"), "{e}");
    let cfg = write(
        dir.path(),
        "big.toml",
        &tiny(0.1, 1.0, "").replace("n = 6", "n = 2000000"),
    );
    let o = run(&["run", s(&cfg), "--out", s(&dir.path().join("big"))]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("GiB") && e.contains("available"), "{e}");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "refusals took {:?}",
        t.elapsed()
    );
}

fn help(args: &[&str]) -> String {
    let o = run(args);
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The long flags of a `--help` text (without --help and --version).
fn flags(help: &str) -> Vec<String> {
    let mut f: Vec<String> = help
        .lines()
        .filter_map(|l| {
            let t = l.trim_start();
            let t = t
                .strip_prefix("-")
                .filter(|_| t.len() > 3 && &t[2..4] == ", ")
                .map_or(t, |_| &t[4..]);
            t.strip_prefix("--")
                .map(|r| format!("--{}", r.split([' ', '=', '<']).next().unwrap_or("")))
        })
        .filter(|f| f != "--help" && f != "--version")
        .collect();
    f.dedup();
    f
}

#[test]
fn readme_lists_every_command_and_flag() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let top = help(&["--help"]);
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 5, "{top}");
    for c in &commands {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `vortex {c}")))
            .unwrap_or_else(|| panic!("README has no row for `vortex {c}`"));
        if ["run", "spectral", "particles", "config"].contains(c) {
            for f in flags(&help(&[c, "--help"])) {
                assert!(row.contains(&f), "README row of `vortex {c}` lacks {f}");
            }
        }
    }
    // eval: every flag somewhere, and the default order and theta as the binary has them
    let eval = help(&["eval", "--help"]);
    for f in flags(&eval) {
        assert!(readme.contains(&f), "README lacks eval's {f}");
    }
    let default_of = |flag: &str| -> String {
        // the flag's line and its continuation lines (short or long help layout)
        let mut lines = eval
            .lines()
            .skip_while(|l| !l.trim_start().starts_with(flag));
        let first = lines
            .next()
            .unwrap_or_else(|| panic!("{flag} not in eval --help"));
        let block: String = std::iter::once(first)
            .chain(lines.take_while(|l| !l.trim().is_empty() && !l.trim_start().starts_with('-')))
            .collect::<Vec<_>>()
            .join(" ");
        let d = block.split("[default: ").nth(1).expect("a default");
        d[..d.find(']').unwrap()].to_string()
    };
    let (p, theta) = (default_of("--order"), default_of("--theta"));
    assert!(
        readme.contains(&format!("order {p}, theta {theta}")),
        "README's eval defaults differ from the binary's (order {p}, theta {theta})"
    );
    assert!(eval.contains("ppm"), "eval --help does not list ppm");
}

/// A spectral configuration of a few seconds at most (16^3 Taylor-Green on the CPU).
fn tiny_spectral(extra: &str) -> String {
    format!(
        "n = 16\nnu = 0.01\nt_end = 0.2\ndt = 0.01\nthreads = 1\nbackend = \"cpu\"\n{extra}\n\
         [initial]\nkind = \"taylor-green\"\n"
    )
}

/// The `run.json` of `out` as JSON.
fn run_json(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap()
}

#[test]
fn concurrent_starts_into_one_directory_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let vcfg = write(dir.path(), "tg.toml", &tiny(0.1, 1.0, ""));
    let scfg = write(dir.path(), "sp.toml", &tiny_spectral(""));
    for round in 0..4 {
        let (cmd, cfg) = if round % 2 == 0 {
            ("run", &vcfg)
        } else {
            ("spectral", &scfg)
        };
        let out = dir.path().join(format!("o{round}"));
        let children: Vec<Child> = (0..3)
            .map(|_| spawn(&[cmd, s(cfg), "--out", s(&out)]))
            .collect();
        let outs: Vec<Output> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let won = outs.iter().filter(|o| o.status.success()).count();
        assert_eq!(won, 1, "round {round} ({cmd}): {won} of 3 proceeded");
        for o in outs.iter().filter(|o| !o.status.success()) {
            let e = stderr(o);
            assert_eq!(o.status.code(), Some(1), "{e}");
            // locked while the winner runs, or already holding its finished run
            assert!(
                e.contains("in use by another process: pid") || e.contains("not empty"),
                "round {round}: {e}"
            );
        }
        // one invocation recorded, completed
        let inv = run_json(&out)["invocations"].as_array().unwrap().clone();
        assert_eq!(inv.len(), 1, "{inv:?}");
        assert_eq!(inv[0]["status"], "completed");
    }
}

#[test]
fn restarts_that_would_mislead_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "tg.toml", &tiny(0.1, 0.3, ""));
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    assert!(run(&["run", s(&cfg), "--out", s(&a)]).status.success());
    assert!(run(&["run", s(&cfg), "--out", s(&b)]).status.success());
    let ck = a.join("checkpoint.bin");
    let before = std::fs::read_to_string(b.join("diagnostics.csv")).unwrap();
    // into another run's directory
    let longer = write(dir.path(), "tg2.toml", &tiny(0.1, 0.5, ""));
    let o = run(&["run", s(&longer), "--out", s(&b), "--restart", s(&ck)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not one of its checkpoints"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(b.join("diagnostics.csv")).unwrap(),
        before
    );
    // t_end at the checkpoint's time: nothing to run, refused (not "completed")
    let o = run(&["run", s(&cfg), "--out", s(&a), "--restart", s(&ck)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("at or before the checkpoint's time"),
        "{}",
        stderr(&o)
    );
    let inv = run_json(&a)["invocations"].as_array().unwrap().clone();
    assert_eq!(inv.last().unwrap()["status"], "failed", "{inv:?}");
    // the same for the spectral solver
    let sp = write(dir.path(), "sp.toml", &tiny_spectral(""));
    let so = dir.path().join("s");
    assert!(run(&["spectral", s(&sp), "--out", s(&so)]).status.success());
    let o = run(&[
        "spectral",
        s(&sp),
        "--out",
        s(&so),
        "--restart",
        s(&so.join("checkpoint.bin")),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("at or before the checkpoint's time"),
        "{}",
        stderr(&o)
    );
    // a restart into a later t_end keeps the peak dissipation of the whole history
    let sp2 = write(
        dir.path(),
        "sp2.toml",
        &tiny_spectral("").replace("t_end = 0.2", "t_end = 0.3"),
    );
    let o = run(&[
        "spectral",
        s(&sp2),
        "--out",
        s(&so),
        "--restart",
        s(&so.join("checkpoint.bin")),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = std::fs::read_to_string(so.join("energy.csv")).unwrap();
    let peak = rows
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(3).unwrap().parse::<f64>().unwrap())
        .fold(0.0, f64::max);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        stdout.contains(&format!("peak dissipation {peak:.6e}")),
        "{peak:e}: {stdout}"
    );
}

#[test]
fn eval_refuses_to_overwrite_and_leaves_no_partial_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = particles(dir.path(), 200);
    let out = dir.path().join("e");
    let ev = |extra: &[&str]| eval_cpu(&p, &out, extra);
    assert!(ev(&[]).status.success());
    let first = std::fs::read(out.join("velocity.npy")).unwrap();
    let o = ev(&["--order", "4"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--overwrite"), "{}", stderr(&o));
    assert_eq!(std::fs::read(out.join("velocity.npy")).unwrap(), first);
    assert!(ev(&["--order", "4", "--overwrite"]).status.success());
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    // a .npy whose header claims more data than the file holds: refused before allocating
    let bytes = std::fs::read(&p).unwrap();
    let trunc = dir.path().join("t.npy");
    // the shape replaced in place, the header kept at its length (padding spaces removed)
    let (from, to) = (&b"(200, 7)"[..], &b"(90000000000, 7)"[..]);
    let at = bytes.windows(from.len()).position(|w| w == from).unwrap();
    let mut t = bytes[..at].to_vec();
    t.extend_from_slice(to);
    t.extend_from_slice(&bytes[at + from.len()..at + from.len() + 40]);
    t.extend_from_slice(&bytes[at + from.len() + 40 + to.len() - from.len()..]);
    std::fs::write(&trunc, &t).unwrap();
    let err = eval_refused(&trunc, &dir.path().join("e2"));
    assert!(
        err.contains("header claims shape [90000000000, 7]"),
        "{err}"
    );
}

#[test]
fn absurd_values_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let ring = |core: &str, center: &str| {
        format!(
            "nu = 0.001\ndt = 0.01\nt_end = 0.02\n[domain]\nperiodic = false\n[initial]\n\
             kind = \"ring\"\nradius = 1.0\ncirculation = 1.0\ncore = {core}\nspacing = 0.1\n\
             center = {center}\n[output]\nprogress = false\n"
        )
    };
    let cases: Vec<(&str, String, &str)> = vec![
        ("run", ring("1e-300", "[0.0, 0.0, 0.0]"), "initial.core"),
        ("run", ring("0.1", "[nan, 0.0, 0.0]"), "initial.center"),
        ("run", ring("0.1", "[1e200, 0.0, 0.0]"), "initial.center"),
        (
            "spectral",
            tiny_spectral("").replace("kind", "amplitude = nan\nkind"),
            "initial.amplitude",
        ),
        (
            "spectral",
            tiny_spectral("").replace("kind", "amplitude = 1e200\nkind"),
            "initial.amplitude",
        ),
        (
            "spectral",
            tiny_spectral("").replace("kind", "amplitude = 0.0\nkind"),
            "initial.amplitude",
        ),
        (
            "spectral",
            tiny_spectral("spectrum_times = [-1.0]"),
            "spectrum_times",
        ),
        (
            "spectral",
            tiny_spectral("field_times = [nan]"),
            "field_times",
        ),
        (
            "spectral",
            tiny_spectral("diagnostics_interval = 1e-5"),
            "diagnostics_interval",
        ),
    ];
    for (i, (cmd, text, key)) in cases.iter().enumerate() {
        let cfg = write(dir.path(), &format!("c{i}.toml"), text);
        let out = dir.path().join(format!("o{i}"));
        let o = run(&[cmd, s(&cfg), "--out", s(&out)]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "case {i}: {e}");
        assert!(
            e.contains(key),
            "case {i}: the error does not name {key}: {e}"
        );
    }
}

#[test]
fn impossible_sizes_in_every_command_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let sp = write(
        dir.path(),
        "big.toml",
        &tiny_spectral("").replace("n = 16", "n = 4096"),
    );
    let big_out = dir.path().join("b");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["spectral", s(&sp), "--out", s(&big_out)], "GiB"),
        (
            vec!["bench", "spectral", "--n", "4096", "--backend", "cpu"],
            "GiB",
        ),
        (
            vec!["bench", "fmm", "--n", "1e11", "--backend", "cpu"],
            "GiB",
        ),
        (vec!["bench", "m2l", "--orders", "0..3"], "outside 1..=20"),
        (vec!["bench", "m2l", "--orders", "25..26"], "outside 1..=20"),
    ];
    for (args, want) in &cases {
        let o = run(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e}");
    }
    // a run that would take forever is announced with a warning before it starts
    let slow = write(dir.path(), "slow.toml", &tiny(1e-9, 1.0, ""));
    let mut c = vortex()
        .args(["run", s(&slow), "--out", s(&dir.path().join("slow"))])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = c.stderr.take().unwrap();
    let mut line = String::new();
    use std::io::Read;
    let mut buf = [0u8; 4096];
    while !line.contains("steps, estimated") {
        let k = err.read(&mut buf).unwrap();
        assert!(k > 0, "no announcement: {line}");
        line.push_str(&String::from_utf8_lossy(&buf[..k]));
    }
    kill(&c, libc::SIGKILL);
    let _ = c.wait();
    assert!(
        line.contains("1000000000 steps") && line.contains("long run"),
        "{line}"
    );
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
}

#[test]
fn sighup_and_sigusr2_checkpoint_like_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    // 1e4 steps (the decay check allows t_end = 1e3 at nu = 0.05): still running when signalled
    let cfg = write(dir.path(), "tg.toml", &tiny(0.1, 1e3, ""));
    for (i, sig) in [libc::SIGHUP, libc::SIGUSR2].into_iter().enumerate() {
        let out = dir.path().join(format!("o{i}"));
        let child = spawn(&["run", s(&cfg), "--out", s(&out)]);
        wait_for(|| out.join("diagnostics.csv").exists(), "the first row");
        // killed runs leave a record from the start
        assert_eq!(run_json(&out)["invocations"][0]["status"], "running");
        kill(&child, sig);
        let o = child.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(EXIT_INTERRUPTED),
            "signal {sig}: {}",
            stderr(&o)
        );
        assert!(out.join("checkpoint.bin").exists());
        let inv = run_json(&out);
        assert_eq!(inv["invocations"][0]["status"], "interrupted", "{inv}");
        assert_eq!(inv["invocations"][0]["signal"], sig);
        assert!(!out.join("checkpoint.bin.tmp").exists());
    }
}

/// A full disk: set `VORTEX_SMALL_TMPFS` to a directory on a small tmpfs (e.g. `mount -t tmpfs
/// -o size=64k tmpfs /mnt/small`, which needs root, so CI cannot mount it itself).
#[test]
#[ignore = "needs a small tmpfs mounted by root: set VORTEX_SMALL_TMPFS to its path"]
fn a_full_disk_leaves_no_partial_files() {
    let small = PathBuf::from(std::env::var("VORTEX_SMALL_TMPFS").expect("VORTEX_SMALL_TMPFS"));
    let dir = tempfile::tempdir().unwrap();
    let p = particles(dir.path(), 20000);
    let out = small.join("eval");
    let o = eval_cpu(&p, &out, &[]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "the disk was not full: {}",
        stderr(&o)
    );
    for e in std::fs::read_dir(&out).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            !name.ends_with(".tmp") && !name.ends_with(".npy"),
            "left behind: {name}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
