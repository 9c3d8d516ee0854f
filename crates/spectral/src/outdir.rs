//! Output directories owned by one process at a time, and the size checks made before
//! allocating (both solvers and every command of the binary; `docs/CONVENTIONS.md`, "Files").
//!
//! * [`lock_out`]: an exclusive advisory lock (`flock(2)`, `LOCK_EX | LOCK_NB`) on
//!   `OUT/.vortex.lock`, taken before the first file is written into `OUT` and held until the
//!   returned [`OutLock`] is dropped (the kernel releases it when the process ends, however it
//!   ends). The lock file holds a line naming the holder (process id, host, start time, command
//!   line); a second process gets an error quoting it. The file is never removed (removing a
//!   locked file lets a third process lock a new file of the same name), and it does not count
//!   as an output ([`crate::durable::prepare_out`] ignores it).
//! * [`check_restart_into`]: a restart appends to the history of the run that wrote its
//!   checkpoint, so `--restart` into a directory of another run is refused.
//! * [`announce_steps`]: the step count and estimated duration before a run; [`cap_threads`].
//! * [`check_memory`]: an estimate against `MemAvailable` of `/proc/meminfo`; [`try_vec`]: a
//!   vector allocated fallibly (`Vec::try_reserve_exact`) where no estimate can be made.

use crate::file_error::{os, DurableError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside an output directory.
pub const LOCK_FILE: &str = ".vortex.lock";

/// An exclusive lock on an output directory; released when dropped.
#[derive(Debug)]
pub struct OutLock {
    _file: std::fs::File,
    path: PathBuf,
}

impl OutLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `flock(fd, LOCK_EX | LOCK_NB)`: `Ok(true)` taken, `Ok(false)` held by another open file.
#[cfg(unix)]
fn try_flock(f: &std::fs::File) -> std::io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a file descriptor owned by `f`, valid for the call.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

#[cfg(not(unix))]
fn try_flock(_f: &std::fs::File) -> std::io::Result<bool> {
    Ok(true)
}

/// Creates `out` when absent and takes its lock, writing `holder` (who takes it: process id,
/// host, start time, command line) into the lock file. A directory locked by another process
/// (or by another open lock of this one) is refused with the holder's line.
pub fn lock_out(out: &Path, holder: &str) -> Result<OutLock, DurableError> {
    if out.exists() && !out.is_dir() {
        return Err(DurableError::OutDir {
            path: out.to_path_buf(),
            msg: "exists and is not a directory".into(),
        });
    }
    std::fs::create_dir_all(out).map_err(|e| DurableError::OutDir {
        path: out.to_path_buf(),
        msg: format!("cannot be created ({e}): choose an --out in a writable place"),
    })?;
    let path = out.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(os(&path))?;
    if !try_flock(&file).map_err(os(&path))? {
        // the holder writes its line right after locking: give it a moment
        let mut text = String::new();
        for _ in 0..40 {
            text.clear();
            let _ = file.rewind();
            let _ = file.read_to_string(&mut text);
            if !text.trim().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        let who = match text.trim() {
            "" => "(the holder has not written its name yet)".to_string(),
            t => t.to_string(),
        };
        return Err(DurableError::OutDir {
            path: out.to_path_buf(),
            msg: format!(
                "in use by another process: {who} (lock {}); wait for it to end or choose \
                 another --out",
                path.display()
            ),
        });
    }
    let w = (|| {
        file.set_len(0)?;
        file.rewind()?;
        file.write_all(format!("{}\n", holder.trim()).as_bytes())?;
        file.flush()
    })();
    w.map_err(os(&path))?;
    Ok(OutLock { _file: file, path })
}

/// Whether `entry` (a path inside an output directory) is the lock file.
pub fn is_lock_file(entry: &Path) -> bool {
    entry.file_name().is_some_and(|n| n == LOCK_FILE)
}

/// Refuses a restart from `checkpoint` into `out` when `out` holds the outputs of another run:
/// a restart appends to the history (rows, snapshots, `run.json`) of the run that wrote the
/// checkpoint, so the checkpoint must be one of `out`'s own (`out/checkpoint.bin`, a manifest
/// of per-rank pieces, a kept older copy, or `out` itself: its current checkpoint) unless `out`
/// is absent or holds no output yet.
pub fn check_restart_into(out: &Path, checkpoint: &Path) -> Result<(), DurableError> {
    let used = std::fs::read_dir(out)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .any(|e| !is_lock_file(&e.path()) && e.file_name() != "run.json")
        })
        .unwrap_or(false);
    if !used {
        return Ok(());
    }
    // a symbolic link to a checkpoint is the checkpoint it names
    let resolved = std::fs::canonicalize(checkpoint).unwrap_or_else(|_| checkpoint.to_path_buf());
    let parent = if resolved.is_dir() {
        Some(resolved.as_path())
    } else {
        resolved.parent()
    };
    let parent = parent.map(|p| {
        if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        }
    });
    let same = match (
        parent.map(std::fs::canonicalize),
        std::fs::canonicalize(out),
    ) {
        (Some(Ok(a)), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        return Ok(());
    }
    Err(DurableError::OutDir {
        path: out.to_path_buf(),
        msg: format!(
            "holds another run's outputs, and --restart {} is not one of its checkpoints: a \
             restart appends to the history of the run that wrote the checkpoint; pass --out {} \
             (the checkpoint's directory) or an empty directory",
            checkpoint.display(),
            parent.unwrap_or(Path::new(".")).display()
        ),
    })
}

/// `MemAvailable` of `/proc/meminfo` in bytes (`None` where there is no such file).
pub fn available_memory() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0)
}

/// Refuses `needed` bytes (what `what` describes) when they exceed the available memory;
/// an error message gives both in GiB.
pub fn check_memory(what: &str, needed: f64) -> Result<(), String> {
    check_memory_against(what, needed, available_memory())
}

/// [`check_memory`] against a given amount (`None`: unknown; then only a non-finite or
/// astronomically large estimate, above 2^60 bytes, is refused).
pub fn check_memory_against(what: &str, needed: f64, available: Option<f64>) -> Result<(), String> {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    match available {
        Some(avail) if !fits(needed, avail) => Err(format!(
            "{what} needs about {} GiB of memory, {:.3} GiB are available (MemAvailable of \
             /proc/meminfo); nothing was allocated",
            gib_text(needed / GIB),
            avail / GIB
        )),
        None if !fits(needed, 2f64.powi(60)) => Err(format!(
            "{what} needs about {:.3e} GiB of memory; nothing was allocated",
            needed / GIB
        )),
        _ => Ok(()),
    }
}

/// `bytes` as a reader takes it in: `512 B`, `3.2 MiB`, `11.8 GiB` (the sizes of outputs
/// announced before a run).
pub fn bytes_text(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A number of GiB as a reader takes it in: three decimals up to a million, then powers of ten.
fn gib_text(gib: f64) -> String {
    if gib < 1e6 {
        format!("{gib:.3}")
    } else {
        format!("{gib:.3e}")
    }
}

/// `needed <= limit`, false for NaN.
fn fits(needed: f64, limit: f64) -> bool {
    needed.partial_cmp(&limit).is_some_and(|o| o.is_le())
}

/// A vector of `len` copies of `value`, allocated fallibly: an error naming `what` and the size
/// instead of an abort where the allocator refuses.
pub fn try_vec<T: Clone>(what: &str, len: usize, value: T) -> Result<Vec<T>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|e| {
        format!(
            "{what}: {len} elements of {} B could not be allocated ({e})",
            std::mem::size_of::<T>()
        )
    })?;
    v.resize(len, value);
    Ok(v)
}

/// Runs estimated longer than this (seconds) are announced with a warning.
pub const LONG_RUN_S: f64 = 24.0 * 3600.0;

/// Logs the number of steps of a run and its estimated duration (`s_per_step`, a rough model
/// of the step's cost) before it starts; a warning above [`LONG_RUN_S`] or 10^7 steps, so a
/// mistyped `dt` is seen at once rather than after hours. Returns the estimate in seconds.
pub fn announce_steps(what: &str, steps: f64, s_per_step: f64) -> f64 {
    let secs = steps * s_per_step;
    let text = format!(
        "{what}: {steps:.0} steps, estimated {} ({s_per_step:.2e} s/step, a rough model)",
        duration_text(secs)
    );
    if secs > LONG_RUN_S || steps > 1e7 {
        log::warn!("{text}: a long run; check dt, t_end and the output intervals");
    } else {
        log::info!("{text}");
    }
    secs
}

/// A duration as seconds, hours or days.
pub fn duration_text(secs: f64) -> String {
    if secs < 120.0 {
        format!("{secs:.1} s")
    } else if secs < 2.0 * 86400.0 {
        format!("{:.1} h", secs / 3600.0)
    } else {
        format!("{:.1} days", secs / 86400.0)
    }
}

/// A thread count capped at 4 times the cores (`available_parallelism`), with a warning: more
/// threads than that only add contention and memory (a stack each).
pub fn cap_threads(requested: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let cap = 4 * cores;
    if requested > cap {
        log::warn!("{requested} threads requested on {cores} cores: capped at {cap} (4 per core)");
        cap
    } else {
        requested
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o");
        let a = lock_out(&out, "pid 1 on host h since t").unwrap();
        let e = lock_out(&out, "pid 2").unwrap_err().to_string();
        assert!(
            e.contains("in use by another process: pid 1 on host h"),
            "{e}"
        );
        drop(a);
        let b = lock_out(&out, "pid 2").unwrap();
        assert!(std::fs::read_to_string(b.path())
            .unwrap()
            .starts_with("pid 2"));
    }

    #[test]
    fn concurrent_lockers_one_wins_every_time() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("o");
            let barrier = std::sync::Barrier::new(4);
            let won: Vec<bool> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..4)
                    .map(|i| {
                        let (out, barrier) = (&out, &barrier);
                        s.spawn(move || {
                            barrier.wait();
                            let l = lock_out(out, &format!("thread {i}"));
                            // hold it until every thread has tried
                            barrier.wait();
                            l.is_ok()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(
                won.iter().filter(|w| **w).count(),
                1,
                "round {round}: {won:?}"
            );
        }
    }

    #[test]
    fn restart_into_another_runs_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("checkpoint.bin"), b"x").unwrap();
        std::fs::write(b.join("energy.csv"), b"x").unwrap();
        check_restart_into(&a, &a.join("checkpoint.bin")).unwrap();
        check_restart_into(&a, &a.join("checkpoint.bin.1")).unwrap();
        let e = check_restart_into(&b, &a.join("checkpoint.bin"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not one of its checkpoints"), "{e}");
        // the directory itself (its current checkpoint) is one of its own, not another's
        check_restart_into(&a, &a).unwrap();
        assert!(check_restart_into(&b, &a).is_err());
        // an absent or empty directory takes any checkpoint
        check_restart_into(&dir.path().join("c"), &a.join("checkpoint.bin")).unwrap();
    }

    #[test]
    fn memory_estimates_and_fallible_allocation() {
        let e = check_memory_against("x", 3.0 * 1024f64.powi(3), Some(1024f64.powi(3)));
        assert!(e.unwrap_err().contains("3.000 GiB"));
        assert!(check_memory_against("x", 1.0, Some(2.0)).is_ok());
        assert!(check_memory_against("x", f64::NAN, None).is_err());
        assert!(check_memory_against("x", 1e30, None).is_err());
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        assert_eq!(cap_threads(5000.max(8 * cores)), 4 * cores);
        assert_eq!(cap_threads(1), 1);
        assert_eq!(duration_text(86400.0 * 10.0), "10.0 days");
        let e = try_vec("grid", usize::MAX / 2, 0.0f64).unwrap_err();
        assert!(e.starts_with("grid:"), "{e}");
        assert_eq!(try_vec("grid", 3, 1u8).unwrap(), vec![1, 1, 1]);
    }
}
