//! The communicator of this process: MPI under `mpirun` when built with the `mpi` feature,
//! otherwise a single process. Both go through the same `domain` code path.

use anyhow::Result;
use vortex_domain::Comm;

/// Runs `f` with the communicator and this rank's node-local rank (for GPU selection).
pub fn with_comm<R>(f: impl FnOnce(&dyn Comm, usize) -> Result<R>) -> Result<R> {
    with_comm_into(None, f)
}

/// [`with_comm`] for a command that writes into the output directory `out` (rank 0's lock):
/// when the watchdog ends the job, `out/run.json` records it.
pub fn with_comm_into<R>(
    out: Option<&std::path::Path>,
    f: impl FnOnce(&dyn Comm, usize) -> Result<R>,
) -> Result<R> {
    #[cfg(feature = "mpi")]
    {
        use mpi::traits::Communicator;
        let (universe, _threading) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            .ok_or_else(|| anyhow::anyhow!("MPI could not be initialized"))?;
        let world = universe.world();
        log::debug!("MPI rank {} of {}", world.rank(), world.size());
        let comm = vortex_domain::MpiComm::new(world);
        let local = comm.local_rank();
        let timeout = watchdog_timeout()?;
        if comm.size() > 1 {
            // a signal's stop at once ends every rank of the job with its status
            crate::signals::set_exit(|code| {
                // SAFETY: MPI is initialised (the universe lives until `f` returns) and
                // MPI_Abort does not return; it ends every rank of the job.
                unsafe {
                    mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, code);
                }
                std::process::exit(code)
            });
            // a panic on one rank would leave the others waiting in a collective: abort the job
            let rank = comm.rank();
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                crate::errln!("rank {rank}: fatal: aborting the MPI job");
                default(info);
                // SAFETY: MPI is initialised (the universe lives until `f` returns) and
                // MPI_Abort does not return.
                unsafe {
                    mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 1);
                }
            }));
        }
        match timeout.filter(|_| comm.size() > 1) {
            // a rank that stops answering leaves the others waiting in a collective for ever
            Some(t) => {
                let rank = comm.rank();
                let out = out.map(std::path::Path::to_path_buf);
                let dog = vortex_domain::watchdog::Watchdog::start(
                    comm.rank(),
                    t,
                    Box::new(move |msg| {
                        crate::errln!("{msg}");
                        record_watchdog_end(rank, out.as_deref(), msg);
                        // SAFETY: MPI is initialised (the universe lives until `f` returns) and
                        // MPI_Abort does not return; it ends every rank of the job.
                        unsafe {
                            mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 1);
                        }
                    }),
                );
                vortex_domain::watchdog::install(Some(dog.clone()));
                let r = f(&vortex_domain::watchdog::Watched::new(&comm, dog), local);
                vortex_domain::watchdog::install(None);
                r
            }
            None => f(&comm, local),
        }
    }
    #[cfg(not(feature = "mpi"))]
    {
        // launched as one of several ranks by mpirun/srun, but built without MPI: every process
        // would run the whole problem and write the same files
        // checked even here: a mistyped value is said before an MPI build runs
        let _ = out;
        watchdog_timeout()?;
        if let Some((n, var)) = launched_ranks() {
            anyhow::bail!(
                "started as one of {n} ranks ({var}) but built without MPI: rebuild with \
                 `cargo build --release --features mpi`"
            );
        }
        f(&vortex_domain::SelfComm, 0)
    }
}

/// The default of `VORTEX_WATCHDOG_SECONDS`: longer than any legitimate wait of the ranks for
/// one another (rank 0 writing a large snapshot alone).
pub const WATCHDOG_DEFAULT_S: f64 = 600.0;

/// The watchdog's timeout of a multi-rank run (`vortex_domain::watchdog`): the environment
/// variable `VORTEX_WATCHDOG_SECONDS` (seconds a rank may wait in a collective for the others
/// before the job is ended; 0 turns the watchdog off), [`WATCHDOG_DEFAULT_S`] when unset.
pub fn watchdog_timeout() -> Result<Option<std::time::Duration>> {
    // the one rule of a typed duration (vortex_spectral::stop::parse_seconds)
    let s = vortex_spectral::stop::seconds_from_env("VORTEX_WATCHDOG_SECONDS", WATCHDOG_DEFAULT_S)
        .map_err(|e| anyhow::anyhow!("{e} (0 turns the watchdog off)"))?;
    Ok((s > 0.0).then(|| std::time::Duration::from_secs_f64(s)))
}

/// What a rank's watchdog does before it ends the job: rank 0 completes its entry of
/// `run.json` (failed, with the watchdog's message); another rank waits a few seconds (rank 0
/// records it, and its abort ends this rank too) and, when the entry is still "running"
/// (rank 0 is the one that stopped answering), marks it failed itself.
#[cfg(feature = "mpi")]
fn record_watchdog_end(rank: usize, out: Option<&std::path::Path>, msg: &str) {
    if rank == 0 {
        crate::run_info::end_abruptly(crate::run_info::Outcome::Failed(msg.to_string()));
        return;
    }
    std::thread::sleep(std::time::Duration::from_secs(3));
    if let Some(out) = out {
        if let Err(e) = crate::run_info::mark_running_failed(out, msg) {
            crate::errln!("rank {rank}: {e:#}");
        }
    }
}

/// The number of ranks a launcher (mpirun, srun) started, with the variable that says so,
/// when more than one.
pub fn launched_ranks() -> Option<(usize, &'static str)> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .into_iter()
        .find_map(|var| {
            std::env::var(var)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|&n| n > 1)
                .map(|n| (n, var))
        })
}

/// Refuses a command that runs in one process when a launcher started it as one of several
/// ranks (each would do the whole work into the same files): rank 0 says why (`what` the
/// command is), the others end with the same status quietly.
pub fn refuse_several(what: &str) -> Result<()> {
    if let Some((n, var)) = launched_ranks() {
        if launched_rank() != 0 {
            std::process::exit(1);
        }
        anyhow::bail!(
            "{what} runs in one process, but was started as one of {n} ranks ({var}): every \
             rank would write the same file; start it without mpirun/srun, or with -np 1"
        );
    }
    Ok(())
}

/// This process's rank as a launcher numbered it (0 when not launched as one of several).
pub fn launched_rank() -> usize {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK"]
        .into_iter()
        .find_map(|var| std::env::var(var).ok().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Makes every rank agree on the outcome of a step that only rank 0 performed (reading input):
/// all ranks return an error if rank 0 failed, so none waits forever in a collective.
pub fn agree<T>(comm: &dyn Comm, result: Result<T>) -> Result<Option<T>> {
    let mut flag = [if result.is_err() { 1.0 } else { 0.0 }];
    comm.allreduce_f64(&mut flag, vortex_domain::ReduceOp::Max);
    match result {
        Err(e) => Err(e),
        Ok(v) if flag[0] == 0.0 => Ok(Some(v)),
        Ok(_) => Err(anyhow::anyhow!(
            "rank 0 failed to read the input (see its message)"
        )),
    }
}
