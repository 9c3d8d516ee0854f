//! Which checkpoint a `--restart` path names, and reading it on any number of ranks.
//!
//! `--restart` takes a single-file checkpoint (`checkpoint.bin` or a kept copy), a manifest
//! (`checkpoint.manifest` or a kept copy; told apart by their magic bytes) or a run's output
//! directory: then its current checkpoint ([`current`]), the one of `checkpoint.bin` and
//! `checkpoint.manifest` at the later step. Rank 0 reads a single file and splits it over the
//! ranks as before; the pieces of a manifest are shared out over the ranks
//! ([`super::pieces::share`]: each rank reads about `n / R` particles, none goes through rank
//! 0), and the particles brought to the even split by global id
//! ([`crate::collective::balance_by_gid`]), so a simulation starts from the same distribution
//! whatever wrote the checkpoint; each simulation then moves its particles to their owners
//! as at every step.

use super::pieces::{self, read_manifest, Manifest, MANIFEST_FILE, MANIFEST_MAGIC, PIECE_MAGIC};
use super::{check_config, ck_err, read, Checkpoint, MAGIC, SINGLE_FILE};
use crate::collective::{agree, balance_by_gid, broadcast_bytes, LocalState};
use crate::config::Config;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use vortex_domain::Comm;
use vortex_spectral::durable::HEADER_LEN;

/// A checkpoint on disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// One file with the whole state (written by one rank).
    Single(PathBuf),
    /// A manifest and its pieces (written by several ranks).
    Manifest(PathBuf),
}

impl Source {
    /// The file: the checkpoint or the manifest.
    pub fn path(&self) -> &Path {
        match self {
            Source::Single(p) | Source::Manifest(p) => p,
        }
    }

    /// The checkpoint a path names: a run directory's current one, else the file by its magic
    /// bytes (a piece is refused: the manifest names the set).
    pub fn of(path: &Path) -> Result<Source> {
        if path.is_dir() {
            return current(path);
        }
        let mut magic = [0u8; 8];
        // a FIFO or a device would block or never end: only a regular file is read
        let (file, _) = vortex_spectral::inputs::open_regular(path, "checkpoint (--restart)")
            .map_err(super::from_durable)?;
        let n = file.take(8).read(&mut magic).map_err(Error::io(path))?;
        if n == 8 && &magic == MANIFEST_MAGIC {
            Ok(Source::Manifest(path.to_path_buf()))
        } else if n == 8 && &magic == PIECE_MAGIC {
            Err(ck_err(
                path,
                format!(
                    "one piece of a checkpoint of several ranks: restart from its manifest \
                     ({MANIFEST_FILE}) or its directory"
                ),
            ))
        } else {
            // the single-file reader names a wrong format
            Ok(Source::Single(path.to_path_buf()))
        }
    }
}

/// The step of a single-file checkpoint from the head of its payload (its configuration
/// record, the initial energy, then the state's step), without reading the particles.
fn peek_single_step(path: &Path) -> Option<u64> {
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(1 << 20)
        .read_to_end(&mut head)
        .ok()?;
    if head.len() < HEADER_LEN || &head[..8] != MAGIC {
        return None;
    }
    let ((_, _, step), _): ((String, f64, u64), usize) =
        bincode::serde::decode_from_slice(&head[HEADER_LEN..], bincode::config::standard()).ok()?;
    Some(step)
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The current checkpoint of a run directory: `checkpoint.bin` or `checkpoint.manifest`,
/// whichever holds the later step (a run continued on another number of ranks writes the
/// other kind), the newer file when the steps are equal or one cannot be told.
pub fn current(dir: &Path) -> Result<Source> {
    let (single, manifest) = (dir.join(SINGLE_FILE), dir.join(MANIFEST_FILE));
    match (single.is_file(), manifest.is_file()) {
        (false, false) => Err(ck_err(
            dir,
            format!("the directory holds no checkpoint ({SINGLE_FILE} or {MANIFEST_FILE})"),
        )),
        (true, false) => Ok(Source::Single(single)),
        (false, true) => Ok(Source::Manifest(manifest)),
        (true, true) => {
            let a = peek_single_step(&single);
            let b = read_manifest(&manifest).ok().map(|m| m.step);
            let newer_single = match (a, b) {
                (Some(a), Some(b)) if a != b => a > b,
                _ => modified(&single) > modified(&manifest),
            };
            Ok(if newer_single {
                Source::Single(single)
            } else {
                Source::Manifest(manifest)
            })
        }
    }
}

/// The whole state of any checkpoint (a single file, a manifest with its pieces assembled in
/// global-id order, or a run directory's current one), read in this process.
pub fn read_whole(path: &Path) -> Result<Checkpoint> {
    match Source::of(path)? {
        Source::Single(p) => read(&p),
        Source::Manifest(p) => pieces::assemble(&p),
    }
}

/// A checkpoint read for a restart.
#[derive(Debug)]
pub struct Restart {
    /// This rank's part of the state: the ids `n r / R .. n (r + 1) / R` in order.
    pub local: LocalState,
    /// The energy of the run's first diagnostics.
    pub initial_energy: f64,
    /// The checkpoint read.
    pub source: Source,
}

/// What rank 0 tells the others about the checkpoint.
#[derive(Serialize, Deserialize)]
struct Announce {
    source: Source,
    initial_energy: f64,
    manifest: Option<Manifest>,
}

/// What rank 0 reads of a checkpoint: its step, configuration record, initial energy, the
/// whole state (a single file) or the manifest.
type Opened = (u64, String, f64, Option<Checkpoint>, Option<Manifest>);

/// Reads `source` on rank 0 (a single file whole, with its checksum; a manifest, with every
/// piece present at the length it lists).
fn load(source: &Source) -> Result<Opened> {
    Ok(match source {
        Source::Single(p) => {
            let ck = read(p)?;
            (
                ck.state.step,
                ck.config.clone(),
                ck.initial_energy,
                Some(ck),
                None,
            )
        }
        Source::Manifest(p) => {
            let m = read_manifest(p)?;
            let dir = p.parent().unwrap_or(Path::new("."));
            for e in &m.pieces {
                let len = std::fs::metadata(dir.join(&e.file)).map(|m| m.len()).ok();
                if len != Some(e.bytes) {
                    return Err(ck_err(
                        p,
                        format!(
                            "its piece {} is missing or not {} bytes long",
                            e.file, e.bytes
                        ),
                    ));
                }
            }
            (m.step, m.config.clone(), m.initial_energy, None, Some(m))
        }
    })
}

/// The checkpoint that `path` names (a run directory: its newest checkpoint that loads,
/// `vortex_spectral::durable::newest_loadable`), checked on rank 0 against the configuration
/// and `t_end`.
fn open_on_root(path: &Path, config: &Config) -> Result<(Announce, Option<Checkpoint>)> {
    const BASES: [&str; 2] = [SINGLE_FILE, MANIFEST_FILE];
    let (source, opened) = if path.is_dir() {
        let c = vortex_spectral::durable::restart_candidates(path, &BASES);
        vortex_spectral::durable::newest_loadable(path, &c, |p| {
            let s = Source::of(p).map_err(|e| e.to_string())?;
            let v = load(&s).map_err(|e| e.to_string())?;
            Ok((s, v))
        })
        .map_err(super::from_durable)?
        .1
    } else {
        if let Some(e) = vortex_spectral::durable::missing_restart_hint(path, &BASES) {
            return Err(super::from_durable(e));
        }
        let s = Source::of(path)?;
        let v = load(&s)?;
        (s, v)
    };
    let (step, record, e0, whole, manifest) = opened;
    let p = source.path();
    check_config(p, &record, config)?;
    if step >= config.steps() {
        return Err(ck_err(
            p,
            format!(
                "t_end = {} (step {}) is at or before the checkpoint's time t = {} (step \
                 {step}): nothing to run; raise t_end to continue",
                config.t_end,
                config.steps(),
                step as f64 * config.dt,
            ),
        ));
    }
    let pieces = manifest
        .as_ref()
        .map_or(String::new(), |m| format!(", {} pieces", m.pieces.len()));
    log::info!("restart from {} at step {step}{pieces}", p.display());
    let a = Announce {
        source,
        initial_energy: e0,
        manifest,
    };
    Ok((a, whole))
}

/// The checkpoint `restart` names (`None`: a fresh start), refused when the configuration
/// changed or when `t_end` is at or before its time (nothing would be run), on every rank:
/// each rank's part of the state (the even split by global id), whatever number of ranks
/// wrote it. A missing, truncated or corrupt piece stops every rank with the error that names
/// it. Collective.
pub fn read_restart(
    comm: &dyn Comm,
    config: &Config,
    restart: Option<&Path>,
) -> Result<Option<Restart>> {
    let Some(path) = restart else {
        return Ok(None);
    };
    let root = comm.rank() == 0;
    let opened = if root {
        open_on_root(path, config).map(Some)
    } else {
        Ok(None)
    };
    let opened = agree(comm, opened)?;
    let (announce, whole) = match opened {
        Some((a, w)) => (Some(a), w),
        None => (None, None),
    };
    let bytes = match &announce {
        Some(a) => bincode::serde::encode_to_vec(a, bincode::config::standard())
            .map_err(|e| Error::Other(format!("restart: encoding failed: {e}")))?,
        None => Vec::new(),
    };
    let bytes = broadcast_bytes(comm, &bytes);
    let (a, _): (Announce, usize) =
        bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
            .map_err(|e| Error::Other(format!("restart: the announcement is corrupt: {e}")))?;
    let local = match (&a.source, &a.manifest) {
        (Source::Manifest(p), Some(m)) => read_share(comm, p, m)?,
        _ => LocalState::scatter(comm, whole.map(|ck| ck.state)),
    };
    Ok(Some(Restart {
        local,
        initial_energy: a.initial_energy,
        source: a.source,
    }))
}

/// This rank's share of the pieces of `m`, read and checked, then the even split by global
/// id. Collective.
fn read_share(comm: &dyn Comm, path: &Path, m: &Manifest) -> Result<LocalState> {
    let me = comm.rank();
    let owners = pieces::share(m, comm.size());
    let read = (|| {
        let mut mine = pieces::empty_part(m);
        for (i, _) in owners.iter().enumerate().filter(|(_, &r)| r == me) {
            pieces::append(&mut mine, pieces::read_piece(path, m, i)?);
        }
        Ok(mine)
    })();
    let mine = agree(comm, read)?;
    let balanced = balance_by_gid(comm, mine)
        .map_err(|e| ck_err(path, format!("the pieces do not form one state: {e}")));
    agree(comm, balanced)
}
