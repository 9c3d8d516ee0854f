//! Periodic FMM and PPM on the GPU against the Ewald-split reference (`vortex_fmm::periodic::ewald`),
//! the GPU twin of `vortex-fmm`'s `periodic_accuracy` example (which runs the CPU backend).
//!
//! ```text
//! cargo run --release -p vortex-gpu --example periodic_ewald -- 1e5,1e6 10 4 1000
//! #                                                    N list ^   p ^  K ^  ^ sampled targets
//! ```
//!
//! Zero-mean standard set (`docs/CONVENTIONS.md`), every particle a target, errors (relative L2) on
//! targets sampled evenly from the set; the Ewald reference runs on the CPU (all cores). Each
//! method is evaluated twice and the second (compiled kernels) is timed. Exits 1 if a velocity
//! error exceeds 1e-4, 2 without a usable GPU.

use std::time::Instant;
use vortex_fmm::periodic::{EwaldParams, EwaldReference, Periodic};
use vortex_fmm::testsets::{generate, Distribution};
use vortex_fmm::{evaluate, relative_l2_error, EvalParams, Method, Targets};

/// Periodic FMM and PPM on the GPU against the Ewald reference.
#[derive(clap::Parser)]
struct Args {
    /// Particle counts, comma-separated (e.g. `1e5,1e6`).
    #[arg(default_value = "1e5", value_parser = counts)]
    ns: ::std::vec::Vec<usize>,
    /// Expansion order p.
    #[arg(default_value_t = 10)]
    order: usize,
    /// Image levels K.
    #[arg(default_value_t = 4)]
    levels: usize,
    /// Targets sampled for the error.
    #[arg(default_value_t = 1000)]
    targets: usize,
}

fn counts(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|v| {
            v.parse::<f64>()
                .map(|x| x as usize)
                .map_err(|_| format!("'{v}' is not a number"))
        })
        .collect()
}

fn main() {
    let a = <Args as clap::Parser>::parse();
    let (ns, order, levels, m) = (a.ns, a.order, a.levels, a.targets);
    if !vortex_gpu::available() {
        eprintln!("periodic_ewald: no usable GPU (driver or device missing)");
        std::process::exit(2);
    }
    let be = vortex_gpu::CudaBackend::new(0).expect("CUDA backend");
    println!(
        "# periodic_ewald: p = {order}, K = {levels}, {m} sampled targets, GPU {}",
        be.device().name()
    );
    println!("| N | method | velocity error | stretching error | GPU s | Ewald s |");
    println!("|---|---|---|---|---|---|");
    let mut fail = false;
    for &n in &ns {
        let s = generate(Distribution::Uniform, n, 2026, true);
        let step = (n / m.max(1)).max(1);
        let idx: Vec<usize> = (0..n).step_by(step).take(m).collect();
        let t = Targets {
            position: idx.iter().map(|&i| s.position[i]).collect(),
            strength: idx.iter().map(|&i| s.strength[i]).collect(),
        };
        let t0 = Instant::now();
        let reference = EwaldReference::new(&s, &EwaldParams::default(), t.len())
            .and_then(|e| e.evaluate(&t))
            .expect("Ewald reference");
        let t_ewald = t0.elapsed().as_secs_f64();
        for method in [Method::Fmm, Method::Ppm] {
            let params = EvalParams {
                method,
                order,
                periodic: Some(Periodic {
                    box_length: 2.0 * std::f64::consts::PI,
                    image_levels: levels,
                }),
                ..EvalParams::default()
            };
            let all = s.as_targets();
            let _ = evaluate(&be, &params, &s, &all).expect("GPU evaluation");
            let ev = evaluate(&be, &params, &s, &all).expect("GPU evaluation");
            let u: Vec<_> = idx.iter().map(|&i| ev.fields.velocity[i]).collect();
            let st: Vec<_> = idx.iter().map(|&i| ev.fields.stretching[i]).collect();
            let eu = relative_l2_error(&u, &reference.velocity);
            let es = relative_l2_error(&st, &reference.stretching);
            fail |= eu.is_nan() || eu > 1e-4;
            println!(
                "| {n:.0e} | {method} | {eu:.2e} | {es:.2e} | {:.3} | {t_ewald:.1} |",
                ev.times.total
            );
        }
    }
    if fail {
        eprintln!("periodic_ewald: a velocity error exceeds 1e-4");
        std::process::exit(1);
    }
}
