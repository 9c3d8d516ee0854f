//! Size and write time of one particle snapshot, legacy ASCII `.vtk` against binary `.vtp`
//! (`method::vtp`), for `n^3` particles (default 256^3 = 16.8 M, CPU only).
//!
//! `cargo run --release -p vortex-method --example snapshot_io -- [n] [dir]`

use method::Particles;
use rand::{Rng, SeedableRng};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(256);
    let dir = std::path::PathBuf::from(args.get(2).cloned().unwrap_or_else(|| "/tmp".into()));
    let count = n * n * n;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let mut r3 = || [rng.gen::<f64>(), rng.gen(), rng.gen()];
    let p = Particles {
        position: (0..count).map(|_| r3()).collect(),
        strength: (0..count).map(|_| r3()).collect(),
        sigma: vec![0.02; count],
        sigma0: vec![0.02; count],
    };
    let v: Vec<[f64; 3]> = (0..count).map(|_| r3()).collect();
    let vtk = dir.join("snapshot_io.vtk");
    let t = Instant::now();
    method::diagnostics::write_vtk_particles(&vtk, &p, Some(&v), "snapshot_io").unwrap();
    let t_vtk = t.elapsed().as_secs_f64();
    let s_vtk = std::fs::metadata(&vtk).unwrap().len();
    std::fs::remove_file(&vtk).unwrap();
    let vtp = dir.join("snapshot_io.vtp");
    let t = Instant::now();
    method::vtp::write_particles(&vtp, &p, Some(&v)).unwrap();
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
