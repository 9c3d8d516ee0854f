//! Reading the checkpoints of both solvers through their own readers
//! (`vortex_method::checkpoint::read_whole`, `vortex_spectral::io::read_checkpoint`), told apart by their magic
//! bytes. A `vortex run` of several ranks writes a manifest and one piece per rank: its
//! pieces are checked against the manifest and the whole state assembled in global-id order;
//! a run directory stands for its current checkpoint.

use std::path::Path;

/// A checkpoint of either solver.
#[derive(Debug)]
pub enum AnyCheckpoint {
    /// `vortex run` (`checkpoint.bin`, magic `VXMETHOD`, or `checkpoint.manifest`, magic
    /// `VXMMANIF`, with its pieces).
    Vortex(vortex_method::checkpoint::Checkpoint),
    /// `vortex spectral` (`checkpoint.bin`, magic `VXSPECCK`).
    Spectral(vortex_spectral::io::Checkpoint),
}

/// Reads a checkpoint of either solver; the error names the file and what is wrong.
pub fn read(path: &Path) -> Result<AnyCheckpoint, String> {
    if path.is_dir() {
        return read_run_directory(path);
    }
    let mut magic = [0u8; 8];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        f.read_exact(&mut magic).map_err(|_| {
            format!(
                "{}: not a checkpoint (shorter than its 8 magic bytes)",
                path.display()
            )
        })?;
    }
    if &magic == vortex_method::checkpoint::MAGIC
        || &magic == vortex_method::checkpoint::pieces::MANIFEST_MAGIC
        || &magic == vortex_method::checkpoint::pieces::PIECE_MAGIC
    {
        vortex_method::checkpoint::read_whole(path)
            .map(AnyCheckpoint::Vortex)
            .map_err(|e| e.to_string())
    } else if &magic == vortex_spectral::io::CHECKPOINT_MAGIC {
        vortex_spectral::io::read_checkpoint(path)
            .map(AnyCheckpoint::Spectral)
            .map_err(|e| e.to_string())
    } else {
        Err(format!(
            "{}: neither a vortex-method nor a spectral checkpoint (magic bytes {:?})",
            path.display(),
            String::from_utf8_lossy(&magic)
        ))
    }
}

/// The current checkpoint of a run directory: `vortex run`'s (`checkpoint.bin` or
/// `checkpoint.manifest`, the later), else `vortex spectral`'s `checkpoint.bin`.
fn read_run_directory(dir: &Path) -> Result<AnyCheckpoint, String> {
    match vortex_method::checkpoint::current(dir) {
        Ok(vortex_method::checkpoint::Source::Single(p)) => read(&p),
        Ok(src) => vortex_method::checkpoint::read_whole(src.path())
            .map(AnyCheckpoint::Vortex)
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// The time step `dt` of the run that wrote a vortex-method checkpoint, from its configuration
/// record (`key = value` lines, `vortex_method::checkpoint::Checkpoint::config`).
pub fn config_dt(config: &str) -> Option<f64> {
    config.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "dt").then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dt_is_read_from_a_real_checkpoint_record() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../runs/vortex-taylor-green-16.toml"
        ))
        .unwrap();
        let cfg =
            vortex_method::Config::from_str_named(&text, "vortex-taylor-green-16.toml").unwrap();
        let state = vortex_method::State {
            step: 0,
            step_reset: 0,
            particles: Default::default(),
            previous: None,
            reinterpolations: 0,
        };
        let ck = vortex_method::checkpoint::Checkpoint::new(&cfg, 1.0, state);
        assert_eq!(config_dt(&ck.config), Some(cfg.dt));
    }

    #[test]
    fn other_files_are_refused_with_their_name() {
        let dir = std::env::temp_dir().join(format!("pyvortex-ck-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("junk.bin");
        std::fs::write(&p, b"NOTACHECKPOINT").unwrap();
        let e = read(&p).unwrap_err();
        assert!(e.contains("junk.bin") && e.contains("neither"), "{e}");
        std::fs::write(&p, b"VXM").unwrap();
        assert!(read(&p).unwrap_err().contains("shorter"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
