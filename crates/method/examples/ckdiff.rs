//! `cargo run -p vortex-method --release --example ckdiff -- A B [TOL]`: compares two
//! checkpoints (each a single file, a manifest of per-rank pieces or a run directory: its
//! current checkpoint; same step, same particles in global-id order) and exits with status 1 when a
//! position, strength, core radius or AB2 history value differs by more than `TOL` (default
//! 1e-12) relative to the largest magnitude of its kind. Used by `crates/method/ci-mpi.sh` to
//! compare runs on different numbers of ranks.

fn rel(a: &[f64], b: &[f64]) -> f64 {
    let scale = a.iter().chain(b).fold(0.0f64, |m, v| m.max(v.abs()));
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / scale.max(f64::MIN_POSITIVE))
        .fold(0.0, f64::max)
}

fn flat(v: &[[f64; 3]]) -> Vec<f64> {
    v.iter().flatten().copied().collect()
}

/// Compares two checkpoints of the same run state; exit status 1 when they differ beyond TOL,
/// 2 when one cannot be read.
#[derive(clap::Parser)]
struct Args {
    /// First checkpoint (`checkpoint.bin`, `checkpoint.manifest` or a run directory).
    a: std::path::PathBuf,
    /// Second checkpoint (the same kinds).
    b: std::path::PathBuf,
    /// Largest accepted difference relative to the largest magnitude of each quantity.
    #[arg(default_value_t = 1e-12)]
    tol: f64,
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let tol = args.tol;
    let read = |p: &std::path::Path| match vortex_method::checkpoint::read_whole(p) {
        Ok(c) => c.state,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let (x, y) = (read(&args.a), read(&args.b));
    let mut bad = Vec::new();
    if (x.step, x.step_reset, x.reinterpolations) != (y.step, y.step_reset, y.reinterpolations)
        || x.particles.len() != y.particles.len()
        || x.previous.is_some() != y.previous.is_some()
    {
        eprintln!(
            "different states: step {} vs {}, {} vs {} particles",
            x.step,
            y.step,
            x.particles.len(),
            y.particles.len()
        );
        std::process::exit(1);
    }
    let (p, q) = (&x.particles, &y.particles);
    let mut diffs = vec![
        ("position", rel(&flat(&p.position), &flat(&q.position))),
        ("strength", rel(&flat(&p.strength), &flat(&q.strength))),
        ("sigma", rel(&p.sigma, &q.sigma)),
    ];
    if let (Some(f), Some(g)) = (&x.previous, &y.previous) {
        diffs.push(("velocity", rel(&flat(&f.velocity), &flat(&g.velocity))));
        diffs.push((
            "stretching",
            rel(&flat(&f.stretching), &flat(&g.stretching)),
        ));
    }
    for (what, d) in &diffs {
        if d.is_nan() || *d > tol {
            bad.push(format!("{what} {d:.3e}"));
        }
    }
    let bitwise = x == y;
    println!(
        "step {}, {} particles: {}{}",
        x.step,
        p.len(),
        diffs
            .iter()
            .map(|(w, d)| format!("{w} {d:.2e}"))
            .collect::<Vec<_>>()
            .join(", "),
        if bitwise { " (bitwise equal)" } else { "" }
    );
    if !bad.is_empty() {
        eprintln!("checkpoints differ beyond {tol:e}: {}", bad.join(", "));
        std::process::exit(1);
    }
}
