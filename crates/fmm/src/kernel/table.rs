//! The pair factors `K` and `K'/r` of a core as piecewise polynomials in `rho^2`: the CPU
//! near field's kernel (`crate::operators::p2p`).

use super::CoreOrder;
use std::f64::consts::PI;

/// `rho^2` beyond which the tabulated Gaussian kernel switches to the singular one (`rho = 9`;
/// [`KernelTable::rho2_max`] of each core).
pub const TABLE_RHO2_MAX: f64 = 81.0;
/// Width of the intervals in `rho^2`: `81 / 256` for the Gaussian (256 intervals), `1 / 4` for
/// the cores of higher order (400 intervals to `rho = 10`: their polynomial factor raises the
/// seventh derivative that bounds the interpolation error).
fn table_width(core: CoreOrder) -> f64 {
    match core {
        CoreOrder::Second => 81.0 / 256.0,
        CoreOrder::Fourth | CoreOrder::Sixth => 0.25,
    }
}
const TABLE_DEGREE: usize = 6;

/// `K` and `K'/r` of one core as piecewise polynomials in `s = rho^2`.
///
/// With `sigma = 1`, `f(s) = K` and `g(s) = K'/r` are entire functions of `s` (the odd powers of
/// `rho` cancel in `q / rho^3`), so a piecewise Chebyshev interpolant of degree 6 on
/// intervals of `[0, rho_s^2]` (`rho_s` = [`CoreOrder::rho_singular`]; 28 KiB for the Gaussian,
/// 44 KiB for the others: fits L1) reproduces [`CoreOrder::factors`] to better than 1e-13
/// relative without `erf`, `exp` or a square root; for a core radius `sigma`, `K = f(r^2/sigma^2) / sigma^3` and
/// `K'/r = g(r^2/sigma^2) / sigma^5`. This is what makes the near field (P2P) cheap on the CPU.
#[derive(Clone, Debug)]
pub struct KernelTable {
    /// Per interval: monomial coefficients in the local variable `t in [-1, 1]`, `(f_k, g_k)`
    /// interleaved, so that one 16-byte load fetches both polynomials' coefficient `k`.
    coef: Vec<[[f64; 2]; TABLE_DEGREE + 1]>,
    scale: f64,
    rho2_max: f64,
    core: CoreOrder,
}

impl Default for KernelTable {
    /// The Gaussian's table.
    fn default() -> Self {
        Self::new(CoreOrder::Second)
    }
}

impl KernelTable {
    /// Number of intervals of the table.
    pub fn intervals(&self) -> usize {
        self.coef.len()
    }

    /// `1 / interval width` in `s = rho^2`.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// `rho^2` where the table ends and the singular kernel begins.
    pub fn rho2_max(&self) -> f64 {
        self.rho2_max
    }

    /// The core the table holds.
    pub fn core(&self) -> CoreOrder {
        self.core
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

    /// The table of `core`.
    pub fn new(core: CoreOrder) -> Self {
        let rho2_max = core.rho_singular().powi(2);
        let intervals = (rho2_max / table_width(core)).round() as usize;
        let h = rho2_max / intervals as f64;
        let nodes: Vec<f64> = (0..=TABLE_DEGREE)
            .map(|k| ((2 * k + 1) as f64 * PI / (2 * (TABLE_DEGREE + 1)) as f64).cos())
            .collect();
        let coef = (0..intervals)
            .map(|iv| {
                let mut fg = [[0.0; TABLE_DEGREE + 1]; 2];
                for (which, o) in fg.iter_mut().enumerate() {
                    let vals: Vec<f64> = nodes
                        .iter()
                        .map(|&t| {
                            let s = h * (iv as f64 + 0.5 * (t + 1.0));
                            let (k, kp) = core.factors(s, 1.0);
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
            rho2_max,
            core,
        }
    }

    /// `(K, K'/r)` for `s = r^2 / sigma^2 <` [`KernelTable::rho2_max`], scaled to `sigma = 1`.
    #[inline(always)]
    pub fn eval_scaled(&self, s: f64) -> (f64, f64) {
        let x = s * self.scale;
        let i = (x as usize).min(self.coef.len() - 1);
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
        if s < self.rho2_max {
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
mod tests {
    use super::*;
    use crate::kernel::SQRT_2_OVER_PI;

    #[test]
    fn table_reproduces_the_exact_kernel_of_every_core() {
        let sigma: f64 = 0.3;
        let (is2, is3, is5) = (sigma.powi(-2), sigma.powi(-3), sigma.powi(-5));
        for core in CoreOrder::ALL {
            let table = KernelTable::new(core);
            let mut worst: (f64, f64) = (0.0, 0.0);
            for k in 0..200_000 {
                let rho = 11.0 * (k as f64 + 0.37) / 200_000.0;
                let r2 = (rho * sigma).powi(2);
                let (k_ex, kp_ex) = core.factors(r2, sigma);
                let (k_t, kp_t) = table.factors(r2, is2, is3, is5);
                worst.0 = worst.0.max(((k_t - k_ex) / k_ex).abs());
                worst.1 = worst.1.max(((kp_t - kp_ex) / kp_ex).abs());
            }
            assert!(worst.0 < 1e-13 && worst.1 < 1e-12, "{core:?}: {worst:?}");
            // exactly zero distance: the analytic limit sqrt(2/pi) P_m(0) / (3 sigma^3)
            let (k0, _) = table.factors(0.0, is2, is3, is5);
            let want = SQRT_2_OVER_PI * core.poly(0.0) / (3.0 * sigma.powi(3));
            assert!((k0 - want).abs() < 1e-13 * k0, "{core:?}");
        }
    }
}
