//! The NCCL transport: the messages of one all-to-all as point-to-point sends and receives in
//! one NCCL group on the caller's stream (NCCL picks NVLink, PCIe or the network), the own
//! part as a device copy.

use crate::{wait, DeviceExchange, ExchangeError, Parts, Transport};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nccl::{result, sys};
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::Duration;
use vortex_domain::Comm;

/// Whether libnccl can be loaded (the reason when not).
pub(crate) fn library_present() -> Result<(), String> {
    // SAFETY: only tries to open the library (dlopen) under the names cudarc looks for.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(
            "libnccl.so not found on the library path (packages libnccl2 and libnccl-dev; \
             cudarc loads `libnccl.so`)"
                .into(),
        )
    }
}

/// "2.28.3" from `ncclGetVersion`.
pub(crate) fn version_string() -> String {
    match result::get_nccl_version() {
        Ok(v) => format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100),
        Err(_) => "(version unknown)".into(),
    }
}

fn nccl_err(what: &str) -> impl Fn(result::NcclError) -> ExchangeError + '_ {
    move |e| {
        // SAFETY: ncclGetErrorString returns a static C string for any result code.
        let text = unsafe { std::ffi::CStr::from_ptr(sys::ncclGetErrorString(e.0)) };
        ExchangeError::Nccl(format!("{what}: {}", text.to_string_lossy()))
    }
}

/// One rank's NCCL communicator over the ranks of the host communicator.
pub(crate) struct NcclExchange {
    comm: sys::ncclComm_t,
    stream: Arc<CudaStream>,
    rank: usize,
    timeout: Duration,
}

// SAFETY: the communicator is used from one thread at a time (`&mut self`), as NCCL requires.
unsafe impl Send for NcclExchange {}

impl NcclExchange {
    /// Collective over `comm`: rank 0 makes the unique id, every rank receives it over the
    /// host communicator and joins. NVLink SHARP (multicast) stays off unless the user set
    /// `NCCL_NVLS_ENABLE` (it reserves memory and needs fabric support the slab transposes
    /// do not use).
    pub(crate) fn start(
        comm: &dyn Comm,
        stream: Arc<CudaStream>,
        timeout: Duration,
    ) -> Result<Self, ExchangeError> {
        if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
            // SAFETY (edition 2021: safe fn): set before NCCL reads its environment, while no
            // other thread of this process reads or writes NCCL_* variables.
            std::env::set_var("NCCL_NVLS_ENABLE", "0");
        }
        let id = if comm.rank() == 0 {
            match result::get_uniqueid() {
                Ok(id) => Some(id),
                Err(e) => {
                    log::warn!("{}", nccl_err("ncclGetUniqueId")(e));
                    None
                }
            }
        } else {
            None
        };
        let mine: Vec<u8> = id
            .map(|id| id.internal.iter().map(|&c| c as u8).collect())
            .unwrap_or_default();
        let all = comm.allgatherv(&mine);
        let bytes = &all[0];
        if bytes.len() != 128 {
            return Err(ExchangeError::Nccl(
                "rank 0 could not make a unique id (ncclGetUniqueId failed)".into(),
            ));
        }
        let mut internal = [0 as std::ffi::c_char; 128];
        internal
            .iter_mut()
            .zip(bytes)
            .for_each(|(d, &b)| *d = b as std::ffi::c_char);
        stream.context().bind_to_thread()?;
        let mut raw = MaybeUninit::uninit();
        // SAFETY: `raw` receives the communicator; the id is rank 0's, the same on every rank.
        unsafe {
            result::comm_init_rank(
                raw.as_mut_ptr(),
                comm.size() as i32,
                sys::ncclUniqueId { internal },
                comm.rank() as i32,
            )
        }
        .map_err(nccl_err("ncclCommInitRank"))?;
        Ok(Self {
            // SAFETY: initialised by the successful call above.
            comm: unsafe { raw.assume_init() },
            stream,
            rank: comm.rank(),
            timeout,
        })
    }

    fn abort(&mut self) {
        if !self.comm.is_null() {
            // SAFETY: a live communicator, dropped from here on.
            let _ = unsafe { result::comm_abort(self.comm) };
            self.comm = std::ptr::null_mut();
        }
    }
}

impl Drop for NcclExchange {
    fn drop(&mut self) {
        if !self.comm.is_null() {
            // SAFETY: the communicator is live and no operation of it is in flight after the
            // wait that ends every exchange.
            let _ = unsafe { result::comm_destroy(self.comm) };
        }
    }
}

impl DeviceExchange for NcclExchange {
    fn transport(&self) -> Transport {
        Transport::Nccl
    }

    fn alltoallv(
        &mut self,
        comm: &dyn Comm,
        send: &CudaSlice<f64>,
        recv: &mut CudaSlice<f64>,
        parts: &Parts,
    ) -> Result<usize, ExchangeError> {
        parts.check(send.len(), recv.len())?;
        if parts.ranks() != comm.size() || parts.rank() != self.rank {
            return Err(ExchangeError::Plan(format!(
                "a plan for rank {} of {} on rank {} of {}",
                parts.rank(),
                parts.ranks(),
                self.rank,
                comm.size()
            )));
        }
        if self.comm.is_null() {
            return Err(ExchangeError::Nccl("the communicator was aborted".into()));
        }
        let s = self.stream.clone();
        s.context().bind_to_thread()?;
        let own = (parts.send(self.rank), parts.recv(self.rank));
        if own.0.len() != own.1.len() {
            return Err(ExchangeError::Plan(format!(
                "rank {} sends {} elements to itself and expects {}",
                self.rank,
                own.0.len(),
                own.1.len()
            )));
        }
        if !own.0.is_empty() {
            s.memcpy_dtod(
                &send.slice(own.0.clone()),
                &mut recv.slice_mut(own.1.clone()),
            )?;
        }
        let (src, _g1) = send.device_ptr(&s);
        let (dst, _g2) = recv.device_ptr_mut(&s);
        let raw_stream = s.cu_stream() as sys::cudaStream_t;
        result::group_start().map_err(nccl_err("ncclGroupStart"))?;
        let mut status = Ok(());
        for r in (0..parts.ranks()).filter(|&r| r != self.rank) {
            let (out, inn) = (parts.send(r), parts.recv(r));
            // SAFETY: the ranges lie within `send` and `recv` (checked by `parts.check`); the
            // buffers outlive the wait below, which ends the operations.
            unsafe {
                if !out.is_empty() {
                    status = status.and(
                        result::send(
                            (src + 8 * out.start as u64) as *const _,
                            out.len(),
                            sys::ncclDataType_t::ncclFloat64,
                            r as i32,
                            self.comm,
                            raw_stream,
                        )
                        .map(|_| ()),
                    );
                }
                if !inn.is_empty() {
                    status = status.and(
                        result::recv(
                            (dst + 8 * inn.start as u64) as *mut _,
                            inn.len(),
                            sys::ncclDataType_t::ncclFloat64,
                            r as i32,
                            self.comm,
                            raw_stream,
                        )
                        .map(|_| ()),
                    );
                }
            }
        }
        let end = result::group_end();
        status.map_err(nccl_err("ncclSend/ncclRecv"))?;
        end.map_err(nccl_err("ncclGroupEnd"))?;
        if let Err(e) = wait(&s, self.timeout) {
            self.abort();
            return Err(e);
        }
        Ok(8 * parts.sent_to_others())
    }
}
