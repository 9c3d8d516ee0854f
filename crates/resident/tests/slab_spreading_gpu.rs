//! The Gaussian sums by spreading over slabs on the device
//! (`vortex_resident::spreading::device_slabs`, R = 1..4 ranks as threads sharing device 0,
//! each with its own stream, the pinned exchange) against the host twin
//! (`vortex_resident::spreading::host_slabs`, itself checked against the one-rank host sums in
//! CI) on fresh random particles, with even, uneven and empty slabs. Needs a CUDA GPU: run
//! with `--features gpu-tests` (ignored, reported as such, elsewhere).

use num_complex::Complex64;
use std::f64::consts::PI;
use vortex_cuda::GpuDevice;
use vortex_domain::{Comm, ThreadComm};
use vortex_exchange::{TransportChoice, DEFAULT_TIMEOUT};
use vortex_method::reinterpolation::spreading::SpreadPlan;
use vortex_method::Particles;
use vortex_resident::kernels::Kernels;
use vortex_resident::slab_fourier::{Ranks, SlabAxis, SlabFourier, SlabLayout};
use vortex_resident::spreading::device_slabs::DeviceSlabSpread;
use vortex_resident::spreading::host_slabs::{
    fine_bounds_at_cuts, random_set, rank_share, slab_spectra,
};
use vortex_resident::spreading::slabs::FineSlabs;
use vortex_resident::state::DeviceParticles;

/// One rank's lattice pencil on the device.
fn on_device(
    comm: &dyn Comm,
    plan: &SpreadPlan,
    bounds: &[usize],
    p: &Particles,
    core: f64,
) -> Vec<Complex64> {
    let dev = GpuDevice::get(0).expect("a CUDA GPU");
    let s = dev.context().new_stream().unwrap();
    let k = Kernels::load(&dev).unwrap();
    let n = plan.n;
    let slabs = FineSlabs::new(
        plan.design.fine,
        bounds,
        plan.design.kernel.width,
        comm.rank(),
    );
    let mut sp = DeviceSlabSpread::new(&dev, s.clone(), plan.clone(), slabs).unwrap();
    let even: Vec<usize> = (0..=comm.size()).map(|r| r * n / comm.size()).collect();
    let layout = SlabLayout::new(n, &even, comm.rank(), SlabAxis::Z).unwrap();
    let mut f = SlabFourier::new(&dev, s.clone(), layout).unwrap();
    let mut x =
        vortex_exchange::open(comm, s.clone(), TransportChoice::Pinned, DEFAULT_TIMEOUT).unwrap();
    let dp = DeviceParticles::upload(&s, p).unwrap();
    let exchange = &mut *x;
    let ok = sp
        .lattice_spectra(
            &k,
            &s,
            Ranks { comm, exchange },
            (&dp).into(),
            core,
            f.pencil_mut(),
        )
        .unwrap();
    assert!(ok, "rank {}: a particle outside its window", comm.rank());
    let v = s.clone_dtoh(f.pencil_mut()).unwrap();
    v.chunks_exact(2)
        .map(|c| Complex64::new(c[0], c[1]))
        .collect()
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a CUDA GPU: cargo test --features gpu-tests"
)]
fn device_slabs_match_the_host_twin() {
    let (n, l) = (32usize, 2.0 * PI);
    let h = l / n as f64;
    let plan = SpreadPlan::new(n, l, 0.8 * h, 1e-8).unwrap();
    let m = plan.design.fine;
    let seed: u64 = rand::random();
    let (pos, str) = random_set(20_000, l, seed);
    let core = 0.85 * h;
    for cuts in [
        vec![],
        vec![0.3],
        vec![-2.9, 1.0],
        vec![-1.0, -1.0, 2.0],
        vec![-2.0, -0.5, 0.7, 2.5],
    ] {
        let ranks = cuts.len() + 1;
        let bounds = fine_bounds_at_cuts(&plan, &cuts);
        let results = ThreadComm::run(ranks, |comm| {
            let me = comm.rank();
            let (p, a) = rank_share(&pos, &str, l, &cuts, me);
            let slabs = FineSlabs::new(m, &bounds, plan.design.kernel.width, me);
            let host = slab_spectra(comm, &plan, &slabs, &p, &a, core).unwrap();
            let dev = on_device(comm, &plan, &bounds, &Particles::new(p, a, core), core);
            (host, dev)
        });
        let (mut d2, mut r2) = (0.0, 0.0);
        for (host, dev) in &results {
            assert_eq!(host.len(), dev.len());
            d2 += host
                .iter()
                .zip(dev)
                .map(|(a, b)| (a - b).norm_sqr())
                .sum::<f64>();
            r2 += host.iter().map(|a| a.norm_sqr()).sum::<f64>();
        }
        let e = (d2 / r2).sqrt();
        eprintln!("seed {seed}, cuts {cuts:?}: device vs host twin {e:.2e}");
        assert!(e < 1e-11, "seed {seed}, cuts {cuts:?}: {e:e}");
    }
}
