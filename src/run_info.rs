//! `run.json`: what produced an output directory (`docs/CONVENTIONS.md`, "Files"). One entry per
//! invocation in `invocations` (a restart appends): version, commit and dirty flag (embedded by
//! `build.rs`), command line, the configuration as run, backend (with the GPU's name) actually
//! used, ranks, threads, host, start and end times (UTC, ISO 8601) and how it ended.

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

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
    Failed(String),
}

impl Outcome {
    /// From what a run returned: its summary's signal, or its error.
    pub fn of<T, E: std::fmt::Display>(
        r: &std::result::Result<T, E>,
        signal: impl Fn(&T) -> Option<usize>,
    ) -> Outcome {
        match r {
            Ok(s) => signal(s).map_or(Outcome::Completed, Outcome::Interrupted),
            Err(e) => Outcome::Failed(format!("{e:#}")),
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
            Outcome::Failed(e) => ("failed", format!("error: {e}"), json!(e)),
        }
    }
}

/// The configuration as run (`config.toml` of the output directory) as JSON; null when it
/// cannot be read.
pub fn config_json(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| toml::from_str::<toml::Value>(&t).ok())
        .and_then(|v| serde_json::to_value(v).ok())
        .unwrap_or(Value::Null)
}

/// When `out/config.toml` was last written (`None`: absent); taken before a run and after it,
/// a change tells that the run began writing into `out`.
pub fn config_stamp(out: &Path) -> Option<SystemTime> {
    std::fs::metadata(out.join("config.toml"))
        .and_then(|m| m.modified())
        .ok()
}

/// Whether this invocation began writing into `out`: its `config.toml` was (re)written since
/// `before` (a refused configuration or a refused directory leaves `out` alone).
pub fn wrote_into(out: &Path, before: Option<SystemTime>) -> bool {
    let now = config_stamp(out);
    now.is_some() && now != before
}

/// Appends `inv` to `out/run.json` (created when absent; rewritten atomically).
pub fn record(out: &Path, inv: &Invocation) -> Result<()> {
    let path = out.join("run.json");
    let mut doc: Value = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({ "invocations": [] }));
    let (status, outcome, detail) = inv.outcome.json();
    let mut entry = json!({
        "command": inv.command,
        "version": env!("CARGO_PKG_VERSION"),
        "commit": env!("VORTEX_GIT_COMMIT"),
        "dirty": env!("VORTEX_GIT_COMMIT").ends_with("-dirty"),
        "command_line": std::env::args().collect::<Vec<_>>(),
        "configuration": inv.config,
        "backend": inv.backend,
        "ranks": inv.ranks,
        "threads": inv.threads,
        "host": host(),
        "start": iso8601(inv.start),
        "end": iso8601(SystemTime::now()),
        "status": status,
        "outcome": outcome,
    });
    if let Some(e) = entry.as_object_mut() {
        match &inv.outcome {
            Outcome::Interrupted(_) => e.insert("signal".into(), detail),
            Outcome::Failed(_) => e.insert("error".into(), detail),
            Outcome::Completed => None,
        };
    }
    match doc.get_mut("invocations").and_then(Value::as_array_mut) {
        Some(a) => a.push(entry),
        None => doc = json!({ "invocations": [entry] }),
    }
    let text = serde_json::to_string_pretty(&doc)?;
    vortex_spectral::durable::write_atomic(&path, &[text.as_bytes()], 1)
        .with_context(|| format!("writing {}", path.display()))
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
    }
}
