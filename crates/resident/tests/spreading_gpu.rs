//! The device's Gaussian sums by spreading and FFT (`vortex_resident::spreading`) against the
//! host twin (`vortex_method::reinterpolation::spreading`, f64) and against the direct Gaussian
//! sums, on fresh random particles (the periodic lattice, each point displaced by up to `h / 2`
//! per axis, random strengths); and the resident step with `reinterpolation.sums = "spread"`
//! against the host step. Needs a CUDA GPU: run with `--features gpu-tests` (ignored, reported as
//! such, elsewhere); without a working GPU the tests fail.

use num_complex::Complex64;
use std::f64::consts::PI;
use vortex_cuda::GpuDevice;
use vortex_domain::SelfComm;
use vortex_method::cells::gaussian_sum;
use vortex_method::parallel::DistSimulation;
use vortex_method::reinterpolation::spreading::{jittered_lattice, SpreadPlan};
use vortex_method::reinterpolation::Lattice;
use vortex_method::{Config, Particles, Simulator};
use vortex_resident::kernels::Kernels;
use vortex_resident::slab_fourier::{SlabAxis, SlabFourier, SlabLayout};
use vortex_resident::spreading::{half_spectra, DeviceSpread, Precision};
use vortex_resident::state::DeviceParticles;
use vortex_spectral::fft::Fft3;

/// The jittered periodic `n^3` lattice of the box `2 pi`
/// (`vortex_method::reinterpolation::spreading::jittered_lattice`), the core `core`.
fn jittered(n: usize, core: f64, seed: u64) -> Particles {
    let (pos, alpha) = jittered_lattice(n, 2.0 * PI, seed);
    Particles::new(pos, alpha, core)
}

fn rel_complex(a: &[Complex64], b: &[Complex64]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| (x - y).norm_sqr()).sum();
    let r: f64 = b.iter().map(|y| y.norm_sqr()).sum();
    (d / r).sqrt()
}

/// The device's three lattice spectra of `p` for `plan` (`3 clen` complex).
fn device_spectra(plan: &SpreadPlan, p: &Particles, core: f64) -> (Vec<Complex64>, Precision) {
    let dev = GpuDevice::get(0).expect("a CUDA GPU");
    let s = dev.stream().clone();
    let k = Kernels::load(&dev).unwrap();
    let mut sp = DeviceSpread::new(&dev, plan.clone()).unwrap();
    let dp = DeviceParticles::upload(&s, p).unwrap();
    let n = plan.n;
    let layout = SlabLayout::new(n, &[0, n], 0, SlabAxis::Z).unwrap();
    let mut f = SlabFourier::new(&dev, s.clone(), layout).unwrap();
    sp.lattice_spectra(&k, &s, (&dp).into(), core, f.pencil_mut())
        .unwrap();
    let v = s.clone_dtoh(f.pencil_mut()).unwrap();
    (half_spectra(&v, n), sp.precision)
}

/// Lattice values (lattice order) of the three half spectra `spec` (`3 clen`).
fn values(spec: &[Complex64], n: usize) -> Vec<[f64; 3]> {
    let fft = Fft3::new(n);
    let clen = fft.complex_len();
    let mut out = vec![[0.0; 3]; n * n * n];
    for c in 0..3 {
        let mut w = spec[c * clen..(c + 1) * clen].to_vec();
        let v = vortex_method::reinterpolation::spreading::fold::lattice_values(&fft, &mut w);
        for (o, x) in out.iter_mut().zip(v) {
            o[c] = x;
        }
    }
    out
}

fn rel_rows(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    let (mut d, mut r) = (0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        for c in 0..3 {
            d += (x[c] - y[c]).powi(2);
            r += y[c] * y[c];
        }
    }
    (d / r).sqrt()
}

/// The relative errors of one plan on the jittered lattice (`sigma0 = 0.8 h`, the particles'
/// core `growth sigma0`, tolerance `tol`): the device's spectra against the host twin's, the
/// device's and the host twin's lattice values against the direct Gaussian sums (cutoff 8 core
/// radii, truncation `exp(-32)`); and the device grid's precision.
fn errors(n: usize, growth: f64, tol: f64, seed: u64) -> (Precision, [f64; 3]) {
    let h = 2.0 * PI / n as f64;
    let sigma0 = 0.8 * h;
    let core = growth * sigma0;
    let plan = SpreadPlan::new(n, 2.0 * PI, sigma0, tol).unwrap();
    let p = jittered(n, core, seed);
    let (dev, precision) = device_spectra(&plan, &p, core);
    let host: Vec<Complex64> = plan
        .lattice_spectra(&p.position, &p.strength, &p.sigma)
        .unwrap()
        .concat();
    let pts = Lattice::periodic_box(n, 2.0 * PI).points();
    let direct = gaussian_sum(
        &p.position,
        &p.strength,
        &p.sigma,
        &pts,
        8.0,
        Some(2.0 * PI),
    );
    let e = [
        rel_complex(&dev, &host),
        rel_rows(&values(&dev, n), &direct),
        rel_rows(&values(&host, n), &direct),
    ];
    println!(
        "{precision:?} grid {}^3, kernel {} points: device vs host twin {:.2e}, device vs \
         direct sums {:.2e} (host twin vs direct {:.2e})",
        plan.design.fine, plan.design.kernel.width, e[0], e[1], e[2]
    );
    (precision, e)
}

/// f32 grid (tolerance 1e-6, cores grown by 1.125): the device's lattice spectra against the
/// host twin's with the same plan, and the device's lattice values against the direct Gaussian
/// sums, both within 2e-6 relative.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --features gpu-tests"
)]
fn f32_spreading_matches_the_host_twin_and_the_direct_sums() {
    let (precision, [twin, direct, _]) = errors(32, 1.125, 1e-6, 17);
    assert_eq!(precision, Precision::F32);
    assert!(twin < 2e-6 && direct < 2e-6, "{twin:.2e} {direct:.2e}");
}

/// f64 grid (tolerance 1e-9): the device's spectra are the host twin's to round-off, and its
/// lattice values the direct sums' within the tolerance.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --features gpu-tests"
)]
fn f64_spreading_matches_the_host_twin_to_round_off() {
    let (precision, [twin, direct, _]) = errors(24, 1.0, 1e-9, 18);
    assert_eq!(precision, Precision::F64);
    assert!(twin < 1e-12 && direct < 1e-9, "{twin:.2e} {direct:.2e}");
}

/// The resident step with `reinterpolation.sums = { kind = "spread" }` and the carried history
/// against the host step with the same setting (Taylor-Green 16^3, a re-interpolation every 2
/// steps): energy and enstrophy within 1e-5, as the direct sums' device-vs-host test.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --features gpu-tests"
)]
fn resident_step_with_spreading_matches_the_host_step() {
    let text = "nu = 0.01\ndt = 0.05\nt_end = 0.4\n[domain]\nperiodic = true\n\
                box_length = 6.283185307179586\nimage_levels = 3\n\
                [evaluation]\nmethod = \"fmm\"\norder = 10\ntheta = 0.5\n\
                [initial]\nkind = \"taylor-green\"\nn = 16\noverlap = 1.0\n\
                [reinterpolation]\nevery = 2\nratio = 1.2\nhistory = \"carry\"\n\
                sums = { kind = \"spread\", tolerance = 1e-6 }\n\
                [output]\ngrid = 16\ngrid_velocity = \"vorticity\"\n";
    let config = Config::from_str_named(text, "spreading_gpu").unwrap();
    let comm = SelfComm;
    let mut host = DistSimulation::new(&comm, config.clone(), vortex_fmm::CpuBackend).unwrap();
    let mut dev = vortex_resident::ResidentSimulation::new(&comm, config, 0, None).unwrap();
    assert!(
        dev.describe().contains("by spreading"),
        "the spreading route was not made: {}",
        dev.describe()
    );
    let mut reinterpolations = 0;
    for _ in 0..8 {
        Simulator::step(&mut host).unwrap();
        reinterpolations += dev.step().unwrap().reinterpolation.is_some() as u32;
    }
    assert_eq!(reinterpolations, 4);
    let dh = host.diagnostics(Some(16), false).unwrap().unwrap();
    let dd = dev.diagnostics(Some(16), false).unwrap().unwrap();
    let de = (dd.energy - dh.energy).abs() / dh.energy;
    let dz = (dd.enstrophy - dh.enstrophy).abs() / dh.enstrophy;
    println!("spread sums: energy {de:.2e}, enstrophy {dz:.2e} (device vs host)");
    assert!(de < 1e-5 && dz < 1e-5, "{de:.2e} {dz:.2e}");
}
