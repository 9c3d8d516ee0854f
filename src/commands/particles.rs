//! `vortex particles`: writes a reproducible test particle set.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use vortex_fmm::testsets::{generate, Distribution};

#[derive(Args, Debug)]
pub struct ParticlesArgs {
    /// Number of particles (an integer, also written like 1e6 or 2.5e5).
    #[arg(long, value_parser = parse_count)]
    pub n: usize,
    /// Seed of the random generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output `.npy` file, shape (N, 7) (an existing file is refused unless --overwrite).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace an existing --out file.
    #[arg(long)]
    pub overwrite: bool,
    /// Subtract the mean strength (zero total circulation, for periodic runs).
    #[arg(long)]
    pub periodic: bool,
    /// uniform (the standard set of docs/CONVENTIONS.md), ring or clumps.
    #[arg(long, default_value = "uniform")]
    pub distribution: Distribution,
}

/// A particle count: a plain integer or a whole number in floating-point notation (`1e6`).
fn parse_count(s: &str) -> Result<usize, String> {
    if let Ok(n) = s.parse::<usize>() {
        return Ok(n);
    }
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= 1e15 => Ok(x as usize),
        _ => Err(format!("'{s}' is not a whole number of particles")),
    }
}

pub fn run(args: &ParticlesArgs) -> Result<()> {
    if args.n == 0 {
        bail!("--n must be at least 1");
    }
    crate::ranks::refuse_several("vortex particles")?;
    // the rule of every output: nothing is replaced without --overwrite (checked again by the
    // rename's target being absent is not possible portably; a file appearing meanwhile is
    // replaced)
    match std::fs::symlink_metadata(&args.out) {
        Ok(m) if m.is_dir() => bail!(
            "--out {}: is a directory; give the path of the .npy file to write",
            args.out.display()
        ),
        // a device, a FIFO or a socket (`/dev/full`, `/dev/stdout`): the file is written
        // through OUT.tmp and a rename, which would replace the node itself (or write nothing
        // where a pipe was meant), so none is taken as --out, --overwrite or not
        Ok(m) if !std::fs::metadata(&args.out).map_or(m.is_file(), |t| t.is_file()) => bail!(
            "--out {}: is {}, not a regular file: the particles are written through {}.tmp and \
             a rename, which would replace it; give the path of a .npy file on disk",
            args.out.display(),
            match std::fs::metadata(&args.out) {
                Ok(t) => vortex_spectral::inputs::kind_of(&t),
                Err(_) => "a symbolic link to nothing",
            },
            args.out.display()
        ),
        Ok(_) if !args.overwrite => bail!(
            "--out {}: exists; pass --overwrite to replace it or choose another file",
            args.out.display()
        ),
        _ => {}
    }
    // the set (7 f64) and the array written from it (7 f64), before anything is allocated
    vortex_method::health::check_memory(
        &format!(
            "--n {} (particle set and its .npy array, 112 B each)",
            args.n
        ),
        args.n as f64 * 112.0,
    )
    .map_err(anyhow::Error::msg)?;
    let s = generate(args.distribution, args.n, args.seed, args.periodic);
    crate::io::write_particles(&args.out, &s)?;
    log::info!(
        "wrote {} {:?} particles (seed {}) to {o} (N x 7 float64: x, y, z, alpha, sigma); \
         evaluate them with `vortex eval --particles {o} --out DIR`, or look at them with numpy: \
         python3 -c \"import numpy as np; print(np.load('{o}')[:3])\"",
        s.len(),
        args.distribution,
        args.seed,
        o = args.out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_count;

    #[test]
    fn counts_parse_in_both_notations() {
        assert_eq!(parse_count("1000"), Ok(1000));
        assert_eq!(parse_count("1e6"), Ok(1_000_000));
        assert_eq!(parse_count("2.5e5"), Ok(250_000));
        assert!(parse_count("1.5").is_err());
        assert!(parse_count("-3").is_err());
        assert!(parse_count("nan").is_err());
        assert!(parse_count("ten").is_err());
    }
}
