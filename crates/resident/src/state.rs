//! The particle state on the device, in f64 (`[N][3]` rows as on the host), and the host
//! copies of it that checkpoints and snapshots need.

use crate::kernels::{per_element, Kernels, NSLOT, RED_PER_THREAD, RED_THREADS};
use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use std::sync::Arc;
use vortex_cuda::GpuResult;
use vortex_domain::{Comm, ReduceOp};
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
        let cfg = LaunchConfig {
            grid_dim: (nb as u32, 1, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // pos and alpha hold 3 n doubles, sigma and sigma0 n, partial NSLOT doubles for each of
        // the nb blocks of RED_THREADS threads (the kernel's shared array size), each block
        // covering RED_THREADS RED_PER_THREAD particles
        let (p, a, g, g0) = (&self.pos, &self.alpha, &self.sigma, &self.sigma0);
        k.moments(s, cfg, p, a, g, g0, n_i, box_length, &mut partial)?;
        let one = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // one block of RED_THREADS threads, the size of its shared arrays
        k.moments_finish(s, one, &partial, nb as i32, &mut out)?;
        let v = s.clone_dtoh(&out)?;
        Ok(Moments::from_slots(&v, self.n))
    }

    /// The f32 rows the uniform grid reads (`8 n` floats: two float4 rows per particle,
    /// positions wrapped into the box of length `box_length`).
    pub fn pack(
        &self,
        k: &Kernels,
        s: &Arc<CudaStream>,
        box_length: f64,
    ) -> GpuResult<CudaSlice<f32>> {
        let n = self.n;
        let mut out = s.alloc_zeros::<f32>((8 * n).max(1))?;
        // pos and alpha hold 3 n doubles, sigma n, out 8 n floats
        let (p, a, g) = (&self.pos, &self.alpha, &self.sigma);
        k.pack(s, per_element(n), p, a, g, n as i32, box_length, &mut out)?;
        Ok(out)
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
        let [m0, m1, m2] = mean;
        // pos and alpha hold 3 n doubles
        let cfg = per_element(self.n);
        k.tidy(
            s,
            cfg,
            &mut self.pos,
            &mut self.alpha,
            n_i,
            box_length,
            m0,
            m1,
            m2,
        )?;
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
        // sigma and sigma0 hold n doubles
        k.spread(
            s,
            per_element(self.n),
            &mut self.sigma,
            &self.sigma0,
            n_i,
            nu,
            elapsed,
        )?;
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
    // the caller passes a and b_ of 3 n doubles at least; first is one int
    k.first_nonfinite(s, per_element(n), a, b_, n_i, &mut first)?;
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

/// The moments of every rank's particles (sums added, extremes reduced; on one rank `m`
/// itself). Collective.
pub fn reduce_moments(comm: &dyn Comm, m: Moments) -> Moments {
    if comm.size() == 1 {
        return m;
    }
    let mut sums = vec![m.n as f64, m.abs_strength, m.weight, m.non_finite as f64];
    sums.extend(m.total_strength);
    sums.extend(m.dipole.iter().flatten());
    sums.extend(m.cross);
    sums.extend(m.weighted);
    comm.allreduce_f64(&mut sums, ReduceOp::Sum);
    let mut max = vec![m.sigma_max, m.alpha_max, m.ratio_max];
    max.extend(m.hi);
    max.extend(m.lo.map(|v| -v));
    comm.allreduce_f64(&mut max, ReduceOp::Max);
    let v3 = |s: &[f64]| [s[0], s[1], s[2]];
    Moments {
        n: sums[0] as usize,
        abs_strength: sums[1],
        weight: sums[2],
        non_finite: sums[3] as usize,
        total_strength: v3(&sums[4..7]),
        dipole: std::array::from_fn(|c| v3(&sums[7 + 3 * c..10 + 3 * c])),
        cross: v3(&sums[16..19]),
        weighted: v3(&sums[19..22]),
        sigma_max: max[0],
        alpha_max: max[1],
        ratio_max: max[2],
        hi: v3(&max[3..6]),
        lo: v3(&max[6..9]).map(|v| -v),
    }
}
