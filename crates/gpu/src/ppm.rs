//! Pseudo-particle method (PPM) on the CUDA backend: host side.
//!
//! Every PPM operator runs on the GPU (`kernels/ppm.cu`): the M2L, the costly part (`K^2`
//! singular-kernel pairs per translation; one target cell per block, one target sphere point
//! per thread, the source pseudo-particles streamed through shared memory, fp32 pairs summed
//! in f64), and P2M, M2M, L2L, L2P in f64 from the tables built here ([`PpmTables`]: the
//! moment-to-strength matrix `W`, the monomial exponents and their derivative links, the 8
//! octant matrices of M2M and L2L). Multipoles and locals stay on the device; the host only
//! sees them when the driver asks (MPI, periodic images). The f64 host operators of
//! [`vortex_fmm::ppm::PseudoParticles`] ([`PpmHost`]) remain the reference the tests compare with,
//! and the fallback for a tree whose children are not regular octants.
//!
//! [`pack_ppm_m2l`] packs the far lists in parallel into the kernel's layout (tasks: `(target
//! cell, first entry, end entry, b)`, entries: `(source cell, t_centre - s_centre)`).

use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use vortex_fmm::backend::Plan;
use vortex_fmm::ppm::PseudoParticles;
use vortex_fmm::tree::Tree;
use vortex_fmm::{Fields, Sources, Targets};

/// M2M and L2L of the PPM as dense `K x K` matrices, one per child octant.
///
/// Both operators are linear, act on the three components alike, and depend on the geometry
/// only through `(child centre - parent centre) / child half-width` (an octant sign vector) and
/// the radius ratio (1/2): the scaled coordinates `z` of the child's sphere points in the
/// parent's sphere are the same on every level. So each is 8 matrices, built once per order
/// from the f64 operators themselves (column `j` = the operator applied to unit strength `j`),
/// and M2M / L2L become `K^2` multiply-adds per component and child instead of a P2M of `K`
/// points (`O(K p^3)`) or a coefficient conversion per child.
pub struct OctantMatrices {
    k: usize,
    /// `m2m[o][row * K + col]`: parent strength `row` from child strength `col`.
    m2m: Vec<Vec<f64>>,
    /// `l2l[o][row * K + col]`: child potential `row` from parent potential `col`.
    l2l: Vec<Vec<f64>>,
}

impl OctantMatrices {
    fn sign(o: usize) -> [f64; 3] {
        std::array::from_fn(|d| if (o >> d) & 1 == 1 { 1.0 } else { -1.0 })
    }

    fn build(ops: &PseudoParticles) -> Self {
        let k = ops.count();
        let len = ops.len();
        let col = |o: usize, j: usize, l2l: bool| -> Vec<f64> {
            let e = Self::sign(o);
            let mut unit = vec![0.0; len];
            unit[3 * j] = 1.0;
            let mut out = vec![0.0; len];
            if l2l {
                ops.l2l([0.0; 3], 2.0, e, 1.0, &unit, &mut out);
            } else {
                ops.m2m(e, 1.0, [0.0; 3], 2.0, &unit, &mut out);
            }
            // component 0 of the output only (the operators do not mix components)
            (0..k).map(|r| out[3 * r]).collect()
        };
        let mat = |l2l: bool| -> Vec<Vec<f64>> {
            (0..8)
                .map(|o| {
                    let cols: Vec<Vec<f64>> =
                        (0..k).into_par_iter().map(|j| col(o, j, l2l)).collect();
                    let mut m = vec![0.0; k * k];
                    for (j, c) in cols.iter().enumerate() {
                        for (r, &v) in c.iter().enumerate() {
                            m[r * k + j] = v;
                        }
                    }
                    m
                })
                .collect()
        };
        Self {
            k,
            m2m: mat(false),
            l2l: mat(true),
        }
    }

    /// The matrices of order `p` (default rule and radius), built once per process.
    pub fn get(ops: &PseudoParticles) -> Arc<Self> {
        type Cache = Mutex<HashMap<(usize, u64), Arc<OctantMatrices>>>;
        static CACHE: OnceLock<Cache> = OnceLock::new();
        let key = (ops.order(), ops.radius_factor().to_bits());
        let cache = CACHE.get_or_init(Default::default);
        if let Some(m) = cache.lock().unwrap().get(&key) {
            return m.clone();
        }
        let m = Arc::new(Self::build(ops));
        cache.lock().unwrap().insert(key, m.clone());
        m
    }

    /// The octant of `child` in `parent`, if it is a regular octree child (half the width,
    /// centre at +-child half-width per axis).
    fn octant(parent: &vortex_fmm::tree::Cell, child: &vortex_fmm::tree::Cell) -> Option<usize> {
        let h = child.half_width;
        if (parent.half_width - 2.0 * h).abs() > 1e-9 * parent.half_width {
            return None;
        }
        let mut o = 0;
        for d in 0..3 {
            let e = (child.center[d] - parent.center[d]) / h;
            if (e.abs() - 1.0).abs() > 1e-6 {
                return None;
            }
            if e > 0.0 {
                o |= 1 << d;
            }
        }
        Some(o)
    }

    /// `out[r*3+c] += sum_j m[r*K + j] x[j*3+c]`.
    fn apply(&self, m: &[f64], x: &[f64], out: &mut [f64]) {
        let k = self.k;
        for (r, o) in out.chunks_exact_mut(3).enumerate() {
            let row = &m[r * k..(r + 1) * k];
            let (mut a0, mut a1, mut a2) = (0.0, 0.0, 0.0);
            for (t, v) in row.iter().zip(x.chunks_exact(3)) {
                a0 += t * v[0];
                a1 += t * v[1];
                a2 += t * v[2];
            }
            o[0] += a0;
            o[1] += a1;
            o[2] += a2;
        }
    }
}

/// What the device PPM operators need of one order, flattened for upload
/// (layouts as documented in `kernels/ppm.cu`).
pub struct PpmTables {
    pub k: usize,
    pub p: usize,
    /// Per monomial `a0 | a1 << 8 | a2 << 16` (ordered by degree, as `vortex_fmm::ppm`).
    pub expo: Vec<i32>,
    /// Per monomial and direction `d`, the index of `a + e_d` (`-1` above degree `p`).
    pub up: Vec<i32>,
    /// `W`, `K x nm` row-major.
    pub w: Vec<f64>,
    /// `W` transposed, `nm x K`.
    pub wt: Vec<f64>,
    /// The 8 M2M matrices, each transposed (`[(o K + j) K + r] = M_o[r][j]`).
    pub m2m_t: Vec<f64>,
    /// The 8 L2L matrices, each transposed.
    pub l2l_t: Vec<f64>,
}

impl PpmTables {
    pub fn new(ops: &PseudoParticles) -> Self {
        let mats = OctantMatrices::get(ops);
        let (k, p) = (ops.count(), ops.order());
        let mono = ops.monomial_exponents();
        let nm = mono.len();
        let index: HashMap<[usize; 3], usize> =
            mono.iter().enumerate().map(|(i, &a)| (a, i)).collect();
        let expo = mono
            .iter()
            .map(|a| (a[0] | a[1] << 8 | a[2] << 16) as i32)
            .collect();
        let up = mono
            .iter()
            .flat_map(|&a| {
                let index = &index;
                (0..3).map(move |d| {
                    let mut b = a;
                    b[d] += 1;
                    index.get(&b).map(|&i| i as i32).unwrap_or(-1)
                })
            })
            .collect();
        let w = ops.moment_weights().to_vec();
        let mut wt = vec![0.0; nm * k];
        for kk in 0..k {
            for a in 0..nm {
                wt[a * k + kk] = w[kk * nm + a];
            }
        }
        let transpose = |ms: &[Vec<f64>]| -> Vec<f64> {
            let mut out = vec![0.0; 8 * k * k];
            for (o, m) in ms.iter().enumerate() {
                for r in 0..k {
                    for j in 0..k {
                        out[(o * k + j) * k + r] = m[r * k + j];
                    }
                }
            }
            out
        };
        Self {
            k,
            p,
            expo,
            up,
            w,
            wt,
            m2m_t: transpose(&mats.m2m),
            l2l_t: transpose(&mats.l2l),
        }
    }

    /// Monomials of degree `<= p - 1` and `<= p - 2` (`PPM_NM1`, `PPM_NM2`).
    pub fn nm1_nm2(&self) -> (usize, usize) {
        let c = |q: isize| -> usize {
            if q < 0 {
                0
            } else {
                let q = q as usize;
                (q + 1) * (q + 2) * (q + 3) / 6
            }
        };
        (c(self.p as isize - 1), c(self.p as isize - 2))
    }

    /// `f64` of L2P scratch per block (`9 NM1 + 18 NM2`).
    pub fn l2p_scratch_len(&self) -> usize {
        let (n1, n2) = self.nm1_nm2();
        9 * n1 + 18 * n2
    }
}

/// The octant (`0..8`, bit `d` set for the upper half along `d`) of every non-root cell in its
/// parent, `-1` for the root; `None` when some child is not a regular octree octant (then the
/// device matrices do not apply and the host operators run).
pub fn cell_octants(tree: &Tree) -> Option<Vec<i32>> {
    tree.cells
        .iter()
        .map(|c| match c.parent {
            None => Some(-1),
            Some(pc) => OctantMatrices::octant(&tree.cells[pc], c).map(|o| o as i32),
        })
        .collect()
}

/// Centre and half width of every cell, 4 `f64` per cell (the `cells` argument of the kernels).
pub fn cell_geometry(tree: &Tree) -> Vec<f64> {
    tree.cells
        .iter()
        .flat_map(|c| [c.center[0], c.center[1], c.center[2], c.half_width])
        .collect()
}

/// Host data of one PPM evaluation (sorted particles, f64 pseudo-particle strengths and
/// local potentials, the fields of the host L2P).
pub struct PpmHost {
    pub ops: PseudoParticles,
    mats: Arc<OctantMatrices>,
    /// M2M / L2L through the octant matrices (default) or the operators (for comparison).
    pub use_matrices: bool,
    pub sources: Sources,
    pub targets: Targets,
    pub multipoles: Vec<f64>,
    pub locals: Vec<f64>,
    pub fields: Option<Fields>,
}

impl PpmHost {
    pub fn new(plan: &Plan, sources: &Sources, targets: &Targets) -> Self {
        let ops = PseudoParticles::new(plan.order);
        let len = ops.len();
        Self {
            mats: OctantMatrices::get(&ops),
            use_matrices: true,
            multipoles: vec![0.0; plan.source_tree.cells.len() * len],
            locals: vec![0.0; plan.target_tree.cells.len() * len],
            ops,
            sources: sources.clone(),
            targets: targets.clone(),
            fields: None,
        }
    }

    /// `3K`.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// P2M at the leaves (parallel over leaves).
    pub fn p2m(&mut self, tree: &Tree) {
        let len = self.len();
        let (ops, src) = (&self.ops, &self.sources);
        self.multipoles
            .par_chunks_mut(len)
            .enumerate()
            .filter(|(c, _)| tree.cells[*c].is_leaf() && !tree.cells[*c].is_empty())
            .for_each(|(c, m)| {
                let cell = &tree.cells[c];
                let r = cell.range.clone();
                m.iter_mut().for_each(|x| *x = 0.0);
                ops.p2m(
                    cell.center,
                    cell.half_width,
                    &src.position[r.clone()],
                    &src.strength[r],
                    m,
                );
            });
    }

    /// M2M level by level upwards (parallel over the parents of a level).
    pub fn m2m(&mut self, tree: &Tree) {
        let len = self.len();
        let (ops, mats, um) = (&self.ops, &*self.mats, self.use_matrices);
        for l in (0..tree.levels.len().saturating_sub(1)).rev() {
            let lv = tree.levels[l].clone();
            // children of level l live after the level's cells (breadth-first storage)
            let (head, tail) = self.multipoles.split_at_mut(lv.end * len);
            let base = lv.end;
            head[lv.start * len..]
                .par_chunks_mut(len)
                .enumerate()
                .for_each(|(k, pm)| {
                    let pc = lv.start + k;
                    let parent = &tree.cells[pc];
                    if parent.is_leaf() {
                        return;
                    }
                    for c in parent.children.clone() {
                        let child = &tree.cells[c];
                        let cm = &tail[(c - base) * len..(c - base + 1) * len];
                        if let Some(o) = OctantMatrices::octant(parent, child).filter(|_| um) {
                            mats.apply(&mats.m2m[o], cm, pm);
                            continue;
                        }
                        ops.m2m(
                            child.center,
                            child.half_width,
                            parent.center,
                            parent.half_width,
                            cm,
                            pm,
                        );
                    }
                });
        }
    }

    /// L2L level by level downwards (parallel over the children of a level).
    pub fn l2l(&mut self, tree: &Tree) {
        let len = self.len();
        let (ops, mats, um) = (&self.ops, &*self.mats, self.use_matrices);
        for l in 1..tree.levels.len() {
            let lv = tree.levels[l].clone();
            let (head, tail) = self.locals.split_at_mut(lv.start * len);
            tail[..lv.len() * len]
                .par_chunks_mut(len)
                .enumerate()
                .for_each(|(k, cl)| {
                    let c = lv.start + k;
                    let child = &tree.cells[c];
                    let pc = child.parent.expect("non-root cell has a parent");
                    let parent = &tree.cells[pc];
                    let pl = &head[pc * len..(pc + 1) * len];
                    if let Some(o) = OctantMatrices::octant(parent, child).filter(|_| um) {
                        mats.apply(&mats.l2l[o], pl, cl);
                        return;
                    }
                    ops.l2l(
                        parent.center,
                        parent.half_width,
                        child.center,
                        child.half_width,
                        &head[pc * len..(pc + 1) * len],
                        cl,
                    );
                });
        }
    }

    /// L2P at the target leaves into `self.fields` (no `1/(4 pi)`; parallel over leaves).
    pub fn l2p(&mut self, tree: &Tree) {
        let len = self.len();
        let n = self.targets.len();
        let mut f = Fields::zeros(n);
        let mut leaves: Vec<usize> = tree
            .leaves()
            .filter(|&l| !tree.cells[l].is_empty())
            .collect();
        leaves.sort_unstable_by_key(|&l| tree.cells[l].range.start);
        let mut work = Vec::with_capacity(leaves.len());
        let (mut vr, mut sr) = (&mut f.velocity[..], &mut f.stretching[..]);
        let mut pos = 0;
        for &l in &leaves {
            let r = tree.cells[l].range.clone();
            let (_, v) = std::mem::take(&mut vr).split_at_mut(r.start - pos);
            let (_, s) = std::mem::take(&mut sr).split_at_mut(r.start - pos);
            let (v, vrest) = v.split_at_mut(r.len());
            let (s, srest) = s.split_at_mut(r.len());
            work.push((l, v, s));
            vr = vrest;
            sr = srest;
            pos = r.end;
        }
        let (ops, tgt, loc) = (&self.ops, &self.targets, &self.locals);
        work.into_par_iter().for_each(|(l, v, s)| {
            let cell = &tree.cells[l];
            let r = cell.range.clone();
            ops.l2p(
                cell.center,
                cell.half_width,
                &loc[l * len..(l + 1) * len],
                &tgt.position[r.clone()],
                &tgt.strength[r],
                v,
                s,
            );
        });
        self.fields = Some(f);
    }
}

/// `(tasks, entries, source sphere radii)` of [`pack_ppm_m2l`].
pub type PpmM2lPacking = (Vec<[i32; 4]>, Vec<[i32; 4]>, Vec<f32>);

/// M2L work of the PPM in the kernel's layout, packed in parallel: tasks `(target cell, first
/// entry, end entry, target sphere radius as f32 bits)`, one per target cell with a non-empty
/// far list, entries `(source cell, t_centre - s_centre as f32 bits)` (periodic image applied,
/// difference taken in f64), in the far list's order; and the sphere radius of every source
/// cell.
pub fn pack_ppm_m2l(plan: &Plan, radius_factor: f64) -> PpmM2lPacking {
    let (tt, stree, far) = (&plan.target_tree, &plan.source_tree, &plan.lists.far);
    let tasks: Vec<[i32; 4]> = (0..tt.cells.len())
        .into_par_iter()
        .filter(|&t| far.offsets[t + 1] > far.offsets[t])
        .map(|t| {
            let b = (radius_factor * tt.cells[t].half_width) as f32;
            [
                t as i32,
                far.offsets[t] as i32,
                far.offsets[t + 1] as i32,
                b.to_bits() as i32,
            ]
        })
        .collect();
    let mut entries = vec![[0i32; 4]; far.len()];
    // rows are contiguous: split the output by target rows, fill in parallel
    let mut rows = Vec::with_capacity(tasks.len());
    let mut rest = &mut entries[..];
    let mut at = 0usize;
    for t in &tasks {
        let (e0, e1) = (t[1] as usize, t[2] as usize);
        let (_, r) = std::mem::take(&mut rest).split_at_mut(e0 - at);
        let (row, r) = r.split_at_mut(e1 - e0);
        rows.push((t[0] as usize, e0, row));
        rest = r;
        at = e1;
    }
    rows.into_par_iter().for_each(|(t, e0, out)| {
        let tc = tt.cells[t].center;
        for (o, s) in out.iter_mut().zip(&far.sources[e0..]) {
            let sc = plan.source_center(s.cell as usize, s.image);
            *o = [
                s.cell as i32,
                ((tc[0] - sc[0]) as f32).to_bits() as i32,
                ((tc[1] - sc[1]) as f32).to_bits() as i32,
                ((tc[2] - sc[2]) as f32).to_bits() as i32,
            ];
        }
    });
    let radii: Vec<f32> = stree
        .cells
        .par_iter()
        .map(|c| (radius_factor * c.half_width) as f32)
        .collect();
    (tasks, entries, radii)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vortex_fmm::backend::{Backend, PhaseTimes};
    use vortex_fmm::{CpuBackend, EvalParams, Method};

    /// The `ppm_m2l` kernel, emulated on the CPU in the same layout and precision.
    fn emulate_m2l(pack: &PpmM2lPacking, unit: &[[f64; 3]], mult: &[f32], loc: &mut [f64]) {
        let (tasks, entries, radii) = pack;
        let k = unit.len();
        for t in tasks {
            let b = f32::from_bits(t[3] as u32);
            for (ti, ut) in unit.iter().enumerate() {
                let mut g = [0.0f64; 3];
                for e in &entries[t[1] as usize..t[2] as usize] {
                    let c = e[0] as usize;
                    let a = radii[c];
                    let off: [f32; 3] = std::array::from_fn(|d| f32::from_bits(e[d + 1] as u32));
                    let x: [f32; 3] = std::array::from_fn(|d| b * ut[d] as f32 + off[d]);
                    let mut h = [0.0f32; 3];
                    for (i, u) in unit.iter().enumerate() {
                        let d: [f32; 3] = std::array::from_fn(|j| x[j] - a * u[j] as f32);
                        let ir = 1.0 / (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
                        for j in 0..3 {
                            h[j] += mult[c * 3 * k + 3 * i + j] * ir;
                        }
                    }
                    for j in 0..3 {
                        g[j] += h[j] as f64;
                    }
                }
                for j in 0..3 {
                    loc[t[0] as usize * 3 * k + 3 * ti + j] += g[j];
                }
            }
        }
    }

    /// The GPU PPM pipeline (host operators + emulated fp32 M2L kernel on the packed lists)
    /// agrees with the CPU backend's PPM.
    #[test]
    fn ppm_pipeline_matches_cpu_backend() {
        let s = vortex_fmm::testsets::standard(3000, 7);
        let t = s.as_targets();
        let params = EvalParams {
            method: Method::Ppm,
            order: 4,
            leaf_size: 32,
            ..Default::default()
        };
        let mut times = PhaseTimes::default();
        let (plan, ss, st) = vortex_fmm::evaluators::plan(&params, &s, &t, &mut times).unwrap();
        // CPU reference on the same plan
        let mut cs = CpuBackend.prepare(&plan, &ss, &st).unwrap();
        CpuBackend.upward(&plan, &mut cs, &mut times).unwrap();
        CpuBackend.downward(&plan, &mut cs, &mut times).unwrap();
        let cpu = CpuBackend.fields(&plan, cs).unwrap();
        // host ops + emulated kernel
        let mut h = PpmHost::new(&plan, &ss, &st);
        h.p2m(&plan.source_tree);
        h.m2m(&plan.source_tree);
        let pack = pack_ppm_m2l(&plan, h.ops.radius_factor());
        assert_eq!(pack.1.len(), plan.lists.far.len());
        let mult: Vec<f32> = h.multipoles.iter().map(|&x| x as f32).collect();
        let mut loc = vec![0.0; h.locals.len()];
        emulate_m2l(&pack, h.ops.unit_points(), &mult, &mut loc);
        h.locals.iter_mut().zip(&loc).for_each(|(a, b)| *a += b);
        h.l2l(&plan.target_tree);
        h.l2p(&plan.target_tree);
        let f = h.fields.unwrap();
        let scale = |v: &[[f64; 3]]| -> Vec<[f64; 3]> {
            v.iter()
                .map(|x| x.map(|c| c * vortex_fmm::kernel::INV_4PI))
                .collect()
        };
        let ev = vortex_fmm::relative_l2_error(&scale(&f.velocity), &cpu.velocity);
        let es = vortex_fmm::relative_l2_error(&scale(&f.stretching), &cpu.stretching);
        println!("PPM host+emulated kernel vs CPU backend: velocity {ev:.2e}, stretching {es:.2e}");
        assert!(ev < 1e-5 && es < 1e-4, "{ev} {es}");
    }

    fn monomial(e: i32, z: [f64; 3]) -> f64 {
        z[0].powi(e & 255) * z[1].powi((e >> 8) & 255) * z[2].powi(e >> 16)
    }

    /// The device P2M and L2P algorithms (`ppm_p2m`, `ppm_l2p`: moments times `W^T`, gradient
    /// and Hessian tables gathered through `up`), emulated in f64 on the CPU, equal the f64
    /// operators of `vortex_fmm::ppm` at random cells, particles and local representations.
    #[test]
    fn device_p2m_and_l2p_algorithms_match_the_operators() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for p in [1usize, 2, 5, 8, 10] {
            let ops = PseudoParticles::new(p);
            let tb = PpmTables::new(&ops);
            let (k, nm) = (tb.k, tb.expo.len());
            let (nm1, nm2) = tb.nm1_nm2();
            let center = [0.3, -0.2, 0.1];
            let h = 0.7;
            let rf = ops.radius_factor();
            let n = 40;
            let pos: Vec<[f64; 3]> = (0..n)
                .map(|_| std::array::from_fn(|d| center[d] + h * rng.gen_range(-1.0..1.0)))
                .collect();
            let al: Vec<[f64; 3]> = (0..n)
                .map(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0)))
                .collect();
            // P2M
            let mut reference = vec![0.0; 3 * k];
            ops.p2m(center, h, &pos, &al, &mut reference);
            let z = |x: [f64; 3]| -> [f64; 3] {
                std::array::from_fn(|d| (x[d] - center[d]) / (rf * h))
            };
            let mut mom = vec![[0.0f64; 3]; nm];
            for (x, a) in pos.iter().zip(&al) {
                for (m, &e) in mom.iter_mut().zip(&tb.expo) {
                    let v = monomial(e, z(*x));
                    (0..3).for_each(|c| m[c] += v * a[c]);
                }
            }
            let q: Vec<f64> = (0..k)
                .flat_map(|kk| {
                    let (mom, wt) = (&mom, &tb.wt);
                    (0..3).map(move |c| (0..nm).map(|a| wt[a * k + kk] * mom[a][c]).sum::<f64>())
                })
                .collect();
            let scale = reference.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            let diff = q
                .iter()
                .zip(&reference)
                .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
            assert!(diff <= 1e-12 * scale, "P2M p = {p}: {diff} vs {scale}");
            // L2P
            let g: Vec<f64> = (0..3 * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let (mut vr, mut sr) = (vec![[0.0; 3]; n], vec![[0.0; 3]; n]);
            ops.l2p(center, h, &g, &pos, &al, &mut vr, &mut sr);
            let inv_b = 1.0 / (rf * h);
            let coef: Vec<[f64; 3]> = (0..nm)
                .map(|a| {
                    std::array::from_fn(|c| {
                        (0..k).map(|kk| tb.w[kk * nm + a] * g[3 * kk + c]).sum()
                    })
                })
                .collect();
            let ad = |a: usize, d: usize| ((tb.expo[a] >> (8 * d)) & 255) as f64;
            let grad: Vec<Vec<[f64; 3]>> = (0..3)
                .map(|d| {
                    (0..nm1)
                        .map(|a| {
                            let b = tb.up[3 * a + d] as usize;
                            coef[b].map(|x| (ad(a, d) + 1.0) * inv_b * x)
                        })
                        .collect()
                })
                .collect();
            const PAIRS: [(usize, usize); 6] = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)];
            let hess: Vec<Vec<[f64; 3]>> = PAIRS
                .iter()
                .map(|&(d1, d2)| {
                    (0..nm2)
                        .map(|a| {
                            let b = tb.up[3 * a + d2] as usize;
                            grad[d1][b].map(|x| (ad(a, d2) + 1.0) * inv_b * x)
                        })
                        .collect()
                })
                .collect();
            let he = [[0, 3, 4], [3, 1, 5], [4, 5, 2]];
            let (mut ve, mut se) = (0.0f64, 0.0f64);
            let (mut vs, mut ss) = (0.0f64, 0.0f64);
            for i in 0..n {
                let zi = z(pos[i]);
                let mut gd = [[0.0; 3]; 3];
                let mut hh = [[0.0; 3]; 6];
                for a in 0..nm1 {
                    let v = monomial(tb.expo[a], zi);
                    for d in 0..3 {
                        (0..3).for_each(|c| gd[d][c] += v * grad[d][a][c]);
                    }
                    if a < nm2 {
                        for e in 0..6 {
                            (0..3).for_each(|c| hh[e][c] += v * hess[e][a][c]);
                        }
                    }
                }
                let u = [
                    gd[1][2] - gd[2][1],
                    gd[2][0] - gd[0][2],
                    gd[0][1] - gd[1][0],
                ];
                let v = |l: usize, m: usize| -> f64 {
                    (0..3).map(|kk| al[i][kk] * hh[he[kk][l]][m]).sum()
                };
                let s = [v(1, 2) - v(2, 1), v(2, 0) - v(0, 2), v(0, 1) - v(1, 0)];
                for c in 0..3 {
                    ve = ve.max((u[c] - vr[i][c]).abs());
                    se = se.max((s[c] - sr[i][c]).abs());
                    vs = vs.max(vr[i][c].abs());
                    ss = ss.max(sr[i][c].abs());
                }
            }
            assert!(ve <= 1e-11 * vs, "L2P velocity p = {p}: {ve} vs {vs}");
            assert!(
                se <= 1e-11 * ss.max(1e-300),
                "L2P stretching p = {p}: {se} vs {ss}"
            );
        }
    }

    /// The transposed octant matrices of [`PpmTables`] apply as the kernel reads them.
    #[test]
    fn device_octant_tables_are_the_transposed_matrices() {
        let ops = PseudoParticles::new(4);
        let tb = PpmTables::new(&ops);
        let mats = OctantMatrices::get(&ops);
        let k = tb.k;
        let x: Vec<f64> = (0..3 * k)
            .map(|i| ((i * 37 % 101) as f64) / 50.0 - 1.0)
            .collect();
        for o in 0..8 {
            for (mt, m) in [(&tb.m2m_t, &mats.m2m[o]), (&tb.l2l_t, &mats.l2l[o])] {
                let mut reference = vec![0.0; 3 * k];
                mats.apply(m, &x, &mut reference);
                for r in 0..k {
                    for c in 0..3 {
                        let v: f64 = (0..k).map(|j| mt[(o * k + j) * k + r] * x[3 * j + c]).sum();
                        assert!((v - reference[3 * r + c]).abs() <= 1e-12 * (1.0 + v.abs()));
                    }
                }
            }
        }
    }

    /// The octant matrices reproduce the f64 M2M and L2L operators on every level of a tree.
    #[test]
    fn octant_matrices_match_the_operators() {
        let s = vortex_fmm::testsets::standard(4000, 9);
        let t = s.as_targets();
        let params = EvalParams {
            method: Method::Ppm,
            order: 6,
            leaf_size: 20,
            ..Default::default()
        };
        let mut times = PhaseTimes::default();
        let (plan, ss, st) = vortex_fmm::evaluators::plan(&params, &s, &t, &mut times).unwrap();
        let tree = &plan.source_tree;
        let mut h = PpmHost::new(&plan, &ss, &st);
        h.p2m(tree);
        let leaves_only = h.multipoles.clone();
        h.m2m(tree);
        // reference: the operators, sequentially
        let len = h.len();
        let mut m = leaves_only;
        for l in (0..tree.levels.len() - 1).rev() {
            for pc in tree.levels[l].clone() {
                let parent = &tree.cells[pc];
                for c in parent.children.clone() {
                    let child = &tree.cells[c];
                    let (a, b) = m.split_at_mut(c * len);
                    h.ops.m2m(
                        child.center,
                        child.half_width,
                        parent.center,
                        parent.half_width,
                        &b[..len],
                        &mut a[pc * len..(pc + 1) * len],
                    );
                }
            }
        }
        let scale = m.iter().fold(0.0f64, |a, x| a.max(x.abs()));
        let diff = m
            .iter()
            .zip(&h.multipoles)
            .fold(0.0f64, |a, (x, y)| a.max((x - y).abs()));
        assert!(diff <= 1e-12 * scale, "M2M {diff} {scale}");
        // L2L: random locals on every cell, propagated down both ways
        let tt = &plan.target_tree;
        let init: Vec<f64> = (0..h.locals.len())
            .map(|i| ((i * 7919 % 1000) as f64 / 500.0) - 1.0)
            .collect();
        h.locals = init.clone();
        h.l2l(tt);
        let mut r = init;
        for l in 1..tt.levels.len() {
            for c in tt.levels[l].clone() {
                let child = &tt.cells[c];
                let pc = child.parent.unwrap();
                let parent = &tt.cells[pc];
                let (a, b) = r.split_at_mut(c * len);
                h.ops.l2l(
                    parent.center,
                    parent.half_width,
                    child.center,
                    child.half_width,
                    &a[pc * len..(pc + 1) * len],
                    &mut b[..len],
                );
            }
        }
        let scale = r.iter().fold(0.0f64, |a, x| a.max(x.abs()));
        let diff = r
            .iter()
            .zip(&h.locals)
            .fold(0.0f64, |a, (x, y)| a.max((x - y).abs()));
        assert!(diff <= 1e-10 * scale, "L2L {diff} {scale}");
    }
}
