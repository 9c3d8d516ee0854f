//! Quadrature rules on the unit sphere for the pseudo-particle method.
//!
//! A rule `(s_k, w_k)` with `sum_k w_k = 1` must integrate (as a mean over the sphere) every
//! polynomial of degree `<= 2p` exactly: then the pseudo-particles of order `p` reproduce all
//! multipole moments of degree `<= p` (Makino 1999), and the inner formula reproduces every
//! harmonic polynomial of degree `<= p` (Anderson 1992).
//!
//! * `p = 1..=10` ([`RuleKind::Design`]): the spherical `2p`-designs of Hardin & Sloane with
//!   `K = 4, 14, 26, 36, 60, 84, 108, 144, 180, 216` points (exactly Table 1 of the core paper),
//!   equal weights `1/K`. Source: R. H. Hardin, N. J. A. Sloane, "McLaren's improved snub cube
//!   and other new spherical designs in three dimensions", Discrete Comput. Geom. 15 (1996)
//!   429-441; files `des.3.N.t.txt` of <http://neilsloane.com/sphdesigns/dim3/>, embedded
//!   unmodified from `crates/fmm/data/ppm/` (see the README there). The published coordinates
//!   satisfy the moment equations only to 1e-9 .. 1e-15 (file dependent), so [`polish`] runs a
//!   few Gauss-Newton steps on the equations `sum_k S_lm(s_k) = 0` (`1 <= l <= 2p`) before use;
//!   the result is exact to round-off (tested).
//! * any `p` ([`RuleKind::Product`]): Gauss-Legendre in `cos(theta)` (`p + 1` nodes, exact to
//!   degree `2p + 1`) times the trapezoid rule in `phi` (`2p + 1` nodes, exact for `|m| <= 2p`):
//!   `K = (p + 1)(2p + 1)` points with unequal weights. Used for `p > 10`.

use std::sync::OnceLock;

/// Which family of points a rule comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// Hardin-Sloane spherical `2p`-design (equal weights), `p <= 10`.
    Design,
    /// Gauss-Legendre x trapezoid product rule (any `p`).
    Product,
}

/// Points and weights (`sum w = 1`) of a spherical quadrature rule.
#[derive(Clone, Debug)]
pub struct SphereRule {
    pub kind: RuleKind,
    /// Polynomial degree integrated exactly.
    pub degree: usize,
    pub points: Vec<[f64; 3]>,
    pub weights: Vec<f64>,
}

/// Largest `p` for which a Hardin-Sloane design is embedded.
pub const MAX_DESIGN_ORDER: usize = 10;

/// Point counts of Table 1 of the core paper (`p = 1..=10`).
pub const TABLE1_COUNTS: [usize; 10] = [4, 14, 26, 36, 60, 84, 108, 144, 180, 216];

const DESIGNS: [&str; 10] = [
    include_str!("../../data/ppm/des3-4-2.txt"),
    include_str!("../../data/ppm/des3-14-4.txt"),
    include_str!("../../data/ppm/des3-26-6.txt"),
    include_str!("../../data/ppm/des3-36-8.txt"),
    include_str!("../../data/ppm/des3-60-10.txt"),
    include_str!("../../data/ppm/des3-84-12.txt"),
    include_str!("../../data/ppm/des3-108-14.txt"),
    include_str!("../../data/ppm/des3-144-16.txt"),
    include_str!("../../data/ppm/des3-180-18.txt"),
    include_str!("../../data/ppm/des3-216-20.txt"),
];

/// The default rule of order `p`: the design for `p <= 10`, the product rule beyond. Cached.
pub fn rule(p: usize) -> &'static SphereRule {
    rule_of(
        p,
        if p <= MAX_DESIGN_ORDER {
            RuleKind::Design
        } else {
            RuleKind::Product
        },
    )
}

/// The rule of order `p` (exact to degree `2p`) of the given kind. Cached per process.
pub fn rule_of(p: usize, kind: RuleKind) -> &'static SphereRule {
    const N: usize = crate::MAX_ORDER + 1;
    static DES: [OnceLock<SphereRule>; N] = [const { OnceLock::new() }; N];
    static PROD: [OnceLock<SphereRule>; N] = [const { OnceLock::new() }; N];
    if let Err(e) = crate::check_order(p, crate::MAX_ORDER) {
        panic!("pseudo-particles: {e}");
    }
    match kind {
        RuleKind::Design => {
            assert!(
                p <= MAX_DESIGN_ORDER,
                "spherical designs are embedded for p = 1..={MAX_DESIGN_ORDER} only (got {p})"
            );
            DES[p].get_or_init(|| design(p))
        }
        RuleKind::Product => PROD[p].get_or_init(|| product(p)),
    }
}

/// Parses the published design of strength `2p` (unpolished).
pub fn raw_design(p: usize) -> Vec<[f64; 3]> {
    DESIGNS[p - 1]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Vec<f64> = l
                .split(',')
                .map(|x| x.trim().parse().expect("design file: bad number"))
                .collect();
            assert_eq!(v.len(), 3, "design file: expected x,y,z");
            [v[0], v[1], v[2]]
        })
        .collect()
}

fn design(p: usize) -> SphereRule {
    let mut pts = raw_design(p);
    assert_eq!(pts.len(), TABLE1_COUNTS[p - 1]);
    polish(&mut pts, 2 * p);
    let k = pts.len();
    SphereRule {
        kind: RuleKind::Design,
        degree: 2 * p,
        points: pts,
        weights: vec![1.0 / k as f64; k],
    }
}

fn product(p: usize) -> SphereRule {
    let (z, wz) = gauss_legendre(p + 1);
    let m = 2 * p + 1;
    let mut points = Vec::with_capacity(z.len() * m);
    let mut weights = Vec::with_capacity(z.len() * m);
    for (zi, wi) in z.iter().zip(&wz) {
        let st = (1.0 - zi * zi).max(0.0).sqrt();
        for j in 0..m {
            let ph = 2.0 * std::f64::consts::PI * (j as f64 + 0.5) / m as f64;
            points.push([st * ph.cos(), st * ph.sin(), *zi]);
            weights.push(0.5 * wi / m as f64);
        }
    }
    SphereRule {
        kind: RuleKind::Product,
        degree: 2 * p,
        points,
        weights,
    }
}

/// Gauss-Legendre nodes and weights on `[-1, 1]` (Newton on `P_n`).
pub fn gauss_legendre(n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut x = vec![0.0; n];
    let mut w = vec![0.0; n];
    for i in 0..n {
        let mut z = (std::f64::consts::PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
        let mut dp = 1.0;
        for _ in 0..100 {
            let (mut p0, mut p1) = (1.0, z);
            for k in 2..=n {
                let p2 = ((2 * k - 1) as f64 * z * p1 - (k - 1) as f64 * p0) / k as f64;
                p0 = p1;
                p1 = p2;
            }
            if n == 1 {
                p0 = 1.0;
                p1 = z;
            }
            dp = n as f64 * (z * p1 - p0) / (z * z - 1.0);
            let dz = p1 / dp;
            z -= dz;
            if dz.abs() < 1e-16 {
                break;
            }
        }
        x[i] = z;
        w[i] = 2.0 / ((1.0 - z * z) * dp * dp);
    }
    (x, w)
}

/// Real Schmidt semi-normalized spherical harmonics `S_lm` (`|S_lm| <= 1`) of degree
/// `1..=lmax` at the unit vector `s`, appended in the order `l = 1.., m = 0, 1c, 1s, ...`.
pub fn real_harmonics(s: [f64; 3], lmax: usize, out: &mut Vec<f64>) {
    out.clear();
    let z = s[2];
    // (x + i y)^m
    let mut cm = vec![(1.0f64, 0.0f64); lmax + 1];
    for m in 1..=lmax {
        let (a, b) = cm[m - 1];
        cm[m] = (a * s[0] - b * s[1], a * s[1] + b * s[0]);
    }
    // q[l][m] = d^m P_l / dz^m
    let mut q = vec![vec![0.0; lmax + 1]; lmax + 1];
    for m in 0..=lmax {
        let mut dfact = 1.0;
        for i in 1..=m {
            dfact *= (2 * i - 1) as f64;
        }
        q[m][m] = dfact;
        if m < lmax {
            q[m + 1][m] = (2 * m + 1) as f64 * z * dfact;
        }
        for l in m + 2..=lmax {
            q[l][m] = ((2 * l - 1) as f64 * z * q[l - 1][m] - (l + m - 1) as f64 * q[l - 2][m])
                / (l - m) as f64;
        }
    }
    for (l, ql) in q.iter().enumerate().skip(1) {
        for m in 0..=l {
            // sqrt((2 - delta_m0) (l-m)! / (l+m)!)
            let mut r = 1.0;
            for i in (l - m + 1)..=(l + m) {
                r /= i as f64;
            }
            let norm = if m == 0 { 1.0 } else { (2.0 * r).sqrt() };
            let v = norm * ql[m];
            if m == 0 {
                out.push(v);
            } else {
                out.push(v * cm[m].0);
                out.push(v * cm[m].1);
            }
        }
    }
}

/// Weighted moments `sum_k w_k S_lm(s_k)` for `1 <= l <= degree` (all zero for an exact rule).
pub fn moment_residuals(points: &[[f64; 3]], weights: &[f64], degree: usize) -> Vec<f64> {
    let mut acc = vec![0.0; (degree + 1) * (degree + 1) - 1];
    let mut y = Vec::new();
    for (s, w) in points.iter().zip(weights) {
        real_harmonics(*s, degree, &mut y);
        for (a, v) in acc.iter_mut().zip(&y) {
            *a += w * v;
        }
    }
    acc
}

fn normalize(v: [f64; 3]) -> [f64; 3] {
    let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    [v[0] / n, v[1] / n, v[2] / n]
}

fn tangents(s: [f64; 3]) -> ([f64; 3], [f64; 3]) {
    let a = if s[0].abs() < 0.6 {
        [1.0, 0.0, 0.0]
    } else {
        [0.0, 1.0, 0.0]
    };
    let d = a[0] * s[0] + a[1] * s[1] + a[2] * s[2];
    let e1 = normalize([a[0] - d * s[0], a[1] - d * s[1], a[2] - d * s[2]]);
    let e2 = [
        s[1] * e1[2] - s[2] * e1[1],
        s[2] * e1[0] - s[0] * e1[2],
        s[0] * e1[1] - s[1] * e1[0],
    ];
    (e1, e2)
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0f64, |m, x| m.max(x.abs()))
}

/// Gauss-Newton (minimum-norm steps) on the equal-weight moment equations of degree
/// `1..=degree`, moving each point in its tangent plane. Accepts a step only if it lowers the
/// largest residual; stops at round-off.
pub fn polish(points: &mut [[f64; 3]], degree: usize) {
    let k = points.len();
    for p in points.iter_mut() {
        *p = normalize(*p);
    }
    let w = vec![1.0 / k as f64; k];
    let mut res = moment_residuals(points, &w, degree);
    let mres = res.len();
    let n = 2 * k;
    let h = 1e-6;
    let mut y1 = Vec::new();
    let mut y2 = Vec::new();
    for _iter in 0..6 {
        let r0 = max_abs(&res);
        if r0 < 1e-16 {
            break;
        }
        // Jacobian J (mres x n), column-major by unknown, by central differences.
        let mut jac = vec![0.0; mres * n];
        let mut tang = Vec::with_capacity(k);
        for (i, s) in points.iter().enumerate() {
            let (e1, e2) = tangents(*s);
            for (d, e) in [e1, e2].iter().enumerate() {
                let sp = normalize([s[0] + h * e[0], s[1] + h * e[1], s[2] + h * e[2]]);
                let sm = normalize([s[0] - h * e[0], s[1] - h * e[1], s[2] - h * e[2]]);
                real_harmonics(sp, degree, &mut y1);
                real_harmonics(sm, degree, &mut y2);
                let col = &mut jac[(2 * i + d) * mres..(2 * i + d + 1) * mres];
                for r in 0..mres {
                    col[r] = (y1[r] - y2[r]) / (2.0 * h * k as f64);
                }
            }
            tang.push((e1, e2));
        }
        // Minimum-norm step: delta = -J^T (J J^T + mu I)^-1 r.
        let mut a = vec![0.0; mres * mres];
        for c in 0..n {
            let col = &jac[c * mres..(c + 1) * mres];
            for i in 0..mres {
                let ci = col[i];
                if ci == 0.0 {
                    continue;
                }
                let row = &mut a[i * mres..(i + 1) * mres];
                for j in 0..=i {
                    row[j] += ci * col[j];
                }
            }
        }
        let trace: f64 = (0..mres).map(|i| a[i * mres + i]).sum();
        let mu = 1e-13 * trace / mres as f64;
        for i in 0..mres {
            a[i * mres + i] += mu;
        }
        let mut z = res.clone();
        if !cholesky_solve(&mut a, mres, &mut z) {
            break;
        }
        let mut trial: Vec<[f64; 3]> = points.to_vec();
        for (i, (e1, e2)) in tang.iter().enumerate() {
            let c1 = &jac[(2 * i) * mres..(2 * i + 1) * mres];
            let c2 = &jac[(2 * i + 1) * mres..(2 * i + 2) * mres];
            let d1: f64 = -c1.iter().zip(&z).map(|(a, b)| a * b).sum::<f64>();
            let d2: f64 = -c2.iter().zip(&z).map(|(a, b)| a * b).sum::<f64>();
            let s = trial[i];
            trial[i] = normalize([
                s[0] + d1 * e1[0] + d2 * e2[0],
                s[1] + d1 * e1[1] + d2 * e2[1],
                s[2] + d1 * e1[2] + d2 * e2[2],
            ]);
        }
        let tres = moment_residuals(&trial, &w, degree);
        if max_abs(&tres) < r0 {
            points.copy_from_slice(&trial);
            res = tres;
        } else {
            break;
        }
    }
}

/// In-place Cholesky solve of the symmetric positive definite `a` (lower triangle used).
fn cholesky_solve(a: &mut [f64], n: usize, b: &mut [f64]) -> bool {
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= a[j * n + k] * a[j * n + k];
        }
        if d <= 0.0 {
            return false;
        }
        let d = d.sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= a[i * n + k] * a[j * n + k];
            }
            a[i * n + j] = s / d;
        }
    }
    for i in 0..n {
        let mut s = b[i];
        for k in 0..i {
            s -= a[i * n + k] * b[k];
        }
        b[i] = s / a[i * n + i];
    }
    for i in (0..n).rev() {
        let mut s = b[i];
        for k in i + 1..n {
            s -= a[k * n + i] * b[k];
        }
        b[i] = s / a[i * n + i];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mean of `x^a y^b z^c` over the unit sphere.
    fn monomial_mean(a: usize, b: usize, c: usize) -> f64 {
        if a % 2 == 1 || b % 2 == 1 || c % 2 == 1 {
            return 0.0;
        }
        let df = |n: usize| -> f64 {
            // (n-1)!! for even n
            let mut r = 1.0;
            let mut i = n as i64 - 1;
            while i > 1 {
                r *= i as f64;
                i -= 2;
            }
            r
        };
        df(a) * df(b) * df(c) / {
            let mut r = 1.0;
            let mut i = (a + b + c + 1) as i64;
            while i > 1 {
                r *= i as f64;
                i -= 2;
            }
            r
        }
    }

    fn max_monomial_error(r: &SphereRule, deg: usize) -> f64 {
        let mut worst = 0.0f64;
        for a in 0..=deg {
            for b in 0..=deg - a {
                for c in 0..=deg - a - b {
                    let q: f64 = r
                        .points
                        .iter()
                        .zip(&r.weights)
                        .map(|(s, w)| {
                            w * s[0].powi(a as i32) * s[1].powi(b as i32) * s[2].powi(c as i32)
                        })
                        .sum();
                    worst = worst.max((q - monomial_mean(a, b, c)).abs());
                }
            }
        }
        worst
    }

    #[test]
    fn designs_have_table1_counts_and_are_exact_to_degree_2p() {
        for p in 1..=MAX_DESIGN_ORDER {
            let r = rule_of(p, RuleKind::Design);
            assert_eq!(r.points.len(), TABLE1_COUNTS[p - 1]);
            let raw = raw_design(p);
            let wr = vec![1.0 / raw.len() as f64; raw.len()];
            let raw_err = max_abs(&moment_residuals(&raw, &wr, 2 * p));
            let err = max_monomial_error(r, 2 * p);
            let harm = max_abs(&moment_residuals(&r.points, &r.weights, 2 * p));
            // one degree more than the design strength is not integrated (sanity of the test)
            let beyond = max_abs(&moment_residuals(&r.points, &r.weights, 2 * p + 1));
            eprintln!(
                "p={p:2} K={:3}: raw harmonic residual {raw_err:.1e}, polished {harm:.1e}, \
                 monomials {err:.1e}, degree 2p+1 {beyond:.1e}",
                r.points.len()
            );
            assert!(err < 1e-14, "p = {p}: monomial error {err:e}");
            assert!(harm < 1e-14, "p = {p}: harmonic residual {harm:e}");
            for s in &r.points {
                assert!(((s[0] * s[0] + s[1] * s[1] + s[2] * s[2]) - 1.0).abs() < 1e-15);
            }
        }
    }

    #[test]
    fn product_rules_are_exact_to_degree_2p() {
        for p in [1, 3, 10, 11, 15, 20] {
            let r = rule_of(p, RuleKind::Product);
            assert_eq!(r.points.len(), (p + 1) * (2 * p + 1));
            let err = max_abs(&moment_residuals(&r.points, &r.weights, 2 * p));
            assert!(err < 1e-14, "p = {p}: {err:e}");
            let s: f64 = r.weights.iter().sum();
            assert!((s - 1.0).abs() < 1e-14);
        }
        assert!(max_monomial_error(rule_of(6, RuleKind::Product), 12) < 1e-14);
    }
}
