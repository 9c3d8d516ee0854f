//! Checkpoints: the container of `vortex_spectral::durable` (magic `VXMETHOD`, format version, payload
//! length, FNV-1a checksum; written to `PATH.tmp`, synced, renamed, the directory synced; the
//! last `output.checkpoints_kept` kept as `PATH`, `PATH.1`, ...) around the bincode 2 (serde)
//! encoding of the configuration keys a restart must keep and the [`State`]. A flipped bit is
//! refused with the reason; a restart with a changed configuration is refused with the changed
//! keys listed. f64 values are stored bit for bit, so a restart continues exactly as the
//! uninterrupted run would. See `docs/CONVENTIONS.md`, "Checkpoints".

use crate::config::Config;
use crate::error::{Error, Result};
use crate::stepping::State;
use serde::{Deserialize, Serialize};
use std::path::Path;
use vortex_spectral::durable::{self, DurableError};

pub const MAGIC: &[u8; 8] = b"VXMETHOD";
pub const VERSION: u32 = 2;

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
            config: config
                .restart_keys()
                .iter()
                .map(|(k, v)| format!("{k} = {v}\n"))
                .collect(),
            initial_energy,
            state,
        }
    }
}

fn ck_err(path: &Path, msg: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

fn from_durable(e: DurableError) -> Error {
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
/// (everything except `t_end`, the outputs, the health thresholds and where it runs); a
/// difference is refused with every changed key listed.
pub fn read_for(path: &Path, config: &Config) -> Result<Checkpoint> {
    let ck = read(path)?;
    let old = durable::flatten_toml(&ck.config)
        .map_err(|e| ck_err(path, format!("its configuration record is unreadable: {e}")))?;
    let diff = durable::config_diff(&old, &config.restart_keys());
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
    Ok(ck)
}
