//! Input files checked before they are read (both solvers and every command of the binary;
//! `docs/CONVENTIONS.md`, "Files"): a configuration, a checkpoint, a particle file or a CSV of
//! an earlier run is opened without blocking and refused unless it is a regular file, and its
//! length is known before anything is allocated for it.
//!
//! * A FIFO opened for reading blocks until a writer appears (`open(2)`), and a character
//!   device such as `/dev/zero` or `/dev/urandom` never ends: both are refused by their file
//!   type, taken with `fstat(2)` on a descriptor opened with `O_NONBLOCK` (so the check itself
//!   cannot block, and no other file can be swapped in between the check and the read).
//! * [`read_text`] refuses a file longer than the caller's limit before reading it;
//!   [`open_regular`] returns the open file with its length for readers that check a header
//!   first (checkpoint containers, `.npy`).

use crate::file_error::DurableError;
use std::io::Read;
use std::path::Path;

/// The largest configuration file read (bytes): far beyond any real one (a few kB), small
/// enough that a mistaken path (a data file, a disk image) is refused at once.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// What kind of file `meta` describes, in words (for the refusal of a non-regular input or
/// output).
pub fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if meta.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// The refusal of an input: `PATH: WHAT: MSG` (an [`DurableError::Os`] of kind
/// `InvalidInput`, so that every caller's mapping of the file errors carries it).
fn refuse(path: &Path, what: &str, msg: String) -> DurableError {
    DurableError::Os {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{what}: {msg}")),
    }
}

/// Opens `path` for reading without blocking and refuses anything but a regular file (a FIFO,
/// a device, a socket, a directory), naming `what` the file is (e.g. "configuration").
/// Returns the file (blocking reads again) and its length in bytes.
pub fn open_regular(path: &Path, what: &str) -> Result<(std::fs::File, u64), DurableError> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => refuse(path, what, "does not exist".into()),
        _ => refuse(path, what, format!("cannot be opened: {e}")),
    })?;
    let meta = file
        .metadata()
        .map_err(|e| refuse(path, what, format!("cannot be examined: {e}")))?;
    if !meta.is_file() {
        return Err(refuse(
            path,
            what,
            format!(
                "is {}, not a regular file: give the path of a file on disk",
                kind_of(&meta)
            ),
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::io::AsRawFd;
        // SAFETY: fcntl on a descriptor owned by `file`, valid for the calls.
        unsafe {
            let fd = file.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
    }
    Ok((file, meta.len()))
}

/// Reads a regular text file of at most `max_bytes` bytes (see [`open_regular`]); a longer
/// one is refused before it is read, naming `what` it should be and both lengths.
pub fn read_text(path: &Path, what: &str, max_bytes: u64) -> Result<String, DurableError> {
    let (file, len) = open_regular(path, what)?;
    if len > max_bytes {
        return Err(refuse(
            path,
            what,
            format!(
                "{len} bytes, more than the {max_bytes} a {what} may have: is this the right \
                 file?"
            ),
        ));
    }
    let mut text = String::with_capacity(len as usize);
    // `take`: a file that grows while it is read is cut at the limit
    file.take(max_bytes + 1)
        .read_to_string(&mut text)
        .map_err(|e| refuse(path, what, format!("cannot be read as text: {e}")))?;
    if text.len() as u64 > max_bytes {
        return Err(refuse(
            path,
            what,
            format!("grew beyond {max_bytes} bytes while it was read"),
        ));
    }
    Ok(text)
}

/// Reads a configuration file (TOML text of at most [`MAX_CONFIG_BYTES`]).
pub fn read_config(path: &Path) -> Result<String, DurableError> {
    read_text(path, "configuration file", MAX_CONFIG_BYTES)
}

/// Reads a text file that a run wrote itself (a CSV or a record of its output directory) and
/// reads back, refused like any input when it is not a regular file or is larger than the
/// memory available for it.
pub fn read_own_text(path: &Path, what: &str) -> Result<String, DurableError> {
    let limit = crate::outdir::available_memory()
        .map_or(u64::MAX, |a| (a / 4.0) as u64)
        .max(1 << 20);
    read_text(path, what, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_devices_and_directories_are_refused_by_type() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path inside a fresh temporary directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // no writer: a blocking open would never return
        let e = read_config(&fifo).unwrap_err().to_string();
        assert!(
            e.contains("FIFO") && e.contains("configuration file"),
            "{e}"
        );
        let e = read_config(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("character device"), "{e}");
        let e = read_config(dir.path()).unwrap_err().to_string();
        assert!(e.contains("directory"), "{e}");
        let e = read_config(&dir.path().join("absent"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not exist"), "{e}");
    }

    #[test]
    fn oversized_text_is_refused_before_reading_and_small_text_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.toml");
        let f = std::fs::File::create(&p).unwrap();
        // sparse: no disk used, and nothing of it may be read
        f.set_len(MAX_CONFIG_BYTES + 1).unwrap();
        let e = read_config(&p).unwrap_err().to_string();
        assert!(e.contains("more than the"), "{e}");
        std::fs::write(&p, "n = 8\n").unwrap();
        assert_eq!(read_config(&p).unwrap(), "n = 8\n");
        let (_, len) = open_regular(&p, "x").unwrap();
        assert_eq!(len, 6);
    }
}
