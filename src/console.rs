//! Lines for the terminal (tables of the benchmarks, the summary of a run) that end quietly on a
//! closed pipe: `vortex bench m2l | head -2` or a run whose stderr reader went away must not
//! panic (`println!` does on `EPIPE`, since Rust ignores `SIGPIPE`) after the work is done,
//! nor leave `run.json` at "running". The first failed write marks the stream closed; the
//! benchmarks look at [`stdout_closed`] and stop, since nobody reads their tables any more.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

fn write_line(w: &mut dyn Write, closed: &AtomicBool, text: &str) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    if writeln!(w, "{text}").and_then(|_| w.flush()).is_err() {
        closed.store(true, Ordering::Relaxed);
    }
}

/// Writes a line to stdout; a failure (a closed pipe) marks stdout closed, quietly.
pub fn out(text: &str) {
    write_line(&mut std::io::stdout().lock(), &STDOUT_CLOSED, text);
}

/// Writes a line to stderr; a failure marks stderr closed, quietly.
pub fn err(text: &str) {
    write_line(&mut std::io::stderr().lock(), &STDERR_CLOSED, text);
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
