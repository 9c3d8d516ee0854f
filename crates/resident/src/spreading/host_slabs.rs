//! The host twin (f64, sequential per rank) of the Gaussian sums by spreading over slabs
//! ([`super::slabs`] gives the phases): what the device route is checked against, and itself
//! checked against the one-rank host sums of `vortex_method::reinterpolation::spreading` on
//! 1 to 4 simulated ranks.

use super::slabs::FineSlabs;
use crate::slab_fourier::{slabs_to_pencils, SlabError, SlabLayout};
use num_complex::Complex64;
use realfft::RealFftPlanner;
use rustfft::FftPlanner;
use vortex_domain::Comm;
use vortex_exchange::host::alltoallv_host;
use vortex_exchange::ExchangeError;
use vortex_method::reinterpolation::spreading::fold::aliases;
use vortex_method::reinterpolation::spreading::SpreadPlan;

/// Why the sums over slabs cannot be formed.
#[derive(Debug, thiserror::Error)]
pub enum SlabSpreadError {
    #[error("a particle at z = {z} lies outside the fine planes of rank {rank}'s slab and halo (planes {start}.. wrapped, {len} of them)")]
    OutsideWindow {
        z: f64,
        rank: usize,
        start: usize,
        len: usize,
    },
    #[error(transparent)]
    Layout(#[from] SlabError),
    #[error("spreading over slabs, the halo exchange: {0}")]
    Exchange(#[from] ExchangeError),
}

/// This rank's part of the lattice's pencil spectrum `[kz][ky - m0][kx][3]` (the layout of
/// `slabs.layout(n)`'s lattice twin, `SlabLayout::new(n, ..)`) of the Gaussian sums with core
/// `core` of this rank's particles (each inside its slab). Collective.
pub fn slab_spectra(
    comm: &dyn Comm,
    plan: &SpreadPlan,
    slabs: &FineSlabs,
    position: &[[f64; 3]],
    strength: &[[f64; 3]],
    core: f64,
) -> Result<Vec<Complex64>, SlabSpreadError> {
    let (m, n) = (plan.design.fine, plan.n);
    let layout = slabs.layout(n)?;
    let d = plan.axis_factors(core);
    let mut slab = vec![Complex64::default(); layout.slab_len()];
    for c in 0..3 {
        let values: Vec<f64> = strength.iter().map(|s| s[c]).collect();
        let window = spread_window(plan, slabs, position, &values)?;
        let owned = halo_sum(comm, slabs, &window, m * m)?;
        for (i, plane) in owned.chunks_exact(m * m).enumerate() {
            let g = plane_transform(plane, m);
            let out = &mut slab[3 * i * n * (n / 2 + 1)..3 * (i + 1) * n * (n / 2 + 1)];
            fold_xy(&g, m, &d, n, c, out);
        }
    }
    let mut fine = vec![Complex64::default(); layout.pencil_len()];
    let mut wire = vec![0.0; 2 * layout.slab_len()];
    slabs_to_pencils(
        &layout,
        comm,
        bytemuck::cast_slice(&slab),
        &mut wire,
        bytemuck::cast_slice_mut(&mut fine),
    )?;
    Ok(along_z_folded(&layout, &fine, &d, n))
}

/// The window grid `[j][y][x]` of one component: the spread of this rank's particles onto its
/// window's planes, `x` and `y` wrapped.
pub fn spread_window(
    plan: &SpreadPlan,
    slabs: &FineSlabs,
    position: &[[f64; 3]],
    values: &[f64],
) -> Result<Vec<f64>, SlabSpreadError> {
    let (k, g) = (plan.kernel(), plan.grid());
    let (m, w) = (g.m, k.width);
    let me = slabs.rank();
    let win = slabs.window(me);
    let mut out = vec![0.0; win.len * m * m];
    let wrap = |l: i64| l.rem_euclid(m as i64) as usize;
    let mut wts = [[0.0; 16]; 3];
    for (x, &v) in position.iter().zip(values) {
        let l: [i64; 3] = std::array::from_fn(|a| k.weights(g.coordinate(x[a]), &mut wts[a]));
        for cz in 0..w {
            let j =
                slabs
                    .local(me, wrap(l[2] + cz as i64))
                    .ok_or(SlabSpreadError::OutsideWindow {
                        z: x[2],
                        rank: me,
                        start: win.start,
                        len: win.len,
                    })?;
            for cy in 0..w {
                let row = (j * m + wrap(l[1] + cy as i64)) * m;
                let vyz = v * wts[2][cz] * wts[1][cy];
                for cx in 0..w {
                    out[row + wrap(l[0] + cx as i64)] += vyz * wts[0][cx];
                }
            }
        }
    }
    Ok(out)
}

/// The own planes `[i][y][x]` (`plane` values each): every window plane sent to its owner
/// (packed by [`FineSlabs::runs`]), the received planes added in rank order. Collective.
pub fn halo_sum(
    comm: &dyn Comm,
    slabs: &FineSlabs,
    window: &[f64],
    plane: usize,
) -> Result<Vec<f64>, SlabSpreadError> {
    let (me, ranks) = (slabs.rank(), slabs.ranks());
    let parts = slabs.halo_parts(plane)?;
    let mut send = Vec::with_capacity(parts.send_extent());
    for d in 0..ranks {
        for p in slabs.runs(me, d).into_iter().flatten() {
            let j = slabs.local(me, p).expect("runs lie in the window");
            send.extend_from_slice(&window[j * plane..(j + 1) * plane]);
        }
    }
    let mut recv = vec![0.0; parts.recv_extent()];
    alltoallv_host(comm, &send, &mut recv, &parts)?;
    let own = slabs.owned(me);
    let mut out = vec![0.0; own.len() * plane];
    for q in 0..ranks {
        let mut at = parts.recv(q).start;
        for p in slabs.runs(q, me).into_iter().flatten() {
            let dst = &mut out[(p - own.start) * plane..(p - own.start + 1) * plane];
            dst.iter_mut()
                .zip(&recv[at..at + plane])
                .for_each(|(a, b)| *a += b);
            at += plane;
        }
    }
    Ok(out)
}

/// The 2-D transform of one real fine plane `[y][x]`: `[qy][qx]`, `qx` in `0..=m/2`
/// (unnormalised, forward sign).
pub fn plane_transform(plane: &[f64], m: usize) -> Vec<Complex64> {
    let mh = m / 2 + 1;
    let r2c = RealFftPlanner::<f64>::new().plan_fft_forward(m);
    let fft = FftPlanner::<f64>::new().plan_fft_forward(m);
    let mut out = vec![Complex64::default(); m * mh];
    let mut row = vec![0.0; m];
    for (y, o) in out.chunks_exact_mut(mh).enumerate() {
        row.copy_from_slice(&plane[y * m..(y + 1) * m]);
        r2c.process(&mut row, o)
            .expect("realfft: lengths of the plan");
    }
    let mut col = vec![Complex64::default(); m];
    for qx in 0..mh {
        col.iter_mut()
            .enumerate()
            .for_each(|(y, v)| *v = out[y * mh + qx]);
        fft.process(&mut col);
        col.iter()
            .enumerate()
            .for_each(|(qy, v)| out[qy * mh + qx] = *v);
    }
    out
}

/// Component `c` of one plane of lattice modes `out` (`[ky][kx][3]`) `=` the fine plane's
/// modes `g` (`[qy][qx]`, half axis `x`) times `d(qx) d(qy)`, folded.
pub fn fold_xy(g: &[Complex64], m: usize, d: &[f64], n: usize, c: usize, out: &mut [Complex64]) {
    let (mh, nh) = (m / 2 + 1, n / 2 + 1);
    let wrap = |q: i64| q.rem_euclid(m as i64) as usize;
    let al: Vec<Vec<i64>> = (0..n).map(|k| aliases(k, n, m)).collect();
    for ky in 0..n {
        for kx in 0..nh {
            let mut s = Complex64::default();
            for &qy in &al[ky] {
                for &qx in &al[kx] {
                    let v = if qx >= 0 {
                        g[wrap(qy) * mh + qx as usize]
                    } else {
                        g[wrap(-qy) * mh + (-qx) as usize].conj()
                    };
                    s += v * (d[wrap(qx)] * d[wrap(qy)]);
                }
            }
            out[3 * (ky * nh + kx) + c] = s;
        }
    }
}

/// The lattice's pencil spectrum from the fine one (`[l][ky - m0][kx][3]`, `l` every fine
/// plane): per column the transform of length `m` along `z`, times `d(qz)`, folded onto `kz`.
pub fn along_z_folded(
    layout: &SlabLayout,
    fine: &[Complex64],
    d: &[f64],
    n: usize,
) -> Vec<Complex64> {
    let m = layout.depth();
    let columns = fine.len() / m;
    let fft = FftPlanner::<f64>::new().plan_fft_forward(m);
    let wrap = |q: i64| q.rem_euclid(m as i64) as usize;
    let al: Vec<Vec<i64>> = (0..n).map(|k| aliases(k, n, m)).collect();
    let mut out = vec![Complex64::default(); n * columns];
    let mut col = vec![Complex64::default(); m];
    for j in 0..columns {
        col.iter_mut()
            .enumerate()
            .for_each(|(l, v)| *v = fine[l * columns + j]);
        fft.process(&mut col);
        for (kz, a) in al.iter().enumerate() {
            out[kz * columns + j] = a.iter().map(|&q| col[wrap(q)] * d[wrap(q)]).sum();
        }
    }
    out
}

/// Test sets over slabs (for this module's tests and the device's): the rank of `z`
/// (wrapped into the box `[-L/2, L/2)`) among slabs cut at the increasing interior `cuts`.
pub fn rank_at_cuts(z: f64, l: f64, cuts: &[f64]) -> usize {
    let z = (z + 0.5 * l).rem_euclid(l) - 0.5 * l;
    cuts.iter().filter(|&&c| c <= z).count()
}

/// The fine plane bounds of `plan`'s grid for slabs cut at `cuts` ([`rank_at_cuts`]).
pub fn fine_bounds_at_cuts(plan: &SpreadPlan, cuts: &[f64]) -> Vec<usize> {
    let (g, l) = (plan.grid(), plan.box_length);
    (0..=cuts.len() + 1)
        .map(|r| {
            (0..g.m)
                .filter(|&p| rank_at_cuts(g.origin + p as f64 * g.h, l, cuts) < r)
                .count()
        })
        .collect()
}

/// `count` random positions within `0.6 L` of the centre (some outside the box, wrapped by the
/// sums) and strengths in `[-1, 1)`.
pub fn random_set(count: usize, l: f64, seed: u64) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut draw = |a: f64| -> Vec<[f64; 3]> {
        (0..count)
            .map(|_| std::array::from_fn(|_| rng.gen_range(-a..a)))
            .collect()
    };
    let pos = draw(0.6 * l);
    (pos, draw(1.0))
}

/// The particles of `rank` among slabs cut at `cuts`: their positions and strengths.
pub fn rank_share(
    pos: &[[f64; 3]],
    strength: &[[f64; 3]],
    l: f64,
    cuts: &[f64],
    rank: usize,
) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
    (0..pos.len())
        .filter(|&i| rank_at_cuts(pos[i][2], l, cuts) == rank)
        .map(|i| (pos[i], strength[i]))
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vortex_domain::ThreadComm;

    /// The slabs' sums on 1 to 4 simulated ranks (even, uneven, empty and one-plane slabs)
    /// against the one-rank host sums of the whole set: the own half of the host's spectrum to
    /// round-off, its conjugate half to the round-off of the fine spectrum's Hermitian pairs
    /// amplified by the deconvolution; and every mode the same on any number of ranks.
    #[test]
    fn slabs_match_the_one_rank_sums() {
        let (n, l) = (16usize, 2.0 * std::f64::consts::PI);
        let h = l / n as f64;
        let plan = SpreadPlan::new(n, l, 0.8 * h, 1e-6).unwrap();
        let (m, k) = (plan.design.fine, plan.kernel());
        let seed: u64 = rand::random();
        let (pos, str) = random_set(500, l, seed);
        let core = 0.85 * h;
        let nh = n / 2 + 1;
        let cores = vec![core; pos.len()];
        let host = plan.lattice_spectra(&pos, &str, &cores).unwrap();
        let scale = host.iter().flatten().map(|v| v.norm()).fold(0.0, f64::max);
        let mut one_rank: Option<Vec<Complex64>> = None;
        for cuts in [
            vec![],
            vec![0.3],
            vec![-0.5 * l + 0.5 * h, 1.0],
            vec![-1.0, -1.0, 2.0],
            vec![-2.0, -0.5, 0.7, 2.5],
        ] {
            let ranks = cuts.len() + 1;
            let bounds = fine_bounds_at_cuts(&plan, &cuts);
            let parts = ThreadComm::run(ranks, |comm| {
                let me = comm.rank();
                let slabs = FineSlabs::new(m, &bounds, k.width, me);
                let (p, s) = rank_share(&pos, &str, l, &cuts, me);
                slab_spectra(comm, &plan, &slabs, &p, &s, core).unwrap()
            });
            // every mode (c, kz, ky, kx) of the ranks' pencils in one array
            let mut all = vec![Complex64::default(); 3 * n * n * nh];
            let (mut own, mut conj) = (0.0f64, 0.0f64);
            for (r, got) in parts.iter().enumerate() {
                let ky0 = r * n / ranks;
                let pl = (r + 1) * n / ranks - ky0;
                assert_eq!(got.len(), 3 * n * pl * nh);
                for (e, v) in got.iter().enumerate() {
                    let (c, t) = (e % 3, e / 3);
                    let (kx, ky, kz) = (t % nh, ky0 + (t / nh) % pl, t / (nh * pl));
                    all[3 * ((kz * n + ky) * nh + kx) + c] = *v;
                    if kz < nh {
                        own = own.max((v - host[c][(kx * n + ky) * nh + kz]).norm());
                    } else {
                        let w = host[c][(((n - kx) % n) * n + (n - ky) % n) * nh + n - kz].conj();
                        conj = conj.max((v - w).norm());
                    }
                }
            }
            // every mode, the conjugate half too, the same on any number of ranks
            let one = one_rank.get_or_insert_with(|| all.clone());
            let ranks_err = one
                .iter()
                .zip(&all)
                .map(|(a, b)| (a - b).norm())
                .fold(0.0, f64::max);
            assert!(
                ranks_err <= 1e-12 * scale,
                "cuts {cuts:?}: {ranks_err:e} of {scale:e}"
            );
            assert!(
                own <= 1e-12 * scale,
                "seed {seed}, cuts {cuts:?}: {own:e} of {scale:e}"
            );
            assert!(
                conj <= 1e-9 * scale,
                "seed {seed}, cuts {cuts:?}: {conj:e} of {scale:e}"
            );
        }
    }
}
