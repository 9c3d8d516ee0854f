//! `vortex compare CONFIG.toml [--out DIR]`: a periodic vortex-method run and the
//! pseudo-spectral solver from the same initial field, then their comparison (energy,
//! enstrophy, E(k); `comparison.csv`, `comparison_spectra.csv`, `comparison.png`). The
//! spectral configuration is derived from the vortex one (`vortex_method::comparison::spectral_twin`)
//! and written beside the runs; the two runs are `vortex run` and `vortex spectral` as they are
//! (each with its own `run.json`, checkpoints and figures, the latter redrawn with the other
//! solver's curves).

use anyhow::{Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use vortex_fmm::BackendChoice;
use vortex_method::comparison::{self, Comparison};

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Configuration of the vortex-method run (periodic, box 2 pi, initial kind taylor-green,
    /// taylor-green-2d or isotropic: e.g. runs/compare-isotropic-32.toml).
    pub config: PathBuf,
    /// Output directory (default: runs/out/compare-<config file stem>): vortex/ and spectral/
    /// (the two runs), spectral.toml (the spectral twin), comparison.csv,
    /// comparison_spectra.csv, comparison.png.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace an earlier comparison in --out (refused otherwise).
    #[arg(long)]
    pub overwrite: bool,
    /// Compute backend of both runs: auto (the GPU when usable), cpu or cuda.
    #[arg(long)]
    pub backend: Option<BackendChoice>,
    /// Threads of the vortex run (default: all cores; the spectral run takes all).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The output directory (`--out`, or `runs/out/compare-<stem>`).
fn out_dir(args: &CompareArgs) -> PathBuf {
    args.out.clone().unwrap_or_else(|| {
        let stem = args
            .config
            .file_stem()
            .map_or("run".into(), |s| s.to_string_lossy().into_owned());
        let stem = stem.strip_prefix("compare-").unwrap_or(&stem).to_string();
        PathBuf::from("runs/out").join(format!("compare-{stem}"))
    })
}

/// What `vortex compare` writes into its `--out`: the two runs' directories, the spectral
/// twin and the comparison's files.
fn compare_entries() -> [&'static str; 6] {
    [
        "vortex",
        "spectral",
        "spectral.toml",
        comparison::CSV,
        comparison::SPECTRA_CSV,
        comparison::PNG,
    ]
}

/// Refuses an `out` that holds anything but its lock unless `--overwrite` (the runs inside
/// then replace theirs; the comparison files are rewritten atomically), and, `--overwrite`
/// or not, an `out` that holds anything a comparison does not write (a run's directory, a
/// user's files): the comparison is not mixed with them.
fn check_out(out: &Path, overwrite: bool) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Ok(());
    };
    let present: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != vortex_spectral::outdir::LOCK_FILE)
        .collect();
    let foreign: Vec<&String> = present
        .iter()
        .filter(|n| {
            let base = n.strip_suffix(".tmp").unwrap_or(n);
            !compare_entries().contains(&base)
        })
        .collect();
    if let Some(f) = foreign.first() {
        anyhow::bail!(
            "output directory {}: holds {} entries that a comparison does not write (e.g. {f}): \
             choose another --out (--overwrite replaces only an earlier comparison: {})",
            out.display(),
            foreign.len(),
            compare_entries().join(", ")
        );
    }
    if !present.is_empty() && !overwrite {
        anyhow::bail!(
            "output directory {}: holds an earlier comparison ({}); pass --overwrite to replace \
             it or choose another --out",
            out.display(),
            present.join(", ")
        );
    }
    Ok(())
}

/// The spectral backend of `--backend` (the vortex run's name for it).
fn spectral_backend(b: Option<BackendChoice>) -> vortex_spectral::Backend {
    match b.unwrap_or_default() {
        BackendChoice::Auto => vortex_spectral::Backend::Auto,
        BackendChoice::Cpu => vortex_spectral::Backend::Cpu,
        BackendChoice::Cuda => vortex_spectral::Backend::Cuda,
    }
}

/// Runs both solvers and compares them; returns the signal that stopped a run early, if any.
pub fn run(args: &CompareArgs) -> Result<Option<usize>> {
    if let Some((n, var)) = crate::ranks::launched_ranks() {
        // its spectral run is one process, and both runs would write one directory from
        // every rank: refused before anything starts (rank 0 says why)
        if crate::ranks::launched_rank() != 0 {
            std::process::exit(1);
        }
        anyhow::bail!(
            "vortex compare runs in one process (its spectral run has no ranks), but was started \
             as one of {n} ranks ({var}): start it without mpirun/srun (the vortex run of a \
             comparison on several ranks: `mpirun -np R vortex run CONFIG`, then `vortex \
             spectral` on its twin)"
        );
    }
    let start = std::time::Instant::now();
    let out = out_dir(args);
    // a configuration without a twin is refused before anything is created
    let name = args.config.display().to_string();
    let cfg = vortex_method::Config::from_file(&args.config)?;
    let (text, twin) = comparison::spectral_twin(&cfg, &name, spectral_backend(args.backend))?;
    let _lock = vortex_spectral::durable::lock_out(
        &out,
        &crate::run_info::holder(std::time::SystemTime::now()),
    )?;
    check_out(&out, args.overwrite)?;
    let twin_path = out.join("spectral.toml");
    vortex_spectral::durable::write_atomic(&twin_path, &[text.as_bytes()], 1)
        .with_context(|| format!("writing {}", twin_path.display()))?;
    let (vdir, sdir) = (out.join("vortex"), out.join("spectral"));
    log::info!(
        "vortex compare: {name} ({:?}, {}^3, nu = {}, to t = {}) with the vortex method into {}, \
         then its spectral twin {} into {}",
        cfg.initial.kind,
        twin.n,
        cfg.nu,
        cfg.t_end,
        vdir.display(),
        twin_path.display(),
        sdir.display()
    );
    let vargs = crate::commands::run::RunArgs {
        config: args.config.clone(),
        out: Some(vdir.clone()),
        restart: None,
        overwrite: args.overwrite,
        steps: None,
        backend: args.backend,
        grid: None,
        exchange: None,
        device: None,
        threads: args.threads,
    };
    let t_vortex = std::time::Instant::now();
    if let Some(sig) = crate::commands::run::run(&vargs)? {
        return Ok(Some(sig));
    }
    let t_vortex = t_vortex.elapsed().as_secs_f64();
    let sargs = crate::commands::spectral::SpectralArgs {
        config: twin_path,
        out: Some(sdir.clone()),
        restart: None,
        overwrite: args.overwrite,
        no_progress: false,
        backend: None,
    };
    let t_spectral = std::time::Instant::now();
    if let Some(sig) = crate::commands::spectral::run(&sargs)? {
        return Ok(Some(sig));
    }
    let t_spectral = t_spectral.elapsed().as_secs_f64();
    let c = Comparison::load(&vdir, &sdir, cfg.nu)?;
    let title = format!(
        "{name}: {:?}, {}^3, nu = {}, core of order {}",
        cfg.initial.kind, twin.n, cfg.nu, cfg.evaluation.core
    );
    let files = c.write(&out, &title, &vdir, &sdir)?;
    log::info!(
        "vortex method with the core of order {}: {}",
        cfg.evaluation.core,
        c.summary()
    );
    log::info!(
        "vortex compare: done in {:.0} s (vortex method {t_vortex:.0} s, spectral {t_spectral:.0} \
         s). Outputs in {o}: look at {o}/{png} (an image viewer; energy, enstrophy and E(k) of \
         both solvers), the numbers in {o}/{csv} and {o}/{scsv}; each run's own figures \
         ({v}/energy.png, {s}/energy.png, */spectra.png) and particle snapshots for ParaView \
         ({v}/particles.pvd, where output.snapshot_every is set); written: {files}",
        start.elapsed().as_secs_f64(),
        o = out.display(),
        png = comparison::PNG,
        csv = comparison::CSV,
        scsv = comparison::SPECTRA_CSV,
        v = vdir.display(),
        s = sdir.display(),
        files = files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(None)
}
