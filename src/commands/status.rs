//! `vortex status DIR... [--json]`: where runs stand, read from their output directories alone
//! (no process is asked, so it works from a login node while the run is on a compute node):
//! `run.json` (how each invocation ended, `docs/CONVENTIONS.md` "Files"), `config.toml`
//! (`t_end`, `dt`), the last rows of `timing.csv` (`vortex run`: step, time and seconds of each
//! step) or `energy.csv` (`vortex spectral`: its time), and the newest checkpoint. A directory
//! without `run.json` whose sub-directories are runs (a sweep, `vortex compare`'s output) gives
//! one line per run.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Where runs stand: state, progress, last checkpoint, measured speed, time to go.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Output directories of `vortex run` or `vortex spectral`, or directories holding them
    /// (a sweep: one line per run)
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// One JSON array of the runs (machine-readable) instead of the table
    #[arg(long)]
    pub json: bool,
}

/// How a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Its process is alive (or, on another host, has not recorded an end).
    Running,
    /// It reached `t_end`.
    Ended,
    /// It completed before `t_end` (`--steps K`).
    Stopped,
    /// A signal stopped it after writing a checkpoint (status 75): continue with `--restart`.
    Interrupted,
    /// It ended with an error (`error` holds the text).
    Failed,
    /// `run.json` says running but its process on this host is gone (killed).
    Killed,
    /// `run.json`'s last invocation has no status this binary writes (edited, or of a newer
    /// version): `error` says what it holds.
    Unknown,
}

/// One run's status (`--json`: one object per run).
#[derive(Debug, Serialize)]
pub struct RunStatus {
    pub dir: String,
    /// `run` or `spectral`.
    pub command: String,
    pub state: State,
    /// The signal that interrupted it.
    pub signal: Option<u64>,
    /// The error of a failed run.
    pub error: Option<String>,
    /// Where a running (or killed) process is: host and pid.
    pub process: Option<String>,
    /// Invocations recorded (a restart adds one).
    pub invocations: usize,
    /// Steps done and in all (`vortex run`).
    pub step: Option<u64>,
    pub steps: Option<u64>,
    /// Simulated time reached and the end time.
    pub t: Option<f64>,
    pub t_end: Option<f64>,
    /// The newest checkpoint (file name) and its age in seconds.
    pub checkpoint: Option<String>,
    pub checkpoint_age_s: Option<f64>,
    /// Measured seconds per step (`vortex run`: the mean of the last 20 steps of timing.csv).
    pub s_per_step: Option<f64>,
    /// Measured wall seconds per unit of simulated time (over the recorded invocations).
    pub s_per_time: Option<f64>,
    /// Wall seconds still needed to reach `t_end` at the measured speed.
    pub to_go_s: Option<f64>,
}

/// Runs the command.
pub fn run(args: &StatusArgs) -> Result<()> {
    let mut all = Vec::new();
    for dir in &args.dirs {
        for run_dir in run_dirs(dir)? {
            all.push(status_of(&run_dir)?);
        }
    }
    let text = if args.json {
        serde_json::to_string_pretty(&all)? + "\n"
    } else {
        table(&all)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .context("writing the status to stdout")
}

/// `dir` itself when it holds `run.json`, else its sub-directories that do (sorted).
fn run_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        bail!("{}: not a directory", dir.display());
    }
    if dir.join("run.json").is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    // a run.json that is not a file (a FIFO, a directory) is not read, and said so
    if let Ok(m) = std::fs::metadata(dir.join("run.json")) {
        bail!(
            "{}: is {}, not a regular file: not the record of a run",
            dir.join("run.json").display(),
            vortex_spectral::inputs::kind_of(&m)
        );
    }
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && p.join("run.json").is_file())
        .collect();
    if runs.is_empty() {
        bail!(
            "{}: no run.json, and no sub-directory holds one: not the output directory of a \
             run or of a sweep",
            dir.display()
        );
    }
    runs.sort();
    Ok(runs)
}

/// The status of one run directory.
pub fn status_of(dir: &Path) -> Result<RunStatus> {
    let path = dir.join("run.json");
    let text = vortex_spectral::inputs::read_own_text(&path, "record of runs")
        .with_context(|| format!("reading {}", path.display()))?;
    let doc: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let invocations: Vec<&Value> = doc["invocations"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let Some(last) = invocations.last() else {
        bail!("{}: no invocation recorded", path.display());
    };
    let command = last["command"].as_str().unwrap_or("?").to_string();
    let config = read_toml(&dir.join("config.toml"));
    let t_end = config.as_ref().and_then(|c| c.get("t_end")?.as_float());
    let mut s = RunStatus {
        dir: dir.display().to_string(),
        command: command.clone(),
        state: State::Running,
        signal: last["signal"].as_u64(),
        error: last["error"].as_str().map(str::to_string),
        process: None,
        invocations: invocations.len(),
        step: None,
        steps: None,
        t: None,
        t_end,
        checkpoint: None,
        checkpoint_age_s: None,
        s_per_step: None,
        s_per_time: None,
        to_go_s: None,
    };
    if let Some((name, age)) = newest_checkpoint(dir) {
        s.checkpoint = Some(name);
        s.checkpoint_age_s = Some(age);
    }
    match command.as_str() {
        "run" => progress_of_run(dir, config.as_ref(), &mut s),
        _ => progress_of_spectral(dir, &invocations, &mut s),
    }
    s.state = state_of(last, &mut s);
    if matches!(s.state, State::Ended) {
        s.to_go_s = Some(0.0);
    }
    Ok(s)
}

/// The state from the last invocation's `status` (and, for "running", whether its process is
/// alive on this host).
fn state_of(last: &Value, s: &mut RunStatus) -> State {
    match last["status"].as_str() {
        Some("completed") => {
            let done = match (s.t, s.t_end, s.step, s.steps) {
                (_, _, Some(k), Some(n)) => k >= n,
                (Some(t), Some(e), _, _) => t >= e * (1.0 - 1e-9),
                _ => true,
            };
            if done {
                State::Ended
            } else {
                State::Stopped
            }
        }
        Some("interrupted") => State::Interrupted,
        Some("failed") => State::Failed,
        Some("running") => {
            let host = last["host"].as_str().unwrap_or("?");
            let pid = last["pid"].as_u64();
            s.process = Some(match pid {
                Some(p) => format!("pid {p} on {host}"),
                None => format!("pid ? on {host}"),
            });
            let here = host == crate::run_info::host();
            match (here, pid) {
                (true, Some(p)) if !Path::new(&format!("/proc/{p}")).exists() => State::Killed,
                _ => State::Running,
            }
        }
        // neither running nor an end: not read as either
        _ => {
            s.error = Some(format!(
                "run.json: the last invocation's \"status\" is {}, none of running, completed, \
                 interrupted, failed",
                vortex_spectral::text::compact_numbers(&last["status"].to_string())
            ));
            State::Unknown
        }
    }
}

/// Step, time and speed of a `vortex run` from `timing.csv` (one row per step) and its
/// configuration (`t_end / dt` steps).
fn progress_of_run(dir: &Path, config: Option<&toml::Value>, s: &mut RunStatus) {
    let dt = config.and_then(|c| c.get("dt")?.as_float());
    if let (Some(t_end), Some(dt)) = (s.t_end, dt) {
        if dt > 0.0 {
            s.steps = Some((t_end / dt).round() as u64);
        }
    }
    let rows = last_rows(&dir.join("timing.csv"), 20);
    if let Some(r) = rows.last() {
        s.step = r.first().map(|&v| v as u64);
        s.t = r.get(1).copied();
    } else {
        // no step yet: the run starts at step 0 (or at its restart's row)
        s.step = Some(0);
    }
    let secs: Vec<f64> = rows.iter().filter_map(|r| r.get(2).copied()).collect();
    if !secs.is_empty() {
        let mean = secs.iter().sum::<f64>() / secs.len() as f64;
        s.s_per_step = Some(mean);
        if let (Some(k), Some(n)) = (s.step, s.steps) {
            s.to_go_s = Some(n.saturating_sub(k) as f64 * mean);
        }
        if let Some(dt) = dt {
            s.s_per_time = Some(mean / dt);
        }
    }
}

/// Time and speed of a `vortex spectral` run (adaptive steps: no step count) from the last
/// row of `energy.csv` and the wall time of its invocations.
fn progress_of_spectral(dir: &Path, invocations: &[&Value], s: &mut RunStatus) {
    let csv = dir.join("energy.csv");
    s.t = last_rows(&csv, 1).last().and_then(|r| r.first().copied());
    let now = SystemTime::now();
    let last_write = std::fs::metadata(&csv).and_then(|m| m.modified()).ok();
    // wall seconds of every invocation: start to end, or to the last row of a running one
    let wall: f64 = invocations
        .iter()
        .filter_map(|inv| {
            let start = crate::run_info::parse_iso8601(inv["start"].as_str()?)?;
            let end = match inv["end"].as_str() {
                Some(e) => crate::run_info::parse_iso8601(e)?,
                None => last_write.unwrap_or(now),
            };
            end.duration_since(start).ok().map(|d| d.as_secs_f64())
        })
        .sum();
    if let (Some(t), Some(t_end)) = (s.t, s.t_end) {
        if t > 0.0 && wall > 0.0 {
            let rate = wall / t;
            s.s_per_time = Some(rate);
            s.to_go_s = Some((t_end - t).max(0.0) * rate);
        }
    }
}

/// The newest of `checkpoint.bin` and `checkpoint.manifest` and its age in seconds.
fn newest_checkpoint(dir: &Path) -> Option<(String, f64)> {
    ["checkpoint.bin", "checkpoint.manifest"]
        .iter()
        .filter_map(|name| {
            let m = std::fs::metadata(dir.join(name)).ok()?.modified().ok()?;
            Some((name.to_string(), m))
        })
        .max_by_key(|(_, m)| *m)
        .map(|(name, m)| {
            let age = SystemTime::now()
                .duration_since(m)
                .map_or(0.0, |d| d.as_secs_f64());
            (name, age)
        })
}

/// A TOML file as a value (`None` when missing or unreadable).
fn read_toml(path: &Path) -> Option<toml::Value> {
    let text = vortex_spectral::inputs::read_config(path).ok()?;
    toml::from_str(&text).ok()
}

/// The last `n` numeric rows of a CSV file with a header (fields that are not numbers are NaN;
/// a half-written last line is left out).
fn last_rows(path: &Path, n: usize) -> Vec<Vec<f64>> {
    let Ok(text) = vortex_spectral::inputs::read_own_text(path, "CSV table") else {
        return vec![];
    };
    let complete = match text.rfind('\n') {
        Some(i) => &text[..i],
        None => return vec![],
    };
    let lines: Vec<&str> = complete.lines().skip(1).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| {
            l.split(',')
                .map(|v| v.trim().parse().unwrap_or(f64::NAN))
                .collect()
        })
        .collect()
}

/// A duration for the table: `42 s`, `3.5 min`, `2.1 h`, `1.5 days`.
fn human(s: f64) -> String {
    if !s.is_finite() {
        "-".into()
    } else if s < 90.0 {
        format!("{s:.0} s")
    } else if s < 5400.0 {
        format!("{:.1} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} days", s / 86400.0)
    }
}

/// One line per run under a header.
fn table(all: &[RunStatus]) -> String {
    let header = [
        "run",
        "state",
        "step",
        "t / t_end",
        "checkpoint",
        "s/step",
        "to go",
    ];
    let mut rows: Vec<[String; 7]> = vec![header.map(String::from)];
    for s in all {
        let state = match s.state {
            State::Interrupted => format!("interrupted (signal {})", s.signal.unwrap_or(0)),
            State::Running | State::Killed => format!(
                "{} ({})",
                if s.state == State::Running {
                    "running"
                } else {
                    "killed"
                },
                s.process.as_deref().unwrap_or("?")
            ),
            State::Ended => "ended".into(),
            State::Stopped => "stopped before t_end".into(),
            State::Failed => "failed".into(),
            State::Unknown => "unknown".into(),
        };
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.6}"));
        rows.push([
            s.dir.clone(),
            state,
            match (s.step, s.steps) {
                (Some(k), Some(n)) => format!("{k}/{n}"),
                _ => "-".into(),
            },
            format!("{} / {}", opt(s.t), opt(s.t_end)),
            match (&s.checkpoint, s.checkpoint_age_s) {
                (Some(c), Some(a)) => format!("{c}, {} ago", human(a)),
                _ => "none".into(),
            },
            s.s_per_step.map_or("-".into(), |v| format!("{v:.3}")),
            s.to_go_s.map_or("-".into(), human),
        ]);
    }
    let widths: Vec<usize> = (0..7)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for (k, r) in rows.iter().enumerate() {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
        if k > 0 {
            if let Some(e) = &all[k - 1].error {
                text.push_str(&format!("    error: {e}\n"));
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    /// A `vortex run` directory as the run leaves it: the state and the progress are read back.
    #[test]
    fn a_run_directory_is_read_back() {
        let tmp = std::env::temp_dir().join(format!("vortex-status-{}", std::process::id()));
        let dir = tmp.join("a");
        std::fs::create_dir_all(&dir).unwrap();
        write(&dir, "config.toml", "nu = 0.01\ndt = 0.1\nt_end = 1.0\n");
        let mut csv = String::from(vortex_method::run::TIMING_HEADER);
        csv.push('\n');
        for k in 1..=4 {
            csv.push_str(&format!(
                "{k},{:.10e},0.5,0.4,0,0,0,0,0,0,0.1\n",
                k as f64 * 0.1
            ));
        }
        csv.push_str("5,0.5,0.5"); // a half-written row
        write(&dir, "timing.csv", &csv);
        write(
            &dir,
            "run.json",
            r#"{"invocations": [{"command": "run", "status": "interrupted", "signal": 10,
                "host": "h", "pid": 1, "start": "2026-12-01T00:00:00Z"}]}"#,
        );
        write(&dir, "checkpoint.bin", "x");
        let s = status_of(&dir).unwrap();
        assert_eq!(s.state, State::Interrupted);
        assert_eq!(s.signal, Some(10));
        assert_eq!((s.step, s.steps), (Some(4), Some(10)));
        assert!((s.t.unwrap() - 0.4).abs() < 1e-12);
        assert!((s.s_per_step.unwrap() - 0.5).abs() < 1e-12);
        assert!((s.to_go_s.unwrap() - 3.0).abs() < 1e-12);
        assert_eq!(s.checkpoint.as_deref(), Some("checkpoint.bin"));
        // the sweep: its runs, one line each
        let b = tmp.join("b");
        std::fs::create_dir_all(&b).unwrap();
        write(
            &b,
            "run.json",
            r#"{"invocations": [{"command": "run", "status": "failed", "error": "bad nu"}]}"#,
        );
        let runs = run_dirs(&tmp).unwrap();
        assert_eq!(runs, vec![dir.clone(), b.clone()]);
        let t = table(&[status_of(&dir).unwrap(), status_of(&b).unwrap()]);
        assert_eq!(t.lines().count(), 4, "{t}");
        assert!(
            t.contains("interrupted (signal 10)") && t.contains("error: bad nu"),
            "{t}"
        );
        // a process recorded as running on this host that is gone was killed
        write(
            &b,
            "run.json",
            &format!(
                r#"{{"invocations": [{{"command": "run", "status": "running", "host": "{}",
                "pid": 4294967295}}]}}"#,
                crate::run_info::host()
            ),
        );
        assert_eq!(status_of(&b).unwrap().state, State::Killed);
        // a status this binary does not write is not read as running (nor a pid of -1 as 0)
        write(
            &b,
            "run.json",
            r#"{"invocations": [{"command": "run", "status": 1e308, "pid": -1}]}"#,
        );
        let u = status_of(&b).unwrap();
        assert_eq!(u.state, State::Unknown);
        assert!(
            u.error.as_deref().unwrap().contains("1e+308"),
            "{:?}",
            u.error
        );
        assert!(run_dirs(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
