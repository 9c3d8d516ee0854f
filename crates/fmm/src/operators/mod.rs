//! FMM operators for the three Laplace potentials `phi_c = sum_j alpha_jc / |x - x_j|`
//! (core paper Eq. 12-35), with velocity `u = curl(phi)` and stretching
//! `s = (alpha_i . grad) curl(phi)`, all **without** the factor `1/(4 pi)`.
//!
//! Storage and normalization: see [`crate::expansions`] (coefficients of the Racah-normalized
//! harmonics, the core paper's `M_n^m` of Eq. 12 and `L_n^m` of Eq. 13). Translation theorems
//! are those of the scaled solid harmonics `R`, `I` of [`crate::expansions::harmonics`]
//! (Epton & Dembart 1995; Dehnen 2014, Eq. 40-49).
//!
//! | function | core paper | cost |
//! |---|---|---|
//! | [`Operators::p2m`] | Eq. 12 (`M_j`) | `O(p^2)` per source |
//! | [`Operators::m2m`] | Eq. 26 + 30-32 (rotate, shift along z, rotate back) | `O(p^3)` |
//! | [`Operators::m2l`] | Eq. 27 + 30-32 | `O(p^3)` |
//! | [`Operators::m2l_batch`] | the same, up to [`M2L_BATCH`] translations of one direction at once | `O(p^3)` |
//! | [`Operators::l2l`] | Eq. 28 + 30-32 | `O(p^3)` |
//! | [`Operators::l2p`] | Eq. 19, 21 (`curl` / Hessian of the local expansion) | `O(p^2)` per target |
//! | [`Operators::m2p`] | Eq. 18, 20 | `O(p^2)` per target |
//! | [`p2p::p2p`], [`p2p::p2p_mutual`] | Eq. 5, 7, 9 (one-sided; both sides of each pair) | per pair |
//! | `*_direct` | plain `O(p^4)` translations (test references) | `O(p^4)` |
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

pub mod p2p;
pub mod potential;

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

/// Largest number of translations of one [`Operators::m2l_batch`] call.
pub const M2L_BATCH: usize = 4;

/// Work buffers of [`Operators::m2l_batch`] (per thread; no allocation in hot calls).
#[derive(Clone, Debug)]
pub struct BatchScratch {
    a: Vec<f64x4>,
    b: Vec<f64x4>,
    g: Vec<f64x4>,
}

impl BatchScratch {
    pub fn new(p: usize) -> Self {
        Self {
            a: vec![f64x4::splat(0.0); 6 * ncoef(p)],
            b: vec![f64x4::splat(0.0); 6 * ncoef(p)],
            g: vec![f64x4::splat(0.0); 6 * (p + 1)],
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

    /// P2M (paper Eq. 12): accumulates the multipole about `center` of point sources.
    pub fn p2m(
        &self,
        center: [f64; 3],
        position: &[[f64; 3]],
        strength: &[[f64; 3]],
        multipole: &mut [Complex64],
    ) {
        let p = self.p;
        let nc = ncoef(p);
        assert!(multipole.len() >= 3 * nc && strength.len() == position.len());
        let mut r = [Complex64::default(); HALF_MAX];
        for (x, a) in position.iter().zip(strength) {
            regular(p, sub(*x, center), &mut r);
            for i in 0..nc {
                let w = r[i].conj() * self.k[i];
                multipole[i] += w * a[0];
                multipole[nc + i] += w * a[1];
                multipole[2 * nc + i] += w * a[2];
            }
        }
    }

    // ----- rotation kernels, three components fused --------------------------------------

    /// `w.a` = forward rotation of `input` (component-major, `index` layout), m-major.
    #[inline]
    fn rotate_forward(&self, rot: &Rotation, input: &[Complex64], w: &mut Work) {
        let p = self.p;
        let nc = ncoef(p);
        for n in 0..=p {
            for m in 0..=n {
                let ph = rot.phase[m];
                let i = index(n, m);
                let (g0, g1) = pack3(ph * input[i], ph * input[nc + i], ph * input[2 * nc + i]);
                w.g[2 * m] = g0;
                w.g[2 * m + 1] = g1;
            }
            let off = sq_offset(n);
            let nb = n + 1;
            let g = &w.g[..2 * nb];
            for mp in 0..=n {
                let pq = &rot.fwd[off + mp * nb..off + mp * nb + nb];
                let (mut s0, mut s1) = (f64x4::splat(0.0), f64x4::splat(0.0));
                for (c, g) in pq.iter().zip(g.chunks_exact(2)) {
                    let ab = ab2(c);
                    s0 = ab.mul_add(g[0], s0);
                    s1 = ab.mul_add(g[1], s1);
                }
                let o = (self.moff[mp] + n - mp) * 2;
                w.a[o] = s0;
                w.a[o + 1] = s1;
            }
        }
    }

    /// `out += ` backward rotation of `w.b` (m-major) into component-major `index` layout.
    #[inline]
    fn rotate_backward_acc(&self, rot: &Rotation, w: &Work, out: &mut [Complex64]) {
        let p = self.p;
        let nc = ncoef(p);
        let mut y = [f64x4::splat(0.0); 2 * (MAX_ORDER + 1)];
        for n in 0..=p {
            let off = sq_offset(n);
            let nb = n + 1;
            // gather degree n of w.b contiguously
            for mp in 0..nb {
                let o = (self.moff[mp] + n - mp) * 2;
                y[2 * mp] = w.b[o];
                y[2 * mp + 1] = w.b[o + 1];
            }
            let y = &y[..2 * nb];
            for m in 0..=n {
                let pq = &rot.bwd[off + m * nb..off + m * nb + nb];
                let (mut s0, mut s1) = (f64x4::splat(0.0), f64x4::splat(0.0));
                for (c, y) in pq.iter().zip(y.chunks_exact(2)) {
                    let ab = ab2(c);
                    s0 = ab.mul_add(y[0], s0);
                    s1 = ab.mul_add(y[1], s1);
                }
                let (s0, s1) = (s0.to_array(), s1.to_array());
                let ph = rot.phase[m].conj();
                let i = index(n, m);
                out[i] += ph * Complex64::new(s0[0], s0[1]);
                out[nc + i] += ph * Complex64::new(s0[2], s0[3]);
                out[2 * nc + i] += ph * Complex64::new(s1[0], s1[1]);
            }
        }
    }

    /// z-axis translation `w.b[m][i] = post(i) sum_j T[m][i][j] pw(i, j) w.a[m][j]`, with
    /// `KIND` = [`Z_LOWER`] (M2M: `j <= i`, `tau^{i-j}`), [`Z_FULL`] (M2L: all `j`,
    /// `s^{-(m+j)} s^{-(m+i+1)}`) or [`Z_UPPER`] (L2L: `j >= i`, `tau^{j-i}`).
    #[inline]
    fn translate_z<const KIND: u8>(&self, table: &[f64], w: &mut Work) {
        let p = self.p;
        for m in 0..=p {
            let side = p + 1 - m;
            let blk = &table[self.toff[m]..self.toff[m] + side * side];
            let base = self.moff[m] * 2;
            let a = &w.a[base..base + side * 2];
            for i in 0..side {
                let (lo, hi) = match KIND {
                    Z_LOWER => (0, i + 1),
                    Z_FULL => (0, side),
                    _ => (i, side),
                };
                let row = &blk[i * side + lo..i * side + hi];
                let aj = &a[2 * lo..2 * hi];
                let (mut s0, mut s1) = (f64x4::splat(0.0), f64x4::splat(0.0));
                match KIND {
                    Z_LOWER => {
                        let pw = &w.pw[..=i];
                        for (jj, (t, x)) in row.iter().zip(aj.chunks_exact(2)).enumerate() {
                            let t = f64x4::splat(t * pw[i - jj]);
                            s0 = t.mul_add(x[0], s0);
                            s1 = t.mul_add(x[1], s1);
                        }
                    }
                    Z_FULL => {
                        let pw = &w.pw[m..m + side];
                        for ((t, x), q) in row.iter().zip(aj.chunks_exact(2)).zip(pw) {
                            let t = f64x4::splat(t * q);
                            s0 = t.mul_add(x[0], s0);
                            s1 = t.mul_add(x[1], s1);
                        }
                    }
                    _ => {
                        let pw = &w.pw[..side - i];
                        for ((t, x), q) in row.iter().zip(aj.chunks_exact(2)).zip(pw) {
                            let t = f64x4::splat(t * q);
                            s0 = t.mul_add(x[0], s0);
                            s1 = t.mul_add(x[1], s1);
                        }
                    }
                }
                let o = base + 2 * i;
                if KIND == Z_FULL {
                    let post = f64x4::splat(w.pw[m + i + 1]);
                    w.b[o] = s0 * post;
                    w.b[o + 1] = s1 * post;
                } else {
                    w.b[o] = s0;
                    w.b[o + 1] = s1;
                }
            }
        }
    }

    // ----- rotation-based translations ---------------------------------------------------

    /// M2M (paper Eq. 26, 30-32), rotation-based `O(p^3)`: accumulates the child multipole
    /// shifted to the parent centre.
    pub fn m2m(
        &self,
        child_center: [f64; 3],
        parent_center: [f64; 3],
        child: &[Complex64],
        parent: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        let v = sub(parent_center, child_center);
        scratch.rot.set(v, &self.delta);
        self.m2m_impl(&scratch.rot, norm(v), child, parent, &mut scratch.work);
    }

    /// M2M with `rot = self.rotation(parent_center - child_center)` and
    /// `distance = |parent_center - child_center|`.
    pub fn m2m_with_rotation(
        &self,
        rot: &Rotation,
        distance: f64,
        child: &[Complex64],
        parent: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        self.m2m_impl(rot, distance, child, parent, &mut scratch.work);
    }

    fn m2m_impl(
        &self,
        rot: &Rotation,
        distance: f64,
        child: &[Complex64],
        parent: &mut [Complex64],
        w: &mut Work,
    ) {
        debug_assert_eq!(rot.order(), self.p);
        self.rotate_forward(rot, child, w);
        // in the rotated frame the child centre sits at -distance on the z axis
        let tau = -distance;
        let mut t = 1.0;
        for k in 0..=self.p {
            w.pw[k] = t;
            t *= tau;
        }
        self.translate_z::<Z_LOWER>(&self.t_m2m, w);
        self.rotate_backward_acc(rot, w, parent);
    }

    /// M2L (paper Eq. 27, 30-32), rotation-based `O(p^3)`; builds the rotation on the fly
    /// (`O(p^4)`, use [`Operators::m2l_with_rotation`] with cached rotations in hot loops).
    pub fn m2l(
        &self,
        source_center: [f64; 3],
        target_center: [f64; 3],
        multipole: &[Complex64],
        local: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        let v = sub(target_center, source_center);
        scratch.rot.set(v, &self.delta);
        self.m2l_impl(&scratch.rot, norm(v), multipole, local, &mut scratch.work);
    }

    /// M2L with `rot = self.rotation(target_center - source_center)` and
    /// `distance = |target_center - source_center|`. `O(p^3)`, no allocation, the rotation
    /// is shared by the three components.
    pub fn m2l_with_rotation(
        &self,
        rot: &Rotation,
        distance: f64,
        multipole: &[Complex64],
        local: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        self.m2l_impl(rot, distance, multipole, local, &mut scratch.work);
    }

    fn m2l_impl(
        &self,
        rot: &Rotation,
        distance: f64,
        multipole: &[Complex64],
        local: &mut [Complex64],
        w: &mut Work,
    ) {
        debug_assert_eq!(rot.order(), self.p);
        self.rotate_forward(rot, multipole, w);
        let inv = 1.0 / distance;
        let mut t = 1.0;
        for k in 0..=self.p + 1 {
            w.pw[k] = t;
            t *= inv;
        }
        self.translate_z::<Z_FULL>(&self.t_m2l, w);
        self.rotate_backward_acc(rot, w, local);
    }

    /// Batched M2L: `dist.len()` (1 to [`M2L_BATCH`]) translations that share the rotation
    /// `rot` (one direction), from the multipoles at complex offsets `src` of `multipoles` into
    /// the locals at offsets `dst` of `locals`, at distances `dist` (each as
    /// [`Operators::m2l_with_rotation`]; equal up to round-off). The coefficients of all lanes
    /// (3 components each) are packed densely into SIMD vectors, so that every rotation and
    /// z-translation entry is loaded once for all of them and the multiply-adds run in 3 or 6
    /// independent chains. The distance powers of the z-translation are applied per degree
    /// while packing and unpacking. Every lane is computed independently of the others, and the
    /// lanes are added to `locals` in order (two lanes may share a target).
    #[allow(clippy::too_many_arguments)]
    pub fn m2l_batch(
        &self,
        rot: &Rotation,
        dist: &[f64],
        multipoles: &[Complex64],
        src: &[usize],
        locals: &mut [Complex64],
        dst: &[usize],
        scratch: &mut BatchScratch,
    ) {
        let lanes = dist.len();
        assert!((1..=M2L_BATCH).contains(&lanes) && src.len() == lanes && dst.len() == lanes);
        debug_assert_eq!(rot.order(), self.p);
        if lanes <= 2 {
            self.m2l_lanes::<3>(rot, dist, multipoles, src, locals, dst, scratch);
        } else {
            self.m2l_lanes::<6>(rot, dist, multipoles, src, locals, dst, scratch);
        }
    }

    /// [`Operators::m2l_batch`] with `V` vectors per coefficient slot, `2 V / 3` lanes (unused
    /// lanes repeat the first one and are not stored). Complex number `q = 3 lane + component`
    /// of a slot lives in vector `q / 2`, half `q % 2`.
    #[allow(clippy::too_many_arguments)]
    fn m2l_lanes<const V: usize>(
        &self,
        rot: &Rotation,
        dist: &[f64],
        multipoles: &[Complex64],
        src: &[usize],
        locals: &mut [Complex64],
        dst: &[usize],
        w: &mut BatchScratch,
    ) {
        let p = self.p;
        let nc = ncoef(p);
        let nl = 2 * V / 3;
        let lanes = dist.len();
        let lane_of = |q: usize| if q / 3 < lanes { q / 3 } else { 0 };
        // complex offset of number q of a slot in the input; per-vector inverse distances
        let mut sq = [0usize; 12];
        for q in 0..3 * nl {
            sq[q] = src[lane_of(q)] + (q % 3) * nc;
        }
        let inv: [f64x4; V] = std::array::from_fn(|k| {
            let (a, b) = (1.0 / dist[lane_of(2 * k)], 1.0 / dist[lane_of(2 * k + 1)]);
            f64x4::new([a, a, b, b])
        });
        // dist^{-n} per vector while packing degree n
        let mut pw = [f64x4::splat(1.0); V];
        let a = &mut w.a[..V * nc];
        let g = &mut w.g[..V * (p + 1)];
        for n in 0..=p {
            for m in 0..=n {
                let ph = rot.phase[m];
                let (c, sn) = (
                    f64x4::splat(ph.re),
                    f64x4::new([-ph.im, ph.im, -ph.im, ph.im]),
                );
                let i = index(n, m);
                for k in 0..V {
                    let (z0, z1) = (multipoles[sq[2 * k] + i], multipoles[sq[2 * k + 1] + i]);
                    let v = f64x4::new([z0.re, z0.im, z1.re, z1.im]);
                    // (re, im) * e^{i m phi} * dist^{-n}
                    g[m * V + k] = v.mul_add(c, swap_re_im(v) * sn) * pw[k];
                }
            }
            let off = sq_offset(n);
            let nb = n + 1;
            for mp in 0..=n {
                let pq = &rot.fwd[off + mp * nb..off + mp * nb + nb];
                let mut s = [f64x4::splat(0.0); V];
                for (c, gm) in pq.iter().zip(g.chunks_exact(V)) {
                    let ab = ab2(c);
                    for k in 0..V {
                        s[k] = ab.mul_add(gm[k], s[k]);
                    }
                }
                let o = (self.moff[mp] + n - mp) * V;
                a[o..o + V].copy_from_slice(&s);
            }
            for k in 0..V {
                pw[k] *= inv[k];
            }
        }
        // z translation with the bare factors: b[m][i] = sum_j T[m][i][j] a[m][j]
        let b = &mut w.b[..V * nc];
        for m in 0..=p {
            let side = p + 1 - m;
            let blk = &self.t_m2l[self.toff[m]..self.toff[m] + side * side];
            let base = self.moff[m] * V;
            let am = &a[base..base + side * V];
            for i in 0..side {
                let row = &blk[i * side..(i + 1) * side];
                let mut s = [f64x4::splat(0.0); V];
                for (t, x) in row.iter().zip(am.chunks_exact(V)) {
                    let t = f64x4::splat(*t);
                    for k in 0..V {
                        s[k] = t.mul_add(x[k], s[k]);
                    }
                }
                let o = base + i * V;
                b[o..o + V].copy_from_slice(&s);
            }
        }
        // back-rotation, then e^{-i m phi} dist^{-(n+1)}, into `a` in `index` order
        pw = inv;
        let y = &mut w.g[..V * (p + 1)];
        for n in 0..=p {
            let off = sq_offset(n);
            let nb = n + 1;
            for mp in 0..nb {
                let o = (self.moff[mp] + n - mp) * V;
                y[mp * V..(mp + 1) * V].copy_from_slice(&b[o..o + V]);
            }
            for m in 0..=n {
                let pq = &rot.bwd[off + m * nb..off + m * nb + nb];
                let mut s = [f64x4::splat(0.0); V];
                for (c, ym) in pq.iter().zip(y.chunks_exact(V)) {
                    let ab = ab2(c);
                    for k in 0..V {
                        s[k] = ab.mul_add(ym[k], s[k]);
                    }
                }
                let ph = rot.phase[m];
                let (c, sn) = (
                    f64x4::splat(ph.re),
                    f64x4::new([ph.im, -ph.im, ph.im, -ph.im]),
                );
                let o = index(n, m) * V;
                for k in 0..V {
                    a[o + k] = s[k].mul_add(c, swap_re_im(s[k]) * sn) * pw[k];
                }
            }
            for k in 0..V {
                pw[k] *= inv[k];
            }
        }
        // add lane by lane
        for l in 0..lanes {
            for c in 0..3 {
                let q = 3 * l + c;
                let (k, h) = (q / 2, 2 * (q % 2));
                let out = &mut locals[dst[l] + c * nc..dst[l] + (c + 1) * nc];
                for (i, o) in out.iter_mut().enumerate() {
                    let v = a[i * V + k].to_array();
                    *o += Complex64::new(v[h], v[h + 1]);
                }
            }
        }
    }

    /// L2L (paper Eq. 28, 30-32), rotation-based `O(p^3)`.
    pub fn l2l(
        &self,
        parent_center: [f64; 3],
        child_center: [f64; 3],
        parent: &[Complex64],
        child: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        let v = sub(child_center, parent_center);
        scratch.rot.set(v, &self.delta);
        self.l2l_impl(&scratch.rot, norm(v), parent, child, &mut scratch.work);
    }

    /// L2L with `rot = self.rotation(child_center - parent_center)` and
    /// `distance = |child_center - parent_center|`.
    pub fn l2l_with_rotation(
        &self,
        rot: &Rotation,
        distance: f64,
        parent: &[Complex64],
        child: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        self.l2l_impl(rot, distance, parent, child, &mut scratch.work);
    }

    fn l2l_impl(
        &self,
        rot: &Rotation,
        distance: f64,
        parent: &[Complex64],
        child: &mut [Complex64],
        w: &mut Work,
    ) {
        debug_assert_eq!(rot.order(), self.p);
        self.rotate_forward(rot, parent, w);
        let mut t = 1.0;
        for k in 0..=self.p {
            w.pw[k] = t;
            t *= distance;
        }
        self.translate_z::<Z_UPPER>(&self.t_l2l, w);
        self.rotate_backward_acc(rot, w, child);
    }

    // ----- evaluation --------------------------------------------------------------------

    /// L2P (paper Eq. 19, 21): accumulates velocity `curl(phi)` and stretching
    /// `(alpha . grad) curl(phi)` of the local expansion at the targets (no `1/(4 pi)`).
    pub fn l2p(
        &self,
        center: [f64; 3],
        local: &[Complex64],
        position: &[[f64; 3]],
        alpha: &[[f64; 3]],
        velocity: &mut [[f64; 3]],
        stretching: &mut [[f64; 3]],
    ) {
        let p = self.p;
        let nc = ncoef(p);
        let nf = (p + 1) * (p + 1);
        let mut lf = [[Complex64::default(); (MAX_ORDER + 1) * (MAX_ORDER + 1)]; 3];
        for (c, l) in lf.iter_mut().enumerate() {
            // Lhat = conj(L) K
            expand_full(p, &local[c * nc..(c + 1) * nc], &self.k, true, &mut l[..nf]);
        }
        let mut rh = [Complex64::default(); HALF_MAX];
        let mut rf = [Complex64::default(); FULL_MAX];
        const AB: [(usize, isize); 5] = [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2)];
        for (i, x) in position.iter().enumerate() {
            regular(p, sub(*x, center), &mut rh);
            expand_full(p, &rh, &self.ones, true, &mut rf[..nf]);
            let mut tay = [[Complex64::default(); 5]; 3];
            for j in 0..p {
                let na = if j + 2 <= p { 5 } else { 2 };
                let ji = j as isize;
                for ii in -ji..=ji {
                    let r = rf[full_index(j, ii)];
                    for (q, &(a, b)) in AB.iter().enumerate().take(na) {
                        let at = full_index(j + a, ii + b);
                        tay[0][q] += lf[0][at] * r;
                        tay[1][q] += lf[1][at] * r;
                        tay[2][q] += lf[2][at] * r;
                    }
                }
            }
            accumulate_fields(&tay, alpha[i], &mut velocity[i], &mut stretching[i]);
        }
    }

    /// M2P (paper Eq. 18, 20): accumulates velocity and stretching of the multipole at the
    /// targets (no `1/(4 pi)`); targets must lie outside the sources' sphere.
    pub fn m2p(
        &self,
        center: [f64; 3],
        multipole: &[Complex64],
        position: &[[f64; 3]],
        alpha: &[[f64; 3]],
        velocity: &mut [[f64; 3]],
        stretching: &mut [[f64; 3]],
    ) {
        let p = self.p;
        let nc = ncoef(p);
        let nf = (p + 1) * (p + 1);
        let nf2 = (p + 3) * (p + 3);
        let mut mf = [[Complex64::default(); (MAX_ORDER + 1) * (MAX_ORDER + 1)]; 3];
        for (c, m) in mf.iter_mut().enumerate() {
            // Mhat = M / K
            expand_full(
                p,
                &multipole[c * nc..(c + 1) * nc],
                &self.inv_k,
                false,
                &mut m[..nf],
            );
        }
        let mut ih = [Complex64::default(); HALF_MAX];
        let mut inf = [Complex64::default(); FULL_MAX];
        for (i, x) in position.iter().enumerate() {
            irregular(p + 2, sub(*x, center), &mut ih);
            expand_full(p + 2, &ih, &self.ones, false, &mut inf[..nf2]);
            let mut tay = [[Complex64::default(); 5]; 3];
            for n in 0..=p {
                let ni = n as isize;
                for m in -ni..=ni {
                    let i1 = full_index(n + 1, m);
                    let i2 = full_index(n + 2, m);
                    let iv = [inf[i1], inf[i1 + 1], inf[i2], inf[i2 + 1], inf[i2 + 2]];
                    let at = full_index(n, m);
                    for c in 0..3 {
                        let mv = mf[c][at];
                        tay[c][0] -= mv * iv[0];
                        tay[c][1] -= mv * iv[1];
                        tay[c][2] += mv * iv[2];
                        tay[c][3] += mv * iv[3];
                        tay[c][4] += mv * iv[4];
                    }
                }
            }
            accumulate_fields(&tay, alpha[i], &mut velocity[i], &mut stretching[i]);
        }
    }

    // ----- plain O(p^4) references ---------------------------------------------------------

    fn full_of(&self, half: &[Complex64], scale: &[f64], conj: bool, p: usize) -> Vec<Complex64> {
        let mut f = vec![Complex64::default(); (p + 1) * (p + 1)];
        expand_full(p, half, scale, conj, &mut f);
        f
    }

    /// Plain `O(p^4)` M2L: `Lhat_k^l = (-1)^k sum_{n,m} Mhat_n^m I_{n+k}^{m+l}(t - s)`.
    pub fn m2l_direct(
        &self,
        source_center: [f64; 3],
        target_center: [f64; 3],
        multipole: &[Complex64],
        local: &mut [Complex64],
    ) {
        let p = self.p;
        let nc = ncoef(p);
        let mut ih = vec![Complex64::default(); ncoef(2 * p)];
        irregular(2 * p, sub(target_center, source_center), &mut ih);
        let ones = vec![1.0; ncoef(2 * p)];
        let inf = self.full_of(&ih, &ones, false, 2 * p);
        for c in 0..3 {
            let mf = self.full_of(&multipole[c * nc..(c + 1) * nc], &self.inv_k, false, p);
            for k in 0..=p {
                for l in 0..=k {
                    let mut s = Complex64::default();
                    for n in 0..=p {
                        let ni = n as isize;
                        for m in -ni..=ni {
                            s += mf[full_index(n, m)] * inf[full_index(n + k, m + l as isize)];
                        }
                    }
                    if k % 2 == 1 {
                        s = -s;
                    }
                    local[c * nc + index(k, l)] += s.conj() * self.inv_k[index(k, l)];
                }
            }
        }
    }

    /// Plain `O(p^4)` M2M: `Mhat'_n^m = sum_{k,l} conj(R_k^l(c - P)) Mhat_{n-k}^{m-l}`.
    pub fn m2m_direct(
        &self,
        child_center: [f64; 3],
        parent_center: [f64; 3],
        child: &[Complex64],
        parent: &mut [Complex64],
    ) {
        let p = self.p;
        let nc = ncoef(p);
        let mut rh = vec![Complex64::default(); nc];
        regular(p, sub(child_center, parent_center), &mut rh);
        let rf = self.full_of(&rh, &self.ones, true, p);
        for c in 0..3 {
            let mf = self.full_of(&child[c * nc..(c + 1) * nc], &self.inv_k, false, p);
            for n in 0..=p {
                for m in 0..=n as isize {
                    let mut s = Complex64::default();
                    for k in 0..=n {
                        let ki = k as isize;
                        for l in -ki..=ki {
                            if (m - l).unsigned_abs() <= n - k {
                                s += rf[full_index(k, l)] * mf[full_index(n - k, m - l)];
                            }
                        }
                    }
                    let i = index(n, m as usize);
                    parent[c * nc + i] += s * self.k[i];
                }
            }
        }
    }

    /// Plain `O(p^4)` L2L: `Lhat'_a^b = sum_{j,i} Lhat_{j+a}^{i+b} conj(R_j^i(c - P))`.
    pub fn l2l_direct(
        &self,
        parent_center: [f64; 3],
        child_center: [f64; 3],
        parent: &[Complex64],
        child: &mut [Complex64],
    ) {
        let p = self.p;
        let nc = ncoef(p);
        let mut rh = vec![Complex64::default(); nc];
        regular(p, sub(child_center, parent_center), &mut rh);
        let rf = self.full_of(&rh, &self.ones, true, p);
        for c in 0..3 {
            let lf = self.full_of(&parent[c * nc..(c + 1) * nc], &self.k, true, p);
            for a in 0..=p {
                for b in 0..=a as isize {
                    let mut s = Complex64::default();
                    for j in 0..=(p - a) {
                        let ji = j as isize;
                        for i in -ji..=ji {
                            s += lf[full_index(j + a, i + b)] * rf[full_index(j, i)];
                        }
                    }
                    let at = index(a, b as usize);
                    child[c * nc + at] += s.conj() * self.inv_k[at];
                }
            }
        }
    }
}

/// z-axis translation kinds of [`Operators::translate_z`].
const Z_LOWER: u8 = 0;
const Z_FULL: u8 = 1;
const Z_UPPER: u8 = 2;

#[cfg(test)]
mod tests;
