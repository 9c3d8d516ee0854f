//! Tests of the operators: convergence against the direct singular sum, exactness of the
//! re-expansions, and rotation-based O(p^3) translations against the plain O(p^4) ones.

use super::*;
use crate::kernel::pair_interaction;
use crate::particles::relative_l2_error;
use crate::test_rng::{in_cube, strengths};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type Pts = Vec<[f64; 3]>;

fn rand_in(rng: &mut ChaCha8Rng, center: [f64; 3], half: f64, n: usize) -> Pts {
    (0..n)
        .map(|_| {
            [
                center[0] + rng.gen_range(-half..half),
                center[1] + rng.gen_range(-half..half),
                center[2] + rng.gen_range(-half..half),
            ]
        })
        .collect()
}

/// Targets at distance in [rmin, rmax] from `center` in random directions.
fn rand_shell(rng: &mut ChaCha8Rng, center: [f64; 3], rmin: f64, rmax: f64, n: usize) -> Pts {
    (0..n)
        .map(|_| loop {
            let v = in_cube(rng);
            let r = norm(v);
            if r > 0.1 && r <= 1.0 {
                let d = rng.gen_range(rmin..rmax) / r;
                break [
                    center[0] + v[0] * d,
                    center[1] + v[1] * d,
                    center[2] + v[2] * d,
                ];
            }
        })
        .collect()
}

/// Direct singular sum (sigma tiny: q = 1 to round-off at these distances).
fn direct(xs: &[[f64; 3]], a: &[[f64; 3]], xt: &[[f64; 3]], at: &[[f64; 3]]) -> (Pts, Pts) {
    crate::kernel::direct_sum(xs, a, xt, at, 1e-6)
}

fn eval_m2p(ops: &Operators, center: [f64; 3], mp: &[Complex64], xt: &Pts, at: &Pts) -> (Pts, Pts) {
    let mut v = vec![[0.0; 3]; xt.len()];
    let mut s = vec![[0.0; 3]; xt.len()];
    ops.m2p(center, mp, xt, at, &mut v, &mut s);
    (v, s)
}

fn eval_l2p(ops: &Operators, center: [f64; 3], lc: &[Complex64], xt: &Pts, at: &Pts) -> (Pts, Pts) {
    let mut v = vec![[0.0; 3]; xt.len()];
    let mut s = vec![[0.0; 3]; xt.len()];
    ops.l2p(center, lc, xt, at, &mut v, &mut s);
    (v, s)
}

/// max |a - b| / max |b| over all coefficients.
fn coef_error(a: &[Complex64], b: &[Complex64]) -> f64 {
    let scale = b.iter().map(|z| z.norm()).fold(0.0, f64::max);
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).norm())
        .fold(0.0, f64::max);
    diff / scale
}

/// Worst over degrees of (max_m |a - b| / max_m |b|) per degree and component.
fn coef_error_per_degree(p: usize, a: &[Complex64], b: &[Complex64]) -> f64 {
    let nc = ncoef(p);
    let mut worst: f64 = 0.0;
    for c in 0..3 {
        for n in 0..=p {
            let (mut d, mut s) = (0.0f64, 0.0f64);
            for m in 0..=n {
                let i = c * nc + index(n, m);
                d = d.max((a[i] - b[i]).norm());
                s = s.max(b[i].norm());
            }
            if s > 0.0 {
                worst = worst.max(d / s);
            }
        }
    }
    worst
}

#[test]
fn p2m_m2p_converges_geometrically() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let c = [0.1, -0.2, 0.3];
    let xs = rand_in(&mut rng, c, 0.5, 30);
    let a = strengths(&mut rng, 30);
    let xt = rand_shell(&mut rng, c, 3.0, 4.0, 30);
    let at = strengths(&mut rng, 30);
    let (vd, sd) = direct(&xs, &a, &xt, &at);
    let mut prev = (f64::MAX, f64::MAX);
    let mut errs = vec![];
    for p in [2, 4, 6, 8, 10] {
        let ops = Operators::new(p);
        let mut mp = vec![Complex64::default(); expansion_len(p)];
        ops.p2m(c, &xs, &a, &mut mp);
        let (v, s) = eval_m2p(&ops, c, &mp, &xt, &at);
        let e = (relative_l2_error(&v, &vd), relative_l2_error(&s, &sd));
        errs.push((p, e));
        assert!(
            e.0 < 0.3 * prev.0 && e.1 < 0.3 * prev.1,
            "p = {p}: {e:?} after {prev:?}"
        );
        prev = e;
    }
    eprintln!("P2M+M2P relative errors (velocity, stretching): {errs:?}");
    assert!(prev.0 < 3e-7 && prev.1 < 3e-6, "p = 10: {prev:?}");
}

use crate::expansions::expansion_len;

#[test]
fn m2m_is_exact_reexpansion() {
    let mut rng = ChaCha8Rng::seed_from_u64(22);
    let p = 10;
    let ops = Operators::new(p);
    let mut scratch = Scratch::new(p);
    let parent = [0.0, 0.0, 0.0];
    for oct in 0..8 {
        let child = [
            if oct & 1 == 0 { -0.25 } else { 0.25 },
            if oct & 2 == 0 { -0.25 } else { 0.25 },
            if oct & 4 == 0 { -0.25 } else { 0.25 },
        ];
        let xs = rand_in(&mut rng, child, 0.25, 20);
        let a = strengths(&mut rng, 20);
        let mut mc = vec![Complex64::default(); expansion_len(p)];
        ops.p2m(child, &xs, &a, &mut mc);
        let mut mp_ref = vec![Complex64::default(); expansion_len(p)];
        ops.p2m(parent, &xs, &a, &mut mp_ref);
        let mut mp_rot = vec![Complex64::default(); expansion_len(p)];
        ops.m2m(child, parent, &mc, &mut mp_rot, &mut scratch);
        let mut mp_dir = vec![Complex64::default(); expansion_len(p)];
        ops.m2m_direct(child, parent, &mc, &mut mp_dir);
        let (er, ed) = (
            coef_error_per_degree(p, &mp_rot, &mp_ref),
            coef_error_per_degree(p, &mp_dir, &mp_ref),
        );
        assert!(
            er < 1e-13 && ed < 1e-13,
            "octant {oct}: rotation {er:e}, direct {ed:e}"
        );
        // and the fields agree
        let xt = rand_shell(&mut rng, parent, 3.0, 4.0, 10);
        let at = strengths(&mut rng, 10);
        let (v1, s1) = eval_m2p(&ops, parent, &mp_rot, &xt, &at);
        let (v2, s2) = eval_m2p(&ops, parent, &mp_ref, &xt, &at);
        assert!(relative_l2_error(&v1, &v2) < 1e-13 && relative_l2_error(&s1, &s2) < 1e-13);
    }
}

#[test]
fn m2l_l2p_matches_m2p_and_direct() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let p = 10;
    let ops = Operators::new(p);
    let mut scratch = Scratch::new(p);
    let src = [0.0, 0.0, 0.0];
    let mut worst = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for tgt in [
        [3.0, 1.0, -2.0],
        [0.0, 0.0, -3.0],
        [2.0, 2.0, 2.0],
        [-3.0, 0.0, 1.0],
    ] {
        let xs = rand_in(&mut rng, src, 0.5, 30);
        let a = strengths(&mut rng, 30);
        let xt = rand_in(&mut rng, tgt, 0.5, 30);
        let at = strengths(&mut rng, 30);
        let mut mp = vec![Complex64::default(); expansion_len(p)];
        ops.p2m(src, &xs, &a, &mut mp);
        let mut lc = vec![Complex64::default(); expansion_len(p)];
        ops.m2l(src, tgt, &mp, &mut lc, &mut scratch);
        let (vl, sl) = eval_l2p(&ops, tgt, &lc, &xt, &at);
        let (vm, sm) = eval_m2p(&ops, src, &mp, &xt, &at);
        let (vd, sd) = direct(&xs, &a, &xt, &at);
        let e = (
            relative_l2_error(&vl, &vd),
            relative_l2_error(&sl, &sd),
            relative_l2_error(&vl, &vm),
            relative_l2_error(&sl, &sm),
        );
        worst = (
            worst.0.max(e.0),
            worst.1.max(e.1),
            worst.2.max(e.2),
            worst.3.max(e.3),
        );
    }
    eprintln!("M2L+L2P vs direct (v, s), vs M2P (v, s): {worst:?}");
    assert!(worst.0 < 1e-5 && worst.1 < 1e-4, "{worst:?}");
    assert!(worst.2 < 1e-5 && worst.3 < 1e-4, "{worst:?}");
}

#[test]
fn l2l_is_exact_reexpansion() {
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    let p = 10;
    let ops = Operators::new(p);
    let mut scratch = Scratch::new(p);
    let parent = [1.0, 2.0, 3.0];
    // a local expansion from far sources
    let xs = rand_in(&mut rng, [5.0, -4.0, 3.0], 0.5, 20);
    let a = strengths(&mut rng, 20);
    let mut mp = vec![Complex64::default(); expansion_len(p)];
    ops.p2m([5.0, -4.0, 3.0], &xs, &a, &mut mp);
    let mut lp = vec![Complex64::default(); expansion_len(p)];
    ops.m2l_direct([5.0, -4.0, 3.0], parent, &mp, &mut lp);
    for oct in 0..8 {
        let child = [
            parent[0] + if oct & 1 == 0 { -0.25 } else { 0.25 },
            parent[1] + if oct & 2 == 0 { -0.25 } else { 0.25 },
            parent[2] + if oct & 4 == 0 { -0.25 } else { 0.25 },
        ];
        let mut lr = vec![Complex64::default(); expansion_len(p)];
        ops.l2l(parent, child, &lp, &mut lr, &mut scratch);
        let mut ld = vec![Complex64::default(); expansion_len(p)];
        ops.l2l_direct(parent, child, &lp, &mut ld);
        let e = coef_error_per_degree(p, &lr, &ld);
        assert!(e < 1e-12, "octant {oct}: rotation vs direct {e:e}");
        let xt = rand_in(&mut rng, child, 0.25, 10);
        let at = strengths(&mut rng, 10);
        let (v1, s1) = eval_l2p(&ops, child, &lr, &xt, &at);
        let (v2, s2) = eval_l2p(&ops, parent, &lp, &xt, &at);
        let (ev, es) = (relative_l2_error(&v1, &v2), relative_l2_error(&s1, &s2));
        assert!(ev < 1e-13 && es < 1e-13, "octant {oct}: {ev:e} {es:e}");
    }
}

fn directions(rng: &mut ChaCha8Rng) -> Vec<[f64; 3]> {
    let mut d = vec![
        [0.0, 0.0, 1.0],
        [0.0, 0.0, -1.0],
        [1.0, 0.0, 0.0],
        [-1.0, 0.0, 0.0],
        [0.0, 1.0, 0.0],
        [0.0, -1.0, 0.0],
        [1.0, 1.0, 1.0],
        [-2.0, 1.0, -3.0],
    ];
    for _ in 0..4 {
        d.push(in_cube(rng));
    }
    d
}

fn unit(v: [f64; 3]) -> [f64; 3] {
    let r = norm(v);
    v.map(|c| c / r)
}

#[test]
fn rotation_translations_match_direct() {
    let mut rng = ChaCha8Rng::seed_from_u64(25);
    let mut report = vec![];
    for p in [1, 2, 5, 10, 14, 20] {
        let ops = Operators::new(p);
        let mut scratch = Scratch::new(p);
        let (mut w_m2l, mut w_m2m, mut w_l2l) = (0.0f64, 0.0f64, 0.0f64);
        for dir in directions(&mut rng) {
            let u = unit(dir);
            let s0 = [0.3, -0.1, 0.2];
            let xs = rand_in(&mut rng, s0, 0.5, 10);
            let a = strengths(&mut rng, 10);
            let mut mp = vec![Complex64::default(); expansion_len(p)];
            ops.p2m(s0, &xs, &a, &mut mp);
            // M2L over distance 3.5 along u
            let t0 = [s0[0] + 3.5 * u[0], s0[1] + 3.5 * u[1], s0[2] + 3.5 * u[2]];
            let mut l1 = vec![Complex64::default(); expansion_len(p)];
            let mut l2 = vec![Complex64::default(); expansion_len(p)];
            let rot = ops.rotation(sub(t0, s0));
            ops.m2l_with_rotation(&rot, 3.5, &mp, &mut l1, &mut scratch);
            ops.m2l_direct(s0, t0, &mp, &mut l2);
            w_m2l = w_m2l.max(coef_error(&l1, &l2));
            // M2M over 0.4 along u (child s0 -> parent s0 + 0.4 u)
            let pc = [s0[0] + 0.4 * u[0], s0[1] + 0.4 * u[1], s0[2] + 0.4 * u[2]];
            let mut m1 = vec![Complex64::default(); expansion_len(p)];
            let mut m2 = vec![Complex64::default(); expansion_len(p)];
            ops.m2m(s0, pc, &mp, &mut m1, &mut scratch);
            ops.m2m_direct(s0, pc, &mp, &mut m2);
            w_m2m = w_m2m.max(coef_error_per_degree(p, &m1, &m2));
            // L2L over 0.4 along u (parent t0 -> child t0 + 0.4 u)
            let cc = [t0[0] + 0.4 * u[0], t0[1] + 0.4 * u[1], t0[2] + 0.4 * u[2]];
            let mut c1 = vec![Complex64::default(); expansion_len(p)];
            let mut c2 = vec![Complex64::default(); expansion_len(p)];
            ops.l2l(t0, cc, &l2, &mut c1, &mut scratch);
            ops.l2l_direct(t0, cc, &l2, &mut c2);
            w_l2l = w_l2l.max(coef_error_per_degree(p, &c1, &c2));
        }
        report.push((p, w_m2l, w_m2m, w_l2l));
        assert!(
            w_m2l < 1e-12 && w_m2m < 1e-12 && w_l2l < 1e-12,
            "p = {p}: m2l {w_m2l:e}, m2m {w_m2m:e}, l2l {w_l2l:e}"
        );
    }
    eprintln!("rotation vs direct (p, m2l, m2m, l2l): {report:?}");
}

#[test]
fn derivatives_match_pair_kernel() {
    let mut rng = ChaCha8Rng::seed_from_u64(26);
    let p = 12;
    let ops = Operators::new(p);
    let mut worst = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for _ in 0..10 {
        let xj = rand_in(&mut rng, [0.0; 3], 1.0, 1)[0];
        let aj = strengths(&mut rng, 1)[0];
        let xi = rand_shell(&mut rng, xj, 8.0, 12.0, 1)[0];
        let ai = strengths(&mut rng, 1)[0];
        let (vr, sr) = pair_interaction(xi, ai, xj, aj, 1e-3);
        // M2P: multipole about a centre near the source
        let c = [xj[0] + 0.05, xj[1] - 0.03, xj[2] + 0.02];
        let mut mp = vec![Complex64::default(); expansion_len(p)];
        ops.p2m(c, &[xj], &[aj], &mut mp);
        let (v, s) = eval_m2p(&ops, c, &mp, &vec![xi], &vec![ai]);
        worst.0 = worst.0.max(relative_l2_error(&v, &[vr]));
        worst.1 = worst.1.max(relative_l2_error(&s, &[sr]));
        // L2P: local about a centre near the target, from the multipole at the source itself
        let mut m0 = vec![Complex64::default(); expansion_len(p)];
        ops.p2m(xj, &[xj], &[aj], &mut m0);
        let lc = [xi[0] - 0.04, xi[1] + 0.05, xi[2] + 0.01];
        let mut lo = vec![Complex64::default(); expansion_len(p)];
        ops.m2l_direct(xj, lc, &m0, &mut lo);
        let (v, s) = eval_l2p(&ops, lc, &lo, &vec![xi], &vec![ai]);
        worst.2 = worst.2.max(relative_l2_error(&v, &[vr]));
        worst.3 = worst.3.max(relative_l2_error(&s, &[sr]));
    }
    eprintln!("single pair: M2P (v, s), L2P (v, s): {worst:?}");
    assert!(worst.0 < 1e-13 && worst.1 < 1e-13 && worst.2 < 1e-13 && worst.3 < 1e-13);
}

#[test]
fn operators_are_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Operators>();
    check::<Rotation>();
    check::<Scratch>();
}

/// Timing of M2L (rotation vs direct), rotation construction, L2P and M2P (minimum over 7
/// trials); run with `cargo test -p vortex-fmm --release --lib -- --ignored --nocapture timing`.
#[test]
#[ignore = "measurement: cargo test --release -p vortex-fmm --lib timing_m2l -- --ignored --nocapture"]
fn timing_m2l() {
    use std::time::Instant;
    fn best<F: FnMut()>(reps: usize, mut f: F) -> f64 {
        let mut b = f64::MAX;
        for _ in 0..7 {
            let t0 = Instant::now();
            for _ in 0..reps {
                f();
            }
            b = b.min(t0.elapsed().as_secs_f64() / reps as f64);
        }
        b * 1e6
    }
    let mut rng = ChaCha8Rng::seed_from_u64(27);
    for p in [4, 6, 8, 10, 12, 14, 20] {
        let ops = Operators::new(p);
        let mut scratch = Scratch::new(p);
        let xs = rand_in(&mut rng, [0.0; 3], 0.5, 10);
        let a = strengths(&mut rng, 10);
        let mut mp = vec![Complex64::default(); expansion_len(p)];
        ops.p2m([0.0; 3], &xs, &a, &mut mp);
        let tgt = [2.0, -1.0, 3.0];
        let rot = ops.rotation(tgt);
        let d = norm(tgt);
        let mut lc = vec![Complex64::default(); expansion_len(p)];
        let t_rot = best(3000, || {
            ops.m2l_with_rotation(&rot, d, std::hint::black_box(&mp), &mut lc, &mut scratch)
        });
        let t_dir = best(100, || {
            ops.m2l_direct([0.0; 3], tgt, std::hint::black_box(&mp), &mut lc)
        });
        let mut r2 = ops.rotation([0.0, 0.0, 1.0]);
        let t_build = best(50, || ops.rotation_into(std::hint::black_box(tgt), &mut r2));
        let mut m1 = vec![Complex64::default(); expansion_len(p)];
        let t_m2m = best(3000, || {
            ops.m2m_with_rotation(&rot, 0.4, &mp, &mut m1, &mut scratch)
        });
        let xt = rand_in(&mut rng, tgt, 0.5, 200);
        let at = strengths(&mut rng, 200);
        let t_l2p = best(5, || {
            std::hint::black_box(eval_l2p(&ops, tgt, &lc, &xt, &at));
        }) / 200.0;
        let t_m2p = best(5, || {
            std::hint::black_box(eval_m2p(&ops, [0.0; 3], &mp, &xt, &at));
        }) / 200.0;
        eprintln!(
            "p = {p:2}: m2l rotation {t_rot:7.2} us, direct {t_dir:8.2} us, rotation build \
             {t_build:7.2} us, m2m(rot) {t_m2m:6.2} us, l2p {t_l2p:6.3} us/target, \
             m2p {t_m2p:6.3} us/target"
        );
    }
}

/// The batched M2L (1 to 4 lanes, repeated targets, different distances) against the per-pair
/// rotation-based M2L: equal to round-off.
#[test]
fn m2l_batch_matches_per_pair_m2l() {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    for p in [1, 2, 5, 8, 13, 20] {
        let ops = Operators::new(p);
        let len = expansion_len(p);
        let mut scratch = Scratch::new(p);
        let mut batch = BatchScratch::new(p);
        // five source multipoles, concatenated
        let mut mps = vec![Complex64::default(); 5 * len];
        for k in 0..5 {
            let xs = rand_in(&mut rng, [0.0; 3], 0.5, 12);
            let a = strengths(&mut rng, 12);
            ops.p2m([0.0; 3], &xs, &a, &mut mps[k * len..(k + 1) * len]);
        }
        for dir in [[2.0, -1.0, 3.0], [0.0, 0.0, -1.0], [1.0, 1.0, 0.0]] {
            let rot = ops.rotation(dir);
            for lanes in 1..=M2L_BATCH {
                // lane l: source (l * 3) % 5, target l % 3 (targets repeat), distance varies
                let src: Vec<usize> = (0..lanes).map(|l| (l * 3) % 5 * len).collect();
                let dst: Vec<usize> = (0..lanes).map(|l| (l % 3) * len).collect();
                let dist: Vec<f64> = (0..lanes)
                    .map(|l| norm(dir) * (1.0 + 0.5 * l as f64))
                    .collect();
                let mut got = vec![Complex64::default(); 3 * len];
                let mut want = vec![Complex64::default(); 3 * len];
                ops.m2l_batch(&rot, &dist, &mps, &src, &mut got, &dst, &mut batch);
                for l in 0..lanes {
                    ops.m2l_with_rotation(
                        &rot,
                        dist[l],
                        &mps[src[l]..src[l] + len],
                        &mut want[dst[l]..dst[l] + len],
                        &mut scratch,
                    );
                }
                for t in 0..3 {
                    let r = t * len..(t + 1) * len;
                    let e = coef_error_per_degree(p, &got[r.clone()], &want[r]);
                    assert!(
                        e < 1e-13,
                        "p {p} dir {dir:?} lanes {lanes} target {t}: {e:e}"
                    );
                }
            }
        }
    }
}

/// CPU time of the calling thread (seconds), from `/proc/thread-self/schedstat`: timings on a
/// shared machine then count only this thread's own time on a core.
pub(crate) fn thread_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map(|ns| ns * 1e-9)
        .unwrap_or_else(|| {
            use std::sync::OnceLock;
            static T0: OnceLock<std::time::Instant> = OnceLock::new();
            T0.get_or_init(std::time::Instant::now)
                .elapsed()
                .as_secs_f64()
        })
}

/// CPU seconds per translation of the batched M2L (4 and 2 lanes) next to the per-pair one.
#[test]
#[ignore = "measurement: cargo test --release -p vortex-fmm --lib timing_m2l_batch -- --ignored --nocapture"]
fn timing_m2l_batch() {
    let mut rng = ChaCha8Rng::seed_from_u64(28);
    for p in [6, 8, 10] {
        let ops = Operators::new(p);
        let len = expansion_len(p);
        let mut scratch = Scratch::new(p);
        let mut batch = BatchScratch::new(p);
        let mut mps = vec![Complex64::default(); 4 * len];
        for k in 0..4 {
            let xs = rand_in(&mut rng, [0.0; 3], 0.5, 10);
            let a = strengths(&mut rng, 10);
            ops.p2m([0.0; 3], &xs, &a, &mut mps[k * len..(k + 1) * len]);
        }
        let tgt = [2.0, -1.0, 3.0];
        let rot = ops.rotation(tgt);
        let d = norm(tgt);
        let mut lc = vec![Complex64::default(); 4 * len];
        let reps = 20000;
        let mut best = [f64::MAX; 3];
        for _ in 0..5 {
            let t0 = thread_cpu_seconds();
            for _ in 0..reps {
                ops.m2l_with_rotation(&rot, d, &mps[..len], &mut lc[..len], &mut scratch);
            }
            best[0] = best[0].min((thread_cpu_seconds() - t0) / reps as f64);
            for (i, lanes) in [(1, 2), (2, 4)] {
                let src: Vec<usize> = (0..lanes).map(|l| l * len).collect();
                let dist = vec![d; lanes];
                let t0 = thread_cpu_seconds();
                for _ in 0..reps / lanes {
                    ops.m2l_batch(&rot, &dist, &mps, &src, &mut lc, &src, &mut batch);
                }
                best[i] = best[i].min((thread_cpu_seconds() - t0) / reps as f64);
            }
        }
        std::hint::black_box(&lc);
        eprintln!(
            "p = {p:2}: us per M2L: per pair {:.3}, batch of 2 {:.3}, batch of 4 {:.3}",
            best[0] * 1e6,
            best[1] * 1e6,
            best[2] * 1e6
        );
    }
}
