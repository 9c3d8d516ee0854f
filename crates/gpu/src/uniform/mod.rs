//! Uniform-grid FMM built on the device.
//!
//! The adaptive path (`crate::backend`) builds the octree, the interaction lists and the M2L
//! packing on the host. Here the only N-sized host work is a parallel bounding-cube reduction
//! and the f32 packing of the input, then one upload; the device sorts the particles into a
//! uniform grid of `n = m 2^k` leaves per side (counting sort, deterministic order within a
//! cell), runs P2M, M2M, M2L over the fixed stencil of the classical lists, L2L, L2P and the
//! P2P over the 27 neighbours of each leaf, scatters the fields back to input order, and one
//! download returns them (`1/(4 pi)` applied in f64 on the host).
//!
//! * [`grid`]: bounding cube, choice of `n = m 2^k` (gap condition: leaf width >=
//!   `core_cutoff * sigma_max`), cell numbering and centres;
//! * [`dense_m2l`]: the M2L below the top as dense per-offset matrices (kernels on the FP32
//!   pipes and on the FP64 tensor cores, and the f64 host emulation), two of the [`M2lKernel`]s;
//! * [`stencil`]: the implicit near and M2L lists (tested to cover every leaf pair once) and
//!   the rotation records per integer offset;
//! * [`sort`]: host emulation of the device sort and task builder (tested against a plain
//!   stable sort and a brute-force near list);
//! * [`periodic`]: periodic boundary conditions (box `[-L/2, L/2)^3` of
//!   `vortex_fmm::periodic::Periodic`): wrapping f32 pack with the dipole sums, far images at the
//!   receiver level, surface correction (host helpers of the twin and the device path);
//! * [`reference`]: the same method in f64 on the CPU (tested against the direct sum; the
//!   periodic twin against the periodic direct sum, Ewald and the adaptive periodic FMM);
//! * [`pipeline`]: [`UniformFmm`], the device path (kernels of `kernels/uniform.cu`, which is
//!   compiled together with `kernels/p2p.cu` and `kernels/fmm.cu` to reuse `p2p_near`, `p2m`
//!   and `l2p`);
//! * [`slab`]: the slab decomposition over the ranks of a `vortex_domain::Comm` (agreed grid,
//!   redistribution, halo particles, coarse-multipole exchange);
//! * [`distributed_reference`]: the distributed method in f64 on the CPU (tested under
//!   `vortex_domain::ThreadComm` against [`reference`] and the direct sum);
//! * [`distributed`]: the distributed device path, one GPU per rank (free space and periodic;
//!   `UniformFmm::evaluate_device_slab` on device buffers for the resident step);
//! * [`periodic`]: the periodic box (wrapping pack, far images, surface correction);
//! * [`profile`]: the per-kernel profile (CUDA events per kernel, launches, the roofline floor
//!   of each on the card), off unless started (`vortex bench fmm --profile`);
//! * [`evaluator`]: [`UniformEvaluator`] and [`UniformSlabEvaluator`], the grid behind
//!   `vortex_fmm::Evaluator` (what the planner hands out for `--grid uniform`).

pub mod dense_m2l;
pub mod device_evaluator;
pub mod distributed;
pub mod distributed_reference;
pub mod evaluator;
pub mod grid;
pub mod periodic;
pub mod pipeline;
pub mod profile;
pub mod reference;
pub mod slab;
pub mod sort;
pub mod stencil;

pub use device_evaluator::{DeviceEvaluator, DeviceSources, UniformDevice, UniformSlabDevice};
pub use distributed::{
    evaluate_distributed, evaluate_distributed_into, evaluate_distributed_periodic,
    DistributedUniformTimes,
};
pub use distributed_reference::{
    evaluate_distributed_reference, evaluate_distributed_reference_periodic,
};
pub use evaluator::{UniformEvaluator, UniformSlabEvaluator};
pub use grid::{Extent, UniformGrid};
pub use pipeline::{evaluate_uniform, UniformFmm};
pub use reference::{evaluate_reference, evaluate_reference_periodic};
pub use slab::SlabPlan;
/// The M2L kernel below the top level, a parameter of the grid ([`UniformParams::m2l`], from
/// `vortex_fmm::EvalParams::m2l`).
pub use vortex_fmm::far::{M2lKernel, DENSE_MAX_ORDER};

use crate::device::GpuResult;
use vortex_fmm::kernel::CoreOrder;

/// Parameters of a uniform-grid evaluation.
#[derive(Clone, Debug, PartialEq)]
pub struct UniformParams {
    /// Expansion order `p`.
    pub order: usize,
    /// Smallest gap between a leaf and a non-neighbour cell, in units of the largest core
    /// radius: the far field uses the singular kernel, whose relative error there is
    /// `1 - q(core_cutoff)` (4.5: 1.5e-4, 5: 1.5e-5, 6: 7e-8 for a pair at the gap). Measured
    /// on the H100 (N = 1e7 standard set, p = 6): leaf width 3.85 sigma gives a velocity error
    /// of 1.9e-5, 4.49 sigma 4.0e-5, 5.39 sigma 3.0e-5: the M2L truncation dominates, not the
    /// cutoff. The default 4.4 lets N = 1e7 use 48^3 leaves of 90 particles.
    pub core_cutoff: f64,
    /// Particles per leaf aimed at (the gap condition may force larger leaves).
    pub leaf_target: f64,
    /// Force the grid: `(m, k)`, `m` top cells per side and `k` levels below (periodic: `m`
    /// in `{1, 3}`, `m 2^k >= 3`).
    pub grid: Option<(usize, usize)>,
    /// The M2L kernel below the top level ([`M2lKernel::resolve`] states the rule of `Auto`).
    pub m2l: M2lKernel,
    /// The core of the near field (`kernels/p2p.cu` compiled with its `CORE_M`); the gap
    /// `core_cutoff` must be at least its [`CoreOrder::min_cutoff`].
    pub core: CoreOrder,
}

impl Default for UniformParams {
    fn default() -> Self {
        Self {
            order: vortex_fmm::DEFAULT_ORDER,
            core_cutoff: 4.4,
            leaf_target: 100.0,
            grid: None,
            m2l: M2lKernel::Auto,
            core: CoreOrder::Second,
        }
    }
}

impl UniformParams {
    /// Checks the order range and a forced grid.
    pub fn validate(&self) -> Result<(), crate::GpuError> {
        let bad = |m: String| Err(crate::GpuError::Unsupported(m));
        if let Err(e) = vortex_fmm::check_order(self.order, crate::backend::MAX_GPU_ORDER) {
            return bad(e.to_string());
        }
        if let Some((m, k)) = self.grid {
            if !(1..=grid::MAX_TOP).contains(&m) || k > grid::MAX_LEVELS {
                return bad(format!(
                    "grid (m, k) = ({m}, {k}): need 1 <= m <= {} and k <= {}",
                    grid::MAX_TOP,
                    grid::MAX_LEVELS
                ));
            }
        }
        if !(self.core_cutoff >= 0.0 && self.core_cutoff.is_finite() && self.leaf_target > 0.0) {
            return bad("core_cutoff must be >= 0 and leaf_target > 0".into());
        }
        if self.core_cutoff < self.core.min_cutoff() {
            return bad(format!(
                "core_cutoff {} is below {} core radii, the least gap of the core of order {} \
                 (its tail 1 - q there must not exceed the Gaussian's at 4)",
                self.core_cutoff,
                self.core.min_cutoff(),
                self.core
            ));
        }
        Ok(())
    }

    /// The grid for `np` particles within `ext`.
    pub fn grid_for(&self, ext: &Extent, np: usize) -> UniformGrid {
        match self.grid {
            Some((m, k)) => UniformGrid::fixed(ext, m, k),
            None => UniformGrid::choose(ext, np, self.core_cutoff, self.leaf_target),
        }
    }

    /// The periodic grid for `np` particles in the box `ext` ([`Extent::periodic`]): the
    /// forced one or [`UniformGrid::choose_periodic`] (errors: a forced `(m, k)` that is not
    /// periodic, a box too small for the cores).
    pub fn grid_for_periodic(&self, ext: &Extent, np: usize) -> GpuResult<UniformGrid> {
        match self.grid {
            Some((m, k)) => UniformGrid::fixed_periodic(ext, m, k),
            None => UniformGrid::choose_periodic(ext, np, self.core_cutoff, self.leaf_target),
        }
    }
}

/// Wall times (seconds) of the phases of one evaluation, kernel times (seconds, CUDA events)
/// and work counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UniformTimes {
    /// Host: bounding cube, f32 packing.
    pub host_prepare: f64,
    /// Allocation and upload of the packed particles.
    pub upload: f64,
    /// Cell index, counting sort, in-cell ordering, gather, task building.
    pub sort: f64,
    /// P2M and M2M.
    pub upward: f64,
    /// M2L (all levels).
    pub m2l: f64,
    /// L2L and L2P.
    pub downward: f64,
    /// P2P (when `overlapped`, its kernel time: it ran beside the M2L and the L2L).
    pub p2p: f64,
    /// Scatter to input order, download, `1/(4 pi)` and f64 conversion on the host.
    pub download: f64,
    /// Periodic: host time of the far images (download of the top multipoles, the f64
    /// lattice-summed M2L, upload), overlapped with the P2P and part of `p2p`.
    pub far_images: f64,
    /// The wall time of the evaluation (the sum of the phases, less the P2P when
    /// `overlapped`).
    pub total: f64,
    /// Whether the P2P ran on a second stream beside the far field (one GPU, unprofiled).
    pub overlapped: bool,
    /// Kernel-only times (CUDA events).
    pub k_sort: f64,
    pub k_p2m: f64,
    pub k_m2m: f64,
    pub k_m2l: f64,
    pub k_l2l: f64,
    pub k_l2p: f64,
    pub k_p2p: f64,
    pub k_scatter: f64,
    /// Pair interactions of the P2P.
    pub p2p_pairs: u64,
    /// M2L translations (every level).
    pub m2l_translations: u64,
    /// Leaves per side, top cells per side, levels below the top.
    pub n: usize,
    pub m: usize,
    pub k: usize,
    /// Device memory allocated by the evaluation (bytes).
    pub device_bytes: usize,
}

impl UniformTimes {
    /// Sum of the kernel times.
    pub fn kernels(&self) -> f64 {
        self.k_sort
            + self.k_p2m
            + self.k_m2m
            + self.k_m2l
            + self.k_l2l
            + self.k_l2p
            + self.k_p2p
            + self.k_scatter
    }
}

/// M2L translations of a grid (every level; free space: boundary cells have fewer sources).
pub fn m2l_count(g: &UniformGrid) -> u64 {
    let mut total = 0u64;
    for l in 0..=g.k {
        let nl = g.n_at(l);
        // per axis: the number of (target, source) coordinate pairs in range, then the
        // product over axes minus the adjacent ones
        let axis = |adj: bool| -> u64 {
            (0..nl)
                .map(|c| {
                    let (lo, hi) = if g.periodic {
                        stencil::m2l_range_periodic(nl, l == 0, g.m, c)
                    } else {
                        let (lo, hi) = stencil::m2l_range(nl, l == 0, c);
                        (lo as i64, hi as i64)
                    };
                    (lo..=hi)
                        .filter(|&s| !adj || (s - c as i64).abs() <= 1)
                        .count() as u64
                })
                .sum()
        };
        let all = axis(false).pow(3);
        let adj = axis(true).pow(3);
        total += all - adj;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn m2l_count_matches_the_lists() {
        for (m, k) in [(1, 2), (3, 1), (2, 3), (4, 0)] {
            let e = Extent {
                lo: [0.0; 3],
                side: 1.0,
                sigma_max: 1e-3,
            };
            let g = UniformGrid::fixed(&e, m, k);
            let mut want = 0u64;
            for l in 0..=k {
                let nl = g.n_at(l);
                for c in 0..nl.pow(3) {
                    want += stencil::m2l_sources(nl, l == 0, grid::coords(nl, c)).len() as u64;
                }
            }
            assert_eq!(m2l_count(&g), want, "m {m} k {k}");
        }
        for (m, k) in [(1, 2), (1, 3), (3, 0), (3, 2)] {
            let e = Extent::periodic(&vortex_fmm::periodic::Periodic::default(), 1e-3);
            let g = UniformGrid::fixed_periodic(&e, m, k).unwrap();
            let mut want = 0u64;
            for l in 0..=k {
                let nl = g.n_at(l);
                for c in 0..nl.pow(3) {
                    let sc = grid::coords(nl, c);
                    want += stencil::m2l_sources_periodic(nl, l == 0, m, sc).len() as u64;
                }
            }
            assert_eq!(m2l_count(&g), want, "periodic m {m} k {k}");
        }
    }
}
