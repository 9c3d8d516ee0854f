//! The CPU backend: the f64 reference operators of [`crate::operators`], parallel with rayon.
//!
//! Parallelism never splits a reduction: every output (a cell's multipole or local expansion,
//! a leaf's particles) is written by one task, which sums its inputs in list order, so the
//! results do not depend on the number of threads.

use super::{timed, Backend, FarField, PhaseTimes, Plan};
use crate::expansions::{expansion_len, Complex64};
use crate::kernel::INV_4PI;
use crate::lists::SourceRef;
use crate::operators::{p2p::p2p, Operators, Rotation, Scratch};
use crate::tree::Tree;
use crate::{Fields, FmmError, Sources, Targets};
use rayon::prelude::*;
use std::collections::HashMap;
use std::ops::Range;

/// The CPU backend (f64 throughout).
#[derive(Debug, Default, Clone)]
pub struct CpuBackend;

/// Sorted particles, expansions and accumulated fields of one evaluation.
pub struct CpuState {
    ops: Operators,
    sources: Sources,
    targets: Targets,
    multipoles: Vec<Complex64>,
    locals: Vec<Complex64>,
    fields: Fields,
}

impl Backend for CpuBackend {
    type State = CpuState;

    fn name(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn prepare(
        &self,
        plan: &Plan,
        sources: &Sources,
        targets: &Targets,
    ) -> Result<CpuState, FmmError> {
        let len = expansion_len(plan.order);
        let zero = Complex64::new(0.0, 0.0);
        Ok(CpuState {
            ops: Operators::new(plan.order),
            sources: sources.clone(),
            targets: targets.clone(),
            multipoles: vec![zero; plan.source_tree.cells.len() * len],
            locals: match (plan.far_field, plan.periodic) {
                (FarField::Treecode, None) => Vec::new(),
                _ => vec![zero; plan.target_tree.cells.len() * len],
            },
            fields: Fields::zeros(targets.len()),
        })
    }

    fn upward(
        &self,
        plan: &Plan,
        st: &mut CpuState,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        let len = expansion_len(plan.order);
        let tree = &plan.source_tree;
        let (ops, src) = (&st.ops, &st.sources);
        timed(&mut times.p2m, || {
            st.multipoles
                .par_chunks_mut(len)
                .enumerate()
                .filter(|(c, _)| tree.cells[*c].is_leaf())
                .for_each(|(c, m)| {
                    let cell = &tree.cells[c];
                    let r = cell.range.clone();
                    ops.p2m(cell.center, &src.position[r.clone()], &src.strength[r], m);
                });
        });
        timed(&mut times.m2m, || {
            for l in (0..tree.levels.len().saturating_sub(1)).rev() {
                let split = tree.levels[l + 1].start * len;
                let (upper, lower) = st.multipoles.split_at_mut(split);
                let parents = tree.levels[l].clone();
                let child_base = tree.levels[l + 1].start;
                upper[parents.start * len..]
                    .par_chunks_mut(len)
                    .zip(parents.clone())
                    .for_each_init(
                        || Scratch::new(plan.order),
                        |scratch, (m, p)| {
                            let cell = &tree.cells[p];
                            for c in cell.children.clone() {
                                let k = (c - child_base) * len;
                                ops.m2m(
                                    tree.cells[c].center,
                                    cell.center,
                                    &lower[k..k + len],
                                    m,
                                    scratch,
                                );
                            }
                        },
                    );
            }
        });
        Ok(())
    }

    fn downward(
        &self,
        plan: &Plan,
        st: &mut CpuState,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        match plan.far_field {
            FarField::Fmm => fmm_downward(plan, st, times),
            FarField::Treecode => treecode_far(plan, st, times),
        }
        Ok(())
    }

    fn near_field(
        &self,
        plan: &Plan,
        st: &mut CpuState,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        let tt = &plan.target_tree;
        let (src, tgt) = (&st.sources, &st.targets);
        timed(&mut times.p2p, || {
            for_each_leaf(tt, &mut st.fields, |leaf, r, vel, str_| {
                for s in plan.lists.near.row(leaf) {
                    let sr = plan.source_tree.cells[s.cell as usize].range.clone();
                    p2p(
                        &tgt.position[r.clone()],
                        &tgt.strength[r.clone()],
                        &src.position[sr.clone()],
                        &src.strength[sr.clone()],
                        &src.sigma[sr],
                        plan.shift_of(s.image).unwrap_or([0.0; 3]),
                        vel,
                        str_,
                    );
                }
            });
        });
        Ok(())
    }

    fn multipoles(
        &self,
        plan: &Plan,
        st: &CpuState,
        cells: &[usize],
    ) -> Result<Vec<Complex64>, FmmError> {
        let len = expansion_len(plan.order);
        Ok(cells
            .iter()
            .flat_map(|&c| st.multipoles[c * len..(c + 1) * len].iter().copied())
            .collect())
    }

    fn add_locals(
        &self,
        plan: &Plan,
        st: &mut CpuState,
        cells: &[usize],
        data: &[Complex64],
    ) -> Result<(), FmmError> {
        let len = expansion_len(plan.order);
        if st.locals.is_empty() {
            st.locals = vec![Complex64::new(0.0, 0.0); plan.target_tree.cells.len() * len];
        }
        for (k, &c) in cells.iter().enumerate() {
            st.locals[c * len..(c + 1) * len]
                .iter_mut()
                .zip(&data[k * len..(k + 1) * len])
                .for_each(|(a, b)| *a += b);
        }
        Ok(())
    }

    fn fields(&self, _plan: &Plan, st: CpuState) -> Result<Fields, FmmError> {
        let mut f = st.fields;
        f.velocity
            .par_iter_mut()
            .chain(f.stretching.par_iter_mut())
            .for_each(|v| v.iter_mut().for_each(|c| *c *= INV_4PI));
        Ok(f)
    }
}

/// M2L over the far lists (rotations cached per direction), then L2L down the levels, then L2P.
fn fmm_downward(plan: &Plan, st: &mut CpuState, times: &mut PhaseTimes) {
    let len = expansion_len(plan.order);
    let ops = &st.ops;
    let multipoles = &st.multipoles;
    timed(&mut times.m2l, || {
        let rotations = RotationCache::build(plan, ops);
        st.locals.par_chunks_mut(len).enumerate().for_each_init(
            || Scratch::new(plan.order),
            |scratch, (t, local)| {
                for s in plan.lists.far.row(t) {
                    let (rot, dist) = rotations.get(plan, t, *s);
                    let c = s.cell as usize * len;
                    ops.m2l_with_rotation(rot, dist, &multipoles[c..c + len], local, scratch);
                }
            },
        );
    });
    local_passes(plan, st, times);
}

/// L2L down the target tree, then L2P at its leaves.
fn local_passes(plan: &Plan, st: &mut CpuState, times: &mut PhaseTimes) {
    let len = expansion_len(plan.order);
    let tt = &plan.target_tree;
    let ops = &st.ops;
    timed(&mut times.l2l, || {
        for l in 0..tt.levels.len().saturating_sub(1) {
            let split = tt.levels[l + 1].start * len;
            let (upper, lower) = st.locals.split_at_mut(split);
            let children = tt.levels[l + 1].clone();
            lower[..children.len() * len]
                .par_chunks_mut(len)
                .zip(children)
                .for_each_init(
                    || Scratch::new(plan.order),
                    |scratch, (loc, c)| {
                        let p = tt.cells[c].parent.expect("non-root cell has a parent");
                        ops.l2l(
                            tt.cells[p].center,
                            tt.cells[c].center,
                            &upper[p * len..(p + 1) * len],
                            loc,
                            scratch,
                        );
                    },
                );
        }
    });
    let (tgt, locals) = (&st.targets, &st.locals);
    timed(&mut times.l2p, || {
        for_each_leaf(tt, &mut st.fields, |leaf, r, vel, str_| {
            ops.l2p(
                tt.cells[leaf].center,
                &locals[leaf * len..(leaf + 1) * len],
                &tgt.position[r.clone()],
                &tgt.strength[r],
                vel,
                str_,
            );
        });
    });
}

/// Treecode far field: every target leaf applies M2P for the far sources of itself and of
/// all its ancestors.
fn treecode_far(plan: &Plan, st: &mut CpuState, times: &mut PhaseTimes) {
    let len = expansion_len(plan.order);
    let tt = &plan.target_tree;
    let (ops, tgt, multipoles) = (&st.ops, &st.targets, &st.multipoles);
    timed(&mut times.m2p, || {
        for_each_leaf(tt, &mut st.fields, |leaf, r, vel, str_| {
            let mut cell = Some(leaf);
            while let Some(c) = cell {
                for s in plan.lists.far.row(c) {
                    let k = s.cell as usize * len;
                    ops.m2p(
                        plan.source_center(s.cell as usize, s.image),
                        &multipoles[k..k + len],
                        &tgt.position[r.clone()],
                        &tgt.strength[r.clone()],
                        vel,
                        str_,
                    );
                }
                cell = tt.cells[c].parent;
            }
        });
    });
    if !st.locals.is_empty() {
        local_passes(plan, st, times);
    }
}

/// Runs `f(leaf, range, velocity, stretching)` in parallel over the leaves of `tree`, each with
/// the disjoint slices of the outputs that belong to its points.
fn for_each_leaf<F>(tree: &Tree, fields: &mut Fields, f: F)
where
    F: Fn(usize, Range<usize>, &mut [[f64; 3]], &mut [[f64; 3]]) + Sync,
{
    let mut leaves: Vec<usize> = tree.leaves().collect();
    leaves.sort_unstable_by_key(|&l| tree.cells[l].range.start);
    let mut work = Vec::with_capacity(leaves.len());
    let (mut vel, mut str_) = (&mut fields.velocity[..], &mut fields.stretching[..]);
    let mut start = 0;
    for &l in &leaves {
        let r = tree.cells[l].range.clone();
        let (_, v) = std::mem::take(&mut vel).split_at_mut(r.start - start);
        let (vl, vrest) = v.split_at_mut(r.len());
        let (_, s) = std::mem::take(&mut str_).split_at_mut(r.start - start);
        let (sl, srest) = s.split_at_mut(r.len());
        work.push((l, r.clone(), vl, sl));
        vel = vrest;
        str_ = srest;
        start = r.end;
    }
    work.into_par_iter()
        .with_max_len(1)
        .for_each(|(l, r, v, s)| f(l, r, v, s));
}

/// Rotations of the M2L directions, computed once per distinct direction.
///
/// Cell centres sit on the grid of half-widths, so the vector between a target and a source
/// centre is an integer multiple of the smaller half-width; reduced by the gcd of its
/// components it names the direction exactly.
struct RotationCache {
    rotations: HashMap<[i64; 3], Rotation>,
}

impl RotationCache {
    fn key(plan: &Plan, t: usize, s: SourceRef) -> ([i64; 3], f64) {
        let tc = &plan.target_tree.cells[t];
        let sc = plan.source_center(s.cell as usize, s.image);
        let h = tc
            .half_width
            .min(plan.source_tree.cells[s.cell as usize].half_width);
        let v: [f64; 3] = std::array::from_fn(|k| tc.center[k] - sc[k]);
        let dist = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        let mut key: [i64; 3] = std::array::from_fn(|k| (v[k] / h).round() as i64);
        let g = gcd(
            gcd(key[0].unsigned_abs(), key[1].unsigned_abs()),
            key[2].unsigned_abs(),
        );
        if g > 1 {
            key.iter_mut().for_each(|x| *x /= g as i64);
        }
        (key, dist)
    }

    fn build(plan: &Plan, ops: &Operators) -> Self {
        let mut keys: Vec<[i64; 3]> = (0..plan.target_tree.cells.len())
            .into_par_iter()
            .flat_map_iter(|t| {
                plan.lists
                    .far
                    .row(t)
                    .iter()
                    .map(move |s| Self::key(plan, t, *s).0)
            })
            .collect();
        keys.par_sort_unstable();
        keys.dedup();
        let rotations = keys
            .into_par_iter()
            .map(|k| (k, ops.rotation([k[0] as f64, k[1] as f64, k[2] as f64])))
            .collect();
        Self { rotations }
    }

    fn get(&self, plan: &Plan, t: usize, s: SourceRef) -> (&Rotation, f64) {
        let (key, dist) = Self::key(plan, t, s);
        (&self.rotations[&key], dist)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
