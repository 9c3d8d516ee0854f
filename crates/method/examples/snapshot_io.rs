//! Size and write time of one particle snapshot, legacy ASCII `.vtk` against binary `.vtp`
//! (`vortex_method::vtp`), for `n^3` particles (default 256^3 = 16.8 M, CPU only).
//!
//! `cargo run --release -p vortex-method --example snapshot_io -- [n] [dir]`
//!
//! Under `mpirun -np R` (OpenMPI's `OMPI_COMM_WORLD_RANK`/`_SIZE`; no MPI library needed) each
//! process holds `n^3 / R` particles and writes its own `.vtp` piece, as the ranks of
//! `vortex run` do, after a barrier through files in `dir`; rank 0 also writes the `.pvtp`.

use rand::{Rng, SeedableRng};
use std::time::Instant;
use vortex_method::Particles;

/// Size and write time of one particle snapshot of `n^3` random particles.
#[derive(clap::Parser)]
struct Args {
    /// Particles per side (`n^3` in all).
    #[arg(default_value_t = 256)]
    n: usize,
    /// Directory the files are written to (and removed from).
    #[arg(default_value = "/tmp")]
    dir: std::path::PathBuf,
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let (n, dir) = (args.n, args.dir);
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<usize>().ok());
    let (rank, ranks) = (
        env("OMPI_COMM_WORLD_RANK").unwrap_or(0),
        env("OMPI_COMM_WORLD_SIZE").unwrap_or(1),
    );
    if ranks > 1 {
        return pieces(n, &dir, rank, ranks);
    }
    let count = n * n * n;
    let (p, v) = random(count, 1);
    let vtk = dir.join("snapshot_io.vtk");
    let t = Instant::now();
    vortex_method::diagnostics::write_vtk_particles(&vtk, &p, Some(&v), "snapshot_io").unwrap();
    let t_vtk = t.elapsed().as_secs_f64();
    let s_vtk = std::fs::metadata(&vtk).unwrap().len();
    std::fs::remove_file(&vtk).unwrap();
    let vtp = dir.join("snapshot_io.vtp");
    let t = Instant::now();
    vortex_method::vtp::write_particles(&vtp, &p, Some(&v)).unwrap();
    let t_vtp = t.elapsed().as_secs_f64();
    let s_vtp = std::fs::metadata(&vtp).unwrap().len();
    std::fs::remove_file(&vtp).unwrap();
    println!("{count} particles ({n}^3)");
    for (name, s, t) in [
        ("legacy ASCII .vtk", s_vtk, t_vtk),
        ("binary .vtp", s_vtp, t_vtp),
    ] {
        println!(
            "{name:>18}: {:.2} GB, {:.1} B/particle, write {:.2} s",
            s as f64 / 1e9,
            s as f64 / count as f64,
            t
        );
    }
}

fn random(count: usize, seed: u64) -> (Particles, Vec<[f64; 3]>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut r3 = || [rng.gen::<f64>(), rng.gen(), rng.gen()];
    let p = Particles {
        position: (0..count).map(|_| r3()).collect(),
        strength: (0..count).map(|_| r3()).collect(),
        sigma: vec![0.02; count],
        sigma0: vec![0.02; count],
    };
    let v = (0..count).map(|_| r3()).collect();
    (p, v)
}

/// This rank's piece of `n^3` particles: the write time from a common start.
fn pieces(n: usize, dir: &std::path::Path, rank: usize, ranks: usize) {
    let total = n * n * n;
    let count = total / ranks + usize::from(rank < total % ranks);
    let (p, v) = random(count, 1 + rank as u64);
    // barrier: every rank has its particles before any starts writing
    std::fs::write(dir.join(format!("snapshot_io.ready{rank}")), b"").unwrap();
    while (0..ranks).any(|r| !dir.join(format!("snapshot_io.ready{r}")).exists()) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let piece = |r: usize| format!("snapshot_io_p{r:04}.vtp");
    let t = Instant::now();
    vortex_method::vtp::write_particles(&dir.join(piece(rank)), &p, Some(&v)).unwrap();
    if rank == 0 {
        let names: Vec<String> = (0..ranks).map(piece).collect();
        vortex_method::vtp::write_pvtp(&dir.join("snapshot_io.pvtp"), &names, true).unwrap();
    }
    let t = t.elapsed().as_secs_f64();
    let s = std::fs::metadata(dir.join(piece(rank))).unwrap().len();
    println!(
        "rank {rank}/{ranks}: piece of {count} particles, {:.2} GB, {:.1} B/particle, write {t:.2} s",
        s as f64 / 1e9,
        s as f64 / count as f64
    );
}
