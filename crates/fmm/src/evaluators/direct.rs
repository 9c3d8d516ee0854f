//! Direct O(N M) summation in f64: the reference every fast method is checked against.

use crate::kernel::{pair_interaction_core, CoreOrder, INV_4PI};
use crate::{Fields, Sources, Targets};
use rayon::prelude::*;

/// Velocity and stretching at every target from every source with Gaussian cores (free
/// space), in input order.
pub fn direct(sources: &Sources, targets: &Targets) -> Fields {
    direct_core(CoreOrder::Second, sources, targets)
}

/// [`direct`] with cores of order `core`.
pub fn direct_core(core: CoreOrder, sources: &Sources, targets: &Targets) -> Fields {
    direct_shifted_core(core, sources, targets, &[[0.0; 3]])
}

/// Like [`direct`], summing also over the source copies displaced by each of `shifts`
/// (used for periodic image sums in tests).
pub fn direct_shifted(sources: &Sources, targets: &Targets, shifts: &[[f64; 3]]) -> Fields {
    direct_shifted_core(CoreOrder::Second, sources, targets, shifts)
}

/// [`direct_shifted`] with cores of order `core`.
pub fn direct_shifted_core(
    core: CoreOrder,
    sources: &Sources,
    targets: &Targets,
    shifts: &[[f64; 3]],
) -> Fields {
    let (velocity, stretching) = targets
        .position
        .par_iter()
        .zip(targets.strength.par_iter())
        .map(|(&xi, &ai)| {
            let (mut u, mut s) = ([0.0; 3], [0.0; 3]);
            for sh in shifts {
                let xi = [xi[0] - sh[0], xi[1] - sh[1], xi[2] - sh[2]];
                for j in 0..sources.len() {
                    let (du, ds) = pair_interaction_core(
                        core,
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

/// Periodic direct sum: the minimum-image neighbourhood (27 boxes) by direct summation, plus
/// the far images and the surface correction exactly as the fast methods add them
/// ([`crate::periodic`]), from a multipole of the whole box at order 16. A slow reference for
/// small `N`.
pub fn direct_periodic(
    sources: &Sources,
    targets: &Targets,
    periodic: &crate::periodic::Periodic,
) -> Fields {
    direct_periodic_core(CoreOrder::Second, sources, targets, periodic)
}

/// [`direct_periodic`] with cores of order `core` (the far images are singular, as in the
/// fast methods).
pub fn direct_periodic_core(
    core: CoreOrder,
    sources: &Sources,
    targets: &Targets,
    periodic: &crate::periodic::Periodic,
) -> Fields {
    use crate::expansions::{expansion_len, Complex64};
    use crate::operators::Operators;
    let l = periodic.box_length;
    let wrap = |v: &[[f64; 3]]| v.iter().map(|&x| periodic.wrap(x)).collect::<Vec<_>>();
    let src = Sources {
        position: wrap(&sources.position),
        strength: sources.strength.clone(),
        sigma: sources.sigma.clone(),
    };
    let tgt = Targets {
        position: wrap(&targets.position),
        strength: targets.strength.clone(),
    };
    let shifts: Vec<[f64; 3]> = (0..27u8)
        .map(|i| crate::lists::image_shift(i).map(|c| c as f64 * l))
        .collect();
    let mut f = direct_shifted_core(core, &src, &tgt, &shifts);
    let p = 16;
    let ops = Operators::new(p);
    let mut root = vec![Complex64::new(0.0, 0.0); expansion_len(p)];
    ops.p2m([0.0; 3], &src.position, &src.strength, &mut root);
    // a tree of the targets down to level 2 receives the far images (see outer_image_locals)
    let tree = crate::tree::Tree::build(
        &tgt.position,
        crate::tree::BoundingCube {
            lo: [-0.5 * l; 3],
            width: l,
        },
        1,
    );
    let locals = crate::periodic::outer_image_locals(&ops, periodic, &root, &tree);
    let sorted_pos = tree.gather(&tgt.position);
    let sorted_alpha = tree.gather(&tgt.strength);
    let (mut u, mut s) = (vec![[0.0; 3]; tgt.len()], vec![[0.0; 3]; tgt.len()]);
    for (c, local) in &locals {
        let cell = &tree.cells[*c];
        let r = cell.range.clone();
        ops.l2p(
            cell.center,
            local,
            &sorted_pos[r.clone()],
            &sorted_alpha[r.clone()],
            &mut u[r.clone()],
            &mut s[r],
        );
    }
    let (u, s) = (tree.scatter(&u), tree.scatter(&s));
    let corr = crate::periodic::surface_correction(&src, l);
    for i in 0..tgt.len() {
        for c in 0..3 {
            f.velocity[i][c] += u[i][c] * INV_4PI - corr[c];
            f.stretching[i][c] += s[i][c] * INV_4PI;
        }
    }
    f
}
