//! Periodic boundary conditions: wrapping, the far images of the box, the surface correction,
//! and an independent Fourier-space reference.
//!
//! The periodic velocity of a zero-total-strength set is the lattice sum of the Biot-Savart law
//! over all copies of the box, which converges only conditionally. We sum it in expanding cubes,
//! as the core paper does by "extending the oct-tree outwards" (Sec. 5.1):
//!
//! * the box and its 26 neighbours (shifts `{-1,0,1}^3`) go through the ordinary traversal, so the
//!   near field uses minimum-image neighbours across the faces (P2P with Gaussian cores);
//! * level `k = 0..K-1` adds the supercells of width `3^k L` at offsets `j 3^k L`,
//!   `j in {-4..4}^3 \ {-1..1}^3`, whose multipole `M_k` is built from `M_{k-1}` by 27 M2M
//!   (`M_0` is the root multipole): the images of `9 * 3^(K-1)` boxes per dimension in all,
//!   at a cost independent of `N`. The far images enter as M2L into the local expansions of
//!   target cells chosen per shell so that every M2L converges fast ([`outer_image_locals`]);
//!   the images of one shell share their multipole, so they are translated together by one M2L
//!   with lattice-summed transfer harmonics ([`m2l_lattice`]), a few ms at `p = 10`.
//!
//! Cubic summation differs from the periodic (zero-mean, "tin-foil") solution of the vorticity-
//! velocity Poisson equation by the surface term of the dipole moment `D_cl = sum_j alpha_jc x_jl`:
//! `psi_cubic = psi_periodic + (4 pi / 3V) D x` (de Leeuw, Perram & Smith, Proc. R. Soc. A 373,
//! 1980, for the scalar analogue). Its curl is the constant velocity
//! `u_m = (1/(3V)) eps_mlc D_cl`, which [`surface_correction`] returns and the driver subtracts;
//! stretching (a derivative) is unaffected. A non-zero total strength has no periodic solution:
//! [`check_total_strength`] refuses it.
//!
//! [`far_images::FarImages`] sums the same far images for a fixed set of receiving cells (the
//! uniform-grid path) from lattice sums precomputed once. [`check_input`] holds the checks
//! every periodic driver makes. [`ewald`] holds the Ewald-split reference that scales to
//! `N = 1e6` sources.

pub mod ewald;
pub mod far_images;

pub use ewald::{ewald_reference, EwaldParams, EwaldReference};
pub use far_images::FarImages;

use crate::expansions::{expansion_len, Complex64};
use crate::kernel::{cross, INV_4PI};
use crate::operators::{Operators, Scratch};
use crate::tree::Tree;
use crate::{FmmError, Sources, Targets};
use std::f64::consts::PI;

/// Periodic-box parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Periodic {
    /// Box length `L`; the box is `[-L/2, L/2)^3`.
    pub box_length: f64,
    /// Levels `K` of images above the root; `9 * 3^(K-1)` boxes per dimension are summed
    /// (`K = 0`: only the 3 x 3 x 3 neighbourhood).
    pub image_levels: usize,
}

impl Default for Periodic {
    fn default() -> Self {
        Self {
            box_length: 2.0 * PI,
            image_levels: 4,
        }
    }
}

impl Periodic {
    pub fn validate(&self) -> Result<(), FmmError> {
        // a physical length (the range of every length of a run's configuration): beyond it
        // the image sums overflow or the cells underflow
        if !(1e-8..=1e12).contains(&self.box_length) {
            return Err(FmmError::BadParameter {
                name: "box_length",
                value: if self.box_length.is_finite() && self.box_length != 0.0 {
                    format!("{:e}", self.box_length)
                } else {
                    self.box_length.to_string()
                },
                reason: "the periodic box length must lie in [1e-8, 1e12], a physical length",
            });
        }
        if self.image_levels > 12 {
            return Err(FmmError::BadParameter {
                name: "image_levels",
                value: self.image_levels.to_string(),
                reason: "more than 12 image levels (3^12 boxes) add nothing in f64",
            });
        }
        Ok(())
    }

    /// Wraps a position into `[-L/2, L/2)^3`.
    #[inline]
    pub fn wrap(&self, x: [f64; 3]) -> [f64; 3] {
        let l = self.box_length;
        x.map(|c| {
            let w = c - l * (c / l + 0.5).floor();
            if w >= 0.5 * l {
                w - l
            } else {
                w
            }
        })
    }

    /// Number of boxes per dimension covered by the image sum.
    pub fn boxes_per_dimension(&self) -> usize {
        if self.image_levels == 0 {
            3
        } else {
            9 * 3usize.pow(self.image_levels as u32 - 1)
        }
    }
}

/// Sum of the strengths; a periodic velocity exists only when it vanishes.
pub fn total_strength(s: &Sources) -> [f64; 3] {
    let mut t = [0.0; 3];
    for a in &s.strength {
        for c in 0..3 {
            t[c] += a[c];
        }
    }
    t
}

/// Refuses a set whose total strength is not zero to round-off (relative to the sum of
/// magnitudes), naming the value.
pub fn check_total_strength(s: &Sources) -> Result<(), FmmError> {
    let scale: f64 = s
        .strength
        .iter()
        .map(|a| a.iter().map(|x| x.abs()).sum::<f64>())
        .sum();
    check_total(total_strength(s), scale)
}

/// The total-strength criterion of [`check_total_strength`] on precomputed sums: `total`
/// (`sum alpha`) must vanish relative to `scale` (`sum |alpha_c|`).
pub fn check_total(total: [f64; 3], scale: f64) -> Result<(), FmmError> {
    let t = total;
    let norm = (t[0] * t[0] + t[1] * t[1] + t[2] * t[2]).sqrt();
    if norm > 1e-10 * scale.max(f64::MIN_POSITIVE) {
        return Err(FmmError::BadParameter {
            name: "total strength",
            value: format!("({:e}, {:e}, {:e})", t[0], t[1], t[2]),
            reason: "a periodic velocity exists only for zero total strength \
                     (subtract the mean, e.g. `vortex particles --periodic`)",
        });
    }
    Ok(())
}

/// Positions found outside the periodic box by [`check_input`] (all are wrapped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WrapCounts {
    /// Positions outside `[-L/2, L/2)^3`.
    pub outside: usize,
    /// Of those, positions with a coordinate beyond `3L/2` in magnitude (more than one box
    /// length outside).
    pub far: usize,
}

/// Counts the positions outside the box `[-L/2, L/2)^3` (a coordinate equal to `-L/2` is
/// inside) and those more than one box length outside it.
pub fn wrap_counts<'a>(
    periodic: &Periodic,
    positions: impl IntoIterator<Item = &'a [f64; 3]>,
) -> WrapCounts {
    let half = 0.5 * periodic.box_length;
    positions
        .into_iter()
        .fold(WrapCounts::default(), |counts, x| {
            let out = x.iter().any(|&c| !(-half..half).contains(&c));
            let m = x.iter().fold(0.0f64, |a, c| a.max(c.abs()));
            WrapCounts {
                outside: counts.outside + out as usize,
                far: counts.far + (m > half + periodic.box_length) as usize,
            }
        })
}

/// The checks of a periodic evaluation, shared by every driver: valid box parameters, zero
/// total strength ([`check_total_strength`]), a box at least 4 of the largest core radii wide;
/// then counts the positions of `sources` and `other_positions` (the targets) outside the box
/// ([`wrap_counts`]) and logs them: a warning when some lie more than one box length outside,
/// otherwise a note when some lie outside. `sources` should be validated first.
pub fn check_input(
    periodic: &Periodic,
    sources: &Sources,
    other_positions: &[[f64; 3]],
) -> Result<WrapCounts, FmmError> {
    periodic.validate()?;
    check_total_strength(sources)?;
    let counts = wrap_counts(periodic, sources.position.iter().chain(other_positions));
    check_box(periodic, sources.max_sigma(), counts)?;
    Ok(counts)
}

/// The rest of [`check_input`] on precomputed values (a caller that sums in its own pass over
/// the particles): a box at least 4 core radii wide (`sigma_max` the largest core radius),
/// and the log of the positions that were outside the box.
pub fn check_box(periodic: &Periodic, sigma_max: f64, counts: WrapCounts) -> Result<(), FmmError> {
    if periodic.box_length < 4.0 * sigma_max {
        return Err(FmmError::BadParameter {
            name: "box_length",
            value: format!("{} (largest core radius {sigma_max})", periodic.box_length),
            reason: "the periodic box must be at least 4 core radii wide",
        });
    }
    let half = 0.5 * periodic.box_length;
    if counts.far > 0 {
        log::warn!(
            "{} positions lie more than one box length outside the periodic box \
             [-{half}, {half})^3 ({} outside in all); all are wrapped",
            counts.far,
            counts.outside
        );
    } else if counts.outside > 0 {
        log::info!(
            "{} positions outside the periodic box were wrapped",
            counts.outside
        );
    }
    Ok(())
}

/// The dipole moment `D_cl = sum_j alpha_jc x_jl` (index `[c][l]`) of wrapped sources, summed
/// in input order: the one input of the surface term ([`surface_velocity`]). A distributed
/// evaluation sums it per rank and reduces the ranks' moments.
pub fn dipole_moment(s: &Sources) -> [[f64; 3]; 3] {
    let mut d = [[0.0; 3]; 3];
    for (a, x) in s.strength.iter().zip(&s.position) {
        for c in 0..3 {
            for l in 0..3 {
                d[c][l] += a[c] * x[l];
            }
        }
    }
    d
}

/// The constant velocity by which cubic summation differs from the zero-mean periodic
/// solution (see the module doc), from the dipole moment `d` ([`dipole_moment`], index
/// `[c][l]`): `u_m = 1/(3V) eps_mlc D_cl`. Every periodic engine (the adaptive plan on one or
/// several ranks, the uniform grid) subtracts this velocity from the lattice sum.
pub fn surface_velocity(d: &[[f64; 3]; 3], box_length: f64) -> [f64; 3] {
    let v = box_length.powi(3);
    let f = 1.0 / (3.0 * v);
    // eps_mlc D_cl: m=0: D_zy - D_yz ; m=1: D_xz - D_zx ; m=2: D_yx - D_xy  (index [c][l])
    [
        f * (d[2][1] - d[1][2]),
        f * (d[0][2] - d[2][0]),
        f * (d[1][0] - d[0][1]),
    ]
}

/// The constant velocity by which cubic summation differs from the zero-mean periodic
/// solution (see the module doc), for wrapped positions. Subtract it from the lattice sum
/// ([`subtract_surface`]).
pub fn surface_correction(s: &Sources, box_length: f64) -> [f64; 3] {
    surface_velocity(&dipole_moment(s), box_length)
}

/// Subtracts the surface-term velocity `corr` ([`surface_velocity`]) from every velocity.
pub fn subtract_surface(velocity: &mut [[f64; 3]], corr: [f64; 3]) {
    for v in velocity {
        for c in 0..3 {
            v[c] -= corr[c];
        }
    }
}

/// Periodic velocity and stretching of Gaussian blobs summed in Fourier space, the independent
/// reference of the periodic tests.
///
/// The vorticity of the blobs has the coefficients
/// `omega_k = (1/V) sum_j alpha_j exp(-i k.x_j) exp(-sigma_j^2 k^2 / 2)`, the zero-mean velocity
/// `u_k = i k x omega_k / k^2` and the velocity gradient `d_l u = i k_l u_k`; stretching is
/// `(alpha_i . grad) u`. Modes are summed while `k sigma_min <= k_sigma_max` (`1e-14` truncation
/// at `k_sigma_max = 8.3`). Cost `O(N M kmax^3)`: for tests with small `N`.
pub fn fourier_reference(
    sources: &Sources,
    targets: &Targets,
    box_length: f64,
    k_sigma_max: f64,
) -> crate::Fields {
    let sigma_min = sources.sigma.iter().copied().fold(f64::INFINITY, f64::min);
    let dk = 2.0 * PI / box_length;
    let kmax = k_sigma_max / sigma_min;
    let nmax = (kmax / dk).ceil() as i64;
    let v = box_length.powi(3);
    let mut fields = crate::Fields::zeros(targets.len());
    // 1/(4 pi) of the Biot-Savart kernel is already part of the Poisson solution here; the
    // engine's outputs include it too, so no extra factor appears.
    let _ = INV_4PI;
    for nx in -nmax..=nmax {
        for ny in -nmax..=nmax {
            for nz in -nmax..=nmax {
                let k = [nx as f64 * dk, ny as f64 * dk, nz as f64 * dk];
                let k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
                if k2 == 0.0 || k2 > kmax * kmax {
                    continue;
                }
                // omega_k (complex 3-vector)
                let (mut wr, mut wi) = ([0.0; 3], [0.0; 3]);
                for j in 0..sources.len() {
                    let x = sources.position[j];
                    let ph = -(k[0] * x[0] + k[1] * x[1] + k[2] * x[2]);
                    let g = (-0.5 * sources.sigma[j].powi(2) * k2).exp() / v;
                    let (s, c) = ph.sin_cos();
                    for d in 0..3 {
                        wr[d] += sources.strength[j][d] * g * c;
                        wi[d] += sources.strength[j][d] * g * s;
                    }
                }
                // u_k = i k x omega / k^2 = (i (k x wr) - (k x wi)) / k^2
                let kr = cross(k, wr);
                let ki = cross(k, wi);
                let ur: [f64; 3] = std::array::from_fn(|d| -ki[d] / k2);
                let ui: [f64; 3] = std::array::from_fn(|d| kr[d] / k2);
                for (i, x) in targets.position.iter().enumerate() {
                    let ph = k[0] * x[0] + k[1] * x[1] + k[2] * x[2];
                    let (s, c) = ph.sin_cos();
                    // Re(u_k e^{ikx})
                    let a = targets.strength[i];
                    let kda = k[0] * a[0] + k[1] * a[1] + k[2] * a[2];
                    for d in 0..3 {
                        fields.velocity[i][d] += ur[d] * c - ui[d] * s;
                        // (alpha . grad) u = Re(i (k.alpha) u_k e^{ikx})
                        fields.stretching[i][d] += -kda * (ur[d] * s + ui[d] * c);
                    }
                }
            }
        }
    }
    fields
}

/// Local expansions of the far images (levels `k = 0..K-1` of the module doc), to be added to
/// the target cells they are returned for: the cells of level 2 and the leaves above it.
///
/// `root_multipole` is the multipole of the whole box about its centre (the origin). Each shell
/// acts on cells small enough for its M2L to converge fast: the images at `|j|_inf = 2` on the
/// level-2 cells, those at `|j|_inf = 3` on the level-1 cells, the rest (and every coarser level)
/// on the root; the coarser locals are carried down by L2L, which is exact. The ratio
/// `(r_s + r_t) / d` then stays below 0.67 for every M2L (the `|j| = 2` shell on the level-2
/// cells; the coarser shells are further).
///
/// All images of one shell carry the same multipole, so their M2L are summed in one
/// translation with the lattice-summed transfer harmonics ([`m2l_lattice`]): `O(p^2)` per image
/// and one `O(p^4)` translation per receiving cell, instead of an `O(p^4)` rotation per image
/// (about 10^4 of them at `K = 4`); the result is the same to round-off.
pub fn outer_image_locals(
    ops: &Operators,
    periodic: &Periodic,
    root_multipole: &[Complex64],
    targets: &Tree,
) -> Vec<(usize, Vec<Complex64>)> {
    let p = ops.order();
    outer_image_locals_with(
        ops,
        periodic,
        root_multipole,
        targets,
        |images, centre, m, local, _| m2l_lattice(p, images, centre, m, local),
    )
}

/// [`outer_image_locals`] with the translation of one shell of images given:
/// `translate(images, centre, multipole, local, scratch)` adds to `local` (about `centre`) the
/// field of `multipole` placed at every offset of `images` (the tests pass one M2L per image,
/// the slow reference of the lattice sum).
fn outer_image_locals_with(
    ops: &Operators,
    periodic: &Periodic,
    root_multipole: &[Complex64],
    targets: &Tree,
    translate: impl Fn(&[[f64; 3]], [f64; 3], &[Complex64], &mut [Complex64], &mut Scratch) + Sync,
) -> Vec<(usize, Vec<Complex64>)> {
    use rayon::prelude::*;
    let p = ops.order();
    let len = expansion_len(p);
    let zero = Complex64::new(0.0, 0.0);
    let mut scratch = Scratch::new(p);
    // cells that receive the result: level 2, and leaves above it
    let receivers: Vec<usize> = (0..targets.cells.len())
        .filter(|&c| {
            let cell = &targets.cells[c];
            cell.level == 2 || (cell.level < 2 && cell.is_leaf())
        })
        .collect();
    if periodic.image_levels == 0 {
        return receivers
            .into_iter()
            .map(|c| (c, vec![zero; len]))
            .collect();
    }
    let l = periodic.box_length;
    let (shell2, shell3, shell4) = (shell(l, 2, 2), shell(l, 3, 3), shell(l, 4, 4));
    let shell23: Vec<[f64; 3]> = shell2.iter().chain(&shell3).copied().collect();
    let m0 = root_multipole;
    // root: the |j| = 4 shell of level 0 and all coarser levels
    let origin = [0.0; 3];
    let mut root_local = vec![zero; len];
    translate(&shell4, origin, m0, &mut root_local, &mut scratch);
    let outer = shell(1.0, 2, 4);
    let mut m = vec![zero; len];
    // multipole of the 3 x 3 x 3 supercell of width 3L
    for sh in shell(l, 0, 1) {
        if sh == origin {
            m.iter_mut().zip(m0).for_each(|(a, b)| *a += b);
        } else {
            ops.m2m(sh, origin, m0, &mut m, &mut scratch);
        }
    }
    for k in 1..periodic.image_levels {
        let width = 3f64.powi(k as i32) * l;
        let src: Vec<[f64; 3]> = outer.iter().map(|j| j.map(|c| c * width)).collect();
        translate(&src, origin, &m, &mut root_local, &mut scratch);
        let mut next = vec![zero; len];
        for sh in shell(1.0, 0, 1) {
            if sh == origin {
                next.iter_mut().zip(&m).for_each(|(a, b)| *a += b);
            } else {
                let c = sh.map(|x| x * width);
                ops.m2m(c, origin, &m, &mut next, &mut scratch);
            }
        }
        m = next;
    }
    let shift_local = |from: [f64; 3],
                       to: [f64; 3],
                       src: &[Complex64],
                       dst: &mut [Complex64],
                       sc: &mut Scratch| {
        if from == to {
            dst.iter_mut().zip(src).for_each(|(a, b)| *a += b);
        } else {
            ops.l2l(from, to, src, dst, sc);
        }
    };
    // level-1 locals: the |j| = 3 shell plus the root's
    let mut level1: std::collections::HashMap<usize, Vec<Complex64>> = Default::default();
    for (c, cell) in targets.cells.iter().enumerate() {
        if cell.level == 1 {
            let mut loc = vec![zero; len];
            translate(&shell3, cell.center, m0, &mut loc, &mut scratch);
            shift_local(origin, cell.center, &root_local, &mut loc, &mut scratch);
            level1.insert(c, loc);
        }
    }
    receivers
        .into_par_iter()
        .map_init(
            || Scratch::new(p),
            |sc, c| {
                let cell = &targets.cells[c];
                let mut loc = vec![zero; len];
                match cell.level {
                    0 => {
                        translate(&shell23, cell.center, m0, &mut loc, sc);
                        shift_local(origin, cell.center, &root_local, &mut loc, sc);
                    }
                    1 => {
                        translate(&shell2, cell.center, m0, &mut loc, sc);
                        loc.iter_mut().zip(&level1[&c]).for_each(|(a, b)| *a += b);
                    }
                    _ => {
                        translate(&shell2, cell.center, m0, &mut loc, sc);
                        let parent = cell.parent.expect("a level-2 cell has a parent");
                        let pc = targets.cells[parent].center;
                        shift_local(pc, cell.center, &level1[&parent], &mut loc, sc);
                    }
                }
                (c, loc)
            },
        )
        .collect()
}

/// Offsets `j * scale`, `j in Z^3` with `lo <= |j|_inf <= hi`.
fn shell(scale: f64, lo: i32, hi: i32) -> Vec<[f64; 3]> {
    (-hi..=hi)
        .flat_map(|x| (-hi..=hi).flat_map(move |y| (-hi..=hi).map(move |z| [x, y, z])))
        .filter(|j| {
            let m = j.iter().map(|c| c.abs()).max().unwrap_or(0);
            m >= lo && m <= hi
        })
        .map(|j| j.map(|c| c as f64 * scale))
        .collect()
}

/// `local += sum_s M2L(multipole: s -> target)` over the source centres `sources`, all with the
/// same multipole, as one translation (the plain M2L of the core paper, Eq. 27):
/// `Lhat_k^l = (-1)^k sum_{n,m} Mhat_n^m T_{n+k}^{m+l}`, with the transfer harmonics summed
/// first, `T = sum_s I(target - s)` (degree `<= 2p`). Exact to round-off against the sum of
/// the single M2L; each `target - s` must lie outside both expansions' spheres.
pub fn m2l_lattice(
    p: usize,
    sources: &[[f64; 3]],
    target: [f64; 3],
    multipole: &[Complex64],
    local: &mut [Complex64],
) {
    if sources.is_empty() {
        return;
    }
    let transfer = LatticeTransfer::from_harmonics(p, &summed_irregular(2 * p, sources, target));
    transfer.apply(&ScaledMultipole::new(p, multipole), local);
}

/// `sum_s I(target - s)` over `sources` in the order given: the irregular solid harmonics of
/// degree `<= p2` (half array of `ncoef(p2)` entries, layout `index`) summed over a group of
/// source centres, the transfer harmonics `T` of [`m2l_lattice`]. No `target - s` may vanish.
fn summed_irregular(p2: usize, sources: &[[f64; 3]], target: [f64; 3]) -> Vec<Complex64> {
    use crate::expansions::harmonics::irregular;
    use crate::expansions::ncoef;
    let n2 = ncoef(p2);
    let zero = Complex64::new(0.0, 0.0);
    let (mut sum, mut ih) = (vec![zero; n2], vec![zero; n2]);
    for s in sources {
        irregular(
            p2,
            [target[0] - s[0], target[1] - s[1], target[2] - s[2]],
            &mut ih,
        );
        sum.iter_mut().zip(&ih).for_each(|(a, b)| *a += b);
    }
    sum
}

/// A multipole in the form the plain M2L consumes: `Mhat_n^m = M_n^m / K_n^m` for
/// `-n <= m <= n` (full layout `full_index`), the three components one after the other, with
/// the table `1 / K_n^m` that scales the resulting local back (core paper Eq. 27).
#[derive(Clone, Debug)]
struct ScaledMultipole {
    p: usize,
    /// `3 (p + 1)^2` entries, component-major.
    full: Vec<Complex64>,
    /// `1 / K_n^m` at `index(n, m)`, `n <= p`.
    inv_k: Vec<f64>,
}

impl ScaledMultipole {
    /// From a multipole of `expansion_len(p)` coefficients (fmm layout).
    fn new(p: usize, multipole: &[Complex64]) -> Self {
        use crate::expansions::harmonics::{expand_full, knm};
        use crate::expansions::{index, ncoef};
        let nc = ncoef(p);
        let nf = (p + 1) * (p + 1);
        let mut inv_k = vec![0.0; nc];
        for n in 0..=p {
            for m in 0..=n {
                inv_k[index(n, m)] = 1.0 / knm(n, m);
            }
        }
        let mut full = vec![Complex64::new(0.0, 0.0); 3 * nf];
        for (c, f) in full.chunks_exact_mut(nf).enumerate() {
            expand_full(p, &multipole[c * nc..(c + 1) * nc], &inv_k, false, f);
        }
        Self { p, full, inv_k }
    }
}

/// One M2L whose transfer harmonics `T` (degree `<= 2p`) are given rather than computed from a
/// single distance: `T` may be the sum of `I(target - s)` over many source centres that share
/// the multipole ([`m2l_lattice`]), or any precomputed lattice sum
/// ([`far_images::FarImages`]).
#[derive(Clone, Debug)]
struct LatticeTransfer {
    p: usize,
    /// `Re T_n^m`, `n <= 2p`, `-n <= m <= n` (full layout `full_index`), then
    /// [`TRANSFER_PAD`] zeros.
    re: Vec<f64>,
    /// `Im T_n^m`, same layout.
    im: Vec<f64>,
}

/// Output orders `l` that [`LatticeTransfer::apply`] computes at once (SIMD lanes).
const LANES: usize = 4;
/// Zeros after the transfer harmonics: the lanes of `l > k` read up to 3 entries past the last.
const TRANSFER_PAD: usize = LANES - 1;

impl LatticeTransfer {
    /// From the half array (`ncoef(2p)` entries, layout `index`) of summed irregular harmonics.
    fn from_harmonics(p: usize, summed: &[Complex64]) -> Self {
        use crate::expansions::harmonics::expand_full;
        use crate::expansions::ncoef;
        let ones = vec![1.0; ncoef(2 * p)];
        let nf = (2 * p + 1) * (2 * p + 1);
        let mut full = vec![Complex64::new(0.0, 0.0); nf + TRANSFER_PAD];
        expand_full(2 * p, summed, &ones, false, &mut full[..nf]);
        Self {
            p,
            re: full.iter().map(|z| z.re).collect(),
            im: full.iter().map(|z| z.im).collect(),
        }
    }

    /// `local += ` the plain M2L (core paper Eq. 27) of `multipole` with these transfer
    /// harmonics: `Lhat_k^l = (-1)^k sum_{n,m} Mhat_n^m T_{n+k}^{m+l}`, `L = conj(Lhat) / K`.
    /// `O(p^4)`. Every sum runs over `n`, then `m`, in increasing order, with the complex
    /// product `Mhat T` in the operation order of `num_complex`; four consecutive `l` of one
    /// `k` run in the SIMD lanes (their `T_{n+k}^{m+l}` are contiguous), which leaves each
    /// lane's sum bit for bit that of the scalar loop.
    fn apply(&self, multipole: &ScaledMultipole, local: &mut [Complex64]) {
        use crate::expansions::harmonics::full_index;
        use crate::expansions::{index, ncoef};
        use wide::f64x4;
        let p = self.p;
        assert_eq!(
            multipole.p, p,
            "lattice M2L: orders of multipole and transfer differ"
        );
        let nc = ncoef(p);
        let nf = (p + 1) * (p + 1);
        let mf = &multipole.full;
        let lanes = |w: &[f64]| f64x4::from(<[f64; LANES]>::try_from(w).expect("4 lanes"));
        for k in 0..=p {
            for l0 in (0..=k).step_by(LANES) {
                // [Re, Im] of the three components, lane q: order l0 + q
                let mut acc = [f64x4::splat(0.0); 6];
                for n in 0..=p {
                    // m = -n..=n: Mhat_n^m at n^2 + (m + n), T_{n+k}^{m+l} contiguous from m = -n
                    let (a, w) = (n * n, 2 * n + 1);
                    let b = full_index(n + k, l0 as isize - n as isize);
                    let t = self.re[b..b + w + TRANSFER_PAD]
                        .windows(LANES)
                        .zip(self.im[b..b + w + TRANSFER_PAD].windows(LANES));
                    let m = mf[a..a + w]
                        .iter()
                        .zip(&mf[nf + a..nf + a + w])
                        .zip(&mf[2 * nf + a..2 * nf + a + w]);
                    for ((tr, ti), ((m0, m1), m2)) in t.zip(m) {
                        let (tr, ti) = (lanes(tr), lanes(ti));
                        for (c, m) in [m0, m1, m2].into_iter().enumerate() {
                            let (mr, mi) = (f64x4::splat(m.re), f64x4::splat(m.im));
                            acc[2 * c] += mr * tr - mi * ti;
                            acc[2 * c + 1] += mr * ti + mi * tr;
                        }
                    }
                }
                let acc = acc.map(|v| v.to_array());
                for (q, l) in (l0..=k).take(LANES).enumerate() {
                    let at = index(k, l);
                    for c in 0..3 {
                        let s = Complex64::new(acc[2 * c][q], acc[2 * c + 1][q]);
                        let s = if k % 2 == 1 { -s } else { s };
                        local[c * nc + at] += s.conj() * multipole.inv_k[at];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lattice_summed_far_images_equal_the_per_image_sum() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(41);
        let l = 2.0 * PI;
        let pts: Vec<[f64; 3]> = (0..600)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-PI..PI)))
            .collect();
        let tree = Tree::build(
            &pts,
            crate::tree::BoundingCube {
                lo: [-0.5 * l; 3],
                width: l,
            },
            8,
        );
        for p in [4, 10] {
            let ops = Operators::new(p);
            // the multipole of random sources in the box (a field-consistent expansion)
            let alpha: Vec<[f64; 3]> = (0..pts.len())
                .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
                .collect();
            let mut root = vec![Complex64::new(0.0, 0.0); expansion_len(p)];
            ops.p2m([0.0; 3], &pts, &alpha, &mut root);
            for k in [1, 3] {
                let per = Periodic {
                    box_length: l,
                    image_levels: k,
                };
                let a = outer_image_locals(&ops, &per, &root, &tree);
                let b =
                    outer_image_locals_with(&ops, &per, &root, &tree, |images, c, m, local, sc| {
                        for src in images {
                            ops.m2l(*src, c, m, local, sc);
                        }
                    });
                assert_eq!(a.len(), b.len());
                for ((ca, la), (cb, lb)) in a.iter().zip(&b) {
                    assert_eq!(ca, cb);
                    let num: f64 = la.iter().zip(lb).map(|(x, y)| (x - y).norm_sqr()).sum();
                    let den: f64 = lb.iter().map(|y| y.norm_sqr()).sum();
                    assert!(
                        num.sqrt() <= 1e-12 * den.sqrt(),
                        "p = {p}, K = {k}, cell {ca}"
                    );
                }
            }
        }
    }

    #[test]
    fn wrap_maps_into_the_box() {
        let p = Periodic {
            box_length: 2.0,
            image_levels: 1,
        };
        assert_eq!(p.wrap([0.5, -0.5, 0.0]), [0.5, -0.5, 0.0]);
        assert_eq!(p.wrap([1.0, -1.0, 3.5]), [-1.0, -1.0, -0.5]);
        let w = p.wrap([-7.25, 9.0, 1e-17]);
        assert!(w.iter().all(|&c| (-1.0..1.0).contains(&c)));
        assert!((w[0] - 0.75).abs() < 1e-15 && (w[1] + 1.0).abs() < 1e-15);
    }

    #[test]
    fn check_input_counts_wrapped_positions_and_refuses_a_small_box() {
        let mut s = crate::testsets::standard(40, 2);
        crate::testsets::subtract_mean_strength(&mut s);
        let l = 2.0 * PI;
        let per = Periodic {
            box_length: l,
            image_levels: 2,
        };
        let wrapped: Vec<[f64; 3]> = s.position.iter().map(|&x| per.wrap(x)).collect();
        s.position = wrapped;
        s.sigma.iter_mut().for_each(|v| *v = 0.3);
        let inside = check_input(&per, &s, &[[-0.5 * l; 3]]).unwrap();
        assert_eq!(inside, WrapCounts::default());
        s.position[0][1] = 0.5 * l;
        s.position[1][2] = 1.6 * l;
        let others = [[0.0, -1.5 * l, 0.0], [0.0, 0.0, -1.51 * l]];
        let counts = check_input(&per, &s, &others).unwrap();
        assert_eq!(counts, WrapCounts { outside: 4, far: 2 });
        let small = Periodic {
            box_length: 3.9 * s.max_sigma(),
            ..per
        };
        let e = check_input(&small, &s, &[]).unwrap_err().to_string();
        assert!(e.contains("4 core radii"), "{e}");
    }

    #[test]
    fn nonzero_total_strength_is_refused() {
        let mut s = crate::testsets::standard(50, 1);
        let e = check_total_strength(&s).unwrap_err().to_string();
        assert!(e.contains("total strength"), "{e}");
        crate::testsets::subtract_mean_strength(&mut s);
        check_total_strength(&s).unwrap();
    }

    /// A single Fourier mode: a Taylor-Green-like vorticity sampled by many blobs gives the
    /// velocity of the spectral solution; here we check the reference itself on a shear layer
    /// u = (sin z, 0, 0) whose vorticity (0, cos z, 0) is represented on a lattice of blobs.
    #[test]
    fn fourier_reference_reproduces_a_shear_mode() {
        let n = 16;
        let l = 2.0 * PI;
        let h = l / n as f64;
        let sigma = 1.5 * h; // lattice aliases at k = 16 are damped by exp(-44)
        let mut s = Sources::default();
        for i in 0..n {
            for j in 0..n {
                for k in 0..n {
                    let x = [-PI + i as f64 * h, -PI + j as f64 * h, -PI + k as f64 * h];
                    s.position.push(x);
                    s.strength.push([0.0, x[2].cos() * h.powi(3), 0.0]);
                    s.sigma.push(sigma);
                }
            }
        }
        let t = Targets::points(vec![[0.3, 0.1, 0.7], [-1.0, 2.0, -2.5]]);
        let f = fourier_reference(&s, &t, l, 8.3);
        let damp = (-0.5 * sigma * sigma).exp();
        for (i, x) in t.position.iter().enumerate() {
            // curl u = omega: u = (sin z, 0, 0) has curl (0, cos z, 0)
            let exact = x[2].sin() * damp;
            assert!(
                (f.velocity[i][0] - exact).abs() < 1e-10,
                "{:?}",
                f.velocity[i]
            );
            assert!(f.velocity[i][1].abs() < 1e-10 && f.velocity[i][2].abs() < 1e-10);
        }
    }
}
