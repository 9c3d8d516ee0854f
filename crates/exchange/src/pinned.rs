//! The pinned transport: each message copied into page-locked host memory (DMA at the link's
//! speed, no staging copy inside the driver), the host communicator's all-to-all straight
//! between the pinned buffers (`Comm::alltoallv_f64_into`: MPI reads and writes them in
//! place), the received messages copied up. The own part never leaves the device.

use crate::{wait, DeviceExchange, ExchangeError, Parts, Transport};
use cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;
use vortex_domain::Comm;

pub(crate) struct PinnedExchange {
    stream: Arc<CudaStream>,
    timeout: Duration,
    /// Page-locked send and receive buffers, grown to the largest plan seen.
    send: Option<PinnedHostSlice<f64>>,
    recv: Option<PinnedHostSlice<f64>>,
}

impl PinnedExchange {
    pub(crate) fn new(stream: Arc<CudaStream>, timeout: Duration) -> Self {
        Self {
            stream,
            timeout,
            send: None,
            recv: None,
        }
    }

    /// A pinned buffer of at least `len` doubles (kept between exchanges).
    fn ensure(
        stream: &Arc<CudaStream>,
        slot: &mut Option<PinnedHostSlice<f64>>,
        len: usize,
    ) -> Result<(), ExchangeError> {
        let len = len.max(1);
        if slot.as_ref().is_none_or(|b| b.len() < len) {
            *slot = None;
            // SAFETY: the contents are written (by a copy or by MPI) before they are read.
            // Flags 0: cached host memory (write-combined memory is slow for MPI to read).
            *slot = Some(unsafe { stream.context().alloc_pinned_with_flags::<f64>(len, 0) }?);
        }
        Ok(())
    }
}

impl DeviceExchange for PinnedExchange {
    fn transport(&self) -> Transport {
        Transport::Pinned
    }

    fn alltoallv(
        &mut self,
        comm: &dyn Comm,
        send: &CudaSlice<f64>,
        recv: &mut CudaSlice<f64>,
        parts: &Parts,
    ) -> Result<usize, ExchangeError> {
        parts.check(send.len(), recv.len())?;
        let me = comm.rank();
        if parts.ranks() != comm.size() || parts.rank() != me {
            return Err(ExchangeError::Plan(format!(
                "a plan for rank {} of {} on rank {me} of {}",
                parts.rank(),
                parts.ranks(),
                comm.size()
            )));
        }
        let s = self.stream.clone();
        s.context().bind_to_thread()?;
        Self::ensure(&s, &mut self.send, parts.send_extent())?;
        Self::ensure(&s, &mut self.recv, parts.recv_extent())?;
        let (hs, hr) = (
            self.send.as_mut().expect("allocated"),
            self.recv.as_mut().expect("allocated"),
        );
        // down: every message to another rank; the own part device to device
        {
            let host = hs.as_mut_slice()?;
            for r in (0..parts.ranks()).filter(|&r| r != me) {
                let p = parts.send(r);
                if !p.is_empty() {
                    s.memcpy_dtoh(&send.slice(p.clone()), &mut host[p])?;
                }
            }
        }
        let (own_out, own_in) = (parts.send(me), parts.recv(me));
        if !own_out.is_empty() {
            s.memcpy_dtod(&send.slice(own_out), &mut recv.slice_mut(own_in))?;
        }
        wait(&s, self.timeout)?;
        let skip_own = |v: &[Range<usize>]| -> Vec<Range<usize>> {
            v.iter()
                .enumerate()
                .map(|(r, p)| if r == me { 0..0 } else { p.clone() })
                .collect()
        };
        {
            let host_in = hr.as_mut_slice()?;
            let host_out = hs.as_slice()?;
            comm.alltoallv_f64_into(
                host_out,
                &skip_own(parts.send_all()),
                host_in,
                &skip_own(parts.recv_all()),
            );
        }
        // up: every message received from another rank
        let host = hr.as_slice()?;
        for q in (0..parts.ranks()).filter(|&q| q != me) {
            let p = parts.recv(q);
            if !p.is_empty() {
                s.memcpy_htod(&host[p.clone()], &mut recv.slice_mut(p))?;
            }
        }
        Ok(8 * parts.sent_to_others())
    }
}
