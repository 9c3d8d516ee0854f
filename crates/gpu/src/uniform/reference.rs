//! CPU f64 evaluation of the uniform-grid FMM: the same grid, sort (host emulation of the
//! device sort), implicit lists and phases as the device path, with the f64 operators of
//! `fmm::operators` (core paper Eq. 12-35) and the f64 pair kernel. It separates the method's
//! error (grid, lists, order, core cutoff) from the f32 error of the kernels: tested against
//! `fmm::evaluators::direct`, and the device path is tested against it.

use super::grid::{coords, local_index, Extent, UniformGrid};
use super::sort::sort_emulated;
use super::stencil::{m2l_sources, neighbours};
use super::UniformParams;
use crate::device::{GpuError, GpuResult};
use crate::layout::pack_sources;
use fmm::expansions::{ncoef, Complex64};
use fmm::kernel::{pair_interaction, INV_4PI};
use fmm::operators::{Operators, Rotation, Scratch};
use fmm::{Fields, Sources};
use rayon::prelude::*;
use std::collections::HashMap;

/// Velocity and stretching (input order, with `1/(4 pi)`) by the uniform-grid FMM in f64.
pub fn evaluate_reference(sources: &Sources, params: &UniformParams) -> GpuResult<Fields> {
    params.validate()?;
    let np = sources.len();
    let ext = Extent::of(&sources.position, &sources.sigma)
        .ok_or_else(|| GpuError::Unsupported("empty or invalid sources".into()))?;
    let g = params.grid_for(&ext, np);
    let mut f = RefFmm::new(g, params.order, sources);
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

/// The stages of the f64 uniform-grid FMM over the particles of one rank (all of them on one
/// rank): expansions are stored for every cell of the grid; each stage runs over the cells of
/// a range of z-planes of its level (`zr = (first, end)`), a contiguous index range.
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
}

impl RefFmm {
    /// Sorts `sources` into the leaves of `g` (the device's f32 cell assignment and order).
    pub fn new(g: UniformGrid, p: usize, sources: &Sources) -> Self {
        let ops = Operators::new(p);
        let len = 3 * ncoef(p);
        let (pos4, _) = pack_sources(sources);
        let (lo, inv_w) = g.f32_params();
        let arrival: Vec<usize> = (0..sources.len()).collect();
        let (perm, starts) = sort_emulated(&pos4, lo, inv_w, g.n(), &arrival);
        let x = perm.iter().map(|&i| sources.position[i as usize]).collect();
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
                    for sc in m2l_sources(nl, l == 0, tc) {
                        let v: [i64; 3] = std::array::from_fn(|d| tc[d] as i64 - sc[d] as i64);
                        let dist = w * ((v[0] * v[0] + v[1] * v[1] + v[2] * v[2]) as f64).sqrt();
                        let si = local_index(nl, sc);
                        ops.m2l_with_rotation(
                            &rots[&v],
                            dist,
                            &mult_l[si * len..(si + 1) * len],
                            out,
                            scr,
                        );
                    }
                },
            );
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
                let nbs = neighbours(n, coords(n, c));
                for (q, i) in rr.clone().enumerate() {
                    for nb in &nbs {
                        for j in self.range(local_index(n, *nb)) {
                            let (du, ds) = pair_interaction(x[i], a[i], x[j], a[j], sg[j]);
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
    use fmm::evaluators::direct::direct;
    use fmm::relative_l2_error;

    /// Random points with small cores (so the grid has levels and M2L at every level) against
    /// the f64 direct sum: the classical lists at p = 8 and 12.
    #[test]
    fn reference_matches_the_direct_sum() {
        let mut s = fmm::testsets::standard(6000, 9);
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
            let eu = relative_l2_error(&got.velocity, &want.velocity);
            let es = relative_l2_error(&got.stretching, &want.stretching);
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
        let s = fmm::testsets::standard(3000, 4);
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
}
