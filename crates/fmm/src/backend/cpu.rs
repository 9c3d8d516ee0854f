//! The CPU backend: the f64 reference operators of [`crate::operators`] (FMM, treecode) and
//! [`crate::ppm`] (pseudo-particles), parallel with rayon.
//!
//! The phases are written once, generically over [`FarOps`] (the far-field operators of one
//! method acting on one cell's expansion, stored as `f64`), so the FMM and the PPM share the
//! traversal of the tree levels and lists. Two FMM phases have their own schedule: the M2L
//! ([`m2l_pass_batched`]: blocks of target cells, pairs sorted by direction, translations of one
//! direction batched) and, when the targets are the sources, the P2P ([`near_field_mutual`]:
//! each pair of near leaves visited once, both updated; in a periodic box the image pairs
//! `(a, b, +s)` and `(b, a, -s)` too).
//!
//! Parallelism never makes a sum order depend on the schedule: every output (a cell's
//! expansion, a leaf's particles) receives its terms in an order fixed by the plan (list order,
//! or the block and colour order of the two phases above), so the results do not depend on the
//! number of threads.

use super::{timed, Backend, FarField, PhaseTimes, Plan};
use crate::expansions::{expansion_len, Complex64};
use crate::far::{Expansions, FarOps};
use crate::kernel::{KernelTable, INV_4PI};
use crate::lists::{SourceRef, NO_SHIFT};
use crate::operators::p2p::{add_group_acc, p2p, p2p_mutual, PackedSources};
use crate::operators::{BatchScratch, Operators, Rotation, Scratch, M2L_BATCH};
use crate::ppm::PseudoParticles;
use crate::tree::{Cell, Tree};
use crate::{Fields, FmmError, Sources, Targets};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::ops::Range;
use std::sync::{Arc, RwLock};
use wide::f64x4;

/// The CPU backend (f64 throughout).
#[derive(Debug, Default, Clone)]
pub struct CpuBackend;

/// Sorted particles, expansions and accumulated fields of one evaluation.
pub struct CpuState {
    far: Far,
    table: KernelTable,
    targets: Targets,
    sources: Sources,
    packed: PackedSources,
    multipoles: Vec<f64>,
    locals: Vec<f64>,
    fields: Fields,
    /// The targets are the sources (same tree, points and strengths): the near field uses
    /// Newton's third law ([`near_field_mutual`]).
    self_evaluation: bool,
}

enum Far {
    Fmm(FmmOps),
    Ppm(PseudoParticles),
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
        let far = match plan.far_field {
            FarField::Fmm | FarField::Treecode => Far::Fmm(FmmOps::new(plan.order)),
            FarField::Ppm => Far::Ppm(PseudoParticles::new(plan.order)),
        };
        let len = far_len(&far);
        let needs_locals = !(plan.far_field == FarField::Treecode && plan.periodic.is_none());
        Ok(CpuState {
            far,
            table: KernelTable::new(plan.core),
            targets: targets.clone(),
            sources: sources.clone(),
            packed: PackedSources::new(&plan.source_tree, sources),
            multipoles: vec![0.0; plan.source_tree.cells.len() * len],
            locals: if needs_locals {
                vec![0.0; plan.target_tree.cells.len() * len]
            } else {
                Vec::new()
            },
            fields: Fields::zeros(targets.len()),
            self_evaluation: same_tree(&plan.source_tree, &plan.target_tree)
                && sources.position == targets.position
                && sources.strength == targets.strength,
        })
    }

    fn upward(
        &self,
        plan: &Plan,
        st: &mut CpuState,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        match &st.far {
            Far::Fmm(f) => upward(f, plan, &st.sources, &mut st.multipoles, times),
            Far::Ppm(f) => upward(f, plan, &st.sources, &mut st.multipoles, times),
        }
        Ok(())
    }

    fn downward(
        &self,
        plan: &Plan,
        st: &mut CpuState,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        if plan.far_field == FarField::Treecode {
            let Far::Fmm(f) = &st.far else {
                unreachable!("the treecode uses FMM multipoles")
            };
            treecode_far(
                f,
                plan,
                st.multipoles.as_slice(),
                &st.targets,
                &mut st.fields,
                times,
            );
        } else {
            match &st.far {
                Far::Fmm(f) => m2l_pass_batched(f, plan, &st.multipoles, &mut st.locals, times),
                Far::Ppm(f) => m2l_pass(f, plan, &st.multipoles, &mut st.locals, times),
            }
        }
        if !st.locals.is_empty() {
            match &st.far {
                Far::Fmm(f) => {
                    local_passes(f, plan, &mut st.locals, &st.targets, &mut st.fields, times)
                }
                Far::Ppm(f) => {
                    local_passes(f, plan, &mut st.locals, &st.targets, &mut st.fields, times)
                }
            }
        }
        Ok(())
    }

    fn near_field(
        &self,
        plan: &Plan,
        st: &mut CpuState,
        times: &mut PhaseTimes,
    ) -> Result<(), FmmError> {
        if st.self_evaluation {
            timed(&mut times.p2p, || near_field_mutual(plan, st));
            return Ok(());
        }
        let tt = &plan.target_tree;
        let (src, tgt, table) = (&st.packed, &st.targets, &st.table);
        timed(&mut times.p2p, || {
            for_each_leaf(tt, &mut st.fields, |leaf, r, vel, str_| {
                for s in plan.lists.near.row(leaf) {
                    p2p(
                        table,
                        &tgt.position[r.clone()],
                        &tgt.strength[r.clone()],
                        src.of(s.cell as usize),
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
    ) -> Result<Expansions, FmmError> {
        let len = far_len(&st.far);
        let flat: Vec<f64> = cells
            .iter()
            .flat_map(|&c| st.multipoles[c * len..(c + 1) * len].iter().copied())
            .collect();
        Ok(Expansions::from_flat(plan.far_field, len, &flat))
    }

    fn set_multipoles(
        &self,
        plan: &Plan,
        st: &mut CpuState,
        cells: &[usize],
        data: &Expansions,
    ) -> Result<(), FmmError> {
        let len = far_len(&st.far);
        data.check(plan.far_field, cells.len(), len)?;
        let data = data.to_flat();
        for (k, &c) in cells.iter().enumerate() {
            st.multipoles[c * len..(c + 1) * len].copy_from_slice(&data[k * len..(k + 1) * len]);
        }
        Ok(())
    }

    fn add_locals(
        &self,
        plan: &Plan,
        st: &mut CpuState,
        cells: &[usize],
        data: &Expansions,
    ) -> Result<(), FmmError> {
        let len = far_len(&st.far);
        data.check(plan.far_field, cells.len(), len)?;
        let data = data.to_flat();
        if st.locals.is_empty() {
            st.locals = vec![0.0; plan.target_tree.cells.len() * len];
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

fn far_len(far: &Far) -> usize {
    match far {
        Far::Fmm(f) => f.flat_len(),
        Far::Ppm(f) => f.flat_len(),
    }
}

/// The FMM operators with the rotations of the M2L directions met so far.
struct FmmOps {
    ops: Operators,
    /// Rotation of each M2L direction key ([`FmmOps::key`]), built when first needed.
    rotations: RotationCache,
    /// Rotations of the 8 diagonals `(+-1, +-1, +-1)` (bit `k` set: component `k` positive):
    /// M2M and L2L always translate along one of them.
    diagonals: Vec<Rotation>,
}

impl FmmOps {
    fn new(order: usize) -> Self {
        let ops = Operators::new(order);
        let diagonals = (0..8)
            .map(|b| {
                ops.rotation(std::array::from_fn(|k| {
                    if b >> k & 1 == 1 {
                        1.0
                    } else {
                        -1.0
                    }
                }))
            })
            .collect();
        Self {
            ops,
            rotations: RotationCache::default(),
            diagonals,
        }
    }

    /// The cached rotation of `v` and `|v|` when `v` is a diagonal, as between the centres of
    /// a cell and its child.
    fn diagonal(&self, v: [f64; 3]) -> Option<(&Rotation, f64)> {
        let a = v[0].abs();
        let tol = 1e-12 * a;
        if a == 0.0 || (v[1].abs() - a).abs() > tol || (v[2].abs() - a).abs() > tol {
            return None;
        }
        let b = (0..3).map(|k| ((v[k] > 0.0) as usize) << k).sum::<usize>();
        Some((
            &self.diagonals[b],
            (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt(),
        ))
    }
}

/// Target cells per block of the batched M2L pass (consecutive cells: one level, Morton order).
const M2L_BLOCK: usize = 64;

/// Views interleaved `(re, im)` pairs as complex coefficients.
fn as_complex(v: &[f64]) -> &[Complex64] {
    assert!(v.len() % 2 == 0);
    // SAFETY: `Complex<f64>` is `#[repr(C)] { re: f64, im: f64 }`: same alignment as f64 and
    // size of two, so an even-length f64 slice is a valid slice of half as many complexes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<Complex64>(), v.len() / 2) }
}

fn as_complex_mut(v: &mut [f64]) -> &mut [Complex64] {
    assert!(v.len() % 2 == 0);
    // SAFETY: as in `as_complex`; the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<Complex64>(), v.len() / 2) }
}

impl FmmOps {
    /// Cell centres sit on the grid of half-widths, so the vector between a target and a source
    /// centre is an integer multiple of the smaller half-width; reduced by the gcd of its
    /// components it names the direction exactly.
    fn key(plan: &Plan, t: usize, s: SourceRef) -> ([i64; 3], f64) {
        let tc = &plan.target_tree.cells[t];
        let sc = plan.source_center(s.cell as usize, s.image);
        let h = tc
            .half_width
            .min(plan.source_tree.cells[s.cell as usize].half_width);
        let v: [f64; 3] = std::array::from_fn(|k| tc.center[k] - sc[k]);
        let dist = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        let key = super::direction_key(v, h);
        (key, dist)
    }
}

/// Rotations of M2L direction keys, built on first use and shared by the threads.
///
/// A rotation is a pure function of its key, so which thread builds it (or whether two build
/// it at once, one copy being kept) does not change any result. The M2L pass asks once per
/// direction and block of target cells, not per pair, and needs no separate pass over every
/// far pair to collect the keys of a plan first.
#[derive(Default)]
struct RotationCache {
    map: RwLock<FxHashMap<[i64; 3], Arc<Rotation>>>,
}

impl RotationCache {
    /// The rotation of direction key `key` (built with `ops` if absent).
    fn get(&self, ops: &Operators, key: [i64; 3]) -> Arc<Rotation> {
        if let Some(r) = self.map.read().expect("rotation cache").get(&key) {
            return r.clone();
        }
        let r = Arc::new(ops.rotation(key.map(|k| k as f64)));
        self.map
            .write()
            .expect("rotation cache")
            .entry(key)
            .or_insert(r)
            .clone()
    }
}

impl FarOps for FmmOps {
    type Scratch = Scratch;
    fn flat_len(&self) -> usize {
        2 * expansion_len(self.ops.order())
    }
    fn scratch(&self) -> Scratch {
        Scratch::new(self.ops.order())
    }
    fn p2m(&self, cell: &Cell, position: &[[f64; 3]], strength: &[[f64; 3]], m: &mut [f64]) {
        self.ops
            .p2m(cell.center, position, strength, as_complex_mut(m));
    }
    fn m2m(&self, child: &Cell, parent: &Cell, cm: &[f64], pm: &mut [f64], s: &mut Scratch) {
        let v = std::array::from_fn(|k| parent.center[k] - child.center[k]);
        if let Some((rot, d)) = self.diagonal(v) {
            let (cm, pm) = (as_complex(cm), as_complex_mut(pm));
            return self.ops.m2m_with_rotation(rot, d, cm, pm, s);
        }
        self.ops.m2m(
            child.center,
            parent.center,
            as_complex(cm),
            as_complex_mut(pm),
            s,
        );
    }
    fn m2l(
        &self,
        plan: &Plan,
        t: usize,
        src: SourceRef,
        m: &[f64],
        l: &mut [f64],
        s: &mut Scratch,
    ) {
        let (key, dist) = Self::key(plan, t, src);
        let rot = self.rotations.get(&self.ops, key);
        self.ops
            .m2l_with_rotation(&rot, dist, as_complex(m), as_complex_mut(l), s);
    }
    fn l2l(&self, parent: &Cell, child: &Cell, pl: &[f64], cl: &mut [f64], s: &mut Scratch) {
        let v = std::array::from_fn(|k| child.center[k] - parent.center[k]);
        if let Some((rot, d)) = self.diagonal(v) {
            let (pl, cl) = (as_complex(pl), as_complex_mut(cl));
            return self.ops.l2l_with_rotation(rot, d, pl, cl, s);
        }
        self.ops.l2l(
            parent.center,
            child.center,
            as_complex(pl),
            as_complex_mut(cl),
            s,
        );
    }
    fn l2p(
        &self,
        cell: &Cell,
        l: &[f64],
        position: &[[f64; 3]],
        alpha: &[[f64; 3]],
        velocity: &mut [[f64; 3]],
        stretching: &mut [[f64; 3]],
    ) {
        self.ops.l2p(
            cell.center,
            as_complex(l),
            position,
            alpha,
            velocity,
            stretching,
        );
    }
}

impl FarOps for PseudoParticles {
    type Scratch = ();
    fn flat_len(&self) -> usize {
        PseudoParticles::len(self)
    }
    fn scratch(&self) {}
    fn p2m(&self, cell: &Cell, position: &[[f64; 3]], strength: &[[f64; 3]], m: &mut [f64]) {
        PseudoParticles::p2m(self, cell.center, cell.half_width, position, strength, m);
    }
    fn m2m(&self, child: &Cell, parent: &Cell, cm: &[f64], pm: &mut [f64], _: &mut ()) {
        PseudoParticles::m2m(
            self,
            child.center,
            child.half_width,
            parent.center,
            parent.half_width,
            cm,
            pm,
        );
    }
    fn m2l(&self, plan: &Plan, t: usize, src: SourceRef, m: &[f64], l: &mut [f64], _: &mut ()) {
        let tc = &plan.target_tree.cells[t];
        let hw = plan.source_tree.cells[src.cell as usize].half_width;
        let sc = plan.source_center(src.cell as usize, src.image);
        PseudoParticles::m2l(self, sc, hw, tc.center, tc.half_width, m, l);
    }
    fn l2l(&self, parent: &Cell, child: &Cell, pl: &[f64], cl: &mut [f64], _: &mut ()) {
        PseudoParticles::l2l(
            self,
            parent.center,
            parent.half_width,
            child.center,
            child.half_width,
            pl,
            cl,
        );
    }
    fn l2p(
        &self,
        cell: &Cell,
        l: &[f64],
        position: &[[f64; 3]],
        alpha: &[[f64; 3]],
        velocity: &mut [[f64; 3]],
        stretching: &mut [[f64; 3]],
    ) {
        PseudoParticles::l2p(
            self,
            cell.center,
            cell.half_width,
            l,
            position,
            alpha,
            velocity,
            stretching,
        );
    }
}

/// P2M at the source leaves, then M2M level by level upwards.
fn upward<F: FarOps>(
    f: &F,
    plan: &Plan,
    src: &Sources,
    multipoles: &mut [f64],
    times: &mut PhaseTimes,
) {
    let len = f.flat_len();
    let tree = &plan.source_tree;
    timed(&mut times.p2m, || {
        multipoles
            .par_chunks_mut(len)
            .enumerate()
            .filter(|(c, _)| tree.cells[*c].is_leaf())
            .for_each(|(c, m)| {
                let cell = &tree.cells[c];
                let r = cell.range.clone();
                f.p2m(cell, &src.position[r.clone()], &src.strength[r], m);
            });
    });
    timed(&mut times.m2m, || {
        for l in (0..tree.levels.len().saturating_sub(1)).rev() {
            let split = tree.levels[l + 1].start * len;
            let (upper, lower) = multipoles.split_at_mut(split);
            let parents = tree.levels[l].clone();
            let child_base = tree.levels[l + 1].start;
            upper[parents.start * len..]
                .par_chunks_mut(len)
                .zip(parents)
                .for_each_init(
                    || f.scratch(),
                    |scratch, (m, p)| {
                        let cell = &tree.cells[p];
                        for c in cell.children.clone() {
                            let k = (c - child_base) * len;
                            f.m2m(&tree.cells[c], cell, &lower[k..k + len], m, scratch);
                        }
                    },
                );
        }
    });
}

/// M2L over the far lists, one task per target cell.
fn m2l_pass<F: FarOps>(
    f: &F,
    plan: &Plan,
    multipoles: &[f64],
    locals: &mut [f64],
    times: &mut PhaseTimes,
) {
    let len = f.flat_len();
    timed(&mut times.m2l, || {
        locals.par_chunks_mut(len).enumerate().for_each_init(
            || f.scratch(),
            |scratch, (t, local)| {
                for s in plan.lists.far.row(t) {
                    let c = s.cell as usize * len;
                    f.m2l(plan, t, *s, &multipoles[c..c + len], local, scratch);
                }
            },
        );
    });
}

/// One far pair of an M2L block: direction key ([`FmmOps::key`]), target cell (index in the
/// block), source cell, distance between the centres.
type M2lPair = ([i64; 3], u32, u32, f64);

/// FMM M2L in blocks of [`M2L_BLOCK`] consecutive target cells, one task per block: the
/// block's (target, source) pairs are sorted by direction, and the pairs of one direction go
/// through [`Operators::m2l_batch`] in groups of up to [`M2L_BATCH`], so each rotation is
/// looked up once per block (and built on its first use, [`RotationCache`]) and its entries
/// serve several translations at a time. A target's local receives its terms in the order
/// (direction, target, source cell, distance) of its block, whatever the thread count.
/// Periodic image pairs go the same way: their key and distance are those of the shifted
/// source centre, so they share the rotations and batches of unshifted pairs of equal direction.
fn m2l_pass_batched(
    f: &FmmOps,
    plan: &Plan,
    multipoles: &[f64],
    locals: &mut [f64],
    times: &mut PhaseTimes,
) {
    let len = f.flat_len();
    let clen = len / 2;
    let p = f.ops.order();
    let multipoles = as_complex(multipoles);
    timed(&mut times.m2l, || {
        locals
            .par_chunks_mut(len * M2L_BLOCK)
            .enumerate()
            .for_each_init(
                || (BatchScratch::new(p), Vec::new()),
                |(scratch, pairs), (b, block)| {
                    let t0 = b * M2L_BLOCK;
                    let t1 = t0 + block.len() / len;
                    // (direction key, target in block, source cell, distance)
                    pairs.clear();
                    for t in t0..t1 {
                        for s in plan.lists.far.row(t) {
                            let (key, dist) = FmmOps::key(plan, t, *s);
                            pairs.push((key, (t - t0) as u32, s.cell, dist));
                        }
                    }
                    // unique sort keys (a target lists a source once per image, and images
                    // differ in direction), so the order is fixed
                    pairs.sort_unstable_by(|x: &M2lPair, y| {
                        (x.0, x.1, x.2)
                            .cmp(&(y.0, y.1, y.2))
                            .then(x.3.total_cmp(&y.3))
                    });
                    let block = as_complex_mut(block);
                    let mut i = 0;
                    while i < pairs.len() {
                        let key = pairs[i].0;
                        let run = i + pairs[i..].partition_point(|q| q.0 == key);
                        let rot = f.rotations.get(&f.ops, key);
                        for group in pairs[i..run].chunks(M2L_BATCH) {
                            let mut dist = [0.0; M2L_BATCH];
                            let mut src = [0usize; M2L_BATCH];
                            let mut dst = [0usize; M2L_BATCH];
                            for (k, q) in group.iter().enumerate() {
                                dist[k] = q.3;
                                src[k] = q.2 as usize * clen;
                                dst[k] = q.1 as usize * clen;
                            }
                            let l = group.len();
                            f.ops.m2l_batch(
                                &rot,
                                &dist[..l],
                                multipoles,
                                &src[..l],
                                block,
                                &dst[..l],
                                scratch,
                            );
                        }
                        i = run;
                    }
                },
            );
    });
}

/// L2L down the target tree, then L2P at its leaves.
fn local_passes<F: FarOps>(
    f: &F,
    plan: &Plan,
    locals: &mut [f64],
    tgt: &Targets,
    fields: &mut Fields,
    times: &mut PhaseTimes,
) {
    let len = f.flat_len();
    let tt = &plan.target_tree;
    timed(&mut times.l2l, || {
        for l in 0..tt.levels.len().saturating_sub(1) {
            let split = tt.levels[l + 1].start * len;
            let (upper, lower) = locals.split_at_mut(split);
            let children = tt.levels[l + 1].clone();
            lower[..children.len() * len]
                .par_chunks_mut(len)
                .zip(children)
                .for_each_init(
                    || f.scratch(),
                    |scratch, (loc, c)| {
                        let p = tt.cells[c].parent.expect("non-root cell has a parent");
                        f.l2l(
                            &tt.cells[p],
                            &tt.cells[c],
                            &upper[p * len..(p + 1) * len],
                            loc,
                            scratch,
                        );
                    },
                );
        }
    });
    let locals = &*locals;
    timed(&mut times.l2p, || {
        for_each_leaf(tt, fields, |leaf, r, vel, str_| {
            f.l2p(
                &tt.cells[leaf],
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
fn treecode_far(
    f: &FmmOps,
    plan: &Plan,
    multipoles: &[f64],
    tgt: &Targets,
    fields: &mut Fields,
    times: &mut PhaseTimes,
) {
    let len = f.flat_len();
    let tt = &plan.target_tree;
    timed(&mut times.m2p, || {
        for_each_leaf(tt, fields, |leaf, r, vel, str_| {
            let mut cell = Some(leaf);
            while let Some(c) = cell {
                for s in plan.lists.far.row(c) {
                    let k = s.cell as usize * len;
                    f.ops.m2p(
                        plan.source_center(s.cell as usize, s.image),
                        as_complex(&multipoles[k..k + len]),
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
}

/// Whether two trees have the same cells (the trees of one point set).
fn same_tree(a: &Tree, b: &Tree) -> bool {
    a.cells.len() == b.cells.len()
        && a.cells
            .iter()
            .zip(&b.cells)
            .all(|(x, y)| x.range == y.range && x.children == y.children)
}

/// Leaves (in Morton order) per block of the mutual near-field schedule.
const P2P_BLOCK_LEAVES: usize = 8;

/// The image that undoes image `image`: shift `-s` for shift `s` (see
/// [`crate::lists::image_shift`]: `i = 9 (sx+1) + 3 (sy+1) + (sz+1)`, so `-s` is `26 - i`).
#[inline]
fn mirror_image(image: u8) -> u8 {
    26 - image
}

/// Whether the near entry `(target t, source s)` and its mirror `(s.cell, t, mirror)` are
/// visited as one mutual pair, and which of the two represents it.
///
/// Mutual when the source leaf's row names `t` through the mirror image (the unshifted pair
/// `(a, b)` mirrors `(b, a)`, the image pair `(a, b, +s)` mirrors `(b, a, -s)`; a leaf with
/// itself unshifted is its own mirror) and both leaves have one common core radius. The
/// representative is the smaller of `(t, image)` and `(s.cell, mirror)`, so each mutual pair
/// is listed once. Returns `None` for an entry to be summed one-sidedly, `Some(true)` for the
/// representative, `Some(false)` for the entry its mirror stands for.
fn mutual_role(
    near: &crate::lists::CsrList,
    leaf_sigma: &[f64],
    t: usize,
    s: SourceRef,
) -> Option<bool> {
    let b = s.cell as usize;
    let m = mirror_image(s.image);
    let mirrored = (b == t && s.image == NO_SHIFT)
        || near
            .row(b)
            .binary_search(&SourceRef {
                cell: t as u32,
                image: m,
            })
            .is_ok();
    // NaN (a leaf of mixed core radii) never compares equal
    if !mirrored || leaf_sigma[t] != leaf_sigma[b] {
        return None;
    }
    Some((t, s.image) <= (b, m))
}

/// The near field of a self-evaluation, where every near pair of leaves whose lists name each
/// other is visited once ([`p2p_mutual`]: one kernel evaluation per pair of points serves both
/// directions; the leaf with itself visits each pair of points once). In a periodic box this
/// includes the image pairs: `(a, b, +s)` (leaf `b` seen from `a` through the shift `s`) and
/// `(b, a, -s)` are one interaction, evaluated once with `a`'s points shifted by `-s`; a leaf
/// and its own image (`a == b`, `s != 0`, when few leaves cover the box) pairs `+s` with `-s`.
///
/// Schedule: the leaves, in Morton order, form blocks of [`P2P_BLOCK_LEAVES`]; the pairs of
/// leaves between two blocks (or within one) form a task, and the tasks are coloured greedily
/// (in sorted order) so that no two tasks of one colour touch the same block. Colours run one
/// after the other, the tasks of one colour in parallel, the pairs of one task in sorted order:
/// every point receives its terms in an order fixed by the plan alone, whatever the thread
/// count. Near entries that are not mutual (a list that names a leaf whose own list does not
/// name it back through the mirror image, as the core-radius criterion of the lists is not
/// symmetric, or leaves with different core radii) are then summed one-sidedly, per target
/// leaf in list order.
fn near_field_mutual(plan: &Plan, st: &mut CpuState) {
    let tt = &plan.target_tree;
    let near = &plan.lists.near;
    let mut leaves: Vec<usize> = tt.leaves().collect();
    leaves.sort_unstable_by_key(|&l| tt.cells[l].range.start);
    let mut block = vec![u32::MAX; tt.cells.len()];
    for (k, &l) in leaves.iter().enumerate() {
        block[l] = (k / P2P_BLOCK_LEAVES) as u32;
    }
    let n_blocks = leaves.len().div_ceil(P2P_BLOCK_LEAVES);
    // common core radius of each leaf (NaN when its points differ: never equal)
    let sigma = &st.sources.sigma;
    let leaf_sigma: Vec<f64> = (0..tt.cells.len())
        .into_par_iter()
        .map(|c| {
            let r = tt.cells[c].range.clone();
            match sigma[r.clone()].first() {
                Some(&s0) if tt.cells[c].is_leaf() && sigma[r].iter().all(|&s| s == s0) => s0,
                _ => f64::NAN,
            }
        })
        .collect();
    // mutual pairs (block x, block y, leaf x, leaf y, image of y seen from x) with
    // block x <= block y, and the rest
    let per_leaf: Vec<(Vec<[u32; 5]>, Vec<SourceRef>)> = leaves
        .par_iter()
        .map(|&t| {
            let (mut pairs, mut rest) = (Vec::new(), Vec::new());
            for s in near.row(t) {
                let b = s.cell as usize;
                match mutual_role(near, &leaf_sigma, t, *s) {
                    None => rest.push(*s),
                    Some(false) => {}
                    Some(true) => {
                        let q = if block[t] <= block[b] {
                            [block[t], block[b], t as u32, b as u32, s.image as u32]
                        } else {
                            let m = mirror_image(s.image) as u32;
                            [block[b], block[t], b as u32, t as u32, m]
                        };
                        pairs.push(q);
                    }
                }
            }
            (pairs, rest)
        })
        .collect();
    let mut rest_offsets = vec![0usize; tt.cells.len() + 1];
    for (&t, (_, r)) in leaves.iter().zip(&per_leaf) {
        rest_offsets[t + 1] = r.len();
    }
    for c in 0..tt.cells.len() {
        rest_offsets[c + 1] += rest_offsets[c];
    }
    let mut rest = vec![
        SourceRef {
            cell: 0,
            image: NO_SHIFT
        };
        rest_offsets[tt.cells.len()]
    ];
    let mut pairs = Vec::new();
    for (&t, (pr, r)) in leaves.iter().zip(per_leaf) {
        rest[rest_offsets[t]..rest_offsets[t + 1]].copy_from_slice(&r);
        pairs.extend(pr);
    }
    pairs.par_sort_unstable();
    // tasks: runs of one block pair; greedy edge colouring in task order
    let mut tasks: Vec<(u32, Range<usize>)> = Vec::new();
    let mut used: Vec<Vec<u64>> = vec![Vec::new(); n_blocks];
    let mut start = 0;
    while start < pairs.len() {
        let (ba, bb) = (pairs[start][0] as usize, pairs[start][1] as usize);
        let mut end = start + 1;
        while end < pairs.len() && pairs[end][0] as usize == ba && pairs[end][1] as usize == bb {
            end += 1;
        }
        let free = |c: usize, u: &[u64]| u.get(c / 64).is_none_or(|w| w & (1 << (c % 64)) == 0);
        let colour = (0..)
            .find(|&c| free(c, &used[ba]) && free(c, &used[bb]))
            .expect("a free colour");
        for b in [ba, bb] {
            let u = &mut used[b];
            if u.len() <= colour / 64 {
                u.resize(colour / 64 + 1, 0);
            }
            u[colour / 64] |= 1 << (colour % 64);
        }
        tasks.push((colour as u32, start..end));
        start = end;
    }
    tasks.sort_by_key(|t| t.0); // stable: task order within a colour kept
    let (table, packed, tgt) = (&st.table, &st.packed, &st.targets);
    let len = st.fields.len();
    let out = FieldPtr(
        st.fields.velocity.as_mut_ptr(),
        st.fields.stretching.as_mut_ptr(),
    );
    let out = &out;
    let mut c0 = 0;
    while c0 < tasks.len() {
        let colour = tasks[c0].0;
        let c1 = c0 + tasks[c0..].partition_point(|t| t.0 == colour);
        tasks[c0..c1]
            .par_iter()
            .for_each_init(Vec::new, |acc, (_, range)| {
                for q in &pairs[range.clone()] {
                    let (a, b, image) = (q[2] as usize, q[3] as usize, q[4] as u8);
                    let ra = tt.cells[a].range.clone();
                    let rb = tt.cells[b].range.clone();
                    assert!(ra.end <= len && rb.end <= len);
                    // SAFETY: the tasks of one colour touch disjoint blocks, hence disjoint leaves
                    // and point ranges; within the task `ra` and `rb` are disjoint unless a == b.
                    let (va, sa) = unsafe { out.slices(ra.clone()) };
                    let groups = packed.of(b);
                    acc.clear();
                    acc.resize(groups.len(), [f64x4::splat(0.0); 6]);
                    let (pos, str_) = (&tgt.position[ra.clone()], &tgt.strength[ra.clone()]);
                    let shift = plan.shift_of(image).unwrap_or([0.0; 3]);
                    let same_leaf = a == b && image == NO_SHIFT;
                    p2p_mutual(table, pos, str_, groups, shift, same_leaf, va, sa, acc);
                    if a == b {
                        // B's side of the leaf with itself (or with its own image) is A's
                        add_group_acc(acc, va, sa);
                    } else {
                        // SAFETY: as above, and a != b
                        let (vb, sb) = unsafe { out.slices(rb) };
                        add_group_acc(acc, vb, sb);
                    }
                }
            });
        c0 = c1;
    }
    for_each_leaf(tt, &mut st.fields, |leaf, r, vel, str_| {
        for s in &rest[rest_offsets[leaf]..rest_offsets[leaf + 1]] {
            p2p(
                table,
                &tgt.position[r.clone()],
                &tgt.strength[r.clone()],
                packed.of(s.cell as usize),
                plan.shift_of(s.image).unwrap_or([0.0; 3]),
                vel,
                str_,
            );
        }
    });
}

/// Velocity and stretching arrays written by the tasks of one colour of [`near_field_mutual`].
struct FieldPtr(*mut [f64; 3], *mut [f64; 3]);

// SAFETY: the tasks that share a `FieldPtr` write disjoint ranges (see `near_field_mutual`).
unsafe impl Sync for FieldPtr {}

impl FieldPtr {
    /// # Safety
    /// `r` lies inside the arrays and no other live slice overlaps it.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slices(&self, r: Range<usize>) -> (&mut [[f64; 3]], &mut [[f64; 3]]) {
        (
            std::slice::from_raw_parts_mut(self.0.add(r.start), r.len()),
            std::slice::from_raw_parts_mut(self.1.add(r.start), r.len()),
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Mirror images undo each other's shift.
    #[test]
    fn mirror_image_negates_the_shift() {
        for i in 0..27u8 {
            let (s, m) = (
                crate::lists::image_shift(i),
                crate::lists::image_shift(mirror_image(i)),
            );
            assert_eq!(s.map(|x| -x), m, "image {i}");
        }
        assert_eq!(mirror_image(NO_SHIFT), NO_SHIFT);
    }

    /// An entry is mutual only when its mirror is listed and the core radii agree; of the two
    /// entries of a mutual pair exactly one represents it.
    #[test]
    fn mutual_role_needs_the_mirror_and_picks_one_representative() {
        let r = |cell: u32, image: u8| SourceRef { cell, image };
        let lists = |rows: Vec<Vec<SourceRef>>| {
            let mut offsets = vec![0];
            for row in &rows {
                offsets.push(offsets.last().unwrap() + row.len());
            }
            crate::lists::CsrList {
                offsets,
                sources: rows.into_iter().flatten().collect(),
            }
        };
        let sigma = [0.1, 0.1];
        // leaf 1 seen from leaf 0 through image 5, and leaf 0 from leaf 1 through 26 - 5
        let both = lists(vec![vec![r(1, 5)], vec![r(0, 21)]]);
        assert_eq!(mutual_role(&both, &sigma, 0, r(1, 5)), Some(true));
        assert_eq!(mutual_role(&both, &sigma, 1, r(0, 21)), Some(false));
        // the mirror missing (or through another image): one-sided
        let one = lists(vec![vec![r(1, 5)], vec![r(0, 5)]]);
        assert_eq!(mutual_role(&one, &sigma, 0, r(1, 5)), None);
        assert_eq!(mutual_role(&one, &sigma, 1, r(0, 5)), None);
        // different core radii: one-sided
        assert_eq!(mutual_role(&both, &[0.1, 0.2], 0, r(1, 5)), None);
        assert_eq!(mutual_role(&both, &[f64::NAN, 0.1], 0, r(1, 5)), None);
    }

    /// A periodic box covered by one leaf: its near row holds itself through all 27 images;
    /// the unshifted entry and the 13 images with `image < 13` represent the 14 mutual pairs,
    /// the other 13 are their mirrors.
    #[test]
    fn one_leaf_box_pairs_its_images_with_their_mirrors() {
        use crate::periodic::Periodic;
        use crate::testsets::{generate, Distribution};
        let mut s = generate(Distribution::Uniform, 40, 5, true);
        s.sigma.iter_mut().for_each(|x| *x = 0.6);
        let params = crate::EvalParams {
            leaf_size: 64,
            periodic: Some(Periodic {
                box_length: 2.0 * std::f64::consts::PI,
                image_levels: 0,
            }),
            ..Default::default()
        };
        let mut times = PhaseTimes::default();
        let (plan, _, _) =
            crate::evaluators::plan(&params, &s, &s.as_targets(), &mut times).unwrap();
        assert_eq!(plan.target_tree.cells.len(), 1);
        let row = plan.lists.near.row(0);
        assert_eq!(row.len(), 27);
        let roles: Vec<_> = row
            .iter()
            .map(|e| mutual_role(&plan.lists.near, &[0.6], 0, *e))
            .collect();
        assert_eq!(roles.iter().filter(|x| **x == Some(true)).count(), 14);
        assert_eq!(roles.iter().filter(|x| **x == Some(false)).count(), 13);
    }

    /// M2M and L2L through the cached diagonal rotations equal the ones that build their
    /// rotation, to round-off.
    #[test]
    fn diagonal_rotations_match_built_ones() {
        let f = FmmOps::new(7);
        let ops = &f.ops;
        let len = expansion_len(7);
        let m: Vec<Complex64> = (0..len)
            .map(|i| Complex64::new((i as f64 * 0.37).sin(), (i as f64 * 0.11).cos()))
            .collect();
        let mut s = Scratch::new(7);
        let max_diff = |x: &[Complex64], y: &[Complex64]| {
            x.iter()
                .zip(y)
                .map(|(a, b)| (a - b).norm())
                .fold(0.0, f64::max)
        };
        let max_norm = |y: &[Complex64]| y.iter().map(|z| z.norm()).fold(0.0, f64::max);
        let parent = [0.5, -0.25, 1.0];
        for b in 0..8 {
            let h = 0.125;
            let child: [f64; 3] =
                std::array::from_fn(|k| parent[k] + if b >> k & 1 == 1 { h } else { -h });
            let v = std::array::from_fn(|k| parent[k] - child[k]);
            let (rot, d) = f.diagonal(v).expect("a diagonal");
            let (mut x, mut y) = (
                vec![Complex64::default(); len],
                vec![Complex64::default(); len],
            );
            ops.m2m_with_rotation(rot, d, &m, &mut x, &mut s);
            ops.m2m(child, parent, &m, &mut y, &mut s);
            let e = max_diff(&x, &y);
            assert!(e < 1e-14 * max_norm(&y), "m2m {b}: {e:e}");
            let v = std::array::from_fn(|k| child[k] - parent[k]);
            let (rot, d) = f.diagonal(v).expect("a diagonal");
            let (mut x, mut y) = (
                vec![Complex64::default(); len],
                vec![Complex64::default(); len],
            );
            ops.l2l_with_rotation(rot, d, &m, &mut x, &mut s);
            ops.l2l(parent, child, &m, &mut y, &mut s);
            let e = max_diff(&x, &y);
            assert!(e < 1e-14 * max_norm(&y), "l2l {b}: {e:e}");
        }
        assert!(f.diagonal([1.0, 1.0, 0.5]).is_none());
    }
}
