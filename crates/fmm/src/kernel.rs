//! The regularized Biot-Savart kernel of the vortex method.
//!
//! Core paper (Yokota et al., CPC 180, 2009), Eq. 3-6 and 9, with the conventions of
//! `docs/CONVENTIONS.md`: a vortex element `j` at `x_j` with strength `alpha_j` (vorticity times
//! volume) and Gaussian core radius `sigma_j` induces at `x_i`, with `d = x_i - x_j`, `r = |d|`,
//! `rho = r / sigma_j`,
//!
//! * cutoff `q(rho) = erf(rho / sqrt 2) - sqrt(2/pi) rho exp(-rho^2 / 2)`,
//! * `K(r) = q / r^3`, `K'(r) = (dq/dr) / r^3 - 3 q / r^4`,
//! * velocity `u_i = 1/(4 pi) sum_j K alpha_j x d`,
//! * classical stretching
//!   `s_i = 1/(4 pi) sum_j [K alpha_j x alpha_i + (K'/r) (alpha_i . d) alpha_j x d]`.
//!
//! A coincident pair (`r = 0`) contributes its analytic limit: zero velocity and the finite
//! stretching `K(0) alpha_j x alpha_i` with `K(0) = sqrt(2/pi) / (3 sigma^3)`.

use std::f64::consts::PI;

/// `1 / (4 pi)`, the Biot-Savart prefactor.
pub const INV_4PI: f64 = 0.25 / PI;
/// `sqrt(2 / pi)`.
pub const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// Below this `rho` the series of `q` is used: the closed form loses digits to cancellation.
const RHO_SERIES: f64 = 1.0;
/// Terms of the series: the last one is below 1e-19 of the first at `rho = 1`.
const SERIES_TERMS: usize = 16;
/// Above this `rho`, `1 - q < 1e-15` and `rho^2 exp(-rho^2/2) < 1e-14`: the kernel is singular.
const RHO_SINGULAR: f64 = 9.0;

/// `K(r) / 1` and `K'(r) / r` of one pair, given `r^2` and the source core radius `sigma`.
///
/// Returns `(K, K'/r)`. Both are finite for every `r >= 0` and `sigma > 0`.
#[inline]
pub fn kernel_factors(r2: f64, sigma: f64) -> (f64, f64) {
    let rho = r2.sqrt() / sigma;
    if rho < RHO_SERIES {
        kernel_series(rho, sigma)
    } else {
        kernel_closed(r2, sigma)
    }
}

/// Series form of [`kernel_factors`], accurate for `rho <= 1`.
fn kernel_series(rho: f64, sigma: f64) -> (f64, f64) {
    // q / sqrt(2/pi) = sum_{n>=1} a_n rho^(2n+1), a_n = (-1)^(n+1) 2n / ((2n+1) 2^n n!), so
    // K sigma^3 = c sum a_n rho^(2n-2) and K'/r sigma^5 = c sum a_n (2n-2) rho^(2n-4): no
    // cancellation, unlike the closed form (which loses ~1/rho^4 of its digits).
    let rho2 = rho * rho;
    let (mut k, mut kp, mut pw) = (0.0, 0.0, 1.0);
    let mut fact = 1.0; // 2^n n!
    for n in 1..=SERIES_TERMS {
        fact *= 2.0 * n as f64;
        let a = (2 * n) as f64 / ((2 * n + 1) as f64 * fact);
        let a = if n % 2 == 1 { a } else { -a };
        k += a * pw;
        if n >= 2 {
            kp += a * (2 * n - 2) as f64 * pw / rho2.max(f64::MIN_POSITIVE);
        }
        pw *= rho2;
    }
    // kp used pw = rho^(2n-2) / rho^2 = rho^(2n-4); at rho = 0 only the n = 2 term survives
    if rho2 == 0.0 {
        kp = -0.2;
    }
    let s2 = sigma * sigma;
    let s3 = s2 * sigma;
    (SQRT_2_OVER_PI * k / s3, SQRT_2_OVER_PI * kp / (s3 * s2))
}

/// Closed form of [`kernel_factors`], accurate for `rho >= 1`.
fn kernel_closed(r2: f64, sigma: f64) -> (f64, f64) {
    let r = r2.sqrt();
    let rho = r / sigma;
    let inv_r = 1.0 / r;
    let inv_r3 = inv_r * inv_r * inv_r;
    if rho > RHO_SINGULAR {
        return (inv_r3, -3.0 * inv_r3 * inv_r * inv_r);
    }
    let g = (-0.5 * rho * rho).exp();
    let q = libm::erf(rho * std::f64::consts::FRAC_1_SQRT_2) - SQRT_2_OVER_PI * rho * g;
    let dq_dr = SQRT_2_OVER_PI * rho * rho * g / sigma;
    let k = q * inv_r3;
    let kp = dq_dr * inv_r3 - 3.0 * q * inv_r3 * inv_r;
    (k, kp * inv_r)
}

/// The cutoff function `q(rho)` (exposed for tests and diagnostics).
#[inline]
pub fn cutoff(rho: f64) -> f64 {
    libm::erf(rho * std::f64::consts::FRAC_1_SQRT_2)
        - SQRT_2_OVER_PI * rho * (-0.5 * rho * rho).exp()
}

#[inline]
pub fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

#[inline]
pub fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Velocity and stretching that source `(xj, alpha_j, sigma_j)` induces at target
/// `(xi, alpha_i)`, **without** the `1/(4 pi)` prefactor (callers apply it once at the end).
#[inline]
pub fn pair_interaction(
    xi: [f64; 3],
    alpha_i: [f64; 3],
    xj: [f64; 3],
    alpha_j: [f64; 3],
    sigma_j: f64,
) -> ([f64; 3], [f64; 3]) {
    let d = [xi[0] - xj[0], xi[1] - xj[1], xi[2] - xj[2]];
    let r2 = dot(d, d);
    let (k, kp_over_r) = kernel_factors(r2, sigma_j);
    let axd = cross(alpha_j, d);
    let axa = cross(alpha_j, alpha_i);
    let ad = dot(alpha_i, d) * kp_over_r;
    (
        [k * axd[0], k * axd[1], k * axd[2]],
        [
            k * axa[0] + ad * axd[0],
            k * axa[1] + ad * axd[1],
            k * axa[2] + ad * axd[2],
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_and_closed_form_agree_at_the_switch() {
        let sigma = 0.37;
        for rho in [0.7, 1.0, 1.3] {
            let series = kernel_series(rho, sigma);
            let closed = kernel_closed((rho * sigma).powi(2), sigma);
            assert!(
                (series.0 - closed.0).abs() < 1e-14 * series.0.abs(),
                "{rho}"
            );
            assert!(
                (series.1 - closed.1).abs() < 1e-13 * series.1.abs(),
                "{rho}"
            );
        }
    }

    #[test]
    fn far_pair_is_singular_biot_savart() {
        let (k, kp) = kernel_factors(100.0, 0.1);
        assert!((k - 1e-3).abs() < 1e-15);
        assert!((kp - (-3e-5)).abs() < 1e-15);
    }

    #[test]
    fn coincident_pair_has_the_analytic_limit() {
        let sigma = 0.5;
        let (v, s) = pair_interaction([1.0; 3], [0.0, 0.0, 1.0], [1.0; 3], [1.0, 0.0, 0.0], sigma);
        assert_eq!(v, [0.0; 3]);
        let k0 = SQRT_2_OVER_PI / (3.0 * sigma.powi(3));
        // alpha_j x alpha_i = x_hat x z_hat = -y_hat
        assert!((s[1] + k0).abs() < 1e-14 * k0);
        assert!(s.iter().all(|c| c.is_finite()));
    }

    #[test]
    fn derivative_matches_finite_difference() {
        let sigma = 0.8;
        for &r in &[0.05, 0.3, 1.0, 2.5, 7.0] {
            let h = 1e-4 * r;
            let kp = (kernel_factors((r + h) * (r + h), sigma).0
                - kernel_factors((r - h) * (r - h), sigma).0)
                / (2.0 * h);
            let (_, kp_over_r) = kernel_factors(r * r, sigma);
            assert!(
                (kp_over_r * r - kp).abs() < 1e-6 * kp.abs().max(1e-12),
                "r = {r}: {} vs {kp}",
                kp_over_r * r
            );
        }
    }
}

/// `rho^2` beyond which the tabulated kernel switches to the singular one (`rho = 9`).
pub const TABLE_RHO2_MAX: f64 = RHO_SINGULAR * RHO_SINGULAR;
const TABLE_INTERVALS: usize = 256;
const TABLE_DEGREE: usize = 6;

/// `K` and `K'/r` of the Gaussian core as piecewise polynomials in `s = rho^2`.
///
/// With `sigma = 1`, `f(s) = K` and `g(s) = K'/r` are entire functions of `s` (the odd powers of
/// `rho` cancel in `q / rho^3`), so a piecewise Chebyshev interpolant of degree 6 on 256
/// intervals of `[0, 81]` (28 KiB: fits L1) reproduces [`kernel_factors`] to better than 1e-13
/// relative without `erf`, `exp` or a square root; for a core radius `sigma`, `K = f(r^2/sigma^2) / sigma^3` and
/// `K'/r = g(r^2/sigma^2) / sigma^5`. This is what makes the near field (P2P) cheap on the CPU.
#[derive(Clone, Debug)]
pub struct KernelTable {
    /// Per interval: monomial coefficients in the local variable `t in [-1, 1]`, `(f_k, g_k)`
    /// interleaved, so that one 16-byte load fetches both polynomials' coefficient `k`.
    coef: Vec<[[f64; 2]; TABLE_DEGREE + 1]>,
    scale: f64,
}

impl Default for KernelTable {
    fn default() -> Self {
        Self::new()
    }
}

impl KernelTable {
    /// Number of intervals of the table.
    pub const INTERVALS: usize = TABLE_INTERVALS;

    /// `1 / interval width` in `s = rho^2`.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// `(f, g)` of four lanes at intervals `idx` and local variables `t` (see
    /// [`KernelTable::eval_scaled`]). With AVX, lanes 0 and 2 share one vector
    /// `(f, g, f, g)` and lanes 1 and 3 another, so each coefficient step is two 16-byte pair
    /// loads per vector and one FMA, instead of gathering eight scalars.
    #[inline(always)]
    pub fn horner4(&self, idx: [usize; 4], t: wide::f64x4) -> (wide::f64x4, wide::f64x4) {
        let c = [
            &self.coef[idx[0]],
            &self.coef[idx[1]],
            &self.coef[idx[2]],
            &self.coef[idx[3]],
        ];
        #[cfg(all(target_arch = "x86_64", target_feature = "avx", target_feature = "fma"))]
        {
            use std::arch::x86_64::*;
            // SAFETY: AVX and FMA are enabled at compile time; the loads read whole `[f64; 2]` entries
            // of the table; `f64x4` and `__m256d` are both four f64 lanes.
            unsafe {
                let tv: __m256d = std::mem::transmute::<wide::f64x4, __m256d>(t);
                let t02 = _mm256_unpacklo_pd(tv, tv); // (t0, t0, t2, t2)
                let t13 = _mm256_unpackhi_pd(tv, tv); // (t1, t1, t3, t3)
                let pair = |a: &[f64; 2], b: &[f64; 2]| {
                    _mm256_loadu2_m128d(b.as_ptr(), a.as_ptr()) // (a.f, a.g, b.f, b.g)
                };
                let mut x = pair(&c[0][TABLE_DEGREE], &c[2][TABLE_DEGREE]);
                let mut y = pair(&c[1][TABLE_DEGREE], &c[3][TABLE_DEGREE]);
                for k in (0..TABLE_DEGREE).rev() {
                    x = _mm256_fmadd_pd(x, t02, pair(&c[0][k], &c[2][k]));
                    y = _mm256_fmadd_pd(y, t13, pair(&c[1][k], &c[3][k]));
                }
                let f = _mm256_unpacklo_pd(x, y); // (f0, f1, f2, f3)
                let g = _mm256_unpackhi_pd(x, y); // (g0, g1, g2, g3)
                (
                    std::mem::transmute::<__m256d, wide::f64x4>(f),
                    std::mem::transmute::<__m256d, wide::f64x4>(g),
                )
            }
        }
        #[cfg(not(all(target_arch = "x86_64", target_feature = "avx", target_feature = "fma")))]
        {
            let coef = |w: usize, k: usize| {
                wide::f64x4::new([c[0][k][w], c[1][k][w], c[2][k][w], c[3][k][w]])
            };
            let mut f = coef(0, TABLE_DEGREE);
            let mut g = coef(1, TABLE_DEGREE);
            for k in (0..TABLE_DEGREE).rev() {
                f = f.mul_add(t, coef(0, k));
                g = g.mul_add(t, coef(1, k));
            }
            (f, g)
        }
    }

    pub fn new() -> Self {
        let h = TABLE_RHO2_MAX / TABLE_INTERVALS as f64;
        let nodes: Vec<f64> = (0..=TABLE_DEGREE)
            .map(|k| ((2 * k + 1) as f64 * PI / (2 * (TABLE_DEGREE + 1)) as f64).cos())
            .collect();
        let coef = (0..TABLE_INTERVALS)
            .map(|iv| {
                let mut fg = [[0.0; TABLE_DEGREE + 1]; 2];
                for (which, o) in fg.iter_mut().enumerate() {
                    let vals: Vec<f64> = nodes
                        .iter()
                        .map(|&t| {
                            let s = h * (iv as f64 + 0.5 * (t + 1.0));
                            let (k, kp) = kernel_factors(s, 1.0);
                            if which == 0 {
                                k
                            } else {
                                kp
                            }
                        })
                        .collect();
                    *o = chebyshev_to_monomial(&chebyshev_coefficients(&nodes, &vals));
                }
                std::array::from_fn(|k| [fg[0][k], fg[1][k]])
            })
            .collect();
        Self {
            coef,
            scale: 1.0 / h,
        }
    }

    /// `(K, K'/r)` for `s = r^2 / sigma^2 < TABLE_RHO2_MAX`, scaled to `sigma = 1`.
    #[inline(always)]
    pub fn eval_scaled(&self, s: f64) -> (f64, f64) {
        let x = s * self.scale;
        let i = (x as usize).min(TABLE_INTERVALS - 1);
        let t = 2.0 * (x - i as f64) - 1.0;
        let c = &self.coef[i];
        let (mut f, mut g) = (c[TABLE_DEGREE][0], c[TABLE_DEGREE][1]);
        for k in (0..TABLE_DEGREE).rev() {
            f = f * t + c[k][0];
            g = g * t + c[k][1];
        }
        (f, g)
    }

    /// `(K, K'/r)` of a pair at squared distance `r2` from a source with the given
    /// `1/sigma^2`, `1/sigma^3`, `1/sigma^5`.
    #[inline(always)]
    pub fn factors(&self, r2: f64, inv_s2: f64, inv_s3: f64, inv_s5: f64) -> (f64, f64) {
        let s = r2 * inv_s2;
        if s < TABLE_RHO2_MAX {
            let (f, g) = self.eval_scaled(s);
            (f * inv_s3, g * inv_s5)
        } else {
            let inv_r = 1.0 / r2.sqrt();
            let inv_r3 = inv_r * inv_r * inv_r;
            (inv_r3, -3.0 * inv_r3 * inv_r * inv_r)
        }
    }
}

/// Chebyshev coefficients `c_k` of the interpolant through `vals` at the Chebyshev nodes.
fn chebyshev_coefficients(nodes: &[f64], vals: &[f64]) -> Vec<f64> {
    let n = nodes.len();
    (0..n)
        .map(|k| {
            let s: f64 = (0..n)
                .map(|j| vals[j] * ((k * (2 * j + 1)) as f64 * PI / (2 * n) as f64).cos())
                .sum();
            s * if k == 0 { 1.0 } else { 2.0 } / n as f64
        })
        .collect()
}

/// Monomial coefficients of `sum_k c_k T_k(t)`.
fn chebyshev_to_monomial(c: &[f64]) -> [f64; TABLE_DEGREE + 1] {
    let n = c.len();
    let mut out = [0.0; TABLE_DEGREE + 1];
    // T_0 = 1, T_1 = t, T_{k+1} = 2 t T_k - T_{k-1}, as monomial coefficient vectors
    let mut tkm1 = vec![0.0; n];
    let mut tk = vec![0.0; n];
    tkm1[0] = 1.0;
    if n > 1 {
        tk[1] = 1.0;
    }
    for (k, &ck) in c.iter().enumerate() {
        let t = if k == 0 { &tkm1 } else { &tk };
        for i in 0..n {
            out[i] += ck * t[i];
        }
        if k >= 1 {
            let mut next = vec![0.0; n];
            for i in 0..n - 1 {
                next[i + 1] += 2.0 * tk[i];
            }
            for i in 0..n {
                next[i] -= tkm1[i];
            }
            tkm1 = std::mem::replace(&mut tk, next);
        }
    }
    out
}

#[cfg(test)]
mod table_tests {
    use super::*;

    #[test]
    fn table_reproduces_the_exact_kernel() {
        let table = KernelTable::new();
        let sigma: f64 = 0.3;
        let (is2, is3, is5) = (sigma.powi(-2), sigma.powi(-3), sigma.powi(-5));
        let mut worst: (f64, f64) = (0.0, 0.0);
        for k in 0..200_000 {
            let rho = 10.0 * (k as f64 + 0.37) / 200_000.0;
            let r2 = (rho * sigma).powi(2);
            let (k_ex, kp_ex) = kernel_factors(r2, sigma);
            let (k_t, kp_t) = table.factors(r2, is2, is3, is5);
            worst.0 = worst.0.max(((k_t - k_ex) / k_ex).abs());
            worst.1 = worst.1.max(((kp_t - kp_ex) / kp_ex).abs());
        }
        assert!(worst.0 < 1e-13 && worst.1 < 1e-12, "{worst:?}");
        // exactly zero distance: the analytic limit
        let (k0, _) = table.factors(0.0, is2, is3, is5);
        assert!((k0 - SQRT_2_OVER_PI / (3.0 * sigma.powi(3))).abs() < 1e-13 * k0);
    }
}
