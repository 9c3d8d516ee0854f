//! Who holds which particle, settled before each evaluation: the owner of every particle from
//! its packed f32 position as the uniform grid's sort computes it, and the particles that left
//! this rank's slab handed to their owners with everything that travels with them
//! ([`super::exchange::migrate`]). The slabs are those of the evaluation engine
//! (`DeviceEvaluator::slabs`); an engine without slabs holds the whole box on one rank, where
//! nothing can leave, and the lattice of the re-interpolation is one slab of every plane.

use super::exchange::{migrate, owners_of, Moved, Ownership};
use super::lattice::SlabLattice;
use super::owners::Owners;
use crate::ctx::{gpu_err, Ctx};
use crate::state::{reduce_moments, DeviceFields, DeviceParticles};
use cudarc::driver::CudaSlice;
use vortex_domain::ReduceOp;
use vortex_gpu::uniform::slab::SlabPlan;
use vortex_gpu::uniform::DeviceEvaluator;
use vortex_method::{Error, Result};

/// The leaf-plane owners of a slab plan.
pub fn owners_of_plan(plan: &SlabPlan) -> Owners {
    let (lo, inv_w) = plan.grid.f32_params();
    Owners {
        lo: lo[2],
        inv_w,
        plane_owner: (0..plan.n()).map(|z| plan.owner(z) as i32).collect(),
        ranks: plan.ranks(),
    }
}

/// Where the particles live: the evaluation engine's slabs for the current global particle
/// count and largest core, and the traffic of the migrations so far.
pub struct Placement {
    /// Whether the engine splits the particles into slabs (asked once: one rank holds the
    /// whole box and nothing migrates otherwise).
    slabbed: bool,
    /// Particles sent to other ranks by the migrations so far.
    pub migrated: u64,
    /// Bytes this rank sent: migrations, halos of the lattice sums, FMM exchanges.
    pub bytes: u64,
}

impl Placement {
    /// The placement of `fmm`'s particles (`n_global` of them, cores up to `sigma_max`).
    /// Collective.
    pub fn new(fmm: &dyn DeviceEvaluator, n_global: usize, sigma_max: f64) -> Result<Self> {
        Ok(Self {
            slabbed: Self::slabs(fmm, n_global, sigma_max)?.is_some(),
            migrated: 0,
            bytes: 0,
        })
    }

    /// The slabs of the engine's grid for `n_global` particles of largest core `sigma_max`
    /// (`None`: the engine holds the whole box on this rank). Collective.
    fn slabs(
        fmm: &dyn DeviceEvaluator,
        n_global: usize,
        sigma_max: f64,
    ) -> Result<Option<SlabPlan>> {
        fmm.slabs(n_global, sigma_max)
            .map_err(|e| Error::Other(format!("uniform grid slabs: {e}")))
    }

    /// This rank's part of the periodic lattice of `n` planes per side (box `l`, Gaussians up
    /// to `sigma_max` truncated at `cutoff` cores): the lattice planes whose points it owns.
    /// Collective.
    #[allow(clippy::too_many_arguments)]
    pub fn lattice(
        &self,
        ctx: &Ctx,
        fmm: &dyn DeviceEvaluator,
        n_global: usize,
        n: usize,
        l: f64,
        cutoff: f64,
        sigma_max: f64,
    ) -> Result<SlabLattice> {
        let owners = Self::slabs(fmm, n_global, sigma_max)?.map(|plan| owners_of_plan(&plan));
        let bounds = match &owners {
            Some(o) => o.lattice_bounds(n, l),
            None => vec![0, n],
        };
        let lat = SlabLattice::new(n, l, bounds, ctx.comm.rank(), cutoff, sigma_max)
            .map_err(gpu_err("lattice"))?;
        Ok(match owners {
            Some(o) => lat.with_owners(o),
            None => lat,
        })
    }

    /// Where the particles of `lead` belong and whether any particle of any rank is away from
    /// its owner (`None`: one rank holds the whole box). Collective.
    fn owners_now(
        &self,
        ctx: &Ctx,
        fmm: &dyn DeviceEvaluator,
        n_global: usize,
        lead: &DeviceParticles,
        l: f64,
    ) -> Result<Option<Ownership>> {
        if !self.slabbed {
            return Ok(None);
        }
        let mut laps = crate::laps::Laps::new(&ctx.s, "owners");
        let m = lead.moments(&ctx.k, &ctx.s, l).map_err(gpu_err("moments"));
        let m = reduce_moments(ctx.comm, vortex_method::parallel::agree(ctx.comm, m)?);
        laps.lap("moments");
        let Some(plan) = Self::slabs(fmm, n_global, m.sigma_max)? else {
            return Ok(None);
        };
        laps.lap("plan");
        let input = lead.pack(&ctx.k, &ctx.s, l).map_err(gpu_err("pack"))?;
        let me = ctx.comm.rank();
        let own = owners_of(&ctx.k, &ctx.s, &input, lead.n, &owners_of_plan(&plan), me)
            .map_err(gpu_err("owners"))?;
        laps.lap("owner lists");
        let mut away = [(own.leaving() > 0) as u8 as f64];
        ctx.comm.allreduce_f64(&mut away, ReduceOp::Max);
        laps.lap("agree");
        Ok((away[0] > 0.0).then_some(own))
    }

    fn count(&mut self, mv: Moved) {
        self.migrated += mv.sent as u64;
        self.bytes += mv.bytes as u64;
    }

    /// Hands the particles `p` that left this rank's slab to their owners, with their
    /// Adams-Bashforth history `previous` and their global `ids`. Collective.
    #[allow(clippy::too_many_arguments)]
    pub fn settle_state(
        &mut self,
        ctx: &Ctx,
        fmm: &dyn DeviceEvaluator,
        n_global: usize,
        l: f64,
        p: &mut DeviceParticles,
        previous: Option<&mut DeviceFields>,
        ids: &mut Vec<u64>,
    ) -> Result<()> {
        let Some(own) = self.owners_now(ctx, fmm, n_global, p, l)? else {
            return Ok(());
        };
        let mut n = p.n;
        let mut arrays = rows_of(p);
        if let Some(f) = previous {
            arrays.push((&mut f.vel, 3));
            arrays.push((&mut f.str, 3));
        }
        let mv = migrate(ctx.comm, &ctx.k, &ctx.s, &mut arrays, &mut n, ids, &own)
            .map_err(gpu_err("migration"))?;
        p.n = n;
        self.count(mv);
        Ok(())
    }

    /// Hands the Heun predictor `star` to the owners of its positions, the state `p` and the
    /// rates `f_n` of the same particles with it. Collective.
    #[allow(clippy::too_many_arguments)]
    pub fn settle_predictor(
        &mut self,
        ctx: &Ctx,
        fmm: &dyn DeviceEvaluator,
        n_global: usize,
        l: f64,
        (star, p, f_n): (
            &mut DeviceParticles,
            &mut DeviceParticles,
            &mut DeviceFields,
        ),
        ids: &mut Vec<u64>,
    ) -> Result<()> {
        let Some(own) = self.owners_now(ctx, fmm, n_global, star, l)? else {
            return Ok(());
        };
        let mut n = star.n;
        let mut arrays = rows_of(star);
        arrays.extend(rows_of(p));
        arrays.push((&mut f_n.vel, 3));
        arrays.push((&mut f_n.str, 3));
        let mv = migrate(ctx.comm, &ctx.k, &ctx.s, &mut arrays, &mut n, ids, &own)
            .map_err(gpu_err("migration"))?;
        star.n = n;
        p.n = n;
        self.count(mv);
        Ok(())
    }
}

/// The per-particle arrays of `p` with their row widths.
fn rows_of(p: &mut DeviceParticles) -> Vec<(&mut CudaSlice<f64>, usize)> {
    vec![
        (&mut p.pos, 3),
        (&mut p.alpha, 3),
        (&mut p.sigma, 1),
        (&mut p.sigma0, 1),
    ]
}
