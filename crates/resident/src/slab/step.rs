//! The phases of the resident step that differ on several ranks, as methods of
//! [`ResidentSimulation`]: moments reduced over the ranks, particles settled on their owners
//! before an evaluation, the FMM over the slabs, the re-interpolation and the grid velocity on
//! the ranks' lattice planes.

use super::exchange::{migrate, owners_of, Ownership};
use super::lattice::{slab_vorticity, SlabLattice};
use super::owners::Owners;
use crate::fourier::GridSpectrum;
use crate::lattice::{lattice_particles, Planes};
use crate::reinterpolation::{carry_through, inverse_eigenvalues};
use crate::simulation::{gpu_err, ResidentSimulation};
use crate::slab_fourier::{Ranks, SlabAxis, SlabFourier, SlabLayout};
use crate::state::{DeviceFields, DeviceParticles, Moments};
use cudarc::driver::CudaSlice;
use std::collections::HashMap;
use vortex_domain::{Comm, ReduceOp};
use vortex_exchange::DeviceExchange;
use vortex_gpu::uniform::slab::SlabPlan;
use vortex_method::reinterpolation::RbfReport;
use vortex_method::{Error, Result};

/// What the distributed step keeps between steps: the device exchange, the slab transforms
/// of each lattice size and split, the inverse eigenvalues of the lattice solve, and counters.
pub struct SlabStep {
    /// The device exchange of the transposes (one per run).
    exchange: Box<dyn DeviceExchange>,
    fouriers: HashMap<(usize, Vec<usize>), SlabFourier>,
    inv_eig: Option<CudaSlice<f64>>,
    /// Particles sent to other ranks by the migrations so far.
    pub migrated: u64,
    /// Bytes this rank sent: migrations, halos of the lattice sums, FMM exchanges.
    pub bytes: u64,
}

impl SlabStep {
    pub fn new(exchange: Box<dyn DeviceExchange>) -> Self {
        Self {
            exchange,
            fouriers: HashMap::new(),
            inv_eig: None,
            migrated: 0,
            bytes: 0,
        }
    }
}

/// The moments of every rank's particles (sums added, extremes reduced). Collective.
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

impl ResidentSimulation<'_> {
    /// The slabs of the uniform grid for the current global particle count and largest core
    /// (the grid of the one-rank evaluation of the same particles). Collective.
    pub(crate) fn slab_plan(&self, sigma_max: f64) -> Result<SlabPlan> {
        let plan = self
            .fmm
            .slabs(self.n_global, sigma_max)
            .map_err(|e| Error::Other(format!("step {}: uniform grid slabs: {e}", self.step)))?;
        plan.ok_or_else(|| Error::Other("the device evaluation has no slabs".into()))
    }

    /// Where the particles of `lead` belong (index lists on the device) and whether any
    /// particle of any rank is away from its owner. Collective.
    fn owners_now(&self, lead: &DeviceParticles) -> Result<(Ownership, bool)> {
        let mut laps = crate::laps::Laps::new(&self.s, "owners");
        let m = self.moments_of(lead)?;
        laps.lap("moments");
        let plan = self.slab_plan(m.sigma_max)?;
        laps.lap("plan");
        let input = self.pack(lead)?;
        let me = self.comm.rank();
        let own = owners_of(&self.k, &self.s, &input, lead.n, &owners_of_plan(&plan), me)
            .map_err(gpu_err("owners"))?;
        laps.lap("owner lists");
        let mut away = [(own.leaving() > 0) as u8 as f64];
        self.comm.allreduce_f64(&mut away, ReduceOp::Max);
        laps.lap("agree");
        Ok((own, away[0] > 0.0))
    }

    /// Hands the particles of the state that left this rank's slab (with their
    /// Adams-Bashforth history) to their owners. Collective.
    pub(crate) fn settle_state(&mut self) -> Result<()> {
        let (own, away) = self.owners_now(&self.p)?;
        if !away {
            return Ok(());
        }
        let p = &mut self.p;
        let mut arrays = vec![
            (&mut p.pos, 3),
            (&mut p.alpha, 3),
            (&mut p.sigma, 1),
            (&mut p.sigma0, 1),
        ];
        if let Some(f) = self.previous.as_mut() {
            arrays.push((&mut f.vel, 3));
            arrays.push((&mut f.str, 3));
        }
        let mv = migrate(
            self.comm,
            &self.k,
            &self.s,
            &mut arrays,
            &mut p.n,
            &mut self.ids,
            &own,
        )
        .map_err(gpu_err("migration"))?;
        let slab = self.slab.as_mut().expect("several ranks");
        slab.migrated += mv.sent as u64;
        slab.bytes += mv.bytes as u64;
        Ok(())
    }

    /// Hands the Heun predictor `star` to the owners of its positions, the state and the
    /// rates `f_n` of the same particles with it. Collective.
    pub(crate) fn settle_predictor(
        &mut self,
        star: &mut DeviceParticles,
        f_n: &mut DeviceFields,
    ) -> Result<()> {
        let (own, away) = self.owners_now(star)?;
        if !away {
            return Ok(());
        }
        let p = &mut self.p;
        let mut arrays = vec![
            (&mut star.pos, 3),
            (&mut star.alpha, 3),
            (&mut star.sigma, 1),
            (&mut star.sigma0, 1),
            (&mut p.pos, 3),
            (&mut p.alpha, 3),
            (&mut p.sigma, 1),
            (&mut p.sigma0, 1),
            (&mut f_n.vel, 3),
            (&mut f_n.str, 3),
        ];
        let mut n = star.n;
        let mv = migrate(
            self.comm,
            &self.k,
            &self.s,
            &mut arrays,
            &mut n,
            &mut self.ids,
            &own,
        )
        .map_err(gpu_err("migration"))?;
        star.n = n;
        self.p.n = n;
        let slab = self.slab.as_mut().expect("several ranks");
        slab.migrated += mv.sent as u64;
        slab.bytes += mv.bytes as u64;
        Ok(())
    }

    /// This rank's part of the periodic lattice of `n` planes per side for cores up to
    /// `sigma_max`: the planes whose points it owns. Collective.
    fn slab_lattice(&self, n: usize, sigma_max: f64) -> Result<SlabLattice> {
        let plan = self.slab_plan(sigma_max)?;
        let l = self.box_length();
        let bounds = owners_of_plan(&plan).lattice_bounds(n, l);
        let cutoff = self.config.reinterpolation.cutoff;
        SlabLattice::new(n, l, bounds, self.comm.rank(), cutoff, sigma_max)
            .map_err(gpu_err("lattice"))
    }

    /// The slab transforms of `lat`'s lattice and split (planned once) and the device
    /// exchange of their transposes.
    fn slab_fourier(
        &mut self,
        lat: &SlabLattice,
    ) -> Result<(&mut SlabFourier, &mut dyn DeviceExchange)> {
        let key = (lat.n, lat.bounds.clone());
        let slab = self.slab.as_mut().expect("several ranks");
        if !slab.fouriers.contains_key(&key) {
            let layout = SlabLayout::new(lat.n, &lat.bounds, lat.rank, SlabAxis::Z)
                .map_err(|e| Error::Other(e.to_string()))?;
            let f = SlabFourier::new(&self.dev, self.s.clone(), layout)
                .map_err(gpu_err("slab transforms"))?;
            slab.fouriers.insert(key.clone(), f);
        }
        let f = slab.fouriers.get_mut(&key).expect("inserted above");
        Ok((f, &mut *slab.exchange))
    }

    /// `L_c[x] v = A^{-1} G_c[x] v` over the slabs: the Gaussian sums of the blobs `q` (every
    /// rank's, `sigma_max` the largest core) at this rank's planes of `lat`, then the lattice
    /// solve with the core `sigma0` over the slabs (`3` doubles per own point, slab layout, the
    /// first `3 lat.points()` of the returned buffer). The one-GPU twin is
    /// `Reinterpolator::lattice_operator`. Collective.
    fn lattice_operator_slab(
        &mut self,
        q: &DeviceParticles,
        lat: &SlabLattice,
        sigma_max: f64,
    ) -> Result<CudaSlice<f64>> {
        let mut laps = crate::laps::Laps::new(&self.s, "lattice operator over slabs");
        let cutoff = self.config.reinterpolation.cutoff;
        let exchange = &mut *self.slab.as_mut().expect("several ranks").exchange;
        let (mut field, bytes) = slab_vorticity(
            self.comm, exchange, &self.k, &self.s, q, lat, cutoff, sigma_max,
        )
        .map_err(gpu_err("lattice sums"))?;
        laps.lap("sums");
        let sigma0 = self.config.sigma0();
        let slab = self.slab.as_mut().expect("several ranks");
        slab.bytes += bytes as u64;
        if slab.inv_eig.is_none() {
            let filter = &self.config.reinterpolation.filter;
            let e = inverse_eigenvalues(lat.n, lat.h(), sigma0, cutoff, filter)
                .map_err(|e| Error::Rbf(format!("{e}; lower initial.overlap")))?;
            slab.inv_eig = Some(
                self.s
                    .clone_htod(&e)
                    .map_err(|e| gpu_err("upload")(e.into()))?,
            );
        }
        let inv_eig = slab.inv_eig.take().expect("set above");
        let c = (2.0 * std::f64::consts::PI * sigma0 * sigma0).powf(-1.5);
        let comm = self.comm;
        let (f, exchange) = self.slab_fourier(lat)?;
        let r = f.solve_rbf(Ranks { comm, exchange }, &mut field, &inv_eig, c);
        self.slab.as_mut().expect("several ranks").inv_eig = Some(inv_eig);
        r.map_err(gpu_err("lattice solve"))?;
        laps.lap("solve");
        Ok(field)
    }

    /// The RBF re-interpolation over the slabs: fresh particles on this rank's lattice planes
    /// and their global ids (the one-rank lattice order); with `history` (the AB2 history of
    /// the current particles, see [`ResidentSimulation::carry_history_slab`]), that history
    /// carried to the fresh particles. Collective.
    pub(crate) fn reinterpolate_slab(
        &mut self,
        sigma_max: f64,
        history: Option<(&DeviceFields, f64)>,
    ) -> Result<(DeviceParticles, Vec<u64>, RbfReport, Option<DeviceFields>)> {
        let n = self.config.lattice_n().expect("checked by unsupported()");
        let mut laps = crate::laps::Laps::new(&self.s, "re-interpolation over slabs");
        let lat = self.slab_lattice(n, sigma_max)?;
        laps.lap("plan");
        let carried = match history {
            Some((prev, elapsed)) => Some(self.carry_history_slab(prev, elapsed, &lat, sigma_max)?),
            None => None,
        };
        laps.lap("history");
        let p = std::mem::replace(
            &mut self.p,
            DeviceParticles::zeros(&self.s, 0).map_err(gpu_err("alloc"))?,
        );
        let field = self.lattice_operator_slab(&p, &lat, sigma_max);
        self.p = p;
        let field = field?;
        laps.lap("sums and solve");
        let (z0, z1) = lat.own();
        let planes = Planes {
            z_first: z0,
            z_count: z1 - z0,
            xfast: true,
        };
        let o = -0.5 * lat.box_length;
        let sigma0 = self.config.sigma0();
        let fresh = lattice_particles(&self.k, &self.s, n, o, lat.h(), sigma0, planes, field)
            .map_err(gpu_err("fresh particles"))?;
        laps.lap("fresh particles");
        let report = RbfReport {
            iterations: [0; 3],
            residual: 0.0,
            lattice_points: n.pow(3),
            kept: n.pow(3),
            seconds: 0.0,
        };
        let ids = lat.point_ids();
        laps.lap("ids");
        Ok((fresh, ids, report, carried))
    }

    /// The AB2 history `prev` of this rank's particles (rates evaluated `elapsed` after the
    /// last reset) carried to the fresh particles of `lat`'s planes through the lattice
    /// operator over the slabs, as `Reinterpolator::carry_history` on one GPU (the derivation:
    /// `vortex_method::reinterpolation::history`): the strength rates with the cores of that
    /// evaluation, the velocities with the fresh core. Collective.
    fn carry_history_slab(
        &mut self,
        prev: &DeviceFields,
        elapsed: f64,
        lat: &SlabLattice,
        sigma_max: f64,
    ) -> Result<DeviceFields> {
        let p = &self.p;
        if prev.vel.len() != 3 * p.n || prev.str.len() != 3 * p.n {
            return Err(Error::Other(format!(
                "step {}: the AB2 history holds {} rows for {} particles",
                self.step,
                prev.vel.len() / 3,
                p.n
            )));
        }
        let (k, s, nu) = (self.k.clone(), self.s.clone(), self.stepper.nu);
        let p = std::mem::replace(
            &mut self.p,
            DeviceParticles::zeros(&s, 0).map_err(gpu_err("alloc"))?,
        );
        let carried = carry_through(&k, &s, &p, prev, nu, elapsed, gpu_err("history"), |q| {
            self.lattice_operator_slab(q, lat, sigma_max)
        });
        self.p = p;
        let DeviceFields { vel, str: rates } = carried?;
        let own = 3 * lat.points();
        let exact = |a: CudaSlice<f64>| -> Result<CudaSlice<f64>> {
            if a.len() == own {
                return Ok(a);
            }
            let mut b = s
                .alloc_zeros::<f64>(own.max(1))
                .map_err(|e| gpu_err("alloc")(e.into()))?;
            if own > 0 {
                s.memcpy_dtod(&a.slice(0..own), &mut b.slice_mut(0..own))
                    .map_err(|e| gpu_err("copy")(e.into()))?;
            }
            Ok(b)
        };
        Ok(DeviceFields {
            vel: exact(vel)?,
            str: exact(rates)?,
        })
    }

    /// The velocity statistics of the blobs on the `n^3` grid of the box over the slabs;
    /// with `physical`, also the grid velocity on rank 0 in the spectral solver's order (z
    /// fastest). Collective.
    pub(crate) fn grid_velocity_slab(
        &mut self,
        n: usize,
        sigma_max: f64,
        physical: bool,
    ) -> Result<(GridSpectrum, Option<Vec<[f64; 3]>>)> {
        let lat = self.slab_lattice(n, sigma_max)?;
        let cutoff = self.config.reinterpolation.cutoff;
        let exchange = &mut *self.slab.as_mut().expect("several ranks").exchange;
        let (mut field, bytes) = slab_vorticity(
            self.comm, exchange, &self.k, &self.s, &self.p, &lat, cutoff, sigma_max,
        )
        .map_err(gpu_err("grid sums"))?;
        self.slab.as_mut().expect("several ranks").bytes += bytes as u64;
        let (comm, l) = (self.comm, self.box_length());
        let (f, exchange) = self.slab_fourier(&lat)?;
        f.biot_savart(Ranks { comm, exchange }, &mut field, l, physical)
            .map_err(gpu_err("Biot-Savart"))?;
        let spectrum = f.spectrum(comm).map_err(gpu_err("spectrum"))?;
        if !physical {
            return Ok((spectrum, None));
        }
        let u = self
            .s
            .clone_dtoh(&field.slice(0..3 * lat.points()))
            .map_err(|e| gpu_err("download")(e.into()))?;
        let rows =
            vortex_method::parallel::gather_rows(comm, &lat.point_ids(), 3, n.pow(3), |i, r| {
                r.copy_from_slice(&u[3 * i..3 * i + 3])
            });
        let velocity = rows.map(|v| v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect());
        Ok((spectrum, velocity))
    }
}
