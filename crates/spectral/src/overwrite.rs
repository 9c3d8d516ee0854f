//! What `--overwrite` removes from an output directory: the files the earlier run wrote, and
//! nothing else (`docs/CONVENTIONS.md`, "Files").
//!
//! Every invocation's entry of `run.json` lists the files it wrote (`"files"`: the files of
//! the directory's top level that it created or changed, [`changed_since`] against the listing
//! taken when it locked the directory, [`listing`]). `--overwrite` removes the files listed by
//! the earlier invocations and `run.json` itself; a user's `notes.txt` or `my_particles.npy`, a
//! sub-directory, anything unlisted is kept. An invocation that left no list (killed with
//! `kill -9`, or written before the lists existed) counts as having written every file whose
//! name is one of the solvers' output names ([`is_output_name`]).

use crate::file_error::DurableError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The file of an output directory that records its invocations.
pub const RECORD: &str = "run.json";

/// Length and modification time of a file, to tell whether it changed.
pub type Stamp = (u64, Option<SystemTime>);

/// The regular files at the top level of `out` with their [`Stamp`]s (the lock file and
/// `run.json` left out); empty when `out` cannot be listed.
pub fn listing(out: &Path) -> BTreeMap<String, Stamp> {
    let Ok(dir) = std::fs::read_dir(out) else {
        return BTreeMap::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let meta = e.metadata().ok()?;
            let own = name == crate::outdir::LOCK_FILE || name == RECORD;
            (meta.is_file() && !own).then(|| (name, (meta.len(), meta.modified().ok())))
        })
        .collect()
}

/// The files of `out` that are new or changed since `before` (a [`listing`]), sorted.
pub fn changed_since(out: &Path, before: &BTreeMap<String, Stamp>) -> Vec<String> {
    listing(out)
        .into_iter()
        .filter(|(name, stamp)| before.get(name) != Some(stamp))
        .map(|(name, _)| name)
        .collect()
}

/// Whether `name` is one a solver writes into its output directory: `config.toml`,
/// `run.json`, `checkpoint.bin` and its kept copies `checkpoint.bin.N`, the CSV files
/// (`diagnostics.csv`, `timing.csv`, `energy.csv`, `spectrum_T.csv`), the figures, the
/// particle snapshots (`particles_STEP.vtp|.vtk|.pvtp`, `particles_STEP_pRANK.vtp`,
/// `particles.pvd`), the grids (`grid_STEP.vtk`) and the fields (`velocity_T.npy`,
/// `vorticity_T.npy`, `fields_T.vtk`), each also with a `.tmp` suffix (a write that was cut).
pub fn is_output_name(name: &str) -> bool {
    let name = name.strip_suffix(".tmp").unwrap_or(name);
    const FIXED: [&str; 10] = [
        "run.json",
        "config.toml",
        "checkpoint.bin",
        "diagnostics.csv",
        "timing.csv",
        "energy.csv",
        "energy.png",
        "spectra.png",
        "particles.pvd",
        "timing.json",
    ];
    if FIXED.contains(&name) {
        return true;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let time = |s: &str| {
        !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && s.parse::<f64>().is_ok()
    };
    let between = |pre: &str, suf: &str| name.strip_prefix(pre).and_then(|r| r.strip_suffix(suf));
    if let Some(i) = name.strip_prefix("checkpoint.bin.") {
        return digits(i);
    }
    if let Some(t) = between("spectrum_", ".csv") {
        return time(t);
    }
    if let Some(s) = between("grid_", ".vtk") {
        return digits(s);
    }
    for (pre, suf) in [
        ("velocity_", ".npy"),
        ("vorticity_", ".npy"),
        ("fields_", ".vtk"),
    ] {
        if let Some(t) = between(pre, suf) {
            return time(t);
        }
    }
    if let Some(rest) = name.strip_prefix("particles_") {
        let stem = [".vtp", ".vtk", ".pvtp"]
            .iter()
            .find_map(|suf| rest.strip_suffix(suf));
        return match stem.map(|s| s.split_once("_p")) {
            Some(Some((step, rank))) => digits(step) && digits(rank) && rest.ends_with(".vtp"),
            Some(None) => stem.is_some_and(digits),
            None => false,
        };
    }
    false
}

/// The files of `out` that its earlier invocations wrote (see the module documentation), with
/// `run.json`, as paths; only those present. Without a readable `run.json` nothing is known
/// of what a run wrote there: the files named like a solver's outputs may be the user's own
/// (a `diagnostics.csv` kept from elsewhere), so they are refused, named, not removed.
pub fn earlier_outputs(out: &Path) -> Result<Vec<PathBuf>, DurableError> {
    let record = out.join(RECORD);
    let doc: Option<serde_json::Value> = crate::inputs::read_own_text(&record, "record of runs")
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let invocations = doc
        .as_ref()
        .and_then(|d| d.get("invocations"))
        .and_then(|i| i.as_array());
    // a record without an invocation says nothing of what was written either
    if invocations.is_none_or(|a| a.is_empty()) {
        let named: Vec<String> = listing(out)
            .into_keys()
            .filter(|n| is_output_name(n))
            .collect();
        return Err(DurableError::OutDir {
            path: out.to_path_buf(),
            msg: format!(
                "--overwrite refused: there is no readable {RECORD} (or it lists no invocation), so \
                 which files a run wrote \
                 here is not known, and {} file(s) have a run's output names ({}{}): they may \
                 be yours; move them away or choose another --out",
                named.len(),
                named.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                if named.len() > 5 { ", ..." } else { "" }
            ),
        });
    }
    let mut names: Vec<String> = vec![RECORD.to_string()];
    let mut unlisted = false;
    for inv in invocations.into_iter().flatten() {
        match inv.get("files").and_then(|f| f.as_array()) {
            Some(files) => names.extend(files.iter().filter_map(|f| f.as_str()).map(String::from)),
            None => unlisted = true,
        }
    }
    if unlisted {
        names.extend(listing(out).into_keys().filter(|n| is_output_name(n)));
    }
    names.sort();
    names.dedup();
    Ok(names
        .into_iter()
        // a name, not a path: nothing outside the directory
        .filter(|n| !n.contains('/') && n != "." && n != ".." && !n.is_empty())
        .map(|n| out.join(n))
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_dir()))
        .collect())
}

/// Whether `a` and `b` are the same file (device and inode; the same path when either cannot
/// be looked at).
pub fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return x.dev() == y.dev() && x.ino() == y.ino();
        }
    }
    a == b
}

/// Removes the earlier run's files from `out` ([`earlier_outputs`]) and logs what was removed
/// and what was kept. Refused, before anything is removed, when one of them is one of
/// `inputs` (the command's configuration, particle or target file: `--overwrite` never
/// removes what the command reads).
pub fn remove_earlier_run(out: &Path, inputs: &[&Path]) -> Result<(), DurableError> {
    let remove = earlier_outputs(out)?;
    if let Some((p, input)) = remove
        .iter()
        .find_map(|p| inputs.iter().find(|i| same_file(p, i)).map(|i| (p, i)))
    {
        return Err(DurableError::OutDir {
            path: out.to_path_buf(),
            msg: format!(
                "--overwrite refused: it would remove {} (an earlier run's output), which is \
                 this command's input {}; copy the input elsewhere or choose another --out",
                p.display(),
                input.display()
            ),
        });
    }
    for p in &remove {
        std::fs::remove_file(p).map_err(|source| DurableError::Os {
            path: p.clone(),
            source,
        })?;
    }
    let kept: Vec<String> = std::fs::read_dir(out)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != crate::outdir::LOCK_FILE)
                .collect()
        })
        .unwrap_or_default();
    log::warn!(
        "{}: --overwrite removed {} files of the earlier run (those its run.json lists){}",
        out.display(),
        remove.len(),
        if kept.is_empty() {
            String::new()
        } else {
            format!(
                "; kept {} entries it did not write: {}",
                kept.len(),
                kept.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                    + if kept.len() > 5 { ", ..." } else { "" }
            )
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_of_both_solvers_and_nothing_else() {
        for n in [
            "config.toml",
            "checkpoint.bin.12",
            "spectrum_00000.1000.csv",
            "spectrum_00000.000050.csv",
            "grid_000010.vtk",
            "particles_000010.vtp",
            "particles_000010.pvtp",
            "particles_000010_p0003.vtp",
            "velocity_00001.0000.npy",
            "fields_00001.0000.vtk",
            "diagnostics.csv.tmp",
        ] {
            assert!(is_output_name(n), "{n}");
        }
        for n in [
            "notes.txt",
            "my_particles.npy",
            "spectrum_mine.csv",
            "checkpoint.bin.x",
            "particles_10_p3.vtk",
            "particles_abc.vtp",
            "velocity.npy.bak",
        ] {
            assert!(!is_output_name(n), "{n}");
        }
    }

    #[test]
    fn listed_files_are_removed_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let before = listing(out);
        for f in ["energy.csv", "checkpoint.bin", "spectrum_00000.0000.csv"] {
            std::fs::write(out.join(f), b"x").unwrap();
        }
        let files = changed_since(out, &before);
        assert_eq!(files.len(), 3);
        let doc = serde_json::json!({ "invocations": [{ "status": "completed", "files": files }] });
        std::fs::write(out.join(RECORD), doc.to_string()).unwrap();
        // the user's files, one with a solver's name but not listed, a sub-directory
        for f in ["notes.txt", "my_particles.npy", "spectrum_00009.0000.csv"] {
            std::fs::write(out.join(f), b"mine").unwrap();
        }
        std::fs::create_dir(out.join("sub")).unwrap();
        // the command's own input is never removed
        let e = remove_earlier_run(out, &[&out.join("energy.csv")]).unwrap_err();
        assert!(e.to_string().contains("this command's input"), "{e}");
        assert!(out.join("energy.csv").exists());
        remove_earlier_run(out, &[]).unwrap();
        let left: Vec<String> = listing(out).into_keys().collect();
        assert_eq!(
            left,
            ["my_particles.npy", "notes.txt", "spectrum_00009.0000.csv"]
        );
        assert!(out.join("sub").is_dir() && !out.join(RECORD).exists());
    }

    #[test]
    fn a_killed_run_counts_its_output_names_and_nothing_leaves_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(dir.path().join("x"), b"outside").unwrap();
        let doc = serde_json::json!({ "invocations": [
            { "status": "completed", "files": ["../x", "/etc/passwd", ".."] },
            { "status": "running" },
        ] });
        std::fs::write(out.join(RECORD), doc.to_string()).unwrap();
        for f in ["energy.csv", "checkpoint.bin.tmp", "notes.txt"] {
            std::fs::write(out.join(f), b"x").unwrap();
        }
        remove_earlier_run(&out, &[]).unwrap();
        let left: Vec<String> = listing(&out).into_keys().collect();
        assert_eq!(left, ["notes.txt"]);
        assert!(dir.path().join("x").exists());
    }

    /// Without a run.json the files named like outputs are refused, named, and kept.
    #[test]
    fn without_a_record_same_named_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        for f in ["diagnostics.csv", "config.toml", "notes.txt"] {
            std::fs::write(out.join(f), b"mine").unwrap();
        }
        let e = remove_earlier_run(out, &[]).unwrap_err().to_string();
        assert!(
            e.contains("no readable run.json") && e.contains("diagnostics.csv"),
            "{e}"
        );
        assert_eq!(listing(out).len(), 3);
        for record in ["{ not json", r#"{ "invocations": [] }"#] {
            std::fs::write(out.join(RECORD), record).unwrap();
            assert!(remove_earlier_run(out, &[]).is_err(), "{record}");
            assert_eq!(listing(out).len(), 3);
        }
    }
}
