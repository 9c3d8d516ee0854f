//! Time per RK4 step: `bench_step N [STEPS] [two-thirds]` on the Taylor-Green vortex.
use spectral::{config::Dealias, initial, Solver, StepMode};
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let steps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let dealias = if args.iter().any(|a| a == "two-thirds") {
        Dealias::TwoThirds
    } else {
        Dealias::ThreeHalves
    };
    let f = initial::taylor_green(n);
    let t = Instant::now();
    let mut s = Solver::with_field(&f, 1.0 / 1600.0, dealias, StepMode::Fixed(1e-3)).unwrap();
    let setup = t.elapsed().as_secs_f64();
    s.step().unwrap(); // warm-up
    let t = Instant::now();
    for _ in 0..steps {
        s.step().unwrap();
    }
    let per = t.elapsed().as_secs_f64() / steps as f64;
    println!(
        "n={n} dealias={dealias:?} padded={} threads={} setup={setup:.3}s step={per:.4}s energy={:.12}",
        s.padded_n(),
        rayon::current_num_threads(),
        s.energy()
    );
}
