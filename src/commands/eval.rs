//! `vortex eval`: one velocity + stretching evaluation of a particle file.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use vortex_fmm::{BackendChoice, EvalParams, GridChoice, Method};

#[derive(Args, Debug, Clone)]
pub struct EvalArgs {
    /// Particle file, `.npy` float64 of shape (N, 7): x, y, z, alpha_x, alpha_y, alpha_z, sigma.
    #[arg(long)]
    pub particles: PathBuf,
    /// Output directory for velocity.npy, stretching.npy and timing.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace the results of an earlier evaluation in --out (velocity.npy, stretching.npy,
    /// timing.json; refused otherwise).
    #[arg(long)]
    pub overwrite: bool,
    /// direct (O(N^2) reference), treecode, fmm or ppm (FMM tree with the pseudo-particle far
    /// field).
    #[arg(long, default_value = "fmm")]
    pub method: Method,
    /// Expansion order p (1..=20 on the CPU, `vortex_fmm::MAX_ORDER`; 1..=16 on the GPU,
    /// `vortex_gpu::MAX_GPU_ORDER`).
    #[arg(long, default_value_t = vortex_engine::DEFAULT_ORDER)]
    pub order: usize,
    /// Opening angle of the multipole acceptance criterion, in (0, 1).
    #[arg(long, default_value_t = vortex_engine::default_theta())]
    pub theta: f64,
    /// Largest number of particles in a leaf cell.
    #[arg(long, default_value_t = vortex_engine::DEFAULT_LEAF_SIZE)]
    pub leaf_size: usize,
    /// Order of the vortex core: 2 (the Gaussian), 4 or 6 (the Gaussian-based cores of Beale &
    /// Majda 1985 / Winckelmans & Leonard 1993, smoothing error O(sigma^order); every method
    /// and backend).
    #[arg(long, default_value = "2")]
    pub core: vortex_fmm::kernel::CoreOrder,
    /// Minimum gap of a far (multipole) interaction, in source core radii: the far field uses
    /// the singular kernel, exact to 1 - q(rho) beyond it (default: 4 on the adaptive octree,
    /// the uniform grid's own value on --grid uniform; at least 4.54 for --core 4 and 4.9 for
    /// --core 6).
    #[arg(long)]
    pub core_cutoff: Option<f64>,
    /// Number of threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Compute backend: auto (GPU if usable), cpu or cuda.
    #[arg(long, default_value = "auto")]
    pub backend: BackendChoice,
    /// GPU index among the visible devices (CUDA_VISIBLE_DEVICES is honoured).
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// auto (the uniform grid where it runs, else the octree: the planner logs which and why),
    /// adaptive (octree, lists on the host) or uniform (grid built and evaluated on the GPU:
    /// CUDA, FMM, free space or --periodic, no --targets, a set that is not clustered; under
    /// MPI split into z slabs, one GPU per rank).
    #[arg(long, default_value = "auto")]
    pub grid: GridChoice,
    /// Evaluate at these points instead of at the particles: `.npy` float64 of shape (M, 3).
    /// Plain points carry no strength, so only velocity.npy is written.
    #[arg(long)]
    pub targets: Option<PathBuf>,
    /// Periodic box `[-L/2, L/2)^3` (positions are wrapped; total strength must be zero).
    #[arg(long)]
    pub periodic: bool,
    /// Periodic box length L.
    #[arg(long, default_value_t = vortex_engine::DEFAULT_BOX_LENGTH, requires = "periodic")]
    pub box_length: f64,
    /// Levels of periodic images above the root: 9 * 3^(K-1) boxes per dimension are summed.
    #[arg(long, default_value_t = vortex_engine::DEFAULT_IMAGE_LEVELS, requires = "periodic")]
    pub image_levels: usize,
}

impl EvalArgs {
    pub fn params(&self) -> EvalParams {
        vortex_engine::eval_params(
            self.method,
            self.order,
            self.theta,
            self.leaf_size,
            self.core,
            self.core_cutoff,
            self.grid,
            self.periodic
                .then_some((self.box_length, self.image_levels)),
        )
    }
}

/// Runs the evaluation on every rank (one rank without MPI); rank 0 reads the input, writes
/// the outputs in input order and logs the summary.
pub fn run(args: &EvalArgs) -> Result<()> {
    let params = args.params();
    params.validate().context("invalid evaluation parameters")?;
    crate::set_global_threads(args.threads)?;
    crate::ranks::with_comm(|comm, local_rank| {
        let root = comm.rank() == 0;
        // rank 0 owns --out until the results are written
        let input = if root {
            claim_out(args).and_then(|lock| read_input(args).map(|i| Some((i, lock))))
        } else {
            Ok(None)
        };
        let (input, _lock) = crate::ranks::agree(comm, input)?.flatten().unzip();
        let local_sources =
            vortex_domain::scatter_sources_from_root(comm, input.as_ref().map(|(s, _)| s));
        let local_targets =
            vortex_domain::scatter_targets_from_root(comm, input.as_ref().map(|(_, t)| t));
        let run = vortex_engine::evaluate(
            comm,
            local_rank,
            args.device,
            args.backend,
            args.grid,
            &params,
            input.as_ref().map_or(0, |(s, _)| s.len()),
            &local_sources,
            args.targets.as_ref().map(|_| &local_targets),
        )?;
        let (ev, backend) = (&run.evaluation, &run.backend);
        let fields = vortex_domain::gather_to_root(comm, &ev.fields);
        let Some(fields) = fields else {
            return Ok(());
        };
        let (sources, targets) = input.expect("rank 0 holds the input");
        crate::io::write_fields(&args.out, &fields, args.targets.is_none())?;
        let mut timing: serde_json::Map<String, serde_json::Value> = ev
            .times
            .entries()
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect();
        timing.insert("ranks".into(), serde_json::json!(comm.size()));
        timing.insert("n".into(), serde_json::json!(sources.len()));
        timing.insert("m".into(), serde_json::json!(targets.len()));
        timing.insert("order".into(), serde_json::json!(params.order));
        timing.insert("theta".into(), serde_json::json!(params.theta));
        timing.insert("leaf_size".into(), serde_json::json!(params.leaf_size));
        timing.insert("core_cutoff".into(), serde_json::json!(params.core_cutoff));
        timing.insert("core".into(), serde_json::json!(params.core.order()));
        timing.insert(
            "method".into(),
            serde_json::json!(params.method.to_string()),
        );
        timing.insert("backend".into(), serde_json::json!(backend.to_string()));
        timing.insert(
            "engine".into(),
            serde_json::json!(format!("{:?}", run.choice.engine)),
        );
        timing.insert("planner".into(), serde_json::json!(run.choice.reasons));
        timing.insert(
            "commit".into(),
            serde_json::json!(env!("VORTEX_GIT_COMMIT")),
        );
        timing.insert("bytes_p2pcomm".into(), serde_json::json!(ev.comm.bytes_p2p));
        timing.insert("bytes_m2lcomm".into(), serde_json::json!(ev.comm.bytes_m2l));
        let path = args.out.join("timing.json");
        let text = serde_json::to_string_pretty(&timing)? + "\n";
        vortex_spectral::durable::write_atomic(&path, &[text.as_bytes()], 1)
            .with_context(|| format!("writing {}", path.display()))?;
        let t = &ev.times;
        log::info!(
            "{} N = {} M = {} p = {} theta = {} on {} x {} rank(s): {:.3} s (tree {:.3}, lists {:.3}, far {:.3}, P2P {:.3}; sent {} B halo, {} B multipoles) -> {}",
            params.method,
            sources.len(),
            targets.len(),
            params.order,
            params.theta,
            backend,
            comm.size(),
            t.total,
            t.tree,
            t.lists,
            t.p2m + t.m2m + t.m2l + t.m2p + t.l2l + t.l2p,
            t.p2p,
            ev.comm.bytes_p2p,
            ev.comm.bytes_m2l,
            args.out.display()
        );
        log::info!(
            "wrote {d}/velocity.npy{} and {d}/timing.json (seconds per phase, the planner's \
             choice); look at them with numpy: python3 -c \"import numpy as np; \
             u = np.load('{d}/velocity.npy'); print(u.shape, u[:3])\"",
            if args.targets.is_none() {
                format!(
                    ", {}/stretching.npy (N x 3 float64, input order)",
                    args.out.display()
                )
            } else {
                " (M x 3 float64, target order)".into()
            },
            d = args.out.display()
        );
        Ok(())
    })
}

/// The files `vortex eval` writes into `--out`.
const RESULTS: [&str; 3] = ["velocity.npy", "stretching.npy", "timing.json"];

/// Locks `--out` and refuses to replace an earlier evaluation's results there unless
/// `--overwrite` (then they are removed first, so no stale `stretching.npy` stays beside a
/// new `velocity.npy`).
fn claim_out(args: &EvalArgs) -> Result<vortex_spectral::durable::OutLock> {
    let start = std::time::SystemTime::now();
    let lock = vortex_spectral::durable::lock_out(&args.out, &crate::run_info::holder(start))?;
    // the rule of every output directory: nothing that is not an earlier evaluation's is
    // replaced or mixed with (a run's checkpoint, a user's files), --overwrite or not
    let foreign: Vec<String> = std::fs::read_dir(&args.out)
        .with_context(|| format!("output directory {}", args.out.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            let base = n.strip_suffix(".tmp").unwrap_or(n);
            n != vortex_spectral::durable::LOCK_FILE && !RESULTS.contains(&base)
        })
        .collect();
    if let Some(f) = foreign.first() {
        anyhow::bail!(
            "output directory {}: holds {} entries that an evaluation does not write (e.g. {f}): \
             choose another --out (--overwrite replaces only an earlier evaluation's {})",
            args.out.display(),
            foreign.len(),
            RESULTS.join(", ")
        );
    }
    let present: Vec<&str> = RESULTS
        .into_iter()
        .filter(|f| args.out.join(f).exists())
        .collect();
    if !present.is_empty() {
        if !args.overwrite {
            anyhow::bail!(
                "output directory {}: holds the results of an earlier evaluation ({}); pass \
                 --overwrite to replace them or choose another --out",
                args.out.display(),
                present.join(", ")
            );
        }
        // the results are an evaluation's only when its record is beside them: timing.json,
        // written last, a JSON object with the evaluation's keys; same-named files without
        // it may be the user's (or a killed evaluation's, which the user removes knowingly)
        if !is_eval_record(&args.out.join("timing.json")) {
            anyhow::bail!(
                "output directory {}: --overwrite refused: it holds {} but no readable \
                 timing.json of an evaluation (its record, written last), so they may be \
                 yours; move them or choose another --out",
                args.out.display(),
                present.join(", ")
            );
        }
        // never the command's own input
        let inputs = std::iter::once(&args.particles).chain(args.targets.as_ref());
        for input in inputs {
            if let Some(f) = present
                .iter()
                .find(|f| vortex_spectral::overwrite::same_file(&args.out.join(f), input))
            {
                anyhow::bail!(
                    "output directory {}: --overwrite refused: it would remove {f} of the \
                     earlier evaluation, which is this command's input {}; copy the input \
                     elsewhere or choose another --out",
                    args.out.display(),
                    input.display()
                );
            }
        }
        for f in present {
            let p = args.out.join(f);
            std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
        }
    }
    Ok(lock)
}

/// Whether `path` is the `timing.json` an evaluation writes: a JSON object
/// with its `n`, `m` and `method`.
fn is_eval_record(path: &std::path::Path) -> bool {
    vortex_spectral::inputs::read_own_text(path, "record of an evaluation")
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| ["n", "m", "method"].iter().all(|k| v.get(k).is_some()))
}

fn read_input(args: &EvalArgs) -> Result<(vortex_fmm::Sources, vortex_fmm::Targets)> {
    let sources = crate::io::read_particles(&args.particles)?;
    let targets = match &args.targets {
        Some(p) => crate::io::read_targets(p)?,
        None => sources.as_targets(),
    };
    Ok((sources, targets))
}
