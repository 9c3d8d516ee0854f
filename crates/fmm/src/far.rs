//! The far-field methods behind one interface: which method a plan uses ([`FarMethod`]), the
//! typed expansions that cross the [`crate::Backend`] boundary ([`Expansions`]: FMM
//! coefficients or PPM pseudo-particle values, the one place that knows their layout), and
//! the operators of one method on one cell's expansion ([`FarOps`], implemented by the CPU
//! backend for the FMM and the PPM).
//!
//! Callers (the periodic far images, the MPI exchange of multipoles, backends) ask a
//! [`FarMethod`] (or the plan's [`FarField`]) for what depends on the method instead of
//! matching on it by hand. [`M2lKernel`] is the variant of the FMM's M2L translation that a
//! uniform grid applies below its top level, a parameter of the evaluation
//! (`EvalParams::m2l`).

use crate::expansions::{expansion_len, Complex64};
use crate::lists::SourceRef;
use crate::operators::potential::local_potential;
use crate::operators::{Operators, Scratch};
use crate::plan::{FarField, Plan};
use crate::ppm::PseudoParticles;
use crate::tree::{Cell, Tree};
use crate::FmmError;

/// Multipole or local expansions of a list of cells (`per_cell` values each, concatenated in
/// the order of the cells), typed by the far-field method.
#[derive(Clone, Debug, PartialEq)]
pub enum Expansions {
    /// FMM and treecode: complex coefficients of the three components
    /// (`expansion_len(order)` per cell).
    Coefficients {
        per_cell: usize,
        data: Vec<Complex64>,
    },
    /// PPM: one vector per pseudo-particle (`K` per cell): strengths of a multipole,
    /// potentials at the sphere points of a local.
    PseudoParticles {
        per_cell: usize,
        data: Vec<[f64; 3]>,
    },
}

impl Expansions {
    /// `f64` values per cell in the flat layout ([`Self::to_flat`]).
    pub fn flat_per_cell(&self) -> usize {
        match self {
            Self::Coefficients { per_cell, .. } => 2 * per_cell,
            Self::PseudoParticles { per_cell, .. } => 3 * per_cell,
        }
    }

    /// Expansions of far field `far` from the flat layout ([`Self::to_flat`]) with
    /// `flat_len` values per cell.
    pub fn from_flat(far: FarField, flat_len: usize, flat: &[f64]) -> Self {
        if far.pseudo_particles() {
            Self::PseudoParticles {
                per_cell: flat_len / 3,
                data: flat.chunks_exact(3).map(|q| [q[0], q[1], q[2]]).collect(),
            }
        } else {
            Self::Coefficients {
                per_cell: flat_len / 2,
                data: flat
                    .chunks_exact(2)
                    .map(|z| Complex64::new(z[0], z[1]))
                    .collect(),
            }
        }
    }

    /// Number of cells.
    pub fn cells(&self) -> usize {
        match self {
            Self::Coefficients { per_cell, data } => data.len() / per_cell.max(&1),
            Self::PseudoParticles { per_cell, data } => data.len() / per_cell.max(&1),
        }
    }

    /// The flat `f64` layout (what backends store and ranks send): interleaved `(re, im)`
    /// coefficients, or `[k * 3 + c]` pseudo-particle components.
    pub fn to_flat(&self) -> Vec<f64> {
        match self {
            Self::Coefficients { data, .. } => data.iter().flat_map(|z| [z.re, z.im]).collect(),
            Self::PseudoParticles { data, .. } => data.as_flattened().to_vec(),
        }
    }

    /// Checks that these expansions are of `far` and hold `cells` cells of `flat_len` values.
    pub fn check(&self, far: FarField, cells: usize, flat_len: usize) -> Result<(), FmmError> {
        let kind_ok = matches!(self, Self::PseudoParticles { .. }) == far.pseudo_particles();
        if !kind_ok || self.flat_per_cell() != flat_len || self.cells() != cells {
            return Err(FmmError::Backend(format!(
                "expansions of {} cells x {} values ({}) for {cells} cells x {flat_len} values \
                 of {far:?}",
                self.cells(),
                self.flat_per_cell(),
                match self {
                    Self::Coefficients { .. } => "coefficients",
                    Self::PseudoParticles { .. } => "pseudo-particles",
                }
            )));
        }
        Ok(())
    }
}

/// The M2L translation of the GPU uniform grid below its top level (the top level always uses
/// the rotations: its offsets reach beyond the dense stencil); `vortex bench fmm --m2l`,
/// `EvalParams::m2l`. The adaptive plan ignores it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum M2lKernel {
    /// [`M2lKernel::resolve`]'s rule.
    #[default]
    Auto,
    /// Rotation-based `O(p^3)` translations, one block per target cell.
    Rotation,
    /// Dense per-offset matrices applied to 32 targets of one parity class per block.
    Dense,
}

/// Largest order for which `Auto` takes the dense matrices (the range their tests cover;
/// 343 matrices of `padded_dofs(p)^2` floats: 22 MB at p = 10, 90 MB at p = 14).
pub const DENSE_MAX_ORDER: usize = 14;

impl std::str::FromStr for M2lKernel {
    type Err = String;
    /// The kernel of a name of [`M2lKernel::NAMED`]; another is refused with the valid ones.
    fn from_str(s: &str) -> Result<Self, String> {
        let known = Self::NAMED.iter().find(|(name, _)| *name == s);
        known.map(|&(_, k)| k).ok_or_else(|| {
            let names: Vec<&str> = Self::NAMED.iter().map(|(name, _)| *name).collect();
            format!("unknown M2L kernel '{s}' (expected {})", names.join(", "))
        })
    }
}

impl M2lKernel {
    /// Every kernel with its name (`--m2l`).
    pub const NAMED: [(&'static str, M2lKernel); 3] = [
        ("auto", M2lKernel::Auto),
        ("rotation", M2lKernel::Rotation),
        ("dense", M2lKernel::Dense),
    ];

    /// The kernel that runs at order `p` and why: an explicit choice is kept; `Auto` takes
    /// the dense matrices for `4 <= p <= DENSE_MAX_ORDER` (a matrix product of `2 D^2` flops
    /// per component and translation, `D = (p+1)^2` padded to 64, runs near the peak f32 rate
    /// while the rotations' three dependent stages with block barriers do not: expected about
    /// 2.5x faster at p = 10 on an H100, error at the f32 level), the rotations otherwise
    /// (below p = 4 the padding to 64 wastes most of the product; above 14 the matrices grow
    /// past 90 MB).
    pub fn resolve(self, p: usize) -> (M2lKernel, &'static str) {
        match self {
            M2lKernel::Rotation => (self, "asked for"),
            M2lKernel::Dense => (self, "asked for"),
            M2lKernel::Auto if (4..=DENSE_MAX_ORDER).contains(&p) => (
                M2lKernel::Dense,
                "auto: 4 <= p <= 14, dense per-offset matrix products",
            ),
            M2lKernel::Auto => (
                M2lKernel::Rotation,
                "auto: p outside 4..=14, rotation-based translations",
            ),
        }
    }
}

/// A far-field method at one expansion order, with what its expansions need (the
/// pseudo-particles of the PPM): the one place that knows their layout.
#[derive(Clone, Debug)]
pub enum FarMethod {
    /// Multipoles and locals of `expansion_len(order)` complex coefficients (the treecode
    /// uses the multipoles only).
    Fmm { far: FarField, order: usize },
    /// Pseudo-particles on spheres.
    Ppm(PseudoParticles),
}

impl FarMethod {
    pub fn new(far: FarField, order: usize) -> Self {
        if far.pseudo_particles() {
            Self::Ppm(PseudoParticles::new(order))
        } else {
            Self::Fmm { far, order }
        }
    }

    /// The method of a plan.
    pub fn of_plan(plan: &Plan) -> Self {
        Self::new(plan.far_field, plan.order)
    }

    pub fn far_field(&self) -> FarField {
        match self {
            Self::Fmm { far, .. } => *far,
            Self::Ppm(_) => FarField::Ppm,
        }
    }

    pub fn order(&self) -> usize {
        match self {
            Self::Fmm { order, .. } => *order,
            Self::Ppm(pp) => pp.order(),
        }
    }

    /// The radius factor of the PPM spheres for the acceptance criterion (`None`: cells'
    /// own radii).
    pub fn sphere_radius_factor(&self) -> Option<f64> {
        match self {
            Self::Fmm { .. } => None,
            Self::Ppm(pp) => Some(pp.radius_factor()),
        }
    }

    /// `f64` values per cell in the flat layout.
    pub fn flat_len(&self) -> usize {
        match self {
            Self::Fmm { order, .. } => 2 * expansion_len(*order),
            Self::Ppm(pp) => pp.len(),
        }
    }

    /// Expansions from the flat layout (`flat_len()` values per cell).
    pub fn from_flat(&self, flat: &[f64]) -> Expansions {
        Expansions::from_flat(self.far_field(), self.flat_len(), flat)
    }

    /// Zero expansions of `cells` cells.
    pub fn zeros(&self, cells: usize) -> Expansions {
        self.from_flat(&vec![0.0; cells * self.flat_len()])
    }

    /// M2M into `parent` (one cell) from `child` (one cell), given the cells' centres and
    /// half-widths: the FMM operator of `ops` or the PPM's.
    #[allow(clippy::too_many_arguments)]
    pub fn m2m(
        &self,
        ops: &Operators,
        scratch: &mut Scratch,
        child_cell: ([f64; 3], f64),
        parent_cell: ([f64; 3], f64),
        child: &Expansions,
        parent: &mut Expansions,
    ) {
        match (self, child, parent) {
            (
                Self::Fmm { .. },
                Expansions::Coefficients { data: c, .. },
                Expansions::Coefficients { data: p, .. },
            ) => ops.m2m(child_cell.0, parent_cell.0, c, p, scratch),
            (
                Self::Ppm(pp),
                Expansions::PseudoParticles { data: c, .. },
                Expansions::PseudoParticles { data: p, .. },
            ) => pp.m2m(
                child_cell.0,
                child_cell.1,
                parent_cell.0,
                parent_cell.1,
                c.as_flattened(),
                p.as_flattened_mut(),
            ),
            _ => panic!("M2M between expansions of another far-field method"),
        }
    }

    /// The FMM multipole (about the cell's centre) of the expansion `m` of one `cell`:
    /// pseudo-particles reproduce the moments of degree <= p exactly, so their P2M is the FMM
    /// multipole of the sources.
    pub fn fmm_multipole(&self, ops: &Operators, cell: &Cell, m: &Expansions) -> Vec<Complex64> {
        match (self, m) {
            (Self::Fmm { .. }, Expansions::Coefficients { data, .. }) => data.clone(),
            (Self::Ppm(pp), Expansions::PseudoParticles { data, .. }) => {
                let pts = pp.sphere_points(cell.center, cell.half_width);
                let mut out = vec![Complex64::new(0.0, 0.0); expansion_len(pp.order())];
                ops.p2m(cell.center, &pts, data, &mut out);
                out
            }
            _ => panic!("a multipole of another far-field method"),
        }
    }

    /// FMM local expansions of the cells `locals` (cell index in `tree`, coefficients) in this
    /// method's representation: the coefficients, or the potentials at the sphere points.
    pub fn from_fmm_locals(&self, tree: &Tree, locals: &[(usize, Vec<Complex64>)]) -> Expansions {
        match self {
            Self::Fmm { order, .. } => Expansions::Coefficients {
                per_cell: expansion_len(*order),
                data: locals.iter().flat_map(|(_, l)| l.iter().copied()).collect(),
            },
            Self::Ppm(pp) => Expansions::PseudoParticles {
                per_cell: pp.count(),
                data: locals
                    .iter()
                    .flat_map(|(c, local)| {
                        let cell = &tree.cells[*c];
                        let pts = pp.sphere_points(cell.center, cell.half_width);
                        local_potential(pp.order(), cell.center, local, &pts)
                    })
                    .collect(),
            },
        }
    }
}

/// The far-field operators of one method on one cell's expansion, stored flat as `f64`
/// (`flat_len()` values: the layout of [`Expansions::to_flat`]). The CPU backend writes its
/// phases once over this trait; it implements it for the FMM (with a rotation cache) and for
/// [`PseudoParticles`].
pub trait FarOps: Sync {
    type Scratch: Send;
    /// `f64` values per expansion.
    fn flat_len(&self) -> usize;
    fn scratch(&self) -> Self::Scratch;
    fn p2m(&self, cell: &Cell, position: &[[f64; 3]], strength: &[[f64; 3]], m: &mut [f64]);
    fn m2m(&self, child: &Cell, parent: &Cell, cm: &[f64], pm: &mut [f64], s: &mut Self::Scratch);
    fn m2l(
        &self,
        plan: &Plan,
        target: usize,
        source: SourceRef,
        m: &[f64],
        l: &mut [f64],
        s: &mut Self::Scratch,
    );
    fn l2l(&self, parent: &Cell, child: &Cell, pl: &[f64], cl: &mut [f64], s: &mut Self::Scratch);
    #[allow(clippy::too_many_arguments)]
    fn l2p(
        &self,
        cell: &Cell,
        l: &[f64],
        position: &[[f64; 3]],
        alpha: &[[f64; 3]],
        velocity: &mut [[f64; 3]],
        stretching: &mut [[f64; 3]],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_m2l_kernel_parses_its_names_and_refuses_others() {
        for (name, k) in [
            ("auto", M2lKernel::Auto),
            ("rotation", M2lKernel::Rotation),
            ("dense", M2lKernel::Dense),
        ] {
            assert_eq!(name.parse::<M2lKernel>(), Ok(k));
        }
        let e = "plain".parse::<M2lKernel>().unwrap_err();
        assert!(
            e.contains("'plain'") && e.contains("auto, rotation or dense"),
            "{e}"
        );
        // auto: the dense matrices exactly where they are tested, the rotations elsewhere
        for p in 1..=crate::MAX_ORDER {
            let dense = (4..=DENSE_MAX_ORDER).contains(&p);
            let want = if dense {
                M2lKernel::Dense
            } else {
                M2lKernel::Rotation
            };
            assert_eq!(M2lKernel::Auto.resolve(p).0, want, "p = {p}");
            assert_eq!(M2lKernel::Rotation.resolve(p).0, M2lKernel::Rotation);
            assert_eq!(M2lKernel::Dense.resolve(p).0, M2lKernel::Dense);
        }
    }
}
