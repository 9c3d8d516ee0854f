//! Interaction lists packed on the host in the kernels' layout, in parallel (rayon): the M2L
//! tasks, entries and rotation records (with the buffers and the rotation cache the backend
//! keeps between evaluations) and the M2P tasks of the treecode.

use super::EVAL_BLOCK;
use crate::tables::{direction_key, rot_stride, RotationBuilder};
use rustc_hash::{FxHashMap, FxHashSet};
use vortex_fmm::backend::Plan;

/// `(tasks, entries, rotation records, number of directions)` of [`pack_m2l`].
pub type M2lPacking = (Vec<[i32; 4]>, Vec<[i32; 4]>, Vec<f32>, usize);

/// Host buffers of the M2L packing, kept by the backend between evaluations (their capacity
/// is reused: no reallocation and no fresh page faults per call).
#[derive(Default)]
pub struct M2lBuffers {
    pub tasks: Vec<[i32; 4]>,
    pub entries: Vec<[i32; 4]>,
    pub recs: Vec<f32>,
    keys: Vec<u128>,
    /// rotation records of the directions met so far, for order `cache_order`
    rot_cache: FxHashMap<u128, Vec<f32>>,
    cache_order: usize,
}

const KEY_BIAS: i64 = 1 << 41;
const KEY_MASK: u128 = (1 << 42) - 1;

/// A reduced direction key in one `u128` (42 bits per component).
fn pack_key(k: [i64; 3]) -> u128 {
    let f = |x: i64| ((x + KEY_BIAS) as u128) & KEY_MASK;
    (f(k[0]) << 84) | (f(k[1]) << 42) | f(k[2])
}

fn unpack_key(k: u128) -> [f64; 3] {
    let f = |s: u32| (((k >> s) & KEY_MASK) as i64 - KEY_BIAS) as f64;
    [f(84), f(42), f(0)]
}

/// M2L work in the kernel's layout, packed in parallel: tasks `(target cell, first entry, end
/// entry, 0)` (the far list's CSR rows), entries `(source cell, rotation, distance bits, 0)`,
/// rotation records of the distinct directions (if `with_rot`) and their number.
pub fn pack_m2l(plan: &Plan, p: usize, with_rot: bool) -> M2lPacking {
    let mut b = M2lBuffers::default();
    let n = pack_m2l_into(plan, p, with_rot, &mut b);
    (b.tasks, b.entries, b.recs, n)
}

/// [`pack_m2l`] into reused buffers; returns the number of distinct directions. Entries are
/// filled in parallel over the far list's rows (one pass for cells, distances and direction
/// keys), the distinct keys collected by per-thread hash sets, and the rotation indices looked
/// up in parallel.
pub fn pack_m2l_into(plan: &Plan, p: usize, with_rot: bool, out: &mut M2lBuffers) -> usize {
    use rayon::prelude::*;
    let (tt, stree, far) = (&plan.target_tree, &plan.source_tree, &plan.lists.far);
    let tasks = &mut out.tasks;
    tasks.clear();
    tasks.par_extend(
        (0..tt.cells.len())
            .into_par_iter()
            .filter(|&t| far.offsets[t + 1] > far.offsets[t])
            .map(|t| {
                [
                    t as i32,
                    far.offsets[t] as i32,
                    far.offsets[t + 1] as i32,
                    0,
                ]
            }),
    );
    let n = far.len();
    out.entries.clear();
    out.entries.resize(n, [0; 4]);
    out.keys.clear();
    out.keys.resize(if with_rot { n } else { 0 }, 0);
    // rows of the far list are contiguous in CSR order: split the outputs by rows
    {
        let mut rows = Vec::with_capacity(tasks.len());
        let mut erest = &mut out.entries[..];
        let mut krest = &mut out.keys[..];
        let mut at = 0usize;
        for t in tasks.iter() {
            let (e0, e1) = (t[1] as usize, t[2] as usize);
            let (_, r) = std::mem::take(&mut erest).split_at_mut(e0 - at);
            let (er, r) = r.split_at_mut(e1 - e0);
            erest = r;
            let kr = if with_rot {
                let (_, r) = std::mem::take(&mut krest).split_at_mut(e0 - at);
                let (kr, r) = r.split_at_mut(e1 - e0);
                krest = r;
                kr
            } else {
                &mut []
            };
            rows.push((t[0] as usize, e0, er, kr));
            at = e1;
        }
        rows.into_par_iter().for_each(|(t, e0, er, kr)| {
            let tc = &tt.cells[t];
            for (k, sref) in far.sources[e0..e0 + er.len()].iter().enumerate() {
                let sc = plan.source_center(sref.cell as usize, sref.image);
                let v: [f64; 3] = std::array::from_fn(|k| tc.center[k] - sc[k]);
                let d = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt() as f32;
                er[k] = [sref.cell as i32, 0, d.to_bits() as i32, 0];
                if !kr.is_empty() {
                    // the unreduced integer vector (v / h): cheap per entry; reduced by
                    // the gcd once per distinct vector below
                    let h = tc
                        .half_width
                        .min(stree.cells[sref.cell as usize].half_width);
                    let ih = 1.0 / h;
                    kr[k] = pack_key(std::array::from_fn(|d| (v[d] * ih).round() as i64));
                }
            }
        });
    }
    out.recs.clear();
    if !with_rot {
        return 0;
    }
    // distinct integer vectors: per-thread hash sets merged (a few thousand keys)
    let set = out
        .keys
        .par_chunks(1 << 16)
        .fold(FxHashSet::<u128>::default, |mut m, ks| {
            m.extend(ks.iter().copied());
            m
        })
        .reduce(FxHashSet::<u128>::default, |mut a, b| {
            a.extend(b);
            a
        });
    // reduce each to its direction (gcd), number the distinct directions
    let raw: Vec<(u128, u128)> = set
        .into_iter()
        .map(|k| {
            let v = unpack_key(k);
            (k, pack_key(direction_key(v, 1.0)))
        })
        .collect();
    let mut uniq: Vec<u128> = raw.iter().map(|r| r.1).collect();
    uniq.sort_unstable();
    uniq.dedup();
    // rotation records: cached per (order, direction) across evaluations, the missing ones
    // computed in parallel
    if out.cache_order != p {
        out.rot_cache.clear();
        out.cache_order = p;
    }
    let missing: Vec<u128> = uniq
        .iter()
        .copied()
        .filter(|k| !out.rot_cache.contains_key(k))
        .collect();
    let fresh: Vec<(u128, Vec<f32>)> = missing
        .par_iter()
        .map_init(
            || RotationBuilder::new(p),
            |rb, &u| {
                let mut r = Vec::with_capacity(rot_stride(p));
                rb.push(unpack_key(u), &mut r);
                (u, r)
            },
        )
        .collect();
    out.rot_cache.extend(fresh);
    for u in &uniq {
        out.recs.extend_from_slice(&out.rot_cache[u]);
    }
    let index: FxHashMap<u128, i32> = raw
        .iter()
        .map(|(k, r)| (*k, uniq.binary_search(r).unwrap() as i32))
        .collect();
    out.entries
        .par_iter_mut()
        .zip(out.keys.par_iter())
        .for_each(|(e, k)| e[1] = index[k]);
    uniq.len()
}

/// M2P (treecode) work in the kernel's layout, packed in parallel over the target leaves:
/// tasks `(first target, count <= EVAL_BLOCK, first entry, end entry)`, entries `(source cell,
/// image, 0, 0)` (the far rows of the leaf and of its ancestors), and the number of (cell,
/// target) evaluations.
pub fn pack_m2p(plan: &Plan) -> (Vec<[i32; 4]>, Vec<[i32; 4]>, u64) {
    use rayon::prelude::*;
    let tt = &plan.target_tree;
    let far = &plan.lists.far;
    let leaves: Vec<usize> = tt.leaves().collect();
    // per leaf: number of entries (its far row and its ancestors') and of tasks
    let counts: Vec<(usize, usize)> = leaves
        .par_iter()
        .map(|&l| {
            let mut n = 0;
            let mut cell = Some(l);
            while let Some(c) = cell {
                n += far.row(c).len();
                cell = tt.cells[c].parent;
            }
            let nt = if n == 0 {
                0
            } else {
                tt.cells[l].range.len().div_ceil(EVAL_BLOCK)
            };
            (n, nt)
        })
        .collect();
    let (ne, nt) = counts.iter().fold((0, 0), |(a, b), &(x, y)| (a + x, b + y));
    let mut entries = vec![[0i32; 4]; ne];
    let mut tasks = vec![[0i32; 4]; nt];
    let mut work = Vec::with_capacity(leaves.len());
    {
        let (mut er, mut tr) = (&mut entries[..], &mut tasks[..]);
        let mut e0 = 0usize;
        for (&l, &(n, m)) in leaves.iter().zip(&counts) {
            let (e, r) = std::mem::take(&mut er).split_at_mut(n);
            let (t, r2) = std::mem::take(&mut tr).split_at_mut(m);
            er = r;
            tr = r2;
            if m > 0 {
                work.push((l, e0, e, t));
            }
            e0 += n;
        }
    }
    let evals: u64 = work
        .into_par_iter()
        .map(|(l, e0, e, t)| {
            let mut k = 0;
            let mut cell = Some(l);
            while let Some(c) = cell {
                for s in far.row(c) {
                    e[k] = [s.cell as i32, s.image as i32, 0, 0];
                    k += 1;
                }
                cell = tt.cells[c].parent;
            }
            let r = tt.cells[l].range.clone();
            let e1 = e0 + e.len();
            let mut first = r.start;
            for task in t.iter_mut() {
                let n = EVAL_BLOCK.min(r.end - first);
                *task = [first as i32, n as i32, e0 as i32, e1 as i32];
                first += n;
            }
            (r.len() * e.len()) as u64
        })
        .sum();
    (tasks, entries, evals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vortex_fmm::backend::PhaseTimes;
    use vortex_fmm::{EvalParams, Method};

    #[test]
    fn m2l_packing_follows_the_far_lists() {
        let s = vortex_fmm::testsets::standard(4000, 3);
        let params = EvalParams {
            method: Method::Fmm,
            order: 4,
            leaf_size: 16,
            ..Default::default()
        };
        let mut t = PhaseTimes::default();
        let (plan, _, _) =
            vortex_fmm::evaluators::plan(&params, &s, &s.as_targets(), &mut t).unwrap();
        let (tasks, entries, recs, ndirs) = pack_m2l(&plan, 4, true);
        assert_eq!(entries.len(), plan.lists.far.len());
        assert_eq!(recs.len(), ndirs * rot_stride(4));
        assert!(ndirs > 0 && ndirs < entries.len());
        for task in &tasks {
            let t = task[0] as usize;
            let row = plan.lists.far.row(t);
            assert_eq!((task[2] - task[1]) as usize, row.len());
            for (e, sref) in entries[task[1] as usize..task[2] as usize].iter().zip(row) {
                assert_eq!(e[0], sref.cell as i32);
                let v: [f64; 3] = std::array::from_fn(|k| {
                    plan.target_tree.cells[t].center[k]
                        - plan.source_tree.cells[sref.cell as usize].center[k]
                });
                let d = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt() as f32;
                assert_eq!(f32::from_bits(e[2] as u32), d);
                assert!((e[1] as usize) < ndirs);
                // the entry's rotation record is the rotation of its direction
                let stride = rot_stride(4);
                let mut r = Vec::new();
                RotationBuilder::new(4).push(v, &mut r);
                let got = &recs[e[1] as usize * stride..(e[1] as usize + 1) * stride];
                for (x, y) in got.iter().zip(&r) {
                    assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{x} {y}");
                }
            }
        }
    }

    #[test]
    fn m2p_packing_matches_sequential_walk() {
        let s = vortex_fmm::testsets::standard(5000, 4);
        let params = EvalParams {
            method: Method::Treecode,
            order: 4,
            leaf_size: 100,
            ..Default::default()
        };
        let mut t = PhaseTimes::default();
        let (plan, _, _) =
            vortex_fmm::evaluators::plan(&params, &s, &s.as_targets(), &mut t).unwrap();
        let (tasks, entries, evals) = pack_m2p(&plan);
        let tt = &plan.target_tree;
        let (mut et, mut ee, mut ev) = (Vec::new(), Vec::new(), 0u64);
        for l in tt.leaves() {
            let e0 = ee.len();
            let mut cell = Some(l);
            while let Some(c) = cell {
                ee.extend(
                    plan.lists
                        .far
                        .row(c)
                        .iter()
                        .map(|s| [s.cell as i32, s.image as i32, 0, 0]),
                );
                cell = tt.cells[c].parent;
            }
            let e1 = ee.len();
            if e1 == e0 {
                continue;
            }
            let r = tt.cells[l].range.clone();
            ev += (r.len() * (e1 - e0)) as u64;
            let mut first = r.start;
            while first < r.end {
                let n = EVAL_BLOCK.min(r.end - first);
                et.push([first as i32, n as i32, e0 as i32, e1 as i32]);
                first += n;
            }
        }
        assert!(!tasks.is_empty());
        assert_eq!(tasks, et);
        assert_eq!(entries, ee);
        assert_eq!(evals, ev);
    }
}
