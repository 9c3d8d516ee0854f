//! The plan of one all-to-all: which range of the send buffer goes to each rank and where
//! each rank's message lands in the receive buffer. Built by the caller (who knows the data
//! layout, e.g. `vortex_resident::slab_fourier::SlabLayout`), checked once here, executed by
//! any [`crate::DeviceExchange`] or by [`crate::host::alltoallv_host`].

use crate::ExchangeError;
use std::ops::Range;

/// Ranges (in elements) of one rank's send and receive buffers, indexed by peer rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parts {
    send: Vec<Range<usize>>,
    recv: Vec<Range<usize>>,
    rank: usize,
}

impl Parts {
    /// The plan of rank `rank`: `send[r]` goes to rank `r`, the message from rank `q` lands
    /// in `recv[q]`. Receive ranges must not overlap (send ranges may).
    pub fn new(
        rank: usize,
        send: Vec<Range<usize>>,
        recv: Vec<Range<usize>>,
    ) -> Result<Self, ExchangeError> {
        if send.len() != recv.len() || rank >= send.len() {
            return Err(ExchangeError::Plan(format!(
                "{} send parts and {} receive parts for rank {rank}",
                send.len(),
                recv.len()
            )));
        }
        let mut sorted: Vec<&Range<usize>> = recv.iter().filter(|r| !r.is_empty()).collect();
        sorted.sort_by_key(|r| r.start);
        if let Some(w) = sorted.windows(2).find(|w| w[0].end > w[1].start) {
            return Err(ExchangeError::Plan(format!(
                "receive parts {:?} and {:?} overlap",
                w[0], w[1]
            )));
        }
        Ok(Self { send, recv, rank })
    }

    pub fn ranks(&self) -> usize {
        self.send.len()
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// The range of the send buffer for rank `r`.
    pub fn send(&self, r: usize) -> Range<usize> {
        self.send[r].clone()
    }
    /// The range of the receive buffer for the message of rank `q`.
    pub fn recv(&self, q: usize) -> Range<usize> {
        self.recv[q].clone()
    }
    pub fn send_all(&self) -> &[Range<usize>] {
        &self.send
    }
    pub fn recv_all(&self) -> &[Range<usize>] {
        &self.recv
    }
    /// Elements the send buffer must hold.
    pub fn send_extent(&self) -> usize {
        self.send.iter().map(|r| r.end).max().unwrap_or(0)
    }
    /// Elements the receive buffer must hold.
    pub fn recv_extent(&self) -> usize {
        self.recv.iter().map(|r| r.end).max().unwrap_or(0)
    }
    /// Elements this rank sends to other ranks (its own part stays).
    pub fn sent_to_others(&self) -> usize {
        (0..self.ranks())
            .filter(|&r| r != self.rank)
            .map(|r| self.send[r].len())
            .sum()
    }

    /// Refuses buffers shorter than the plan (lengths in elements).
    pub fn check(&self, send_len: usize, recv_len: usize) -> Result<(), ExchangeError> {
        if send_len < self.send_extent() || recv_len < self.recv_extent() {
            return Err(ExchangeError::Plan(format!(
                "buffers of {send_len} and {recv_len} elements for a plan that sends up to \
                 element {} and receives up to element {}",
                self.send_extent(),
                self.recv_extent()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_receive_parts_are_refused() {
        let e = Parts::new(0, vec![0..2, 2..4], vec![0..3, 2..5]).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        let p = Parts::new(1, vec![0..2, 0..2], vec![3..5, 0..3]).unwrap();
        assert_eq!(p.recv_extent(), 5);
        assert_eq!(p.sent_to_others(), 2);
        assert!(p.check(2, 4).is_err());
        let one: Vec<std::ops::Range<usize>> = std::iter::once(0..1).collect();
        assert!(Parts::new(2, one.clone(), one).is_err());
    }
}
