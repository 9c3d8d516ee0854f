//! The RBF re-interpolation of `vortex_method::reinterpolation` on the device, periodic box,
//! for any number of ranks: each rank works on the lattice planes it owns
//! ([`crate::slab::lattice::SlabLattice`]; one rank owns them all).
//!
//! * The vorticity of the blobs at the rank's lattice points (core paper Eq. 3-4): the direct
//!   Gaussian sums of the own particles and the halo of the neighbours'
//!   ([`crate::slab::lattice::slab_vorticity`]), or, with `reinterpolation.sums = { kind =
//!   "spread" }`, their spectrum by spreading ([`crate::spreading`]; over several ranks on
//!   the slabs' fine planes, [`crate::spreading::slabs`]).
//! * The lattice system solved in Fourier space over the slabs
//!   ([`SlabFourier::solve_rbf`]: the eigenvalues of the host's circulant axis factors,
//!   `vortex_method::reinterpolation::separable`, times the transfer function of
//!   `[reinterpolation] filter`, `vortex_method::reinterpolation::filter`).
//! * Fresh particles on the rank's planes with the initial core, in the lattice order with
//!   their global ids (the caller removes the mean strength); [`Reinterpolator::carry_history`]
//!   takes the AB2 history through the same lattice operator.
//!
//! The same lattice operations give the diagnostics' grid velocity
//! ([`Reinterpolator::grid_velocity`]: the blob vorticity on the grid, then Biot-Savart in
//! Fourier space, the spectrum reduced over the ranks).

use crate::ctx::Ctx;
use crate::laps::Laps;
use crate::lattice::{lattice_particles, Planes};
use crate::slab::lattice::{slab_vorticity, to_lattice_order, SlabLattice};
use crate::slab_fourier::{GridSpectrum, Ranks, SlabAxis, SlabFourier, SlabLayout};
use crate::spreading::device_slabs::{slab_device_bytes, DeviceSlabSpread};
use crate::spreading::slabs::FineSlabs;
use crate::spreading::{core_bin, device_bytes, DeviceSpread, Precision};
use crate::state::{DeviceFields, DeviceParticles};
use cudarc::driver::{CudaSlice, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Once};
use vortex_cuda::{GpuDevice, GpuError, GpuResult};
use vortex_domain::ReduceOp;
use vortex_exchange::{DeviceExchange, Transport};
use vortex_method::reinterpolation::history::History;
use vortex_method::reinterpolation::spreading::{plan_for, SpreadPlan, UNTRUNCATED};
use vortex_method::reinterpolation::{Lattice, LatticeFilter, LatticeSums, RbfReport};
use vortex_method::stepping::Stepper;
use vortex_method::{Config, Error, Result};

/// `f(k) / S(k)`, `k = 0..n`, of the circulant axis factor (the host's `AxisSolver`) and the
/// transfer function `filter`, or the reason the system is not safely positive definite.
pub use vortex_method::reinterpolation::spreading::fold::inverse_eigenvalues;

/// The settings of the periodic re-interpolation and what it keeps between calls: the device
/// exchange of the halos and transposes, the slab transforms of each lattice and split, the
/// inverse eigenvalues and the spreading route.
pub struct Reinterpolator {
    n: usize,
    box_length: f64,
    sigma0: f64,
    cutoff: f64,
    filter: LatticeFilter,
    sums: LatticeSums,
    exchange: Box<dyn DeviceExchange>,
    fouriers: HashMap<(usize, Vec<usize>), SlabFourier>,
    /// `f(k) / S(k)` of the lattice matrix truncated at `cutoff` (the direct sums').
    inv_eig: Option<CudaSlice<f64>>,
    /// `f(k) / S(k)` of the untruncated lattice matrix (the spreading route's).
    inv_eig_exact: Option<CudaSlice<f64>>,
    /// The spreading route on one rank, once [`Reinterpolator::prepare`] made it.
    spread: Option<DeviceSpread>,
    /// The spreading route's plan over several ranks, and its buffers for the current split
    /// of the fine planes (made at the first use of a split).
    slab_plan: Option<SpreadPlan>,
    slab_spread: Option<DeviceSlabSpread>,
    /// Whether the first spreading over slabs was checked against the direct sums.
    slab_checked: bool,
    /// Bytes this rank sent: halos of the lattice sums and the transposes.
    pub bytes: u64,
}

/// The transforms of `lat`'s lattice and split, made at their first use.
fn fourier_of<'a>(
    fouriers: &'a mut HashMap<(usize, Vec<usize>), SlabFourier>,
    ctx: &Ctx,
    lat: &SlabLattice,
) -> GpuResult<&'a mut SlabFourier> {
    let key = (lat.n, lat.bounds.clone());
    if !fouriers.contains_key(&key) {
        let layout = SlabLayout::new(lat.n, &lat.bounds, lat.rank, SlabAxis::Z)?;
        let f = SlabFourier::new(&ctx.dev, ctx.s.clone(), layout)?;
        fouriers.insert(key.clone(), f);
    }
    Ok(fouriers.get_mut(&key).expect("inserted above"))
}

/// The inverse eigenvalues of the lattice of `n` points (spacing `h`) on the device, made once.
fn eigenvalues<'a>(
    slot: &'a mut Option<CudaSlice<f64>>,
    s: &Arc<CudaStream>,
    (n, h, sigma0, cutoff): (usize, f64, f64, f64),
    filter: &LatticeFilter,
) -> GpuResult<&'a CudaSlice<f64>> {
    if slot.is_none() {
        let e = inverse_eigenvalues(n, h, sigma0, cutoff, filter)
            .map_err(|e| GpuError::Unsupported(format!("{e}; lower initial.overlap")))?;
        *slot = Some(s.clone_htod(&e)?);
    }
    Ok(slot.as_ref().expect("set above"))
}

/// The spreading over the slabs of `bounds` (fine planes), made at the first use of a split.
fn slab_spread<'a>(
    slot: &'a mut Option<DeviceSlabSpread>,
    ctx: &Ctx,
    plan: SpreadPlan,
    bounds: Vec<usize>,
) -> GpuResult<&'a mut DeviceSlabSpread> {
    if slot.as_ref().map(|sp| sp.slabs.bounds()) != Some(&bounds[..]) {
        *slot = None; // the buffers of the old split go first
        let w = plan.design.kernel.width;
        let slabs = FineSlabs::new(plan.design.fine, &bounds, w, ctx.comm.rank());
        *slot = Some(DeviceSlabSpread::new(&ctx.dev, ctx.s.clone(), plan, slabs)?);
    }
    Ok(slot.as_mut().expect("made above"))
}

/// The smallest and largest core of this rank's particles (infinite bounds for none).
fn sigma_range(ctx: &Ctx, p: &DeviceParticles) -> GpuResult<(f64, f64)> {
    if p.n == 0 {
        return Ok((f64::INFINITY, f64::NEG_INFINITY));
    }
    crate::spreading::sigma_range(&ctx.dev, &ctx.s, &p.sigma, p.n)
}

/// The largest relative L2 difference between the first lattice strengths by spreading over
/// slabs and by the direct sums that lets the run keep the spreading (the two agree to the
/// spreading tolerance and the truncation of the direct sums, orders of magnitude below; an
/// error of the decomposition is of order one).
pub const SLAB_CHECK: f64 = 1e-4;

static MIXED_CORES: Once = Once::new();
static OUTSIDE_WINDOW: Once = Once::new();

impl Reinterpolator {
    /// The re-interpolation of `config`'s lattice; halos and transposes over `exchange` (a
    /// device copy on one rank).
    pub fn new(config: &Config, exchange: Box<dyn DeviceExchange>) -> Self {
        Self {
            n: config.lattice_n().unwrap_or(0),
            box_length: config.domain.box_length,
            sigma0: config.sigma0(),
            cutoff: config.reinterpolation.cutoff,
            filter: config.reinterpolation.filter,
            sums: config.reinterpolation.sums,
            exchange,
            fouriers: HashMap::new(),
            inv_eig: None,
            inv_eig_exact: None,
            spread: None,
            slab_plan: None,
            slab_spread: None,
            slab_checked: false,
            bytes: 0,
        }
    }

    /// The transport of the halos and transposes.
    pub fn transport(&self) -> Transport {
        self.exchange.transport()
    }

    /// Makes the spreading route of `reinterpolation.sums = { kind = "spread" }` on `dev`
    /// (kernels compiled, FFT planned, grid allocated) before the run starts, refusing a plan
    /// that does not fit the device's free memory, `reserved` bytes kept for the run's
    /// particles; nothing for the direct sums. Over several ranks the plan is kept and the
    /// buffers of each split of the fine planes are made at its first use
    /// ([`crate::spreading::device_slabs`]; the memory check takes the even split).
    pub fn prepare(&mut self, dev: &GpuDevice, reserved: f64, ranks: usize) -> Result<()> {
        let lat = Lattice::periodic_box(self.n, self.box_length);
        let plan = plan_for(&lat, &self.sums, self.sigma0)
            .map_err(|e| Error::Rbf(format!("reinterpolation.sums: {e}")))?;
        let Some(plan) = plan else {
            return Ok(());
        };
        let precision = match ranks {
            1 => Precision::for_tolerance(plan.tolerance),
            _ => Precision::F64,
        };
        let need = match ranks {
            1 => device_bytes(&plan, precision),
            _ => {
                let m = plan.design.fine;
                let even: Vec<usize> = (0..=ranks).map(|r| r * m / ranks).collect();
                let slabs = FineSlabs::new(m, &even, plan.design.kernel.width, 0);
                slab_device_bytes(&plan, &slabs)
            }
        };
        let (free, _) = dev
            .mem_info()
            .map_err(|e| Error::Other(format!("device memory: {e}")))?;
        if need + reserved > free as f64 {
            const GIB: f64 = (1u64 << 30) as f64;
            return Err(Error::Memory(format!(
                "reinterpolation.sums: the spreading grid of {m}^3 points ({precision:?}, from \
                 reinterpolation.n = {n} and tolerance {tol:e}) needs about {:.2} GiB on {} \
                 besides the {:.2} GiB of the particles; {:.2} GiB are free (limit: a coarser \
                 tolerance or the direct sums)",
                need / GIB,
                dev.name(),
                reserved / GIB,
                free as f64 / GIB,
                m = plan.design.fine,
                n = plan.n,
                tol = plan.tolerance,
            )));
        }
        if ranks > 1 {
            log::info!(
                "reinterpolation.sums: spreading over {ranks} slabs with a kernel of {} points \
                 on a {}^3 grid (f64 planes)",
                plan.design.kernel.width,
                plan.design.fine
            );
            self.slab_plan = Some(plan);
            return Ok(());
        }
        let spread = DeviceSpread::new(dev, plan)
            .map_err(|e| Error::Rbf(format!("reinterpolation.sums: {e}")))?;
        log::info!(
            "reinterpolation.sums: spreading with a kernel of {} points on a {}^3 grid ({:?}, tiles \
             of {}^3)",
            spread.plan.design.kernel.width,
            spread.plan.design.fine,
            spread.precision,
            spread.tile
        );
        self.spread = Some(spread);
        Ok(())
    }

    /// The spreading route on one device, if [`Reinterpolator::prepare`] made one.
    pub fn spreading(&mut self) -> Option<&mut DeviceSpread> {
        self.spread.as_mut()
    }

    /// Whether the Gaussian sums go by spreading (on one rank or over the slabs).
    pub fn spreads(&self) -> bool {
        self.spread.is_some() || self.slab_plan.is_some()
    }

    /// The spreading route's strengths of the blobs `p` on this rank's planes `lat` (slab
    /// layout), or `None` when there is no route, their cores differ by more than one
    /// transform allows, or (over slabs) a particle is too far from its slab: the caller uses
    /// the direct sums. Collective.
    fn spread_operator(
        &mut self,
        ctx: &Ctx,
        p: &DeviceParticles,
        lat: &SlabLattice,
    ) -> GpuResult<Option<CudaSlice<f64>>> {
        let Some(plan) = self.spread_plan() else {
            return Ok(None);
        };
        let s = &ctx.s;
        let mut laps = Laps::new(s, "lattice operator by spreading");
        let Some(core) = self.one_core(ctx, p, &plan)? else {
            return Ok(None);
        };
        laps.lap("cores");
        let (n, h) = (self.n, lat.h());
        let key = (n, h, self.sigma0, UNTRUNCATED);
        eigenvalues(&mut self.inv_eig_exact, s, key, &self.filter)?;
        let f = fourier_of(&mut self.fouriers, ctx, lat)?;
        let spread = match self.spread.as_mut() {
            Some(sp) => {
                sp.lattice_spectra(&ctx.k, s, p.into(), core, f.pencil_mut())?;
                true
            }
            None => {
                let bounds = lat.fine_bounds(plan.design.fine);
                if bounds.len() != ctx.comm.size() + 1 {
                    return Ok(None); // no slabs of the particles to split the fine planes by
                }
                let exchange = &mut *self.exchange;
                let spectra =
                    slab_spread(&mut self.slab_spread, ctx, plan, bounds).and_then(|sp| {
                        let ranks = Ranks {
                            comm: ctx.comm,
                            exchange,
                        };
                        sp.lattice_spectra(&ctx.k, s, ranks, p.into(), core, f.pencil_mut())
                    });
                match spectra {
                    Ok(done) => done,
                    Err(e) => {
                        // a failure of the route is not the run's: the direct sums take over
                        log::warn!(
                            "reinterpolation.sums: the spreading over slabs failed ({e}); the run \
                             continues with the direct sums"
                        );
                        self.slab_plan = None;
                        self.slab_spread = None;
                        return Ok(None);
                    }
                }
            }
        };
        if !spread {
            OUTSIDE_WINDOW.call_once(|| {
                log::info!(
                    "reinterpolation.sums: a particle lies beyond the halo planes of its slab; \
                     that re-interpolation uses the direct sums"
                )
            });
            return Ok(None);
        }
        laps.lap("spectra");
        let mut field = s.alloc_zeros::<f64>(3 * lat.points())?;
        let c = (2.0 * std::f64::consts::PI * self.sigma0 * self.sigma0).powf(-1.5);
        let ranks = Ranks {
            comm: ctx.comm,
            exchange: &mut *self.exchange,
        };
        let inv_eig = self.inv_eig_exact.as_ref().expect("made above");
        f.solve_rbf_pencil(ranks, &mut field, inv_eig, c)?;
        laps.lap("solve");
        Ok(Some(field))
    }

    /// The spreading plan of this run (one rank or the slabs), if any.
    fn spread_plan(&self) -> Option<SpreadPlan> {
        match &self.spread {
            Some(sp) => Some(sp.plan.clone()),
            None => self.slab_plan.clone(),
        }
    }

    /// The one core that stands for the cores of `p` over every rank, `None` when they differ
    /// by more than one transform allows (logged once); a core below the plan's is an error.
    /// Collective.
    fn one_core(
        &self,
        ctx: &Ctx,
        p: &DeviceParticles,
        plan: &SpreadPlan,
    ) -> GpuResult<Option<f64>> {
        let (mut lo, mut hi) = sigma_range(ctx, p)?;
        let mut v = [lo, -hi];
        ctx.comm.allreduce_f64(&mut v, ReduceOp::Min);
        (lo, hi) = (v[0], -v[1]);
        if lo.is_nan() || lo < plan.sigma_min * (1.0 - 1e-12) {
            return Err(GpuError::Unsupported(format!(
                "reinterpolation.sums: a core of {lo:e} is below the smallest core {:e} the \
                 spreading plan was designed for",
                plan.sigma_min
            )));
        }
        let core = core_bin(lo, hi, plan.tolerance);
        if core.is_none() {
            MIXED_CORES.call_once(|| {
                log::info!(
                    "reinterpolation.sums: the cores range over [{lo:e}, {hi:e}], more than one \
                     transform allows; those re-interpolations use the direct sums"
                )
            });
        }
        Ok(core)
    }

    /// `L_c[x] v = A^{-1} G_c[x] v` on this rank's planes `lat` (slab layout, three doubles per
    /// own point): the Gaussian sums of the blobs `q` of every rank (`sigma_max` the largest
    /// core) at the points of `lat`, then the lattice solve with the core `sigma0` over the
    /// slabs: the strengths of [`Reinterpolator::reinterpolate`], and the operator through
    /// which [`Reinterpolator::carry_history`] takes the AB2 history. Collective.
    pub fn lattice_operator(
        &mut self,
        ctx: &Ctx,
        q: &DeviceParticles,
        lat: &SlabLattice,
        sigma_max: f64,
    ) -> GpuResult<CudaSlice<f64>> {
        if let Some(beta) = self.spread_operator(ctx, q, lat)? {
            if self.slab_plan.is_none() || self.slab_checked {
                return Ok(beta);
            }
            return self.check_slab_route(ctx, q, lat, sigma_max, beta);
        }
        self.direct_operator(ctx, q, lat, sigma_max)
    }

    /// The first result of the spreading over slabs against the direct sums of the same
    /// particles (collective): on a disagreement beyond [`SLAB_CHECK`] the run goes on with the
    /// direct sums, and says so.
    fn check_slab_route(
        &mut self,
        ctx: &Ctx,
        q: &DeviceParticles,
        lat: &SlabLattice,
        sigma_max: f64,
        beta: CudaSlice<f64>,
    ) -> GpuResult<CudaSlice<f64>> {
        self.slab_checked = true;
        let direct = self.direct_operator(ctx, q, lat, sigma_max)?;
        let (a, b) = (ctx.s.clone_dtoh(&beta)?, ctx.s.clone_dtoh(&direct)?);
        let mut sums = [0.0, 0.0];
        for (x, y) in a.iter().zip(&b) {
            sums[0] += (x - y) * (x - y);
            sums[1] += y * y;
        }
        ctx.comm.allreduce_f64(&mut sums, ReduceOp::Sum);
        let e = (sums[0] / sums[1].max(f64::MIN_POSITIVE)).sqrt();
        if e < SLAB_CHECK {
            log::info!(
                "reinterpolation.sums: the spreading over slabs agrees with the direct sums to \
                 {e:.1e} (relative L2 of the lattice strengths)"
            );
            return Ok(beta);
        }
        log::warn!(
            "reinterpolation.sums: the spreading over slabs differs from the direct sums by \
             {e:.1e} (relative L2, limit {SLAB_CHECK:e}); the run continues with the direct sums"
        );
        self.slab_plan = None;
        self.slab_spread = None;
        Ok(direct)
    }

    /// [`Self::lattice_operator`] by the direct Gaussian sums (own particles and the halo of
    /// the neighbours'). Collective.
    fn direct_operator(
        &mut self,
        ctx: &Ctx,
        q: &DeviceParticles,
        lat: &SlabLattice,
        sigma_max: f64,
    ) -> GpuResult<CudaSlice<f64>> {
        let s = &ctx.s;
        let mut laps = Laps::new(s, "lattice operator by direct sums");
        let exchange = &mut *self.exchange;
        let (mut field, bytes) = slab_vorticity(
            ctx.comm,
            exchange,
            &ctx.k,
            s,
            q,
            lat,
            self.cutoff,
            sigma_max,
        )?;
        self.bytes += bytes as u64;
        laps.lap("sums");
        let key = (lat.n, lat.h(), self.sigma0, self.cutoff);
        let inv_eig = eigenvalues(&mut self.inv_eig, s, key, &self.filter)?;
        let c = (2.0 * std::f64::consts::PI * self.sigma0 * self.sigma0).powf(-1.5);
        let f = fourier_of(&mut self.fouriers, ctx, lat)?;
        let ranks = Ranks {
            comm: ctx.comm,
            exchange: &mut *self.exchange,
        };
        f.solve_rbf(ranks, &mut field, inv_eig, c)?;
        laps.lap("solve");
        Ok(field)
    }

    /// Fresh particles on this rank's planes `lat` (in the lattice order, with their global
    /// ids) whose blob field interpolates the vorticity of `p` at the lattice points; the mean
    /// strength is not yet removed. Collective.
    pub fn reinterpolate(
        &mut self,
        ctx: &Ctx,
        p: &DeviceParticles,
        lat: &SlabLattice,
        sigma_max: f64,
    ) -> GpuResult<(DeviceParticles, Vec<u64>, RbfReport)> {
        let mut laps = Laps::new(&ctx.s, "re-interpolation");
        let field = self.lattice_operator(ctx, p, lat, sigma_max)?;
        laps.lap("sums and solve");
        let alpha = to_lattice_order(&ctx.k, &ctx.s, &field, lat)?;
        drop(field);
        let (z0, z1) = lat.own();
        let planes = Planes {
            z_first: z0,
            z_count: z1 - z0,
            xfast: false,
        };
        let o = -0.5 * lat.box_length;
        let (k, s) = (&ctx.k, &ctx.s);
        let fresh = lattice_particles(k, s, lat.n, o, lat.h(), self.sigma0, planes, alpha)?;
        laps.lap("fresh particles");
        let ids = lat.point_ids();
        laps.lap("ids");
        let report = RbfReport {
            iterations: [0; 3],
            residual: 0.0,
            lattice_points: lat.n.pow(3),
            kept: lat.n.pow(3),
            seconds: 0.0,
        };
        Ok((fresh, ids, report))
    }

    /// The AB2 history `prev` of the particles `p` (rates evaluated `elapsed` after the last
    /// reset, `nu` the viscosity of the core spreading) carried to the fresh particles of
    /// [`Reinterpolator::reinterpolate`] on the same planes `lat`, in their order
    /// (`vortex_method::reinterpolation::history`, whose module documentation derives it):
    /// the strength rates through the lattice operator with the cores of that evaluation, the
    /// velocities with the fresh core `sigma0`. Three lattice operators per re-interpolation
    /// instead of one, and no second FMM evaluation in the step after it. Collective.
    #[allow(clippy::too_many_arguments)]
    pub fn carry_history(
        &mut self,
        ctx: &Ctx,
        p: &DeviceParticles,
        prev: &DeviceFields,
        nu: f64,
        elapsed: f64,
        lat: &SlabLattice,
        sigma_max: f64,
    ) -> GpuResult<DeviceFields> {
        if prev.vel.len() != 3 * p.n || prev.str.len() != 3 * p.n {
            return Err(GpuError::Unsupported(format!(
                "the AB2 history holds {} rows for {} particles",
                prev.vel.len() / 3,
                p.n
            )));
        }
        let (k, s) = (&ctx.k, &ctx.s);
        let carried = carry_through(
            k,
            s,
            p,
            prev,
            nu,
            elapsed,
            |e| e,
            |q| self.lattice_operator(ctx, q, lat, sigma_max),
        )?;
        Ok(DeviceFields {
            vel: to_lattice_order(k, s, &carried.vel, lat)?,
            str: to_lattice_order(k, s, &carried.str, lat)?,
        })
    }

    /// The velocity statistics of the blobs `p` on the grid `lat` of the box of length `l`
    /// (each rank its planes): the blob vorticity at the grid points (Gaussian sums truncated
    /// at `cutoff` core radii), `u_hat = i k x omega_hat / |k|^2`, the spectrum reduced over
    /// the ranks; with `physical`, also the grid velocity itself on rank 0 (the spectral
    /// solver's order, z fastest). Collective.
    pub fn grid_velocity(
        &mut self,
        ctx: &Ctx,
        p: &DeviceParticles,
        lat: &SlabLattice,
        sigma_max: f64,
        physical: bool,
    ) -> GpuResult<(GridSpectrum, Option<Vec<[f64; 3]>>)> {
        let (comm, k, s) = (ctx.comm, &ctx.k, &ctx.s);
        let exchange = &mut *self.exchange;
        let (mut field, bytes) =
            slab_vorticity(comm, exchange, k, s, p, lat, self.cutoff, sigma_max)?;
        self.bytes += bytes as u64;
        let f = fourier_of(&mut self.fouriers, ctx, lat)?;
        let ranks = Ranks {
            comm,
            exchange: &mut *self.exchange,
        };
        f.biot_savart(ranks, &mut field, lat.box_length, physical)?;
        let spectrum = f.spectrum(comm)?;
        if !physical {
            return Ok((spectrum, None));
        }
        let u = s.clone_dtoh(&to_lattice_order(k, s, &field, lat)?)?;
        let n3 = lat.n.pow(3);
        let rows = vortex_method::parallel::gather_rows(comm, &lat.point_ids(), 3, n3, |i, r| {
            r.copy_from_slice(&u[3 * i..3 * i + 3])
        });
        let velocity = rows.map(|v| v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect());
        Ok((spectrum, velocity))
    }
}

/// The AB2 history `prev` of the particles `p` carried through a lattice operator `op`
/// ([`Reinterpolator::lattice_operator`]): the strength rates spread to the cores of their
/// evaluation (`elapsed` after the last reset, viscosity `nu`), the velocities with the fresh
/// core; `E` the caller's error (`wrap` converts the device's).
#[allow(clippy::too_many_arguments)]
pub fn carry_through<E>(
    k: &crate::kernels::Kernels,
    s: &Arc<CudaStream>,
    p: &DeviceParticles,
    prev: &DeviceFields,
    nu: f64,
    elapsed: f64,
    wrap: impl Fn(GpuError) -> E,
    mut op: impl FnMut(&DeviceParticles) -> std::result::Result<CudaSlice<f64>, E>,
) -> std::result::Result<DeviceFields, E> {
    let copy = |a: &CudaSlice<f64>| s.clone_dtod(a).map_err(|e| wrap(e.into()));
    let mut q = DeviceParticles {
        n: p.n,
        pos: copy(&p.pos)?,
        alpha: copy(&prev.str)?,
        sigma: copy(&p.sigma)?,
        sigma0: copy(&p.sigma0)?,
    };
    q.spread(k, s, nu, elapsed).map_err(&wrap)?;
    let rates = op(&q)?;
    q.alpha = copy(&prev.vel)?;
    q.spread(k, s, 0.0, 0.0).map_err(&wrap)?;
    let vel = op(&q)?;
    Ok(DeviceFields { vel, str: rates })
}

/// Whether the step after a re-interpolation takes the AB2 history through it
/// (`reinterpolation.history = "carry"` and a history `previous` of the same `n` particles):
/// the time since the last reset at which the previous rates were evaluated (step `step - 1`,
/// `step_reset` the step of the last reset); `None` for a Heun restart.
pub fn history_to_carry(
    stepper: &Stepper,
    previous: Option<&DeviceFields>,
    n: usize,
    step: u64,
    step_reset: u64,
) -> Option<f64> {
    match previous {
        Some(prev) if stepper.history == History::Carry && prev.vel.len() == 3 * n => {
            Some(stepper.time(step - 1) - stepper.time(step_reset))
        }
        _ => None,
    }
}
