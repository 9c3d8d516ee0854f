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
//!
//! Submodules: `ops` (the far-field operators of one cell, FMM and pseudo-particles), `passes`
//! (the far-field passes over the tree levels and lists), `near` (the mutual near field); this
//! module holds the backend's state and its phases.

use super::{timed, Backend, PhaseTimes, Plan};
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

mod near;
mod ops;
mod passes;
use near::{for_each_leaf, near_field_mutual};
use ops::FmmOps;
use passes::{local_passes, m2l_pass, m2l_pass_batched, same_tree, treecode_far, upward};

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
        let far = if plan.far_field.pseudo_particles() {
            Far::Ppm(PseudoParticles::new(plan.order))
        } else {
            Far::Fmm(FmmOps::new(plan.order))
        };
        let len = far_len(&far);
        let needs_locals = plan.far_field.has_locals() || plan.periodic.is_some();
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
        if !plan.far_field.has_locals() {
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

#[cfg(test)]
mod tests {
    use super::near::{mirror_image, mutual_role};
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
