//! L2L (core paper Eq. 28, 30-32): a parent local expansion shifted to a child's centre, by
//! rotation, `O(p^3)`.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use super::rotate::Z_UPPER;
use super::*;

impl Operators {
    /// L2L (paper Eq. 28, 30-32), rotation-based `O(p^3)`.
    pub fn l2l(
        &self,
        parent_center: [f64; 3],
        child_center: [f64; 3],
        parent: &[Complex64],
        child: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        let distance = self.rotation_between(parent_center, child_center, scratch);
        self.l2l_impl(&scratch.rot, distance, parent, child, &mut scratch.work);
    }

    /// L2L with `rot = self.rotation(child_center - parent_center)` and
    /// `distance = |child_center - parent_center|`.
    pub fn l2l_with_rotation(
        &self,
        rot: &Rotation,
        distance: f64,
        parent: &[Complex64],
        child: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        self.l2l_impl(rot, distance, parent, child, &mut scratch.work);
    }

    fn l2l_impl(
        &self,
        rot: &Rotation,
        distance: f64,
        parent: &[Complex64],
        child: &mut [Complex64],
        w: &mut Work,
    ) {
        self.translate::<Z_UPPER>(rot, &self.t_l2l, distance, self.p + 1, parent, child, w);
    }
}
