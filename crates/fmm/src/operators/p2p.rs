//! Near-field P2P: direct Gaussian-cored Biot-Savart velocity and stretching between the
//! points of a target leaf and those of its near source leaves (core paper Eq. 5, 7, 9;
//! the pair formula is [`crate::kernel::pair_interaction`]).

use crate::kernel::{cross, dot, kernel_factors};

/// Accumulates (no `1/(4 pi)`) the velocity and stretching that the sources
/// `(src_pos, src_strength, src_sigma)`, shifted by `shift`, induce at the targets.
#[allow(clippy::too_many_arguments)]
pub fn p2p(
    tgt_pos: &[[f64; 3]],
    tgt_strength: &[[f64; 3]],
    src_pos: &[[f64; 3]],
    src_strength: &[[f64; 3]],
    src_sigma: &[f64],
    shift: [f64; 3],
    velocity: &mut [[f64; 3]],
    stretching: &mut [[f64; 3]],
) {
    for (i, xi) in tgt_pos.iter().enumerate() {
        let ai = tgt_strength[i];
        let xi = [xi[0] - shift[0], xi[1] - shift[1], xi[2] - shift[2]];
        let (mut u, mut s) = ([0.0; 3], [0.0; 3]);
        for j in 0..src_pos.len() {
            let xj = src_pos[j];
            let d = [xi[0] - xj[0], xi[1] - xj[1], xi[2] - xj[2]];
            let (k, kp_over_r) = kernel_factors(dot(d, d), src_sigma[j]);
            let aj = src_strength[j];
            let axd = cross(aj, d);
            let axa = cross(aj, ai);
            let ad = dot(ai, d) * kp_over_r;
            for c in 0..3 {
                u[c] += k * axd[c];
                s[c] += k * axa[c] + ad * axd[c];
            }
        }
        for c in 0..3 {
            velocity[i][c] += u[c];
            stretching[i][c] += s[c];
        }
    }
}
