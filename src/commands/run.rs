//! `vortex run CONFIG.toml [--out DIR] [--restart FILE]`: a vortex-method simulation.
//! All the logic lives in the `method` crate (`method::run`); this is argument glue that picks
//! the backend named by the configuration (`[evaluation] backend = "auto"|"cpu"|"cuda"`).

use crate::backends::{resolve, BackendChoice};
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
    let config = method::Config::from_file(&args.config)?;
    let choice = match config.evaluation.backend.as_str() {
        "cpu" => BackendChoice::Cpu,
        "cuda" => BackendChoice::Cuda,
        _ => BackendChoice::Auto,
    };
    let (out, restart) = (args.out.as_deref(), args.restart.as_deref());
    match resolve(choice) {
        BackendChoice::Cuda => {
            #[cfg(feature = "cuda")]
            {
                let device = config.evaluation.device;
                let b = gpu::CudaBackend::new(device).map_err(|e| {
                    anyhow::anyhow!("backend = \"cuda\" in {}: {e}", args.config.display())
                })?;
                method::run::run_loaded(config, &args.config, out, restart, b)?;
            }
            #[cfg(not(feature = "cuda"))]
            anyhow::bail!("backend = \"cuda\": this binary was built without the `cuda` feature");
        }
        _ => {
            method::run::run_loaded(config, &args.config, out, restart, fmm::CpuBackend)?;
        }
    }
    Ok(())
}
