//! A watchdog over the waits of one rank: when a rank stops answering (stopped with SIGSTOP, a
//! hung node, a deadlock), the other ranks wait in their next collective for ever, and MPI
//! notices nothing (a killed rank ends the job; a stopped one does not). Each rank's watchdog
//! measures how long the rank has been waiting in a collective and ends the job when that is
//! longer than a configurable time.
//!
//! It works on the host and does not depend on the communicator: [`Watched`] wraps any
//! [`Comm`] (MPI, threads, one process) and marks every collective as a wait; any other blocking
//! exchange (one that does not go through a [`Comm`], e.g. a collective of a GPU library)
//! marks itself with [`waiting`], one line around the call. A thread checks the marks four
//! times a timeout (at least once a second) and calls the action given at the start (the
//! binary's ends the MPI job: `MPI_Abort`, which brings every rank down, the stopped one too).
//!
//! The time counts waiting only, not work: a rank that computes for an hour while the others
//! wait for it is not a hang of that rank, and the others' watchdogs fire only when their wait
//! passes the timeout, so it must be longer than the longest legitimate imbalance (a snapshot
//! or checkpoint written by rank 0 alone; the binary's default is 10 minutes).

use crate::comm::{Comm, ReduceOp};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// What the watchdog does when a wait passes the timeout: called once, with a message naming
/// the rank, the wait and its length.
pub type Action = Box<dyn Fn(&str) + Send + Sync>;

/// The current wait of a rank: nesting depth, when the outermost began, what it is.
#[derive(Default)]
struct Wait {
    depth: usize,
    since: Option<Instant>,
    what: &'static str,
}

/// A watchdog thread and the wait it watches (see the module documentation).
pub struct Watchdog {
    rank: usize,
    timeout: Duration,
    wait: Mutex<Wait>,
    action: Action,
}

impl Watchdog {
    /// Starts watching the waits of rank `rank`: when one lasts longer than `timeout`, `action`
    /// is called (once) with a message. The thread ends when the last handle is dropped.
    pub fn start(rank: usize, timeout: Duration, action: Action) -> Arc<Watchdog> {
        let dog = Arc::new(Watchdog {
            rank,
            timeout,
            wait: Mutex::new(Wait::default()),
            action,
        });
        let weak = Arc::downgrade(&dog);
        let tick = (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || watch(weak, tick))
            .expect("spawning the watchdog thread");
        dog
    }

    /// Marks the start of a wait named `what`; it ends when the returned guard is dropped.
    /// Waits nest (the outermost counts).
    pub fn waiting(self: &Arc<Self>, what: &'static str) -> WaitGuard {
        let mut w = self.wait.lock().unwrap_or_else(|e| e.into_inner());
        if w.depth == 0 {
            w.since = Some(Instant::now());
            w.what = what;
        }
        w.depth += 1;
        WaitGuard {
            dog: Some(self.clone()),
        }
    }

    /// The message of a wait of `waited` in `what` that passed the timeout.
    fn message(&self, what: &str, waited: Duration) -> String {
        format!(
            "rank {}: waited {:.0} s in {what} for the other ranks, longer than the watchdog's \
             {:.0} s (VORTEX_WATCHDOG_SECONDS): a rank stopped answering (stopped, hung or its \
             node lost); ending the job",
            self.rank,
            waited.as_secs_f64(),
            self.timeout.as_secs_f64()
        )
    }
}

/// The watchdog thread: looks at the wait every `tick` until the watchdog is dropped.
fn watch(dog: Weak<Watchdog>, tick: Duration) {
    loop {
        std::thread::sleep(tick);
        let Some(dog) = dog.upgrade() else {
            return;
        };
        let late = {
            let w = dog.wait.lock().unwrap_or_else(|e| e.into_inner());
            w.since
                .map(|s| s.elapsed())
                .filter(|e| *e > dog.timeout)
                .map(|e| (w.what, e))
        };
        if let Some((what, waited)) = late {
            (dog.action)(&dog.message(what, waited));
            return;
        }
    }
}

/// The end of a wait marked by [`Watchdog::waiting`] or [`waiting`] (when dropped).
pub struct WaitGuard {
    dog: Option<Arc<Watchdog>>,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if let Some(dog) = &self.dog {
            let mut w = dog.wait.lock().unwrap_or_else(|e| e.into_inner());
            w.depth = w.depth.saturating_sub(1);
            if w.depth == 0 {
                w.since = None;
            }
        }
    }
}

fn installed() -> &'static Mutex<Option<Arc<Watchdog>>> {
    static DOG: OnceLock<Mutex<Option<Arc<Watchdog>>>> = OnceLock::new();
    DOG.get_or_init(|| Mutex::new(None))
}

/// Makes `dog` the process's watchdog, the one [`waiting`] marks (`None`: none).
pub fn install(dog: Option<Arc<Watchdog>>) {
    *installed().lock().unwrap_or_else(|e| e.into_inner()) = dog;
}

/// Marks a blocking exchange that does not go through a [`Comm`] as a wait of the installed
/// watchdog ([`install`]; nothing when none is): `let _w = watchdog::waiting("what");`.
pub fn waiting(what: &'static str) -> WaitGuard {
    let dog = installed()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    match dog {
        Some(d) => d.waiting(what),
        None => WaitGuard { dog: None },
    }
}

/// A communicator whose collectives are waits of a watchdog; otherwise the wrapped one.
pub struct Watched<'a> {
    comm: &'a dyn Comm,
    dog: Arc<Watchdog>,
}

impl<'a> Watched<'a> {
    /// `comm` with its collectives watched by `dog`.
    pub fn new(comm: &'a dyn Comm, dog: Arc<Watchdog>) -> Self {
        Watched { comm, dog }
    }
}

impl Comm for Watched<'_> {
    fn rank(&self) -> usize {
        self.comm.rank()
    }
    fn size(&self) -> usize {
        self.comm.size()
    }
    fn barrier(&self) {
        let _w = self.dog.waiting("a barrier");
        self.comm.barrier()
    }
    fn allgatherv(&self, send: &[u8]) -> Vec<Vec<u8>> {
        let _w = self.dog.waiting("an all-gather");
        self.comm.allgatherv(send)
    }
    fn alltoallv(&self, send: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let _w = self.dog.waiting("an all-to-all exchange");
        self.comm.alltoallv(send)
    }
    fn allreduce_f64(&self, data: &mut [f64], op: ReduceOp) {
        let _w = self.dog.waiting("an all-reduce");
        self.comm.allreduce_f64(data, op)
    }
    fn abort(&self, msg: &str) -> ! {
        self.comm.abort(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::ThreadComm;
    use std::sync::mpsc;

    /// Two ranks; rank 1 stops answering (it does not enter the barrier until told): rank 0's
    /// watchdog fires, naming the rank and the wait, and rank 1 then joins so the test ends.
    #[test]
    fn a_rank_that_stops_answering_fires_the_others_watchdog() {
        let (tx, rx) = mpsc::channel::<String>();
        let rx = Mutex::new(rx);
        let tx = Mutex::new(tx);
        let fired = ThreadComm::run(2, |c| {
            if c.rank() == 0 {
                let tx = tx.lock().unwrap().clone();
                let dog = Watchdog::start(
                    0,
                    Duration::from_millis(200),
                    Box::new(move |m| {
                        let _ = tx.send(m.to_string());
                    }),
                );
                let w = Watched::new(c, dog);
                let t = Instant::now();
                w.barrier();
                Some(t.elapsed())
            } else {
                let msg = rx
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(30))
                    .expect("the watchdog of rank 0 did not fire");
                assert!(msg.contains("rank 0") && msg.contains("a barrier"), "{msg}");
                c.barrier();
                None
            }
        });
        assert!(fired[0].unwrap() >= Duration::from_millis(200));
    }

    /// Ranks that answer, with waits shorter than the timeout in all: nothing fires, however
    /// long the work between the waits.
    #[test]
    fn work_between_short_waits_does_not_fire() {
        let fired = Arc::new(Mutex::new(Vec::<String>::new()));
        ThreadComm::run(3, |c| {
            let f = fired.clone();
            let dog = Watchdog::start(
                c.rank(),
                Duration::from_secs(1),
                Box::new(move |m| f.lock().unwrap().push(m.to_string())),
            );
            let w = Watched::new(c, dog);
            for _ in 0..2 {
                // work longer than the timeout, outside any wait
                std::thread::sleep(Duration::from_millis(1300));
                let mut x = [w.rank() as f64];
                w.allreduce_f64(&mut x, ReduceOp::Sum);
                assert_eq!(x[0], 3.0);
            }
        });
        assert!(
            fired.lock().unwrap().is_empty(),
            "{:?}",
            fired.lock().unwrap()
        );
    }

    #[test]
    fn waits_marked_outside_a_communicator_count() {
        let (tx, rx) = mpsc::channel::<String>();
        let tx = Mutex::new(tx);
        let dog = Watchdog::start(
            7,
            Duration::from_millis(100),
            Box::new(move |m| {
                let _ = tx.lock().unwrap().send(m.to_string());
            }),
        );
        install(Some(dog));
        {
            let _w = waiting("a device exchange");
            let msg = rx.recv_timeout(Duration::from_secs(30)).unwrap();
            assert!(
                msg.contains("rank 7") && msg.contains("a device exchange"),
                "{msg}"
            );
        }
        install(None);
        // none installed: a no-op
        drop(waiting("nothing"));
    }
}
