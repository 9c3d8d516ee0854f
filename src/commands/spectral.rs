//! `vortex spectral CONFIG.toml [--out DIR] [--restart FILE] [--backend auto|cpu|cuda]`: the
//! pseudo-spectral reference solver.
//! All the logic lives in the `vortex-spectral` crate (`vortex_spectral::run`); this is argument glue.

use std::path::PathBuf;

/// Run the pseudo-spectral Navier-Stokes solver on a TOML configuration.
#[derive(clap::Args, Debug)]
pub struct SpectralArgs {
    /// Configuration file (TOML; see runs/*.toml)
    pub config: PathBuf,
    /// Output directory (default: runs/out/<config file stem>)
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Restart from this checkpoint (DIR/checkpoint.bin of an earlier run)
    #[arg(long)]
    pub restart: Option<PathBuf>,
    /// Replace the files of an earlier run in --out (a non-empty --out is otherwise refused
    /// unless restarting into it)
    #[arg(long)]
    pub overwrite: bool,
    /// Do not show the progress bar
    #[arg(long)]
    pub no_progress: bool,
    /// Compute backend, overriding the configuration's `backend` key: auto (the GPU when usable),
    /// cpu or cuda
    #[arg(long, value_parser = parse_backend)]
    pub backend: Option<vortex_spectral::Backend>,
}

fn parse_backend(s: &str) -> Result<vortex_spectral::Backend, String> {
    s.parse()
}

/// Run the command; returns the signal that stopped it early, if any.
pub fn run(args: &SpectralArgs) -> anyhow::Result<Option<usize>> {
    if let Some((n, var)) = crate::ranks::launched_ranks() {
        // every rank would run the whole problem into one directory; rank 0 says why, the
        // others end with the same status quietly
        if crate::ranks::launched_rank() != 0 {
            std::process::exit(1);
        }
        anyhow::bail!(
            "vortex spectral runs in one process (threads and one GPU), but was started as one \
             of {n} ranks ({var}): start it without mpirun/srun, or with -np 1"
        );
    }
    let out = args.out.clone().unwrap_or_else(|| {
        let stem = args
            .config
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "spectral".into());
        PathBuf::from("runs/out").join(stem)
    });
    let opts = vortex_spectral::run::RunOptions {
        out,
        restart: args.restart.clone(),
        progress: !args.no_progress,
        overwrite: args.overwrite,
    };
    let mut cfg = vortex_spectral::Config::from_file(&args.config)?;
    if let Some(b) = args.backend {
        cfg.backend = b;
    }
    let start = std::time::SystemTime::now();
    // the output directory is this process's from here to the end (its lock)
    let mode = vortex_spectral::durable::OutMode::of(args.restart.is_some(), args.overwrite);
    let claim = crate::run_info::begin(
        &opts.out,
        mode,
        args.restart.as_deref(),
        &[&args.config],
        "spectral",
        start,
    )?;
    let r = vortex_spectral::run::run_config(&cfg, &opts);
    let outcome = crate::run_info::Outcome::of(&r, |s| s.interrupted, |e| e.to_string());
    let backend = match &r {
        Ok(s) => s.backend.clone(),
        Err(_) => format!("{:?}", cfg.backend).to_lowercase(),
    };
    let rec = crate::run_info::record(
        &opts.out,
        Some(&claim),
        &crate::run_info::Invocation {
            command: "spectral",
            start,
            config: serde_json::to_value(&cfg)?,
            backend,
            ranks: 1,
            threads: if cfg.threads == 0 {
                rayon::current_num_threads()
            } else {
                cfg.threads
            },
            outcome,
        },
    );
    match (&rec, &r) {
        (Err(e), Ok(_)) => anyhow::bail!("{}", crate::error_text(e)),
        (Err(e), Err(_)) => log::warn!("{}", crate::error_text(e)),
        _ => {}
    }
    let s = r?;
    crate::outln!("{}", s.report());
    Ok(s.interrupted)
}
