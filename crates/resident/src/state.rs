//! The particle state on the device, in f64 (`[N][3]` rows as on the host), and the host
//! copies of it that checkpoints and snapshots need.

use crate::kernels::{per_element, Kernels, NSLOT, RED_PER_THREAD, RED_THREADS};
use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;
use vortex_cuda::GpuResult;
use vortex_method::rhs::Derivatives;
use vortex_method::Particles;

/// Positions, strengths, core radii (current and at the last reset) of `n` particles, index =
/// global id.
pub struct DeviceParticles {
    pub n: usize,
    /// `3 n`: `x, y, z` per particle.
    pub pos: CudaSlice<f64>,
    /// `3 n`: `alpha` per particle.
    pub alpha: CudaSlice<f64>,
    pub sigma: CudaSlice<f64>,
    pub sigma0: CudaSlice<f64>,
}

/// Velocity and stretching of `n` particles (`3 n` each).
pub struct DeviceFields {
    pub vel: CudaSlice<f64>,
    pub str: CudaSlice<f64>,
}

fn flat(v: &[[f64; 3]]) -> &[f64] {
    v.as_flattened()
}

fn rows(v: Vec<f64>) -> Vec<[f64; 3]> {
    v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()
}

impl DeviceParticles {
    pub fn upload(s: &Arc<CudaStream>, p: &Particles) -> GpuResult<Self> {
        Ok(Self {
            n: p.len(),
            pos: s.clone_htod(flat(&p.position))?,
            alpha: s.clone_htod(flat(&p.strength))?,
            sigma: s.clone_htod(&p.sigma)?,
            sigma0: s.clone_htod(&p.sigma0)?,
        })
    }

    /// Zeroed buffers for `n` particles.
    pub fn zeros(s: &Arc<CudaStream>, n: usize) -> GpuResult<Self> {
        Ok(Self {
            n,
            pos: s.alloc_zeros(3 * n)?,
            alpha: s.alloc_zeros(3 * n)?,
            sigma: s.alloc_zeros(n)?,
            sigma0: s.alloc_zeros(n)?,
        })
    }

    pub fn download(&self, s: &Arc<CudaStream>) -> GpuResult<Particles> {
        Ok(Particles {
            position: rows(s.clone_dtoh(&self.pos)?),
            strength: rows(s.clone_dtoh(&self.alpha)?),
            sigma: s.clone_dtoh(&self.sigma)?,
            sigma0: s.clone_dtoh(&self.sigma0)?,
        })
    }

    /// A device copy (the Heun predictor starts from one).
    pub fn duplicate(&self, s: &Arc<CudaStream>) -> GpuResult<Self> {
        Ok(Self {
            n: self.n,
            pos: s.clone_dtod(&self.pos)?,
            alpha: s.clone_dtod(&self.alpha)?,
            sigma: s.clone_dtod(&self.sigma)?,
            sigma0: s.clone_dtod(&self.sigma0)?,
        })
    }

    /// The moments of the particles ([`Moments`]), reduced in a fixed order; `box_length`
    /// > 0 wraps the positions for the dipole sum.
    pub fn moments(&self, k: &Kernels, s: &Arc<CudaStream>, box_length: f64) -> GpuResult<Moments> {
        let per_block = RED_THREADS as usize * RED_PER_THREAD;
        let nb = self.n.div_ceil(per_block).max(1);
        let mut partial = s.alloc_zeros::<f64>(nb * NSLOT)?;
        let mut out = s.alloc_zeros::<f64>(NSLOT)?;
        let n_i = self.n as i32;
        let mut b = s.launch_builder(&k.moments);
        b.arg(&self.pos)
            .arg(&self.alpha)
            .arg(&self.sigma)
            .arg(&self.sigma0)
            .arg(&n_i)
            .arg(&box_length)
            .arg(&mut partial);
        let cfg = LaunchConfig {
            grid_dim: (nb as u32, 1, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: r_moments(const double* pos, a, sigma, sigma0, int n, double box_length, double*
        // partial): the arguments in this order and of these types; pos and alpha hold 3 n doubles,
        // sigma and sigma0 n, partial NSLOT doubles for each of the nb blocks of RED_THREADS
        // threads (the kernel's shared array size), each block covering RED_THREADS RED_PER_THREAD
        // particles, indices >= n skipped.
        unsafe { b.launch(cfg) }?;
        let nb_i = nb as i32;
        let mut b = s.launch_builder(&k.moments_finish);
        b.arg(&partial).arg(&nb_i).arg(&mut out);
        let one = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: r_moments_finish(const double* partial, int nblocks, double* out): the arguments
        // in this order and of these types; partial holds nb NSLOT doubles (written above), out
        // NSLOT; one block of RED_THREADS threads, the size of its shared arrays.
        unsafe { b.launch(one) }?;
        let v = s.clone_dtoh(&out)?;
        Ok(Moments::from_slots(&v, self.n))
    }

    /// Wraps the positions into the periodic box and subtracts `mean` from every strength.
    pub fn tidy(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        box_length: f64,
        mean: [f64; 3],
    ) -> GpuResult<()> {
        let n_i = self.n as i32;
        let mut b = s.launch_builder(&k.tidy);
        b.arg(&mut self.pos)
            .arg(&mut self.alpha)
            .arg(&n_i)
            .arg(&box_length)
            .arg(&mean[0])
            .arg(&mean[1])
            .arg(&mean[2]);
        // SAFETY: r_tidy(double* pos, double* a, int n, double box_length, double m0, m1, m2): the
        // arguments in this order and of these types; pos and alpha hold 3 n doubles; threads i >=
        // n return.
        unsafe { b.launch(per_element(self.n)) }?;
        Ok(())
    }

    /// Core spreading: `sigma = sqrt(sigma0^2 + 2 nu elapsed)` (core paper Eq. 11).
    pub fn spread(
        &mut self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        nu: f64,
        elapsed: f64,
    ) -> GpuResult<()> {
        let n_i = self.n as i32;
        let mut b = s.launch_builder(&k.spread);
        b.arg(&mut self.sigma)
            .arg(&self.sigma0)
            .arg(&n_i)
            .arg(&nu)
            .arg(&elapsed);
        // SAFETY: r_spread(double* sigma, const double* sigma0, int n, double nu, double elapsed):
        // the arguments in this order and of these types; sigma and sigma0 hold n doubles; threads
        // i >= n do nothing.
        unsafe { b.launch(per_element(self.n)) }?;
        Ok(())
    }
}

impl DeviceFields {
    pub fn zeros(s: &Arc<CudaStream>, n: usize) -> GpuResult<Self> {
        Ok(Self {
            vel: s.alloc_zeros(3 * n)?,
            str: s.alloc_zeros(3 * n)?,
        })
    }

    pub fn upload(s: &Arc<CudaStream>, d: &Derivatives) -> GpuResult<Self> {
        Ok(Self {
            vel: s.clone_htod(flat(&d.velocity))?,
            str: s.clone_htod(flat(&d.stretching))?,
        })
    }

    pub fn download(&self, s: &Arc<CudaStream>) -> GpuResult<Derivatives> {
        Ok(Derivatives {
            velocity: rows(s.clone_dtoh(&self.vel)?),
            stretching: rows(s.clone_dtoh(&self.str)?),
        })
    }

    /// The lowest particle index with a non-finite value, if any.
    pub fn first_non_finite(
        &self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        n: usize,
    ) -> GpuResult<Option<usize>> {
        first_non_finite(k, s, &self.vel, &self.str, n)
    }
}

/// The lowest index `i < n` with a non-finite value in `a[3i..3i+3]` or `b[3i..3i+3]`.
pub fn first_non_finite(
    k: &Kernels,
    s: &Arc<CudaStream>,
    a: &CudaSlice<f64>,
    b_: &CudaSlice<f64>,
    n: usize,
) -> GpuResult<Option<usize>> {
    let mut first = s.clone_htod(&[i32::MAX])?;
    let n_i = n as i32;
    let mut b = s.launch_builder(&k.first_nonfinite);
    b.arg(a).arg(b_).arg(&n_i).arg(&mut first);
    // SAFETY: r_first_nonfinite(const double* vel, const double* str, int n, int* first): the
    // arguments in this order and of these types; the caller passes a and b_ of 3 n doubles at
    // least, first is one int; threads i >= n return.
    unsafe { b.launch(per_element(n)) }?;
    let f = s.clone_dtoh(&first)?[0];
    Ok((f != i32::MAX).then_some(f as usize))
}

/// The sums and extremes of the particles that the step, the FMM and the diagnostics need.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    pub n: usize,
    /// `sum alpha`.
    pub total_strength: [f64; 3],
    /// `sum_j sum_c |alpha_jc|`.
    pub abs_strength: f64,
    /// `D[c][l] = sum alpha_c x_l` (wrapped positions).
    pub dipole: [[f64; 3]; 3],
    /// `sum x cross alpha` (twice the linear impulse).
    pub cross: [f64; 3],
    /// `sum |alpha| x` and `sum |alpha|` (the vorticity-weighted centroid).
    pub weighted: [f64; 3],
    pub weight: f64,
    /// Particles with a non-finite value or a non-positive core.
    pub non_finite: usize,
    pub sigma_max: f64,
    pub alpha_max: f64,
    pub ratio_max: f64,
    pub lo: [f64; 3],
    pub hi: [f64; 3],
}

impl Moments {
    fn from_slots(v: &[f64], n: usize) -> Self {
        Moments {
            n,
            total_strength: [v[0], v[1], v[2]],
            abs_strength: v[3],
            dipole: std::array::from_fn(|c| std::array::from_fn(|l| v[4 + 3 * c + l])),
            cross: [v[13], v[14], v[15]],
            weighted: [v[16], v[17], v[18]],
            weight: v[19],
            non_finite: v[20] as usize,
            sigma_max: v[21],
            alpha_max: v[22],
            ratio_max: v[23],
            hi: [v[24], v[25], v[26]],
            lo: [-v[27], -v[28], -v[29]],
        }
    }

    pub fn mean_strength(&self) -> [f64; 3] {
        let n = self.n.max(1) as f64;
        self.total_strength.map(|c| c / n)
    }

    /// The sums in the form of the uniform grid's periodic checks and surface correction.
    pub fn periodic_sums(&self) -> vortex_gpu::uniform::periodic::PeriodicSums {
        vortex_gpu::uniform::periodic::PeriodicSums {
            valid: self.non_finite == 0,
            sigma_max: self.sigma_max,
            total_strength: self.total_strength,
            abs_strength: self.abs_strength,
            dipole: self.dipole,
            outside: 0,
            far: 0,
        }
    }
}
