//! The family of Gaussian-based cores of order 2, 4 and 6.
//!
//! J. T. Beale and A. Majda, "High order accurate vortex methods with explicit velocity
//! kernels", J. Comput. Phys. 58 (1985) 188-208; G. S. Winckelmans and A. Leonard,
//! "Contributions to vortex particle methods for the computation of three-dimensional
//! incompressible unsteady flows", J. Comput. Phys. 109 (1993) 247-273, Sec. 2 (their
//! Gaussian family). With `rho = r / sigma`, `s = rho^2`, and everything for `sigma = 1`:
//!
//! * the core `zeta_2m(rho) = (2 pi)^(-3/2) e^(-s/2) P_m(s)`, the sum
//!   `sum_{j<m} (1/j!) (-lap/2)^j` applied to the Gaussian, so that its 3-D Fourier transform is
//!   `e^(-x) sum_{j<m} x^j / j!` with `x = (k sigma)^2 / 2` ([`CoreOrder::transform`]):
//!   `P_1 = 1`, `P_2 = (5 - s) / 2`, `P_3 = (35 - 14 s + s^2) / 8`;
//! * the fraction of the circulation within `rho`, `q(rho) = 4 pi int_0^rho zeta t^2 dt`
//!   ([`CoreOrder::q`]): `q_2m = erf(rho / sqrt 2) - sqrt(2/pi) rho e^(-s/2) Q_m(s)` with
//!   `Q_1 = 1`, `Q_2 = 1 - s/2`, `Q_3 = 1 - 9 s / 8 + s^2 / 8` (each term of the sum above
//!   integrates to a surface term: `4 pi rho^2 d/drho` of the term before);
//! * `dq/drho = 4 pi rho^2 zeta = sqrt(2/pi) rho^2 e^(-s/2) P_m(s)`;
//! * the velocity kernel `K = q / r^3` and the stretching kernel `K'/r = (dq/dr) / r^4 - 3 q / r^5`
//!   of `docs/CONVENTIONS.md`.
//!
//! The transform is positive for every `m`, `1 - O(x^m)` at small `k` (the moments
//! `int zeta |x|^(2j) d^3x` vanish for `0 < j < m`: the smoothing error of the core is
//! `O(sigma^2m)`), and decays like `x^(m-1) e^(-x)`: at `k sigma = 0.9` the Gaussian keeps 0.67
//! of a mode, the fourth-order core 0.94 and the sixth-order core 0.99.

use super::SQRT_2_OVER_PI;
use serde::{Deserialize, Serialize};
use std::f64::consts::FRAC_1_SQRT_2;

/// `(2 pi)^(-3/2)`.
pub const GAUSS_NORM: f64 = 0.063_493_635_934_240_97;

/// Below this `rho` the series in `rho^2` is used: the closed forms lose digits to
/// cancellation (`q ~ rho^3`).
const RHO_SERIES: f64 = 1.0;
/// Terms of the series: for `rho <= 1` the last is below 1e-20 of the first for every order.
const SERIES_TERMS: usize = 20;

/// The order `2m` of the core: the smoothing error `zeta_sigma * omega - omega` is `O(sigma^2m)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub enum CoreOrder {
    /// The Gaussian (`m = 1`), the core of the core paper; the only one that core spreading
    /// keeps a solution of the heat equation.
    #[default]
    Second,
    /// `zeta_4 = (2 pi)^(-3/2) e^(-s/2) (5 - s) / 2`.
    Fourth,
    /// `zeta_6 = (2 pi)^(-3/2) e^(-s/2) (35 - 14 s + s^2) / 8`.
    Sixth,
}

impl TryFrom<u32> for CoreOrder {
    type Error = String;
    fn try_from(v: u32) -> Result<Self, String> {
        match v {
            2 => Ok(Self::Second),
            4 => Ok(Self::Fourth),
            6 => Ok(Self::Sixth),
            _ => Err(format!(
                "unknown core order {v} (the Gaussian cores have order 2, 4 or 6)"
            )),
        }
    }
}

impl From<CoreOrder> for u32 {
    fn from(c: CoreOrder) -> u32 {
        c.order() as u32
    }
}

impl std::str::FromStr for CoreOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let v: u32 = s
            .trim()
            .parse()
            .map_err(|_| format!("unknown core order '{s}' (expected 2, 4 or 6)"))?;
        Self::try_from(v)
    }
}

impl std::fmt::Display for CoreOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.order())
    }
}

/// The Gaussian's tail `1 - q_2(rho)` at the far field's default gap, 4 core radii
/// (`EvalParams::default().core_cutoff`; 1.133e-3): the largest relative error of the singular
/// kernel that a core of higher order may have at its cutoff ([`CoreOrder::min_cutoff`]).
pub const CUTOFF_TAIL: f64 = 1.14e-3;

impl CoreOrder {
    /// Every order, lowest first.
    pub const ALL: [CoreOrder; 3] = [CoreOrder::Second, CoreOrder::Fourth, CoreOrder::Sixth];

    /// `2m`.
    pub fn order(self) -> usize {
        2 * self.m()
    }

    /// `m`: the number of terms of the transform.
    pub fn m(self) -> usize {
        match self {
            Self::Second => 1,
            Self::Fourth => 2,
            Self::Sixth => 3,
        }
    }

    /// Coefficients of `P_m(s)`, lowest power first.
    pub fn p_coefficients(self) -> &'static [f64] {
        match self {
            Self::Second => &[1.0],
            Self::Fourth => &[2.5, -0.5],
            Self::Sixth => &[4.375, -1.75, 0.125],
        }
    }

    /// Coefficients of `Q_m(s)`, lowest power first.
    fn q_coefficients(self) -> &'static [f64] {
        match self {
            Self::Second => &[1.0],
            Self::Fourth => &[1.0, -0.5],
            Self::Sixth => &[1.0, -1.125, 0.125],
        }
    }

    /// `P_m(s)`.
    #[inline]
    pub fn poly(self, s: f64) -> f64 {
        horner(self.p_coefficients(), s)
    }

    /// `zeta_2m` at `s = rho^2` for `sigma = 1` (divide by `sigma^3` for a core radius `sigma`).
    #[inline]
    pub fn zeta(self, s: f64) -> f64 {
        GAUSS_NORM * (-0.5 * s).exp() * self.poly(s)
    }

    /// `q(rho)`, the fraction of the circulation within `rho` core radii (closed form).
    pub fn q(self, rho: f64) -> f64 {
        let s = rho * rho;
        libm::erf(rho * FRAC_1_SQRT_2)
            - SQRT_2_OVER_PI * rho * (-0.5 * s).exp() * horner(self.q_coefficients(), s)
    }

    /// `dq/drho = 4 pi rho^2 zeta(rho)`.
    pub fn dq(self, rho: f64) -> f64 {
        let s = rho * rho;
        SQRT_2_OVER_PI * s * (-0.5 * s).exp() * self.poly(s)
    }

    /// The 3-D Fourier transform of `zeta_2m` (for `sigma = 1`, `int zeta e^(-i k.x) d^3x`) at
    /// `x = k^2 / 2`: `e^(-x) sum_{j<m} x^j / j!`.
    pub fn transform(self, x: f64) -> f64 {
        let (mut sum, mut term) = (0.0, 1.0);
        for j in 0..self.m() {
            sum += term;
            term *= x / (j + 1) as f64;
        }
        (-x).exp() * sum
    }

    /// `rho` beyond which the kernel is the singular one to round-off (`|1 - q|` and
    /// `rho dq` below 1e-15): the end of [`super::KernelTable`].
    pub fn rho_singular(self) -> f64 {
        match self {
            Self::Second => 9.0,
            Self::Fourth | Self::Sixth => 10.0,
        }
    }

    /// `|1 - q(rho)|`: the relative error of the singular kernel at `rho` core radii.
    pub fn tail(self, rho: f64) -> f64 {
        let s = rho * rho;
        (libm::erfc(rho * FRAC_1_SQRT_2)
            + SQRT_2_OVER_PI * rho * (-0.5 * s).exp() * horner(self.q_coefficients(), s))
        .abs()
    }

    /// The smallest far-field gap (in core radii) beyond which `|1 - q| <= CUTOFF_TAIL`, for the
    /// cores of order above 2 (`0` for the Gaussian, whose cutoffs are the caller's choice):
    /// the fourth-order core needs 4.6, the sixth-order 5.0 (the tail of a higher order falls
    /// off later: `rho^(2m-1) e^(-rho^2/2)`).
    pub fn min_cutoff(self) -> f64 {
        if self == Self::Second {
            return 0.0;
        }
        // scan down from where the tail is negligible to the first rho whose tail is too large
        let step = 1e-3;
        let mut rho = self.rho_singular();
        while rho > step && self.tail(rho - step) <= CUTOFF_TAIL {
            rho -= step;
        }
        // two decimals up: the value a configuration can quote
        (rho * 100.0).ceil() / 100.0
    }

    /// The far-field gap of this core for an engine whose Gaussian default is `default`:
    /// the larger of the two.
    pub fn default_cutoff(self, default: f64) -> f64 {
        default.max(self.min_cutoff())
    }

    /// `(K, K'/r)` of one pair at squared distance `r2` from a source of core radius `sigma`.
    /// Finite for every `r2 >= 0` and `sigma > 0`; at `r = 0` the analytic limit
    /// (`K(0) = sqrt(2/pi) P_m(0) / (3 sigma^3)`).
    #[inline]
    pub fn factors(self, r2: f64, sigma: f64) -> (f64, f64) {
        let rho = r2.sqrt() / sigma;
        if rho < RHO_SERIES {
            self.series(rho * rho, sigma)
        } else {
            self.closed(r2, sigma)
        }
    }

    /// Series form of [`CoreOrder::factors`]: with `e^(-s/2) P_m(s) = sum_n c_n s^n`,
    /// `q = sqrt(2/pi) sum_n c_n rho^(2n+3) / (2n+3)`, so `K sigma^3 = sqrt(2/pi) sum_n c_n
    /// s^n / (2n+3)` and `K'/r sigma^5 = sqrt(2/pi) sum_n 2n c_n s^(n-1) / (2n+3)`: no
    /// cancellation.
    pub(super) fn series(self, s: f64, sigma: f64) -> (f64, f64) {
        let p = self.p_coefficients();
        let (mut k, mut kp) = (0.0, 0.0);
        // e^(-s/2) = sum_i e_i s^i, e_i = (-1/2)^i / i!
        let mut e = [0.0; SERIES_TERMS];
        e[0] = 1.0;
        for i in 1..SERIES_TERMS {
            e[i] = -0.5 * e[i - 1] / i as f64;
        }
        let mut pw = 1.0; // s^n
        let mut pw1 = 0.0; // s^(n-1)
        for n in 0..SERIES_TERMS {
            let c: f64 = (0..p.len().min(n + 1)).map(|i| p[i] * e[n - i]).sum();
            let d = (2 * n + 3) as f64;
            k += c * pw / d;
            kp += 2.0 * n as f64 * c * pw1 / d;
            pw1 = pw;
            pw *= s;
        }
        let s2 = sigma * sigma;
        let s3 = s2 * sigma;
        (SQRT_2_OVER_PI * k / s3, SQRT_2_OVER_PI * kp / (s3 * s2))
    }

    /// Closed form of [`CoreOrder::factors`], accurate for `rho >= 1`.
    pub(super) fn closed(self, r2: f64, sigma: f64) -> (f64, f64) {
        let r = r2.sqrt();
        let rho = r / sigma;
        let inv_r = 1.0 / r;
        let inv_r3 = inv_r * inv_r * inv_r;
        if rho > self.rho_singular() {
            return (inv_r3, -3.0 * inv_r3 * inv_r * inv_r);
        }
        let q = self.q(rho);
        let dq_dr = self.dq(rho) / sigma;
        let k = q * inv_r3;
        let kp = dq_dr * inv_r3 - 3.0 * q * inv_r3 * inv_r;
        (k, kp * inv_r)
    }
}

/// `sum_i c_i s^i`.
#[inline]
fn horner(c: &[f64], s: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, &ci| acc * s + ci)
}

#[cfg(test)]
mod tests;
