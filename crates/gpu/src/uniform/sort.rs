//! Host emulation of the device counting sort of `kernels/uniform.cu` (and of the task
//! builder that follows it): every function here computes what one kernel computes, in the
//! same f32 / integer arithmetic, so the device algorithm is tested on the host.
//!
//! 1. `u_cell_index`: leaf cell of every particle from its f32 position,
//!    `floor((x - lo) / w)` clamped to the grid, and its arrival slot in the cell
//!    (`atomicAdd` on the cell's count: any order);
//! 2. `u_scan_*`: exclusive scan of the counts (blocks of [`SCAN_BLOCK`], then the block sums);
//! 3. `u_scatter`: `perm[start[cell] + slot] = i`;
//! 4. `u_sort_cells`: inside each cell, the indices ordered by rank (number of smaller indices
//!    in the cell), so the result does not depend on the atomics' order;
//! 5. `u_gather`: sorted particle buffers `sorted[k] = input[perm[k]]`;
//! 6. `u_leaf_tasks`: P2M, P2P and L2P tasks of every leaf (slices of `slice` targets) and
//!    its 9 source runs (the 27 neighbours, three contiguous cells per row).

/// Elements per scan block (`SCAN_BLOCK` of `kernels/uniform.cu`).
pub const SCAN_BLOCK: usize = 1024;
/// The free-space image index of the near-field kernel (`vortex_fmm::lists::NO_SHIFT`).
pub const FREE_IMAGE: i32 = vortex_fmm::lists::NO_SHIFT as i32;

/// `u_cell_index` for one f32 position: leaf cell `(i, j, k)` in a grid of `n` per side.
pub fn cell_of(p: [f32; 3], lo: [f32; 3], inv_w: f32, n: usize) -> [usize; 3] {
    std::array::from_fn(|d| {
        let v = ((p[d] - lo[d]) * inv_w).floor();
        (v.max(0.0) as usize).min(n - 1)
    })
}

/// `u_cell_index` for all particles (flattened `float4` positions): cell index and the
/// arrival slot given by `arrival` (the order in which the atomics happen to run), counts.
pub fn cell_index(
    pos4: &[f32],
    lo: [f32; 3],
    inv_w: f32,
    n: usize,
    arrival: &[usize],
) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let np = pos4.len() / 4;
    let mut cell = vec![0i32; np];
    let mut slot = vec![0i32; np];
    let mut counts = vec![0i32; n * n * n];
    for &i in arrival {
        let p = [pos4[4 * i], pos4[4 * i + 1], pos4[4 * i + 2]];
        let c = cell_of(p, lo, inv_w, n);
        let ci = c[0] + n * (c[1] + n * c[2]);
        cell[i] = ci as i32;
        slot[i] = counts[ci];
        counts[ci] += 1;
    }
    (cell, slot, counts)
}

/// `u_scan_blocks` + `u_scan_sums` + `u_scan_add`: exclusive scan, `len + 1` entries (the
/// last is the total).
pub fn exclusive_scan(input: &[i32]) -> Vec<i32> {
    let len = input.len();
    let nb = len.div_ceil(SCAN_BLOCK).max(1);
    let mut out = vec![0i32; len + 1];
    let mut sums = vec![0i32; nb];
    // per block
    for (b, s) in sums.iter_mut().enumerate() {
        let mut run = 0;
        for i in b * SCAN_BLOCK..((b + 1) * SCAN_BLOCK).min(len) {
            out[i] = run;
            run += input[i];
        }
        *s = run;
    }
    // block sums (one block, in place), total at out[len]
    let mut run = 0;
    for s in sums.iter_mut() {
        let v = *s;
        *s = run;
        run += v;
    }
    out[len] = run;
    for (i, o) in out.iter_mut().enumerate().take(len) {
        *o += sums[i / SCAN_BLOCK];
    }
    out
}

/// `u_scatter`: `perm[start[cell[i]] + slot[i]] = i`.
pub fn scatter(cell: &[i32], slot: &[i32], starts: &[i32]) -> Vec<i32> {
    let mut perm = vec![-1i32; cell.len()];
    for i in 0..cell.len() {
        perm[(starts[cell[i] as usize] + slot[i]) as usize] = i as i32;
    }
    perm
}

/// `u_sort_cells`: element `x` of a cell goes to `start + #{y in cell : y < x}`.
pub fn sort_cells(starts: &[i32], perm: &[i32]) -> Vec<i32> {
    let mut out = vec![-1i32; perm.len()];
    for c in 0..starts.len() - 1 {
        let (s, e) = (starts[c] as usize, starts[c + 1] as usize);
        for t in s..e {
            let x = perm[t];
            let r = perm[s..e].iter().filter(|&&y| y < x).count();
            out[s + r] = x;
        }
    }
    out
}

/// `u_gather` on `float4` rows.
pub fn gather4(perm: &[i32], input: &[f32]) -> Vec<f32> {
    perm.iter()
        .flat_map(|&i| input[4 * i as usize..4 * i as usize + 4].iter().copied())
        .collect()
}

/// Work of the leaves in the kernels' layouts (`u_leaf_tasks`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeafTasks {
    /// Per leaf: `(first particle, count, global cell, 0)` (P2M, `kernels/fmm.cu`).
    pub p2m: Vec<[i32; 4]>,
    /// Per slice: `(first target, count <= slice, first run, end run)` (`p2p_near`).
    pub near: Vec<[i32; 4]>,
    /// Per slice: sources of its runs.
    pub near_nsrc: Vec<i32>,
    /// Per slice: `(first target, count, global cell, 0)` (L2P).
    pub l2p: Vec<[i32; 4]>,
    /// Per leaf 9 runs `(first source, count, image, 0)`: rows `(y, z)` of the neighbours.
    pub runs: Vec<[i32; 4]>,
    /// Pair interactions of the near field.
    pub pairs: u64,
}

/// Slices of each leaf: `ceil(count / slice)` (`u_slices`).
pub fn slices(starts: &[i32], slice: usize) -> Vec<i32> {
    starts
        .windows(2)
        .map(|w| ((w[1] - w[0]) as usize).div_ceil(slice) as i32)
        .collect()
}

/// `u_leaf_tasks` over the whole grid: from the leaf starts (`n^3 + 1`) and the scanned
/// slice counts.
pub fn leaf_tasks(
    starts: &[i32],
    slice_starts: &[i32],
    n: usize,
    leaf_base: usize,
    slice: usize,
) -> LeafTasks {
    leaf_tasks_range(
        starts,
        starts,
        slice_starts,
        n,
        leaf_base,
        slice,
        0,
        n * n * n,
    )
}

#[allow(clippy::needless_range_loop)] // u indexes tasks, runs and slice starts alike
/// `u_leaf_tasks` for the leaves `c0..c0 + ncells` (a rank's slab): `starts` (targets) and
/// `src_starts` (runs: the same array, or a rank's separately sorted halo) span the whole
/// grid (`n^3 + 1`), `slice_starts` the range (`ncells + 1`); tasks and runs are indexed from
/// the first leaf of the range.
#[allow(clippy::too_many_arguments)] // the kernel's arguments
pub fn leaf_tasks_range(
    starts: &[i32],
    src_starts: &[i32],
    slice_starts: &[i32],
    n: usize,
    leaf_base: usize,
    slice: usize,
    c0: usize,
    ncells: usize,
) -> LeafTasks {
    let nt = slice_starts[ncells] as usize;
    let mut t = LeafTasks {
        p2m: vec![[0; 4]; ncells],
        near: vec![[0; 4]; nt],
        near_nsrc: vec![0; nt],
        l2p: vec![[0; 4]; nt],
        runs: vec![[0; 4]; 9 * ncells],
        pairs: 0,
    };
    for u in 0..ncells {
        let c = c0 + u;
        let (i, j, k) = (c % n, (c / n) % n, c / (n * n));
        let first = starts[c];
        let cnt = starts[c + 1] - first;
        let g = (leaf_base + c) as i32;
        t.p2m[u] = [first, cnt, g, 0];
        let (i0, i1) = (i.saturating_sub(1), (i + 1).min(n - 1));
        let mut nsrc = 0;
        let mut r = 0;
        for dz in -1i64..=1 {
            for dy in -1i64..=1 {
                let (jj, kk) = (j as i64 + dy, k as i64 + dz);
                let run = if jj >= 0 && kk >= 0 && (jj as usize) < n && (kk as usize) < n {
                    let row = n * (jj as usize + n * kk as usize);
                    let a = src_starts[i0 + row];
                    let b = src_starts[i1 + row + 1];
                    nsrc += b - a;
                    [a, b - a, FREE_IMAGE, 0]
                } else {
                    [0, 0, FREE_IMAGE, 0]
                };
                t.runs[9 * u + r] = run;
                r += 1;
            }
        }
        let t0 = slice_starts[u] as usize;
        let ns = (cnt as usize).div_ceil(slice);
        for q in 0..ns {
            let f = first + (q * slice) as i32;
            let cn = (cnt - (q * slice) as i32).min(slice as i32);
            t.near[t0 + q] = [f, cn, (9 * u) as i32, (9 * u + 9) as i32];
            t.near_nsrc[t0 + q] = nsrc;
            t.l2p[t0 + q] = [f, cn, g, 0];
        }
        t.pairs += cnt as u64 * nsrc as u64;
    }
    t
}

/// The whole device sort on the host: `(perm, starts)` with `perm[k]` the input index of
/// sorted particle `k` and `starts` the `n^3 + 1` leaf offsets, for an arbitrary order of the
/// atomics (`arrival`).
pub fn sort_emulated(
    pos4: &[f32],
    lo: [f32; 3],
    inv_w: f32,
    n: usize,
    arrival: &[usize],
) -> (Vec<i32>, Vec<i32>) {
    let (cell, slot, counts) = cell_index(pos4, lo, inv_w, n, arrival);
    let starts = exclusive_scan(&counts);
    let perm = scatter(&cell, &slot, &starts);
    (sort_cells(&starts, &perm), starts)
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // index loops over coordinates
mod tests {
    use super::*;
    use crate::layout::pack_sources;
    use crate::uniform::grid::{Extent, UniformGrid};
    use crate::uniform::stencil::neighbours;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn scan_matches_prefix_sums() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for len in [0, 1, 5, 1023, 1024, 1025, 5000, 70_000] {
            let v: Vec<i32> = (0..len).map(|_| rng.gen_range(0..7)).collect();
            let got = exclusive_scan(&v);
            let mut run = 0;
            for i in 0..len {
                assert_eq!(got[i], run);
                run += v[i];
            }
            assert_eq!(got[len], run);
        }
    }

    /// Clustered points (many empty cells) and uniform points; several grids; the atomics'
    /// order shuffled: the emulated device sort equals a stable sort by (cell, index).
    #[test]
    fn device_sort_equals_a_stable_sort_whatever_the_atomics_order() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for (np, clustered, m, k) in [
            (3000, false, 1, 0),
            (3000, false, 2, 2),
            (5000, true, 3, 2),
            (4000, true, 1, 3),
            (20, false, 3, 1),
        ] {
            let mut s = vortex_fmm::testsets::standard(np, 11);
            if clustered {
                for x in s.position.iter_mut() {
                    x.iter_mut().for_each(|v| *v = 0.1 * *v + 1.0);
                }
                s.position[0] = [-3.0, -3.0, -3.0];
            }
            let e = Extent::of(&s.position, &s.sigma).unwrap();
            let g = UniformGrid::fixed(&e, m, k);
            let (lo, inv_w) = g.f32_params();
            let (pos4, str4) = pack_sources(&s);
            let n = g.n();
            let mut arrival: Vec<usize> = (0..np).collect();
            arrival.shuffle(&mut rng);
            let (perm, starts) = sort_emulated(&pos4, lo, inv_w, n, &arrival);
            // reference: stable sort of the indices by cell
            let cells: Vec<usize> = (0..np)
                .map(|i| {
                    let c = cell_of(
                        [pos4[4 * i], pos4[4 * i + 1], pos4[4 * i + 2]],
                        lo,
                        inv_w,
                        n,
                    );
                    c[0] + n * (c[1] + n * c[2])
                })
                .collect();
            let mut want: Vec<i32> = (0..np as i32).collect();
            want.sort_by_key(|&i| cells[i as usize]);
            assert_eq!(perm, want);
            for c in 0..n * n * n {
                for kk in starts[c]..starts[c + 1] {
                    assert_eq!(cells[perm[kk as usize] as usize], c);
                }
            }
            if clustered {
                assert!(starts.windows(2).filter(|w| w[0] == w[1]).count() > 0);
            }
            // the cell is the geometric one (f64) up to f32 rounding at the faces
            let w = g.leaf_width();
            for i in 0..np {
                let c = cells[i];
                let cc = [c % n, (c / n) % n, c / (n * n)];
                for d in 0..3 {
                    let rel = (s.position[i][d] - g.lo[d]) / w - cc[d] as f64;
                    assert!((-1e-4..1.0 + 1e-4).contains(&rel), "{rel}");
                }
            }
            let sp = gather4(&perm, &pos4);
            let sa = gather4(&perm, &str4);
            assert_eq!(
                &sp[4..8],
                &pos4[4 * perm[1] as usize..4 * perm[1] as usize + 4]
            );
            assert_eq!(sa.len(), str4.len());
        }
    }

    /// The slices and runs of the task builder cover exactly the (target, source) pairs of
    /// the 27-neighbour near field.
    #[test]
    fn leaf_tasks_cover_the_near_field() {
        for (np, m, k, slice) in [(2000, 2, 1, 32), (3000, 3, 1, 8), (500, 1, 2, 32)] {
            let s = vortex_fmm::testsets::standard(np, 3);
            let e = Extent::of(&s.position, &s.sigma).unwrap();
            let g = UniformGrid::fixed(&e, m, k);
            let (lo, inv_w) = g.f32_params();
            let (pos4, _) = pack_sources(&s);
            let n = g.n();
            let arrival: Vec<usize> = (0..np).collect();
            let (_, starts) = sort_emulated(&pos4, lo, inv_w, n, &arrival);
            let sl = exclusive_scan(&slices(&starts, slice));
            let base = g.level_offset(g.k);
            let t = leaf_tasks(&starts, &sl, n, base, slice);
            let mut got = Vec::new();
            let mut pairs = 0u64;
            for (q, task) in t.near.iter().enumerate() {
                assert!(task[1] > 0 && task[1] as usize <= slice);
                let mut src = Vec::new();
                for r in &t.runs[task[2] as usize..task[3] as usize] {
                    src.extend(r[0]..r[0] + r[1]);
                }
                assert_eq!(src.len(), t.near_nsrc[q] as usize);
                pairs += task[1] as u64 * src.len() as u64;
                for i in task[0]..task[0] + task[1] {
                    got.extend(src.iter().map(|&j| (i, j)));
                }
                assert_eq!(t.l2p[q][..2], task[..2]);
                // the l2p cell is the leaf holding the slice
                let leaf = t.l2p[q][2] as usize - base;
                assert!(starts[leaf] <= task[0] && task[0] + task[1] <= starts[leaf + 1]);
            }
            assert_eq!(pairs, t.pairs);
            let mut want = Vec::new();
            for c in 0..n * n * n {
                let cc = [c % n, (c / n) % n, c / (n * n)];
                for nb in neighbours(n, cc) {
                    let b = nb[0] + n * (nb[1] + n * nb[2]);
                    for i in starts[c]..starts[c + 1] {
                        want.extend((starts[b]..starts[b + 1]).map(|j| (i, j)));
                    }
                }
            }
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want);
            for (c, p) in t.p2m.iter().enumerate() {
                assert_eq!(
                    *p,
                    [starts[c], starts[c + 1] - starts[c], (base + c) as i32, 0]
                );
            }
        }
    }

    /// A rank's split: the own planes sorted alone, the halo planes sorted apart; the tasks
    /// of the own leaves with runs over the own particles plus those with runs over the halo
    /// (`src_starts`) cover exactly the 27-neighbour pairs of the own targets.
    #[test]
    fn own_and_halo_tasks_cover_the_near_field_of_a_slab() {
        let s = vortex_fmm::testsets::standard(3000, 4);
        let e = Extent::of(&s.position, &s.sigma).unwrap();
        let g = UniformGrid::fixed(&e, 2, 2);
        let (lo, inv_w) = g.f32_params();
        let (pos4, _) = pack_sources(&s);
        let n = g.n();
        let plane = |i: usize| {
            cell_of(
                [pos4[4 * i], pos4[4 * i + 1], pos4[4 * i + 2]],
                lo,
                inv_w,
                n,
            )[2]
        };
        let (z0, z1) = (3, 5);
        let own: Vec<usize> = (0..s.len())
            .filter(|&i| (z0..z1).contains(&plane(i)))
            .collect();
        let halo: Vec<usize> = (0..s.len())
            .filter(|&i| !(z0..z1).contains(&plane(i)) && plane(i) + 3 >= z0 && plane(i) < z1 + 3)
            .collect();
        let sub = |idx: &[usize]| -> (Vec<i32>, Vec<i32>) {
            let p: Vec<f32> = idx
                .iter()
                .flat_map(|&i| pos4[4 * i..4 * i + 4].to_vec())
                .collect();
            let arrival: Vec<usize> = (0..idx.len()).collect();
            sort_emulated(&p, lo, inv_w, n, &arrival)
        };
        let (operm, ostarts) = sub(&own);
        let (hperm, hstarts) = sub(&halo);
        let (c0, nc) = (z0 * n * n, (z1 - z0) * n * n);
        let sl = exclusive_scan(&slices(&ostarts[c0..c0 + nc + 1], 32));
        let base = g.level_offset(g.k);
        let mut got = Vec::new();
        for (src, perm, idx) in [(&ostarts, &operm, &own), (&hstarts, &hperm, &halo)] {
            let t = leaf_tasks_range(&ostarts, src, &sl, n, base, 32, c0, nc);
            for (q, task) in t.near.iter().enumerate() {
                let mut cnt = 0;
                for r in &t.runs[task[2] as usize..task[3] as usize] {
                    for j in r[0]..r[0] + r[1] {
                        cnt += 1;
                        for i in task[0]..task[0] + task[1] {
                            got.push((
                                own[operm[i as usize] as usize],
                                idx[perm[j as usize] as usize],
                            ));
                        }
                    }
                }
                assert_eq!(cnt, t.near_nsrc[q]);
            }
        }
        let mut want = Vec::new();
        for &i in &own {
            let ci = cell_of(
                [pos4[4 * i], pos4[4 * i + 1], pos4[4 * i + 2]],
                lo,
                inv_w,
                n,
            );
            for j in 0..s.len() {
                let cj = cell_of(
                    [pos4[4 * j], pos4[4 * j + 1], pos4[4 * j + 2]],
                    lo,
                    inv_w,
                    n,
                );
                if (0..3).all(|d| ci[d].abs_diff(cj[d]) <= 1) {
                    want.push((i, j));
                }
            }
        }
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
    }
}
