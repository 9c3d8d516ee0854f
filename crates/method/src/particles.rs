//! The particle state: position, vector strength `alpha` (vorticity times volume), core radius
//! `sigma`, and the core radius `sigma0` each particle had at the last reset (creation or
//! re-interpolation), from which core spreading (Eq. 11) grows `sigma`.

use serde::{Deserialize, Serialize};
use vortex_fmm::kernel::cross;
use vortex_fmm::Sources;

/// Vortex particles (structure of arrays).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Particles {
    pub position: Vec<[f64; 3]>,
    pub strength: Vec<[f64; 3]>,
    pub sigma: Vec<f64>,
    /// Core radius at the last reset (`sigma^2 = sigma0^2 + 2 nu (t - t_reset)`).
    pub sigma0: Vec<f64>,
}

impl Particles {
    pub fn len(&self) -> usize {
        self.position.len()
    }

    pub fn is_empty(&self) -> bool {
        self.position.is_empty()
    }

    /// Particles with a common core radius.
    pub fn new(position: Vec<[f64; 3]>, strength: Vec<[f64; 3]>, sigma: f64) -> Self {
        let n = position.len();
        assert_eq!(strength.len(), n);
        Self {
            position,
            strength,
            sigma: vec![sigma; n],
            sigma0: vec![sigma; n],
        }
    }

    pub fn push(&mut self, x: [f64; 3], alpha: [f64; 3], sigma: f64) {
        self.position.push(x);
        self.strength.push(alpha);
        self.sigma.push(sigma);
        self.sigma0.push(sigma);
    }

    /// The particles as FMM sources.
    pub fn to_sources(&self) -> Sources {
        Sources {
            position: self.position.clone(),
            strength: self.strength.clone(),
            sigma: self.sigma.clone(),
        }
    }

    /// `sum_i alpha_i` (the total vorticity; conserved by the exact dynamics in free space).
    pub fn total_strength(&self) -> [f64; 3] {
        chunked_sum3(self.strength.len(), |i| self.strength[i])
    }

    /// Linear impulse `I = (1/2) sum_i x_i x alpha_i` (conserved in free space).
    pub fn linear_impulse(&self) -> [f64; 3] {
        let s = chunked_sum3(self.len(), |i| cross(self.position[i], self.strength[i]));
        s.map(|v| 0.5 * v)
    }

    /// Angular impulse `A = (1/3) sum_i x_i x (x_i x alpha_i)`.
    pub fn angular_impulse(&self) -> [f64; 3] {
        let s = chunked_sum3(self.len(), |i| {
            let x = self.position[i];
            cross(x, cross(x, self.strength[i]))
        });
        s.map(|v| v / 3.0)
    }

    /// Vorticity-weighted centroid `sum |alpha_i| x_i / sum |alpha_i|`.
    pub fn centroid(&self) -> [f64; 3] {
        let w: Vec<f64> = self.strength.iter().map(|a| norm(*a)).collect();
        let wsum = chunked_sum(w.len(), |i| w[i]);
        if wsum == 0.0 {
            return [0.0; 3];
        }
        chunked_sum3(self.len(), |i| self.position[i].map(|c| c * w[i])).map(|c| c / wsum)
    }

    /// Subtracts the mean strength so that the total is zero (needed by the periodic
    /// Biot-Savart sum). Returns the mean that was removed.
    pub fn subtract_mean_strength(&mut self) -> [f64; 3] {
        let n = self.len().max(1) as f64;
        let mean = self.total_strength().map(|c| c / n);
        for a in &mut self.strength {
            for c in 0..3 {
                a[c] -= mean[c];
            }
        }
        mean
    }

    /// First non-finite value, as `(field, index)`.
    pub fn first_non_finite(&self) -> Option<(&'static str, usize)> {
        for i in 0..self.len() {
            if self.position[i].iter().any(|v| !v.is_finite()) {
                return Some(("position", i));
            }
            if self.strength[i].iter().any(|v| !v.is_finite()) {
                return Some(("strength", i));
            }
            if !(self.sigma[i].is_finite() && self.sigma[i] > 0.0) {
                return Some(("sigma", i));
            }
        }
        None
    }

    /// Largest `sigma / sigma0`.
    pub fn max_core_ratio(&self) -> f64 {
        self.sigma
            .iter()
            .zip(&self.sigma0)
            .map(|(s, s0)| s / s0)
            .fold(1.0, f64::max)
    }

    /// Largest strength magnitude `|alpha_p|`.
    pub fn max_strength(&self) -> f64 {
        self.strength.iter().map(|a| norm(*a)).fold(0.0, f64::max)
    }
}

#[inline]
pub fn norm(a: [f64; 3]) -> f64 {
    (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt()
}

/// Chunk length of the deterministic parallel reductions.
pub const CHUNK: usize = 4096;

/// Sum of `f(i)` for `i < n`, in fixed chunks summed in order: the result does not depend on the
/// number of threads (needed for bit-for-bit restarts).
pub fn chunked_sum(n: usize, f: impl Fn(usize) -> f64 + Sync) -> f64 {
    vortex_spectral::diagnostics::ordered_sum(n, f)
}

/// Vector version of [`chunked_sum`].
pub fn chunked_sum3(n: usize, f: impl Fn(usize) -> [f64; 3] + Sync) -> [f64; 3] {
    use rayon::prelude::*;
    let parts: Vec<[f64; 3]> = (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let mut s = [0.0; 3];
            for i in c * CHUNK..((c + 1) * CHUNK).min(n) {
                let v = f(i);
                for k in 0..3 {
                    s[k] += v[k];
                }
            }
            s
        })
        .collect();
    let mut s = [0.0; 3];
    for p in parts {
        for k in 0..3 {
            s[k] += p[k];
        }
    }
    s
}
