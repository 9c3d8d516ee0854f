//! M2L on the uniform grid as dense per-offset matrices (kernel `u_m2l_dense` of
//! `kernels/uniform.cu`), and its host emulation in f64.
//!
//! Below the top level every cell of a uniform grid has the same M2L offsets up to its parity
//! (the classical lists of [`super::stencil`]): a target `t` of a level with `nl` (even) cells
//! per side takes the sources `t - v` with `v_d` in `-3 + pi_d ..= 2 + pi_d` (`pi = t mod 2`
//! per axis) and `|v|_inf >= 2`, 189 offsets per parity class. The translation of one offset is
//! a fixed real-linear map of the multipole coefficients (the plain M2L, core paper Eq. 27;
//! `Lhat_k^l = (-1)^k sum_{n,m} Mhat_n^m I_{n+k}^{m+l}(v)`, `vortex_fmm::operators`'
//! `m2l_direct`), so the M2L of a level is, per offset, one matrix applied to every cell of a
//! class: batched dense matrix products (Cruz, Layton & Barba 2011: M2L as many small dense
//! mat-vecs), `O(p^4)` flops per translation against the rotations' `O(p^3)`, but at the
//! arithmetic rate of a matrix product.
//!
//! The products run on the FP32 pipes (`u_m2l_dense`: f32 matrices and sums) or on the FP64
//! tensor cores (`u_m2l_tensor`: f64 matrices, `mma.sync.m8n8k4.f64`, f64 sums; the same
//! targets, offsets, gathers and scalings), both emulated by [`emulate_level`].
//!
//! Real degrees of freedom of one scalar expansion (the field is real, so `c(n, -m) = (-1)^m
//! conj(c(n, m))` and `Im c(n, 0) = 0`): `D = (p + 1)^2` in the *compact order* — per degree
//! `n`, `Re c(n, 0)`, then `Re c(n, m)`, `Im c(n, m)` for `m = 1..=n` — so the slots of degree
//! `n` are `n^2 .. (n + 1)^2`. Padded to [`padded_dofs`] (a multiple of 64) with zero rows and
//! columns. The matrices are built for unit cell width: since `I_n(w v) = w^{-(n+1)} I_n(v)`,
//! at width `w` the input slot of degree `n` is scaled by `w^{-n}` and the output slot of
//! degree `k` by `w^{-(k+1)}`.

use super::grid::coords;
use super::stencil::RotationTable;
use rayon::prelude::*;
use vortex_fmm::expansions::harmonics::{expand_full, full_index, irregular, knm};
use vortex_fmm::expansions::{index, ncoef, Complex64};

/// Largest offset component of the stencil below the top (rotation-table radius of the
/// matrix index).
pub const DENSE_R: usize = 3;
/// Targets of one parity class per block of `u_m2l_dense`.
pub const DENSE_TARGETS: usize = 32;
/// Threads per block of `u_m2l_dense`.
pub const DENSE_THREADS: usize = 192;
/// Threads per block of `u_m2l_tensor` (8 warps).
pub const TENSOR_THREADS: usize = 256;
/// Blocks of `u_m2l_tensor` a launch should have at least: two per multiprocessor of an H100
/// or H200 (132; one block of 256 threads and about 230 registers each fits an SM).
pub const TENSOR_FILL: usize = 264;
/// Most offset groups of one `u_m2l_tensor` launch.
pub const TENSOR_MAX_GROUPS: usize = 16;

/// Offset groups of a `u_m2l_tensor` launch of `blocks` blocks (tiles x classes): enough to
/// reach [`TENSOR_FILL`] blocks, at most [`TENSOR_MAX_GROUPS`].
pub fn tensor_groups(blocks: usize) -> usize {
    TENSOR_FILL
        .div_ceil(blocks.max(1))
        .clamp(1, TENSOR_MAX_GROUPS)
}
/// Parity classes (blocks along y of `u_m2l_dense`).
pub const CLASSES: usize = 8;

/// Real degrees of freedom of one scalar expansion of order `p`: `(p + 1)^2`.
pub const fn dofs(p: usize) -> usize {
    (p + 1) * (p + 1)
}

/// [`dofs`] rounded up to a multiple of 64 (the kernel's `DP`).
pub const fn padded_dofs(p: usize) -> usize {
    dofs(p).div_ceil(64) * 64
}

/// The compact slot `j` -> its float index in the `2 ncoef(p)` floats of one component
/// (`(re, im)` pairs, layout of `vortex_fmm::expansions`), `-1` for the padding; and the degree
/// of each slot (0 for the padding).
pub fn compact_map(p: usize) -> (Vec<i32>, Vec<usize>) {
    let dp = padded_dofs(p);
    let (mut map, mut deg) = (vec![-1i32; dp], vec![0usize; dp]);
    let mut j = 0;
    for n in 0..=p {
        for m in 0..=n {
            let parts = if m == 0 { 1 } else { 2 };
            for part in 0..parts {
                map[j] = (2 * index(n, m) + part) as i32;
                deg[j] = n;
                j += 1;
            }
        }
    }
    debug_assert_eq!(j, dofs(p));
    (map, deg)
}

/// The offsets of parity class `cls` (`pi = (cls & 1, (cls >> 1) & 1, cls >> 2)`) in the
/// kernel's loop order (z outermost, x innermost).
pub fn class_offsets(cls: usize) -> Vec<[i64; 3]> {
    let pi = [cls & 1, (cls >> 1) & 1, cls >> 2].map(|x| x as i64);
    let mut out = Vec::with_capacity(189);
    for vz in -3 + pi[2]..=2 + pi[2] {
        for vy in -3 + pi[1]..=2 + pi[1] {
            for vx in -3 + pi[0]..=2 + pi[0] {
                if vx.abs() > 1 || vy.abs() > 1 || vz.abs() > 1 {
                    out.push([vx, vy, vz]);
                }
            }
        }
    }
    out
}

/// The matrix of offset `v` (unit cell width, target centre minus source centre), transposed:
/// `a[j * dp + r]` is the coefficient of input slot `j` in output slot `r` (compact order,
/// `dp = padded_dofs(p)`), built from the plain M2L formula in f64.
pub fn offset_matrix(p: usize, v: [f64; 3]) -> Vec<f64> {
    let dp = padded_dofs(p);
    let mut ih = vec![Complex64::default(); ncoef(2 * p)];
    irregular(2 * p, v, &mut ih);
    let mut inf = vec![Complex64::default(); (2 * p + 1) * (2 * p + 1)];
    expand_full(2 * p, &ih, &vec![1.0; ncoef(2 * p)], false, &mut inf);
    let mut a = vec![0.0; dp * dp];
    let mut j = 0;
    for n in 0..=p {
        for m in 0..=n {
            let parts = if m == 0 { 1 } else { 2 };
            for part in 0..parts {
                // the unit input: c(n, m) = 1 or i, and c(n, -m) = (-1)^m conj(c(n, m))
                let c = if part == 0 {
                    Complex64::new(1.0, 0.0)
                } else {
                    Complex64::new(0.0, 1.0)
                } / knm(n, m);
                let sign = if m % 2 == 1 { -1.0 } else { 1.0 };
                let mut terms = vec![(m as isize, c)];
                if m > 0 {
                    terms.push((-(m as isize), c.conj() * sign));
                }
                let col = &mut a[j * dp..(j + 1) * dp];
                let mut r = 0;
                for k in 0..=p {
                    for l in 0..=k {
                        let mut s = Complex64::default();
                        for &(mm, x) in &terms {
                            s += x * inf[full_index(n + k, mm + l as isize)];
                        }
                        if k % 2 == 1 {
                            s = -s;
                        }
                        let loc = s.conj() / knm(k, l);
                        col[r] = loc.re;
                        r += 1;
                        if l > 0 {
                            col[r] = loc.im;
                            r += 1;
                        }
                    }
                }
                j += 1;
            }
        }
    }
    a
}

/// The matrices of every offset in `[-3, 3]^3` (zero for the 27 neighbours), indexed by
/// [`RotationTable::index`]`(3, v)`, `dp * dp` each ([`offset_matrix`]).
#[derive(Clone, Debug)]
pub struct DenseM2l {
    pub order: usize,
    pub dp: usize,
    pub mats: Vec<f64>,
}

impl DenseM2l {
    /// Builds the 316 matrices in f64 (`O(p^4)` each, in parallel).
    pub fn new(p: usize) -> Self {
        let dp = padded_dofs(p);
        let d = 2 * DENSE_R + 1;
        let mut mats = vec![0.0; d * d * d * dp * dp];
        mats.par_chunks_mut(dp * dp)
            .enumerate()
            .for_each(|(i, out)| {
                let v = RotationTable::vector(DENSE_R, i);
                if v.iter().any(|x| x.abs() > 1) {
                    out.copy_from_slice(&offset_matrix(p, v.map(|x| x as f64)));
                }
            });
        DenseM2l { order: p, dp, mats }
    }

    /// The matrix of offset `v`.
    pub fn matrix(&self, v: [i64; 3]) -> &[f64] {
        let s = self.dp * self.dp;
        let i = RotationTable::index(DENSE_R, v);
        &self.mats[i * s..(i + 1) * s]
    }

    /// The matrices as the device stores them (f32).
    pub fn to_f32(&self) -> Vec<f32> {
        self.mats.iter().map(|&x| x as f32).collect()
    }
}

/// The part of a level one `u_m2l_dense` launch covers: the targets of the planes
/// `zlo..zhi` (level-local z), as the class sublattice range `q0 .. q0 + qcount` (whole
/// sublattice planes) and its number of blocks per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenseLaunch {
    pub q0: usize,
    pub qcount: usize,
    pub tiles: usize,
}

/// [`DenseLaunch`] of the planes `zlo..zhi` of a level with `nl` (even) cells per side.
pub fn dense_launch(nl: usize, zlo: usize, zhi: usize) -> DenseLaunch {
    assert!(
        nl >= 2 && nl % 2 == 0 && zlo < zhi && zhi <= nl,
        "{nl} {zlo} {zhi}"
    );
    let h = nl / 2;
    let (qz0, qz1) = (zlo / 2, (zhi - 1) / 2 + 1);
    let qcount = (qz1 - qz0) * h * h;
    DenseLaunch {
        q0: qz0 * h * h,
        qcount,
        tiles: qcount.div_ceil(DENSE_TARGETS),
    }
}

/// Host emulation (f64) of one `u_m2l_dense` launch: the M2L of the level's targets with z in
/// `zlo..zhi` over the dense matrices, added to `loc`. `mult` and `loc` hold the level's
/// cells (level-local index) with `3 * 2 * ncoef(p)` floats each (`(re, im)` pairs, the
/// device layout); `w` is the cell width of the level. Same targets, offsets, gathers and
/// scalings as the kernel, in f64.
#[allow(clippy::too_many_arguments)]
pub fn emulate_level(
    t: &DenseM2l,
    nl: usize,
    periodic: bool,
    w: f64,
    zlo: usize,
    zhi: usize,
    mult: &[f64],
    loc: &mut [f64],
) {
    let p = t.order;
    let (dp, nf) = (t.dp, 2 * ncoef(p));
    let (map, deg) = compact_map(p);
    let scale: Vec<f64> = deg.iter().map(|&n| w.powi(-(n as i32))).collect();
    let launch = dense_launch(nl, zlo, zhi);
    let h = nl / 2;
    let mut x = vec![0.0; dp];
    for cls in 0..CLASSES {
        let pi = [cls & 1, (cls >> 1) & 1, cls >> 2];
        let offsets = class_offsets(cls);
        for q in launch.q0..launch.q0 + launch.qcount {
            let qc = coords(h, q);
            let tc: [usize; 3] = std::array::from_fn(|d| 2 * qc[d] + pi[d]);
            if tc[2] < zlo || tc[2] >= zhi {
                continue;
            }
            let c = tc[0] + nl * (tc[1] + nl * tc[2]);
            for comp in 0..3 {
                let mut y = vec![0.0; dp];
                for v in &offsets {
                    let s: [i64; 3] = std::array::from_fn(|d| tc[d] as i64 - v[d]);
                    let src = if periodic {
                        Some(s.map(|x| x.rem_euclid(nl as i64) as usize))
                    } else if s.iter().all(|&x| x >= 0 && x < nl as i64) {
                        Some(s.map(|x| x as usize))
                    } else {
                        None
                    };
                    let Some(sc) = src else { continue };
                    let base = ((sc[0] + nl * (sc[1] + nl * sc[2])) * 3 + comp) * nf;
                    for j in 0..dp {
                        x[j] = if map[j] >= 0 {
                            mult[base + map[j] as usize] * scale[j]
                        } else {
                            0.0
                        };
                    }
                    let a = t.matrix(*v);
                    for (j, &xj) in x.iter().enumerate() {
                        let col = &a[j * dp..(j + 1) * dp];
                        for (yr, &ar) in y.iter_mut().zip(col) {
                            *yr += ar * xj;
                        }
                    }
                }
                let out = (c * 3 + comp) * nf;
                for r in 0..dp {
                    if map[r] >= 0 {
                        loc[out + map[r] as usize] += y[r] * scale[r] / w;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tensor_tests {
    use super::*;

    #[test]
    fn small_levels_split_their_offsets_and_large_ones_do_not() {
        assert_eq!(tensor_groups(8), TENSOR_MAX_GROUPS);
        assert_eq!(tensor_groups(88), 3);
        assert_eq!(tensor_groups(264), 1);
        assert_eq!(tensor_groups(5488), 1);
        // the kernel's rule (offset i of 189 to group i g / 189) gives every group offsets
        for g in 1..=TENSOR_MAX_GROUPS {
            let mut count = vec![0; g];
            (0..189).for_each(|i| count[i * g / 189] += 1);
            assert!(count.iter().all(|&c| c >= 189 / g), "{g}: {count:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uniform::stencil::{m2l_sources, m2l_sources_periodic};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use vortex_fmm::operators::{Operators, Scratch};

    /// Random expansions of a real field (`Im c(n, 0) = 0`), `cells` of 3 components, as
    /// `(re, im)` floats; coefficient of degree `n` scaled by `w^n` like a multipole of a cell
    /// of width `w`.
    fn random_multipoles(p: usize, cells: usize, w: f64, seed: u64) -> Vec<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let nc = ncoef(p);
        let mut out = vec![0.0; cells * 3 * 2 * nc];
        for (i, x) in out.iter_mut().enumerate() {
            let f = i % (2 * nc);
            let (k, part) = (f / 2, f % 2);
            let n = (0..=p).find(|&n| index(n, n) >= k).unwrap();
            let m = k - index(n, 0);
            if !(m == 0 && part == 1) {
                *x = rng.gen_range(-1.0..1.0) * w.powi(n as i32);
            }
        }
        out
    }

    fn to_complex(x: &[f64]) -> Vec<Complex64> {
        x.chunks_exact(2)
            .map(|c| Complex64::new(c[0], c[1]))
            .collect()
    }

    fn rel(got: &[f64], want: &[f64]) -> f64 {
        let d: f64 = got.iter().zip(want).map(|(a, b)| (a - b).powi(2)).sum();
        let n: f64 = want.iter().map(|b| b * b).sum();
        (d / n).sqrt()
    }

    #[test]
    fn compact_order_and_launch_ranges() {
        for p in [1, 4, 10, 14] {
            let (map, deg) = compact_map(p);
            assert_eq!(map.len() % 64, 0);
            let mut seen: Vec<i32> = map.iter().copied().filter(|&f| f >= 0).collect();
            assert_eq!(seen.len(), dofs(p));
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), dofs(p), "p {p}: distinct float indices");
            for n in 0..=p {
                assert!(deg[n * n..(n + 1) * (n + 1)].iter().all(|&d| d == n));
            }
        }
        for cls in 0..CLASSES {
            assert_eq!(class_offsets(cls).len(), 189);
        }
        let l = dense_launch(8, 3, 6);
        assert_eq!((l.q0, l.qcount, l.tiles), (16, 32, 1));
        let l = dense_launch(56, 0, 56);
        assert_eq!((l.q0, l.qcount), (0, 28 * 28 * 28));
    }

    /// The dense matrix of random offsets, applied with the width scalings to random
    /// multipoles, against the f64 rotation-based M2L of `vortex_fmm` (`O(p^3)`, an
    /// independent route), p = 4..14.
    #[test]
    fn dense_matrices_match_the_rotation_m2l() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for p in 4..=14 {
            let ops = Operators::new(p);
            let mut scratch = Scratch::new(p);
            let (map, deg) = compact_map(p);
            let dp = padded_dofs(p);
            let nf = 2 * ncoef(p);
            for trial in 0..3 {
                let cls = rng.gen_range(0..CLASSES);
                let offs = class_offsets(cls);
                let v = offs[rng.gen_range(0..offs.len())];
                let w = rng.gen_range(0.05..2.0);
                let a = offset_matrix(p, v.map(|x| x as f64));
                let mult = random_multipoles(p, 1, w, 100 * p as u64 + trial);
                let mut got = vec![0.0; 3 * nf];
                for comp in 0..3 {
                    let x: Vec<f64> = (0..dp)
                        .map(|j| match map[j] {
                            f if f >= 0 => mult[comp * nf + f as usize] * w.powi(-(deg[j] as i32)),
                            _ => 0.0,
                        })
                        .collect();
                    for r in 0..dp {
                        if map[r] < 0 {
                            assert!((0..dp).all(|j| a[j * dp + r] == 0.0));
                            continue;
                        }
                        let y: f64 = (0..dp).map(|j| a[j * dp + r] * x[j]).sum();
                        got[comp * nf + map[r] as usize] = y * w.powi(-(deg[r] as i32 + 1));
                    }
                }
                let src = [0.3, -1.1, 0.7];
                let tgt: [f64; 3] = std::array::from_fn(|d| src[d] + v[d] as f64 * w);
                let mut want = vec![Complex64::default(); 3 * ncoef(p)];
                ops.m2l(src, tgt, &to_complex(&mult), &mut want, &mut scratch);
                let want: Vec<f64> = want.iter().flat_map(|c| [c.re, c.im]).collect();
                let e = rel(&got, &want);
                assert!(e < 1e-11, "p {p} v {v:?} w {w}: {e:.2e}");
            }
        }
    }

    /// The emulated launch over a whole level (and over a z slab of it), free space and
    /// periodic, against the classical lists of `stencil` with the f64 rotation M2L.
    #[test]
    fn emulated_level_matches_the_lists() {
        for (p, nl, periodic, zr) in [
            (4, 4, false, (0, 4)),
            (10, 6, false, (1, 4)),
            (7, 4, true, (0, 4)),
            (5, 2, true, (0, 2)),
        ] {
            let ops = Operators::new(p);
            let mut scratch = Scratch::new(p);
            let t = DenseM2l::new(p);
            let w = 0.37;
            let cells = nl * nl * nl;
            let nf = 2 * ncoef(p);
            let mult = random_multipoles(p, cells, w, 7 + p as u64);
            let mut got = vec![0.0; cells * 3 * nf];
            emulate_level(&t, nl, periodic, w, zr.0, zr.1, &mult, &mut got);
            let mut want = vec![Complex64::default(); cells * 3 * ncoef(p)];
            let centre = |c: [i64; 3]| c.map(|x| (x as f64 + 0.5) * w);
            for c in 0..cells {
                let tc = coords(nl, c);
                if tc[2] < zr.0 || tc[2] >= zr.1 {
                    continue;
                }
                let srcs: Vec<([usize; 3], [i64; 3])> = if periodic {
                    m2l_sources_periodic(nl, false, 1, tc)
                        .into_iter()
                        .map(|(s, _, v)| (s, v))
                        .collect()
                } else {
                    m2l_sources(nl, false, tc)
                        .into_iter()
                        .map(|s| (s, std::array::from_fn(|d| tc[d] as i64 - s[d] as i64)))
                        .collect()
                };
                let tcen = centre(tc.map(|x| x as i64));
                let out = &mut want[c * 3 * ncoef(p)..(c + 1) * 3 * ncoef(p)];
                for (s, v) in srcs {
                    let sl = s[0] + nl * (s[1] + nl * s[2]);
                    let m = to_complex(&mult[sl * 3 * nf..(sl + 1) * 3 * nf]);
                    let scen: [f64; 3] = std::array::from_fn(|d| tcen[d] - v[d] as f64 * w);
                    ops.m2l(scen, tcen, &m, out, &mut scratch);
                }
            }
            let want: Vec<f64> = want.iter().flat_map(|c| [c.re, c.im]).collect();
            let e = rel(&got, &want);
            assert!(e < 1e-11, "p {p} nl {nl} periodic {periodic}: {e:.2e}");
        }
    }
}
