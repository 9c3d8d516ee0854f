//! The host twin of the device exchange over simulated ranks: random message lengths, send and
//! receive parts laid out in shuffled orders with gaps, every value traced to its sender.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::ops::Range;
use vortex_domain::ThreadComm;
use vortex_exchange::host::alltoallv_host;
use vortex_exchange::Parts;

/// Ranges of `lens` laid out in the order `order`, with a random gap before each.
fn layout(lens: &[usize], order: &[usize], rng: &mut ChaCha8Rng) -> Vec<Range<usize>> {
    let mut at = 0;
    let mut out = vec![0..0; lens.len()];
    for &q in order {
        at += rng.gen_range(0..3);
        out[q] = at..at + lens[q];
        at += lens[q];
    }
    out
}

/// The value element `i` of the message from `from` to `to` carries.
fn value(from: usize, to: usize, i: usize) -> f64 {
    (from * 1_000_000 + to * 10_000 + i) as f64 + 0.25
}

#[test]
fn host_twin_delivers_every_message_on_1_to_4_ranks() {
    for ranks in 1..=4 {
        for seed in 0..3u64 {
            // the length matrix is known to every rank (same seed)
            let mut g = ChaCha8Rng::seed_from_u64(seed * 31 + ranks as u64);
            let lens: Vec<Vec<usize>> = (0..ranks)
                .map(|_| (0..ranks).map(|_| g.gen_range(0..40)).collect())
                .collect();
            let results = ThreadComm::run(ranks, |comm| {
                let me = vortex_domain::Comm::rank(comm);
                let mut rng = ChaCha8Rng::seed_from_u64(seed * 97 + me as u64);
                let mut order: Vec<usize> = (0..ranks).collect();
                order.shuffle(&mut rng);
                let send_parts = layout(&lens[me], &order, &mut rng);
                order.shuffle(&mut rng);
                let recv_lens: Vec<usize> = (0..ranks).map(|q| lens[q][me]).collect();
                let recv_parts = layout(&recv_lens, &order, &mut rng);
                let mut send = vec![-1.0; send_parts.iter().map(|r| r.end).max().unwrap_or(0)];
                for (to, p) in send_parts.iter().enumerate() {
                    for (i, x) in send[p.clone()].iter_mut().enumerate() {
                        *x = value(me, to, i);
                    }
                }
                let mut recv = vec![-1.0; recv_parts.iter().map(|r| r.end).max().unwrap_or(0)];
                let parts = Parts::new(me, send_parts, recv_parts.clone()).unwrap();
                let bytes = alltoallv_host(comm, &send, &mut recv, &parts).unwrap();
                let want_bytes: usize = (0..ranks)
                    .filter(|&q| q != me)
                    .map(|q| 8 * lens[me][q])
                    .sum();
                assert_eq!(bytes, want_bytes);
                (recv, recv_parts)
            });
            for (me, (recv, parts)) in results.iter().enumerate() {
                for (from, p) in parts.iter().enumerate() {
                    for (i, &x) in recv[p.clone()].iter().enumerate() {
                        assert_eq!(
                            x,
                            value(from, me, i),
                            "R = {ranks}, rank {me}, from {from}, element {i}"
                        );
                    }
                }
                // the gaps are untouched
                let inside = |k: usize| parts.iter().any(|p| p.contains(&k));
                for (k, &x) in recv.iter().enumerate() {
                    if !inside(k) {
                        assert_eq!(x, -1.0, "R = {ranks}: gap element {k} overwritten");
                    }
                }
            }
        }
    }
}

#[test]
fn a_plan_for_another_rank_is_refused() {
    let r = ThreadComm::run(2, |comm| {
        let parts = Parts::new(0, vec![0..1, 1..2], vec![0..1, 1..2]).unwrap();
        let mut recv = vec![0.0; 2];
        if vortex_domain::Comm::rank(comm) == 1 {
            alltoallv_host(comm, &[1.0, 2.0], &mut recv, &parts)
                .map(|_| ())
                .map_err(|e| e.to_string())
        } else {
            Ok(())
        }
    });
    let e = r[1].clone().unwrap_err();
    assert!(e.contains("plan for rank 0 of 2 on rank 1 of 2"), "{e}");
}
