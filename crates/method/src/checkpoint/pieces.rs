//! Checkpoints of several ranks: one piece per rank and a manifest, all in the run's output
//! directory, so that no rank gathers the whole state (a 512^3 state is about 15 GB).
//!
//! * a piece, `checkpoint-sSTEP-wSERIAL-pRANK.bin`: the container of
//!   `vortex_spectral::durable` (magic `VXMPIECE`) around the bincode 2 encoding of the step,
//!   the rank's global ids, its particles (position, strength, core radius, core radius at
//!   the last reset) and, when the state has one, its rows of the Adams-Bashforth history, in
//!   the order of the ids. Every rank writes its own, in parallel; `SERIAL` counts the
//!   checkpoints written into the directory, so a name is never reused;
//! * the manifest, `checkpoint.manifest` (magic `VXMMANIF`), written by rank 0 only after
//!   every rank reported its piece durable: the configuration record of the run, the initial
//!   energy, the step counters, the particles over all ranks, whether the pieces carry the
//!   history, and per piece its file name, byte length, checksum and particle count. A manifest
//!   exists only for a complete set; the last `output.checkpoints_kept` are kept
//!   (`checkpoint.manifest.1`, ...), and the pieces that no manifest in the directory names
//!   are removed after each write ([`remove_unreferenced`]: files of the piece pattern only).
//!
//! A piece is refused, naming its file, when it is missing, when its length or checksum
//! disagrees with the manifest, when its content is corrupt, or when it holds another step,
//! particle count or history than the manifest says.

use super::{ck_err, from_durable, Checkpoint};
use crate::collective::{balance_by_gid, LocalState};
use crate::error::{Error, Result};
use crate::particles::Particles;
use crate::rhs::Derivatives;
use crate::stepping::State;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use vortex_spectral::durable::{self, HEADER_LEN};

/// Magic bytes of a piece.
pub const PIECE_MAGIC: &[u8; 8] = b"VXMPIECE";
/// Magic bytes of a manifest.
pub const MANIFEST_MAGIC: &[u8; 8] = b"VXMMANIF";
/// Format version of pieces and manifests.
pub const PIECES_VERSION: u32 = 1;
/// The newest manifest of a run in its output directory (older ones: `.1`, `.2`, ...).
pub const MANIFEST_FILE: &str = "checkpoint.manifest";

/// One piece as its manifest lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PieceEntry {
    /// File name, in the manifest's directory.
    pub file: String,
    /// Length of the file in bytes (header included).
    pub bytes: u64,
    /// FNV-1a 64 checksum of its payload (the one in its header).
    pub checksum: u64,
    /// Particles it holds.
    pub particles: u64,
}

/// The record of a complete set of pieces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// `crate::config::Config::restart_keys` of the run that wrote it, as `key = value` lines.
    pub config: String,
    /// Energy of the first diagnostics (reference of the blow-up test).
    pub initial_energy: f64,
    pub step: u64,
    pub step_reset: u64,
    pub reinterpolations: u64,
    /// Particles over all pieces.
    pub n_global: u64,
    /// Whether the pieces carry the Adams-Bashforth history.
    pub history: bool,
    /// The pieces, in the order of the ranks that wrote them.
    pub pieces: Vec<PieceEntry>,
}

impl Manifest {
    /// The manifest of `local` (any rank's part of the state) without its pieces.
    pub fn head(config: &str, initial_energy: f64, local: &LocalState) -> Self {
        let st = &local.state;
        Self {
            config: config.to_string(),
            initial_energy,
            step: st.step,
            step_reset: st.step_reset,
            reinterpolations: st.reinterpolations,
            n_global: local.n_global as u64,
            history: st.previous.is_some(),
            pieces: Vec::new(),
        }
    }
}

#[derive(Serialize)]
struct PieceRef<'a> {
    step: u64,
    ids: &'a [u64],
    particles: &'a Particles,
    previous: Option<&'a Derivatives>,
}

#[derive(Deserialize)]
struct Piece {
    step: u64,
    ids: Vec<u64>,
    particles: Particles,
    previous: Option<Derivatives>,
}

/// The file name of rank `rank`'s piece of checkpoint number `serial` of the directory, at
/// `step`.
pub fn piece_file(step: u64, serial: u64, rank: usize) -> String {
    format!("checkpoint-s{step:08}-w{serial:04}-p{rank:04}.bin")
}

/// `(step, serial, rank)` of a file name of [`piece_file`]'s pattern (nothing else matches).
pub fn parse_piece_file(name: &str) -> Option<(u64, u64, usize)> {
    let rest = name.strip_prefix("checkpoint-s")?.strip_suffix(".bin")?;
    let mut parts = rest.split('-');
    let step = parts.next()?;
    let serial = parts.next()?.strip_prefix('w')?;
    let rank = parts.next()?.strip_prefix('p')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some() || !digits(step) || !digits(serial) || !digits(rank) {
        return None;
    }
    Some((step.parse().ok()?, serial.parse().ok()?, rank.parse().ok()?))
}

/// Whether `name` is a manifest of a run directory (`checkpoint.manifest` or a kept older
/// copy `checkpoint.manifest.N`).
pub fn is_manifest_file(name: &str) -> bool {
    name == MANIFEST_FILE
        || name
            .strip_prefix(MANIFEST_FILE)
            .and_then(|r| r.strip_prefix('.'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn file_names(dir: &Path) -> Result<Vec<String>> {
    let rd = std::fs::read_dir(dir).map_err(Error::io(dir))?;
    Ok(rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect())
}

/// One more than the largest serial of the pieces in `dir` (0 when there are none).
pub fn next_serial(dir: &Path) -> Result<u64> {
    Ok(file_names(dir)?
        .iter()
        .filter_map(|n| parse_piece_file(n.strip_suffix(".tmp").unwrap_or(n)))
        .map(|(_, w, _)| w + 1)
        .max()
        .unwrap_or(0))
}

/// Writes this rank's piece `file` into `dir` atomically (temporary file, fsync, rename,
/// directory fsync) and returns its entry for the manifest.
pub fn write_piece(dir: &Path, file: &str, local: &LocalState) -> Result<PieceEntry> {
    let path = dir.join(file);
    let st = &local.state;
    let piece = PieceRef {
        step: st.step,
        ids: &local.ids,
        particles: &st.particles,
        previous: st.previous.as_ref(),
    };
    let payload = bincode::serde::encode_to_vec(&piece, bincode::config::standard())
        .map_err(|e| ck_err(&path, format!("encoding failed: {e}")))?;
    let checksum = durable::write_container_summed(&path, PIECE_MAGIC, PIECES_VERSION, &payload, 1)
        .map_err(from_durable)?;
    Ok(PieceEntry {
        file: file.to_string(),
        bytes: (HEADER_LEN + payload.len()) as u64,
        checksum,
        particles: local.ids.len() as u64,
    })
}

/// Writes the manifest of a complete set into `dir` atomically, keeping the last `keep`, then
/// removes the pieces that no manifest of `dir` names (a failure there is a warning: the
/// checkpoint is complete).
pub fn write_manifest(dir: &Path, m: &Manifest, keep: usize) -> Result<PathBuf> {
    let path = dir.join(MANIFEST_FILE);
    let payload = bincode::serde::encode_to_vec(m, bincode::config::standard())
        .map_err(|e| ck_err(&path, format!("encoding failed: {e}")))?;
    durable::write_container(&path, MANIFEST_MAGIC, PIECES_VERSION, &payload, keep)
        .map_err(from_durable)?;
    match remove_unreferenced(dir) {
        Ok(gone) if !gone.is_empty() => {
            log::debug!("{}: removed the pieces {}", dir.display(), gone.join(", "))
        }
        Ok(_) => {}
        Err(e) => log::warn!("old checkpoint pieces not removed: {e}"),
    }
    Ok(path)
}

/// Removes the files of `dir` of the piece pattern (and their `.tmp` leftovers) that no
/// manifest of `dir` names; nothing at all when a manifest cannot be read. Returns the names
/// removed.
pub fn remove_unreferenced(dir: &Path) -> Result<Vec<String>> {
    let names = file_names(dir)?;
    let mut named = HashSet::new();
    for n in names.iter().filter(|n| is_manifest_file(n)) {
        let m = read_manifest(&dir.join(n)).map_err(|e| {
            Error::Other(format!(
                "{e} (no piece removed while a manifest is unreadable)"
            ))
        })?;
        named.extend(m.pieces.into_iter().map(|p| p.file));
    }
    let mut gone = Vec::new();
    for n in &names {
        let base = n.strip_suffix(".tmp").unwrap_or(n);
        if parse_piece_file(base).is_some() && !named.contains(base) {
            let p = dir.join(n);
            std::fs::remove_file(&p).map_err(Error::io(&p))?;
            gone.push(n.clone());
        }
    }
    Ok(gone)
}

/// Reads a manifest, refusing another format or version, a corrupt payload, and a list of
/// pieces that cannot describe the state (names outside the directory, counts that do not
/// add up).
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let payload = durable::read_container(
        path,
        MANIFEST_MAGIC,
        PIECES_VERSION,
        "vortex-method checkpoint manifest",
    )
    .map_err(from_durable)?;
    let (m, used): (Manifest, usize) =
        bincode::serde::decode_from_slice(&payload, bincode::config::standard())
            .map_err(|e| ck_err(path, format!("corrupt or truncated: {e}")))?;
    if used != payload.len() {
        return Err(ck_err(path, "trailing bytes after the manifest"));
    }
    let total: u64 = m.pieces.iter().map(|p| p.particles).sum();
    if m.pieces.is_empty() || total != m.n_global {
        return Err(ck_err(
            path,
            format!(
                "lists {} pieces of {total} particles in all for a state of {}",
                m.pieces.len(),
                m.n_global
            ),
        ));
    }
    let mut seen = HashSet::new();
    for p in &m.pieces {
        if parse_piece_file(&p.file).is_none() || !seen.insert(p.file.as_str()) {
            return Err(ck_err(
                path,
                format!("lists `{}`, not a piece file name or listed twice", p.file),
            ));
        }
    }
    Ok(m)
}

/// The payload of the piece `bytes` (a whole file) after checking its header and content
/// against its manifest entry `e`: the container of `vortex_spectral::durable` with the piece's
/// magic bytes and version, the listed length and checksum in its header and the checksum of
/// its payload.
fn check_container<'a>(bytes: &'a [u8], e: &PieceEntry) -> std::result::Result<&'a [u8], String> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != PIECE_MAGIC {
        return Err("not a checkpoint piece (wrong magic bytes)".into());
    }
    let word = |a: usize| u64::from_le_bytes(bytes[a..a + 8].try_into().expect("8 bytes"));
    let v = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if v != PIECES_VERSION {
        return Err(format!(
            "format version {v}, this build reads version {PIECES_VERSION}"
        ));
    }
    let (len, sum, payload) = (word(12), word(20), &bytes[HEADER_LEN..]);
    if bytes.len() as u64 != e.bytes || len != payload.len() as u64 {
        return Err(format!(
            "{} bytes (header: {len}-byte payload) where the manifest lists {}: truncated or \
             replaced",
            bytes.len(),
            e.bytes
        ));
    }
    if sum != e.checksum {
        return Err(format!(
            "checksum {sum:016x} where the manifest lists {:016x}: not the piece this manifest \
             was written with",
            e.checksum
        ));
    }
    let got = durable::checksum(payload);
    if got != sum {
        return Err(format!(
            "checksum mismatch (listed {sum:016x}, computed {got:016x}): the piece is corrupt"
        ));
    }
    Ok(payload)
}

/// Reads piece `i` of the manifest `m` (at `manifest`) as this rank's part of the state,
/// after checking it against the manifest: present, of the listed length and checksum, intact,
/// and holding the listed step, particle count and history.
pub fn read_piece(manifest: &Path, m: &Manifest, i: usize) -> Result<LocalState> {
    let e = &m.pieces[i];
    let dir = manifest.parent().unwrap_or(Path::new("."));
    let path = dir.join(&e.file);
    let whose = format!(
        "piece {} of {} of {} (step {})",
        i + 1,
        m.pieces.len(),
        manifest.display(),
        m.step
    );
    let bad = |what: String| ck_err(&path, format!("{what}: {whose}"));
    let len = match std::fs::metadata(&path) {
        Ok(md) => md.len(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(bad(format!(
                "missing; restore it or restart from an older manifest ({}.1)",
                MANIFEST_FILE
            )))
        }
        Err(err) => return Err(bad(err.to_string())),
    };
    if len != e.bytes {
        return Err(bad(format!(
            "{len} bytes where the manifest lists {}: truncated or replaced",
            e.bytes
        )));
    }
    let bytes = std::fs::read(&path).map_err(Error::io(&path))?;
    let payload = check_container(&bytes, e).map_err(bad)?;
    let (p, used): (Piece, usize) =
        bincode::serde::decode_from_slice(payload, bincode::config::standard())
            .map_err(|err| bad(format!("corrupt or truncated: {err}")))?;
    if used != payload.len() {
        return Err(bad("trailing bytes after the particles".into()));
    }
    drop(bytes);
    let n = p.ids.len();
    let history_ok = match &p.previous {
        Some(d) => m.history && d.velocity.len() == n && d.stretching.len() == n,
        None => !m.history,
    };
    if p.step != m.step || n as u64 != e.particles || p.particles.len() != n {
        return Err(bad(format!(
            "holds step {} and {n} ids for {} particles where the manifest lists step {} and {} \
             particles",
            p.step,
            p.particles.len(),
            m.step,
            e.particles
        )));
    }
    if !history_ok {
        return Err(bad(format!(
            "its Adams-Bashforth history does not match the manifest's (history: {})",
            m.history
        )));
    }
    Ok(LocalState {
        state: State {
            step: m.step,
            step_reset: m.step_reset,
            particles: p.particles,
            previous: p.previous,
            reinterpolations: m.reinterpolations,
        },
        ids: p.ids,
        n_global: m.n_global as usize,
    })
}

/// The rank of `ranks` that reads each piece of `m`: the pieces in their order over the ranks
/// so that each rank reads about `n / ranks` particles (a piece goes to the rank whose share
/// holds its middle particle).
pub fn share(m: &Manifest, ranks: usize) -> Vec<usize> {
    let n = m.n_global.max(1) as u128;
    let mut before = 0u128;
    m.pieces
        .iter()
        .map(|p| {
            let mid2 = 2 * before + p.particles as u128;
            before += p.particles as u128;
            ((ranks as u128 * mid2 / (2 * n)) as usize).min(ranks - 1)
        })
        .collect()
}

/// Appends the particles (and history rows) of `b` to `a`.
pub(crate) fn append(a: &mut LocalState, b: LocalState) {
    let (p, q) = (&mut a.state.particles, b.state.particles);
    p.position.extend(q.position);
    p.strength.extend(q.strength);
    p.sigma.extend(q.sigma);
    p.sigma0.extend(q.sigma0);
    match (&mut a.state.previous, b.state.previous) {
        (Some(d), Some(e)) => {
            d.velocity.extend(e.velocity);
            d.stretching.extend(e.stretching);
        }
        (d @ None, Some(e)) if a.ids.is_empty() => *d = Some(e),
        _ => {}
    }
    a.ids.extend(b.ids);
}

/// An empty part of the state of `m` (a rank that reads no piece).
pub(crate) fn empty_part(m: &Manifest) -> LocalState {
    LocalState {
        state: State {
            step: m.step,
            step_reset: m.step_reset,
            particles: Particles::default(),
            previous: m.history.then(|| Derivatives {
                velocity: vec![],
                stretching: vec![],
            }),
            reinterpolations: m.reinterpolations,
        },
        ids: Vec::new(),
        n_global: m.n_global as usize,
    }
}

/// The whole state of the manifest `path` in global-id order, every piece read and checked
/// in this process (the readers of tools and of the Python package).
pub fn assemble(path: &Path) -> Result<Checkpoint> {
    let m = read_manifest(path)?;
    let mut all = empty_part(&m);
    for i in 0..m.pieces.len() {
        append(&mut all, read_piece(path, &m, i)?);
    }
    let whole = balance_by_gid(&vortex_domain::SelfComm, all)
        .map_err(|e| ck_err(path, format!("the pieces do not form one state: {e}")))?;
    Ok(Checkpoint {
        config: m.config,
        initial_energy: m.initial_energy,
        state: whole.state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piece_names_are_recognised_and_nothing_else() {
        let f = piece_file(40, 3, 12);
        assert_eq!(f, "checkpoint-s00000040-w0003-p0012.bin");
        assert_eq!(parse_piece_file(&f), Some((40, 3, 12)));
        assert_eq!(
            parse_piece_file(&piece_file(123_456_789, 10_000, 0)),
            Some((123_456_789, 10_000, 0))
        );
        for other in [
            "checkpoint.bin",
            "checkpoint-notes.bin",
            "checkpoint-s00000040-w0003-p0012.bin.tmp",
            "checkpoint-s00000040-w0003-p0012.bin.orig",
            "checkpoint-s00000040-w0003.bin",
            "checkpoint-s-w0003-p0012.bin",
            "checkpoint-s00000040-w0003-p0012-x.bin",
            "checkpoint-s0000004x-w0003-p0012.bin",
            "checkpoint-s00000040-x0003-p0012.bin",
        ] {
            assert_eq!(parse_piece_file(other), None, "{other}");
        }
        assert!(is_manifest_file("checkpoint.manifest"));
        assert!(is_manifest_file("checkpoint.manifest.12"));
        for other in [
            "checkpoint.manifest.tmp",
            "checkpoint.manifest.",
            "checkpoint.manifests",
        ] {
            assert!(!is_manifest_file(other), "{other}");
        }
    }

    fn manifest(counts: &[u64]) -> Manifest {
        Manifest {
            config: String::new(),
            initial_energy: 1.0,
            step: 0,
            step_reset: 0,
            reinterpolations: 0,
            n_global: counts.iter().sum(),
            history: false,
            pieces: counts
                .iter()
                .enumerate()
                .map(|(i, &c)| PieceEntry {
                    file: piece_file(0, 0, i),
                    bytes: 0,
                    checksum: 0,
                    particles: c,
                })
                .collect(),
        }
    }

    #[test]
    fn pieces_are_shared_in_order_by_particle_count() {
        // as many ranks as pieces of equal size: one each
        assert_eq!(share(&manifest(&[10, 10, 10]), 3), vec![0, 1, 2]);
        // fewer ranks: contiguous runs of pieces
        assert_eq!(share(&manifest(&[10, 10, 10, 10]), 2), vec![0, 0, 1, 1]);
        assert_eq!(share(&manifest(&[10, 10, 10]), 1), vec![0, 0, 0]);
        // more ranks than pieces: each piece to the rank of its middle particle
        assert_eq!(share(&manifest(&[10, 10]), 4), vec![1, 3]);
        // unequal pieces: by particles, not by count of pieces
        assert_eq!(share(&manifest(&[90, 5, 5]), 2), vec![0, 1, 1]);
        // empty pieces and an empty state stay in range
        assert_eq!(share(&manifest(&[0, 0]), 3), vec![0, 0]);
        let s = share(&manifest(&[3, 0, 7, 1, 9]), 4);
        assert!(
            s.windows(2).all(|w| w[0] <= w[1]) && s.iter().all(|&r| r < 4),
            "{s:?}"
        );
    }
}
