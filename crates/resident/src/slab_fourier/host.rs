//! The CPU twin of [`super::SlabFourier`]: the same layouts, the same transpose plan and the
//! same pointwise factors, the transforms by realfft (2-D real-to-complex per plane: rows
//! along `f`, then columns along `m`) and rustfft (1-D along `s`), unnormalised as cuFFT's.

use super::GridSpectrum;
use super::{
    pencils_to_slabs, reduce_spectrum, slabs_to_pencils, wavenumber_solve, wavenumber_spectrum,
    SlabError, SlabLayout,
};
use num_complex::Complex64;
use rayon::prelude::*;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use rustfft::{Fft, FftPlanner};
use std::sync::Arc;
use vortex_domain::Comm;

/// The slab-decomposed transforms of one rank on the CPU.
pub struct HostSlabFourier {
    layout: SlabLayout,
    r2c: Arc<dyn RealToComplex<f64>>,
    c2r: Arc<dyn ComplexToReal<f64>>,
    fwd: Arc<dyn Fft<f64>>,
    inv: Arc<dyn Fft<f64>>,
    /// `[s - s0][km][kf][3]`.
    slab: Vec<Complex64>,
    /// `[ks][km - m0][kf][3]`.
    pencil: Vec<Complex64>,
    /// The messages of the transposes (`2 slab_len` doubles, [`SlabLayout::wire_block`]).
    wire: Vec<f64>,
    /// Partial sums `[shells..., E, Z]` of the last Biot-Savart step's velocity spectrum.
    partial: Option<Vec<f64>>,
}

impl HostSlabFourier {
    pub fn new(layout: SlabLayout) -> Self {
        let n = layout.n();
        let mut real = RealFftPlanner::<f64>::new();
        let mut cplx = FftPlanner::<f64>::new();
        Self {
            r2c: real.plan_fft_forward(n),
            c2r: real.plan_fft_inverse(n),
            fwd: cplx.plan_fft_forward(n),
            inv: cplx.plan_fft_inverse(n),
            slab: vec![Complex64::default(); layout.slab_len()],
            pencil: vec![Complex64::default(); layout.pencil_len()],
            wire: vec![0.0; 2 * layout.slab_len()],
            partial: None,
            layout,
        }
    }

    pub fn layout(&self) -> &SlabLayout {
        &self.layout
    }

    /// `beta = A^-1 omega` in place of this rank's planes `field` (collective; `inv_eig` =
    /// `1 / S(k)`, `k = 0..n`, `c` the Gaussian's normalisation `(2 pi sigma^2)^(-3/2)`): the
    /// factor of [`super::SlabFourier::solve_rbf`].
    pub fn solve_rbf(
        &mut self,
        comm: &dyn Comm,
        field: &mut [f64],
        inv_eig: &[f64],
        c: f64,
    ) -> Result<(), SlabError> {
        self.layout.check_eig(inv_eig.len())?;
        self.forward(comm, field)?;
        let scale = 1.0 / (c * self.layout.n().pow(3) as f64);
        let layout = &self.layout;
        self.pencil
            .par_chunks_mut(3)
            .enumerate()
            .for_each(|(t, w)| {
                let [s, m, f] = layout.pencil_index(t);
                let g = scale * inv_eig[s] * inv_eig[m] * inv_eig[f];
                w.iter_mut().for_each(|v| *v *= g);
            });
        self.inverse(comm, field)
    }

    /// The periodic velocity of the vorticity `field` (this rank's planes, box length `l` in
    /// length units; collective): its spectrum is kept for [`Self::spectrum`]; with `physical`,
    /// the velocity replaces `field`.
    pub fn biot_savart(
        &mut self,
        comm: &dyn Comm,
        field: &mut [f64],
        l: f64,
        physical: bool,
    ) -> Result<(), SlabError> {
        self.forward(comm, field)?;
        let scale = 1.0 / self.layout.n().pow(3) as f64;
        let inv_kscale = l / (2.0 * std::f64::consts::PI);
        let layout = &self.layout;
        self.pencil
            .par_chunks_mut(3)
            .enumerate()
            .for_each(|(t, w)| {
                let idx = layout.pencil_index(t);
                let k = layout.wavevector(idx, wavenumber_solve);
                let k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
                if k2 == 0.0 || layout.nyquist(idx) {
                    w.fill(Complex64::default());
                    return;
                }
                // i k x w scaled
                let g = Complex64::new(0.0, scale * inv_kscale / k2);
                let u = [
                    g * (w[2] * k[1] - w[1] * k[2]),
                    g * (w[0] * k[2] - w[2] * k[0]),
                    g * (w[1] * k[0] - w[0] * k[1]),
                ];
                w.copy_from_slice(&u);
            });
        self.partial = Some(spectrum_partial(&self.layout, &self.pencil));
        if physical {
            self.inverse(comm, field)?;
        }
        Ok(())
    }

    /// Shell spectrum, energy and enstrophy of the velocity of the last
    /// [`Self::biot_savart`], in integer wavenumbers, summed over the ranks (collective).
    pub fn spectrum(&self, comm: &dyn Comm) -> Result<GridSpectrum, SlabError> {
        let p = self.partial.clone().ok_or(SlabError::NoSpectrum)?;
        Ok(reduce_spectrum(comm, p))
    }

    /// Lattice field (this rank's planes) to the pencil spectrum.
    fn forward(&mut self, comm: &dyn Comm, field: &[f64]) -> Result<(), SlabError> {
        self.layout.check_comm(comm)?;
        self.layout.check_field(field.len())?;
        let (n, nh) = (self.layout.n(), self.layout.nh());
        let planes = self.layout.planes(self.layout.rank()).len();
        if planes > 0 {
            let (fwd, r2c) = (&*self.fwd, &*self.r2c);
            self.slab
                .par_chunks_mut(3 * n * nh)
                .zip(field[..3 * n * n * planes].par_chunks(3 * n * n))
                .for_each(|(out, plane)| plane_forward(n, fwd, r2c, plane, out));
        }
        slabs_to_pencils(
            &self.layout,
            comm,
            bytemuck::cast_slice(&self.slab),
            &mut self.wire,
            bytemuck::cast_slice_mut(&mut self.pencil),
        )?;
        along_s(&self.layout, &*self.fwd, &mut self.pencil);
        Ok(())
    }

    /// The pencil spectrum back to the lattice field (destroys the pencil spectrum).
    fn inverse(&mut self, comm: &dyn Comm, field: &mut [f64]) -> Result<(), SlabError> {
        along_s(&self.layout, &*self.inv, &mut self.pencil);
        pencils_to_slabs(
            &self.layout,
            comm,
            bytemuck::cast_slice(&self.pencil),
            &mut self.wire,
            bytemuck::cast_slice_mut(&mut self.slab),
        )?;
        let (n, nh) = (self.layout.n(), self.layout.nh());
        let planes = self.layout.planes(self.layout.rank()).len();
        if planes > 0 {
            let (inv, c2r) = (&*self.inv, &*self.c2r);
            self.slab
                .par_chunks(3 * n * nh)
                .zip(field[..3 * n * n * planes].par_chunks_mut(3 * n * n))
                .for_each(|(spec, plane)| plane_inverse(n, inv, c2r, spec, plane));
        }
        Ok(())
    }
}

/// 2-D transform of one plane `[m][f][3]` to `[km][kf][3]`.
fn plane_forward(
    n: usize,
    fwd: &dyn Fft<f64>,
    r2c: &dyn RealToComplex<f64>,
    plane: &[f64],
    out: &mut [Complex64],
) {
    let nh = n / 2 + 1;
    let mut tmp = vec![Complex64::default(); n * nh];
    let mut row = vec![0.0; n];
    let mut col = vec![Complex64::default(); n];
    for c in 0..3 {
        for (m, t) in tmp.chunks_exact_mut(nh).enumerate() {
            row.iter_mut()
                .enumerate()
                .for_each(|(f, v)| *v = plane[3 * (m * n + f) + c]);
            r2c.process(&mut row, t)
                .expect("realfft forward: lengths of the plan");
        }
        for kf in 0..nh {
            col.iter_mut()
                .enumerate()
                .for_each(|(m, v)| *v = tmp[m * nh + kf]);
            fwd.process(&mut col);
            for (km, v) in col.iter().enumerate() {
                out[3 * (km * nh + kf) + c] = *v;
            }
        }
    }
}

/// Inverse 2-D transform of one plane `[km][kf][3]` to `[m][f][3]` (the imaginary parts that a
/// real field's half spectrum cannot hold, at `kf = 0` and `kf = n/2`, ignored as cuFFT does).
fn plane_inverse(
    n: usize,
    inv: &dyn Fft<f64>,
    c2r: &dyn ComplexToReal<f64>,
    spec: &[Complex64],
    plane: &mut [f64],
) {
    let nh = n / 2 + 1;
    let mut tmp = vec![Complex64::default(); n * nh];
    let mut row = vec![0.0; n];
    let mut col = vec![Complex64::default(); n];
    for c in 0..3 {
        for kf in 0..nh {
            col.iter_mut()
                .enumerate()
                .for_each(|(km, v)| *v = spec[3 * (km * nh + kf) + c]);
            inv.process(&mut col);
            for (m, v) in col.iter().enumerate() {
                tmp[m * nh + kf] = *v;
            }
        }
        for (m, t) in tmp.chunks_exact_mut(nh).enumerate() {
            t[0].im = 0.0;
            if n % 2 == 0 {
                t[nh - 1].im = 0.0;
            }
            c2r.process(t, &mut row)
                .expect("realfft inverse: lengths of the plan");
            for (f, v) in row.iter().enumerate() {
                plane[3 * (m * n + f) + c] = *v;
            }
        }
    }
}

/// The 1-D transforms along `s` of every column of the pencil spectrum (stride `3 nq nh`).
fn along_s(layout: &SlabLayout, fft: &dyn Fft<f64>, pencil: &mut [Complex64]) {
    let n = layout.n();
    let stride = pencil.len() / n;
    let mut col = vec![Complex64::default(); n];
    for j in 0..stride {
        col.iter_mut()
            .enumerate()
            .for_each(|(s, v)| *v = pencil[s * stride + j]);
        fft.process(&mut col);
        for (s, v) in col.iter().enumerate() {
            pencil[s * stride + j] = *v;
        }
    }
}

/// This rank's partial sums `[E(k) for the shells..., E, Z]` of the normalised velocity pencil
/// spectrum (the sums of `r_spectrum_partial`: weight 1 on the planes `kf = 0` and `kf = n/2`
/// of the half axis, 2 elsewhere; shell `round(|k|)`), in element order.
pub fn spectrum_partial(layout: &SlabLayout, pencil: &[Complex64]) -> Vec<f64> {
    let n = layout.n();
    let ns = layout.shells();
    let mut out = vec![0.0; ns + 2];
    for (t, u) in pencil.chunks_exact(3).enumerate() {
        let idx = layout.pencil_index(t);
        let k = layout.wavevector(idx, wavenumber_spectrum);
        let w = if idx[2] == 0 || idx[2] == n / 2 {
            1.0
        } else {
            2.0
        };
        let e: f64 = u.iter().map(|v| v.norm_sqr()).sum();
        let curl = [
            u[2] * k[1] - u[1] * k[2],
            u[0] * k[2] - u[2] * k[0],
            u[1] * k[0] - u[0] * k[1],
        ];
        let z: f64 = curl.iter().map(|v| v.norm_sqr()).sum();
        let shell = (k[0] * k[0] + k[1] * k[1] + k[2] * k[2]).sqrt().round() as usize;
        if shell < ns {
            out[shell] += 0.5 * w * e;
        }
        out[ns] += 0.5 * w * e;
        out[ns + 1] += 0.5 * w * z;
    }
    out
}
