//! Scaled regular and irregular solid harmonics (Cartesian recurrences, no trigonometry).
//!
//! With the associated Legendre functions `P_n^m` **including** the Condon-Shortley phase
//! `(-1)^m` and `x = r (sin t cos f, sin t sin f, cos t)`:
//!
//! * regular   `R_n^m(x) = r^n P_n^m(cos t) e^{i m f} / (n + m)!`,
//! * irregular `I_n^m(x) = (n - m)! P_n^m(cos t) e^{i m f} / r^{n + 1}`,
//! * `R_n^{-m} = (-1)^m conj(R_n^m)`, `I_n^{-m} = (-1)^m conj(I_n^m)`.
//!
//! This is the normalization of Epton & Dembart (SIAM J. Sci. Comput. 16, 1995) and of
//! Dehnen (Comput. Astrophys. Cosmol. 1:1, 2014, Eq. 40-41 up to the sign `(-1)^m`). Its
//! translation theorems carry no extra factors (verified by the tests below):
//!
//! * addition theorem `1/|x - y| = sum_{n, |m| <= n} conj(R_n^m(y)) I_n^m(x)` for `|y| < |x|`;
//! * `R_n^m(x + y) = sum_{k, l} R_k^l(y) R_{n-k}^{m-l}(x)`;
//! * `I_n^m(x - y) = sum_{k, l} conj(R_k^l(y)) I_{n+k}^{m+l}(x)` for `|y| < |x|`.
//!
//! `K_n^m = sqrt((n - m)! (n + m)!)` links them to the Racah (Schmidt semi-) normalized
//! spherical harmonics `C_n^m = sqrt((n-m)!/(n+m)!) P_n^m e^{imf}` (the core paper's `Y_n^m`,
//! Eq. 14, up to the Condon-Shortley sign): `R_n^m = r^n C_n^m / K_n^m`,
//! `I_n^m = K_n^m C_n^m / r^{n+1}`. Wigner matrices act unitarily on the `C` basis.

use super::{index, Complex64};

/// `R_n^m(x)` for `0 <= m <= n <= p`, stored at `index(n, m)` (`out.len() >= ncoef(p)`).
///
/// Recurrences: `R_m^m = -(x + i y) / (2m) R_{m-1}^{m-1}`, `R_{m+1}^m = z R_m^m`,
/// `R_n^m = ((2n - 1) z R_{n-1}^m - r^2 R_{n-2}^m) / ((n + m)(n - m))`.
#[inline]
pub fn regular(p: usize, x: [f64; 3], out: &mut [Complex64]) {
    let (xx, yy, z) = (x[0], x[1], x[2]);
    let r2 = xx * xx + yy * yy + z * z;
    let w = Complex64::new(xx, yy);
    let mut rmm = Complex64::new(1.0, 0.0);
    for m in 0..=p {
        if m > 0 {
            rmm = -w * rmm / (2 * m) as f64;
        }
        out[index(m, m)] = rmm;
        if m == p {
            break;
        }
        let mut prev2 = rmm;
        let mut prev1 = z * rmm;
        out[index(m + 1, m)] = prev1;
        for n in (m + 2)..=p {
            let inv = 1.0 / ((n + m) * (n - m)) as f64;
            let cur = (prev1 * ((2 * n - 1) as f64 * z) - prev2 * r2) * inv;
            out[index(n, m)] = cur;
            prev2 = prev1;
            prev1 = cur;
        }
    }
}

/// `I_n^m(x)` for `0 <= m <= n <= p`, stored at `index(n, m)`; `x != 0`.
///
/// Recurrences: `I_0^0 = 1/r`, `I_m^m = -(2m - 1)(x + i y)/r^2 I_{m-1}^{m-1}`,
/// `I_{m+1}^m = (2m + 1) z / r^2 I_m^m`,
/// `I_n^m = ((2n - 1) z I_{n-1}^m - ((n-1)^2 - m^2) I_{n-2}^m) / r^2`.
#[inline]
pub fn irregular(p: usize, x: [f64; 3], out: &mut [Complex64]) {
    let (xx, yy, z) = (x[0], x[1], x[2]);
    let r2 = xx * xx + yy * yy + z * z;
    let inv_r2 = 1.0 / r2;
    let w = Complex64::new(xx * inv_r2, yy * inv_r2);
    let zr = z * inv_r2;
    let mut imm = Complex64::new(inv_r2.sqrt(), 0.0);
    for m in 0..=p {
        if m > 0 {
            imm = -w * imm * (2 * m - 1) as f64;
        }
        out[index(m, m)] = imm;
        if m == p {
            break;
        }
        let mut prev2 = imm;
        let mut prev1 = imm * ((2 * m + 1) as f64 * zr);
        out[index(m + 1, m)] = prev1;
        for n in (m + 2)..=p {
            let a = (2 * n - 1) as f64 * zr;
            let b = ((n - 1) * (n - 1) - m * m) as f64 * inv_r2;
            let cur = prev1 * a - prev2 * b;
            out[index(n, m)] = cur;
            prev2 = prev1;
            prev1 = cur;
        }
    }
}

/// Index of `(n, m)`, `-n <= m <= n`, in a full (both signs of `m`) array of `(p+1)^2` entries.
#[inline(always)]
pub fn full_index(n: usize, m: isize) -> usize {
    (n * n + n) + m as usize
}

/// Expands a half array (`m >= 0`, layout `index`) to the full array (`full_index`) using
/// `X_n^{-m} = (-1)^m conj(X_n^m)`, scaling every `(n, m)` entry by `scale[index(n, m)]`
/// and conjugating first when `conj` is set.
#[inline]
pub fn expand_full(
    p: usize,
    half: &[Complex64],
    scale: &[f64],
    conj: bool,
    full: &mut [Complex64],
) {
    for n in 0..=p {
        let c = n * n + n;
        for m in 0..=n {
            let mut v = half[index(n, m)] * scale[index(n, m)];
            if conj {
                v = v.conj();
            }
            full[c + m] = v;
            if m > 0 {
                let w = v.conj();
                full[c - m] = if m % 2 == 0 { w } else { -w };
            }
        }
    }
}

/// `n!` for `n <= 170` as f64.
pub fn factorial(n: usize) -> f64 {
    (1..=n).fold(1.0, |a, k| a * k as f64)
}

/// `K_n^m = sqrt((n - m)! (n + m)!)`.
pub fn knm(n: usize, m: usize) -> f64 {
    (factorial(n - m) * factorial(n + m)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::super::ncoef;
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn rand_vec(rng: &mut ChaCha8Rng, scale: f64) -> [f64; 3] {
        [
            rng.gen_range(-1.0..1.0) * scale,
            rng.gen_range(-1.0..1.0) * scale,
            rng.gen_range(-1.0..1.0) * scale,
        ]
    }

    /// Naive associated Legendre (with Condon-Shortley phase) for cross-checking the recurrences.
    fn legendre(n: usize, m: usize, x: f64) -> f64 {
        let s = (1.0 - x * x).max(0.0).sqrt();
        let mut pmm = 1.0;
        for i in 1..=m {
            pmm *= -((2 * i - 1) as f64) * s;
        }
        if n == m {
            return pmm;
        }
        let mut p1 = x * (2 * m + 1) as f64 * pmm;
        let mut p0 = pmm;
        for k in (m + 2)..=n {
            let p2 = (x * (2 * k - 1) as f64 * p1 - (k + m - 1) as f64 * p0) / (k - m) as f64;
            p0 = p1;
            p1 = p2;
        }
        p1
    }

    #[test]
    fn harmonics_match_legendre_definition() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let p = 8;
        let mut r = vec![Complex64::default(); ncoef(p)];
        let mut ir = vec![Complex64::default(); ncoef(p)];
        for _ in 0..20 {
            let x = rand_vec(&mut rng, 2.0);
            regular(p, x, &mut r);
            irregular(p, x, &mut ir);
            let rr = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
            let ct = x[2] / rr;
            let f = x[1].atan2(x[0]);
            for n in 0..=p {
                for m in 0..=n {
                    let e = Complex64::from_polar(1.0, m as f64 * f) * legendre(n, m, ct);
                    let rref = e * rr.powi(n as i32) / factorial(n + m);
                    let iref = e * factorial(n - m) / rr.powi(n as i32 + 1);
                    let i = index(n, m);
                    assert!(
                        (r[i] - rref).norm() <= 1e-13 * (1.0 + rref.norm()),
                        "R {n} {m}"
                    );
                    assert!(
                        (ir[i] - iref).norm() <= 1e-12 * iref.norm().max(1e-300),
                        "I {n} {m}"
                    );
                }
            }
        }
    }

    fn full(p: usize, half: &[Complex64]) -> Vec<Complex64> {
        let mut f = vec![Complex64::default(); (p + 1) * (p + 1)];
        expand_full(p, half, &vec![1.0; ncoef(p)], false, &mut f);
        f
    }

    #[test]
    fn addition_theorem_reproduces_inverse_distance() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let p = 40;
        let mut r = vec![Complex64::default(); ncoef(p)];
        let mut ir = vec![Complex64::default(); ncoef(p)];
        let mut worst: f64 = 0.0;
        for _ in 0..50 {
            let x = rand_vec(&mut rng, 1.0);
            let nx = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
            let y0 = rand_vec(&mut rng, 1.0);
            let ny = (y0[0] * y0[0] + y0[1] * y0[1] + y0[2] * y0[2]).sqrt();
            // |y| = 0.45 |x|
            let y = y0.map(|c| c / ny * 0.45 * nx);
            regular(p, y, &mut r);
            irregular(p, x, &mut ir);
            let (fr, fi) = (full(p, &r), full(p, &ir));
            let mut sum = 0.0;
            for i in 0..fr.len() {
                sum += (fr[i].conj() * fi[i]).re;
            }
            let d = [x[0] - y[0], x[1] - y[1], x[2] - y[2]];
            let exact = 1.0 / (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
            worst = worst.max((sum - exact).abs() / exact);
        }
        assert!(worst < 1e-12, "addition theorem error {worst:e}");
    }

    #[test]
    fn translation_theorems_hold() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let p = 6;
        let q = 50; // truncation of the irregular series
        let fr = |x: [f64; 3], p: usize| {
            let mut h = vec![Complex64::default(); ncoef(p)];
            regular(p, x, &mut h);
            full(p, &h)
        };
        let fi = |x: [f64; 3], p: usize| {
            let mut h = vec![Complex64::default(); ncoef(p)];
            irregular(p, x, &mut h);
            full(p, &h)
        };
        for _ in 0..10 {
            let x0 = rand_vec(&mut rng, 1.0);
            let nx = (x0[0] * x0[0] + x0[1] * x0[1] + x0[2] * x0[2]).sqrt();
            let x = x0.map(|c| c / nx);
            let y = rand_vec(&mut rng, 0.2);
            let xy = [x[0] + y[0], x[1] + y[1], x[2] + y[2]];
            let (rx, ry, rxy) = (fr(x, p), fr(y, p), fr(xy, p));
            for n in 0..=p {
                for m in -(n as isize)..=(n as isize) {
                    let mut s = Complex64::default();
                    for k in 0..=n {
                        for l in -(k as isize)..=(k as isize) {
                            let (nk, ml) = (n - k, m - l);
                            if ml.unsigned_abs() <= nk {
                                s += ry[full_index(k, l)] * rx[full_index(nk, ml)];
                            }
                        }
                    }
                    let e = rxy[full_index(n, m)];
                    assert!((s - e).norm() < 1e-13 * (1.0 + e.norm()), "R({n},{m})");
                }
            }
            // irregular: I_n^m(x - y) = sum conj(R_k^l(y)) I_{n+k}^{m+l}(x)
            let xmy = [x[0] - y[0], x[1] - y[1], x[2] - y[2]];
            let (ix, ixmy, ryq) = (fi(x, q + p), fi(xmy, p), fr(y, q));
            for n in 0..=p {
                for m in -(n as isize)..=(n as isize) {
                    let mut s = Complex64::default();
                    for k in 0..=q {
                        for l in -(k as isize)..=(k as isize) {
                            s += ryq[full_index(k, l)].conj() * ix[full_index(n + k, m + l)];
                        }
                    }
                    let e = ixmy[full_index(n, m)];
                    assert!(
                        (s - e).norm() < 1e-10 * e.norm().max(1.0),
                        "I({n},{m}): {s} {e}"
                    );
                }
            }
        }
    }
}
