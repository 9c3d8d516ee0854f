//! The host twin of [`crate::DeviceExchange`]: the same plan over host slices and the host
//! communicator (the CPU path of the slab FFT and the tests without a GPU).

use crate::{ExchangeError, Parts};
use vortex_domain::Comm;

/// Collective: `send[parts.send(r)]` to rank `r`, the message of rank `q` into
/// `recv[parts.recv(q)]` (the own part copied). Returns the bytes sent to other ranks.
pub fn alltoallv_host(
    comm: &dyn Comm,
    send: &[f64],
    recv: &mut [f64],
    parts: &Parts,
) -> Result<usize, ExchangeError> {
    parts.check(send.len(), recv.len())?;
    if parts.ranks() != comm.size() || parts.rank() != comm.rank() {
        return Err(ExchangeError::Plan(format!(
            "a plan for rank {} of {} on rank {} of {}",
            parts.rank(),
            parts.ranks(),
            comm.rank(),
            comm.size()
        )));
    }
    comm.alltoallv_f64_into(send, parts.send_all(), recv, parts.recv_all());
    Ok(8 * parts.sent_to_others())
}
