//! [`Plan`]: the geometry of one evaluation that a backend is handed (trees, interaction lists,
//! periodic box, expansion order) and its far-field method [`FarField`]. Below the backends and
//! the far-field operators, which both read it (`crate::backend`, `crate::far`).

use crate::lists::InteractionLists;
use crate::tree::Tree;

/// How the far field is represented and applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FarField {
    /// Multipoles, M2L into local expansions, L2L, L2P.
    Fmm,
    /// Pseudo-particles on spheres, M2L as a particle-particle sum (core paper Sec. 3.3).
    Ppm,
    /// Multipoles evaluated directly at the targets (M2P).
    Treecode,
}

impl FarField {
    /// Whether its expansions are pseudo-particles on spheres (the PPM) rather than multipole
    /// coefficients (the FMM and the treecode): what a backend stores per cell.
    pub fn pseudo_particles(self) -> bool {
        self == Self::Ppm
    }

    /// Whether its downward pass ends in local expansions (M2L, L2L, L2P: the FMM and the
    /// PPM); the treecode evaluates its multipoles at the targets (M2P) instead.
    pub fn has_locals(self) -> bool {
        self != Self::Treecode
    }
}

/// Everything a backend needs to know about the geometry of one evaluation.
#[derive(Clone, Debug)]
pub struct Plan {
    pub order: usize,
    /// The order of the cores of the near field.
    pub core: crate::kernel::CoreOrder,
    pub far_field: FarField,
    pub source_tree: Tree,
    pub target_tree: Tree,
    pub lists: InteractionLists,
    /// Periodic box, if periodic (positions are then wrapped and the cube is the box).
    pub periodic: Option<crate::periodic::Periodic>,
}

impl Plan {
    /// Centre of source cell `cell` shifted by periodic image `image`.
    pub fn source_center(&self, cell: usize, image: u8) -> [f64; 3] {
        let c = self.source_tree.cells[cell].center;
        self.shift_of(image)
            .map(|s| std::array::from_fn(|k| c[k] + s[k]))
            .unwrap_or(c)
    }

    /// Displacement of periodic image `image` (`None` for free space or the unshifted image).
    pub fn shift_of(&self, image: u8) -> Option<[f64; 3]> {
        let l = self.periodic?.box_length;
        let s = crate::lists::image_shift(image);
        Some(std::array::from_fn(|k| s[k] as f64 * l))
    }
}

/// Direction key of a translation vector `v` between cell centres on the grid of half-width
/// `h` (the smaller of the two cells): `v / h` rounded and reduced by the gcd of its components.
/// Cell centres sit on that grid, so the key names the direction exactly; backends cache one
/// rotation per key.
pub fn direction_key(v: [f64; 3], h: f64) -> [i64; 3] {
    let mut key: [i64; 3] = std::array::from_fn(|k| (v[k] / h).round() as i64);
    let g = gcd(
        gcd(key[0].unsigned_abs(), key[1].unsigned_abs()),
        key[2].unsigned_abs(),
    );
    if g > 1 {
        key.iter_mut().for_each(|x| *x /= g as i64);
    }
    key
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
