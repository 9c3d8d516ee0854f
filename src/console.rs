//! Lines for the terminal (tables of the benchmarks, the summary of a run) whose write errors
//! are kept, never a panic (`println!` panics on `EPIPE`, since Rust ignores `SIGPIPE`): the
//! first failed write marks the stream closed and keeps its error. Where stdout is the
//! command's product (`vortex config`, the tables of `vortex bench`), the benchmarks look at
//! [`stdout_closed`] and stop, and the binary ends with status 1 naming the error
//! ([`stdout_error`]: a full disk, `> /dev/full`, or a closed pipe, `| head -1`), never 0 with
//! nothing written. A run's lines on stderr are its log: a closed stderr does not stop the
//! run, whose outputs are files (`run.json` records the outcome).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);
static STDOUT_ERROR: Mutex<Option<String>> = Mutex::new(None);

fn write_line(w: &mut dyn Write, closed: &AtomicBool, text: &str) -> Option<std::io::Error> {
    if closed.load(Ordering::Relaxed) {
        return None;
    }
    let r = writeln!(w, "{text}").and_then(|_| w.flush());
    if r.is_err() {
        closed.store(true, Ordering::Relaxed);
    }
    r.err()
}

/// Writes a line to stdout; a failure (a closed pipe) marks stdout closed, quietly.
pub fn out(text: &str) {
    if let Some(e) = write_line(&mut std::io::stdout().lock(), &STDOUT_CLOSED, text) {
        let mut kept = STDOUT_ERROR.lock().unwrap_or_else(|p| p.into_inner());
        kept.get_or_insert_with(|| e.to_string());
    }
}

/// The error of the first failed write to stdout (a full disk, a closed pipe), if any.
pub fn stdout_error() -> Option<String> {
    STDOUT_ERROR
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// Writes a line to stderr; a failure marks stderr closed, quietly.
pub fn err(text: &str) {
    let _ = write_line(&mut std::io::stderr().lock(), &STDERR_CLOSED, text);
}

/// Whether a write to stdout has failed (its reader is gone).
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// `println!` through [`out`].
#[macro_export]
macro_rules! outln {
    ($($t:tt)*) => { $crate::console::out(&format!($($t)*)) };
}

/// `eprintln!` through [`err`].
#[macro_export]
macro_rules! errln {
    ($($t:tt)*) => { $crate::console::err(&format!($($t)*)) };
}
