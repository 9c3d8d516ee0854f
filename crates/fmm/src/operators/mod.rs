//! FMM operators for the three Laplace potentials `phi_c = sum_j alpha_jc / |x - x_j|`
//! (core paper Eq. 12-35), with velocity `u = curl(phi)` and stretching
//! `s = (alpha_i . grad) curl(phi)`, all **without** the factor `1/(4 pi)`.
//!
//! Storage and normalization: see [`crate::expansions`] (coefficients of the Racah-normalized
//! harmonics, the core paper's `M_n^m` of Eq. 12 and `L_n^m` of Eq. 13). Translation theorems
//! are those of the scaled solid harmonics `R`, `I` of [`crate::expansions::harmonics`]
//! (Epton & Dembart 1995; Dehnen 2014, Eq. 40-49).
//!
//! One algorithm per file, each an `impl` block of [`Operators`] (the factor tables of order `p`,
//! in this file):
//!
//! | file | function | core paper | cost |
//! |---|---|---|---|
//! | `p2m.rs` | [`Operators::p2m`] | Eq. 12 (`M_j`) | `O(p^2)` per source |
//! | `rotate.rs` | rotate, translate along z, rotate back: the steps the three below share | Eq. 30-32 | `O(p^3)` |
//! | `m2m.rs` | [`Operators::m2m`] | Eq. 26 + 30-32 | `O(p^3)` |
//! | `m2l.rs` | [`Operators::m2l`] | Eq. 27 + 30-32 | `O(p^3)` |
//! | `m2l_batch.rs` | [`Operators::m2l_batch`]: the same, up to [`M2L_BATCH`] translations of one direction at once | Eq. 27 + 30-32 | `O(p^3)` |
//! | `l2l.rs` | [`Operators::l2l`] | Eq. 28 + 30-32 | `O(p^3)` |
//! | `l2p.rs` | [`Operators::l2p`] | Eq. 19, 21 (`curl` / Hessian of the local expansion) | `O(p^2)` per target |
//! | `m2p.rs` | [`Operators::m2p`] | Eq. 18, 20 | `O(p^2)` per target |
//! | `p2p.rs` | [`p2p::p2p`], [`p2p::p2p_mutual`] | Eq. 5, 7, 9 (one-sided; both sides of each pair) | per pair |
//! | `potential.rs` | [`potential::local_potential`] | | |
//! | `direct.rs` | `*_direct`: plain `O(p^4)` translations (test references) | | `O(p^4)` |
//!
//! Rotations: a [`Rotation`] built for vector `v` takes `v` to `+z`. For every translation from
//! centre `a` to centre `b` (M2M: child to parent, M2L: source to target, L2L: parent to
//! child) the rotation is `self.rotation(b - a)` and the distance `|b - a|`.
//!
//! Derivatives at a target (L2P, M2P): the expansion is re-expanded about the target point
//! itself; with `phi(x0 + y) = sum Lhat_k^l conj(R_k^l(y))` the first two degrees give
//! `grad phi = (-Re Lhat_1^1, -Im Lhat_1^1, Lhat_1^0)` and the Hessian
//! `H_xx = (Re Lhat_2^2 - Lhat_2^0)/2`, `H_yy = -(Re Lhat_2^2 + Lhat_2^0)/2`, `H_zz = Lhat_2^0`,
//! `H_xy = Im Lhat_2^2 / 2`, `H_xz = -Re Lhat_2^1`, `H_yz = -Im Lhat_2^1`.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

mod direct;
mod l2l;
mod l2p;
mod m2l;
mod m2l_batch;
mod m2m;
mod m2p;
mod p2m;
pub mod p2p;
pub mod potential;
mod rotate;

pub use m2l_batch::{BatchScratch, M2L_BATCH};

use crate::expansions::harmonics::{expand_full, full_index, irregular, knm, regular};
pub use crate::expansions::rotation::Rotation;
use crate::expansions::rotation::{delta_table, sq_offset};
use crate::expansions::{index, ncoef, Complex64};
use crate::MAX_ORDER;
use wide::f64x4;

const HALF_MAX: usize = ncoef(MAX_ORDER + 2);
const FULL_MAX: usize = (MAX_ORDER + 3) * (MAX_ORDER + 3);

/// Everything that depends only on the order `p`. Immutable, `Send + Sync`.
#[derive(Clone, Debug)]
pub struct Operators {
    p: usize,
    /// `K_n^m`, `n <= p`, at `index(n, m)`.
    k: Vec<f64>,
    /// `1 / K_n^m`.
    inv_k: Vec<f64>,
    /// ones, `ncoef(p + 2)`.
    ones: Vec<f64>,
    /// `d^n(pi/2)`, see [`delta_table`].
    delta: Vec<f64>,
    /// m-major layout: block `m` (entries `n = m..=p`) starts at `moff[m]`.
    moff: Vec<usize>,
    /// square per-`m` blocks of side `p + 1 - m` start at `toff[m]`.
    toff: Vec<usize>,
    /// z-axis M2M: `[m][n - m][j - m] = K_n^m / ((n - j)! K_j^m)`, `j <= n`.
    t_m2m: Vec<f64>,
    /// z-axis M2L: `[m][k - m][n - m] = (-1)^{k+m} (n + k)! / (K_n^m K_k^m)`.
    t_m2l: Vec<f64>,
    /// z-axis L2L: `[m][a - m][k - m] = K_k^m / (K_a^m (k - a)!)`, `k >= a`.
    t_l2l: Vec<f64>,
}

/// Per-thread work buffers of the rotation-based translations (no allocation in hot calls).
#[derive(Clone, Debug)]
pub struct Scratch {
    work: Work,
    /// rotation rebuilt by the calls that are not given one ([`Operators::m2l`] etc.)
    rot: Rotation,
}

/// Work buffers of the rotation-based translations. An m-major coefficient slot `k` holds the
/// three components in two SIMD vectors, `[2k] = (re0, im0, re1, im1)`, `[2k+1] = (re2, im2, 0,
/// 0)`, so that every inner loop of the rotations and z-translations is two vector FMAs.
#[derive(Clone, Debug)]
struct Work {
    /// rotated input, m-major: slot `moff[m] + n - m`
    a: Vec<f64x4>,
    /// translated output, same layout
    b: Vec<f64x4>,
    /// phase-multiplied coefficients of one degree, slot `m`
    g: Vec<f64x4>,
    /// powers
    pw: Vec<f64>,
}

impl Scratch {
    pub fn new(p: usize) -> Self {
        Self {
            work: Work {
                a: vec![f64x4::splat(0.0); 2 * ncoef(p)],
                b: vec![f64x4::splat(0.0); 2 * ncoef(p)],
                g: vec![f64x4::splat(0.0); 2 * (p + 1)],
                pw: vec![0.0; p + 2],
            },
            rot: Rotation::empty(p),
        }
    }
}

/// `(a, b, a, b)`: one folded rotation entry for the real and imaginary lanes.
#[inline(always)]
fn ab2(x: &[f64; 2]) -> f64x4 {
    f64x4::new([x[0], x[1], x[0], x[1]])
}

/// `(b, a, d, c)` of `(a, b, c, d)`: swaps real and imaginary parts of two complex numbers.
#[inline(always)]
fn swap_re_im(v: f64x4) -> f64x4 {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx"))]
    {
        use std::arch::x86_64::{__m256d, _mm256_permute_pd};
        // SAFETY: `f64x4` is 32 bytes of four f64 lanes, as is `__m256d`; AVX is enabled.
        unsafe {
            let x: __m256d = std::mem::transmute::<f64x4, __m256d>(v);
            std::mem::transmute::<__m256d, f64x4>(_mm256_permute_pd::<0b0101>(x))
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "avx")))]
    {
        let a = v.to_array();
        f64x4::new([a[1], a[0], a[3], a[2]])
    }
}

/// Packs the three components of one coefficient into two vectors.
#[inline(always)]
fn pack3(z0: Complex64, z1: Complex64, z2: Complex64) -> (f64x4, f64x4) {
    (
        f64x4::new([z0.re, z0.im, z1.re, z1.im]),
        f64x4::new([z2.re, z2.im, 0.0, 0.0]),
    )
}

/// Taylor coefficients `Lhat_1^0, Lhat_1^1, Lhat_2^0, Lhat_2^1, Lhat_2^2` of each component's
/// potential about a target point: velocity (curl of the gradient) and stretching (Hessian).
#[inline]
fn accumulate_fields(
    tay: &[[Complex64; 5]; 3],
    alpha: [f64; 3],
    velocity: &mut [f64; 3],
    stretching: &mut [f64; 3],
) {
    let mut g = [[0.0; 3]; 3];
    let mut h = [[[0.0; 3]; 3]; 3];
    for c in 0..3 {
        let t = &tay[c];
        g[c] = [-t[1].re, -t[1].im, t[0].re];
        let (l20, l21, l22) = (t[2].re, t[3], t[4]);
        let hxy = 0.5 * l22.im;
        h[c] = [
            [0.5 * (l22.re - l20), hxy, -l21.re],
            [hxy, -0.5 * (l22.re + l20), -l21.im],
            [-l21.re, -l21.im, l20],
        ];
    }
    velocity[0] += g[2][1] - g[1][2];
    velocity[1] += g[0][2] - g[2][0];
    velocity[2] += g[1][0] - g[0][1];
    for l in 0..3 {
        let a = alpha[l];
        stretching[0] += a * (h[2][l][1] - h[1][l][2]);
        stretching[1] += a * (h[0][l][2] - h[2][l][0]);
        stretching[2] += a * (h[1][l][0] - h[0][l][1]);
    }
}

#[inline]
fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

#[inline]
fn norm(a: [f64; 3]) -> f64 {
    (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt()
}

impl Operators {
    /// Precomputes the factor tables and `d^n(pi/2)` for order `p` (`1 <= p <= MAX_ORDER`).
    pub fn new(p: usize) -> Self {
        if let Err(e) = crate::check_order(p, MAX_ORDER) {
            panic!("{e}");
        }
        let nc = ncoef(p);
        let mut k = vec![0.0; nc];
        for n in 0..=p {
            for m in 0..=n {
                k[index(n, m)] = knm(n, m);
            }
        }
        let inv_k = k.iter().map(|v| 1.0 / v).collect();
        let mut moff = vec![0; p + 2];
        let mut toff = vec![0; p + 2];
        for m in 0..=p {
            moff[m + 1] = moff[m] + (p + 1 - m);
            toff[m + 1] = toff[m] + (p + 1 - m) * (p + 1 - m);
        }
        let fact = |n: usize| crate::expansions::harmonics::factorial(n);
        let tsize = toff[p + 1];
        let (mut t_m2m, mut t_m2l, mut t_l2l) =
            (vec![0.0; tsize], vec![0.0; tsize], vec![0.0; tsize]);
        for m in 0..=p {
            let side = p + 1 - m;
            for i in 0..side {
                for j in 0..side {
                    let (ni, nj) = (m + i, m + j);
                    let at = toff[m] + i * side + j;
                    if nj <= ni {
                        t_m2m[at] = knm(ni, m) / (fact(ni - nj) * knm(nj, m));
                    }
                    let sign = if (ni + m) % 2 == 0 { 1.0 } else { -1.0 };
                    t_m2l[at] = sign * fact(ni + nj) / (knm(ni, m) * knm(nj, m));
                    if nj >= ni {
                        t_l2l[at] = knm(nj, m) / (knm(ni, m) * fact(nj - ni));
                    }
                }
            }
        }
        Self {
            p,
            k,
            inv_k,
            ones: vec![1.0; ncoef(p + 2)],
            delta: delta_table(p),
            moff,
            toff,
            t_m2m,
            t_m2l,
            t_l2l,
        }
    }

    pub fn order(&self) -> usize {
        self.p
    }

    /// Precomputed rotation (Wigner d-matrices + phases) that takes the z axis to the direction
    /// of `v` (equivalently, maps coefficients to the frame in which `v` is `+z`). `O(p^4)`.
    pub fn rotation(&self, v: [f64; 3]) -> Rotation {
        let mut r = Rotation::empty(self.p);
        r.set(v, &self.delta);
        r
    }

    /// As [`Operators::rotation`], rebuilding `rot` in place (no allocation).
    pub fn rotation_into(&self, v: [f64; 3], rot: &mut Rotation) {
        assert_eq!(rot.order(), self.p);
        rot.set(v, &self.delta);
    }
}

#[cfg(test)]
mod tests;
