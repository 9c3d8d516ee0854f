//! The "exponential of semicircle" (ES) spreading kernel and its Fourier transform.
//!
//! A. H. Barnett, J. Magland and L. af Klinteberg, "A parallel nonuniform fast Fourier transform
//! library based on an 'exponential of semicircle' kernel", SIAM J. Sci. Comput. 41 (2019)
//! C479-C504: the kernel of width `w` grid points (half-width `alpha = w h_f / 2` on a grid of
//! spacing `h_f`)
//!
//! `phi(x) = exp(beta (sqrt(1 - z^2) - 1))`, `z = x / alpha`, `|z| <= 1`, zero outside,
//!
//! whose transform has no closed form; as there, it is computed by quadrature. With
//! `z = sin(theta)` the integrand is smooth on `[0, pi/2]` (no square-root end point):
//!
//! `phi_hat(k) = alpha T(k alpha)`, `T(t) = int_{-1}^{1} phi(z) cos(t z) dz
//!            = 2 int_0^{pi/2} exp(beta (cos theta - 1)) cos(t sin theta) cos theta d theta`,
//!
//! Gauss-Legendre in `theta` ([`KernelTransform`]). `beta = 0` gives the box,
//! `T(t) = 2 sin(t) / t` (the unit test).

use std::f64::consts::FRAC_PI_2;
use vortex_fmm::ppm::quadrature::gauss_legendre;

/// The widest kernel (grid points per axis) a plan may use.
pub const MAX_WIDTH: usize = 16;

/// The ES kernel: `width` fine-grid points per axis, shape parameter `beta` (dimensionless).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EsKernel {
    pub width: usize,
    pub beta: f64,
}

impl EsKernel {
    /// `phi` at `z = x / alpha` (zero for `|z| > 1`).
    #[inline]
    pub fn value(&self, z: f64) -> f64 {
        if z.abs() > 1.0 {
            0.0
        } else {
            (self.beta * ((1.0 - z * z).sqrt() - 1.0)).exp()
        }
    }

    /// The `width` kernel values of a source at fine-grid coordinate `u` (in grid spacings),
    /// at the points `l0, l0 + 1, ..., l0 + width - 1`, `l0 = ceil(u - width / 2)`: returns
    /// `l0` (unwrapped) and fills `out[..width]`.
    #[inline]
    pub fn weights(&self, u: f64, out: &mut [f64]) -> i64 {
        let half = 0.5 * self.width as f64;
        let l0 = (u - half).ceil();
        for (a, o) in out[..self.width].iter_mut().enumerate() {
            *o = self.value((l0 + a as f64 - u) / half);
        }
        l0 as i64
    }
}

/// `T(t)` of one kernel by Gauss-Legendre quadrature in `theta`, accurate to round-off for
/// `|t| <= t_max`.
#[derive(Clone, Debug)]
pub struct KernelTransform {
    /// `(sin theta_i, weight_i exp(beta (cos theta_i - 1)) cos theta_i)`, the factor 2 included.
    nodes: Vec<(f64, f64)>,
}

impl KernelTransform {
    pub fn new(kernel: &EsKernel, t_max: f64) -> Self {
        // cos(t sin theta) has about t / pi half-periods on [0, pi/2] and exp(beta cos theta) a
        // width 1 / sqrt(beta): nodes for both with a margin (the unit test checks the
        // largest t of a design, t = pi w (J + 1/2) at w = MAX_WIDTH, against the box's closed
        // form)
        let q = (0.75 * t_max.abs() + 0.5 * kernel.beta).ceil() as usize + 40;
        let (x, w) = gauss_legendre(q);
        let nodes = x
            .iter()
            .zip(&w)
            .map(|(&xi, &wi)| {
                let th = 0.5 * FRAC_PI_2 * (xi + 1.0);
                let f = (kernel.beta * (th.cos() - 1.0)).exp() * th.cos();
                (th.sin(), 2.0 * 0.5 * FRAC_PI_2 * wi * f)
            })
            .collect();
        Self { nodes }
    }

    /// `T(t) = int_{-1}^{1} phi(z) cos(t z) dz`.
    pub fn at(&self, t: f64) -> f64 {
        self.nodes.iter().map(|&(s, w)| w * (t * s).cos()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `beta = 0` is the box: `T(t) = 2 sin t / t`, up to the largest `t` a design asks for.
    #[test]
    fn box_transform_in_closed_form() {
        let k = EsKernel {
            width: MAX_WIDTH,
            beta: 0.0,
        };
        let t_max = std::f64::consts::PI * MAX_WIDTH as f64 * 4.5;
        let tr = KernelTransform::new(&k, t_max);
        for i in 0..=2000 {
            let t = t_max * i as f64 / 2000.0;
            let want = if t == 0.0 { 2.0 } else { 2.0 * t.sin() / t };
            let got = tr.at(t);
            assert!((got - want).abs() < 1e-13, "t = {t}: {got} vs {want}");
        }
    }

    /// A kernel with `beta > 0` against the composite Simpson rule in `z` on a fine grid (the
    /// end points have a square-root behaviour times `exp(-beta)`, below the comparison).
    #[test]
    fn transform_against_simpson() {
        for (w, beta) in [(6usize, 13.8), (12, 30.0)] {
            let k = EsKernel { width: w, beta };
            let tr = KernelTransform::new(&k, 60.0);
            let m = 400_000;
            let h = 2.0 / m as f64;
            for t in [0.0, 1.0, 7.5, 22.0, 60.0] {
                let f = |z: f64| k.value(z) * (t * z).cos();
                let mut s = f(-1.0) + f(1.0);
                for i in 1..m {
                    let z = -1.0 + i as f64 * h;
                    s += if i % 2 == 1 { 4.0 } else { 2.0 } * f(z);
                }
                let simpson = s * h / 3.0;
                let got = tr.at(t);
                assert!(
                    (got - simpson).abs() < 1e-9 * (1.0 + tr.at(0.0)),
                    "w {w} t {t}: {got:e} vs {simpson:e}"
                );
            }
        }
    }

    /// The `width` weights start at `ceil(u - w/2)` and vanish outside the support.
    #[test]
    fn weights_cover_the_support() {
        let k = EsKernel {
            width: 7,
            beta: 16.0,
        };
        let mut out = [0.0; MAX_WIDTH];
        let l0 = k.weights(10.3, &mut out);
        assert_eq!(l0, 7);
        for (a, v) in out[..7].iter().enumerate() {
            let z = (l0 as f64 + a as f64 - 10.3) / 3.5;
            assert!(z.abs() <= 1.0);
            assert_eq!(*v, k.value(z));
        }
        // the next point beyond either end lies outside
        assert!(((l0 - 1) as f64 - 10.3).abs() / 3.5 > 1.0);
        assert!(((l0 + 7) as f64 - 10.3).abs() / 3.5 > 1.0);
    }
}
