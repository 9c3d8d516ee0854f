//! Direct O(N M) summation in f64: the reference every fast method is checked against.

use crate::kernel::{pair_interaction, INV_4PI};
use crate::{Fields, Sources, Targets};
use rayon::prelude::*;

/// Velocity and stretching at every target from every source (free space), in input order.
pub fn direct(sources: &Sources, targets: &Targets) -> Fields {
    direct_shifted(sources, targets, &[[0.0; 3]])
}

/// Like [`direct`], summing also over the source copies displaced by each of `shifts`
/// (used for periodic image sums in tests).
pub fn direct_shifted(sources: &Sources, targets: &Targets, shifts: &[[f64; 3]]) -> Fields {
    let (velocity, stretching) = targets
        .position
        .par_iter()
        .zip(targets.strength.par_iter())
        .map(|(&xi, &ai)| {
            let (mut u, mut s) = ([0.0; 3], [0.0; 3]);
            for sh in shifts {
                let xi = [xi[0] - sh[0], xi[1] - sh[1], xi[2] - sh[2]];
                for j in 0..sources.len() {
                    let (du, ds) = pair_interaction(
                        xi,
                        ai,
                        sources.position[j],
                        sources.strength[j],
                        sources.sigma[j],
                    );
                    for c in 0..3 {
                        u[c] += du[c];
                        s[c] += ds[c];
                    }
                }
            }
            (u.map(|x| x * INV_4PI), s.map(|x| x * INV_4PI))
        })
        .unzip();
    Fields {
        velocity,
        stretching,
    }
}
