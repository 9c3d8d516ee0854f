//! Physical-space fields on the `n^3` grid and their spectral counterparts.
//!
//! Grid point `(i, j, k)` sits at `(-pi + 2 pi i / n, -pi + 2 pi j / n, -pi + 2 pi k / n)`
//! (see `docs/CONVENTIONS.md`), and is stored at index `(i*n + j)*n + k`: `i` along x, `j` along y,
//! `k` along z, **z fastest** (C order of an array of shape `(n, n, n)` indexed `[i][j][k]`).

use crate::fft::{wavenumber, Fft3};
use num_complex::Complex64;
use rayon::prelude::*;

/// A velocity (or any vector) field on the `n^3` grid of the box `[-pi, pi)^3`: three real arrays of
/// `n^3` values, index `(i*n + j)*n + k` (z fastest).
#[derive(Clone, Debug, PartialEq)]
pub struct VelocityField {
    /// Grid points per direction.
    pub n: usize,
    /// Components `[u_x, u_y, u_z]`, each of length `n^3`.
    pub u: [Vec<f64>; 3],
}

impl VelocityField {
    /// A zero field.
    pub fn zeros(n: usize) -> Self {
        let len = n * n * n;
        VelocityField {
            n,
            u: [vec![0.0; len], vec![0.0; len], vec![0.0; len]],
        }
    }

    /// Linear index of grid point `(i, j, k)`.
    #[inline]
    pub fn index(&self, i: usize, j: usize, k: usize) -> usize {
        (i * self.n + j) * self.n + k
    }

    /// Coordinate of grid index `i` along any axis: `-pi + 2 pi i / n`.
    #[inline]
    pub fn coord(&self, i: usize) -> f64 {
        grid_coord(i, self.n)
    }

    /// Build a field from a function of `(x, y, z)` evaluated at the grid points.
    pub fn from_fn<F>(n: usize, f: F) -> Self
    where
        F: Fn(f64, f64, f64) -> [f64; 3] + Sync,
    {
        let mut field = VelocityField::zeros(n);
        let [ux, uy, uz] = &mut field.u;
        ux.par_chunks_mut(n * n)
            .zip(uy.par_chunks_mut(n * n))
            .zip(uz.par_chunks_mut(n * n))
            .enumerate()
            .for_each(|(i, ((a, b), c))| {
                let x = grid_coord(i, n);
                for j in 0..n {
                    let y = grid_coord(j, n);
                    for k in 0..n {
                        let z = grid_coord(k, n);
                        let v = f(x, y, z);
                        let idx = j * n + k;
                        a[idx] = v[0];
                        b[idx] = v[1];
                        c[idx] = v[2];
                    }
                }
            });
        field
    }

    /// Largest absolute value of any component.
    pub fn max_abs(&self) -> f64 {
        self.u
            .iter()
            .flat_map(|c| c.iter())
            .fold(0.0f64, |a, &b| a.max(b.abs()))
    }
}

/// Coordinate `-pi + 2 pi i / n` of grid index `i`.
#[inline]
pub fn grid_coord(i: usize, n: usize) -> f64 {
    -std::f64::consts::PI + 2.0 * std::f64::consts::PI * i as f64 / n as f64
}

/// Fourier coefficients of a real vector field: three arrays of `n * n * (n/2+1)` complex values,
/// index `(ix*n + iy)*(n/2+1) + iz`, normalised so that `u(x) = sum_k uhat(k) exp(i k.x)` (the forward
/// sum divided by `n^3`).
#[derive(Clone, Debug)]
pub struct SpectralField {
    /// Grid points per direction.
    pub n: usize,
    /// Components.
    pub c: [Vec<Complex64>; 3],
}

impl SpectralField {
    /// Relative L2 difference `|other - self| / |self|` over all coefficients of the three
    /// components (`self` the reference; a zero reference counts as 1e-300).
    pub fn relative_diff(&self, other: &SpectralField) -> f64 {
        let (mut num, mut den) = (0.0, 0.0);
        for c in 0..3 {
            for (x, y) in self.c[c].iter().zip(&other.c[c]) {
                num += (x - y).norm_sqr();
                den += x.norm_sqr();
            }
        }
        (num / den.max(1e-300)).sqrt()
    }

    /// Zero spectral field for an `n^3` grid.
    pub fn zeros(n: usize) -> Self {
        let len = n * n * (n / 2 + 1);
        SpectralField {
            n,
            c: [
                vec![Complex64::default(); len],
                vec![Complex64::default(); len],
                vec![Complex64::default(); len],
            ],
        }
    }

    /// Transform a physical field (uses a fresh plan; not for hot loops).
    pub fn from_physical(field: &VelocityField) -> Self {
        let fft = Fft3::new(field.n);
        Self::from_physical_with(field, &fft)
    }

    /// Transform a physical field with a given plan of size `field.n`.
    pub fn from_physical_with(field: &VelocityField, fft: &Fft3) -> Self {
        let n = field.n;
        assert_eq!(fft.m(), n);
        let mut s = SpectralField::zeros(n);
        let scale = 1.0 / (n * n * n) as f64;
        for c in 0..3 {
            fft.forward(&field.u[c], &mut s.c[c]);
            s.c[c].par_iter_mut().for_each(|v| *v *= scale);
        }
        s
    }

    /// Back to physical space (uses a fresh plan).
    pub fn to_physical(&self) -> VelocityField {
        let fft = Fft3::new(self.n);
        self.to_physical_with(&fft)
    }

    /// Back to physical space with a given plan of size `n`.
    pub fn to_physical_with(&self, fft: &Fft3) -> VelocityField {
        let mut f = VelocityField::zeros(self.n);
        let mut tmp = vec![Complex64::default(); fft.complex_len()];
        for c in 0..3 {
            tmp.copy_from_slice(&self.c[c]);
            fft.inverse(&mut tmp, &mut f.u[c]);
        }
        f
    }

    /// Curl `i k x uhat`.
    pub fn curl(&self) -> SpectralField {
        let n = self.n;
        let nh = n / 2 + 1;
        let mut w = SpectralField::zeros(n);
        let i = Complex64::new(0.0, 1.0);
        for idx in 0..n * n * nh {
            let (kx, ky, kz) = wavevector(idx, n);
            let (a, b, c) = (self.c[0][idx], self.c[1][idx], self.c[2][idx]);
            w.c[0][idx] = i * (ky * c - kz * b);
            w.c[1][idx] = i * (kz * a - kx * c);
            w.c[2][idx] = i * (kx * b - ky * a);
        }
        w
    }
}

/// Wavevector `(kx, ky, kz)` of spectral index `idx` on an `n^3` grid (signed; the Nyquist index
/// `n/2` maps to `-n/2` along x and y and to `+n/2` along z).
#[inline]
pub fn wavevector(idx: usize, n: usize) -> (f64, f64, f64) {
    let nh = n / 2 + 1;
    let iz = idx % nh;
    let iy = (idx / nh) % n;
    let ix = idx / (nh * n);
    (
        wavenumber(ix, n) as f64,
        wavenumber(iy, n) as f64,
        iz as f64,
    )
}

/// Weight of a half-spectrum entry in sums over the full spectrum: 1 for `iz = 0` and `iz = n/2`,
/// 2 otherwise (the conjugate mode is not stored).
#[inline]
pub fn r2c_weight(iz: usize, n: usize) -> f64 {
    if iz == 0 || iz == n / 2 {
        1.0
    } else {
        2.0
    }
}
