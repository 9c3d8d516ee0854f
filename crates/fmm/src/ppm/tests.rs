//! PPM operators against direct summation at seeded random geometries.

use super::quadrature::{self, RuleKind};
use super::*;
use crate::kernel::pair_interaction;
use crate::particles::relative_l2_error as rel_err;
use crate::test_rng::{in_cube, strengths};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type V3 = [f64; 3];

fn rand_in_cube(rng: &mut ChaCha8Rng, c: V3, h: f64, n: usize) -> Vec<V3> {
    (0..n)
        .map(|_| {
            [
                c[0] + h * rng.gen_range(-1.0..1.0),
                c[1] + h * rng.gen_range(-1.0..1.0),
                c[2] + h * rng.gen_range(-1.0..1.0),
            ]
        })
        .collect()
}

fn rand_dir(rng: &mut ChaCha8Rng) -> V3 {
    loop {
        let v: V3 = in_cube(rng);
        let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        if n > 0.1 && n <= 1.0 {
            return [v[0] / n, v[1] / n, v[2] / n];
        }
    }
}

/// Targets at distances `[rmin, rmax]` from `c`, random directions.
fn rand_shell(rng: &mut ChaCha8Rng, c: V3, rmin: f64, rmax: f64, n: usize) -> Vec<V3> {
    (0..n)
        .map(|_| {
            let d = rand_dir(rng);
            let r = rng.gen_range(rmin..rmax);
            [c[0] + r * d[0], c[1] + r * d[1], c[2] + r * d[2]]
        })
        .collect()
}

/// Singular direct sum (reference), via the project kernel with a negligible core.
fn direct(src: &[V3], st: &[V3], tgt: &[V3], at: &[V3]) -> (Vec<V3>, Vec<V3>) {
    crate::kernel::direct_sum(src, st, tgt, at, 1e-9)
}

fn rel_err_flat(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}

struct Setup {
    c: V3,
    h: f64,
    src: Vec<V3>,
    st: Vec<V3>,
}

fn cell(seed: u64, n: usize) -> Setup {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let c = in_cube(&mut rng);
    let h = 0.37;
    let src = rand_in_cube(&mut rng, c, h, n);
    let st = strengths(&mut rng, n);
    Setup { c, h, src, st }
}

/// P2M -> M2P error (velocity, stretching) at targets 2-3 cell widths from the centre.
fn p2m_m2p_error(pp: &PseudoParticles, seed: u64) -> (f64, f64) {
    let s = cell(seed, 40);
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 1000);
    let tgt = rand_shell(&mut rng, s.c, 4.0 * s.h, 6.0 * s.h, 40);
    let at = strengths(&mut rng, tgt.len());
    let (ur, sr) = direct(&s.src, &s.st, &tgt, &at);
    let mut m = vec![0.0; pp.len()];
    pp.p2m(s.c, s.h, &s.src, &s.st, &mut m);
    let mut u = vec![[0.0; 3]; tgt.len()];
    let mut st = vec![[0.0; 3]; tgt.len()];
    pp.m2p(s.c, s.h, &m, &tgt, &at, &mut u, &mut st);
    (rel_err(&u, &ur), rel_err(&st, &sr))
}

/// P2M -> M2L -> L2P error; target cell of the same size at centre distance `dist` (in
/// half-widths).
fn m2l_l2p_error(pp: &PseudoParticles, seed: u64, dist: f64) -> (f64, f64) {
    let s = cell(seed, 40);
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 2000);
    let d = rand_dir(&mut rng);
    let tc = [
        s.c[0] + dist * s.h * d[0],
        s.c[1] + dist * s.h * d[1],
        s.c[2] + dist * s.h * d[2],
    ];
    let tgt = rand_in_cube(&mut rng, tc, s.h, 40);
    let at = strengths(&mut rng, tgt.len());
    let (ur, sr) = direct(&s.src, &s.st, &tgt, &at);
    let mut m = vec![0.0; pp.len()];
    pp.p2m(s.c, s.h, &s.src, &s.st, &mut m);
    let mut l = vec![0.0; pp.len()];
    pp.m2l(s.c, s.h, tc, s.h, &m, &mut l);
    let mut u = vec![[0.0; 3]; tgt.len()];
    let mut st = vec![[0.0; 3]; tgt.len()];
    pp.l2p(tc, s.h, &l, &tgt, &at, &mut u, &mut st);
    (rel_err(&u, &ur), rel_err(&st, &sr))
}

#[test]
fn p2m_m2p_converges_with_p() {
    let mut prev = f64::INFINITY;
    eprintln!(" p   K   P2M->M2P  vel      str");
    for p in 1..=10 {
        let pp = PseudoParticles::new(p);
        let (eu, es) = p2m_m2p_error(&pp, 11);
        eprintln!("{p:2} {:3}  {eu:.2e} {es:.2e}", pp.count());
        if p % 2 == 0 {
            assert!(eu < prev, "p = {p}: {eu:e} !< {prev:e}");
            prev = eu;
        }
        if p == 10 {
            assert!(eu < 1e-4 && es < 1e-3, "p = 10: {eu:e} {es:e}");
        }
    }
}

#[test]
fn m2l_l2p_converges_with_p() {
    // centre distance 4 cell widths (8 half-widths): the nearest same-size cells that the
    // default MAC (theta = 0.5, tight radii <= sqrt(3) h) can accept are ~7 h apart.
    let mut prev = f64::INFINITY;
    eprintln!(" p   K   M2L->L2P  vel      str       (d = 8h)   vel (d = 7h)");
    for p in 1..=10 {
        let pp = PseudoParticles::new(p);
        let (eu, es) = m2l_l2p_error(&pp, 21, 8.0);
        let (eu7, _) = m2l_l2p_error(&pp, 22, 7.0);
        eprintln!("{p:2} {:3}  {eu:.2e} {es:.2e}  {eu7:.2e}", pp.count());
        if p % 2 == 0 {
            assert!(eu < prev, "p = {p}: {eu:e} !< {prev:e}");
            prev = eu;
        }
        if p == 10 {
            assert!(eu < 1e-4 && es < 1e-3, "p = 10: {eu:e} {es:e}");
        }
    }
}

/// Eight children of a parent cell; returns (parent centre, parent half-width, children).
fn family(seed: u64, per_child: usize) -> (V3, f64, Vec<Setup>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pc = [0.3, -0.2, 0.1];
    let ph = 0.8;
    let mut kids = Vec::new();
    for o in 0..8 {
        let c = [
            pc[0] + if o & 1 == 1 { 0.5 } else { -0.5 } * ph,
            pc[1] + if o & 2 == 2 { 0.5 } else { -0.5 } * ph,
            pc[2] + if o & 4 == 4 { 0.5 } else { -0.5 } * ph,
        ];
        let src = rand_in_cube(&mut rng, c, 0.5 * ph, per_child);
        let st = strengths(&mut rng, per_child);
        kids.push(Setup {
            c,
            h: 0.5 * ph,
            src,
            st,
        });
    }
    (pc, ph, kids)
}

/// (relative difference of the parent pseudo-particles M2M vs P2M, M2P error via M2M,
/// M2P error via P2M) at targets 2-3 parent widths away.
fn m2m_vs_p2m(pp: &PseudoParticles, seed: u64) -> (f64, f64, f64) {
    let (pc, ph, kids) = family(seed, 10);
    let mut direct_m = vec![0.0; pp.len()];
    let mut via_m2m = vec![0.0; pp.len()];
    let mut all_src = Vec::new();
    let mut all_st = Vec::new();
    for k in &kids {
        let mut cm = vec![0.0; pp.len()];
        pp.p2m(k.c, k.h, &k.src, &k.st, &mut cm);
        pp.m2m(k.c, k.h, pc, ph, &cm, &mut via_m2m);
        pp.p2m(pc, ph, &k.src, &k.st, &mut direct_m);
        all_src.extend_from_slice(&k.src);
        all_st.extend_from_slice(&k.st);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 77);
    let tgt = rand_shell(&mut rng, pc, 4.0 * ph, 6.0 * ph, 30);
    let at = strengths(&mut rng, tgt.len());
    let (ur, _) = direct(&all_src, &all_st, &tgt, &at);
    let eval = |m: &[f64]| {
        let mut u = vec![[0.0; 3]; tgt.len()];
        let mut s = vec![[0.0; 3]; tgt.len()];
        pp.m2p(pc, ph, m, &tgt, &at, &mut u, &mut s);
        u
    };
    (
        rel_err_flat(&via_m2m, &direct_m),
        rel_err(&eval(&via_m2m), &ur),
        rel_err(&eval(&direct_m), &ur),
    )
}

#[test]
fn m2m_equals_p2m_at_the_parent() {
    eprintln!(" p   K  |Q_m2m-Q_p2m|/|Q|  M2P err via M2M  via P2M");
    for p in 1..=10 {
        let pp = PseudoParticles::new(p);
        let (dq, e_m2m, e_p2m) = m2m_vs_p2m(&pp, 31);
        eprintln!(
            "{p:2} {:3}  {dq:.2e}          {e_m2m:.2e}         {e_p2m:.2e}",
            pp.count()
        );
        assert!(dq < 1e-12, "p = {p}: M2M differs from P2M by {dq:e}");
        assert!((e_m2m - e_p2m).abs() <= 1e-10 + 1e-6 * e_p2m);
    }
    // exactness holds for any radius factor and for the product rule as well
    for (f, kind) in [
        (1.2, RuleKind::Design),
        (3.0, RuleKind::Design),
        (1.732, RuleKind::Product),
    ] {
        let pp = PseudoParticles::with_options(6, kind, f);
        let (dq, _, _) = m2m_vs_p2m(&pp, 32);
        assert!(dq < 1e-12, "f = {f}, {kind:?}: {dq:e}");
    }
}

#[test]
fn m2m_degrades_when_the_rule_is_not_exact_to_2p() {
    // The cause of the error jump at the third tree level reported in the paper: with a rule
    // exact only to degree < 2p the child pseudo-particles do not carry the child moments and
    // M2M is no longer equal to P2M.
    let p = 8;
    let weak = quadrature::rule_of(6, RuleKind::Design); // 12-design, 84 points
    let pp = PseudoParticles::with_rule(p, weak, DEFAULT_RADIUS_FACTOR);
    let (dq, e_m2m, e_p2m) = m2m_vs_p2m(&pp, 33);
    eprintln!(
        "p = 8 on a 12-design: |dQ|/|Q| {dq:.2e}, M2P via M2M {e_m2m:.2e}, via P2M {e_p2m:.2e}"
    );
    assert!(dq > 1e-6);
    let exact = PseudoParticles::new(p);
    let (_, e_exact, _) = m2m_vs_p2m(&exact, 33);
    assert!(e_m2m > 3.0 * e_exact);
}

#[test]
fn l2l_is_exact() {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    for p in [1, 3, 6, 10] {
        let pp = PseudoParticles::new(p);
        // local of the parent from far particles
        let pc = [0.1, 0.2, -0.3];
        let ph = 0.5;
        let src = rand_shell(&mut rng, pc, 5.0, 7.0, 20);
        let st = strengths(&mut rng, 20);
        let mut lp = vec![0.0; pp.len()];
        pp.p2l(pc, ph, &src, &st, &mut lp);
        let mut worst = (0.0f64, 0.0f64);
        for o in 0..8 {
            let cc = [
                pc[0] + if o & 1 == 1 { 0.5 } else { -0.5 } * ph,
                pc[1] + if o & 2 == 2 { 0.5 } else { -0.5 } * ph,
                pc[2] + if o & 4 == 4 { 0.5 } else { -0.5 } * ph,
            ];
            let mut lc = vec![0.0; pp.len()];
            pp.l2l(pc, ph, cc, 0.5 * ph, &lp, &mut lc);
            let tgt = rand_in_cube(&mut rng, cc, 0.5 * ph, 10);
            let at = strengths(&mut rng, 10);
            let mut u1 = vec![[0.0; 3]; 10];
            let mut s1 = vec![[0.0; 3]; 10];
            let mut u2 = vec![[0.0; 3]; 10];
            let mut s2 = vec![[0.0; 3]; 10];
            pp.l2p(pc, ph, &lp, &tgt, &at, &mut u1, &mut s1);
            pp.l2p(cc, 0.5 * ph, &lc, &tgt, &at, &mut u2, &mut s2);
            worst.0 = worst.0.max(rel_err(&u2, &u1));
            worst.1 = worst.1.max(rel_err(&s2, &s1));
        }
        eprintln!(
            "p = {p:2}: L2L->L2P vs parent L2P: vel {:.1e} str {:.1e}",
            worst.0, worst.1
        );
        assert!(worst.0 < 1e-11 && worst.1 < 1e-10, "p = {p}: {worst:?}");
    }
}

#[test]
fn single_far_source_matches_pair_interaction() {
    let mut rng = ChaCha8Rng::seed_from_u64(51);
    let pp = PseudoParticles::new(10);
    let c = [0.2, -0.1, 0.4];
    let h = 0.25;
    let xj = [c[0] + 0.1, c[1] - 0.2, c[2] + 0.05];
    let aj = [0.3, -0.7, 0.5];
    let mut m = vec![0.0; pp.len()];
    pp.p2m(c, h, &[xj], &[aj], &mut m);
    // M2P at a far target, and L2P of a local built from the single source (P2L) near c.
    let xt = [c[0] + 3.0, c[1] + 1.0, c[2] - 2.0];
    let at = [0.9, 0.2, -0.4];
    let (ur, sr) = pair_interaction(xt, at, xj, aj, 1e-9);
    let mut u = [[0.0; 3]];
    let mut s = [[0.0; 3]];
    pp.m2p(c, h, &m, &[xt], &[at], &mut u, &mut s);
    let eu = rel_err(&u, &[ur]);
    let es = rel_err(&s, &[sr]);
    // velocity formula check: u = alpha_j x (x - x_j) / r^3
    let d = [xt[0] - xj[0], xt[1] - xj[1], xt[2] - xj[2]];
    let r3 = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).powf(1.5);
    let cross = crate::kernel::cross(aj, d);
    assert!(rel_err(&[ur], &[[cross[0] / r3, cross[1] / r3, cross[2] / r3]]) < 1e-14);
    let tc = [c[0] + 5.0, c[1], c[2]];
    let mut l = vec![0.0; pp.len()];
    pp.p2l(tc, h, &[xj], &[aj], &mut l);
    let tg = rand_in_cube(&mut rng, tc, h, 5);
    let ta = strengths(&mut rng, 5);
    let refs: Vec<(V3, V3)> = tg
        .iter()
        .zip(&ta)
        .map(|(x, a)| pair_interaction(*x, *a, xj, aj, 1e-9))
        .collect();
    let mut u2 = vec![[0.0; 3]; 5];
    let mut s2 = vec![[0.0; 3]; 5];
    pp.l2p(tc, h, &l, &tg, &ta, &mut u2, &mut s2);
    let ru: Vec<V3> = refs.iter().map(|r| r.0).collect();
    let rs: Vec<V3> = refs.iter().map(|r| r.1).collect();
    let eu2 = rel_err(&u2, &ru);
    let es2 = rel_err(&s2, &rs);
    eprintln!(
        "single source p=10: M2P vel {eu:.1e} str {es:.1e}; P2L->L2P vel {eu2:.1e} str {es2:.1e}"
    );
    assert!(eu < 1e-8 && es < 1e-7);
    assert!(eu2 < 1e-8 && es2 < 1e-7);
}

#[test]
fn full_chain_matches_direct() {
    // child P2M -> M2M -> M2L -> L2L -> L2P, target parent 4 parent widths away.
    let pp = PseudoParticles::new(8);
    let (pc, ph, kids) = family(61, 8);
    let mut mp = vec![0.0; pp.len()];
    let mut src = Vec::new();
    let mut st = Vec::new();
    for k in &kids {
        let mut cm = vec![0.0; pp.len()];
        pp.p2m(k.c, k.h, &k.src, &k.st, &mut cm);
        pp.m2m(k.c, k.h, pc, ph, &cm, &mut mp);
        src.extend_from_slice(&k.src);
        st.extend_from_slice(&k.st);
    }
    let tpc = [pc[0] + 8.0 * ph, pc[1] + 0.5 * ph, pc[2] - 1.0 * ph];
    let mut lp = vec![0.0; pp.len()];
    pp.m2l(pc, ph, tpc, ph, &mp, &mut lp);
    let mut rng = ChaCha8Rng::seed_from_u64(62);
    let cc = [tpc[0] + 0.5 * ph, tpc[1] - 0.5 * ph, tpc[2] + 0.5 * ph];
    let mut lc = vec![0.0; pp.len()];
    pp.l2l(tpc, ph, cc, 0.5 * ph, &lp, &mut lc);
    let tgt = rand_in_cube(&mut rng, cc, 0.5 * ph, 20);
    let at = strengths(&mut rng, 20);
    let (ur, sr) = direct(&src, &st, &tgt, &at);
    let mut u = vec![[0.0; 3]; 20];
    let mut s = vec![[0.0; 3]; 20];
    pp.l2p(cc, 0.5 * ph, &lc, &tgt, &at, &mut u, &mut s);
    let (eu, es) = (rel_err(&u, &ur), rel_err(&s, &sr));
    eprintln!("p = 8 full chain: vel {eu:.1e} str {es:.1e}");
    assert!(eu < 1e-5 && es < 1e-4);
}

#[test]
fn accessors_and_flops() {
    for p in 1..=10 {
        let pp = PseudoParticles::new(p);
        assert_eq!(pp.order(), p);
        assert_eq!(pp.count(), quadrature::TABLE1_COUNTS[p - 1]);
        assert_eq!(pp.unit_points().len(), pp.count());
        assert_eq!(pp.m2l_flops(), 16 * pp.count() * pp.count());
    }
    let pp = PseudoParticles::new(12);
    assert_eq!(pp.rule_kind(), RuleKind::Product);
    assert_eq!(pp.count(), 13 * 25);
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PseudoParticles>();
}

#[test]
#[ignore = "measurement: cargo test --release --lib ppm::tests::radius_scan -- --ignored --nocapture"]
fn radius_scan() {
    let factors = [1.2, 1.5, 1.732, 2.0, 2.5, 3.0];
    eprintln!("P2M->M2P vel error (targets 2-3 cell widths) / M2L->L2P vel error (d = 7h)");
    for p in [2, 4, 6, 8, 10] {
        let mut line = format!("p={p:2}:");
        for &f in &factors {
            let pp = PseudoParticles::with_options(p, RuleKind::Design, f);
            let mut e1 = 0.0f64;
            let mut e2 = 0.0f64;
            for seed in 0..4 {
                e1 = e1.max(p2m_m2p_error(&pp, 100 + seed).0);
                e2 = e2.max(m2l_l2p_error(&pp, 200 + seed, 7.0).0);
            }
            line += &format!("  f={f}: {e1:.1e}/{e2:.1e}");
        }
        eprintln!("{line}");
    }
}

#[test]
#[ignore = "measurement: cargo test --release --lib ppm::tests::timings -- --ignored --nocapture"]
fn timings() {
    use std::time::Instant;
    for p in [4, 6, 8, 10] {
        let t0 = Instant::now();
        let pp = PseudoParticles::new(p);
        let t_new = t0.elapsed().as_secs_f64();
        let s = cell(1, 100);
        let mut m = vec![0.0; pp.len()];
        let t0 = Instant::now();
        pp.p2m(s.c, s.h, &s.src, &s.st, &mut m);
        let t_p2m = t0.elapsed().as_secs_f64() / 100.0;
        let mut l = vec![0.0; pp.len()];
        let reps = 50;
        let t0 = Instant::now();
        for _ in 0..reps {
            pp.m2l(s.c, s.h, [s.c[0] + 3.0, s.c[1], s.c[2]], s.h, &m, &mut l);
        }
        let t_m2l = t0.elapsed().as_secs_f64() / reps as f64;
        let mut mp = vec![0.0; pp.len()];
        let t0 = Instant::now();
        for _ in 0..reps {
            pp.m2m(
                s.c,
                s.h,
                [s.c[0] + s.h, s.c[1] + s.h, s.c[2] + s.h],
                2.0 * s.h,
                &m,
                &mut mp,
            );
        }
        let t_m2m = t0.elapsed().as_secs_f64() / reps as f64;
        let mut u = vec![[0.0; 3]; 100];
        let mut st = vec![[0.0; 3]; 100];
        let t0 = Instant::now();
        pp.l2p(s.c, s.h, &l, &s.src, &s.st, &mut u, &mut st);
        let t_l2p = t0.elapsed().as_secs_f64();
        eprintln!(
            "p={p:2} K={:3}: new {:.1} ms, P2M {:.2} us/particle, M2M {:.0} us, M2L {:.0} us \
             ({:.2} GFlop/s), L2P (100 targets) {:.0} us",
            pp.count(),
            t_new * 1e3,
            t_p2m * 1e6,
            t_m2m * 1e6,
            t_m2l * 1e6,
            pp.m2l_flops() as f64 / t_m2l * 1e-9,
            t_l2p * 1e6
        );
    }
}
