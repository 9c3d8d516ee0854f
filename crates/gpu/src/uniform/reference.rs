//! CPU f64 evaluation of the uniform-grid FMM: the same grid, sort (host emulation of the
//! device sort), implicit lists and phases as the device path, with the f64 operators of
//! `vortex_fmm::operators` (core paper Eq. 12-35) and the f64 pair kernel. It separates the method's
//! error (grid, lists, order, core cutoff) from the f32 error of the kernels: tested against
//! `vortex_fmm::evaluators::direct`, and the device path is tested against it.
//!
//! [`evaluate_reference_periodic`] is the twin of the periodic device method
//! ([`super::periodic`]): the same stages on a periodic grid (wrapping pack, periodic lists,
//! far images at the receiver level, surface correction), tested against the periodic
//! direct sum, the Ewald reference and the adaptive periodic FMM.

use super::grid::{coords, local_index, Extent, UniformGrid};
use super::periodic::{check_call, far_image_locals, far_images_for, pack_sources_periodic};
use super::sort::sort_emulated;
use super::stencil::{m2l_sources, m2l_sources_periodic, neighbours, neighbours_periodic};
use super::UniformParams;
use crate::device::{GpuError, GpuResult};
use crate::layout::pack_sources;
use rayon::prelude::*;
use std::collections::HashMap;
use vortex_fmm::expansions::{ncoef, Complex64};
use vortex_fmm::kernel::{pair_interaction_core, CoreOrder, INV_4PI};
use vortex_fmm::operators::{Operators, Rotation, Scratch};
use vortex_fmm::periodic::{FarImages, Periodic};
use vortex_fmm::{Fields, Sources};

/// Velocity and stretching (input order, with `1/(4 pi)`) by the uniform-grid FMM in f64.
pub fn evaluate_reference(sources: &Sources, params: &UniformParams) -> GpuResult<Fields> {
    params.validate()?;
    let np = sources.len();
    let ext = Extent::of(&sources.position, &sources.sigma)
        .ok_or_else(|| GpuError::Unsupported("empty or invalid sources".into()))?;
    let g = params.grid_for(&ext, np);
    let mut f = RefFmm::new(g, params.order, sources);
    f.core = params.core;
    let all = (0, g.n());
    f.p2m(all);
    for l in (0..g.k).rev() {
        f.m2m(l, (0, g.n_at(l)));
    }
    for l in 0..=g.k {
        f.m2l(l, (0, g.n_at(l)));
    }
    for l in 1..=g.k {
        f.l2l(l, (0, g.n_at(l)));
    }
    Ok(f.fields(all, np))
}

/// Velocity and stretching (input order, with `1/(4 pi)`) of the zero-total-strength
/// `sources` in the periodic box of `periodic` by the periodic uniform-grid FMM in f64 (the
/// method of [`super::periodic`]): zero-mean periodic solution, positions anywhere (wrapped).
/// Errors: invalid parameters or sources, a non-zero total strength, a box under 4 core
/// radii, or too small for one leaf of `core_cutoff` core radii with 3 leaves per side.
pub fn evaluate_reference_periodic(
    sources: &Sources,
    params: &UniformParams,
    periodic: &Periodic,
) -> GpuResult<Fields> {
    check_call(sources, params, periodic)?;
    let np = sources.len();
    let (pos4, _, sums) = pack_sources_periodic(sources, periodic);
    sums.check(periodic)?;
    let g = params.grid_for_periodic(&Extent::periodic(periodic, sums.sigma_max), np)?;
    let mut f = RefFmm::from_packed(g, params.order, sources, &pos4, |i| {
        periodic.wrap(sources.position[i])
    });
    f.core = params.core;
    let all = (0, g.n());
    f.p2m(all);
    for l in (0..g.k).rev() {
        f.m2m(l, (0, g.n_at(l)));
    }
    f.far_images(&far_images_for(&g, params.order, periodic));
    for l in 0..=g.k {
        f.m2l(l, (0, g.n_at(l)));
    }
    for l in 1..=g.k {
        f.l2l(l, (0, g.n_at(l)));
    }
    let mut out = f.fields(all, np);
    let corr = sums.surface_correction(periodic.box_length);
    for v in &mut out.velocity {
        for c in 0..3 {
            v[c] -= corr[c];
        }
    }
    Ok(out)
}

/// The stages of the f64 uniform-grid FMM over the particles of one rank (all of them on one
/// rank): expansions are stored for every cell of the grid; each stage runs over the cells of
/// a range of z-planes of its level (`zr = (first, end)`), a contiguous index range. On a
/// periodic grid (`g.periodic`) the M2L and the near field use the periodic lists (sources
/// of image `t` at `x + t L`, `L = g.side`) and [`RefFmm::far_images`] adds the far images.
pub(crate) struct RefFmm {
    pub g: UniformGrid,
    p: usize,
    ops: Operators,
    /// Coefficients per cell (`3 ncoef(p)`).
    pub len: usize,
    x: Vec<[f64; 3]>,
    a: Vec<[f64; 3]>,
    sg: Vec<f64>,
    perm: Vec<i32>,
    starts: Vec<i32>,
    pub mult: Vec<Complex64>,
    loc: Vec<Complex64>,
    rots: HashMap<[i64; 3], Rotation>,
    /// The core of the near field (the Gaussian unless set).
    pub core: CoreOrder,
}

impl RefFmm {
    /// Sorts `sources` into the leaves of `g` (the device's f32 cell assignment and order).
    pub fn new(g: UniformGrid, p: usize, sources: &Sources) -> Self {
        let (pos4, _) = pack_sources(sources);
        Self::from_packed(g, p, sources, &pos4, |i| sources.position[i])
    }

    /// Sorts `sources` into the leaves of `g` by their packed f32 positions `pos4` (the
    /// device's cell assignment and order); `position(i)` is the f64 position of source `i`
    /// the stages use (the input one, or its wrapped copy on a periodic grid).
    pub fn from_packed(
        g: UniformGrid,
        p: usize,
        sources: &Sources,
        pos4: &[f32],
        position: impl Fn(usize) -> [f64; 3] + Sync,
    ) -> Self {
        let ops = Operators::new(p);
        let len = 3 * ncoef(p);
        let (lo, inv_w) = g.f32_params();
        let arrival: Vec<usize> = (0..sources.len()).collect();
        let (perm, starts) = sort_emulated(pos4, lo, inv_w, g.n(), &arrival);
        let x = perm.iter().map(|&i| position(i as usize)).collect();
        let a = perm.iter().map(|&i| sources.strength[i as usize]).collect();
        let sg = perm.iter().map(|&i| sources.sigma[i as usize]).collect();
        // one rotation per integer offset
        let r = g.max_offset() as i64;
        let mut rots = HashMap::new();
        for vz in -r..=r {
            for vy in -r..=r {
                for vx in -r..=r {
                    if vx.abs().max(vy.abs()).max(vz.abs()) >= 2 {
                        let v = [vx, vy, vz];
                        rots.insert(v, ops.rotation(v.map(|t| t as f64)));
                    }
                }
            }
        }
        let zero = Complex64::default();
        RefFmm {
            g,
            p,
            ops,
            len,
            x,
            a,
            sg,
            perm,
            starts,
            mult: vec![zero; g.total_cells() * len],
            loc: vec![zero; g.total_cells() * len],
            rots,
            core: CoreOrder::Second,
        }
    }

    fn range(&self, c: usize) -> std::ops::Range<usize> {
        self.starts[c] as usize..self.starts[c + 1] as usize
    }

    /// Coefficient range of the cells of z-planes `zr` of level `l`.
    fn span(&self, l: usize, zr: (usize, usize)) -> std::ops::Range<usize> {
        let nl = self.g.n_at(l);
        let off = self.g.level_offset(l);
        (off + zr.0 * nl * nl) * self.len..(off + zr.1 * nl * nl) * self.len
    }

    /// P2M of the leaves of planes `zr`.
    pub fn p2m(&mut self, zr: (usize, usize)) {
        let (g, n, len) = (self.g, self.g.n(), self.len);
        let c0 = zr.0 * n * n;
        let span = self.span(g.k, zr);
        let (ops, x, a) = (&self.ops, &self.x, &self.a);
        let starts = &self.starts;
        self.mult[span]
            .par_chunks_mut(len)
            .enumerate()
            .for_each(|(u, m)| {
                let c = c0 + u;
                let r = starts[c] as usize..starts[c + 1] as usize;
                ops.p2m(g.center(g.k, coords(n, c)), &x[r.clone()], &a[r], m);
            });
    }

    /// M2M into the parents of planes `zr` of level `l < k` from all their children.
    pub fn m2m(&mut self, l: usize, zr: (usize, usize)) {
        let (g, len, p) = (self.g, self.len, self.p);
        let (nl, nc) = (g.n_at(l), g.n_at(l + 1));
        let c0 = zr.0 * nl * nl;
        let span = self.span(l, zr);
        let (upper, lower) = self.mult.split_at_mut(g.level_offset(l + 1) * len);
        let parents = &mut upper[span];
        let children = &lower[..nc.pow(3) * len];
        let ops = &self.ops;
        parents.par_chunks_mut(len).enumerate().for_each_init(
            || Scratch::new(p),
            |scr, (u, out)| {
                let pc = coords(nl, c0 + u);
                for o in 0..8 {
                    let cc = [
                        2 * pc[0] + (o & 1),
                        2 * pc[1] + (o >> 1 & 1),
                        2 * pc[2] + (o >> 2),
                    ];
                    let ci = local_index(nc, cc);
                    ops.m2m(
                        g.center(l + 1, cc),
                        g.center(l, pc),
                        &children[ci * len..(ci + 1) * len],
                        out,
                        scr,
                    );
                }
            },
        );
    }

    /// M2L into the cells of planes `zr` of level `l` over their stencil.
    pub fn m2l(&mut self, l: usize, zr: (usize, usize)) {
        let (g, len, p) = (self.g, self.len, self.p);
        let nl = g.n_at(l);
        let w = g.width(l);
        let off = g.level_offset(l);
        let c0 = zr.0 * nl * nl;
        let span = self.span(l, zr);
        let mult_l = &self.mult[off * len..(off + nl.pow(3)) * len];
        let (ops, rots) = (&self.ops, &self.rots);
        self.loc[span]
            .par_chunks_mut(len)
            .enumerate()
            .for_each_init(
                || Scratch::new(p),
                |scr, (u, out)| {
                    let tc = coords(nl, c0 + u);
                    let mut m2l = |sc: [usize; 3], v: [i64; 3]| {
                        let dist = w * ((v[0] * v[0] + v[1] * v[1] + v[2] * v[2]) as f64).sqrt();
                        let si = local_index(nl, sc);
                        ops.m2l_with_rotation(
                            &rots[&v],
                            dist,
                            &mult_l[si * len..(si + 1) * len],
                            out,
                            scr,
                        );
                    };
                    if g.periodic {
                        for (sc, _, v) in m2l_sources_periodic(nl, l == 0, g.m, tc) {
                            m2l(sc, v);
                        }
                    } else {
                        for sc in m2l_sources(nl, l == 0, tc) {
                            m2l(sc, std::array::from_fn(|d| tc[d] as i64 - sc[d] as i64));
                        }
                    }
                },
            );
    }

    /// Periodic grid: adds the local expansions of the far images to the cells of the
    /// receiver level (`super::periodic::far_image_locals`) from the top-level multipoles
    /// (after the upward pass, before the L2L).
    pub fn far_images(&mut self, far: &FarImages) {
        let (g, len) = (self.g, self.len);
        let rl = g.receiver_level();
        let top = &self.mult[..g.m.pow(3) * len];
        let off = g.level_offset(rl) * len;
        let locals = &mut self.loc[off..off + g.n_at(rl).pow(3) * len];
        far_image_locals(far, &self.ops, &g, top, locals);
    }

    /// L2L into the cells of planes `zr` of level `l >= 1` from their parents.
    pub fn l2l(&mut self, l: usize, zr: (usize, usize)) {
        let (g, len, p) = (self.g, self.len, self.p);
        let (nl, np_) = (g.n_at(l), g.n_at(l - 1));
        let c0 = zr.0 * nl * nl;
        let span = self.span(l, zr);
        let (upper, lower) = self.loc.split_at_mut(g.level_offset(l) * len);
        let parents = &upper[g.level_offset(l - 1) * len..];
        let lo = g.level_offset(l) * len;
        let ops = &self.ops;
        lower[span.start - lo..span.end - lo]
            .par_chunks_mut(len)
            .enumerate()
            .for_each_init(
                || Scratch::new(p),
                |scr, (u, out)| {
                    let cc = coords(nl, c0 + u);
                    let pc = cc.map(|v| v / 2);
                    let pi = local_index(np_, pc);
                    ops.l2l(
                        g.center(l - 1, pc),
                        g.center(l, cc),
                        &parents[pi * len..(pi + 1) * len],
                        out,
                        scr,
                    );
                },
            );
    }

    /// L2P and P2P (27 neighbours) of the particles of the leaves of planes `zr`; fields
    /// (with `1/(4 pi)`) of the sorted particles whose input index is below `n_out`, in input
    /// order (`n_out` entries).
    pub fn fields(&self, zr: (usize, usize), n_out: usize) -> Fields {
        let (g, n, len) = (self.g, self.g.n(), self.len);
        let leaf0 = g.level_offset(g.k);
        let leaf_loc = &self.loc[leaf0 * len..];
        let (x, a, sg, ops) = (&self.x, &self.a, &self.sg, &self.ops);
        type Leaf = (usize, Vec<([f64; 3], [f64; 3])>);
        let per_leaf: Vec<Leaf> = (zr.0 * n * n..zr.1 * n * n)
            .into_par_iter()
            .map(|c| {
                let rr = self.range(c);
                let cnt = rr.len();
                if cnt == 0 {
                    return (rr.start, Vec::new());
                }
                let (mut u, mut s) = (vec![[0.0; 3]; cnt], vec![[0.0; 3]; cnt]);
                ops.l2p(
                    g.center(g.k, coords(n, c)),
                    &leaf_loc[c * len..(c + 1) * len],
                    &x[rr.clone()],
                    &a[rr.clone()],
                    &mut u,
                    &mut s,
                );
                // (source cell, shift of its sources) of the 27 neighbours
                let nbs: Vec<([usize; 3], [f64; 3])> = if g.periodic {
                    neighbours_periodic(n, coords(n, c))
                        .into_iter()
                        .map(|(nb, t)| (nb, t.map(|v| v as f64 * g.side)))
                        .collect()
                } else {
                    neighbours(n, coords(n, c))
                        .into_iter()
                        .map(|nb| (nb, [0.0; 3]))
                        .collect()
                };
                for (q, i) in rr.clone().enumerate() {
                    for (nb, sh) in &nbs {
                        for j in self.range(local_index(n, *nb)) {
                            let xj = if g.periodic {
                                std::array::from_fn(|d| x[j][d] + sh[d])
                            } else {
                                x[j]
                            };
                            let (du, ds) =
                                pair_interaction_core(self.core, x[i], a[i], xj, a[j], sg[j]);
                            for d in 0..3 {
                                u[q][d] += du[d];
                                s[q][d] += ds[d];
                            }
                        }
                    }
                }
                (rr.start, u.into_iter().zip(s).collect())
            })
            .collect();
        let mut out = Fields::zeros(n_out);
        for (first, v) in per_leaf {
            for (q, (u, s)) in v.into_iter().enumerate() {
                let i = self.perm[first + q] as usize;
                if i < n_out {
                    out.velocity[i] = u.map(|v| v * INV_4PI);
                    out.stretching[i] = s.map(|v| v * INV_4PI);
                }
            }
        }
        out
    }
}

/// The grid [`evaluate_reference`] uses for `sources` (for diagnostics).
pub fn reference_grid(sources: &Sources, params: &UniformParams) -> Option<UniformGrid> {
    let ext = Extent::of(&sources.position, &sources.sigma)?;
    Some(params.grid_for(&ext, sources.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vortex_fmm::evaluators::direct::direct;
    use vortex_fmm::relative_l2_error;

    /// Random points with small cores (so the grid has levels and M2L at every level) against
    /// the f64 direct sum: the classical lists at p = 8 and 12.
    #[test]
    fn reference_matches_the_direct_sum() {
        let mut s = vortex_fmm::testsets::standard(6000, 9);
        s.sigma.iter_mut().for_each(|v| *v = 0.02);
        let want = direct(&s, &s.as_targets());
        for (p, m, k, tol_u, tol_s) in [
            (8, 3, 1, 1e-4, 1e-3),
            (8, 2, 2, 1e-4, 1e-3),
            (12, 1, 3, 1e-5, 1e-4),
        ] {
            let params = UniformParams {
                order: p,
                grid: Some((m, k)),
                ..Default::default()
            };
            let got = evaluate_reference(&s, &params).unwrap();
            let (eu, es) = got.relative_l2_errors(&want);
            println!("p {p} m {m} k {k}: velocity {eu:.2e} stretching {es:.2e}");
            assert!(
                eu < tol_u && es < tol_s,
                "p {p} m {m} k {k}: {eu:.2e} {es:.2e}"
            );
        }
    }

    /// Large cores: the grid is coarse (gap condition) and the near field carries the cores.
    #[test]
    fn reference_with_overlapping_cores() {
        let s = vortex_fmm::testsets::standard(3000, 4);
        let want = direct(&s, &s.as_targets());
        let params = UniformParams {
            order: 8,
            core_cutoff: 3.0,
            leaf_target: 20.0,
            ..Default::default()
        };
        let g = reference_grid(&s, &params).unwrap();
        assert!(g.n() >= 4, "{g:?}");
        let got = evaluate_reference(&s, &params).unwrap();
        let eu = relative_l2_error(&got.velocity, &want.velocity);
        println!("grid {g:?}: velocity {eu:.2e}");
        // cutoff 3: 1 - q(3) = 0.03 for the nearest far pairs, a visible but bounded error
        assert!(eu < 0.05, "{eu:.2e}");
    }

    /// A zero-total-strength set in the box `[-pi, pi)^3` of `n` blobs of core `sigma`.
    fn periodic_set(n: usize, seed: u64, sigma: f64) -> Sources {
        let mut s = vortex_fmm::testsets::generate(
            vortex_fmm::testsets::Distribution::Uniform,
            n,
            seed,
            true,
        );
        s.sigma.iter_mut().for_each(|v| *v = sigma);
        s
    }

    fn sample(s: &Sources, step: usize) -> Vec<usize> {
        (0..s.len()).step_by(step).collect()
    }

    fn pick(f: &[[f64; 3]], idx: &[usize]) -> Vec<[f64; 3]> {
        idx.iter().map(|&i| f[i]).collect()
    }

    fn targets(s: &Sources, idx: &[usize]) -> vortex_fmm::Targets {
        vortex_fmm::Targets {
            position: pick(&s.position, idx),
            strength: pick(&s.strength, idx),
        }
    }

    fn periodic_params(p: usize, grid: Option<(usize, usize)>) -> UniformParams {
        UniformParams {
            order: p,
            grid,
            ..Default::default()
        }
    }

    /// The periodic twin against the periodic direct sum (27 images directly, the far images
    /// at order 16, the same surface correction) at p = 10 on grids with M2L at every kind of
    /// level: m = 1 (far images at level 2), m = 3 (top-level M2L over the box images).
    /// Measured: velocity 2.8e-5 to 5.5e-5, stretching 5e-5 to 2.3e-4: the M2L truncation of
    /// the classical lists (ratio up to 0.87; p = 14 gives 1.7e-6 to 4e-6), relative to the
    /// weak field of a zero-mean random set; without far images (K = 0, both sides) the
    /// errors are the same.
    #[test]
    fn periodic_reference_matches_the_periodic_direct_sum() {
        let per = Periodic::default();
        let s = periodic_set(3000, 31, 0.15);
        let idx = sample(&s, 3);
        let want = vortex_fmm::evaluators::direct::direct_periodic(&s, &targets(&s, &idx), &per);
        for grid in [Some((1, 2)), Some((3, 1)), Some((1, 3)), None] {
            let got = evaluate_reference_periodic(&s, &periodic_params(10, grid), &per).unwrap();
            let eu = relative_l2_error(&pick(&got.velocity, &idx), &want.velocity);
            let es = relative_l2_error(&pick(&got.stretching, &idx), &want.stretching);
            println!("periodic p 10 grid {grid:?}: velocity {eu:.2e} stretching {es:.2e}");
            assert!(eu < 1e-4 && es < 4e-4, "{grid:?}: {eu:.2e} {es:.2e}");
        }
    }

    /// Against the independent Ewald reference and the adaptive periodic FMM of `fmm`, on a
    /// set whose grid is chosen (standard cores: 3 leaves per side, top-level M2L only) and on
    /// one with small cores.
    #[test]
    fn periodic_reference_matches_ewald_and_the_adaptive_fmm() {
        let per = Periodic::default();
        for (n, sigma, grid) in [(4000, None, None), (3000, Some(0.1), Some((3, 1)))] {
            let mut s = periodic_set(n, 32, 0.0);
            let h = per.box_length / (n as f64).cbrt();
            s.sigma.iter_mut().for_each(|v| *v = sigma.unwrap_or(h));
            let params = periodic_params(10, grid);
            let got = evaluate_reference_periodic(&s, &params, &per).unwrap();
            let idx = sample(&s, 4);
            let t = targets(&s, &idx);
            let ewald = vortex_fmm::periodic::ewald_reference(&s, &t, per.box_length).unwrap();
            let adaptive = vortex_fmm::evaluate(
                &vortex_fmm::CpuBackend,
                &vortex_fmm::EvalParams {
                    order: 10,
                    periodic: Some(per),
                    ..Default::default()
                },
                &s,
                &s.as_targets(),
            )
            .unwrap()
            .fields;
            let (u, st) = (pick(&got.velocity, &idx), pick(&got.stretching, &idx));
            let eu = relative_l2_error(&u, &ewald.velocity);
            let es = relative_l2_error(&st, &ewald.stretching);
            let (au, as_) = got.relative_l2_errors(&adaptive);
            let aeu = relative_l2_error(&pick(&adaptive.velocity, &idx), &ewald.velocity);
            let g = params
                .grid_for_periodic(&Extent::periodic(&per, s.max_sigma()), n)
                .unwrap();
            println!(
                "n {} (m {}, k {}): vs Ewald velocity {eu:.2e} stretching {es:.2e}; vs adaptive \
                 velocity {au:.2e} stretching {as_:.2e}; adaptive vs Ewald velocity {aeu:.2e}",
                g.n(),
                g.m,
                g.k
            );
            assert!(eu < 1e-4 && es < 4e-4, "{eu:.2e} {es:.2e}");
            assert!(au < 1e-4 && as_ < 4e-4, "{au:.2e} {as_:.2e}");
        }
    }

    /// Shifting every particle by one vector (then wrapped: dipole moment and surface term
    /// change) leaves the periodic solution unchanged. By a whole number of top cells every
    /// level's cells are permuted and the near field and the M2L below the top see the same
    /// relative positions; what changes is which images the top-level M2L and the far images
    /// carry (box-aligned), and the truncation of the cubic image sum at `K` levels, which
    /// depends on the position in the box: the periodic direct sum itself moves by 1.7e-6 at
    /// `K = 4` (1.4e-4 at `K = 2`, 1e-2 at `K = 0`). Measured: 6.9e-6 at p = 10 (1.8e-6 at
    /// p = 14). By any other vector, to the method's error (the particles meet other cells).
    /// Copies of the particles one or more box lengths outside the box give the result of
    /// the originals to round-off.
    #[test]
    fn periodic_reference_is_translation_invariant_and_wraps() {
        let per = Periodic::default();
        let s = periodic_set(3000, 33, 0.15);
        let params = periodic_params(10, Some((3, 1)));
        let base = evaluate_reference_periodic(&s, &params, &per).unwrap();
        let w = per.box_length / 3.0;
        for (shift, tol) in [([w, -2.0 * w, 4.0 * w], 2e-5), ([0.37, -1.91, 2.68], 2e-4)] {
            let mut moved = s.clone();
            for x in moved.position.iter_mut() {
                *x = per.wrap(std::array::from_fn(|d| x[d] + shift[d]));
            }
            let got = evaluate_reference_periodic(&moved, &params, &per).unwrap();
            let (eu, es) = got.relative_l2_errors(&base);
            println!("shifted by {shift:?}: velocity {eu:.2e} stretching {es:.2e}");
            assert!(eu < tol && es < 4.0 * tol, "{shift:?}: {eu:.2e} {es:.2e}");
        }
        let mut outside = s.clone();
        let l = per.box_length;
        for (i, x) in outside.position.iter_mut().enumerate() {
            x[i % 3] += l * ((i % 7) as f64 - 3.0);
        }
        let got = evaluate_reference_periodic(&outside, &params, &per).unwrap();
        let (eu, es) = got.relative_l2_errors(&base);
        println!("copies outside the box: velocity {eu:.2e} stretching {es:.2e}");
        assert!(eu < 1e-10 && es < 1e-10, "{eu:.2e} {es:.2e}");
    }

    #[test]
    fn periodic_reference_refuses_bad_input() {
        let per = Periodic::default();
        let params = periodic_params(6, None);
        let msg = |s: &Sources, params: &UniformParams| {
            evaluate_reference_periodic(s, params, &per)
                .unwrap_err()
                .to_string()
        };
        let mut s = vortex_fmm::testsets::standard(300, 34);
        assert!(msg(&s, &params).contains("total strength"));
        vortex_fmm::testsets::subtract_mean_strength(&mut s);
        // standard cores of 300 blobs (0.94): 3 leaves of 4.4 core radii do not fit
        let e = msg(&s, &params);
        assert!(e.contains("too small for the cores"), "{e}");
        s.sigma.iter_mut().for_each(|v| *v = 2.0);
        assert!(msg(&s, &params).contains("4 core radii"));
        s.sigma.iter_mut().for_each(|v| *v = 0.1);
        for grid in [(2, 1), (1, 1)] {
            let e = msg(&s, &periodic_params(6, Some(grid)));
            assert!(e.contains("periodic uniform grid"), "{e}");
        }
        s.position[5][2] = f64::INFINITY;
        assert!(msg(&s, &params).contains("non-finite"));
        s.position[5][2] = 0.0;
        s.sigma.pop();
        assert!(msg(&s, &params).contains("unequal"));
        let bad_box = Periodic {
            box_length: -1.0,
            ..per
        };
        assert!(evaluate_reference_periodic(&s, &params, &bad_box).is_err());
        assert!(evaluate_reference_periodic(&Sources::default(), &params, &per).is_err());
    }
}
