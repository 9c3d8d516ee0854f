//! Build script of the `vortex` binary.
//!
//! Re-runs when a CUDA kernel source changes so that binaries that embed the
//! kernel sources (the `vortex-gpu` crate compiles them with NVRTC at first use)
//! are rebuilt, and records the git commit for `vortex --version` and the
//! benchmark reports.
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=.git/HEAD");
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=VORTEX_GIT_COMMIT={commit}");
}
