//! The communicator abstraction: what the decomposition needs from MPI, and three
//! implementations: [`SelfComm`] (one process, always built), [`ThreadComm`] (R "ranks" as
//! threads of one process over channels, for tests that need no MPI) and `MpiComm` (feature
//! `mpi`, over a system MPI through the `mpi` crate).
//!
//! Every method is collective: all ranks call it in the same order. Payloads are byte buffers
//! (see [`crate::wire`]); reductions of `f64` are done in rank order from an all-gather, so every
//! rank gets bitwise the same result whatever the implementation.

use std::ops::Range;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;

/// Reduction operator of [`Comm::allreduce_f64`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Min,
    Max,
}

/// How device buffers travel between the ranks (configuration `evaluation.exchange`, `vortex
/// run --exchange`; carried out by the `vortex-exchange` crate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportChoice {
    /// NCCL where libnccl loads and starts on every rank, else pinned host buffers and MPI
    /// (with a warning naming the reason).
    #[default]
    Auto,
    /// NCCL, or an error naming the library.
    Nccl,
    /// Pinned host buffers and MPI even where NCCL is available.
    Pinned,
}

impl std::str::FromStr for TransportChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "nccl" => Ok(Self::Nccl),
            "pinned" => Ok(Self::Pinned),
            _ => Err(format!("unknown exchange {s:?}: auto, nccl or pinned")),
        }
    }
}

/// A communicator over `size()` ranks.
pub trait Comm {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn barrier(&self);
    /// Every rank contributes `send`; all receive every rank's buffer, indexed by rank.
    fn allgatherv(&self, send: &[u8]) -> Vec<Vec<u8>>;
    /// `send[r]` goes to rank `r`; returns the buffers received, indexed by source rank.
    fn alltoallv(&self, send: &[Vec<u8>]) -> Vec<Vec<u8>>;
    /// `send[send_parts[r]]` goes to rank `r` and lands in `recv[recv_parts[q]]` of the rank
    /// that receives it from rank `q`: an all-to-all of doubles whose counts the caller's plan
    /// already knows (no count exchange, no intermediate vectors where the transport allows:
    /// MPI sends straight from `send` into `recv`). The lengths must agree pairwise
    /// (`send_parts[r].len()` on rank `q` = `recv_parts[q].len()` on rank `r`); a mismatch is
    /// a bug of the caller's plan and panics with both lengths.
    fn alltoallv_f64_into(
        &self,
        send: &[f64],
        send_parts: &[Range<usize>],
        recv: &mut [f64],
        recv_parts: &[Range<usize>],
    ) {
        assert_eq!(
            send_parts.len(),
            self.size(),
            "alltoallv: one send part per rank"
        );
        assert_eq!(
            recv_parts.len(),
            self.size(),
            "alltoallv: one receive part per rank"
        );
        let bufs: Vec<Vec<u8>> = send_parts
            .iter()
            .map(|p| bytemuck::cast_slice(&send[p.clone()]).to_vec())
            .collect();
        let got = self.alltoallv(&bufs);
        for (q, (b, p)) in got.iter().zip(recv_parts).enumerate() {
            assert_eq!(
                b.len(),
                8 * p.len(),
                "alltoallv: rank {} got {} bytes from rank {q}, its plan expects {}",
                self.rank(),
                b.len(),
                8 * p.len()
            );
            bytemuck::cast_slice_mut::<f64, u8>(&mut recv[p.clone()]).copy_from_slice(b);
        }
    }
    /// Element-wise reduction over ranks, identical on every rank (reduced in rank order).
    fn allreduce_f64(&self, data: &mut [f64], op: ReduceOp) {
        if self.size() == 1 {
            return;
        }
        let mine: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        let all = self.allgatherv(&mine);
        for (r, buf) in all.iter().enumerate() {
            assert_eq!(
                buf.len(),
                mine.len(),
                "allreduce: ranks disagree on the length"
            );
            for (k, ch) in buf.chunks_exact(8).enumerate() {
                let v = f64::from_le_bytes(ch.try_into().unwrap());
                data[k] = if r == 0 {
                    v
                } else {
                    match op {
                        ReduceOp::Sum => data[k] + v,
                        ReduceOp::Min => data[k].min(v),
                        ReduceOp::Max => data[k].max(v),
                    }
                };
            }
        }
    }
    /// Brings the whole job down with `msg` (one clear message rather than a hang).
    fn abort(&self, msg: &str) -> ! {
        eprintln!("rank {}: fatal: {msg}", self.rank());
        std::process::exit(1)
    }
}

/// The single-process communicator: one rank, nothing moves.
#[derive(Clone, Copy, Debug, Default)]
pub struct SelfComm;

impl Comm for SelfComm {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn barrier(&self) {}
    fn allgatherv(&self, send: &[u8]) -> Vec<Vec<u8>> {
        vec![send.to_vec()]
    }
    fn alltoallv(&self, send: &[Vec<u8>]) -> Vec<Vec<u8>> {
        assert_eq!(send.len(), 1);
        vec![send[0].clone()]
    }
}

/// One of `R` ranks simulated as threads of one process: a channel per ordered pair of ranks.
/// Messages between a pair arrive in the order sent, and every collective is called in the same
/// order on all ranks, so collectives match without tags.
pub struct ThreadComm {
    rank: usize,
    to: Vec<Sender<Vec<u8>>>,
    from: Vec<Mutex<Receiver<Vec<u8>>>>,
}

impl ThreadComm {
    /// The `n` communicators of one simulated job; hand `result[r]` to the thread of rank `r`.
    pub fn create(n: usize) -> Vec<ThreadComm> {
        assert!(n >= 1);
        // chan[from][to]
        let mut senders: Vec<Vec<Option<Sender<Vec<u8>>>>> =
            (0..n).map(|_| vec![None; n]).collect();
        let mut receivers: Vec<Vec<Option<Receiver<Vec<u8>>>>> =
            (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        for from in 0..n {
            for to in 0..n {
                let (s, r) = channel();
                senders[from][to] = Some(s);
                receivers[to][from] = Some(r);
            }
        }
        senders
            .into_iter()
            .zip(receivers)
            .enumerate()
            .map(|(rank, (s, r))| ThreadComm {
                rank,
                to: s.into_iter().map(Option::unwrap).collect(),
                from: r.into_iter().map(|x| Mutex::new(x.unwrap())).collect(),
            })
            .collect()
    }

    /// Runs `f(comm)` on `n` threads, one per rank, and returns their results by rank.
    pub fn run<T: Send, F: Fn(&ThreadComm) -> T + Sync>(n: usize, f: F) -> Vec<T> {
        let comms = ThreadComm::create(n);
        std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .iter()
                .map(|c| {
                    let f = &f;
                    s.spawn(move || f(c))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("rank thread panicked"))
                .collect()
        })
    }

    fn recv(&self, from: usize) -> Vec<u8> {
        self.from[from]
            .lock()
            .unwrap()
            .recv()
            .expect("a simulated rank hung up (it panicked?)")
    }
}

impl Comm for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.to.len()
    }
    fn barrier(&self) {
        self.allgatherv(&[]);
    }
    fn allgatherv(&self, send: &[u8]) -> Vec<Vec<u8>> {
        for s in &self.to {
            s.send(send.to_vec()).expect("simulated rank gone");
        }
        (0..self.size()).map(|r| self.recv(r)).collect()
    }
    fn alltoallv(&self, send: &[Vec<u8>]) -> Vec<Vec<u8>> {
        assert_eq!(send.len(), self.size());
        for (s, b) in self.to.iter().zip(send) {
            s.send(b.clone()).expect("simulated rank gone");
        }
        (0..self.size()).map(|r| self.recv(r)).collect()
    }
    fn abort(&self, msg: &str) -> ! {
        panic!("rank {}: fatal: {msg}", self.rank)
    }
}

#[cfg(feature = "mpi")]
pub use self::mpi_comm::MpiComm;

/// The communicator of the whole job, for programs that build with or without MPI from one
/// source: with the `mpi` feature, MPI is initialized here (finalized when the returned value
/// is dropped) and the world communicator returned; without it, [`SelfComm`]. `None` when MPI
/// was already initialized.
pub fn world() -> Option<Box<dyn Comm>> {
    #[cfg(feature = "mpi")]
    {
        let universe = mpi::initialize()?;
        let comm = MpiComm::new(universe.world());
        Some(Box::new(mpi_comm::World {
            comm,
            _universe: universe,
        }))
    }
    #[cfg(not(feature = "mpi"))]
    {
        Some(Box::new(SelfComm))
    }
}

#[cfg(feature = "mpi")]
mod mpi_comm {
    use super::Comm;
    use mpi::collective::SystemOperation;
    use mpi::datatype::{Partition, PartitionMut};
    use mpi::topology::{Communicator, SimpleCommunicator};
    use mpi::traits::*;
    use mpi::Count;
    use std::ops::Range;

    /// A communicator over a system MPI (`mpi` feature).
    pub struct MpiComm {
        comm: SimpleCommunicator,
    }

    impl MpiComm {
        /// Wraps a communicator (usually `universe.world()`).
        pub fn new(comm: SimpleCommunicator) -> Self {
            Self { comm }
        }
        pub fn raw(&self) -> &SimpleCommunicator {
            &self.comm
        }
        /// One all-to-all whose counts and displacements fit MPI's i32.
        fn alltoallv_once(&self, send: &[Vec<u8>]) -> Vec<Vec<u8>> {
            let n = self.size();
            assert_eq!(send.len(), n);
            let scounts: Vec<Count> = send.iter().map(|b| count(b.len())).collect();
            let mut rcounts = vec![0 as Count; n];
            self.comm.all_to_all_into(&scounts[..], &mut rcounts[..]);
            let sd = displs(&scounts);
            let rd = displs(&rcounts);
            let mut flat = buffer(0);
            send.iter().for_each(|b| flat.extend_from_slice(b));
            let total: usize = rcounts.iter().map(|&c| c as usize).sum();
            let mut buf = buffer(total);
            {
                let spart = Partition::new(&flat[..], &scounts[..], &sd[..]);
                let mut rpart = PartitionMut::new(&mut buf[..], &rcounts[..], &rd[..]);
                self.comm.all_to_all_varcount_into(&spart, &mut rpart);
            }
            (0..n)
                .map(|r| buf[rd[r] as usize..rd[r] as usize + rcounts[r] as usize].to_vec())
                .collect()
        }

        /// Rank within the node (for GPU selection: `local_rank % gpus_per_node`).
        pub fn local_rank(&self) -> usize {
            self.comm.split_shared(self.comm.rank()).rank() as usize
        }
    }

    fn displs(counts: &[Count]) -> Vec<Count> {
        let mut d = Vec::with_capacity(counts.len());
        let mut acc: i64 = 0;
        for &c in counts {
            d.push(Count::try_from(acc).expect("MPI message over 2 GiB (i32 displacements)"));
            acc += c as i64;
        }
        d
    }

    /// A byte buffer of `n` zeros whose pointer is a real allocation: an empty `Vec<u8>` points
    /// at address 1, which OpenMPI takes for `MPI_IN_PLACE`.
    fn buffer(n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 1);
        v.resize(n, 0);
        v
    }

    /// [`MpiComm`] over the world, owning the MPI environment (dropped after the communicator).
    pub(super) struct World {
        pub(super) comm: MpiComm,
        pub(super) _universe: mpi::environment::Universe,
    }

    impl Comm for World {
        fn rank(&self) -> usize {
            self.comm.rank()
        }
        fn size(&self) -> usize {
            self.comm.size()
        }
        fn barrier(&self) {
            self.comm.barrier()
        }
        fn allgatherv(&self, send: &[u8]) -> Vec<Vec<u8>> {
            self.comm.allgatherv(send)
        }
        fn alltoallv(&self, send: &[Vec<u8>]) -> Vec<Vec<u8>> {
            self.comm.alltoallv(send)
        }
        fn alltoallv_f64_into(
            &self,
            send: &[f64],
            send_parts: &[Range<usize>],
            recv: &mut [f64],
            recv_parts: &[Range<usize>],
        ) {
            self.comm
                .alltoallv_f64_into(send, send_parts, recv, recv_parts)
        }
        fn abort(&self, msg: &str) -> ! {
            self.comm.abort(msg)
        }
    }

    fn count(n: usize) -> Count {
        Count::try_from(n).expect("MPI message over 2 GiB (i32 counts)")
    }

    impl Comm for MpiComm {
        fn rank(&self) -> usize {
            self.comm.rank() as usize
        }
        fn size(&self) -> usize {
            self.comm.size() as usize
        }
        fn barrier(&self) {
            self.comm.barrier();
        }
        fn allgatherv(&self, send: &[u8]) -> Vec<Vec<u8>> {
            let n = self.size();
            let mut counts = vec![0 as Count; n];
            self.comm
                .all_gather_into(&count(send.len()), &mut counts[..]);
            let d = displs(&counts);
            let total: usize = counts.iter().map(|&c| c as usize).sum();
            let mut buf = buffer(total);
            let mut sbuf = buffer(send.len());
            sbuf.copy_from_slice(send);
            {
                let mut part = PartitionMut::new(&mut buf[..], &counts[..], &d[..]);
                self.comm.all_gather_varcount_into(&sbuf[..], &mut part);
            }
            (0..n)
                .map(|r| buf[d[r] as usize..d[r] as usize + counts[r] as usize].to_vec())
                .collect()
        }
        fn alltoallv(&self, send: &[Vec<u8>]) -> Vec<Vec<u8>> {
            let n = self.size();
            assert_eq!(send.len(), n);
            // MPI counts and displacements are i32: messages that together pass 2 GiB (the
            // start of a 512^3 run on 2 ranks scatters 7 GB from rank 0) go in rounds, each
            // message cut into pieces of at most `piece` bytes so that a round's total fits
            let lens: Vec<u64> = send.iter().map(|b| b.len() as u64).collect();
            let mut got = vec![0u64; n];
            self.comm.all_to_all_into(&lens[..], &mut got[..]);
            let piece = (i32::MAX as u64 - 1) / n as u64;
            let mine = lens
                .iter()
                .chain(&got)
                .map(|&l| l.div_ceil(piece))
                .max()
                .unwrap_or(0);
            let mut rounds = 0u64;
            self.comm
                .all_reduce_into(&mine, &mut rounds, SystemOperation::max());
            if rounds <= 1 {
                return self.alltoallv_once(send);
            }
            let mut out: Vec<Vec<u8>> = got
                .iter()
                .map(|&l| Vec::with_capacity(l as usize))
                .collect();
            for k in 0..rounds {
                let part: Vec<Vec<u8>> = send
                    .iter()
                    .map(|b| {
                        let a = ((k * piece) as usize).min(b.len());
                        let e = (((k + 1) * piece) as usize).min(b.len());
                        b[a..e].to_vec()
                    })
                    .collect();
                for (o, r) in out.iter_mut().zip(self.alltoallv_once(&part)) {
                    o.extend_from_slice(&r);
                }
            }
            out
        }
        fn alltoallv_f64_into(
            &self,
            send: &[f64],
            send_parts: &[Range<usize>],
            recv: &mut [f64],
            recv_parts: &[Range<usize>],
        ) {
            let n = self.size();
            assert_eq!(send_parts.len(), n, "alltoallv: one send part per rank");
            assert_eq!(recv_parts.len(), n, "alltoallv: one receive part per rank");
            let counts =
                |p: &[Range<usize>]| -> Vec<Count> { p.iter().map(|r| count(r.len())).collect() };
            let starts =
                |p: &[Range<usize>]| -> Vec<Count> { p.iter().map(|r| count(r.start)).collect() };
            let (sc, sd) = (counts(send_parts), starts(send_parts));
            let (rc, rd) = (counts(recv_parts), starts(recv_parts));
            // an empty slice points at a dangling address that OpenMPI may take for MPI_IN_PLACE
            let mut dummy = [0.0f64; 1];
            let sbuf: &[f64] = if send.is_empty() { &[0.0] } else { send };
            let rbuf: &mut [f64] = if recv.is_empty() { &mut dummy } else { recv };
            let spart = Partition::new(sbuf, &sc[..], &sd[..]);
            let mut rpart = PartitionMut::new(rbuf, &rc[..], &rd[..]);
            self.comm.all_to_all_varcount_into(&spart, &mut rpart);
        }
        fn abort(&self, msg: &str) -> ! {
            eprintln!("rank {}: fatal: {msg}", self.rank());
            self.comm.abort(1)
        }
    }
}

/// Bytes of an `alltoallv` send buffer that leave rank `me` (the part addressed to itself
/// stays): what every `CommStats::bytes_*` counter adds for an exchange.
pub(crate) fn bytes_sent(me: usize, send: &[Vec<u8>]) -> u64 {
    send.iter()
        .enumerate()
        .filter(|(r, _)| *r != me)
        .map(|(_, b)| b.len() as u64)
        .sum()
}

/// Bytes one rank sends in an allreduce of `n` doubles (counted as an all-gather of its
/// vector), in the same meaning as [`bytes_sent`].
pub(crate) fn bytes_allreduce(nranks: usize, n: usize) -> u64 {
    (8 * n * (nranks - 1)) as u64
}
