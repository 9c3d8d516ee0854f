//! Checkpoints: a header (magic, format version) followed by the bincode 2 (serde) encoding of the
//! configuration fingerprint and the [`State`]. Written to `PATH.tmp`, synced, then renamed, so a
//! crash never leaves a half-written checkpoint under the real name. f64 values are stored bit for
//! bit, so a restart continues exactly as the uninterrupted run would.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::stepping::State;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

pub const MAGIC: &[u8; 8] = b"VXMETHOD";
pub const VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// [`Config::fingerprint`] of the run that wrote it.
    pub fingerprint: String,
    /// Energy of the first diagnostics (reference of the blow-up test).
    pub initial_energy: f64,
    pub state: State,
}

fn ck_err(path: &Path, msg: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// Writes atomically (temporary file, then rename).
pub fn write(path: &Path, ck: &Checkpoint) -> Result<()> {
    let payload = bincode::serde::encode_to_vec(ck, bincode::config::standard())
        .map_err(|e| ck_err(path, format!("encoding failed: {e}")))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp).map_err(Error::io(&tmp))?;
        f.write_all(MAGIC).map_err(Error::io(&tmp))?;
        f.write_all(&VERSION.to_le_bytes())
            .map_err(Error::io(&tmp))?;
        f.write_all(&payload).map_err(Error::io(&tmp))?;
        f.sync_all().map_err(Error::io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(Error::io(path))
}

/// Reads a checkpoint, refusing other formats and versions.
pub fn read(path: &Path) -> Result<Checkpoint> {
    let bytes = std::fs::read(path).map_err(Error::io(path))?;
    if bytes.len() < 12 || &bytes[..8] != MAGIC {
        return Err(ck_err(
            path,
            "not a vortex-method checkpoint (bad magic bytes)",
        ));
    }
    let v = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if v != VERSION {
        return Err(ck_err(
            path,
            format!("format version {v}, this build reads version {VERSION}"),
        ));
    }
    let (ck, used): (Checkpoint, usize) =
        bincode::serde::decode_from_slice(&bytes[12..], bincode::config::standard())
            .map_err(|e| ck_err(path, format!("corrupt or truncated: {e}")))?;
    if used != bytes.len() - 12 {
        return Err(ck_err(path, "trailing bytes after the state"));
    }
    Ok(ck)
}

/// Reads a checkpoint and checks that it was written by a run of the same configuration
/// (everything except `t_end` and the outputs).
pub fn read_for(path: &Path, config: &Config) -> Result<Checkpoint> {
    let ck = read(path)?;
    let fp = config.fingerprint();
    if ck.fingerprint != fp {
        return Err(ck_err(
            path,
            format!(
                "written by another configuration:\n  checkpoint: {}\n  this run:   {fp}",
                ck.fingerprint
            ),
        ));
    }
    Ok(ck)
}
