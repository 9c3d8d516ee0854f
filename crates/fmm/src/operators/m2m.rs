//! M2M (core paper Eq. 26, 30-32): a child multipole shifted to its parent's centre, by
//! rotation, `O(p^3)`.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use super::rotate::Z_LOWER;
use super::*;

impl Operators {
    /// M2M (paper Eq. 26, 30-32), rotation-based `O(p^3)`: accumulates the child multipole
    /// shifted to the parent centre.
    pub fn m2m(
        &self,
        child_center: [f64; 3],
        parent_center: [f64; 3],
        child: &[Complex64],
        parent: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        let distance = self.rotation_between(child_center, parent_center, scratch);
        self.m2m_impl(&scratch.rot, distance, child, parent, &mut scratch.work);
    }

    /// M2M with `rot = self.rotation(parent_center - child_center)` and
    /// `distance = |parent_center - child_center|`.
    pub fn m2m_with_rotation(
        &self,
        rot: &Rotation,
        distance: f64,
        child: &[Complex64],
        parent: &mut [Complex64],
        scratch: &mut Scratch,
    ) {
        self.m2m_impl(rot, distance, child, parent, &mut scratch.work);
    }

    fn m2m_impl(
        &self,
        rot: &Rotation,
        distance: f64,
        child: &[Complex64],
        parent: &mut [Complex64],
        w: &mut Work,
    ) {
        // in the rotated frame the child centre sits at -distance on the z axis
        let tau = -distance;
        self.translate::<Z_LOWER>(rot, &self.t_m2m, tau, self.p + 1, child, parent, w);
    }
}
