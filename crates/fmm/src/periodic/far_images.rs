//! The far images of the box as one precomputed operator, for receivers given once (the cells
//! of a uniform grid): [`FarImages`].
//!
//! It sums the same images as [`super::outer_image_locals`], the copies of the box at offsets
//! `j L` with `2 <= |j|_inf <= J`, `J = (boxes_per_dimension - 1) / 2` (cubic summation, which
//! [`super::surface_correction`] assumes), but translates them without supercells: the
//! transfer harmonics of every image are summed once in [`FarImages::new`] (the lattice sum of
//! [`super::m2l_lattice`], core paper Eq. 27 with `T = sum_j I(x - j L)`), so that an evaluation
//! costs two plain M2L per receiver and one L2L, independent of `K`.
//!
//! * images with `2 <= |j|_inf <= 3` act on each receiver by one M2L with
//!   `T_r = sum_j I(x_r - j L)`; a receiver cell of width `<= L/3` keeps the ratio
//!   `(r_s + r_t) / d` of that M2L below `0.7`;
//! * images with `4 <= |j|_inf <= J` go by one M2L with `T_0 = sum_j I(-j L)` into a local
//!   about the origin (ratio `<= 0.43`), which L2L (exact) carries to each receiver.

use super::{LatticeTransfer, Periodic, ScaledMultipole};
use crate::expansions::harmonics::irregular;
use crate::expansions::{expansion_len, index, ncoef, Complex64};
use crate::operators::{Operators, Rotation, Scratch};
use rayon::prelude::*;

/// The far-image operator of one box, order and set of receivers (see the module doc).
#[derive(Clone, Debug)]
pub struct FarImages {
    order: usize,
    receivers: Vec<[f64; 3]>,
    ops: Operators,
    /// `T_0` of the images `4 <= |j|_inf <= J`; `None` when `K = 0` (no far images).
    root: Option<LatticeTransfer>,
    /// `T_r` of the images `2 <= |j|_inf <= 3`, per receiver (empty when `K = 0`).
    near: Vec<LatticeTransfer>,
    /// L2L from the origin to each receiver: rotation and distance (`None` at the origin).
    shift: Vec<Option<(Rotation, f64)>>,
}

impl FarImages {
    /// Precomputes the lattice-summed transfer harmonics (degree `<= 2 order`) for
    /// `receivers`, the centres of cells of width `<= L/3` inside the box `[-L/2, L/2)^3`.
    /// Each receives the images at `2 <= |j|_inf <= 3` by one M2L; all images at
    /// `|j|_inf >= 4` go to one root local about the origin, carried to each receiver by L2L.
    ///
    /// Cost: `(J + 1)^3` irregular harmonics for the root (the reflection symmetry of the cube
    /// saves the factor 8 of the `(2J + 1)^3` images), summed in parallel in a fixed order (the
    /// result does not depend on the thread count), and 316 per receiver. It grows 27-fold per
    /// image level: `J = 121`, `1.8e6` harmonics at `K = 4` (measured at `p = 10`: 0.12 s on 16
    /// threads, 1.45 s on one); `K = 5` takes seconds, `K >= 6` minutes or more.
    ///
    /// # Panics
    /// If `order` is not in `1..=MAX_ORDER` or a receiver lies outside the box.
    pub fn new(order: usize, periodic: &Periodic, receivers: Vec<[f64; 3]>) -> Self {
        let ops = Operators::new(order);
        let l = periodic.box_length;
        let half = 0.5 * l;
        if let Some(x) = receivers
            .iter()
            .find(|x| x.iter().any(|c| !(-half..=half).contains(c)))
        {
            panic!("far images: receiver {x:?} lies outside the periodic box [-{half}, {half})^3");
        }
        let shift = receivers
            .iter()
            .map(|&x| {
                let d = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
                (d > 0.0).then(|| (ops.rotation(x), d))
            })
            .collect();
        let (root, near) = if periodic.image_levels == 0 {
            (None, Vec::new())
        } else {
            let outer = (periodic.boxes_per_dimension() as i32 - 1) / 2;
            let t0 = cubic_lattice_harmonics(2 * order, l, 4, outer);
            let images = super::shell(l, 2, 3);
            let near = receivers
                .par_iter()
                .map(|&x| {
                    LatticeTransfer::from_harmonics(
                        order,
                        &super::summed_irregular(2 * order, &images, x),
                    )
                })
                .collect();
            (Some(LatticeTransfer::from_harmonics(order, &t0)), near)
        };
        Self {
            order,
            receivers,
            ops,
            root,
            near,
            shift,
        }
    }

    /// Expansion order `p`.
    pub fn order(&self) -> usize {
        self.order
    }

    /// The operators of the order (for the caller's M2M to the root multipole).
    pub fn operators(&self) -> &Operators {
        &self.ops
    }

    /// The receiver centres, in the order of the locals of [`FarImages::add_locals`].
    pub fn receivers(&self) -> &[[f64; 3]] {
        &self.receivers
    }

    /// Adds to `locals` (`receivers().len() * expansion_len(p)` coefficients, fmm layout:
    /// receiver-major, then the 3 components of `ncoef(p)`) the local expansions about the
    /// receivers of the far images of a box whose multipole about the origin is
    /// `root_multipole` (`expansion_len(p)`). Parallel over receivers; each receiver's sum has
    /// a fixed order (the result does not depend on the thread count). Nothing is added when
    /// `K = 0`.
    ///
    /// # Panics
    /// If a slice has the wrong length.
    pub fn add_locals(&self, root_multipole: &[Complex64], locals: &mut [Complex64]) {
        let p = self.order;
        let len = expansion_len(p);
        assert_eq!(
            root_multipole.len(),
            len,
            "far images: root multipole length"
        );
        assert_eq!(
            locals.len(),
            self.receivers.len() * len,
            "far images: locals must hold {} receivers of {len} coefficients",
            self.receivers.len()
        );
        let Some(root) = &self.root else {
            return;
        };
        let m0 = ScaledMultipole::new(p, root_multipole);
        let mut root_local = vec![Complex64::new(0.0, 0.0); len];
        root.apply(&m0, &mut root_local);
        locals
            .par_chunks_mut(len)
            .zip(self.near.par_iter().zip(&self.shift))
            .for_each_init(
                || Scratch::new(p),
                |scratch, (local, (near, shift))| {
                    near.apply(&m0, local);
                    match shift {
                        Some((rot, d)) => {
                            self.ops
                                .l2l_with_rotation(rot, *d, &root_local, local, scratch)
                        }
                        None => local.iter_mut().zip(&root_local).for_each(|(a, b)| *a += b),
                    }
                },
            );
    }
}

/// `T_n^m = sum_j I_n^m(-j L)` over `j in Z^3`, `lo <= |j|_inf <= hi` (`lo >= 1`), degree
/// `<= p2` (half array, layout `index`): the transfer harmonics of a cubic shell of images
/// onto the origin.
///
/// The shell is symmetric under the reflections of the axes, which act on the harmonics as
/// `I_n^m(x, y, -z) = (-1)^{n+m} I_n^m`, `I_n^m(x, -y, z) = conj(I_n^m)`,
/// `I_n^m(-x, y, z) = (-1)^m conj(I_n^m)` (`P_n^m(-u) = (-1)^{n+m} P_n^m(u)`,
/// `e^{i m (pi - f)} = (-1)^m e^{-i m f}`). The sum over the 8 reflections of one `j` is
/// therefore `8 Re I_n^m(j L)` for even `n` and `m` and zero otherwise, and the sum runs over
/// `j >= 0` only, each `j` weighted by `1 / 2^(number of zero components)` (its orbit is
/// smaller). Slabs of constant `j_x` are summed in parallel and added in order of `j_x`.
fn cubic_lattice_harmonics(p2: usize, l: f64, lo: i32, hi: i32) -> Vec<Complex64> {
    let n2 = ncoef(p2);
    let zero = Complex64::new(0.0, 0.0);
    let slabs: Vec<Vec<Complex64>> = (0..=hi)
        .into_par_iter()
        .map(|jx| {
            let (mut sum, mut ih) = (vec![zero; n2], vec![zero; n2]);
            for jy in 0..=hi {
                for jz in 0..=hi {
                    if jx.max(jy).max(jz) < lo {
                        continue;
                    }
                    let j = [jx, jy, jz];
                    let zeros = j.iter().filter(|&&c| c == 0).count() as i32;
                    let w = 0.5f64.powi(zeros);
                    irregular(p2, j.map(|c| -(c as f64) * l), &mut ih);
                    sum.iter_mut().zip(&ih).for_each(|(a, b)| *a += b * w);
                }
            }
            sum
        })
        .collect();
    let mut t = vec![zero; n2];
    for s in &slabs {
        t.iter_mut().zip(s).for_each(|(a, b)| *a += b);
    }
    for n in 0..=p2 {
        for m in 0..=n {
            let v = &mut t[index(n, m)];
            *v = if n % 2 == 0 && m % 2 == 0 {
                Complex64::new(8.0 * v.re, 0.0)
            } else {
                zero
            };
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluators::direct::direct_shifted;
    use crate::kernel::INV_4PI;
    use crate::tree::{BoundingCube, Tree};
    use crate::{relative_l2_error, Sources};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::f64::consts::PI;

    const L: f64 = 2.0 * PI;

    fn box_of(levels: usize) -> Periodic {
        Periodic {
            box_length: L,
            image_levels: levels,
        }
    }

    /// The moment-free set of `crate::testsets::moment_free` filling the box (cores 0.05).
    fn moment_free_set(quads: usize, seed: u64) -> Sources {
        crate::testsets::moment_free(quads, seed, 2.8, 0.05)
    }

    /// Centres of the `n^3` cells of width `L / n`.
    fn cell_centres(n: usize) -> Vec<[f64; 3]> {
        let h = L / n as f64;
        let c = |i: usize| -0.5 * L + (i as f64 + 0.5) * h;
        (0..n * n * n)
            .map(|i| [c(i / (n * n)), c(i / n % n), c(i % n)])
            .collect()
    }

    /// `per` random targets (position, strength) in the cube of half width `half` about each
    /// centre, grouped by centre.
    fn points_in_cells(
        centres: &[[f64; 3]],
        half: f64,
        per: usize,
        seed: u64,
    ) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut x = Vec::new();
        let mut a = Vec::new();
        for c in centres {
            for _ in 0..per {
                x.push(std::array::from_fn(|d| c[d] + rng.gen_range(-half..half)));
                a.push(std::array::from_fn(|_| rng.gen_range(-1.0..1.0)));
            }
        }
        (x, a)
    }

    /// Velocity and stretching (with `1/(4 pi)`) of the locals at the points, `per` points per
    /// receiver in receiver order.
    fn l2p_all(
        ops: &Operators,
        centres: &[[f64; 3]],
        locals: &[Complex64],
        x: &[[f64; 3]],
        a: &[[f64; 3]],
        per: usize,
    ) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
        let len = expansion_len(ops.order());
        let (mut u, mut s) = (vec![[0.0; 3]; x.len()], vec![[0.0; 3]; x.len()]);
        for (r, c) in centres.iter().enumerate() {
            let at = r * per..(r + 1) * per;
            ops.l2p(
                *c,
                &locals[r * len..(r + 1) * len],
                &x[at.clone()],
                &a[at.clone()],
                &mut u[at.clone()],
                &mut s[at],
            );
        }
        let scale = |v: Vec<[f64; 3]>| v.into_iter().map(|w| w.map(|c| c * INV_4PI)).collect();
        (scale(u), scale(s))
    }

    fn root_multipole(ops: &Operators, s: &Sources) -> Vec<Complex64> {
        let mut m = vec![Complex64::new(0.0, 0.0); expansion_len(ops.order())];
        ops.p2m([0.0; 3], &s.position, &s.strength, &mut m);
        m
    }

    #[test]
    fn reflection_symmetric_sum_equals_the_plain_sum() {
        let p2 = 16;
        for (lo, hi) in [(2, 3), (4, 13)] {
            let images = super::super::shell(L, lo, hi);
            let a = cubic_lattice_harmonics(p2, L, lo, hi);
            let b = super::super::summed_irregular(p2, &images, [0.0; 3]);
            // per degree: the sum of the magnitudes of the terms (odd degrees and n = 2 vanish
            // by the cubic symmetry, so the sums themselves are round-off there)
            let mut scale = vec![0.0; p2 + 1];
            let mut ih = vec![Complex64::new(0.0, 0.0); ncoef(p2)];
            for j in &images {
                irregular(p2, j.map(|c| -c), &mut ih);
                for (n, s) in scale.iter_mut().enumerate() {
                    *s += (index(n, 0)..=index(n, n))
                        .map(|i| ih[i].norm_sqr())
                        .sum::<f64>()
                        .sqrt();
                }
            }
            for (n, scale) in scale.iter().enumerate() {
                let err = (index(n, 0)..=index(n, n))
                    .map(|i| (a[i] - b[i]).norm_sqr())
                    .sum::<f64>()
                    .sqrt();
                assert!(
                    err <= 1e-14 * scale,
                    "|j| in {lo}..={hi}, n = {n}: difference {err:e}, terms {scale:e}"
                );
            }
        }
    }

    /// Relative L2 errors (velocity, stretching) of the far images of a moment-free set at
    /// `K = 1` against the explicit images `2 <= |j|_inf <= 4`, at 8 random points per cell.
    fn error_against_explicit_images(cells_per_dim: usize, p: usize) -> (f64, f64) {
        let s = moment_free_set(16, 7);
        let ops = Operators::new(p);
        let centres = cell_centres(cells_per_dim);
        let far = FarImages::new(p, &box_of(1), centres.clone());
        let mut locals = vec![Complex64::new(0.0, 0.0); centres.len() * expansion_len(p)];
        far.add_locals(&root_multipole(&ops, &s), &mut locals);
        let per = 8;
        let half = 0.5 * L / cells_per_dim as f64;
        let (x, a) = points_in_cells(&centres, half, per, 11);
        let (u, st) = l2p_all(&ops, &centres, &locals, &x, &a, per);
        let shifts = super::super::shell(L, 2, 4);
        let reference = direct_shifted(
            &s,
            &crate::Targets {
                position: x,
                strength: a,
            },
            &shifts,
        );
        (
            relative_l2_error(&u, &reference.velocity),
            relative_l2_error(&st, &reference.stretching),
        )
    }

    #[test]
    fn far_images_match_the_explicit_image_sum() {
        // The M2L of the images at |j|_inf = 2 limits the accuracy: the sources fill the box
        // (radius up to 0.86 L), the nearest image lies 1.6 L from the far corner cells, and
        // the error falls by about 0.45 per order. Measured (velocity, stretching):
        // 4^3 cells: p = 10 (3.7e-4, 1.5e-3), p = 16 (2.5e-6, 1.3e-5);
        // 3^3 cells: p = 10 (3.8e-4, 1.4e-3), p = 16 (2.6e-6, 1.2e-5).
        for n in [4, 3] {
            for (p, tol_u, tol_s) in [(10, 1.2e-3, 4.5e-3), (16, 8e-6, 4e-5)] {
                let (eu, es) = error_against_explicit_images(n, p);
                assert!(
                    eu < tol_u && es < tol_s,
                    "{n}^3 cells, p = {p}: velocity {eu:e}, stretching {es:e}"
                );
            }
        }
    }

    /// Relative L2 differences (velocity, stretching) between [`FarImages`] and
    /// [`super::super::outer_image_locals`] at `K = 4` on the 64 level-2 cells, 8 random
    /// points per cell, for a set with non-zero dipole moment.
    fn difference_from_outer_image_locals(p: usize) -> (f64, f64) {
        let per = box_of(4);
        let ops = Operators::new(p);
        let s = crate::testsets::generate(crate::testsets::Distribution::Uniform, 400, 3, true);
        let m0 = root_multipole(&ops, &s);
        // a tree of one point per level-2 cell: its level-2 cells receive outer_image_locals
        let tree = Tree::build(
            &cell_centres(4),
            BoundingCube {
                lo: [-0.5 * L; 3],
                width: L,
            },
            1,
        );
        let outer = super::super::outer_image_locals(&ops, &per, &m0, &tree);
        assert_eq!(outer.len(), 64);
        assert!(outer.iter().all(|(c, _)| tree.cells[*c].level == 2));
        let centres: Vec<[f64; 3]> = outer.iter().map(|(c, _)| tree.cells[*c].center).collect();
        let far = FarImages::new(p, &per, centres.clone());
        let mut locals = vec![Complex64::new(0.0, 0.0); centres.len() * expansion_len(p)];
        far.add_locals(&m0, &mut locals);
        let expected: Vec<Complex64> = outer.iter().flat_map(|(_, l)| l.clone()).collect();
        let per_cell = 8;
        let (x, a) = points_in_cells(&centres, L / 8.0, per_cell, 5);
        let (u, st) = l2p_all(&ops, &centres, &locals, &x, &a, per_cell);
        let (ue, se) = l2p_all(&ops, &centres, &expected, &x, &a, per_cell);
        (relative_l2_error(&u, &ue), relative_l2_error(&st, &se))
    }

    #[test]
    fn far_images_agree_with_outer_image_locals() {
        // Both sum the same images; they differ by the truncation of their different
        // groupings (|j|_inf = 3 on level-1 vs level-2 cells, supercells vs the exact lattice
        // sum beyond), each within the |j|_inf = 2 truncation they share (against p = 20, both
        // err by 6e-4 at p = 10 and 3e-5 at p = 14; at p = 20 they agree to 7e-9). Measured
        // (velocity, stretching): p = 10 (8.4e-5, 2.8e-5), p = 16 (2.5e-7, 2.4e-7).
        for (p, tol) in [(10, 3e-4), (16, 8e-7)] {
            let (eu, es) = difference_from_outer_image_locals(p);
            assert!(
                eu < tol && es < tol,
                "K = 4, p = {p}: velocity {eu:e}, stretching {es:e}"
            );
        }
    }

    #[test]
    fn no_image_levels_add_nothing() {
        let p = 6;
        let centres = cell_centres(3);
        let far = FarImages::new(p, &box_of(0), centres.clone());
        assert_eq!(far.order(), p);
        assert_eq!(far.receivers(), &centres[..]);
        let ops = Operators::new(p);
        let m0 = root_multipole(&ops, &moment_free_set(4, 1));
        let before: Vec<Complex64> = (0..centres.len() * expansion_len(p))
            .map(|i| Complex64::new(i as f64, -0.5 * i as f64))
            .collect();
        let mut locals = before.clone();
        far.add_locals(&m0, &mut locals);
        assert_eq!(locals, before);
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let p = 6;
        let ops = Operators::new(p);
        let m0 = root_multipole(&ops, &moment_free_set(8, 4));
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("thread pool");
            pool.install(|| {
                let far = FarImages::new(p, &box_of(2), cell_centres(4));
                let mut locals = vec![Complex64::new(0.0, 0.0); 64 * expansion_len(p)];
                far.add_locals(&m0, &mut locals);
                locals
            })
        };
        assert_eq!(run(1), run(3));
    }

    /// Times `new` (K = 4, p = 10, the 64 level-2 cells) and `add_locals`
    /// (`cargo test --release -p vortex-fmm far_images_timing -- --ignored --nocapture`).
    #[test]
    #[ignore = "measurement: cargo test --release -p vortex-fmm --lib far_images_timing -- --ignored --nocapture"]
    fn far_images_timing() {
        use std::time::Instant;
        let p = 10;
        let t0 = Instant::now();
        let far = FarImages::new(p, &box_of(4), cell_centres(4));
        let t_new = t0.elapsed().as_secs_f64();
        let ops = Operators::new(p);
        let m0 = root_multipole(&ops, &moment_free_set(64, 2));
        let mut locals = vec![Complex64::new(0.0, 0.0); 64 * expansion_len(p)];
        far.add_locals(&m0, &mut locals);
        let reps = 200;
        let t0 = Instant::now();
        for _ in 0..reps {
            far.add_locals(&m0, &mut locals);
        }
        let t_add = t0.elapsed().as_secs_f64() / reps as f64;
        eprintln!(
            "FarImages K = 4, p = {p}, 64 receivers, {} threads: new {:.3} s, add_locals {:.1} us",
            rayon::current_num_threads(),
            t_new,
            t_add * 1e6
        );
    }
}
