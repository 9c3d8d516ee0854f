//! `vortex run CONFIG.toml [--out DIR] [--restart FILE]`: a vortex-method simulation.
//! All the logic lives in the `method` crate (`method::run`); this is argument glue.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Configuration file (TOML; see runs/vortex-*.toml).
    pub config: PathBuf,
    /// Output directory (default: runs/out/<config file stem>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue from this checkpoint (DIR/checkpoint.bin of an earlier run).
    #[arg(long)]
    pub restart: Option<PathBuf>,
    /// Number of threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run(args: &RunArgs) -> Result<()> {
    crate::set_global_threads(args.threads)?;
    method::run::run(&args.config, args.out.as_deref(), args.restart.as_deref())?;
    Ok(())
}
