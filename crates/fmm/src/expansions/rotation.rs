//! Wigner rotations of expansions (core paper Eq. 30-35).
//!
//! A rotation is built for a direction `v = (|v|, theta, phi)`; it maps coefficients of the
//! Racah-normalized harmonics `C_n^m` (see [`super`]) from the original frame to the frame
//! `x' = R_y(-theta) R_z(-phi) x`, in which `v` points along `+z`, and back.
//!
//! * forward:  `c'_{m'} = sum_m W^n_{m'm}(theta) e^{i m phi} c_m`,
//! * backward: `c_m = e^{-i m phi} sum_{m'} W^n_{m'm}(theta) c'_{m'}` (`W` is orthogonal),
//!
//! with `C_n^m(R_y(theta) x) = sum_{m'} W^n_{m'm}(theta) C_n^{m'}(x)`, i.e.
//! `W^n(theta) = d^n(-theta)`, the Wigner small-d matrix (paper Eq. 32) of the opposite angle.
//!
//! Instead of the recurrences of White & Head-Gordon (paper Eq. 33-35, whose `tan(theta/2)`
//! is singular at `theta = pi`, i.e. for translations along `-z`), `d^n(beta)` is obtained from
//! the fixed matrix `Delta^n = d^n(pi/2)`, computed once per order in exact integer arithmetic:
//! `d^n_{m'm}(beta) = sum_k Delta^n_{k m'} Delta^n_{k m} cos((m' - m) pi/2 - k beta)`
//! (from `R_y(b) = R_z(-pi/2) R_y(-pi/2) R_z(b) R_y(pi/2) R_z(pi/2)`); every term is bounded by
//! one, so it is accurate to round-off for every angle and every `n <= 20`.
//!
//! Since the stored coefficients have `m >= 0` only, with `c_{-m} = (-1)^m conj(c_m)`, each
//! degree's matrix is folded into two real `(n+1) x (n+1)` matrices acting on the real and the
//! imaginary parts: `c'_{m'} = sum_{m>=0} (P_{m'm} Re g_m + i Q_{m'm} Im g_m)`. Applying a
//! rotation to one scalar expansion costs `2 sum_n (n+1)^2 ~ 2p^3/3` real multiply-adds.

use super::Complex64;

/// Offset of degree `n`'s `(2n+1)^2` block in the `Delta` table (`sum_{k<n} (2k+1)^2`;
/// written so that `n = 0` does not underflow).
#[inline(always)]
fn delta_offset(n: usize) -> usize {
    (4 * n * n * n - n) / 3
}

/// Offset of degree `n`'s `(n+1)^2` block in a folded rotation matrix.
#[inline(always)]
pub(crate) fn sq_offset(n: usize) -> usize {
    n * (n + 1) * (2 * n + 1) / 6
}

fn binomial(n: i64, k: i64) -> i128 {
    if k < 0 || k > n {
        return 0;
    }
    let k = k.min(n - k);
    let mut r: i128 = 1;
    for i in 0..k {
        r = r * (n - i) as i128 / (i + 1) as i128;
    }
    r
}

/// `Delta^n = d^n(pi/2)` for `n = 0..=p`, flat, block `n` at `delta_offset(n)`, entry
/// `(k + n) * (2n + 1) + (m + n)` for `d^n_{km}(pi/2)`.
///
/// `d^n_{km}(pi/2) = 2^{-n} sqrt((n+k)!(n-k)!/((n+m)!(n-m)!))
///   sum_s (-1)^{k-m+s} C(n+m, s) C(n-m, n-k-s)` (Wigner's formula at `beta = pi/2`), the sum
/// evaluated exactly in `i128`.
pub fn delta_table(p: usize) -> Vec<f64> {
    let mut out = vec![0.0; delta_offset(p + 1)];
    let lf = |k: usize| -> f64 { (1..=k).map(|i| (i as f64).ln()).sum() };
    for n in 0..=p {
        let ni = n as i64;
        let w = 2 * n + 1;
        for k in -ni..=ni {
            for m in -ni..=ni {
                let s_lo = 0.max(m - k);
                let s_hi = (ni + m).min(ni - k);
                let mut sum: i128 = 0;
                for s in s_lo..=s_hi {
                    let t = binomial(ni + m, s) * binomial(ni - m, ni - k - s);
                    if (k - m + s).rem_euclid(2) == 0 {
                        sum += t;
                    } else {
                        sum -= t;
                    }
                }
                let ratio = 0.5
                    * (lf((ni + k) as usize) + lf((ni - k) as usize)
                        - lf((ni + m) as usize)
                        - lf((ni - m) as usize));
                let v = sum as f64 * (ratio - ni as f64 * std::f64::consts::LN_2).exp();
                out[delta_offset(n) + (k + ni) as usize * w + (m + ni) as usize] = v;
            }
        }
    }
    out
}

/// The rotation for one direction: phases `e^{i m phi}` and, per degree, the folded forward and
/// backward matrices. Built by [`crate::operators::Operators::rotation`].
#[derive(Clone, Debug)]
pub struct Rotation {
    pub(crate) p: usize,
    pub(crate) theta: f64,
    pub(crate) phi: f64,
    /// `e^{i m phi}`, `m = 0..=p`.
    pub(crate) phase: Vec<Complex64>,
    /// forward folded matrices `[P, Q]`, degree block at `sq_offset(n)`, row `m'`, column `m`.
    pub(crate) fwd: Vec<[f64; 2]>,
    /// backward folded matrices `[P, Q]`, degree block at `sq_offset(n)`, row `m`, column `m'`.
    pub(crate) bwd: Vec<[f64; 2]>,
    /// work row of `W^n_{m'm}`, `m = -n..=n` (kept to avoid allocation when rebuilt).
    work: Vec<f64>,
    trig: Vec<(f64, f64)>,
}

impl Rotation {
    /// Empty rotation of order `p` (identity once [`Rotation::set`] is called with `+z`).
    pub fn empty(p: usize) -> Self {
        let sq = sq_offset(p + 1);
        Self {
            p,
            theta: 0.0,
            phi: 0.0,
            phase: vec![Complex64::new(1.0, 0.0); p + 1],
            fwd: vec![[0.0; 2]; sq],
            bwd: vec![[0.0; 2]; sq],
            work: vec![0.0; (p + 1) * (2 * p + 1)],
            trig: vec![(0.0, 0.0); p + 1],
        }
    }

    /// Order of the rotation.
    pub fn order(&self) -> usize {
        self.p
    }

    /// Polar and azimuthal angle of the direction this rotation takes to `+z`.
    pub fn angles(&self) -> (f64, f64) {
        (self.theta, self.phi)
    }

    /// Rebuilds the rotation in place for direction `v` (no allocation); `delta` from
    /// [`delta_table`] of order `>= p`. Cost `O(p^4)` (done once per direction and cached).
    pub fn set(&mut self, v: [f64; 3], delta: &[f64]) {
        let rxy = (v[0] * v[0] + v[1] * v[1]).sqrt();
        assert!(rxy > 0.0 || v[2] != 0.0, "rotation: zero direction vector");
        let theta = rxy.atan2(v[2]);
        let phi = if rxy > 0.0 { v[1].atan2(v[0]) } else { 0.0 };
        self.set_angles(theta, phi, delta);
    }

    /// Rebuilds the rotation for polar angle `theta` and azimuth `phi`.
    pub fn set_angles(&mut self, theta: f64, phi: f64, delta: &[f64]) {
        let p = self.p;
        self.theta = theta;
        self.phi = phi;
        for m in 0..=p {
            self.phase[m] = Complex64::from_polar(1.0, m as f64 * phi);
            let (s, c) = (m as f64 * theta).sin_cos();
            self.trig[m] = (c, s);
        }
        for n in 0..=p {
            let ni = n as isize;
            let w = 2 * n + 1;
            let dblk = &delta[delta_offset(n)..delta_offset(n + 1)];
            // W^n_{m'm}(theta) = d^n_{m'm}(-theta)
            //   = sum_k D_{km'} D_{km} cos((m' - m) pi/2 + k theta), rows m' >= 0.
            for mp in 0..=ni {
                for m in -ni..=ni {
                    let j = (mp - m).rem_euclid(4);
                    let mut acc = 0.0;
                    for k in -ni..=ni {
                        let dd = dblk[(k + ni) as usize * w + (mp + ni) as usize]
                            * dblk[(k + ni) as usize * w + (m + ni) as usize];
                        let (c, s) = self.trig[k.unsigned_abs()];
                        let s = if k < 0 { -s } else { s };
                        // cos(j pi/2 + x)
                        let t = match j {
                            0 => c,
                            1 => -s,
                            2 => -c,
                            _ => s,
                        };
                        acc += dd * t;
                    }
                    self.work[mp as usize * w + (m + ni) as usize] = acc;
                }
            }
            let wv = |mp: isize, m: isize| self.work[mp as usize * w + (m + ni) as usize];
            let off = sq_offset(n);
            let nb = n + 1;
            for mp in 0..=ni {
                for m in 0..=ni {
                    let (pf, qf) = if m == 0 {
                        (wv(mp, 0), 0.0)
                    } else {
                        let e = if m % 2 == 0 { wv(mp, -m) } else { -wv(mp, -m) };
                        (wv(mp, m) + e, wv(mp, m) - e)
                    };
                    self.fwd[off + mp as usize * nb + m as usize] = [pf, qf];
                    // backward: row m, column m'; for m' > 0 the term of -m' is folded in:
                    // W_{m'm} + (-1)^{m'} W_{-m',m} = W_{m'm} + (-1)^m W_{m',-m}.
                    let (pb, qb) = if mp == 0 {
                        (wv(0, m), 0.0)
                    } else {
                        let e = if m % 2 == 0 { wv(mp, -m) } else { -wv(mp, -m) };
                        (wv(mp, m) + e, wv(mp, m) - e)
                    };
                    self.bwd[off + m as usize * nb + mp as usize] = [pb, qb];
                }
            }
        }
    }

    /// Rotates one scalar expansion (half storage, `index` layout) to the rotated frame.
    /// Reference helper (tests); the operators use fused three-component loops.
    pub fn forward(&self, input: &[Complex64], out: &mut [Complex64]) {
        let mut g = vec![Complex64::default(); self.p + 1];
        for n in 0..=self.p {
            for m in 0..=n {
                g[m] = self.phase[m] * input[super::index(n, m)];
            }
            let off = sq_offset(n);
            for mp in 0..=n {
                let (mut re, mut im) = (0.0, 0.0);
                for m in 0..=n {
                    let [a, b] = self.fwd[off + mp * (n + 1) + m];
                    re += a * g[m].re;
                    im += b * g[m].im;
                }
                out[super::index(n, mp)] = Complex64::new(re, im);
            }
        }
    }

    /// Inverse of [`Rotation::forward`].
    pub fn backward(&self, input: &[Complex64], out: &mut [Complex64]) {
        for n in 0..=self.p {
            let off = sq_offset(n);
            for m in 0..=n {
                let (mut re, mut im) = (0.0, 0.0);
                for mp in 0..=n {
                    let c = input[super::index(n, mp)];
                    let [a, b] = self.bwd[off + m * (n + 1) + mp];
                    re += a * c.re;
                    im += b * c.im;
                }
                out[super::index(n, m)] = self.phase[m].conj() * Complex64::new(re, im);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::harmonics::{knm, regular};
    use super::super::{index, ncoef};
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn fact(n: i64) -> f64 {
        (1..=n).fold(1.0, |a, k| a * k as f64)
    }

    /// Wigner's explicit formula (accurate for small n only).
    fn wigner_d(n: i64, mp: i64, m: i64, beta: f64) -> f64 {
        let (c, s) = ((beta / 2.0).cos(), (beta / 2.0).sin());
        let mut sum = 0.0;
        for k in 0.max(m - mp)..=(n + m).min(n - mp) {
            let sign = if (mp - m + k) % 2 == 0 { 1.0 } else { -1.0 };
            sum += sign * (fact(n + mp) * fact(n - mp) * fact(n + m) * fact(n - m)).sqrt()
                / (fact(n + m - k) * fact(k) * fact(mp - m + k) * fact(n - mp - k))
                * c.powi((2 * n + m - mp - 2 * k) as i32)
                * s.powi((mp - m + 2 * k) as i32);
        }
        sum
    }

    /// Racah-normalized C_n^m(x / |x|) for m >= 0 via the solid harmonics.
    fn racah(p: usize, x: [f64; 3]) -> Vec<Complex64> {
        let r = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
        let mut h = vec![Complex64::default(); ncoef(p)];
        regular(p, x.map(|c| c / r), &mut h);
        for n in 0..=p {
            for m in 0..=n {
                h[index(n, m)] *= knm(n, m);
            }
        }
        h
    }

    #[test]
    fn delta_based_d_matches_wigner_formula() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let p = 6;
        let delta = delta_table(p);
        let mut rot = Rotation::empty(p);
        for _ in 0..10 {
            let theta = rng.gen_range(0.0..std::f64::consts::PI);
            rot.set_angles(theta, 0.0, &delta);
            for n in 0..=p {
                let ni = n as isize;
                let w = 2 * n + 1;
                // recompute a row via set's work buffer semantics: W(theta) = d(-theta)
                for mp in 0..=ni {
                    for m in -ni..=ni {
                        let mut acc = 0.0;
                        for k in -ni..=ni {
                            let dd = delta
                                [delta_offset(n) + (k + ni) as usize * w + (mp + ni) as usize]
                                * delta
                                    [delta_offset(n) + (k + ni) as usize * w + (m + ni) as usize];
                            acc += dd
                                * (((mp - m) as f64) * std::f64::consts::FRAC_PI_2
                                    + k as f64 * theta)
                                    .cos();
                        }
                        let e = wigner_d(n as i64, mp as i64, m as i64, -theta);
                        assert!((acc - e).abs() < 1e-13, "n {n} m' {mp} m {m}: {acc} {e}");
                    }
                }
            }
        }
    }

    #[test]
    fn rotation_maps_harmonics_and_round_trips() {
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        let p = 20;
        let delta = delta_table(p);
        let mut rot = Rotation::empty(p);
        let dirs: Vec<[f64; 3]> = vec![
            [0.0, 0.0, 1.0],
            [0.0, 0.0, -1.0],
            [1.0, 0.0, 0.0],
            [0.0, -1.0, 0.0],
            [0.3, -0.4, 0.5],
            [-0.1, 0.2, -2.0],
        ];
        for v in dirs {
            rot.set(v, &delta);
            // rotated frame x' = Ry(-theta) Rz(-phi) x; check that a function with
            // coefficients c (on C_n^m) has coefficients forward(c) in the rotated frame.
            let (t, f) = rot.angles();
            let mut c = vec![Complex64::default(); ncoef(p)];
            for n in 0..=p {
                for m in 0..=n {
                    c[index(n, m)] = if m == 0 {
                        Complex64::new(rng.gen_range(-1.0..1.0), 0.0)
                    } else {
                        Complex64::new(rng.gen_range(-1.0..1.0), rng.gen_range(-1.0..1.0))
                    };
                }
            }
            let mut cr = vec![Complex64::default(); ncoef(p)];
            rot.forward(&c, &mut cr);
            let mut back = vec![Complex64::default(); ncoef(p)];
            rot.backward(&cr, &mut back);
            for i in 0..ncoef(p) {
                assert!(
                    (back[i] - c[i]).norm() < 1e-13,
                    "round trip {i} dir {v:?}: {} vs {}",
                    back[i],
                    c[i]
                );
            }
            // the direction itself goes to +z
            let rz = |a: f64, x: [f64; 3]| {
                [
                    a.cos() * x[0] - a.sin() * x[1],
                    a.sin() * x[0] + a.cos() * x[1],
                    x[2],
                ]
            };
            let ry = |a: f64, x: [f64; 3]| {
                [
                    a.cos() * x[0] + a.sin() * x[2],
                    x[1],
                    -a.sin() * x[0] + a.cos() * x[2],
                ]
            };
            let vp = ry(-t, rz(-f, v));
            assert!(
                vp[0].abs() < 1e-14 && vp[1].abs() < 1e-14 && vp[2] > 0.0,
                "{vp:?}"
            );
            for _ in 0..5 {
                let x = [
                    rng.gen_range(-1.0..1.0),
                    rng.gen_range(-1.0..1.0),
                    rng.gen_range(-1.0..1.0),
                ];
                let xp = ry(-t, rz(-f, x));
                let (h, hp) = (racah(p, x), racah(p, xp));
                for n in 0..=p {
                    let eval = |cc: &[Complex64], hh: &[Complex64]| {
                        let mut s = cc[index(n, 0)].re * hh[index(n, 0)].re;
                        for m in 1..=n {
                            s += 2.0 * (cc[index(n, m)] * hh[index(n, m)]).re;
                        }
                        s
                    };
                    let (a, b) = (eval(&c, &h), eval(&cr, &hp));
                    assert!(
                        (a - b).abs() < 1e-12 * (n as f64 + 1.0),
                        "n {n}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
