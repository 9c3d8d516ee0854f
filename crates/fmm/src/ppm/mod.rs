//! Pseudo-particle method (PPM): a far-field representation without multipole coefficients.
//!
//! Core paper (Yokota et al., CPC 180, 2009) Section 3.3, Eq. 36-38, Table 1; after
//! C. R. Anderson, "An implementation of the fast multipole method without multipoles", SIAM
//! J. Sci. Stat. Comput. 13 (1992), and J. Makino, "Yet another fast multipole method without
//! multipoles - pseudoparticle multipole method", J. Comput. Phys. 151 (1999).
//!
//! Each cell carries `K` points `c + a s_k` on a sphere of radius `a = radius_factor * h`
//! (`h` the cell half-width, `(s_k, w_k)` a rule of [`quadrature`] exact to degree `2p`).
//! The field is three scalar Laplace potentials `phi_c(x) = sum_j alpha_jc / |x - x_j|`;
//! velocity `u = curl phi`, stretching `s = (alpha . grad) u`, **without** `1/(4 pi)`.
//!
//! * **Multipole** (Eq. 36, Makino): pseudo-particle strengths
//!   `Q_k = w_k sum_j alpha_j sum_{n<=p} (2n+1) (rho_j/a)^n P_n(cos gamma_jk)`.
//!   With an exact rule these reproduce every multipole moment of degree `<= p` about `c`,
//!   and `Q_k` depends on the sources only through those moments. M2M is P2M applied to the
//!   children's pseudo-particles; since the child set has the same moments `<= p`, and the
//!   parent moments `<= p` depend only on child moments `<= p`, **M2M is exact**: it gives the
//!   same `Q` as P2M at the parent, to round-off, for any radii (tested).
//! * **Local** (Eq. 37 / Anderson's inner formula): the three potentials `g_k = phi(c + b s_k)`
//!   at the target sphere; inside, `phi(x) = sum_k w_k g_k sum_{n<=p} (2n+1) (r/b)^n P_n(cos gamma_k)`,
//!   a harmonic polynomial of degree `<= p` reproduced exactly when `phi` is one, so **L2L is
//!   exact** too. M2L is the singular-kernel sum of the source pseudo-particles at the target
//!   sphere points (`K^2` pairs: a P2P between pseudo-particle sets).
//! * The kernel `H(z; s) = sum_{n<=p} (2n+1) |z|^n P_n(z.s/|z|)` is a polynomial in `z`
//!   (recurrence `(n+1) h_{n+1} = (2n+1)(z.s) h_n - n |z|^2 h_{n-1}`); its monomial
//!   coefficients are tabulated once per rule, so P2M accumulates Cartesian moments
//!   `sum_j alpha_j z_j^a` per particle and L2P evaluates one polynomial (and its gradient and
//!   Hessian) per target: `O(p^3)` work per particle instead of `O(K p)`.
//!
//! **Radius**: see [`DEFAULT_RADIUS_FACTOR`]. Validity conditions: sources of a P2M and
//! targets of an L2P should lie within the sphere (`|x - c| <= a`, i.e. the cell's points
//! within `radius_factor * h`); for M2L the target sphere must be well outside the source
//! sphere (centre distance `d > a_s + b_t` with margin: the error falls like
//! `((a_s + b_t)/ d)^(p+1)`); M2P targets outside the sphere.

pub mod quadrature;
#[cfg(test)]
mod tests;

use quadrature::{RuleKind, SphereRule};

/// Default sphere radius in cell half-widths: `sqrt(3)`, the sphere circumscribing the cell
/// (core paper: "the sphere circumscribing the box").
///
/// Measured (ignored test `radius_scan`, worst of 4 random cells, velocity relative L2 error):
///
/// | p  | P2M->M2P f=1.2 / 1.5 / 1.732 / 2 / 2.5 / 3 | M2L->L2P (d = 7h) f=1.2 .. 2 / 2.5 / 3 |
/// |----|---------------------------------------------|----------------------------------------|
/// | 4  | 6.7e-3 6.9e-3 7.1e-3 7.5e-3 1.8e-2 8.9e-2   | 6.7e-3 / 6.6e-3 / 7.7e-3               |
/// | 6  | 6.3e-4 6.6e-4 6.8e-4 7.2e-4 1.4e-3 1.2e-2   | 4.0e-4 / 4.0e-4 / 5.7e-4               |
/// | 8  | 1.1e-4 1.1e-4 1.1e-4 1.1e-4 1.7e-4 3.3e-3   | 2.1e-5 / 2.1e-5 / 6.3e-5               |
/// | 10 | 1.1e-5 1.1e-5 1.1e-5 1.1e-5 2.3e-5 8.2e-4   | 9.6e-7 / 9.7e-7 / 2.9e-6               |
///
/// The error is flat (truncation of the true sources' expansion dominates) for `f` in
/// `1.2 .. 2` and grows beyond (the aliased degree `> p` moments of the pseudo-particle set
/// scale like `a^(p+1)`, and the M2L spheres approach each other). `sqrt(3)` sits on the
/// plateau and keeps every point of the cell inside its sphere (P2M sources, L2P targets),
/// which the analysis assumes. M2M and L2L are exact for any radius (tested), so they impose
/// no constraint.
pub const DEFAULT_RADIUS_FACTOR: f64 = 1.732_050_807_568_877_2;

/// Pseudo-particle operators of one order `p`.
#[derive(Clone, Debug)]
pub struct PseudoParticles {
    p: usize,
    kind: RuleKind,
    radius_factor: f64,
    points: Vec<[f64; 3]>,
    weights: Vec<f64>,
    /// Monomials `z^a`, `a = (a0, a1, a2)`, `|a| <= p`, ordered by total degree.
    mono: Vec<[usize; 3]>,
    /// Number of monomials of degree `<= p`, `<= p-1`, `<= p-2`.
    nm: [usize; 3],
    /// Index of the monomial `d`-derivative target and factor: `(index, a_d)` (`a_d = 0`: none).
    deriv: Vec<[(usize, f64); 3]>,
    /// `w_k * [z^a] H(z; s_k)`, `K x nm`, row-major.
    wt: Vec<f64>,
}

fn mono_count(p: isize) -> usize {
    if p < 0 {
        0
    } else {
        let p = p as usize;
        (p + 1) * (p + 2) * (p + 3) / 6
    }
}

impl PseudoParticles {
    /// Order `p` in `1..=MAX_ORDER` with the default rule (Hardin-Sloane design for `p <= 10`,
    /// product rule beyond) and [`DEFAULT_RADIUS_FACTOR`].
    pub fn new(p: usize) -> Self {
        Self::with_rule(p, quadrature::rule(p), DEFAULT_RADIUS_FACTOR)
    }

    /// Order `p` with a rule of the given kind and radius factor.
    pub fn with_options(p: usize, kind: RuleKind, radius_factor: f64) -> Self {
        Self::with_rule(p, quadrature::rule_of(p, kind), radius_factor)
    }

    /// Order `p` with an arbitrary rule (for experiments: a rule not exact to `2p` degrades
    /// every operator, M2M included).
    pub fn with_rule(p: usize, rule: &SphereRule, radius_factor: f64) -> Self {
        if let Err(e) = crate::check_order(p, crate::MAX_ORDER) {
            panic!("pseudo-particles: {e}");
        }
        assert!(radius_factor > 0.0);
        let mut mono = Vec::new();
        for deg in 0..=p {
            for a0 in (0..=deg).rev() {
                for a1 in (0..=deg - a0).rev() {
                    mono.push([a0, a1, deg - a0 - a1]);
                }
            }
        }
        let nm = mono.len();
        let side = p + 1;
        let mut lookup = vec![usize::MAX; side * side * side];
        for (i, a) in mono.iter().enumerate() {
            lookup[(a[0] * side + a[1]) * side + a[2]] = i;
        }
        let idx = |a: [usize; 3]| lookup[(a[0] * side + a[1]) * side + a[2]];
        let deriv = mono
            .iter()
            .map(|a| {
                let mut d = [(0usize, 0.0f64); 3];
                for (dir, dd) in d.iter_mut().enumerate() {
                    if a[dir] > 0 {
                        let mut b = *a;
                        b[dir] -= 1;
                        *dd = (idx(b), a[dir] as f64);
                    }
                }
                d
            })
            .collect();
        let k = rule.points.len();
        let mut wt = vec![0.0; k * nm];
        let mut hm1 = vec![0.0; nm];
        let mut h0 = vec![0.0; nm];
        let mut h1 = vec![0.0; nm];
        for (kk, (s, w)) in rule.points.iter().zip(&rule.weights).enumerate() {
            let row = &mut wt[kk * nm..(kk + 1) * nm];
            hm1.iter_mut().for_each(|x| *x = 0.0);
            h0.iter_mut().for_each(|x| *x = 0.0);
            h0[0] = 1.0;
            row[0] = 1.0;
            for n in 0..p {
                // (n+1) h_{n+1} = (2n+1) (z.s) h_n - n |z|^2 h_{n-1}
                h1.iter_mut().for_each(|x| *x = 0.0);
                let c1 = (2 * n + 1) as f64 / (n + 1) as f64;
                let c2 = n as f64 / (n + 1) as f64;
                for i in mono_count(n as isize - 1)..mono_count(n as isize) {
                    let a = mono[i];
                    if h0[i] != 0.0 {
                        for d in 0..3 {
                            let mut b = a;
                            b[d] += 1;
                            h1[idx(b)] += c1 * s[d] * h0[i];
                        }
                    }
                }
                if n >= 1 {
                    for i in mono_count(n as isize - 2)..mono_count(n as isize - 1) {
                        let a = mono[i];
                        if hm1[i] != 0.0 {
                            for d in 0..3 {
                                let mut b = a;
                                b[d] += 2;
                                h1[idx(b)] -= c2 * hm1[i];
                            }
                        }
                    }
                }
                let f = (2 * n + 3) as f64;
                for i in mono_count(n as isize)..mono_count(n as isize + 1) {
                    row[i] += f * h1[i];
                }
                std::mem::swap(&mut hm1, &mut h0);
                std::mem::swap(&mut h0, &mut h1);
            }
            row.iter_mut().for_each(|x| *x *= w);
        }
        Self {
            p,
            kind: rule.kind,
            radius_factor,
            points: rule.points.clone(),
            weights: rule.weights.clone(),
            mono,
            nm: [nm, mono_count(p as isize - 1), mono_count(p as isize - 2)],
            deriv,
            wt,
        }
    }

    pub fn order(&self) -> usize {
        self.p
    }

    /// `K`, the number of pseudo-particles (quadrature points).
    pub fn count(&self) -> usize {
        self.points.len()
    }

    pub fn radius_factor(&self) -> f64 {
        self.radius_factor
    }

    pub fn rule_kind(&self) -> RuleKind {
        self.kind
    }

    /// The `K` unit vectors `s_k`.
    pub fn unit_points(&self) -> &[[f64; 3]] {
        &self.points
    }

    /// Quadrature weights `w_k` (`sum = 1`; all `1/K` for a design).
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// The monomial exponents `a = (a0, a1, a2)`, `|a| <= p`, ordered by total degree (the
    /// columns of [`Self::moment_weights`]).
    pub fn monomial_exponents(&self) -> &[[usize; 3]] {
        &self.mono
    }

    /// The `K x nm` row-major matrix `W[k][a] = w_k [z^a] H(z; s_k)` that maps the Cartesian
    /// moments of a cell (scaled coordinates) to its pseudo-particle strengths (P2M,
    /// `q_k = sum_a W[k][a] m_a`) and a local representation to its polynomial coefficients
    /// (L2P, `c_a = sum_k W[k][a] g_k`): the data a device implementation of P2M and L2P needs.
    pub fn moment_weights(&self) -> &[f64] {
        &self.wt
    }

    /// Number of `f64` in a multipole or local array (`3 K`).
    pub fn len(&self) -> usize {
        3 * self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Positions of the `K` sphere points of a cell.
    pub fn sphere_points(&self, center: [f64; 3], half_width: f64) -> Vec<[f64; 3]> {
        let a = self.radius_factor * half_width;
        self.points
            .iter()
            .map(|s| {
                [
                    center[0] + a * s[0],
                    center[1] + a * s[1],
                    center[2] + a * s[2],
                ]
            })
            .collect()
    }

    /// All monomials `z^a` (`|a| <= p`) into `out` (length `nm`).
    #[inline]
    fn monomials(&self, z: [f64; 3], out: &mut [f64]) {
        let p = self.p;
        let mut pw = [[1.0f64; crate::MAX_ORDER + 1]; 3];
        for d in 0..3 {
            for i in 1..=p {
                pw[d][i] = pw[d][i - 1] * z[d];
            }
        }
        for (o, a) in out.iter_mut().zip(&self.mono) {
            *o = pw[0][a[0]] * pw[1][a[1]] * pw[2][a[2]];
        }
    }

    /// Pseudo-particle strengths from Cartesian moments `m[a*3+c]` (scaled coordinates).
    fn moments_to_strengths(&self, mom: &[f64], multipole: &mut [f64]) {
        let nm = self.nm[0];
        for (k, q) in multipole.chunks_exact_mut(3).enumerate() {
            let row = &self.wt[k * nm..(k + 1) * nm];
            let (mut s0, mut s1, mut s2) = (0.0, 0.0, 0.0);
            for (t, m) in row.iter().zip(mom.chunks_exact(3)) {
                s0 += t * m[0];
                s1 += t * m[1];
                s2 += t * m[2];
            }
            q[0] += s0;
            q[1] += s1;
            q[2] += s2;
        }
    }

    /// Polynomial coefficients `c[a*3+comp]` (scaled coordinates) of a local representation.
    fn local_to_coefficients(&self, local: &[f64]) -> Vec<f64> {
        let nm = self.nm[0];
        let mut c = vec![0.0; 3 * nm];
        for (k, g) in local.chunks_exact(3).enumerate() {
            let row = &self.wt[k * nm..(k + 1) * nm];
            for (t, cc) in row.iter().zip(c.chunks_exact_mut(3)) {
                cc[0] += t * g[0];
                cc[1] += t * g[1];
                cc[2] += t * g[2];
            }
        }
        c
    }

    /// Multipole (P2M, Eq. 36): pseudo-particle strengths of the particles, accumulated.
    pub fn p2m(
        &self,
        center: [f64; 3],
        half_width: f64,
        position: &[[f64; 3]],
        strength: &[[f64; 3]],
        multipole: &mut [f64],
    ) {
        assert_eq!(multipole.len(), self.len());
        assert_eq!(position.len(), strength.len());
        let nm = self.nm[0];
        let inv_a = 1.0 / (self.radius_factor * half_width);
        let mut mom = vec![0.0; 3 * nm];
        let mut zm = vec![0.0; nm];
        for (x, al) in position.iter().zip(strength) {
            let z = [
                (x[0] - center[0]) * inv_a,
                (x[1] - center[1]) * inv_a,
                (x[2] - center[2]) * inv_a,
            ];
            self.monomials(z, &mut zm);
            for (v, m) in zm.iter().zip(mom.chunks_exact_mut(3)) {
                m[0] += v * al[0];
                m[1] += v * al[1];
                m[2] += v * al[2];
            }
        }
        self.moments_to_strengths(&mom, multipole);
    }

    /// M2M: the child's pseudo-particles, taken as particles, P2M'ed into the parent sphere.
    pub fn m2m(
        &self,
        child_center: [f64; 3],
        child_half_width: f64,
        parent_center: [f64; 3],
        parent_half_width: f64,
        child: &[f64],
        parent: &mut [f64],
    ) {
        assert_eq!(child.len(), self.len());
        let pos = self.sphere_points(child_center, child_half_width);
        let st: Vec<[f64; 3]> = child.chunks_exact(3).map(|q| [q[0], q[1], q[2]]).collect();
        self.p2m(parent_center, parent_half_width, &pos, &st, parent);
    }

    /// M2L: potentials of the source pseudo-particles (singular kernel) at the target sphere
    /// points, accumulated into `local` (`K^2` pair interactions).
    pub fn m2l(
        &self,
        source_center: [f64; 3],
        source_half_width: f64,
        target_center: [f64; 3],
        target_half_width: f64,
        multipole: &[f64],
        local: &mut [f64],
    ) {
        assert_eq!(multipole.len(), self.len());
        assert_eq!(local.len(), self.len());
        let a = self.radius_factor * source_half_width;
        let b = self.radius_factor * target_half_width;
        let off = [
            target_center[0] - source_center[0],
            target_center[1] - source_center[1],
            target_center[2] - source_center[2],
        ];
        for (t, g) in self.points.iter().zip(local.chunks_exact_mut(3)) {
            let x = [off[0] + b * t[0], off[1] + b * t[1], off[2] + b * t[2]];
            let (mut g0, mut g1, mut g2) = (0.0, 0.0, 0.0);
            for (s, q) in self.points.iter().zip(multipole.chunks_exact(3)) {
                let dx = x[0] - a * s[0];
                let dy = x[1] - a * s[1];
                let dz = x[2] - a * s[2];
                let inv_r = 1.0 / (dx * dx + dy * dy + dz * dz).sqrt();
                g0 += q[0] * inv_r;
                g1 += q[1] * inv_r;
                g2 += q[2] * inv_r;
            }
            g[0] += g0;
            g[1] += g1;
            g[2] += g2;
        }
    }

    /// P2L: potentials of particles (singular kernel) at the sphere points, accumulated
    /// (a far leaf's particles straight into a local representation).
    pub fn p2l(
        &self,
        center: [f64; 3],
        half_width: f64,
        position: &[[f64; 3]],
        strength: &[[f64; 3]],
        local: &mut [f64],
    ) {
        assert_eq!(local.len(), self.len());
        for (x, g) in self
            .sphere_points(center, half_width)
            .iter()
            .zip(local.chunks_exact_mut(3))
        {
            for (y, al) in position.iter().zip(strength) {
                let d = [x[0] - y[0], x[1] - y[1], x[2] - y[2]];
                let inv_r = 1.0 / (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
                g[0] += al[0] * inv_r;
                g[1] += al[1] * inv_r;
                g[2] += al[2] * inv_r;
            }
        }
    }

    /// L2L: the parent's inner polynomial evaluated at the child's sphere points, accumulated.
    pub fn l2l(
        &self,
        parent_center: [f64; 3],
        parent_half_width: f64,
        child_center: [f64; 3],
        child_half_width: f64,
        parent: &[f64],
        child: &mut [f64],
    ) {
        assert_eq!(parent.len(), self.len());
        assert_eq!(child.len(), self.len());
        let coef = self.local_to_coefficients(parent);
        let inv_b = 1.0 / (self.radius_factor * parent_half_width);
        let mut zm = vec![0.0; self.nm[0]];
        for (x, g) in self
            .sphere_points(child_center, child_half_width)
            .iter()
            .zip(child.chunks_exact_mut(3))
        {
            let z = [
                (x[0] - parent_center[0]) * inv_b,
                (x[1] - parent_center[1]) * inv_b,
                (x[2] - parent_center[2]) * inv_b,
            ];
            self.monomials(z, &mut zm);
            for (v, c) in zm.iter().zip(coef.chunks_exact(3)) {
                g[0] += v * c[0];
                g[1] += v * c[1];
                g[2] += v * c[2];
            }
        }
    }

    /// L2P: velocity `curl phi` and stretching `(alpha . grad) curl phi` (no `1/(4 pi)`) of the
    /// local representation at the targets, accumulated.
    #[allow(clippy::too_many_arguments)]
    pub fn l2p(
        &self,
        center: [f64; 3],
        half_width: f64,
        local: &[f64],
        position: &[[f64; 3]],
        alpha: &[[f64; 3]],
        velocity: &mut [[f64; 3]],
        stretching: &mut [[f64; 3]],
    ) {
        assert_eq!(local.len(), self.len());
        let n = position.len();
        assert!(alpha.len() == n && velocity.len() == n && stretching.len() == n);
        let [nm, nm1, nm2] = self.nm;
        let coef = self.local_to_coefficients(local);
        let inv_b = 1.0 / (self.radius_factor * half_width);
        // gradient coefficients grad[d][a*3+c] (degree <= p-1), Hessian hess[e][a*3+c]
        // (degree <= p-2, e over xx, yy, zz, xy, xz, yz), in physical units.
        let mut grad = vec![vec![0.0; 3 * nm1]; 3];
        for (i, der) in self.deriv.iter().enumerate() {
            for (g, &(j, f)) in grad.iter_mut().zip(der) {
                if f != 0.0 {
                    for c in 0..3 {
                        g[3 * j + c] += f * inv_b * coef[3 * i + c];
                    }
                }
            }
        }
        const PAIRS: [(usize, usize); 6] = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)];
        let mut hess = vec![vec![0.0; 3 * nm2]; 6];
        for (e, &(d1, d2)) in PAIRS.iter().enumerate() {
            for i in 0..nm1 {
                let (j, f) = self.deriv[i][d2];
                if f != 0.0 {
                    for c in 0..3 {
                        hess[e][3 * j + c] += f * inv_b * grad[d1][3 * i + c];
                    }
                }
            }
        }
        let mut zm = vec![0.0; nm];
        for i in 0..n {
            let x = position[i];
            let z = [
                (x[0] - center[0]) * inv_b,
                (x[1] - center[1]) * inv_b,
                (x[2] - center[2]) * inv_b,
            ];
            self.monomials(z, &mut zm);
            // g[d][c] = d phi_c / d x_d
            let mut g = [[0.0f64; 3]; 3];
            for d in 0..3 {
                for (v, cc) in zm[..nm1].iter().zip(grad[d].chunks_exact(3)) {
                    g[d][0] += v * cc[0];
                    g[d][1] += v * cc[1];
                    g[d][2] += v * cc[2];
                }
            }
            let mut hh = [[0.0f64; 3]; 6];
            for e in 0..6 {
                for (v, cc) in zm[..nm2].iter().zip(hess[e].chunks_exact(3)) {
                    hh[e][0] += v * cc[0];
                    hh[e][1] += v * cc[1];
                    hh[e][2] += v * cc[2];
                }
            }
            // u = curl phi
            velocity[i][0] += g[1][2] - g[2][1];
            velocity[i][1] += g[2][0] - g[0][2];
            velocity[i][2] += g[0][1] - g[1][0];
            // v[l][m] = sum_k alpha_k d_k d_l phi_m
            let al = alpha[i];
            let h = |k: usize, l: usize, m: usize| -> f64 {
                let e = match (k.min(l), k.max(l)) {
                    (0, 0) => 0,
                    (1, 1) => 1,
                    (2, 2) => 2,
                    (0, 1) => 3,
                    (0, 2) => 4,
                    _ => 5,
                };
                hh[e][m]
            };
            let v =
                |l: usize, m: usize| al[0] * h(0, l, m) + al[1] * h(1, l, m) + al[2] * h(2, l, m);
            stretching[i][0] += v(1, 2) - v(2, 1);
            stretching[i][1] += v(2, 0) - v(0, 2);
            stretching[i][2] += v(0, 1) - v(1, 0);
        }
    }

    /// M2P: the pseudo-particles evaluated directly at the targets (singular kernel),
    /// velocity and stretching without `1/(4 pi)`, accumulated.
    #[allow(clippy::too_many_arguments)]
    pub fn m2p(
        &self,
        center: [f64; 3],
        half_width: f64,
        multipole: &[f64],
        position: &[[f64; 3]],
        alpha: &[[f64; 3]],
        velocity: &mut [[f64; 3]],
        stretching: &mut [[f64; 3]],
    ) {
        assert_eq!(multipole.len(), self.len());
        let n = position.len();
        assert!(alpha.len() == n && velocity.len() == n && stretching.len() == n);
        let src = self.sphere_points(center, half_width);
        for i in 0..n {
            let x = position[i];
            let ai = alpha[i];
            let mut u = [0.0; 3];
            let mut s = [0.0; 3];
            for (y, q) in src.iter().zip(multipole.chunks_exact(3)) {
                let d = [x[0] - y[0], x[1] - y[1], x[2] - y[2]];
                let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
                let inv_r = 1.0 / r2.sqrt();
                let k = inv_r * inv_r * inv_r;
                let kp = -3.0 * k * inv_r * inv_r;
                let qxd = [
                    q[1] * d[2] - q[2] * d[1],
                    q[2] * d[0] - q[0] * d[2],
                    q[0] * d[1] - q[1] * d[0],
                ];
                let qxa = [
                    q[1] * ai[2] - q[2] * ai[1],
                    q[2] * ai[0] - q[0] * ai[2],
                    q[0] * ai[1] - q[1] * ai[0],
                ];
                let ad = kp * (ai[0] * d[0] + ai[1] * d[1] + ai[2] * d[2]);
                for c in 0..3 {
                    u[c] += k * qxd[c];
                    s[c] += k * qxa[c] + ad * qxd[c];
                }
            }
            for c in 0..3 {
                velocity[i][c] += u[c];
                stretching[i][c] += s[c];
            }
        }
    }

    /// Floating-point operations of one M2L: `K^2` pairs of 3 subtractions, 5 for `r^2`,
    /// 2 for `1/sqrt` (sqrt and division) and 6 for the three multiply-adds.
    pub fn m2l_flops(&self) -> usize {
        let k = self.count();
        16 * k * k
    }
}
