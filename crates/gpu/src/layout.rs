//! Host-side packing of particles and interaction lists into the buffers the kernels read
//! (pure CPU logic, unit-tested without a GPU).
//!
//! * Particles: `float4` per element, sorted order. Targets `(x, y, z, 0)` and `(ax, ay, az, 0)`;
//!   sources `(x, y, z, 1/sigma)` and `(ax, ay, az, 0)`.
//! * Near field ([`NearLayout`]): one task per thread block, i.e. a slice of at most `block`
//!   targets of one target leaf; the leaf's near source cells, sorted by (image, first particle),
//!   merged into maximal contiguous runs of the sorted source array (so the kernel streams full
//!   shared-memory tiles across cell boundaries); all tasks of one leaf share its runs.

use rayon::prelude::*;
use vortex_fmm::lists::{CsrList, NO_SHIFT};
use vortex_fmm::tree::Tree;
use vortex_fmm::{Sources, Targets};

/// Sources as two `float4` arrays, flattened: `(pos + 1/sigma, strength + 0)`.
pub fn pack_sources(s: &Sources) -> (Vec<f32>, Vec<f32>) {
    let mut p = vec![0.0f32; 4 * s.len()];
    let mut a = vec![0.0f32; 4 * s.len()];
    pack_sources_into(s, &mut p, &mut a);
    (p, a)
}

/// [`pack_sources`] into given buffers of at least `4 N` floats each (e.g. page-locked ones),
/// in parallel over blocks of 4096 particles.
pub fn pack_sources_into(s: &Sources, p: &mut [f32], a: &mut [f32]) {
    let np = s.len();
    const BLOCK: usize = 4096;
    p[..4 * np]
        .par_chunks_mut(4 * BLOCK)
        .zip(a[..4 * np].par_chunks_mut(4 * BLOCK))
        .enumerate()
        .for_each(|(b, (p, a))| {
            let i0 = b * BLOCK;
            for (k, (p, a)) in p.chunks_exact_mut(4).zip(a.chunks_exact_mut(4)).enumerate() {
                let i = i0 + k;
                let x = s.position[i];
                p.copy_from_slice(&[
                    x[0] as f32,
                    x[1] as f32,
                    x[2] as f32,
                    (1.0 / s.sigma[i]) as f32,
                ]);
                let w = s.strength[i];
                a.copy_from_slice(&[w[0] as f32, w[1] as f32, w[2] as f32, 0.0]);
            }
        });
}

/// Targets as two `float4` arrays, flattened: `(pos + 0, strength + 0)`.
pub fn pack_targets(t: &Targets) -> (Vec<f32>, Vec<f32>) {
    let mut p = vec![0.0f32; 4 * t.len()];
    let mut a = vec![0.0f32; 4 * t.len()];
    p.par_chunks_mut(4)
        .zip(a.par_chunks_mut(4))
        .enumerate()
        .for_each(|(i, (p, a))| {
            let x = t.position[i];
            p.copy_from_slice(&[x[0] as f32, x[1] as f32, x[2] as f32, 0.0]);
            let w = t.strength[i];
            a.copy_from_slice(&[w[0] as f32, w[1] as f32, w[2] as f32, 0.0]);
        });
    (p, a)
}

/// Near-field work of one evaluation, in the kernel's layout.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NearLayout {
    /// Per task: `(first target, target count, first run, end run)`.
    pub tasks: Vec<[i32; 4]>,
    /// Per task: number of sources of its runs.
    pub task_nsrc: Vec<i32>,
    /// Per run: `(first source, source count, periodic image, 0)`.
    pub runs: Vec<[i32; 4]>,
    /// Pair interactions the tasks compute (target count x source count, summed).
    pub pairs: u64,
}

impl NearLayout {
    /// Packs the near lists of `target_tree` against `source_tree` for blocks of `block` threads.
    pub fn build(target_tree: &Tree, source_tree: &Tree, near: &CsrList, block: usize) -> Self {
        assert!(block > 0);
        let cells: Vec<usize> = (0..target_tree.cells.len())
            .filter(|&t| near.offsets[t + 1] > near.offsets[t])
            .collect();
        // per target leaf, in parallel: merged runs and tasks (run indices relative)
        type LeafWork = (Vec<[i32; 4]>, Vec<[i32; 4]>, i32);
        let per: Vec<LeafWork> = cells
            .par_iter()
            .map(|&t| {
                let mut refs: Vec<(u8, usize, usize)> = near
                    .row(t)
                    .iter()
                    .map(|s| {
                        let r = &source_tree.cells[s.cell as usize].range;
                        (s.image, r.start, r.len())
                    })
                    .filter(|r| r.2 > 0)
                    .collect();
                refs.sort_unstable();
                let mut runs: Vec<[i32; 4]> = Vec::with_capacity(refs.len());
                let mut nsrc = 0usize;
                for &(image, start, len) in &refs {
                    nsrc += len;
                    if let Some(last) = runs.last_mut() {
                        if last[2] == image as i32 && (last[0] + last[1]) as usize == start {
                            last[1] += len as i32;
                            continue;
                        }
                    }
                    runs.push([start as i32, len as i32, image as i32, 0]);
                }
                let tr = target_tree.cells[t].range.clone();
                let mut tasks = Vec::new();
                let mut first = tr.start;
                while first < tr.end {
                    let n = block.min(tr.end - first);
                    tasks.push([first as i32, n as i32, 0, runs.len() as i32]);
                    first += n;
                }
                (runs, tasks, nsrc as i32)
            })
            .collect();
        // concatenation in parallel: offsets by prefix sums, then each leaf writes its slices
        let (nr, nt) = per
            .iter()
            .fold((0, 0), |(a, b), w| (a + w.0.len(), b + w.1.len()));
        let mut out = NearLayout {
            tasks: vec![[0; 4]; nt],
            task_nsrc: vec![0; nt],
            runs: vec![[0; 4]; nr],
            pairs: 0,
        };
        let mut work = Vec::with_capacity(per.len());
        {
            let (mut rr, mut tr, mut nr_) = (
                &mut out.runs[..],
                &mut out.tasks[..],
                &mut out.task_nsrc[..],
            );
            let mut base = 0i32;
            for w in &per {
                let (r, rest) = std::mem::take(&mut rr).split_at_mut(w.0.len());
                rr = rest;
                let (t, rest) = std::mem::take(&mut tr).split_at_mut(w.1.len());
                tr = rest;
                let (n, rest) = std::mem::take(&mut nr_).split_at_mut(w.1.len());
                nr_ = rest;
                work.push((w, base, r, t, n));
                base += w.0.len() as i32;
            }
        }
        out.pairs = work
            .into_par_iter()
            .map(|((runs, tasks, nsrc), base, r, t, n)| {
                r.copy_from_slice(runs);
                let mut pairs = 0u64;
                for ((o, no), tk) in t.iter_mut().zip(n.iter_mut()).zip(tasks) {
                    *o = [tk[0], tk[1], tk[2] + base, tk[3] + base];
                    *no = *nsrc;
                    pairs += tk[1] as u64 * *nsrc as u64;
                }
                pairs
            })
            .sum();
        out
    }

    /// The sources task `k` reads, in order: `(source index, image)`.
    pub fn task_sources(&self, k: usize) -> Vec<(usize, u8)> {
        let t = self.tasks[k];
        let mut v = Vec::new();
        for r in &self.runs[t[2] as usize..t[3] as usize] {
            v.extend((r[0]..r[0] + r[1]).map(|j| (j as usize, r[2] as u8)));
        }
        v
    }
}

/// The image index of a free-space evaluation (re-exported for the kernels' callers).
pub const FREE_SPACE_IMAGE: u8 = NO_SHIFT;

#[cfg(test)]
mod tests {
    use super::*;
    use vortex_fmm::lists::{cell_sigma_max, InteractionLists, ListParams};
    use vortex_fmm::tree::BoundingCube;

    fn setup(n: usize, leaf: usize, period: Option<f64>) -> (Tree, InteractionLists, Sources) {
        let s = vortex_fmm::testsets::standard(n, 5);
        let cube = BoundingCube::around(&[&s.position]);
        let tree = Tree::build(&s.position, cube, leaf);
        let sorted = Sources {
            position: tree.gather(&s.position),
            strength: tree.gather(&s.strength),
            sigma: tree.gather(&s.sigma),
        };
        let lp = ListParams {
            period,
            ..Default::default()
        };
        let lists =
            InteractionLists::build(&tree, &tree, &cell_sigma_max(&tree, &sorted.sigma), &lp);
        (tree, lists, sorted)
    }

    #[test]
    fn particles_pack_as_float4() {
        let s = vortex_fmm::testsets::standard(10, 1);
        let (p, a) = pack_sources(&s);
        assert_eq!(p.len(), 40);
        assert_eq!(a.len(), 40);
        assert_eq!(p[4], s.position[1][0] as f32);
        assert!((p[3] - (1.0 / s.sigma[0]) as f32).abs() < 1e-6);
        assert_eq!(a[7], 0.0);
        let (tp, ta) = pack_targets(&s.as_targets());
        assert_eq!(tp[3], 0.0);
        assert_eq!(ta[5], s.strength[1][1] as f32);
    }

    /// Every (target, source, image) pair of the near lists is visited exactly once by the tasks.
    fn check(n: usize, leaf: usize, block: usize, period: Option<f64>) {
        let (tree, lists, _) = setup(n, leaf, period);
        let lay = NearLayout::build(&tree, &tree, &lists.near, block);
        let mut expected = Vec::new();
        for t in 0..tree.cells.len() {
            for s in lists.near.row(t) {
                for i in tree.cells[t].range.clone() {
                    for j in tree.cells[s.cell as usize].range.clone() {
                        expected.push((i, j, s.image));
                    }
                }
            }
        }
        let mut got = Vec::new();
        let mut pairs = 0u64;
        for k in 0..lay.tasks.len() {
            let t = lay.tasks[k];
            assert!(t[1] as usize <= block && t[1] > 0);
            let src = lay.task_sources(k);
            assert_eq!(src.len(), lay.task_nsrc[k] as usize);
            pairs += (t[1] as u64) * src.len() as u64;
            for i in t[0]..t[0] + t[1] {
                got.extend(src.iter().map(|&(j, im)| (i as usize, j, im)));
            }
        }
        expected.sort_unstable();
        got.sort_unstable();
        assert_eq!(expected, got);
        assert_eq!(pairs, lay.pairs);
        // merging leaves fewer runs than list entries
        assert!(lay.runs.len() < lists.near.len());
    }

    #[test]
    fn near_layout_covers_every_pair_once() {
        check(3000, 32, 64, None);
        check(3000, 100, 64, None); // leaves larger than a block are split into tasks
        check(2000, 16, 32, None);
    }

    #[test]
    fn near_layout_periodic_images() {
        check(1500, 32, 64, Some(2.0 * std::f64::consts::PI));
    }
}
