//! Checkpoints. One rank writes one file, as always: the container of
//! `vortex_spectral::durable` (magic `VXMETHOD`, format version, payload length, FNV-1a
//! checksum; written to `PATH.tmp`, synced, renamed, the directory synced; the last
//! `output.checkpoints_kept` kept as `PATH`, `PATH.1`, ...) around the bincode 2 (serde)
//! encoding of the configuration keys a restart must keep and the [`State`]. Several ranks
//! write one piece each, in parallel, and rank 0 a manifest once every piece is durable
//! ([`pieces`]: the same container around each rank's particles with their global ids; the
//! manifest lists every piece with its length, checksum and particle count). A restart reads
//! either on any number of ranks ([`restart`]); [`writer`] writes them while the run goes on.
//!
//! A flipped bit is refused with the reason; a restart with a changed configuration is refused
//! with the changed keys listed. f64 values are stored bit for bit, so a restart continues
//! exactly as the uninterrupted run would. See `docs/CONVENTIONS.md`, "Checkpoints".

pub mod pieces;
pub mod restart;
pub mod writer;

pub use pieces::{Manifest, PieceEntry, MANIFEST_FILE};
pub use restart::{current, read_restart, read_whole, Restart, Source};
pub use writer::CheckpointWriter;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::stepping::State;
use serde::{Deserialize, Serialize};
use std::path::Path;
use vortex_spectral::durable::{self, DurableError};

pub const MAGIC: &[u8; 8] = b"VXMETHOD";
pub const VERSION: u32 = 2;
/// The single-file checkpoint of a run in its output directory.
pub const SINGLE_FILE: &str = "checkpoint.bin";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// [`Config::restart_keys`] of the run that wrote it, as `key = value` lines.
    pub config: String,
    /// Energy of the first diagnostics (reference of the blow-up test).
    pub initial_energy: f64,
    pub state: State,
}

impl Checkpoint {
    /// A checkpoint of `state` for a run of `config`.
    pub fn new(config: &Config, initial_energy: f64, state: State) -> Self {
        Self {
            config: config_record(config),
            initial_energy,
            state,
        }
    }
}

pub(crate) fn ck_err(path: &Path, msg: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

pub(crate) fn from_durable(e: DurableError) -> Error {
    match e {
        DurableError::Os { path, source } => Error::Io { path, source },
        DurableError::Corrupt { path, msg } | DurableError::OutDir { path, msg } => {
            Error::Checkpoint { path, msg }
        }
    }
}

/// Writes atomically (temporary file, then rename), keeping the last `keep` checkpoints.
pub fn write_kept(path: &Path, ck: &Checkpoint, keep: usize) -> Result<()> {
    let payload = bincode::serde::encode_to_vec(ck, bincode::config::standard())
        .map_err(|e| ck_err(path, format!("encoding failed: {e}")))?;
    durable::write_container(path, MAGIC, VERSION, &payload, keep).map_err(from_durable)
}

/// Writes atomically, keeping only this one.
pub fn write(path: &Path, ck: &Checkpoint) -> Result<()> {
    write_kept(path, ck, 1)
}

/// Reads a checkpoint, refusing other formats and versions, and a corrupt payload.
pub fn read(path: &Path) -> Result<Checkpoint> {
    let payload = durable::read_container(path, MAGIC, VERSION, "vortex-method checkpoint")
        .map_err(from_durable)?;
    let (ck, used): (Checkpoint, usize) =
        bincode::serde::decode_from_slice(&payload, bincode::config::standard())
            .map_err(|e| ck_err(path, format!("corrupt or truncated: {e}")))?;
    if used != payload.len() {
        return Err(ck_err(path, "trailing bytes after the state"));
    }
    Ok(ck)
}

/// Reads a checkpoint and checks that it was written by a run of the same configuration
/// ([`check_config`]).
pub fn read_for(path: &Path, config: &Config) -> Result<Checkpoint> {
    let ck = read(path)?;
    check_config(path, &ck.config, config)?;
    Ok(ck)
}

/// Refuses the checkpoint `path` whose configuration record (`key = value` lines) differs from
/// `config` in anything except `t_end`, the outputs, the health thresholds and where it runs,
/// with every changed key listed.
pub fn check_config(path: &Path, record: &str, config: &Config) -> Result<()> {
    let old = durable::flatten_toml(record)
        .map_err(|e| ck_err(path, format!("its configuration record is unreadable: {e}")))?;
    let diff = durable::config_diff(&effective(old), &effective(config.restart_keys()));
    if !diff.is_empty() {
        return Err(ck_err(
            path,
            format!(
                "written by another configuration; changed keys:\n  {}\n(only t_end, [output], \
                 [health] and evaluation.backend/device/grid may change at a restart)",
                diff.join("\n  ")
            ),
        ));
    }
    Ok(())
}

/// The keys of `initial` each kind of initial condition reads (every key of the section for a
/// kind not listed).
fn initial_keys_of(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "taylor-green" | "taylor-green-2d" => &["n", "overlap"],
        "isotropic" => &["n", "overlap", "k_peak", "re_lambda", "energy", "seed"],
        "ring" => &["overlap", "radius", "circulation", "core", "center"],
        "two-rings" => &[
            "overlap",
            "radius",
            "circulation",
            "core",
            "center",
            "separation",
            "pair",
        ],
        "blob" => &["overlap", "center", "sigma", "strength"],
        _ => return None,
    })
}

/// The flattened restart keys (of a checkpoint's record or of a configuration) as the run
/// uses them, so that a default written out is no change and a key the run ignores is none:
/// the keys of `[initial]` the kind does not read are left out (`seed` of a Taylor-Green
/// field); the isotropic seed and the centre of a ring or blob get their defaults; the
/// lattice is its effective size (`reinterpolation.n`, default `initial.n`) in a periodic box
/// and its effective spacing (`reinterpolation.spacing`, default `initial.spacing`) in free
/// space, as [`Config::lattice_h`] reads them.
pub fn effective(
    mut m: std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    let kind = m
        .get("initial.kind")
        .map(|k| k.trim_matches('"').to_string())
        .unwrap_or_default();
    let periodic = m.get("domain.periodic").is_some_and(|v| v == "true");
    // the lattice's spacing, below, whatever the kind
    let initial_spacing = m.remove("initial.spacing");
    if let Some(used) = initial_keys_of(&kind) {
        m.retain(|k, _| {
            k.strip_prefix("initial.")
                .is_none_or(|rest| rest == "kind" || used.contains(&rest))
        });
    }
    let value = |v: toml::Value| v.to_string();
    if kind == "isotropic" {
        m.entry("initial.seed".into())
            .or_insert_with(|| value(toml::Value::Integer(crate::initial::ISOTROPIC_SEED as i64)));
    }
    if matches!(kind.as_str(), "ring" | "two-rings" | "blob") {
        let zero = toml::Value::Array(vec![toml::Value::Float(0.0); 3]);
        m.entry("initial.center".into())
            .or_insert_with(|| value(zero));
    }
    if periodic {
        if let Some(n) = m.get("initial.n").cloned() {
            m.entry("reinterpolation.n".into()).or_insert(n);
        }
        // the spacing of a periodic lattice is the box over n (checked when it was read)
        m.remove("reinterpolation.spacing");
    } else if let Some(h) = initial_spacing {
        m.entry("reinterpolation.spacing".into()).or_insert(h);
    }
    m
}

/// The configuration record of a checkpoint: [`Config::restart_keys`] as `key = value` lines.
pub fn config_record(config: &Config) -> String {
    config
        .restart_keys()
        .iter()
        .map(|(k, v)| format!("{k} = {v}\n"))
        .collect()
}
