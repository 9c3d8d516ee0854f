//! The far-field operators of one cell's expansion on the CPU, stored as `f64`: [`FmmOps`] (the
//! rotation-based FMM operators of [`crate::operators`], with the rotations of the M2L directions
//! and of the 8 diagonals cached) and the pseudo-particle operators of [`crate::ppm`], both behind
//! [`FarOps`].

use super::*;

/// The FMM operators with the rotations of the M2L directions met so far.
pub(super) struct FmmOps {
    pub(super) ops: Operators,
    /// Rotation of each M2L direction key ([`FmmOps::key`]), built when first needed.
    pub(super) rotations: RotationCache,
    /// Rotations of the 8 diagonals `(+-1, +-1, +-1)` (bit `k` set: component `k` positive):
    /// M2M and L2L always translate along one of them.
    pub(super) diagonals: Vec<Rotation>,
}

impl FmmOps {
    pub(super) fn new(order: usize) -> Self {
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
    pub(super) fn diagonal(&self, v: [f64; 3]) -> Option<(&Rotation, f64)> {
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
pub(super) const M2L_BLOCK: usize = 64;

/// Views interleaved `(re, im)` pairs as complex coefficients.
pub(super) fn as_complex(v: &[f64]) -> &[Complex64] {
    assert!(v.len() % 2 == 0);
    // SAFETY: `Complex<f64>` is `#[repr(C)] { re: f64, im: f64 }`: same alignment as f64 and
    // size of two, so an even-length f64 slice is a valid slice of half as many complexes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<Complex64>(), v.len() / 2) }
}

pub(super) fn as_complex_mut(v: &mut [f64]) -> &mut [Complex64] {
    assert!(v.len() % 2 == 0);
    // SAFETY: as in `as_complex`; the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<Complex64>(), v.len() / 2) }
}

impl FmmOps {
    /// Cell centres sit on the grid of half-widths, so the vector between a target and a source
    /// centre is an integer multiple of the smaller half-width; reduced by the gcd of its
    /// components it names the direction exactly.
    pub(super) fn key(plan: &Plan, t: usize, s: SourceRef) -> ([i64; 3], f64) {
        let tc = &plan.target_tree.cells[t];
        let sc = plan.source_center(s.cell as usize, s.image);
        let h = tc
            .half_width
            .min(plan.source_tree.cells[s.cell as usize].half_width);
        let v: [f64; 3] = std::array::from_fn(|k| tc.center[k] - sc[k]);
        let dist = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        let key = super::super::direction_key(v, h);
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
pub(super) struct RotationCache {
    pub(super) map: RwLock<FxHashMap<[i64; 3], Arc<Rotation>>>,
}

impl RotationCache {
    /// The rotation of direction key `key` (built with `ops` if absent).
    pub(super) fn get(&self, ops: &Operators, key: [i64; 3]) -> Arc<Rotation> {
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
