//! Build script of the `vortex` binary.
//!
//! Records the git commit and whether the tree had uncommitted changes (`VORTEX_GIT_COMMIT`, e.g.
//! `509a78d1c2e3` or `509a78d1c2e3-dirty`; `unknown` without git) for `vortex --version`,
//! `run.json` and the benchmark reports. (The CUDA kernel sources need nothing here: the
//! `vortex-kernels` crate embeds `kernels/*.cu` with `include_str!`, which cargo tracks, and
//! `vortex-cuda` compiles them with NVRTC at their first use.)
//!
//! To stay right it re-runs when the commit can change (the HEAD file, the ref file HEAD points
//! to, `packed-refs`) and when the dirty state can change (the index, and every source directory,
//! `kernels/` among them: cargo scans a directory given to `rerun-if-changed` for modified files).
use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
}

fn main() {
    for p in [
        "src",
        "crates",
        "kernels",
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
    ] {
        println!("cargo:rerun-if-changed={p}");
    }
    if let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) {
        let (git_dir, common) = (PathBuf::from(git_dir), PathBuf::from(common));
        println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
        println!("cargo:rerun-if-changed={}", git_dir.join("index").display());
        println!(
            "cargo:rerun-if-changed={}",
            common.join("packed-refs").display()
        );
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", common.join(r).display());
        }
    }
    let commit = git(&[
        "describe",
        "--always",
        "--dirty",
        "--abbrev=12",
        "--exclude=*",
    ])
    .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=VORTEX_GIT_COMMIT={commit}");
}
