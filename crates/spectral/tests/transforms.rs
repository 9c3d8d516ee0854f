use num_complex::Complex64;
use vortex_spectral::fft::Fft3;

fn lcg(seed: &mut u64) -> f64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 11) as f64) / (1u64 << 53) as f64 - 0.5
}

#[test]
fn round_trip_and_parseval() {
    for m in [8usize, 12, 16, 24, 32, 48, 64, 96] {
        let fft = Fft3::new(m);
        let mut seed = 7u64;
        let u: Vec<f64> = (0..m * m * m).map(|_| lcg(&mut seed)).collect();
        let mut spec = vec![Complex64::default(); fft.complex_len()];
        fft.forward(&u, &mut spec);
        // Parseval with the r2c weights: sum u^2 = (1/m^3) sum_k w |U|^2
        let mh = m / 2 + 1;
        let lhs: f64 = u.iter().map(|v| v * v).sum();
        let rhs: f64 = spec
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let iz = i % mh;
                let w = if iz == 0 || iz == m / 2 { 1.0 } else { 2.0 };
                w * v.norm_sqr()
            })
            .sum::<f64>()
            / (m * m * m) as f64;
        assert!(
            (lhs - rhs).abs() < 1e-12 * lhs,
            "parseval m={m}: {lhs} {rhs}"
        );
        let mut back = vec![0.0; m * m * m];
        fft.inverse(&mut spec, &mut back);
        let scale = 1.0 / (m * m * m) as f64;
        let err = u
            .iter()
            .zip(&back)
            .map(|(a, b)| (a - b * scale).abs())
            .fold(0.0f64, f64::max);
        assert!(err < 1e-13, "round trip m={m}: {err}");
    }
}

#[test]
fn single_mode_lands_in_right_bin() {
    let m = 16;
    let fft = Fft3::new(m);
    let (kx, ky, kz) = (3i64, -5i64, 2i64);
    let mut u = vec![0.0; m * m * m];
    for i in 0..m {
        for j in 0..m {
            for k in 0..m {
                let ph = 2.0
                    * std::f64::consts::PI
                    * ((kx * i as i64 + ky * j as i64 + kz * k as i64) as f64)
                    / m as f64;
                u[(i * m + j) * m + k] = ph.cos();
            }
        }
    }
    let mut spec = vec![Complex64::default(); fft.complex_len()];
    fft.forward(&u, &mut spec);
    let mh = m / 2 + 1;
    let idx = ((kx.rem_euclid(m as i64) as usize) * m + ky.rem_euclid(m as i64) as usize) * mh
        + kz as usize;
    let v = spec[idx] / (m * m * m) as f64;
    assert!((v.re - 0.5).abs() < 1e-12 && v.im.abs() < 1e-12, "{v}");
}
