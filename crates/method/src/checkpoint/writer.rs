//! Writing checkpoints while the run goes on: the step waits only for the copy of the state to
//! the host, a thread writes it. On one rank that thread writes `checkpoint.bin`; on several
//! every rank's thread writes its piece at once, and once every rank reports its piece durable
//! (agreed over the ranks, [`CheckpointWriter::finish`]) rank 0 writes the manifest. One
//! write at a time: it is finished before the next starts and before the run ends; the run
//! loop finishes it as soon as every thread is done ([`CheckpointWriter::busy`], polled once
//! per step), so the manifest follows the slowest piece by at most a step.

use super::pieces::{self, Manifest, PieceEntry, MANIFEST_FILE};
use super::{config_record, write_kept, Checkpoint, SINGLE_FILE};
use crate::collective::{agree, broadcast_f64s};
use crate::error::{Error, Result};
use crate::simulator::Simulator;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use vortex_domain::Comm;

/// A write started on every rank and not yet finished.
struct Job {
    /// What the messages call it: the file and the step.
    name: String,
    /// The manifest to complete with the pieces (several ranks).
    manifest: Option<Manifest>,
}

/// The checkpoints of a run into its output directory (see the module documentation).
pub struct CheckpointWriter {
    out: PathBuf,
    keep: usize,
    /// The serial of the next set of pieces (unique in the directory).
    serial: u64,
    pending: Option<JoinHandle<Result<Option<PieceEntry>>>>,
    job: Option<Job>,
}

impl CheckpointWriter {
    /// The writer of the run into `out` (which exists), keeping the last `keep` checkpoints.
    /// Collective (rank 0 numbers the sets after the pieces already there).
    pub fn new(comm: &dyn Comm, out: &Path, keep: usize) -> Result<Self> {
        let serial = if comm.rank() == 0 && comm.size() > 1 {
            pieces::next_serial(out)
        } else {
            Ok(0)
        };
        let serial = agree(comm, serial)?;
        let serial = broadcast_f64s(comm, &[serial as f64])[0] as u64;
        Ok(Self {
            out: out.to_path_buf(),
            keep,
            serial,
            pending: None,
            job: None,
        })
    }

    /// The newest checkpoint of a run on `ranks` ranks: `checkpoint.bin` or the manifest.
    pub fn path(&self, ranks: usize) -> PathBuf {
        self.out.join(if ranks == 1 {
            SINGLE_FILE
        } else {
            MANIFEST_FILE
        })
    }

    /// Whether this rank's thread is still writing (not collective).
    pub fn busy(&self) -> bool {
        self.pending.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Whether a write was started and not finished (the same on every rank).
    pub fn active(&self) -> bool {
        self.job.is_some()
    }

    /// Starts writing the current state of `sim`: on one rank the whole state into
    /// `checkpoint.bin`, on several this rank's piece. The previous write must be finished.
    /// Collective.
    pub fn start(
        &mut self,
        comm: &dyn Comm,
        sim: &mut dyn Simulator,
        initial_energy: f64,
    ) -> Result<()> {
        debug_assert!(
            self.job.is_none(),
            "the previous checkpoint is finished first"
        );
        let step = sim.step_index();
        let record = config_record(sim.config());
        let path = self.path(comm.size());
        let name = format!("{} (step {step})", path.display());
        if comm.size() == 1 {
            let state = sim.gather_state()?;
            if let Some(state) = state {
                let ck = Checkpoint {
                    config: record,
                    initial_energy,
                    state,
                };
                let keep = self.keep;
                let done = name.clone();
                self.pending = Some(std::thread::spawn(move || {
                    write_kept(&path, &ck, keep)?;
                    // complete on disk: the one a signal's stop at once names
                    vortex_spectral::stop::checkpoint_complete(done);
                    Ok(None)
                }));
            }
            self.job = Some(Job {
                name,
                manifest: None,
            });
            return Ok(());
        }
        let local = agree(comm, sim.local_state())?;
        let manifest = Manifest::head(&record, initial_energy, &local);
        let file = pieces::piece_file(step, self.serial, comm.rank());
        self.serial += 1;
        let dir = self.out.clone();
        self.pending = Some(std::thread::spawn(move || {
            pieces::write_piece(&dir, &file, &local).map(Some)
        }));
        self.job = Some(Job {
            name,
            manifest: Some(manifest),
        });
        Ok(())
    }

    /// Waits for the write in progress; with pieces, once every rank's piece is durable, rank 0
    /// writes the manifest. Returns the name of the checkpoint completed. Collective when a
    /// write was started.
    pub fn finish(&mut self, comm: &dyn Comm) -> Result<Option<String>> {
        let Some(job) = self.job.take() else {
            return Ok(None);
        };
        let r = match self.pending.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(Error::Other("the checkpoint writer panicked".into()))),
            None => Ok(None),
        };
        let entry = agree(comm, r)?;
        let Some(mut manifest) = job.manifest else {
            return Ok(Some(job.name));
        };
        let mine = match &entry {
            Some(e) => bincode::serde::encode_to_vec(e, bincode::config::standard())
                .map_err(|e| Error::Other(format!("checkpoint piece entry: {e}")))?,
            None => Vec::new(),
        };
        let all = comm.allgatherv(&mine);
        let written = if comm.rank() == 0 {
            (|| {
                for b in &all {
                    let (e, _): (PieceEntry, usize) =
                        bincode::serde::decode_from_slice(b, bincode::config::standard())
                            .map_err(|e| Error::Other(format!("checkpoint piece entry: {e}")))?;
                    manifest.pieces.push(e);
                }
                pieces::write_manifest(&self.out, &manifest, self.keep).map(|_| ())
            })()
        } else {
            Ok(())
        };
        agree(comm, written)?;
        Ok(Some(job.name))
    }
}
