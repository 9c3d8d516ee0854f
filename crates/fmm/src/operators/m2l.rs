//! M2L (core paper Eq. 27, 30-32): a multipole translated into a local expansion, by
//! rotation, `O(p^3)`.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use super::rotate::Z_FULL;
use super::*;

impl Operators {
    /// M2L (paper Eq. 27, 30-32), rotation-based `O(p^3)`; builds the rotation on the fly
    /// (`O(p^4)`, use [`Operators::m2l_with_rotation`] with cached rotations in hot loops).
    pub fn m2l(
        &self,
        source_center: [f64; 3],
        target_center: [f64; 3],
        multipole: &[Complex64],
        local: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        let distance = self.rotation_between(source_center, target_center, scratch);
        self.m2l_impl(&scratch.rot, distance, multipole, local, &mut scratch.work);
    }

    /// M2L with `rot = self.rotation(target_center - source_center)` and
    /// `distance = |target_center - source_center|`. `O(p^3)`, no allocation, the rotation
    /// is shared by the three components.
    pub fn m2l_with_rotation(
        &self,
        rot: &Rotation,
        distance: f64,
        multipole: &[Complex64],
        local: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        self.m2l_impl(rot, distance, multipole, local, &mut scratch.work);
    }

    fn m2l_impl(
        &self,
        rot: &Rotation,
        distance: f64,
        multipole: &[Complex64],
        local: &mut [Complex64],
        w: &mut Work,
    ) {
        let inv = 1.0 / distance;
        self.translate::<Z_FULL>(rot, &self.t_m2l, inv, self.p + 2, multipole, local, w);
    }
}
