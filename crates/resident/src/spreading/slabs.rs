//! The Gaussian sums by spreading over the ranks of slabs in `z`: the plan of which rank holds
//! which planes of the fine grid (`vortex_method::reinterpolation::spreading`, whose module
//! documentation gives the formulas), shared by the host twin ([`super::host_slabs`]) and the
//! device.
//!
//! The three-dimensional transform of the fine grid `b` (`m^3` points, spacing `h_f = L / m`)
//! is separable, and so are the factors `d(qx) d(qy) d(qz)` of the fold onto the lattice's
//! `n^3` modes (the kernel's deconvolution times the core's Gaussian, per axis). The sums are
//! therefore computed plane by plane before the transpose and along `z` after it:
//!
//! 1. **spread**: each rank spreads its own particles (those of its slab of the uniform grid)
//!    onto a *window* of fine `z` planes, its own planes and [`FineSlabs::halo`] planes on
//!    each side (the footprints of `w` points reach at most `ceil(w/2)` planes past the slab),
//!    `x` and `y` wrapped as on one rank; the window is stored `[j][y][x]` (planes
//!    contiguous);
//! 2. **halo**: every window plane goes to the rank that owns it ([`FineSlabs::runs`]), and
//!    each owner adds what it receives, in rank order;
//! 3. **planes**: per own fine plane, the 2-D real-to-complex transform over `(y, x)` (half
//!    axis `x`), and the fold of `(qx, qy)` onto the lattice's `(kx, ky)` with `d(qx) d(qy)`
//!    (a negative `qx` is the conjugate of `(-qx, -qy)` of the same real plane): per fine
//!    plane an `n (n/2 + 1)` plane of lattice modes, the slab spectrum of a
//!    [`SlabLayout`] of depth `m` ([`FineSlabs::layout`]);
//! 4. **transpose**: the lattice's own transpose plan (rank `r` gets the `ky` of its pencil,
//!    every fine plane);
//! 5. **along z**: the complex transform of length `m` per `(ky, kx)` column and the fold of
//!    `qz` onto `kz` with `d(qz)`: the lattice's pencil spectrum `[kz][ky - m0][kx][3]`, in
//!    which the slab solve continues.
//!
//! On one rank the window is the whole grid and nothing is sent.

use crate::slab_fourier::{SlabAxis, SlabError, SlabLayout};
use std::ops::Range;
use vortex_exchange::{ExchangeError, Parts};

/// The fine planes of every rank and the windows they spread onto.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FineSlabs {
    m: usize,
    /// Fine planes owned by rank `r`: `bounds[r]..bounds[r + 1]`.
    bounds: Vec<usize>,
    /// Planes of a window past each side of its own planes.
    halo: usize,
    rank: usize,
}

/// The fine planes a rank spreads onto: `len` planes from `start` (wrapped modulo `m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: usize,
    pub len: usize,
}

impl FineSlabs {
    /// Rank `rank`'s view of an `m`-plane fine grid owned at `bounds` (`R + 1` entries from 0
    /// to `m`, e.g. `Owners::lattice_bounds(m, L)` of the uniform grid's slabs), for a kernel
    /// of `width` points.
    pub fn new(m: usize, bounds: &[usize], width: usize, rank: usize) -> Self {
        assert!(bounds.len() >= 2 && bounds[0] == 0 && bounds[bounds.len() - 1] == m);
        assert!(bounds.windows(2).all(|w| w[0] <= w[1]) && rank + 1 < bounds.len());
        Self {
            m,
            bounds: bounds.to_vec(),
            // ceil(w/2) planes reach past a slab's edge; one more for the rounding of a
            // particle's slab at its boundary
            halo: width.div_ceil(2) + 1,
            rank,
        }
    }

    pub fn m(&self) -> usize {
        self.m
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn ranks(&self) -> usize {
        self.bounds.len() - 1
    }
    pub fn bounds(&self) -> &[usize] {
        &self.bounds
    }
    pub fn halo(&self) -> usize {
        self.halo
    }

    /// The fine planes rank `r` owns.
    pub fn owned(&self, r: usize) -> Range<usize> {
        self.bounds[r]..self.bounds[r + 1]
    }

    /// The window of rank `r`: its planes and `halo` on each side, at most the whole grid;
    /// empty for a rank without planes (it has no particles).
    pub fn window(&self, r: usize) -> Window {
        let own = self.owned(r);
        if own.is_empty() {
            return Window { start: 0, len: 0 };
        }
        let len = own.len() + 2 * self.halo;
        if len >= self.m {
            return Window {
                start: 0,
                len: self.m,
            };
        }
        Window {
            start: (own.start + self.m - self.halo) % self.m,
            len,
        }
    }

    /// The place of fine plane `plane` (`0..m`) in rank `r`'s window, if it lies in it.
    pub fn local(&self, r: usize, plane: usize) -> Option<usize> {
        let w = self.window(r);
        let j = (plane + self.m - w.start) % self.m;
        (j < w.len).then_some(j)
    }

    /// The planes of rank `to` that lie in rank `from`'s window, as runs of global planes in
    /// increasing order (at most two: a window that wraps may cover both ends of a slab).
    pub fn runs(&self, from: usize, to: usize) -> Vec<Range<usize>> {
        let mut runs: Vec<Range<usize>> = Vec::new();
        for p in self.owned(to) {
            if self.local(from, p).is_none() {
                continue;
            }
            match runs.last_mut() {
                Some(r) if r.end == p => r.end = p + 1,
                _ => runs.push(p..p + 1),
            }
        }
        runs
    }

    /// The halo exchange of planes of `plane` elements: this rank's message to rank `d` is the
    /// planes of [`Self::runs`]`(me, d)` packed in order, peers in rank order (the send buffer
    /// of [`Self::send_len`] elements); the message of rank `q` lands at its place in a
    /// receive buffer ordered by sender ([`Self::recv_len`]).
    pub fn halo_parts(&self, plane: usize) -> Result<Parts, ExchangeError> {
        let r = self.ranks();
        let me = self.rank;
        let count = |runs: Vec<Range<usize>>| runs.iter().map(|x| x.len()).sum::<usize>() * plane;
        let consecutive = |sizes: Vec<usize>| {
            let mut at = 0;
            sizes
                .into_iter()
                .map(|s| {
                    at += s;
                    at - s..at
                })
                .collect::<Vec<_>>()
        };
        let send = consecutive((0..r).map(|d| count(self.runs(me, d))).collect());
        let recv = consecutive((0..r).map(|q| count(self.runs(q, me))).collect());
        Parts::new(me, send, recv)
    }

    /// Elements of this rank's window (planes of `plane` elements).
    pub fn window_len(&self, plane: usize) -> usize {
        self.window(self.rank).len * plane
    }

    /// The transposes' layout: this rank's fine planes, the lattice's middle wavenumbers.
    pub fn layout(&self, n: usize) -> Result<SlabLayout, SlabError> {
        SlabLayout::with_depth(self.m, n, &self.bounds, self.rank, SlabAxis::Z)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every plane of every window reaches its owner exactly once, and windows cover the
    /// footprints of their slabs: on even, uneven, empty and tiny slabs, 1 to 5 ranks.
    #[test]
    fn every_window_plane_goes_to_its_owner_once() {
        let m = 40;
        for bounds in [
            vec![0, m],
            vec![0, 20, m],
            vec![0, 3, m],
            vec![0, 0, 17, m],
            vec![0, 10, 10, 25, m],
            vec![0, 1, 2, 3, 4, m],
        ] {
            let ranks = bounds.len() - 1;
            for width in [4, 7, 8, 16] {
                for me in 0..ranks {
                    let f = FineSlabs::new(m, &bounds, width, me);
                    let w = f.window(me);
                    let mut seen = vec![0; w.len];
                    for d in 0..ranks {
                        for p in f.runs(me, d).into_iter().flatten() {
                            assert!(f.owned(d).contains(&p));
                            seen[f.local(me, p).unwrap()] += 1;
                        }
                    }
                    assert!(
                        seen.iter().all(|&c| c == 1),
                        "{bounds:?} w {width} rank {me}"
                    );
                    let own = f.owned(me);
                    if !own.is_empty() {
                        // the first and last footprint planes of particles inside the slab
                        let lo = own.start as i64 - width.div_ceil(2) as i64;
                        let hi = own.end as i64 + width.div_ceil(2) as i64;
                        for p in lo..hi {
                            let p = p.rem_euclid(m as i64) as usize;
                            assert!(f.local(me, p).is_some(), "{bounds:?} w {width}: {p}");
                        }
                    }
                    let parts = f.halo_parts(3).unwrap();
                    assert_eq!(parts.send_extent(), f.window_len(3));
                }
            }
        }
    }
}
