//! `cargo run -p vortex-method --release --example ranks_run -- CONFIG.toml --ranks R --out DIR
//! [--restart CHECKPOINT] [--steps K]`: `vortex run --backend cpu` on `R` simulated ranks (the
//! threads of one process over `vortex_domain::ThreadComm`), so that the outputs of several
//! ranks (the pieces and manifest of a checkpoint, the snapshot pieces) can be made and read
//! without MPI: the Python package's tests read the checkpoint set it writes. Exit status 1 on
//! any error (every rank's message printed).

use anyhow::Context;
use std::path::PathBuf;

#[derive(clap::Parser)]
struct Args {
    /// The run configuration (TOML).
    config: PathBuf,
    /// Number of simulated ranks.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Continue from this checkpoint (file, manifest or run directory).
    #[arg(long)]
    restart: Option<PathBuf>,
    /// Stop after this many steps.
    #[arg(long)]
    steps: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = <Args as clap::Parser>::parse();
    anyhow::ensure!(args.ranks >= 1, "--ranks must be at least 1");
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("{}", args.config.display()))?;
    let config = vortex_method::Config::from_str_named(&text, &args.config.display().to_string())?;
    let opts = vortex_method::run::RunOptions {
        max_steps: args.steps,
        overwrite: false,
    };
    let results = vortex_domain::ThreadComm::run(args.ranks, |comm| {
        let build = vortex_method::run::host_build(comm, vortex_fmm::CpuBackend, None);
        vortex_method::run::run(
            comm,
            config.clone(),
            &args.out,
            args.restart.as_deref(),
            &opts,
            build,
        )
    });
    let mut failed = false;
    for (r, res) in results.iter().enumerate() {
        match res {
            Ok(s) if r == 0 => println!("{}", s.report()),
            Ok(_) => {}
            Err(e) => {
                failed = true;
                eprintln!("rank {r}: {e}");
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
