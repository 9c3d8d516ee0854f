//! Periodic boundary conditions of the uniform-grid FMM: the host helpers shared by the f64
//! twin ([`super::reference`]) and the device pipeline.
//!
//! The box is `[-L/2, L/2)^3` (`vortex_fmm::periodic::Periodic`), covered exactly by a periodic
//! [`UniformGrid`] (`UniformGrid::fixed_periodic` / `choose_periodic`). One evaluation:
//!
//! 1. [`pack_sources_periodic_into`]: the f32 pack of `crate::layout::pack_sources_into` with
//!    the positions wrapped (`Periodic::wrap`, f64, before the cast), and in the same pass
//!    the sums the method needs ([`PeriodicSums`]: validity, largest core radius, total
//!    strength, dipole tensor), reduced in a fixed block order (independent of the threads);
//!    [`PeriodicSums::check`] refuses bad input (non-zero total strength, a box under 4 core
//!    radii), then the grid is chosen from `sigma_max`;
//! 2. the device sort, P2M, M2M and the periodic lists of [`super::stencil`] (27 near-field
//!    images per leaf in 18 runs, [`leaf_runs_periodic`]; M2L with unwrapped offsets), which cover the
//!    `3 x 3 x 3` images of the box;
//! 3. the far images (`|T|_inf >= 2`): the multipoles of the top cells are moved to the
//!    origin ([`root_multipole`], f64 M2M) and `vortex_fmm::periodic::FarImages` adds their local
//!    expansions to the cells of `UniformGrid::receiver_level` ([`far_image_locals`]); L2L
//!    carries them down;
//! 4. the constant surface term of cubic summation is subtracted from every velocity
//!    ([`PeriodicSums::surface_correction`], as `vortex_fmm::periodic::surface_correction`).
//!
//! Expansions are in the layout of `fmm` (`expansion_len(p) = 3 ncoef(p)` complex
//! coefficients per cell, the device's f32 pairs of the same); the cells of a level are in
//! the grid's order (`i + nl (j + nl k)`), so the device path downloads the top level's
//! multipoles and uploads the receiver level's locals as they are, converted f32 <-> f64.

use super::grid::{coords, UniformGrid};
use super::stencil::image_code;
use crate::device::{GpuError, GpuResult};
use rayon::prelude::*;
use vortex_fmm::expansions::{expansion_len, Complex64};
use vortex_fmm::operators::{Operators, Scratch};
use vortex_fmm::periodic::{FarImages, Periodic};
use vortex_fmm::Sources;

/// Particles per block of the pack: the sums of the blocks are reduced in block order, so
/// they do not depend on the number of threads.
const BLOCK: usize = 4096;

/// Sums over the sources gathered by [`pack_sources_periodic_into`] (positions wrapped).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeriodicSums {
    /// Every position, strength and core radius finite, every core radius positive.
    pub valid: bool,
    /// Largest core radius.
    pub sigma_max: f64,
    /// `sum_j alpha_j`.
    pub total_strength: [f64; 3],
    /// `sum_j sum_c |alpha_jc|` (the scale of the total-strength test).
    pub abs_strength: f64,
    /// Dipole tensor `D[c][l] = sum_j alpha_jc x_jl` of the wrapped positions.
    pub dipole: [[f64; 3]; 3],
    /// Positions outside the box `[-L/2, L/2)^3` (wrapped), and more than one box length
    /// outside it.
    pub outside: usize,
    pub far: usize,
}

impl PeriodicSums {
    /// The sums of no source.
    pub fn zero() -> Self {
        PeriodicSums {
            valid: true,
            sigma_max: 0.0,
            total_strength: [0.0; 3],
            abs_strength: 0.0,
            dipole: [[0.0; 3]; 3],
            outside: 0,
            far: 0,
        }
    }

    /// Adds one source: input position `x`, its wrapped copy `w`, strength `a`, core radius
    /// `sigma`, box half-length `half`.
    fn add(&mut self, x: [f64; 3], w: [f64; 3], a: [f64; 3], sigma: f64, half: f64) {
        let finite = x.iter().chain(&a).all(|v| v.is_finite());
        self.valid &= finite && sigma.is_finite() && sigma > 0.0;
        self.sigma_max = self.sigma_max.max(sigma);
        for ((t, row), &ac) in self.total_strength.iter_mut().zip(&mut self.dipole).zip(&a) {
            *t += ac;
            self.abs_strength += ac.abs();
            for (d, &wl) in row.iter_mut().zip(&w) {
                *d += ac * wl;
            }
        }
        self.outside += x.iter().any(|&c| !(-half..half).contains(&c)) as usize;
        self.far += (x.iter().fold(0.0f64, |m, c| m.max(c.abs())) > 3.0 * half) as usize;
    }

    /// The sums of two disjoint sets.
    pub fn combine(&self, o: &Self) -> Self {
        PeriodicSums {
            valid: self.valid && o.valid,
            sigma_max: self.sigma_max.max(o.sigma_max),
            total_strength: std::array::from_fn(|c| self.total_strength[c] + o.total_strength[c]),
            abs_strength: self.abs_strength + o.abs_strength,
            dipole: std::array::from_fn(|c| {
                std::array::from_fn(|l| self.dipole[c][l] + o.dipole[c][l])
            }),
            outside: self.outside + o.outside,
            far: self.far + o.far,
        }
    }

    /// The constant velocity by which the cubic image sum differs from the zero-mean periodic
    /// solution, `u_m = (1 / 3V) eps_mlc D_cl` (`vortex_fmm::periodic::surface_correction`, of the
    /// wrapped positions; `1/(4 pi)` included): subtract it from every velocity.
    pub fn surface_correction(&self, box_length: f64) -> [f64; 3] {
        vortex_fmm::periodic::surface_velocity(&self.dipole, box_length)
    }

    /// Refuses what has no periodic solution or breaks the near field: the checks of
    /// `vortex_fmm::periodic::check_input` (tested to agree with it) from the sums of the pack, so
    /// the device path reads the particles once: a non-finite value or non-positive core
    /// radius, a total strength that is not zero to round-off (relative to `abs_strength`,
    /// the criterion of `vortex_fmm::periodic::check_total_strength`), a box under 4 core radii.
    /// Logs positions outside the box (they are wrapped).
    pub fn check(&self, periodic: &Periodic) -> GpuResult<()> {
        if !self.valid {
            return Err(GpuError::Unsupported(
                "sources with a non-finite value or a non-positive core radius".into(),
            ));
        }
        let counts = vortex_fmm::periodic::WrapCounts {
            outside: self.outside,
            far: self.far,
        };
        vortex_fmm::periodic::check_total(self.total_strength, self.abs_strength)
            .and_then(|()| vortex_fmm::periodic::check_box(periodic, self.sigma_max, counts))
            .map_err(|e| GpuError::Unsupported(e.to_string()))
    }
}

/// The checks every periodic entry point makes before touching the particles: valid
/// parameters and box, non-empty sources of equal lengths.
pub fn check_call(
    sources: &Sources,
    params: &super::UniformParams,
    periodic: &Periodic,
) -> GpuResult<()> {
    params.validate()?;
    periodic
        .validate()
        .map_err(|e| GpuError::Unsupported(e.to_string()))?;
    let np = sources.len();
    if np == 0 || sources.strength.len() != np || sources.sigma.len() != np {
        return Err(GpuError::Unsupported(
            "empty sources or sources of unequal lengths".into(),
        ));
    }
    Ok(())
}

/// `crate::layout::pack_sources_into` with the positions wrapped into the box (f64
/// `Periodic::wrap`, then the f32 cast): `(x, y, z, 1/sigma)` and `(ax, ay, az, 0)` rows into
/// `p` and `a` (at least `4 N` floats each), in parallel over blocks of 4096 particles, and
/// the [`PeriodicSums`] of the same pass. The lengths of the three arrays of `s` must agree.
pub fn pack_sources_periodic_into(
    s: &Sources,
    periodic: &Periodic,
    p: &mut [f32],
    a: &mut [f32],
) -> PeriodicSums {
    let np = s.len();
    assert!(s.strength.len() == np && s.sigma.len() == np);
    let half = 0.5 * periodic.box_length;
    let parts: Vec<PeriodicSums> = p[..4 * np]
        .par_chunks_mut(4 * BLOCK)
        .zip(a[..4 * np].par_chunks_mut(4 * BLOCK))
        .enumerate()
        .map(|(b, (p, a))| {
            let mut acc = PeriodicSums::zero();
            let i0 = b * BLOCK;
            for (k, (p, a)) in p.chunks_exact_mut(4).zip(a.chunks_exact_mut(4)).enumerate() {
                let i = i0 + k;
                let x = s.position[i];
                let w = periodic.wrap(x);
                let sg = s.sigma[i];
                p.copy_from_slice(&[w[0] as f32, w[1] as f32, w[2] as f32, (1.0 / sg) as f32]);
                let al = s.strength[i];
                a.copy_from_slice(&[al[0] as f32, al[1] as f32, al[2] as f32, 0.0]);
                acc.add(x, w, al, sg, half);
            }
            acc
        })
        .collect();
    parts
        .iter()
        .fold(PeriodicSums::zero(), |acc, x| acc.combine(x))
}

/// The [`PeriodicSums`] of `s` without the packing (the same blocks and order as
/// [`pack_sources_periodic_into`], so the same sums bitwise). The lengths of the three
/// arrays of `s` must agree.
pub fn periodic_sums(s: &Sources, periodic: &Periodic) -> PeriodicSums {
    let np = s.len();
    assert!(s.strength.len() == np && s.sigma.len() == np);
    let half = 0.5 * periodic.box_length;
    let parts: Vec<PeriodicSums> = (0..np.div_ceil(BLOCK))
        .into_par_iter()
        .map(|b| {
            let mut acc = PeriodicSums::zero();
            for i in b * BLOCK..((b + 1) * BLOCK).min(np) {
                let x = s.position[i];
                acc.add(x, periodic.wrap(x), s.strength[i], s.sigma[i], half);
            }
            acc
        })
        .collect();
    parts
        .iter()
        .fold(PeriodicSums::zero(), |acc, x| acc.combine(x))
}

/// `s` with every position wrapped into the box (`Periodic::wrap`).
pub fn wrapped(s: &Sources, periodic: &Periodic) -> Sources {
    Sources {
        position: s.position.par_iter().map(|&x| periodic.wrap(x)).collect(),
        strength: s.strength.clone(),
        sigma: s.sigma.clone(),
    }
}

/// [`pack_sources_periodic_into`] into new buffers: positions, strengths, sums.
pub fn pack_sources_periodic(
    s: &Sources,
    periodic: &Periodic,
) -> (Vec<f32>, Vec<f32>, PeriodicSums) {
    let mut p = vec![0.0f32; 4 * s.len()];
    let mut a = vec![0.0f32; 4 * s.len()];
    let sums = pack_sources_periodic_into(s, periodic, &mut p, &mut a);
    (p, a, sums)
}

/// The 18 near-field runs of leaf `c` (`u_leaf_tasks` of a periodic grid of `n >= 3` leaves
/// per side, from the `n^3 + 1` sorted leaf starts): `(first source, count, image code, 0)`,
/// two per neighbour row `(dy, dz)` (`dz` outermost): the row's cells `i - 1 ..= i + 1` are
/// contiguous unless the row wraps, so the first run holds the unwrapped part and the second
/// the wrapped cell (`count = 0` when the row does not wrap); rows across a face carry their
/// image shift (`stencil::image_code`). Together they are the 27 neighbours of
/// `stencil::neighbours_periodic`.
pub fn leaf_runs_periodic(starts: &[i32], n: usize, c: [usize; 3]) -> [[i32; 4]; 18] {
    let mut runs = [[0, 0, image_code([0, 0, 0]), 0]; 18];
    let i = c[0];
    let wrap = |v: i64| -> (usize, i64) {
        if v < 0 {
            ((v + n as i64) as usize, -1)
        } else if v >= n as i64 {
            ((v - n as i64) as usize, 1)
        } else {
            (v as usize, 0)
        }
    };
    let mut r = 0;
    for dz in -1..=1i64 {
        for dy in -1..=1i64 {
            let (jj, ty) = wrap(c[1] as i64 + dy);
            let (kk, tz) = wrap(c[2] as i64 + dz);
            let row = n * (jj + n * kk);
            let run = |a: usize, b: usize, tx: i64| {
                let (s0, s1) = (starts[row + a], starts[row + b + 1]);
                [s0, s1 - s0, image_code([tx, ty, tz]), 0]
            };
            if i == 0 {
                runs[r] = run(0, 1, 0);
                runs[r + 1] = run(n - 1, n - 1, -1);
            } else if i == n - 1 {
                runs[r] = run(n - 2, n - 1, 0);
                runs[r + 1] = run(0, 0, 1);
            } else {
                runs[r] = run(i - 1, i + 1, 0);
                runs[r + 1][2] = image_code([0, ty, tz]);
            }
            r += 2;
        }
    }
    runs
}

/// Centres of the cells that receive the far images, the cells of
/// `UniformGrid::receiver_level` in the grid's order (`i + nl (j + nl k)`).
pub fn receiver_centres(g: &UniformGrid) -> Vec<[f64; 3]> {
    let l = g.receiver_level();
    let nl = g.n_at(l);
    (0..nl.pow(3)).map(|i| g.center(l, coords(nl, i))).collect()
}

/// The far images of the periodic grid `g` at order `order` (built once per grid, order and
/// box; the lattice sums do not depend on the particles).
pub fn far_images_for(g: &UniformGrid, order: usize, periodic: &Periodic) -> FarImages {
    debug_assert!(g.periodic);
    FarImages::new(order, periodic, receiver_centres(g))
}

/// The multipole of the whole box about its centre (the origin) from the multipoles of the
/// `m^3` top cells (`top`: `m^3 expansion_len(p)` coefficients, grid order) by f64 M2M
/// (exact: equal to the P2M of every source about the origin to round-off).
pub fn root_multipole(ops: &Operators, g: &UniformGrid, top: &[Complex64]) -> Vec<Complex64> {
    let len = expansion_len(ops.order());
    let m = g.m;
    assert_eq!(top.len(), m.pow(3) * len);
    let mut root = vec![Complex64::new(0.0, 0.0); len];
    let mut scratch = Scratch::new(ops.order());
    for (i, mc) in top.chunks_exact(len).enumerate() {
        let c = g.center(0, coords(m, i));
        if c.iter().all(|v| v.abs() <= 1e-14 * g.side) {
            // the centre cell: no translation
            root.iter_mut().zip(mc).for_each(|(r, x)| *r += x);
        } else {
            ops.m2m(c, [0.0; 3], mc, &mut root, &mut scratch);
        }
    }
    root
}

/// Adds the local expansions of the far images to `locals`, the receiver level's locals
/// (`receiver_centres(g).len() expansion_len(p)` coefficients, grid order), from the top
/// cells' multipoles `top` ([`root_multipole`]); `far` from [`far_images_for`].
pub fn far_image_locals(
    far: &FarImages,
    ops: &Operators,
    g: &UniformGrid,
    top: &[Complex64],
    locals: &mut [Complex64],
) {
    let nl = g.n_at(g.receiver_level());
    assert_eq!(locals.len(), nl.pow(3) * expansion_len(ops.order()));
    let root = root_multipole(ops, g, top);
    far.add_locals(&root, locals);
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // index loops over coordinates
mod tests {
    use super::*;
    use crate::layout::pack_sources;
    use crate::uniform::grid::{local_index, Extent};
    use crate::uniform::sort::sort_emulated;
    use crate::uniform::stencil::neighbours_periodic;
    use std::f64::consts::PI;

    fn box_set(n: usize, seed: u64) -> Sources {
        vortex_fmm::testsets::generate(vortex_fmm::testsets::Distribution::Uniform, n, seed, true)
    }

    #[test]
    fn wrapping_pack_equals_the_pack_of_the_wrapped_set_and_its_sums_are_exact() {
        let per = Periodic::default();
        let mut s = box_set(10_000, 3);
        // some positions outside the box, one of them far
        for (i, x) in s.position.iter_mut().enumerate().step_by(7) {
            x[i % 3] += 2.0 * PI * ((i % 5) as f64 - 2.0);
        }
        s.position[1][2] = 40.0;
        let wrapped = Sources {
            position: s.position.iter().map(|&x| per.wrap(x)).collect(),
            ..s.clone()
        };
        let (p, a, sums) = pack_sources_periodic(&s, &per);
        let (pw, aw) = pack_sources(&wrapped);
        assert_eq!((p, a), (pw, aw));
        assert!(sums.valid);
        assert_eq!(sums.sigma_max, s.max_sigma());
        let half = 0.5 * per.box_length;
        let out = |x: &[f64; 3]| x.iter().any(|c| !(-half..half).contains(c));
        let far = |x: &[f64; 3]| x.iter().any(|c| c.abs() > 3.0 * half);
        assert_eq!(sums.outside, s.position.iter().filter(|x| out(x)).count());
        assert_eq!(sums.far, s.position.iter().filter(|x| far(x)).count());
        assert!(sums.outside > 1000 && sums.far > 0, "{sums:?}");
        let want = vortex_fmm::periodic::surface_correction(&wrapped, per.box_length);
        let got = sums.surface_correction(per.box_length);
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for c in 0..3 {
            assert!(
                (got[c] - want[c]).abs() <= 1e-12 * scale,
                "{got:?} {want:?}"
            );
        }
        let t = vortex_fmm::periodic::total_strength(&s);
        for c in 0..3 {
            assert!((sums.total_strength[c] - t[c]).abs() < 1e-15);
        }
        sums.check(&per).unwrap();
    }

    #[test]
    fn bad_input_is_refused() {
        let per = Periodic::default();
        let s = vortex_fmm::testsets::standard(500, 1);
        let e = pack_sources_periodic(&s, &per).2.check(&per).unwrap_err();
        assert!(e.to_string().contains("total strength"), "{e}");
        let mut s = box_set(500, 1);
        s.sigma[7] = 2.0;
        let e = pack_sources_periodic(&s, &per).2.check(&per).unwrap_err();
        assert!(e.to_string().contains("4 core radii"), "{e}");
        s.sigma[7] = 0.1;
        s.position[3][0] = f64::NAN;
        let e = pack_sources_periodic(&s, &per).2.check(&per).unwrap_err();
        assert!(e.to_string().contains("non-finite"), "{e}");
        s.position[3][0] = 0.0;
        s.strength[4][1] = f64::INFINITY;
        assert!(pack_sources_periodic(&s, &per).2.check(&per).is_err());
    }

    /// The checks from the sums accept and refuse what `vortex_fmm::periodic::check_input` does and
    /// count the same positions outside the box.
    #[test]
    fn checks_agree_with_the_fmm_checks() {
        let per = Periodic::default();
        let mut cases = vec![box_set(800, 2), vortex_fmm::testsets::standard(800, 2)];
        let mut big = box_set(800, 2);
        big.sigma[3] = 1.6;
        let mut small = box_set(800, 2);
        small.sigma[3] = 1.5;
        let mut out = box_set(800, 2);
        for (i, x) in out.position.iter_mut().enumerate().step_by(3) {
            x[i % 3] += per.box_length * ((i % 5) as f64 - 2.0);
        }
        cases.extend([big, small, out]);
        for (i, s) in cases.iter().enumerate() {
            let sums = pack_sources_periodic(s, &per).2;
            let want = vortex_fmm::periodic::check_input(&per, s, &[]);
            assert_eq!(sums.check(&per).is_ok(), want.is_ok(), "case {i}");
            if let Ok(c) = want {
                assert_eq!((sums.outside, sums.far), (c.outside, c.far), "case {i}");
            }
        }
    }

    #[test]
    fn root_multipole_equals_the_p2m_of_all_sources() {
        let per = Periodic::default();
        let s = box_set(3000, 5);
        for (m, k) in [(1, 2), (3, 0), (3, 1)] {
            let g = UniformGrid::fixed_periodic(&Extent::periodic(&per, 0.1), m, k).unwrap();
            let p = 8;
            let ops = Operators::new(p);
            let len = expansion_len(p);
            let (pos4, _, _) = pack_sources_periodic(&s, &per);
            // top cells' multipoles from their particles (the device's cell assignment)
            let (lo, inv_w) = UniformGrid { k: 0, ..g }.f32_params();
            let arrival: Vec<usize> = (0..s.len()).collect();
            let (perm, starts) = sort_emulated(&pos4, lo, inv_w, m, &arrival);
            let x: Vec<[f64; 3]> = perm
                .iter()
                .map(|&i| per.wrap(s.position[i as usize]))
                .collect();
            let a: Vec<[f64; 3]> = perm.iter().map(|&i| s.strength[i as usize]).collect();
            let mut top = vec![Complex64::new(0.0, 0.0); m.pow(3) * len];
            for c in 0..m.pow(3) {
                let r = starts[c] as usize..starts[c + 1] as usize;
                let centre = g.center(0, coords(m, c));
                ops.p2m(
                    centre,
                    &x[r.clone()],
                    &a[r],
                    &mut top[c * len..(c + 1) * len],
                );
            }
            let got = root_multipole(&ops, &g, &top);
            let mut want = vec![Complex64::new(0.0, 0.0); len];
            ops.p2m([0.0; 3], &x, &a, &mut want);
            let num: f64 = got.iter().zip(&want).map(|(a, b)| (a - b).norm_sqr()).sum();
            let den: f64 = want.iter().map(|b| b.norm_sqr()).sum();
            assert!(num.sqrt() <= 1e-12 * den.sqrt(), "m {m}: {num:e} {den:e}");
            // receivers: the cells of level 2 (m = 1) or 0 (m = 3), in grid order
            let rc = receiver_centres(&g);
            let nl = if m == 1 { 4 } else { 3 };
            assert_eq!(rc.len(), nl * nl * nl);
            assert_eq!(
                rc[local_index(nl, [1, 2, 0])],
                g.center(g.receiver_level(), [1, 2, 0])
            );
        }
    }

    #[test]
    fn periodic_runs_are_the_27_neighbours() {
        // n = 5 and 6: every leaf's 18 runs hold exactly the particles of its 27 periodic
        // neighbours, each with the neighbour's image shift
        let per = Periodic::default();
        let s = box_set(3000, 9);
        for (m, k) in [(5, 0), (3, 1)] {
            let g = UniformGrid {
                m,
                k,
                lo: [-0.5 * per.box_length; 3],
                side: per.box_length,
                periodic: true,
            };
            let (pos4, _, _) = pack_sources_periodic(&s, &per);
            let (lo, inv_w) = g.f32_params();
            let n = g.n();
            let arrival: Vec<usize> = (0..s.len()).collect();
            let (_, starts) = sort_emulated(&pos4, lo, inv_w, n, &arrival);
            for c in [
                [0, 0, 0],
                [n - 1, 2, 0],
                [1, n - 1, n - 1],
                [2, 2, 2],
                [n - 1, 0, 3],
            ] {
                let mut got: Vec<(i32, i32)> = leaf_runs_periodic(&starts, n, c)
                    .iter()
                    .flat_map(|r| (r[0]..r[0] + r[1]).map(move |j| (j, r[2])))
                    .collect();
                let mut want: Vec<(i32, i32)> = neighbours_periodic(n, c)
                    .into_iter()
                    .flat_map(|(cell, t)| {
                        let i = local_index(n, cell);
                        (starts[i]..starts[i + 1]).map(move |j| (j, image_code(t)))
                    })
                    .collect();
                got.sort_unstable();
                want.sort_unstable();
                assert_eq!(got, want, "n {n} leaf {c:?}");
            }
        }
    }

    #[test]
    fn periodic_runs_cover_the_27_images() {
        let per = Periodic::default();
        let s = box_set(2000, 8);
        let g = UniformGrid::fixed_periodic(&Extent::periodic(&per, 0.1), 3, 0).unwrap();
        let (pos4, _, _) = pack_sources_periodic(&s, &per);
        let (lo, inv_w) = g.f32_params();
        let n = g.n();
        let arrival: Vec<usize> = (0..s.len()).collect();
        let (perm, starts) = sort_emulated(&pos4, lo, inv_w, n, &arrival);
        let w = g.leaf_width();
        for c in [[0, 0, 0], [2, 1, 0], [1, 1, 1]] {
            let runs = leaf_runs_periodic(&starts, n, c);
            let centre = g.center(0, c);
            let mut seen = vec![0; s.len()];
            for r in &runs {
                let t = vortex_fmm::lists::image_shift(r[2] as u8);
                for j in r[0]..r[0] + r[1] {
                    let q = 4 * perm[j as usize] as usize;
                    seen[j as usize] += 1;
                    // n = 3: every particle once, at the image within 1.5 leaves of the leaf
                    for d in 0..3 {
                        let x = pos4[q + d] as f64 + t[d] as f64 * per.box_length;
                        assert!((x - centre[d]).abs() <= 1.5 * w + 1e-5, "{c:?} {t:?}");
                    }
                }
            }
            assert!(seen.iter().all(|&k| k == 1));
        }
    }
}
