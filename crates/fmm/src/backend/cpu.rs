//! The CPU backend: the f64 reference operators of [`crate::operators`] (FMM, treecode) and
//! [`crate::ppm`] (pseudo-particles), parallel with rayon.
//!
//! The phases are written once, generically over [`FarOps`] (the far-field operators of one
//! method acting on one cell's expansion, stored as `f64`), so the FMM and the PPM share the
//! traversal of the tree levels and lists. Parallelism never splits a reduction: every output (a
//! cell's expansion, a leaf's particles) is written by one task that sums its inputs in list
//! order, so the results do not depend on the number of threads.

use super::{timed, Backend, FarField, PhaseTimes, Plan};
use crate::expansions::{expansion_len, Complex64};
use crate::kernel::{KernelTable, INV_4PI};
use crate::lists::SourceRef;
use crate::operators::p2p::{p2p, PackedSources};
use crate::operators::{Operators, Rotation, Scratch};
use crate::ppm::PseudoParticles;
use crate::tree::{Cell, Tree};
use crate::{Fields, FmmError, Sources, Targets};
use rayon::prelude::*;
use std::collections::HashMap;
use std::ops::Range;

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
            FarField::Fmm | FarField::Treecode => Far::Fmm(FmmOps {
                ops: Operators::new(plan.order),
                rotations: HashMap::new(),
            }),
            FarField::Ppm => Far::Ppm(PseudoParticles::new(plan.order)),
        };
        let len = far_len(&far);
        let needs_locals = !(plan.far_field == FarField::Treecode && plan.periodic.is_none());
        Ok(CpuState {
            far,
            table: KernelTable::new(),
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
            if let Far::Fmm(f) = &mut st.far {
                timed(&mut times.m2l, || f.cache_rotations(plan));
            }
            match &st.far {
                Far::Fmm(f) => m2l_pass(f, plan, &st.multipoles, &mut st.locals, times),
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
        _plan: &Plan,
        st: &CpuState,
        cells: &[usize],
    ) -> Result<Vec<f64>, FmmError> {
        let len = far_len(&st.far);
        Ok(cells
            .iter()
            .flat_map(|&c| st.multipoles[c * len..(c + 1) * len].iter().copied())
            .collect())
    }

    fn set_multipoles(
        &self,
        _plan: &Plan,
        st: &mut CpuState,
        cells: &[usize],
        data: &[f64],
    ) -> Result<(), FmmError> {
        let len = far_len(&st.far);
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
        data: &[f64],
    ) -> Result<(), FmmError> {
        let len = far_len(&st.far);
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
        Far::Fmm(f) => f.len(),
        Far::Ppm(f) => f.len(),
    }
}

/// The far-field operators of one method on one cell's expansion (`f64` storage).
trait FarOps: Sync {
    type Scratch: Send;
    /// `f64` values per expansion.
    fn len(&self) -> usize;
    fn scratch(&self) -> Self::Scratch;
    fn p2m(&self, cell: &Cell, position: &[[f64; 3]], strength: &[[f64; 3]], m: &mut [f64]);
    fn m2m(&self, child: &Cell, parent: &Cell, cm: &[f64], pm: &mut [f64], s: &mut Self::Scratch);
    fn m2l(
        &self,
        plan: &Plan,
        target: usize,
        source: SourceRef,
        m: &[f64],
        l: &mut [f64],
        s: &mut Self::Scratch,
    );
    fn l2l(&self, parent: &Cell, child: &Cell, pl: &[f64], cl: &mut [f64], s: &mut Self::Scratch);
    #[allow(clippy::too_many_arguments)]
    fn l2p(
        &self,
        cell: &Cell,
        l: &[f64],
        position: &[[f64; 3]],
        alpha: &[[f64; 3]],
        velocity: &mut [[f64; 3]],
        stretching: &mut [[f64; 3]],
    );
}

/// The FMM operators with the rotations of the M2L directions of the current plan.
struct FmmOps {
    ops: Operators,
    rotations: HashMap<[i64; 3], Rotation>,
}

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

    fn cache_rotations(&mut self, plan: &Plan) {
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
        let ops = &self.ops;
        self.rotations = keys
            .into_par_iter()
            .map(|k| (k, ops.rotation([k[0] as f64, k[1] as f64, k[2] as f64])))
            .collect();
    }
}

impl FarOps for FmmOps {
    type Scratch = Scratch;
    fn len(&self) -> usize {
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
        let rot = &self.rotations[&key];
        self.ops
            .m2l_with_rotation(rot, dist, as_complex(m), as_complex_mut(l), s);
    }
    fn l2l(&self, parent: &Cell, child: &Cell, pl: &[f64], cl: &mut [f64], s: &mut Scratch) {
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
    fn len(&self) -> usize {
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
    let len = f.len();
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
    let len = f.len();
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

/// L2L down the target tree, then L2P at its leaves.
fn local_passes<F: FarOps>(
    f: &F,
    plan: &Plan,
    locals: &mut [f64],
    tgt: &Targets,
    fields: &mut Fields,
    times: &mut PhaseTimes,
) {
    let len = f.len();
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
    let len = f.len();
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
