//! Files a long run can trust, shared by both solvers (`vortex run` and `vortex spectral`; see
//! `docs/CONVENTIONS.md`, "Checkpoints"):
//!
//! * checkpoint containers: `magic (8 bytes) | version (u32 LE) | payload length (u64 LE) |
//!   FNV-1a 64 checksum of the payload (u64 LE) | payload`. FNV-1a changes its state bijectively
//!   at every byte, so any change confined to one byte (every single flipped bit) is always
//!   detected; a reader refuses a file whose length or checksum disagree, naming which.
//! * atomic writes: `NAME.tmp`, `fsync`, rename over `NAME`, `fsync` of the directory; the
//!   temporary file is removed when anything fails (a full disk leaves no `.tmp`). The last `keep`
//!   checkpoints are kept: `NAME` is the newest, `NAME.1` the one before, and so on.
//! * the interrupt flag: the binary points SIGINT/SIGTERM/SIGUSR1 at [`interrupt_flag`]; the run
//!   loops poll [`interrupted`] once per step, then write a checkpoint, flush every output and
//!   return; the binary exits with [`EXIT_INTERRUPTED`].
//! * output directories: [`prepare_out`] refuses a non-empty one unless the run overwrites it or
//!   restarts into it; the lock, the restart check and the memory estimates are in
//!   [`crate::outdir`] (re-exported here).
//! * configuration differences at restart, key by key ([`config_diff`]).

use crate::file_error::os;
pub use crate::file_error::DurableError;
pub use crate::outdir::{
    announce_steps, available_memory, cap_threads, check_memory, check_memory_against,
    check_restart_into, duration_text, lock_out, try_vec, OutLock, LOCK_FILE,
};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Exit status of a run stopped by SIGINT, SIGTERM or SIGUSR1 after writing its checkpoint
/// (`EX_TEMPFAIL` of `sysexits.h`: "try again", i.e. restart from the checkpoint).
pub const EXIT_INTERRUPTED: i32 = 75;

const FNV_OFFSET: u64 = 0xcbf29ce484222325;

/// FNV-1a, 64 bits.
pub fn checksum(bytes: &[u8]) -> u64 {
    checksum_from(FNV_OFFSET, bytes)
}

/// FNV-1a continued from the state `h` over `bytes` (the checksum of a file read in pieces).
fn checksum_from(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Header length of a container.
pub const HEADER_LEN: usize = 28;

/// `path` with `suffix` appended to its file name.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The `i`-th older copy of a kept file (`i = 0`: the file itself).
pub fn kept_name(path: &Path, i: usize) -> PathBuf {
    if i == 0 {
        path.to_path_buf()
    } else {
        with_suffix(path, &format!(".{i}"))
    }
}

fn sync_dir(path: &Path) -> Result<(), DurableError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // Directories can be opened read-only and synced on Unix; elsewhere this is a no-op.
    #[cfg(unix)]
    {
        let d = std::fs::File::open(dir).map_err(os(dir))?;
        d.sync_all().map_err(os(dir))?;
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: `path.tmp`, `fsync`, rename, `fsync` of the directory.
/// The temporary file is removed on any failure. With `keep > 1` the earlier `path` becomes
/// `path.1` (and `path.1` becomes `path.2` ...), keeping `keep` files in all.
pub fn write_atomic(path: &Path, bytes: &[&[u8]], keep: usize) -> Result<(), DurableError> {
    let tmp = with_suffix(path, ".tmp");
    let r = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(os(&tmp))?;
        for b in bytes {
            f.write_all(b).map_err(os(&tmp))?;
        }
        f.sync_all().map_err(os(&tmp))
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if keep > 1 && path.exists() {
        if let Err(e) = rotate(path, keep) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    }
    if let Err(e) = std::fs::rename(&tmp, path).map_err(os(path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(path)
}

/// The most checkpoints a run keeps (`checkpoints_kept` of both solvers): each is a whole
/// copy of the state.
pub const MAX_KEPT: usize = 100;

/// The indices `i >= 1` of the older copies `path.i` present beside `path`, from a listing of
/// the directory (one `readdir`, not a look-up per possible index).
fn kept_indices(path: &Path) -> Result<Vec<usize>, DurableError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok(vec![]);
    };
    let prefix = format!("{name}.");
    let mut found: Vec<usize> = std::fs::read_dir(dir)
        .map_err(os(dir))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let f = e.file_name();
            let i = f.to_str()?.strip_prefix(&prefix)?;
            // the digits only: `.tmp` and other suffixes are not copies
            (i.bytes().all(|b| b.is_ascii_digit()) && !i.starts_with('0'))
                .then(|| i.parse().ok())
                .flatten()
        })
        .collect();
    found.sort_unstable();
    Ok(found)
}

/// Shifts the kept copies of `path` by one (`path.i` -> `path.(i+1)` for `i + 1 < keep`,
/// `path` -> `path.1`), oldest first, so that `keep` files remain once `path` is written.
/// Copies at or beyond `keep` (of a run that kept more) are left as they are.
fn rotate(path: &Path, keep: usize) -> Result<(), DurableError> {
    let mut present: Vec<usize> = kept_indices(path)?
        .into_iter()
        .filter(|&i| i + 1 < keep)
        .collect();
    present.push(0);
    present.sort_unstable_by(|a, b| b.cmp(a));
    for i in present {
        let (from, to) = (kept_name(path, i), kept_name(path, i + 1));
        std::fs::rename(&from, &to).map_err(os(&to))?;
    }
    Ok(())
}

/// Writes `path` through `path.tmp`: `body` writes the content into a buffered writer, then the
/// file is flushed and renamed over `path` (no `fsync`: for outputs, not checkpoints). On any
/// error the temporary file is removed, so a full disk leaves neither a truncated `path` nor a
/// `.tmp`.
pub fn write_via_tmp(
    path: &Path,
    body: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<(), DurableError> {
    let tmp = with_suffix(path, ".tmp");
    let r = (|| {
        let f = std::fs::File::create(&tmp).map_err(os(&tmp))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        body(&mut w).map_err(os(&tmp))?;
        w.flush().map_err(os(&tmp))?;
        drop(w);
        std::fs::rename(&tmp, path).map_err(os(path))
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// Writes a checkpoint container (see the module documentation), keeping the last `keep`.
pub fn write_container(
    path: &Path,
    magic: &[u8; 8],
    version: u32,
    payload: &[u8],
    keep: usize,
) -> Result<(), DurableError> {
    write_container_summed(path, magic, version, payload, keep).map(|_| ())
}

/// [`write_container`], returning the checksum of the payload written into the header (a
/// caller that lists the file elsewhere, such as a checkpoint manifest, needs not compute it
/// twice).
pub fn write_container_summed(
    path: &Path,
    magic: &[u8; 8],
    version: u32,
    payload: &[u8],
    keep: usize,
) -> Result<u64, DurableError> {
    let sum = checksum(payload);
    let mut head = Vec::with_capacity(HEADER_LEN);
    head.extend_from_slice(magic);
    head.extend_from_slice(&version.to_le_bytes());
    head.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    head.extend_from_slice(&sum.to_le_bytes());
    write_atomic(path, &[&head, payload], keep).map(|_| sum)
}

/// Reads a checkpoint container and returns its payload after checking the magic bytes
/// (`what` names the kind of file expected), the version, the length and the checksum. The
/// file must be a regular one ([`crate::inputs::open_regular`]: a FIFO or a device is refused
/// by its type), and its header is read and checked against the file's length, and the
/// payload's size against the available memory, before the payload is allocated and read.
pub fn read_container(
    path: &Path,
    magic: &[u8; 8],
    version: u32,
    what: &str,
) -> Result<Vec<u8>, DurableError> {
    let bad = |msg: String| DurableError::Corrupt {
        path: path.to_path_buf(),
        msg,
    };
    let (mut file, file_len) = crate::inputs::open_regular(path, what)?;
    let mut head = [0u8; HEADER_LEN];
    let got = read_up_to(&mut file, &mut head).map_err(os(path))?;
    if got < 12 || &head[..8] != magic {
        return Err(bad(format!(
            "not a {what} (wrong magic bytes; a {what} starts with {:?})",
            String::from_utf8_lossy(magic)
        )));
    }
    let v = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if v != version {
        return Err(bad(format!(
            "format version {v}, this build reads version {version}"
        )));
    }
    if got < HEADER_LEN {
        return Err(bad(format!(
            "truncated: {got} bytes, shorter than the {HEADER_LEN}-byte header"
        )));
    }
    let len = u64::from_le_bytes(head[12..20].try_into().expect("8 bytes"));
    let sum = u64::from_le_bytes(head[20..28].try_into().expect("8 bytes"));
    let have = file_len - HEADER_LEN as u64;
    if have != len {
        return Err(bad(format!(
            "truncated or padded: payload {have} bytes, header says {len}"
        )));
    }
    // the payload and its decoded copy
    crate::outdir::check_memory(&format!("{what} {}", path.display()), 2.0 * len as f64)
        .map_err(bad)?;
    let mut bytes =
        crate::outdir::try_vec(&format!("{what} {}", path.display()), len as usize, 0u8)
            .map_err(bad)?;
    // in pieces, the checksum as it goes: a signal stops a long read within a piece (a read
    // of one piece is not stopped: the checkpoint a signal's step writes reads its small
    // manifests to remove the pieces no manifest names)
    let mut h = FNV_OFFSET;
    for (i, piece) in bytes.chunks_mut(READ_PIECE).enumerate() {
        if i > 0 {
            if let Some(sig) = interrupted() {
                return Err(bad(format!("reading stopped by signal {sig}")));
            }
        }
        let got = read_up_to(&mut file, piece).map_err(os(path))?;
        if got < piece.len() {
            return Err(bad(format!(
                "truncated while it was read (the file shrank): payload shorter than {len} bytes"
            )));
        }
        h = checksum_from(h, piece);
    }
    if h != sum {
        return Err(bad(format!(
            "checksum mismatch (stored {sum:016x}, computed {h:016x}): the file is corrupt; \
             an older copy ({}) may be intact",
            kept_name(path, 1).display()
        )));
    }
    Ok(bytes)
}

/// Bytes read between two looks at the interrupt flag while a checkpoint is read (64 MiB: well
/// under a second on any disk that holds checkpoints).
const READ_PIECE: usize = 64 << 20;

/// Reads into `buf` until it is full or the file ends; returns the bytes read.
fn read_up_to(r: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn flag() -> &'static Arc<AtomicUsize> {
    static FLAG: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    FLAG.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

/// The flag a signal handler sets to the signal's number (0: none) to ask the run to stop at
/// the end of the current step.
pub fn interrupt_flag() -> Arc<AtomicUsize> {
    flag().clone()
}

/// The number of the signal that asked the run to stop, if any.
pub fn interrupted() -> Option<usize> {
    match flag().load(Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

/// Asks the running loop to stop as a signal would (tests, or a caller's own stop rule).
pub fn request_stop(signal: usize) {
    flag().store(signal.max(1), Ordering::Relaxed);
}

/// Runs `f` on a thread of its own and waits for it unless a signal asks the process to stop
/// (looked at every 100 ms): then the wait ends, a warning names `what` was left unfinished,
/// and `None` is returned (the thread ends with the process). For work after the last step
/// (figures) that must not keep a signalled process alive. `None` too when `f` panicked.
pub fn unless_interrupted<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let skipped = |sig: usize| {
        log::warn!("signal {sig}: {what} left unfinished");
        None
    };
    if let Some(sig) = interrupted() {
        return skipped(sig);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(v) => return Some(v),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Some(sig) = interrupted() {
                    return skipped(sig);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                log::warn!("{what}: failed (see the message above)");
                return None;
            }
        }
    }
}

/// The checkpoints in `dir` a restart may take, newest first (by modification time; on a tie
/// the current file before its kept copies): for each of `bases` (`checkpoint.bin`,
/// `checkpoint.manifest`) the file, its kept copies `base.N` and a left-over `base.tmp` (a
/// write whose data was complete when the process was killed between the rotation of the
/// kept copies and the rename: its checksum tells).
pub fn restart_candidates(dir: &Path, bases: &[&str]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(Option<std::time::SystemTime>, usize, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rank = bases.iter().find_map(|b| {
                let rest = name.strip_prefix(b)?;
                match rest {
                    "" => Some(0),
                    ".tmp" => Some(1),
                    _ => rest
                        .strip_prefix('.')
                        .and_then(|i| i.parse::<usize>().ok())
                        .map(|i| 1 + i),
                }
            })?;
            let meta = e.metadata().ok().filter(|m| m.is_file())?;
            Some((meta.modified().ok(), rank, e.path()))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    found.into_iter().map(|(_, _, p)| p).collect()
}

/// The first of `candidates` (newest first, [`restart_candidates`]) that `load` accepts, with
/// what it loaded; the newer ones it skipped are logged with the reason, and when none loads
/// the error lists every candidate and why (or says that `dir` holds none).
pub fn newest_loadable<T>(
    dir: &Path,
    candidates: &[PathBuf],
    mut load: impl FnMut(&Path) -> Result<T, String>,
) -> Result<(PathBuf, T), DurableError> {
    let mut skipped = Vec::new();
    for p in candidates {
        match load(p) {
            Ok(v) => {
                let name = p.file_name().map_or(p.display().to_string(), |n| {
                    n.to_string_lossy().into_owned()
                });
                if skipped.is_empty() {
                    log::info!(
                        "--restart {}: its newest checkpoint is {name}",
                        dir.display()
                    );
                } else {
                    log::warn!(
                        "--restart {}: the newest loadable checkpoint is {name}; skipped: {}",
                        dir.display(),
                        skipped.join("; ")
                    );
                }
                return Ok((p.clone(), v));
            }
            Err(why) => skipped.push(format!("{} ({why})", p.display())),
        }
    }
    Err(DurableError::OutDir {
        path: dir.to_path_buf(),
        msg: if skipped.is_empty() {
            "--restart: the directory holds no checkpoint".into()
        } else {
            format!(
                "--restart: none of its checkpoints can be loaded: {}",
                skipped.join("; ")
            )
        },
    })
}

/// The error of a `--restart` file that does not exist, with the checkpoints its directory
/// does hold (a run killed between the rotation of its copies and the rename leaves
/// `checkpoint.bin.1` and `checkpoint.bin.tmp` but no `checkpoint.bin`).
pub fn missing_restart_hint(path: &Path, bases: &[&str]) -> Option<DurableError> {
    if path.exists() {
        return None;
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let there = restart_candidates(dir, bases);
    // a symbolic link that leads nowhere (its target missing, or a loop) is there itself
    let link = std::fs::symlink_metadata(path).is_ok();
    let msg = if link {
        match std::fs::metadata(path) {
            Err(e) => format!("is a symbolic link that leads to no file ({e}) (--restart)"),
            Ok(_) => "is a symbolic link that leads to no file (--restart)".to_string(),
        }
    } else if there.is_empty() {
        "does not exist (--restart)".to_string()
    } else {
        format!(
            "does not exist (--restart); its directory holds {}: pass --restart {} to take \
             the newest loadable one",
            there
                .iter()
                .filter_map(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(", "),
            dir.display()
        )
    };
    Some(DurableError::Corrupt {
        path: path.to_path_buf(),
        msg,
    })
}

/// How a run treats its output directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutMode {
    /// A new run: the directory must be absent or empty.
    Fresh,
    /// A new run that replaces an earlier run's files (`--overwrite`).
    Overwrite,
    /// A restart: appends to the directory's files.
    Restart,
}

impl OutMode {
    /// The mode of a run with or without `--restart` and `--overwrite` (a restart appends).
    pub fn of(restart: bool, overwrite: bool) -> OutMode {
        match (restart, overwrite) {
            (true, _) => OutMode::Restart,
            (false, true) => OutMode::Overwrite,
            (false, false) => OutMode::Fresh,
        }
    }
}

/// Files that mark a directory as a run's output (both solvers).
const RUN_MARKERS: [&str; 6] = [
    "run.json",
    "config.toml",
    "checkpoint.bin",
    "diagnostics.csv",
    "energy.csv",
    "timing.csv",
];

/// Creates `out` or checks it for `mode` (the lock file of [`crate::outdir::lock_out`] and a
/// lone `run.json` do not count as contents): a non-empty directory is refused for a fresh run;
/// with `Overwrite` the earlier run's files are removed first, those its `run.json` lists and
/// nothing else ([`crate::overwrite`]: a user's files and sub-directories are kept), and a
/// directory that never held a run's output (none of `run.json`, `config.toml`,
/// `checkpoint.bin`, `diagnostics.csv`, `energy.csv`, `timing.csv`) is refused.
pub fn prepare_out(out: &Path, mode: OutMode) -> Result<(), DurableError> {
    prepare_out_keeping(out, mode, &[])
}

/// [`prepare_out`] that refuses `--overwrite` when it would remove one of `inputs` (the
/// command's own configuration, particle or target files).
pub fn prepare_out_keeping(
    out: &Path,
    mode: OutMode,
    inputs: &[&Path],
) -> Result<(), DurableError> {
    let refuse = |msg: String| DurableError::OutDir {
        path: out.to_path_buf(),
        msg,
    };
    if out.exists() && !out.is_dir() {
        return Err(refuse("exists and is not a directory".into()));
    }
    if out.is_dir() && mode != OutMode::Restart {
        // the lock file is not an output; a `run.json` alone is the record of this invocation
        // (written once the directory was locked and prepared) or of runs that wrote nothing
        let entries: Vec<PathBuf> = std::fs::read_dir(out)
            .map_err(os(out))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| !crate::outdir::is_lock_file(p))
            .collect();
        let only_record = entries
            .iter()
            .all(|p| p.file_name().is_some_and(|n| n == "run.json"));
        if !only_record {
            if mode == OutMode::Fresh {
                return Err(refuse(format!(
                    "not empty ({} entries, e.g. {}): it holds an earlier run; pass --overwrite \
                     to replace it, --restart DIR/checkpoint.bin to continue it, or another --out",
                    entries.len(),
                    entries[0].display()
                )));
            }
            let marked = RUN_MARKERS.iter().any(|m| out.join(m).exists());
            if !marked {
                return Err(refuse(format!(
                    "--overwrite refused: none of {} is there, so this is not a run's output",
                    RUN_MARKERS.join(", ")
                )));
            }
            crate::overwrite::remove_earlier_run(out, inputs)?;
        }
    }
    std::fs::create_dir_all(out).map_err(os(out))
}

/// A value as TOML text (configurations copied into output directories, templates).
pub fn to_toml<T: serde::Serialize>(v: &T) -> Result<String, String> {
    toml::to_string(v).map_err(|e| e.to_string())
}

/// Flattens a TOML document into `dotted.key -> value` (arrays as their TOML text).
pub fn flatten_toml(text: &str) -> Result<BTreeMap<String, String>, String> {
    let v: toml::Value = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    fn walk(prefix: &str, v: &toml::Value, out: &mut BTreeMap<String, String>) {
        match v {
            toml::Value::Table(t) => {
                for (k, x) in t {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, x, out);
                }
            }
            x => {
                out.insert(prefix.to_string(), x.to_string());
            }
        }
    }
    walk("", &v, &mut out);
    Ok(out)
}

/// The keys whose values differ between two flattened configurations, one line each:
/// `key: checkpoint VALUE, this run VALUE` (`(absent)` for a missing key).
pub fn config_diff(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Vec<String> {
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let absent = String::from("(absent)");
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (old.get(k).unwrap_or(&absent), new.get(k).unwrap_or(&absent));
            (a != b).then(|| format!("{k}: checkpoint {a}, this run {b}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn every_single_bit_flip_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ck.bin");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let payload: Vec<u8> = (0..4096).map(|_| rng.gen()).collect();
        write_container(&p, b"TESTMAGC", 3, &payload, 1).unwrap();
        assert_eq!(read_container(&p, b"TESTMAGC", 3, "test").unwrap(), payload);
        let good = std::fs::read(&p).unwrap();
        for _ in 0..200 {
            let mut b = good.clone();
            let bit = rng.gen_range(0..8 * b.len());
            b[bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&p, &b).unwrap();
            assert!(
                read_container(&p, b"TESTMAGC", 3, "test").is_err(),
                "bit {bit} accepted"
            );
        }
        assert!(!with_suffix(&p, ".tmp").exists());
    }

    #[test]
    fn keeps_the_last_k_and_leaves_no_tmp_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ck.bin");
        for i in 0..5u8 {
            write_container(&p, b"TESTMAGC", 1, &[i; 10], 3).unwrap();
        }
        for (k, want) in [(0, 4u8), (1, 3), (2, 2)] {
            let got = read_container(&kept_name(&p, k), b"TESTMAGC", 1, "test").unwrap();
            assert_eq!(got, vec![want; 10]);
        }
        assert!(!kept_name(&p, 3).exists());
        // a target that cannot be renamed over (a non-empty directory) fails without a .tmp
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("x"), b"x").unwrap();
        assert!(write_container(&blocked, b"TESTMAGC", 1, &[1; 10], 1).is_err());
        assert!(!with_suffix(&blocked, ".tmp").exists());
    }

    #[test]
    fn rotation_lists_the_directory_and_ignores_other_names() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ck.bin");
        for name in ["ck.bin.tmp", "ck.bin.01", "ck.bin.x", "ck.bin.7"] {
            std::fs::write(dir.path().join(name), b"other").unwrap();
        }
        for i in 0..4u8 {
            write_container(&p, b"TESTMAGC", 1, &[i; 4], MAX_KEPT).unwrap();
        }
        assert_eq!(kept_indices(&p).unwrap(), vec![1, 2, 3, 10]);
        for (k, want) in [(0, 3u8), (1, 2), (2, 1), (3, 0)] {
            let got = read_container(&kept_name(&p, k), b"TESTMAGC", 1, "test").unwrap();
            assert_eq!(got, vec![want; 4]);
        }
        for name in ["ck.bin.01", "ck.bin.x"] {
            assert_eq!(std::fs::read(dir.path().join(name)).unwrap(), b"other");
        }
        // keeping 2 of them: only checkpoint.bin and .1 move, .2 and beyond stay
        write_container(&p, b"TESTMAGC", 1, &[9; 4], 2).unwrap();
        let got = read_container(&kept_name(&p, 1), b"TESTMAGC", 1, "test").unwrap();
        assert_eq!(got, vec![3; 4]);
        let got = read_container(&kept_name(&p, 2), b"TESTMAGC", 1, "test").unwrap();
        assert_eq!(got, vec![1; 4]);
    }

    #[test]
    fn out_dir_policy() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o");
        prepare_out(&out, OutMode::Fresh).unwrap();
        std::fs::write(out.join("energy.csv"), b"t\n").unwrap();
        let e = prepare_out(&out, OutMode::Fresh).unwrap_err().to_string();
        assert!(e.contains("--overwrite"), "{e}");
        prepare_out(&out, OutMode::Restart).unwrap();
        assert!(out.join("energy.csv").exists());
        std::fs::write(out.join("notes.txt"), b"mine").unwrap();
        // without the record of a run the same-named files are refused, not replaced
        let e = prepare_out(&out, OutMode::Overwrite)
            .unwrap_err()
            .to_string();
        assert!(e.contains("energy.csv"), "{e}");
        let doc = r#"{ "invocations": [{ "status": "completed", "files": ["energy.csv"] }] }"#;
        std::fs::write(out.join("run.json"), doc).unwrap();
        prepare_out(&out, OutMode::Overwrite).unwrap();
        assert!(!out.join("energy.csv").exists());
        assert!(out.join("notes.txt").exists(), "a user's file removed");
        // a directory that never held a run is not emptied
        let e = prepare_out(&out, OutMode::Overwrite)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a run's output"), "{e}");
        assert!(out.join("notes.txt").exists());
    }

    #[test]
    fn config_diff_lists_changed_keys() {
        let a = flatten_toml("n = 32\n[initial]\namplitude = 1.0\nkind = \"tg\"\n").unwrap();
        let b = flatten_toml("n = 32\n[initial]\namplitude = 2.0\nkind = \"tg\"\nx = 1\n").unwrap();
        let d = config_diff(&a, &b);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].starts_with("initial.amplitude: checkpoint 1.0, this run 2.0"));
        assert!(d[1].starts_with("initial.x: checkpoint (absent)"));
        assert!(config_diff(&a, &a).is_empty());
    }
}
