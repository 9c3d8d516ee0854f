//! All-to-all exchanges of device buffers between the ranks of a job, the device twin of
//! `vortex_domain::Comm::alltoallv_f64_into`: the transposes of the slab-decomposed FFT
//! (`vortex_resident::slab_fourier`) move their spectra GPU to GPU through this crate.
//!
//! One plan ([`Parts`]: which range of the send buffer goes to each rank, where each rank's
//! message lands) and three transports behind one trait, [`DeviceExchange`]:
//! * [`Transport::Nccl`] — NCCL point-to-point sends and receives in one group, enqueued on the
//!   caller's stream (NVLink or PCIe within a node, the network between nodes); libnccl is
//!   loaded at run time, its unique id broadcast over the host communicator once per run;
//! * [`Transport::Pinned`] — through page-locked host buffers (one asynchronous copy each way)
//!   and the host communicator's all-to-all (MPI reads and writes the pinned buffers
//!   directly): the fallback where libnccl is absent or refuses to start, or where asked;
//! * [`Transport::Local`] — one rank: a device-to-device copy.
//!
//! [`open`] picks one from a [`TransportChoice`] (`auto`: NCCL where it starts, else pinned,
//! with a warning naming the reason), agreed over the ranks so that every rank runs the same
//! transport. [`host::alltoallv_host`] runs the same plan on host slices (the CPU twins and
//! the tests without a GPU).

pub mod host;
mod local;
mod nccl;
pub mod parts;
mod pinned;

pub use parts::Parts;

use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;
use std::time::Duration;
use vortex_domain::{Comm, ReduceOp};

/// The transport that moves the buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// NCCL sends and receives, device to device.
    Nccl,
    /// Page-locked host buffers and the host communicator (MPI).
    Pinned,
    /// One rank: a device copy.
    Local,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Nccl => "nccl",
            Transport::Pinned => "pinned",
            Transport::Local => "local",
        })
    }
}

pub use vortex_domain::TransportChoice;

/// Why an exchange could not be set up or run.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("NCCL (libnccl.so.2): {0}")]
    Nccl(String),
    #[error("device exchange: CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    #[error("device exchange plan: {0}")]
    Plan(String),
    #[error(
        "device exchange: no progress for {seconds} s (a rank stopped answering?); aborted the \
         NCCL communicator"
    )]
    Timeout { seconds: u64 },
}

/// One rank's end of an all-to-all of device buffers of `f64`.
pub trait DeviceExchange: Send {
    /// Which transport runs.
    fn transport(&self) -> Transport;

    /// Collective: `send[parts.send(r)]` goes to rank `r`, the message of rank `q` lands in
    /// `recv[parts.recv(q)]`. The work is ordered on the stream the exchange was opened with;
    /// on return the received data is ready for work queued later on that stream. Returns
    /// the bytes this rank sent to other ranks.
    fn alltoallv(
        &mut self,
        comm: &dyn Comm,
        send: &CudaSlice<f64>,
        recv: &mut CudaSlice<f64>,
        parts: &Parts,
    ) -> Result<usize, ExchangeError>;
}

/// How long an exchange may wait for its peers before it gives up (a stopped rank must not
/// hang the others forever).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Opens the exchange of this rank (collective): `choice` resolved on every rank and agreed
/// (if any rank cannot start NCCL, all take the pinned path), its work on `stream`.
pub fn open(
    comm: &dyn Comm,
    stream: Arc<CudaStream>,
    choice: TransportChoice,
    timeout: Duration,
) -> Result<Box<dyn DeviceExchange>, ExchangeError> {
    if comm.size() == 1 {
        return Ok(Box::new(local::LocalExchange::new(stream)));
    }
    if choice == TransportChoice::Pinned {
        log::info!("device exchange: pinned host buffers and MPI (asked for)");
        return Ok(Box::new(pinned::PinnedExchange::new(stream, timeout)));
    }
    // every rank must agree before anyone enters NCCL's collective initialisation
    let present = nccl::library_present();
    let mut all = [present.is_ok() as u8 as f64];
    comm.allreduce_f64(&mut all, ReduceOp::Min);
    let failed = |why: String| -> Result<Box<dyn DeviceExchange>, ExchangeError> {
        if choice == TransportChoice::Nccl {
            return Err(ExchangeError::Nccl(why));
        }
        log::warn!(
            "device exchange: NCCL not used ({why}); falling back to pinned host buffers and MPI"
        );
        Ok(Box::new(pinned::PinnedExchange::new(
            stream.clone(),
            timeout,
        )))
    };
    if all[0] < 1.0 {
        return failed(match present {
            Err(e) => e,
            Ok(()) => "libnccl missing on another rank".into(),
        });
    }
    let started = nccl::NcclExchange::start(comm, stream.clone(), timeout);
    let mut ok = [started.is_ok() as u8 as f64];
    comm.allreduce_f64(&mut ok, ReduceOp::Min);
    match started {
        Ok(x) if ok[0] >= 1.0 => {
            log::info!(
                "device exchange: NCCL {} over {} ranks",
                nccl::version_string(),
                comm.size()
            );
            Ok(Box::new(x))
        }
        Ok(_) => failed("NCCL failed to start on another rank".into()),
        Err(e) => failed(e.to_string()),
    }
}

/// Waits until the work queued so far on `stream` has finished, at most `timeout`.
pub(crate) fn wait(stream: &CudaStream, timeout: Duration) -> Result<(), ExchangeError> {
    let done = stream.record_event(None)?;
    let start = std::time::Instant::now();
    let mut pause = Duration::from_micros(5);
    while !done.try_is_complete()? {
        if start.elapsed() > timeout {
            return Err(ExchangeError::Timeout {
                seconds: timeout.as_secs(),
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
    Ok(())
}
