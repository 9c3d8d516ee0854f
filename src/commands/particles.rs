//! `vortex particles`: writes a reproducible test particle set.

use anyhow::{bail, Result};
use clap::Args;
use fmm::testsets::{generate, Distribution};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ParticlesArgs {
    /// Number of particles.
    #[arg(long)]
    pub n: usize,
    /// Seed of the random generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output `.npy` file, shape (N, 7).
    #[arg(long)]
    pub out: PathBuf,
    /// Subtract the mean strength (zero total circulation, for periodic runs).
    #[arg(long)]
    pub periodic: bool,
    /// uniform (the standard set of CONVENTIONS.md), ring or clumps.
    #[arg(long, default_value = "uniform")]
    pub distribution: Distribution,
}

pub fn run(args: &ParticlesArgs) -> Result<()> {
    if args.n == 0 {
        bail!("--n must be at least 1");
    }
    let s = generate(args.distribution, args.n, args.seed, args.periodic);
    crate::io::write_particles(&args.out, &s)?;
    log::info!(
        "wrote {} {:?} particles (seed {}) to {}",
        s.len(),
        args.distribution,
        args.seed,
        args.out.display()
    );
    Ok(())
}
