//! The slab-decomposed transform on the device (`vortex_resident::slab_fourier::SlabFourier`,
//! R = 1..4 ranks as threads sharing device 0, each with its own stream) against its CPU twin
//! on the same splits (the twin is checked against one-rank 3-D transforms in CI); its memory
//! against the estimate. Needs a
//! CUDA GPU with cuFFT: run with `--features gpu-tests -- --test-threads=1 --nocapture` (one
//! test at a time: the memory test reads the device's free memory; ignored, reported as such,
//! elsewhere).

use cudarc::driver::CudaSlice;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::f64::consts::PI;
use vortex_cuda::GpuDevice;
use vortex_domain::{Comm, ThreadComm};
use vortex_exchange::{TransportChoice, DEFAULT_TIMEOUT};
use vortex_method::reinterpolation::filter::LatticeFilter;
use vortex_resident::reinterpolation::inverse_eigenvalues;
use vortex_resident::slab_fourier::{
    even_bounds, GridSpectrum, HostSlabFourier, Ranks, SlabAxis, SlabFourier, SlabLayout,
};

fn splits(n: usize) -> Vec<Vec<usize>> {
    vec![
        vec![0, n],
        vec![0, 5, n],
        vec![0, 1, 9, n],
        vec![0, 3, 3, 8, n],
        even_bounds(n, 4),
    ]
}

fn random_field(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..3 * n * n * n)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect()
}

fn rel(a: &[f64], b: &[f64]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    let s: f64 = b.iter().map(|y| y * y).sum();
    (d / s).sqrt()
}

fn spectrum_close(a: &GridSpectrum, b: &GridSpectrum, tol: f64, tag: &str) {
    let re = |x: f64, y: f64| (x - y).abs() / y.abs().max(1e-300);
    assert!(
        re(a.energy, b.energy) < tol,
        "{tag}: E {} vs {}",
        a.energy,
        b.energy
    );
    assert!(
        re(a.enstrophy, b.enstrophy) < tol,
        "{tag}: Z {} vs {}",
        a.enstrophy,
        b.enstrophy
    );
    assert_eq!(a.shells.len(), b.shells.len(), "{tag}");
    for (x, y) in a.shells.iter().zip(&b.shells) {
        assert!((x - y).abs() < tol * b.energy, "{tag}: shell {x} vs {y}");
    }
}

/// What one rank computes from its planes of `global`: the solved field, the velocity, and the
/// spectrum, on the device (`device`) or by the host twin.
struct RankResult {
    solved: Vec<f64>,
    velocity: Vec<f64>,
    spectrum: GridSpectrum,
}

struct Case<'a> {
    n: usize,
    axis: SlabAxis,
    omega: &'a [f64],
    inv_eig: &'a [f64],
    c: f64,
    l: f64,
}

fn piece(case: &Case, layout: &SlabLayout) -> Vec<f64> {
    let plane = 3 * case.n * case.n;
    let p = layout.planes(layout.rank());
    case.omega[p.start * plane..p.end * plane].to_vec()
}

fn on_device(case: &Case, comm: &dyn Comm, bounds: &[usize]) -> RankResult {
    let dev = GpuDevice::get(0).unwrap();
    let s = dev.context().new_stream().unwrap();
    let layout = SlabLayout::new(case.n, bounds, comm.rank(), case.axis).unwrap();
    let mine = piece(case, &layout);
    let mut fft = SlabFourier::new(&dev, s.clone(), layout).unwrap();
    // ranks as threads of one process share one GPU: NCCL refuses that, the pinned path runs
    let mut x =
        vortex_exchange::open(comm, s.clone(), TransportChoice::Pinned, DEFAULT_TIMEOUT).unwrap();
    let eig = s.clone_htod(case.inv_eig).unwrap();
    // a rank without planes still hands a (one-element) buffer
    let up = |v: &[f64]| -> CudaSlice<f64> {
        if v.is_empty() {
            s.alloc_zeros(1).unwrap()
        } else {
            s.clone_htod(v).unwrap()
        }
    };
    let down = |d: &CudaSlice<f64>, len: usize| s.clone_dtoh(d).unwrap()[..len].to_vec();
    let mut f = up(&mine);
    let exchange = &mut *x;
    fft.solve_rbf(Ranks { comm, exchange }, &mut f, &eig, case.c)
        .unwrap();
    let solved = down(&f, mine.len());
    let mut f = up(&mine);
    let exchange = &mut *x;
    fft.biot_savart(Ranks { comm, exchange }, &mut f, case.l, true)
        .unwrap();
    let velocity = down(&f, mine.len());
    let spectrum = fft.spectrum(comm).unwrap();
    RankResult {
        solved,
        velocity,
        spectrum,
    }
}

fn on_host(case: &Case, comm: &dyn Comm, bounds: &[usize]) -> RankResult {
    let layout = SlabLayout::new(case.n, bounds, comm.rank(), case.axis).unwrap();
    let mine = piece(case, &layout);
    let mut fft = HostSlabFourier::new(layout);
    let mut solved = mine.clone();
    fft.solve_rbf(comm, &mut solved, case.inv_eig, case.c)
        .unwrap();
    let mut velocity = mine;
    fft.biot_savart(comm, &mut velocity, case.l, true).unwrap();
    let spectrum = fft.spectrum(comm).unwrap();
    RankResult {
        solved,
        velocity,
        spectrum,
    }
}

/// Gathered (solved, velocity) and rank 0's spectrum.
fn gathered(r: Vec<RankResult>) -> (Vec<f64>, Vec<f64>, GridSpectrum) {
    let spectrum = r[0].spectrum.clone();
    assert!(
        r.iter().all(|x| x.spectrum == spectrum),
        "ranks disagree on the spectrum"
    );
    let solved = r.iter().flat_map(|x| x.solved.clone()).collect();
    let velocity = r.iter().flat_map(|x| x.velocity.clone()).collect();
    (solved, velocity, spectrum)
}

fn case_data(n: usize) -> (Vec<f64>, Vec<f64>, f64, f64) {
    let l = 2.0 * PI;
    let h = l / n as f64;
    let sigma = h;
    let inv_eig = inverse_eigenvalues(n, h, sigma, 4.0, &LatticeFilter::default()).unwrap();
    let c = (2.0 * PI * sigma * sigma).powf(-1.5);
    (random_field(n, 5 + n as u64), inv_eig, c, l)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU with cuFFT: cargo test --features gpu-tests"
)]
fn device_matches_the_host_twin_on_any_split() {
    let n = 16;
    let (omega, inv_eig, c, l) = case_data(n);
    for axis in [SlabAxis::X, SlabAxis::Z] {
        let case = Case {
            n,
            axis,
            omega: &omega,
            inv_eig: &inv_eig,
            c,
            l,
        };
        for bounds in splits(n) {
            let r = bounds.len() - 1;
            let (ds, dv, dspec) =
                gathered(ThreadComm::run(r, |comm| on_device(&case, comm, &bounds)));
            let (hs, hv, hspec) =
                gathered(ThreadComm::run(r, |comm| on_host(&case, comm, &bounds)));
            let tag = format!("{axis:?} {bounds:?}");
            let (es, ev) = (rel(&ds, &hs), rel(&dv, &hv));
            println!(
                "{tag}: solve {es:.2e}, Biot-Savart {ev:.2e}, E {:.6e}",
                dspec.energy
            );
            assert!(es < 1e-12 && ev < 1e-12, "{tag}: {es:.2e} {ev:.2e}");
            spectrum_close(&dspec, &hspec, 1e-12, &tag);
        }
    }
}

/// The device memory one rank's transform takes (free memory before and after its creation)
/// is within the estimate the caller plans with, for a decomposition of 256^3 over 4 ranks.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU with cuFFT: cargo test --features gpu-tests"
)]
fn device_memory_within_the_estimate() {
    let dev = GpuDevice::get(0).unwrap();
    let s = dev.context().new_stream().unwrap();
    // the kernels' module and cuFFT's own start-up allocations before the measurement
    drop(
        SlabFourier::new(
            &dev,
            s.clone(),
            SlabLayout::even(8, 1, 0, SlabAxis::X).unwrap(),
        )
        .unwrap(),
    );
    for axis in [SlabAxis::X, SlabAxis::Z] {
        let layout = SlabLayout::even(256, 4, 1, axis).unwrap();
        let estimate = layout.device_bytes();
        dev.synchronize().unwrap();
        let (free0, _) = dev.mem_info().unwrap();
        let fft = SlabFourier::new(&dev, s.clone(), layout).unwrap();
        s.synchronize().unwrap();
        let (free1, _) = dev.mem_info().unwrap();
        let used = free0.saturating_sub(free1);
        println!(
            "{axis:?}: 256^3 over 4 ranks, rank 1: {used} bytes used, estimate {estimate} \
             ({:.2}), bytes sent per transpose {}",
            used as f64 / estimate as f64,
            fft.layout().bytes_sent_per_transpose()
        );
        assert!(used <= estimate, "{used} bytes used > estimate {estimate}");
        drop(fft);
    }
}
