//! The `vortex` binary of this build, as the integration tests spawn it.
#![allow(dead_code)]

use std::process::Command;

/// The `vortex` binary, logging at `log` (`RUST_LOG`).
pub fn vortex_command(log: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vortex"));
    c.env("RUST_LOG", log);
    c
}

/// `vortex ARGS` logging at `log`: whether it succeeded, and its standard error.
pub fn vortex_status(args: &[&str], log: &str) -> (bool, String) {
    let out = vortex_command(log).args(args).output().expect("run vortex");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}
