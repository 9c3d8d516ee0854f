//! `run.json`: what produced an output directory (`docs/CONVENTIONS.md`, "Files"). One entry per
//! invocation in `invocations` (a restart appends): version, commit and dirty flag (embedded by
//! `build.rs`), command line, the configuration as run, backend (with the GPU's name) actually
//! used, ranks, threads, host, start and end times (UTC, ISO 8601) and how it ended.

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};
use vortex_spectral::overwrite::Stamp;

/// UTC time as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days of H. Hinnant's date algorithms).
pub fn iso8601(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The instant of a `YYYY-MM-DDTHH:MM:SSZ` time ([`iso8601`]'s inverse: days-from-civil of
/// the same algorithms); `None` for any other text.
pub fn parse_iso8601(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = u64::try_from(days * 86400 + hh * 3600 + mm * 60 + ss).ok()?;
    Some(UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// The host name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, else `unknown`).
pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// One invocation of a command.
pub struct Invocation {
    pub command: &'static str,
    pub start: SystemTime,
    pub config: Value,
    pub backend: String,
    pub ranks: usize,
    pub threads: usize,
    pub outcome: Outcome,
}

/// How an invocation ended (`status` in `run.json`, with the signal or the error text).
pub enum Outcome {
    Completed,
    Interrupted(usize),
    /// Stopped at once by a signal whose grace the current step would not end within (the
    /// signal, and what was said: the last complete checkpoint).
    StoppedAtOnce(usize, String),
    Failed(String),
}

impl Outcome {
    /// From what a run returned: its summary's signal, or its error (as `text` words it).
    pub fn of<T, E>(
        r: &std::result::Result<T, E>,
        signal: impl Fn(&T) -> Option<usize>,
        text: impl Fn(&E) -> String,
    ) -> Outcome {
        match r {
            Ok(s) => signal(s).map_or(Outcome::Completed, Outcome::Interrupted),
            Err(e) => Outcome::Failed(text(e)),
        }
    }

    fn json(&self) -> (&'static str, String, Value) {
        match self {
            Outcome::Completed => ("completed", "completed".into(), Value::Null),
            Outcome::Interrupted(sig) => (
                "interrupted",
                format!("interrupted by signal {sig}"),
                json!(sig),
            ),
            Outcome::StoppedAtOnce(sig, what) => (
                "interrupted",
                format!("stopped at once by signal {sig}: {what}"),
                json!(sig),
            ),
            Outcome::Failed(e) => ("failed", format!("error: {e}"), json!(e)),
        }
    }
}

/// The configuration as run (`config.toml` of the output directory) as JSON; null when it
/// cannot be read.
pub fn config_json(path: &Path) -> Value {
    vortex_spectral::inputs::read_config(path)
        .ok()
        .and_then(|t| toml::from_str::<toml::Value>(&t).ok())
        .and_then(|v| serde_json::to_value(v).ok())
        .unwrap_or(Value::Null)
}

/// Who holds an output directory: process id, host, start time and command line (the line of
/// the lock file, quoted to a second process).
pub fn holder(start: SystemTime) -> String {
    format!(
        "pid {} on host {} since {} ({})",
        std::process::id(),
        host(),
        iso8601(start),
        std::env::args().collect::<Vec<_>>().join(" ")
    )
}

/// An output directory held by this invocation: its lock (released when dropped, after
/// [`record`]) and the listing of its files when it was taken, against which [`record`] lists
/// the files this invocation wrote.
pub struct Claim {
    _lock: vortex_spectral::durable::OutLock,
    before: BTreeMap<String, Stamp>,
}

/// The start of an invocation that writes into `out`: the directory locked (held until the
/// returned [`Claim`] is dropped, after [`record`]), prepared for `mode` (a non-empty directory
/// refused unless overwriting or restarting; a restart only into its checkpoint's directory;
/// `--overwrite` removes the files the earlier run's `run.json` lists, nothing else, and never
/// one of `inputs`, the command's own files), and an
/// entry with `"status": "running"` appended to `run.json`, so that a killed run leaves a
/// record. A refused directory is left untouched.
pub fn begin(
    out: &Path,
    mode: vortex_spectral::durable::OutMode,
    restart: Option<&Path>,
    inputs: &[&Path],
    command: &'static str,
    start: SystemTime,
) -> Result<Claim> {
    use vortex_spectral::durable;
    let lock = durable::lock_out(out, &holder(start))?;
    durable::prepare_out_keeping(out, mode, inputs)?;
    if let Some(ck) = restart {
        durable::check_restart_into(out, ck)?;
    }
    let before = vortex_spectral::overwrite::listing(out);
    let mut doc = read_doc(out);
    let mut entry = base_entry(command, start);
    entry["status"] = json!("running");
    entry["outcome"] = json!("running (or killed: no end was recorded)");
    push(&mut doc, entry);
    write_doc(out, &doc)?;
    *active() = Some(Active {
        out: out.to_path_buf(),
        command,
        start,
        before: before.clone(),
    });
    Ok(Claim {
        _lock: lock,
        before,
    })
}

/// The invocation of this process whose entry of `run.json` is still "running" (from
/// [`begin`] to [`record`]), for an end that does not return through [`record`]: a signal's
/// stop at once, the MPI watchdog's end of the job ([`end_abruptly`]).
struct Active {
    out: PathBuf,
    command: &'static str,
    start: SystemTime,
    before: BTreeMap<String, Stamp>,
}

fn active() -> std::sync::MutexGuard<'static, Option<Active>> {
    static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);
    ACTIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Completes the entry of the invocation still "running" in this process with `outcome`
/// (the configuration as run read back from the directory); false when there is none (its
/// end was recorded, or this process holds no output directory: ranks other than 0).
pub fn end_abruptly(outcome: Outcome) -> bool {
    let mut guard = active();
    let Some(a) = guard.take() else {
        return false;
    };
    let inv = Invocation {
        command: a.command,
        start: a.start,
        config: config_json(&a.out.join("config.toml")),
        backend: "(not recorded: the run ended before its summary)".into(),
        ranks: 0,
        threads: rayon::current_num_threads(),
        outcome,
    };
    if let Err(e) = write_end(&a.out, Some(&a.before), &inv) {
        crate::errln!("error: {}", crate::error_text(&e));
    }
    true
}

/// Marks the last entry of `out/run.json` still "running" as failed with `error`, from a
/// process that holds no record of it (another rank of the job, when rank 0 stopped
/// answering): the files it wrote are not known, so a later `--overwrite` counts every file
/// named like a solver's output.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn mark_running_failed(out: &Path, error: &str) -> Result<bool> {
    let mut doc = read_doc(out);
    let Some(x) = doc
        .get_mut("invocations")
        .and_then(Value::as_array_mut)
        .and_then(|a| a.last_mut())
        .filter(|x| x["status"] == "running")
    else {
        return Ok(false);
    };
    x["status"] = json!("failed");
    x["outcome"] = json!(format!("error: {error}"));
    x["error"] = json!(error);
    x["end"] = json!(iso8601(SystemTime::now()));
    write_doc(out, &doc)?;
    Ok(true)
}

fn read_doc(out: &Path) -> Value {
    vortex_spectral::inputs::read_own_text(&out.join("run.json"), "record of runs")
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({ "invocations": [] }))
}

fn write_doc(out: &Path, doc: &Value) -> Result<()> {
    let path = out.join("run.json");
    let text = serde_json::to_string_pretty(doc)?;
    vortex_spectral::durable::write_atomic(&path, &[text.as_bytes()], 1)
        .with_context(|| format!("writing {}", path.display()))
}

fn push(doc: &mut Value, entry: Value) {
    match doc.get_mut("invocations").and_then(Value::as_array_mut) {
        Some(a) => a.push(entry),
        None => *doc = json!({ "invocations": [entry] }),
    }
}

/// What every entry of `run.json` holds.
fn base_entry(command: &str, start: SystemTime) -> Value {
    json!({
        "command": command,
        "version": env!("CARGO_PKG_VERSION"),
        "commit": env!("VORTEX_GIT_COMMIT"),
        "dirty": env!("VORTEX_GIT_COMMIT").ends_with("-dirty"),
        "command_line": std::env::args().collect::<Vec<_>>(),
        "host": host(),
        "pid": std::process::id(),
        "start": iso8601(start),
    })
}

/// Completes this invocation's entry of `out/run.json` (the `"running"` one of [`begin`],
/// appended when absent; rewritten atomically), with the files it wrote (`"files"`: new or
/// changed since `claim` was taken; what a later `--overwrite` removes).
pub fn record(out: &Path, claim: Option<&Claim>, inv: &Invocation) -> Result<()> {
    // held while writing: a signal's stop at once waits for this end, and then has none to
    // record
    let mut guard = active();
    let r = write_end(out, claim.map(|c| &c.before), inv);
    *guard = None;
    r
}

fn write_end(out: &Path, before: Option<&BTreeMap<String, Stamp>>, inv: &Invocation) -> Result<()> {
    let mut doc = read_doc(out);
    let (status, outcome, detail) = inv.outcome.json();
    let mut entry = base_entry(inv.command, inv.start);
    if let Some(e) = entry.as_object_mut() {
        e.insert("configuration".into(), inv.config.clone());
        e.insert("backend".into(), json!(inv.backend));
        e.insert("ranks".into(), json!(inv.ranks));
        e.insert("threads".into(), json!(inv.threads));
        e.insert("end".into(), json!(iso8601(SystemTime::now())));
        if let Some(before) = before {
            let files = vortex_spectral::overwrite::changed_since(out, before);
            e.insert("files".into(), json!(files));
        }
        e.insert("status".into(), json!(status));
        e.insert("outcome".into(), json!(outcome));
        match &inv.outcome {
            Outcome::Interrupted(_) | Outcome::StoppedAtOnce(..) => {
                e.insert("signal".into(), detail)
            }
            Outcome::Failed(_) => e.insert("error".into(), detail),
            Outcome::Completed => None,
        };
    }
    let mine = |x: &Value| {
        x["status"] == "running" && x["pid"] == entry["pid"] && x["start"] == entry["start"]
    };
    match doc
        .get_mut("invocations")
        .and_then(Value::as_array_mut)
        .and_then(|a| a.iter_mut().rev().find(|x| mine(x)))
    {
        Some(x) => *x = entry,
        None => push(&mut doc, entry),
    }
    write_doc(out, &doc)
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn iso8601_of_known_instants() {
        assert_eq!(iso8601(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2000-02-29 12:34:56 UTC (a leap day) = 951827696 s
        let t = UNIX_EPOCH + Duration::from_secs(951_827_696);
        assert_eq!(iso8601(t), "2000-02-29T12:34:56Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_564_800);
        assert_eq!(iso8601(t), "2026-11-25T00:00:00Z");
        // parse_iso8601 is its inverse (a leap day, the ends of years and of days)
        for secs in [
            0u64,
            951_827_696,
            1_795_564_800,
            1_798_761_599,
            4_107_542_399,
        ] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(parse_iso8601(&iso8601(t)), Some(t), "{}", iso8601(t));
        }
        for bad in [
            "2026-13-01T00:00:00Z",
            "2026-11-25 00:00:00Z",
            "2026-11-25T00:00:00",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
    }
}
