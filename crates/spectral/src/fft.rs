//! Real-to-complex 3-D FFT on an `m^3` grid, parallel over pencils with rayon.
//!
//! Layout. The physical array is `m^3` reals, index `(i*m + j)*m + k` with `i` along x, `j` along y and
//! `k` along z (z fastest). The spectral array is `m * m * (m/2 + 1)` complex numbers, index
//! `(ix*m + iy)*mh + iz` with `mh = m/2 + 1`: the r2c transform runs along z (the last, contiguous
//! axis, with `realfft`), then complex transforms (rustfft) along y and along x.
//!
//! Normalisation. [`Fft3::forward`] is the unnormalised sum `sum_x u(x) exp(-i k.x)`;
//! [`Fft3::inverse`] is the unnormalised sum over the full Hermitian spectrum. `inverse(forward(u)) =
//! m^3 u`. Wavenumbers are relative to the grid index (the origin at grid point 0); the shift of the
//! grid to `-pi` only multiplies each mode by `(-1)^(kx+ky+kz)` and changes no diagnostic.
//!
//! Plans are made once in [`Fft3::new`]; every transform draws its scratch from a pool of per-task
//! buffers created once, so the transforms allocate nothing after the first call.

use num_complex::Complex64;
use rayon::prelude::*;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use rustfft::{Fft, FftPlanner};
use std::sync::{Arc, Mutex};

/// A raw pointer that may be shared between rayon tasks writing disjoint elements.
#[derive(Clone, Copy)]
struct SyncPtr(*mut Complex64);
// SAFETY: the pointer is only turned into rows that are disjoint between the tasks (one `iy`
// each, see the users below) while the array it points into outlives them.
unsafe impl Send for SyncPtr {}
// SAFETY: as above.
unsafe impl Sync for SyncPtr {}

/// Per-task scratch: a plane buffer for the transposes and the FFT scratch.
struct Scratch {
    plane: Vec<Complex64>,
    fft: Vec<Complex64>,
    row_in: Vec<f64>,
}

/// 3-D real FFT of size `m^3`.
pub struct Fft3 {
    m: usize,
    mh: usize,
    r2c: Arc<dyn RealToComplex<f64>>,
    c2r: Arc<dyn ComplexToReal<f64>>,
    fwd: Arc<dyn Fft<f64>>,
    inv: Arc<dyn Fft<f64>>,
    pool: Mutex<Vec<Scratch>>,
}

impl Fft3 {
    /// Plan transforms for an `m^3` grid (`m` even).
    pub fn new(m: usize) -> Self {
        assert!(m >= 2 && m % 2 == 0, "FFT size must be even");
        let mut rp = RealFftPlanner::<f64>::new();
        let mut cp = FftPlanner::<f64>::new();
        let r2c = rp.plan_fft_forward(m);
        let c2r = rp.plan_fft_inverse(m);
        let fwd = cp.plan_fft_forward(m);
        let inv = cp.plan_fft_inverse(m);
        let mh = m / 2 + 1;
        let nscratch = rayon::current_num_threads().max(1) * 2;
        let scratch_len = r2c
            .get_scratch_len()
            .max(c2r.get_scratch_len())
            .max(fwd.get_inplace_scratch_len())
            .max(inv.get_inplace_scratch_len());
        let pool = (0..nscratch)
            .map(|_| Scratch {
                plane: vec![Complex64::default(); m * mh],
                fft: vec![Complex64::default(); scratch_len],
                row_in: vec![0.0; m],
            })
            .collect();
        Fft3 {
            m,
            mh,
            r2c,
            c2r,
            fwd,
            inv,
            pool: Mutex::new(pool),
        }
    }

    /// Grid size `m`.
    pub fn m(&self) -> usize {
        self.m
    }

    /// Length of the last spectral axis, `m/2 + 1`.
    pub fn mh(&self) -> usize {
        self.mh
    }

    /// Number of real values, `m^3`.
    pub fn real_len(&self) -> usize {
        self.m * self.m * self.m
    }

    /// Number of complex values, `m^2 (m/2+1)`.
    pub fn complex_len(&self) -> usize {
        self.m * self.m * self.mh
    }

    fn take_scratch(&self) -> Scratch {
        let s = self.pool.lock().unwrap().pop();
        s.unwrap_or_else(|| Scratch {
            plane: vec![Complex64::default(); self.m * self.mh],
            fft: vec![
                Complex64::default();
                self.r2c
                    .get_scratch_len()
                    .max(self.c2r.get_scratch_len())
                    .max(self.fwd.get_inplace_scratch_len())
                    .max(self.inv.get_inplace_scratch_len())
            ],
            row_in: vec![0.0; self.m],
        })
    }

    fn give_scratch(&self, s: Scratch) {
        self.pool.lock().unwrap().push(s);
    }

    /// Forward transform. `input` (length `m^3`) is left unchanged; `out` has length `m^2 (m/2+1)`.
    pub fn forward(&self, input: &[f64], out: &mut [Complex64]) {
        self.forward_band(input, out, None)
    }

    /// Inverse transform. `spec` is used as workspace and destroyed; `out` receives `m^3` reals.
    pub fn inverse(&self, spec: &mut [Complex64], out: &mut [f64]) {
        self.inverse_band(spec, out, None)
    }

    /// Forward transform computing only the modes with `|kx|, |ky|, kz <= kcut` (the other entries of
    /// `out` are left unspecified). Skips the y and x pencils that are not needed.
    pub fn forward_band(&self, input: &[f64], out: &mut [Complex64], kcut: Option<usize>) {
        let (m, mh) = (self.m, self.mh);
        assert_eq!(input.len(), self.real_len());
        assert_eq!(out.len(), self.complex_len());
        // r2c along z, one row per (i, j).
        out.par_chunks_mut(m * mh)
            .zip(input.par_chunks(m * m))
            .for_each(|(oslab, islab)| {
                let mut s = self.take_scratch();
                for (orow, irow) in oslab.chunks_mut(mh).zip(islab.chunks(m)) {
                    s.row_in.copy_from_slice(irow);
                    self.r2c
                        .process_with_scratch(&mut s.row_in, orow, &mut s.fft)
                        .expect("r2c");
                }
                self.give_scratch(s);
            });
        self.complex_yx(out, true, kcut);
    }

    /// Inverse transform of a spectrum that is zero outside `|kx|, |ky|, kz <= kcut` (the zero pencils
    /// are not transformed). `spec` is destroyed.
    pub fn inverse_band(&self, spec: &mut [Complex64], out: &mut [f64], kcut: Option<usize>) {
        let (m, mh) = (self.m, self.mh);
        assert_eq!(out.len(), self.real_len());
        assert_eq!(spec.len(), self.complex_len());
        self.complex_yx(spec, false, kcut);
        spec.par_chunks_mut(m * mh)
            .zip(out.par_chunks_mut(m * m))
            .for_each(|(sslab, oslab)| {
                let mut s = self.take_scratch();
                for (srow, orow) in sslab.chunks_mut(mh).zip(oslab.chunks_mut(m)) {
                    // realfft rejects a DC or Nyquist bin with a nonzero imaginary part.
                    srow[0].im = 0.0;
                    srow[mh - 1].im = 0.0;
                    self.c2r
                        .process_with_scratch(srow, orow, &mut s.fft)
                        .expect("c2r");
                }
                self.give_scratch(s);
            });
    }

    /// Complex transforms along y then x (forward), or x then y (inverse), in place.
    fn complex_yx(&self, data: &mut [Complex64], forward: bool, kcut: Option<usize>) {
        let nz = kcut.map_or(self.mh, |k| (k + 1).min(self.mh));
        if forward {
            self.along_y(data, forward, nz);
            self.along_x(data, forward, nz, kcut);
        } else {
            self.along_x(data, forward, nz, kcut);
            self.along_y(data, forward, nz);
        }
    }

    /// Transform along y: each x-slab (contiguous, m rows of mh) is transposed to [iz][iy], transformed
    /// as a batch of contiguous length-m rows, and transposed back.
    fn along_y(&self, data: &mut [Complex64], forward: bool, nz: usize) {
        let (m, mh) = (self.m, self.mh);
        let plan = if forward { &self.fwd } else { &self.inv };
        data.par_chunks_mut(m * mh).for_each(|slab| {
            let mut s = self.take_scratch();
            for iy in 0..m {
                for iz in 0..nz {
                    s.plane[iz * m + iy] = slab[iy * mh + iz];
                }
            }
            plan.process_with_scratch(&mut s.plane[..nz * m], &mut s.fft);
            for iy in 0..m {
                for iz in 0..nz {
                    slab[iy * mh + iz] = s.plane[iz * m + iy];
                }
            }
            self.give_scratch(s);
        });
    }

    /// Transform along x: for each y index the plane [ix][iz] (rows of mh, stride m*mh) is gathered,
    /// transposed, transformed, and scattered back. Tasks write disjoint elements.
    fn along_x(&self, data: &mut [Complex64], forward: bool, nz: usize, kcut: Option<usize>) {
        let (m, mh) = (self.m, self.mh);
        let plan = if forward { &self.fwd } else { &self.inv };
        let ptr = SyncPtr(data.as_mut_ptr());
        (0..m).into_par_iter().for_each(|iy| {
            if let Some(kc) = kcut {
                if wavenumber(iy, m).unsigned_abs() as usize > kc {
                    return;
                }
            }
            let p = ptr;
            let mut s = self.take_scratch();
            for ix in 0..m {
                let base = (ix * m + iy) * mh;
                // SAFETY: indices (ix, iy, *) for this iy are touched by this task only.
                let row = unsafe { std::slice::from_raw_parts(p.0.add(base), mh) };
                for (iz, v) in row[..nz].iter().enumerate() {
                    s.plane[iz * m + ix] = *v;
                }
            }
            plan.process_with_scratch(&mut s.plane[..nz * m], &mut s.fft);
            for ix in 0..m {
                let base = (ix * m + iy) * mh;
                // SAFETY: as above, disjoint per iy.
                let row = unsafe { std::slice::from_raw_parts_mut(p.0.add(base), mh) };
                for (iz, v) in row[..nz].iter_mut().enumerate() {
                    *v = s.plane[iz * m + ix];
                }
            }
            self.give_scratch(s);
        });
    }
}

/// Signed wavenumber of index `i` on an axis of length `m`.
#[inline]
pub fn wavenumber(i: usize, m: usize) -> i64 {
    if i < m / 2 {
        i as i64
    } else {
        i as i64 - m as i64
    }
}
