//! The host twin on R = 1..4 simulated ranks (even, uneven and empty slabs, both slab axes)
//! against one-rank references: the separable host solver of the RBF system, the one-rank
//! emulation of `Fourier`'s Biot-Savart factor, an analytic velocity (Taylor-Green and random
//! plane waves), and `vortex_spectral::diagnostics`.

use super::*;
use crate::emulate;
use crate::reinterpolation::inverse_eigenvalues;
use num_complex::Complex64;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::f64::consts::PI;
use vortex_domain::ThreadComm;
use vortex_method::reinterpolation::filter::LatticeFilter;
use vortex_method::reinterpolation::separable::SeparableSolver;
use vortex_spectral::diagnostics::{energy_spectral, enstrophy_spectral, spectrum_spectral};
use vortex_spectral::field::{SpectralField, VelocityField};

/// Splits of `n` planes over 1..4 ranks: even, uneven, with an empty rank.
fn splits(n: usize) -> Vec<Vec<usize>> {
    vec![
        vec![0, n],
        vec![0, 5, n],
        even_bounds(n, 2),
        vec![0, 1, 7, n],
        vec![0, 3, 3, 8, n],
        even_bounds(n, 4),
    ]
}

/// `op` on the ranks of `bounds`, each with its planes of the `global` field: the field they
/// leave, gathered in rank order.
fn on_ranks<F>(n: usize, bounds: &[usize], axis: SlabAxis, global: &[f64], op: F) -> Vec<f64>
where
    F: Fn(&dyn Comm, &mut HostSlabFourier, &mut Vec<f64>) + Sync,
{
    ThreadComm::run(bounds.len() - 1, |comm| {
        let l = SlabLayout::new(n, bounds, comm.rank(), axis).unwrap();
        let mut f = piece(global, &l);
        let mut fft = HostSlabFourier::new(l);
        op(comm, &mut fft, &mut f);
        f
    })
    .concat()
}

/// The field of `axis`'s layout in the layout `(x n + y) n + z` (and back: the map is its own
/// inverse).
fn to_x_layout(f: &[f64], n: usize, axis: SlabAxis) -> Vec<f64> {
    match axis {
        SlabAxis::X => f.to_vec(),
        SlabAxis::Z => {
            let mut out = vec![0.0; f.len()];
            for a in 0..n {
                for y in 0..n {
                    for b in 0..n {
                        for c in 0..3 {
                            out[3 * ((a * n + y) * n + b) + c] = f[3 * ((b * n + y) * n + a) + c];
                        }
                    }
                }
            }
            out
        }
    }
}

fn rel(a: &[f64], b: &[f64]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    let s: f64 = b.iter().map(|y| y * y).sum();
    (d / s).sqrt()
}

fn random_field(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..3 * n * n * n)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect()
}

fn piece(global: &[f64], layout: &SlabLayout) -> Vec<f64> {
    let plane = 3 * layout.n() * layout.n();
    let p = layout.planes(layout.rank());
    global[p.start * plane..p.end * plane].to_vec()
}

fn components(f: &[f64]) -> [Vec<f64>; 3] {
    std::array::from_fn(|c| f.iter().skip(c).step_by(3).copied().collect())
}

fn interleave(c: &[Vec<f64>; 3]) -> Vec<f64> {
    (0..c[0].len())
        .flat_map(|i| (0..3).map(move |k| c[k][i]))
        .collect()
}

fn rows(f: &[f64]) -> Vec<[f64; 3]> {
    f.chunks_exact(3).map(|v| [v[0], v[1], v[2]]).collect()
}

/// The transpose plan alone: every element of the pencil spectrum is the slab element of its
/// indices, and the inverse transpose restores every rank's slab (f64 pairs and Complex64).
#[test]
fn transpose_moves_every_element_to_its_place() {
    let n = 7;
    for bounds in [
        vec![0, 7],
        vec![0, 2, 7],
        vec![0, 0, 3, 7],
        vec![0, 1, 2, 4, 7],
    ] {
        let r = bounds.len() - 1;
        ThreadComm::run(r, |comm| {
            let l = SlabLayout::new(n, &bounds, comm.rank(), SlabAxis::Z).unwrap();
            let nh = l.nh();
            let s0 = l.planes(l.rank()).start;
            // element (s, km, kf, c) of the global slab spectrum, as a complex number
            let value = |s: usize, km: usize, kf: usize, c: usize| {
                Complex64::new((((s * n + km) * nh + kf) * 3 + c) as f64, -(s as f64))
            };
            let slab: Vec<Complex64> = (0..l.slab_len())
                .map(|i| {
                    let (c, kf, km, sl) =
                        (i % 3, (i / 3) % nh, (i / (3 * nh)) % n, i / (3 * nh * n));
                    value(s0 + sl, km, kf, c)
                })
                .collect();
            let mut pencil = vec![Complex64::default(); l.pencil_len()];
            let mut wire = vec![f64::NAN; 2 * l.slab_len()];
            let sent = slabs_to_pencils(
                &l,
                comm,
                bytemuck::cast_slice(&slab),
                &mut wire,
                bytemuck::cast_slice_mut(&mut pencil),
            )
            .unwrap();
            assert_eq!(sent, l.bytes_sent_per_transpose());
            for (t, v) in pencil.chunks_exact(3).enumerate() {
                let [s, km, kf] = l.pencil_index(t);
                for (c, x) in v.iter().enumerate() {
                    assert_eq!(*x, value(s, km, kf, c), "rank {} element {t}", l.rank());
                }
            }
            let mut back = vec![Complex64::default(); l.slab_len()];
            pencils_to_slabs(
                &l,
                comm,
                bytemuck::cast_slice(&pencil),
                &mut wire,
                bytemuck::cast_slice_mut(&mut back),
            )
            .unwrap();
            assert_eq!(back, slab);
        });
    }
}

/// The RBF solve on R ranks against the separable host solver on the whole lattice
/// (`vortex_method::reinterpolation::separable`, unfiltered and with the default lattice
/// filter), for even and odd `n`, both slab axes; the host twin's result does not depend on R
/// at all (the same line transforms).
#[test]
fn solve_matches_the_separable_solver_on_any_split() {
    let filters = [LatticeFilter::None, LatticeFilter::default()];
    for ((n, overlap), filter) in [(12usize, 1.0), (9, 0.8)].into_iter().zip(filters) {
        let l_box = 2.0;
        let h = l_box / n as f64;
        let (sigma, cutoff) = (overlap * h, 4.0);
        let inv_eig = inverse_eigenvalues(n, h, sigma, cutoff, &filter).unwrap();
        let c = (2.0 * PI * sigma * sigma).powf(-1.5);
        let solver = SeparableSolver::new([n; 3], h, sigma, cutoff, true).unwrap();
        let transfer = SeparableSolver::transfer([n; 3], &filter);
        let omega = random_field(n, 3 + n as u64);
        // the operator is the same along every axis: the reference needs no permutation
        let want = interleave(&components(&omega).map(|b| transfer.solve(&solver.solve(&b))));
        for axis in [SlabAxis::X, SlabAxis::Z] {
            let mut first: Option<Vec<f64>> = None;
            for bounds in splits(n) {
                let got = on_ranks(n, &bounds, axis, &omega, |comm, fft, f| {
                    fft.solve_rbf(comm, f, &inv_eig, c).unwrap()
                });
                let e = rel(&got, &want);
                assert!(e < 1e-12, "n = {n} {axis:?} {bounds:?}: {e:.2e}");
                match &first {
                    None => first = Some(got),
                    Some(f) => assert_eq!(f, &got, "n = {n} {axis:?} {bounds:?}"),
                }
            }
        }
    }
}

/// Biot-Savart on R ranks against the one-rank emulation of `Fourier`'s factor on a random
/// vorticity (Nyquist content included, dropped by both; the emulation's transform wants an
/// even `n`).
#[test]
fn biot_savart_matches_the_one_rank_transform() {
    for n in [12usize, 10] {
        let l_box = 3.0;
        let omega = random_field(n, 40 + n as u64);
        for axis in [SlabAxis::X, SlabAxis::Z] {
            let x = to_x_layout(&omega, n, axis);
            let want = emulate::biot_savart(&rows(&x), n, l_box).concat();
            let want = to_x_layout(&want, n, axis);
            for bounds in splits(n) {
                let got = on_ranks(n, &bounds, axis, &omega, |comm, fft, f| {
                    fft.biot_savart(comm, f, l_box, true).unwrap()
                });
                let e = rel(&got, &want);
                assert!(e < 1e-12, "n = {n} {axis:?} {bounds:?}: {e:.2e}");
            }
        }
    }
}

/// Biot-Savart of an analytic vorticity: Taylor-Green plus random divergence-free plane waves
/// `A cos(k m.x + phi)` (`A . m = 0`, vorticity `-sin(k m.x + phi) k m x A`), box length not
/// `2 pi`: the velocity comes back to round-off.
#[test]
fn biot_savart_of_an_analytic_field() {
    let (n, l_box) = (12usize, 2.5);
    let k = 2.0 * PI / l_box;
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let waves: Vec<([f64; 3], [f64; 3], f64)> = (0..4)
        .map(|_| {
            let m: [f64; 3] = loop {
                let m = [0; 3].map(|_: i32| rng.gen_range(-3..=3) as f64);
                if m.iter().any(|&v| v != 0.0) {
                    break m;
                }
            };
            let v = [0; 3].map(|_: i32| rng.gen_range(-1.0..1.0));
            let vm = (v[0] * m[0] + v[1] * m[1] + v[2] * m[2])
                / (m[0] * m[0] + m[1] * m[1] + m[2] * m[2]);
            let a = [v[0] - vm * m[0], v[1] - vm * m[1], v[2] - vm * m[2]];
            (m, a, rng.gen_range(0.0..2.0 * PI))
        })
        .collect();
    let cross = |a: [f64; 3], b: [f64; 3]| {
        [
            a[1] * b[2] - a[2] * b[1],
            a[2] * b[0] - a[0] * b[2],
            a[0] * b[1] - a[1] * b[0],
        ]
    };
    // (velocity, vorticity) at the point p
    let field = |p: [f64; 3]| {
        let [sx, sy, sz] = p.map(|v| (k * v).sin());
        let [cx, cy, cz] = p.map(|v| (k * v).cos());
        let mut u = [sx * cy * cz, -cx * sy * cz, 0.0];
        let mut w = [-k * cx * sy * sz, -k * sx * cy * sz, 2.0 * k * sx * sy * cz];
        for (m, a, phi) in &waves {
            let th = k * (m[0] * p[0] + m[1] * p[1] + m[2] * p[2]) + phi;
            let ma = cross(*m, *a);
            for c in 0..3 {
                u[c] += a[c] * th.cos();
                w[c] -= th.sin() * k * ma[c];
            }
        }
        (u, w)
    };
    let h = l_box / n as f64;
    for axis in [SlabAxis::X, SlabAxis::Z] {
        let (mut u, mut w) = (Vec::new(), Vec::new());
        for a in 0..n {
            for b in 0..n {
                for c in 0..n {
                    let (i, j, kk) = match axis {
                        SlabAxis::X => (a, b, c),
                        SlabAxis::Z => (c, b, a),
                    };
                    let (uu, ww) = field([i, j, kk].map(|q| 0.3 + q as f64 * h));
                    u.extend(uu);
                    w.extend(ww);
                }
            }
        }
        for bounds in splits(n) {
            let got = on_ranks(n, &bounds, axis, &w, |comm, fft, f| {
                fft.biot_savart(comm, f, l_box, true).unwrap()
            });
            let e = rel(&got, &u);
            assert!(e < 1e-13, "{axis:?} {bounds:?}: {e:.2e}");
        }
    }
}

/// The spectrum, energy and enstrophy reduced over R ranks against
/// `vortex_spectral::diagnostics` on the same (gathered) velocity.
#[test]
fn spectrum_matches_the_spectral_diagnostics() {
    let n = 12usize;
    let omega = random_field(n, 99);
    for axis in [SlabAxis::X, SlabAxis::Z] {
        for bounds in splits(n) {
            let out = ThreadComm::run(bounds.len() - 1, |comm| {
                let l = SlabLayout::new(n, &bounds, comm.rank(), axis).unwrap();
                let mut f = piece(&omega, &l);
                let mut fft = HostSlabFourier::new(l);
                assert_eq!(fft.spectrum(comm), Err(SlabError::NoSpectrum));
                fft.biot_savart(comm, &mut f, 2.0 * PI, true).unwrap();
                (f, fft.spectrum(comm).unwrap())
            });
            let spec = out[0].1.clone();
            assert!(out.iter().all(|(_, s)| *s == spec), "ranks disagree");
            let u: Vec<f64> = out.into_iter().flat_map(|o| o.0).collect();
            let u = to_x_layout(&u, n, axis);
            let vf = VelocityField {
                n,
                u: components(&u),
            };
            let sf = SpectralField::from_physical(&vf);
            let (e, z) = (energy_spectral(&sf), enstrophy_spectral(&sf));
            let shells = spectrum_spectral(&sf);
            let tag = format!("{axis:?} {bounds:?}");
            assert!(
                (spec.energy - e).abs() < 1e-12 * e,
                "{tag}: E {} vs {e}",
                spec.energy
            );
            assert!(
                (spec.enstrophy - z).abs() < 1e-12 * z,
                "{tag}: Z {} vs {z}",
                spec.enstrophy
            );
            assert_eq!(spec.shells.len(), shells.len(), "{tag}");
            for (a, (_, b)) in spec.shells.iter().zip(&shells) {
                assert!((a - b).abs() < 1e-12 * e, "{tag}: shell {a} vs {b}");
            }
            // Parseval: the mean of |u|^2 on the lattice
            let mean = 0.5 * u.iter().map(|v| v * v).sum::<f64>() / (n * n * n) as f64;
            assert!((spec.energy - mean).abs() < 1e-12 * mean, "{tag}");
        }
    }
}

/// Bad decompositions are refused with the limit named; a communicator of another size too.
#[test]
fn bad_layouts_are_refused() {
    let e = SlabLayout::even(4, 5, 0, SlabAxis::Z).unwrap_err();
    assert_eq!(e, SlabError::TooManyRanks { ranks: 5, n: 4 });
    assert!(e.to_string().contains("at most n ranks"), "{e}");
    assert!(SlabLayout::new(8, &[0, 3, 2, 8], 0, SlabAxis::Z).is_err());
    assert!(SlabLayout::new(8, &[0, 3, 7], 0, SlabAxis::Z).is_err());
    assert!(SlabLayout::new(8, &[1, 8], 0, SlabAxis::Z).is_err());
    assert!(SlabLayout::new(8, &[0, 8], 1, SlabAxis::Z).is_err());
    let l = SlabLayout::even(8, 2, 0, SlabAxis::X).unwrap();
    let mut fft = HostSlabFourier::new(l);
    let mut f = vec![0.0; 3 * 8 * 8 * 4];
    let e = fft
        .biot_savart(&vortex_domain::SelfComm, &mut f, 1.0, false)
        .unwrap_err();
    assert!(matches!(e, SlabError::CommMismatch { .. }), "{e}");
    let l = SlabLayout::even(8, 1, 0, SlabAxis::X).unwrap();
    let mut fft = HostSlabFourier::new(l);
    let e = fft
        .biot_savart(&vortex_domain::SelfComm, &mut f, 1.0, false)
        .unwrap_err();
    assert!(
        matches!(e, SlabError::FieldLength { want: 1536, .. }),
        "{e}"
    );
}

/// The byte counts: messages of the transpose and the memory estimate's parts.
#[test]
fn bytes_of_the_exchange_and_the_buffers() {
    let l = SlabLayout::new(16, &[0, 6, 16], 0, SlabAxis::Z).unwrap();
    // rank 0: 6 planes, sends rank 1's 8 middle wavenumbers of them, 9 half-axis entries
    assert_eq!(l.bytes_sent_per_transpose(), 16 * 3 * 6 * 8 * 9);
    assert_eq!(l.slab_len(), 3 * 6 * 16 * 9);
    assert_eq!(l.pencil_len(), 3 * 16 * 8 * 9);
    assert!(l.device_bytes() > 16 * (l.slab_len() + l.pencil_len()));
    // pinned transport: a send and a receive buffer, each as large as the larger spectrum
    assert_eq!(l.host_bytes(), 2 * 16 * 3 * 16 * 8 * 9);
}
