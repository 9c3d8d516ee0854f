//! Time per RK4 step: `bench_step N [STEPS] [--two-thirds]` on the Taylor-Green vortex (CPU).
use std::time::Instant;
use vortex_spectral::{config::Dealias, initial, Solver, StepMode};

/// Time per RK4 step of the CPU solver on the Taylor-Green vortex.
#[derive(clap::Parser)]
struct Args {
    /// Grid points per side.
    #[arg(default_value_t = 64)]
    n: usize,
    /// Timed steps (after one warm-up step).
    #[arg(default_value_t = 10)]
    steps: usize,
    /// Two-thirds truncation instead of 3/2 padding.
    #[arg(long)]
    two_thirds: bool,
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let (n, steps) = (args.n, args.steps);
    let dealias = if args.two_thirds {
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
