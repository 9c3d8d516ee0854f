//! The Fourier-space steps of the resident step on a lattice split over the ranks of a
//! [`Comm`] in slabs of planes (a slab-decomposed 3-D FFT; one rank holds every plane and its
//! transposes are local copies): the periodic RBF lattice solve
//! (core paper Sec. 2, `beta_hat = omega_hat / (c S(kx) S(ky) S(kz))`), the Biot-Savart law in
//! Fourier space (`u_hat = i k x omega_hat / |k|^2`, the mean and the Nyquist planes dropped)
//! and the shell spectrum, energy and enstrophy with the conventions of
//! `vortex_spectral::diagnostics` (docs/CONVENTIONS.md), reduced over the ranks.
//!
//! **Layout.** An `n^3` lattice of three real components stored interleaved, three axes named
//! by their place in the index: `s` the slowest (the slab axis), `m` the middle one, `f` the
//! fastest. Rank `r` holds the planes `s in bounds[r]..bounds[r+1]` (bounds chosen by the
//! caller, possibly uneven, possibly empty) as `[((s - s0) n + m) n + f][3]`. [`SlabAxis`] says
//! which physical axis `s` is: [`SlabAxis::X`] (index `(x n + y) n + z`, the layout of
//! `vortex_method::reinterpolation::Lattice`) or
//! [`SlabAxis::Z`] (index `(z n + y) n + x`, planes of constant `z`, the slabs of the uniform
//! grid's decomposition).
//!
//! **Transform** (forward; the inverse runs the same steps backwards, unnormalised as cuFFT's,
//! the `1/n^3` folded into the pointwise factors):
//! 1. per own plane, the 2-D real-to-complex transform over `(m, f)`, the half spectrum in `f`
//!    (`nh = n/2 + 1`): the *slab spectrum* `[s - s0][km][kf][3]`;
//! 2. the transpose: rank `r` gets the middle wavenumbers `km in r n / R..(r+1) n / R` of every
//!    plane ([`SlabLayout::slab_runs`], [`SlabLayout::pencil_run`]: the one plan of which block
//!    goes where, used by the host twin and by the device through [`slabs_to_pencils`] and
//!    [`pencils_to_slabs`]) over [`Comm::alltoallv`];
//! 3. the 1-D complex transforms along `s`: the *pencil spectrum* `[ks][km - m0][kf][3]`, in
//!    which the pointwise factors act (each element knows its wavevector,
//!    [`SlabLayout::wavevector`]).
//!
//! Two implementations share everything but the transforms: [`HostSlabFourier`] (rustfft and
//! realfft on the CPU: what the tests without a GPU check against one-rank 3-D transforms) and
//! [`SlabFourier`] (cuFFT, kernels of `kernels/slab_fourier.cu`, the transpose staged through
//! the host).

mod device;
mod host;

pub use device::{gpu_cufft_present, Ranks, SlabFourier, SlabKernels, SlabTimes};
pub use host::HostSlabFourier;

use std::ops::Range;
use vortex_domain::{Comm, ReduceOp};
use vortex_exchange::host::alltoallv_host;
use vortex_exchange::{ExchangeError, Parts};

/// Energy statistics of a periodic velocity from its Fourier coefficients, in integer
/// wavenumbers (`k = 0, 1, ...`; multiply by `2 pi / L`).
#[derive(Clone, Debug, PartialEq)]
pub struct GridSpectrum {
    /// `E(k)` of the shells `round(|k|) = 0, 1, ...`.
    pub shells: Vec<f64>,
    /// `(1/2) <|u|^2>`.
    pub energy: f64,
    /// `(1/2) sum |k x u_hat|^2` (integer `k`).
    pub enstrophy: f64,
}

/// The physical axis of the slowest lattice index (the axis the slabs split).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlabAxis {
    /// Index `(x n + y) n + z`: planes of constant `x` (the layout of `Fourier`).
    X,
    /// Index `(z n + y) n + x`: planes of constant `z`.
    Z,
}

/// A slab decomposition that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlabError {
    #[error("slab FFT: {ranks} ranks for a lattice of n = {n} planes: at most n ranks (each needs a range of middle wavenumbers)")]
    TooManyRanks { ranks: usize, n: usize },
    #[error("slab FFT: the plane bounds {bounds:?} must start at 0, end at {n} planes and not decrease ({what})")]
    BadBounds {
        bounds: Vec<usize>,
        n: usize,
        what: &'static str,
    },
    #[error("slab FFT: rank {rank} of a decomposition over {ranks} ranks")]
    BadRank { rank: usize, ranks: usize },
    #[error("slab FFT: the layout is for rank {layout_rank} of {layout_ranks}, the communicator is rank {rank} of {ranks}")]
    CommMismatch {
        layout_rank: usize,
        layout_ranks: usize,
        rank: usize,
        ranks: usize,
    },
    #[error("slab FFT: a lattice field of {got} doubles where rank {rank} holds {want} ({planes} planes of n = {n})")]
    FieldLength {
        got: usize,
        want: usize,
        rank: usize,
        planes: usize,
        n: usize,
    },
    #[error("slab FFT: {got} inverse eigenvalues for n = {n}")]
    EigenLength { got: usize, n: usize },
    #[error("slab FFT: the spectrum asked for before any Biot-Savart step")]
    NoSpectrum,
    #[error("slab FFT transpose: {0}")]
    Exchange(String),
}

impl From<ExchangeError> for SlabError {
    fn from(e: ExchangeError) -> Self {
        SlabError::Exchange(e.to_string())
    }
}

/// The decomposition seen from one rank: the planes of every rank, the middle-wavenumber
/// ranges of the transposed spectrum, and the exchange plan between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlabLayout {
    n: usize,
    /// Planes along the slab axis: `n` for the lattice, the fine grid's `m` for the spreading
    /// of [`crate::spreading::slabs`] (whose planes are fine, their middle and fast axes
    /// already folded onto the lattice's modes).
    depth: usize,
    axis: SlabAxis,
    /// Planes of rank `r`: `bounds[r]..bounds[r + 1]`.
    bounds: Vec<usize>,
    /// Middle wavenumbers of rank `r` after the transpose: `pencils[r]..pencils[r + 1]`,
    /// `pencils[r] = r n / R`.
    pencils: Vec<usize>,
    rank: usize,
}

/// A strided block of complex numbers: `rows` rows of `width` from the offset `first`, row
/// `r` starting at `first + r stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub first: usize,
    pub width: usize,
    pub stride: usize,
    pub rows: usize,
}

impl SlabLayout {
    /// Rank `rank`'s view of the `n^3` lattice split at `bounds` (`R + 1` entries, `0 = bounds[0]
    /// <= ... <= bounds[R] = n`). Refuses `R > n`.
    pub fn new(n: usize, bounds: &[usize], rank: usize, axis: SlabAxis) -> Result<Self, SlabError> {
        Self::with_depth(n, n, bounds, rank, axis)
    }

    /// Rank `rank`'s view of `depth` planes of `n^2` points split at `bounds` (`0 = bounds[0]
    /// <= ... <= bounds[R] = depth`), the middle wavenumbers of the transposed spectrum split
    /// evenly as the lattice's. Refuses `R > n`.
    pub fn with_depth(
        depth: usize,
        n: usize,
        bounds: &[usize],
        rank: usize,
        axis: SlabAxis,
    ) -> Result<Self, SlabError> {
        let bad = |what| SlabError::BadBounds {
            bounds: bounds.to_vec(),
            n: depth,
            what,
        };
        if bounds.len() < 2 {
            return Err(bad("at least 2 entries (one rank)"));
        }
        let ranks = bounds.len() - 1;
        if ranks > n {
            return Err(SlabError::TooManyRanks { ranks, n });
        }
        if bounds[0] != 0 || bounds[ranks] != depth {
            return Err(bad("first and last entries"));
        }
        if bounds.windows(2).any(|w| w[1] < w[0]) {
            return Err(bad("a decreasing pair"));
        }
        if rank >= ranks {
            return Err(SlabError::BadRank { rank, ranks });
        }
        Ok(Self {
            n,
            depth,
            axis,
            bounds: bounds.to_vec(),
            pencils: even_bounds(n, ranks),
            rank,
        })
    }

    /// The even split `bounds[r] = r n / R` (refuses `R > n`).
    pub fn even(n: usize, ranks: usize, rank: usize, axis: SlabAxis) -> Result<Self, SlabError> {
        if ranks > n {
            return Err(SlabError::TooManyRanks { ranks, n });
        }
        Self::new(n, &even_bounds(n, ranks.max(1)), rank, axis)
    }

    pub fn n(&self) -> usize {
        self.n
    }
    /// Planes along the slab axis (`n` but for a fine grid's layout).
    pub fn depth(&self) -> usize {
        self.depth
    }
    pub fn axis(&self) -> SlabAxis {
        self.axis
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn ranks(&self) -> usize {
        self.bounds.len() - 1
    }
    /// `n/2 + 1`: the half axis of the spectra.
    pub fn nh(&self) -> usize {
        self.n / 2 + 1
    }
    /// The planes of rank `r`.
    pub fn planes(&self, r: usize) -> Range<usize> {
        self.bounds[r]..self.bounds[r + 1]
    }
    /// The middle wavenumber indices of rank `r` after the transpose.
    pub fn pencil(&self, r: usize) -> Range<usize> {
        self.pencils[r]..self.pencils[r + 1]
    }
    /// Doubles of this rank's lattice field, `3 n^2` per plane.
    pub fn real_len(&self) -> usize {
        3 * self.n * self.n * self.planes(self.rank).len()
    }
    /// Complex numbers of this rank's slab spectrum `[s - s0][km][kf][3]`.
    pub fn slab_len(&self) -> usize {
        3 * self.planes(self.rank).len() * self.n * self.nh()
    }
    /// Complex numbers of this rank's pencil spectrum `[ks][km - m0][kf][3]`.
    pub fn pencil_len(&self) -> usize {
        3 * self.depth * self.pencil(self.rank).len() * self.nh()
    }

    /// On the slab side: the runs of this rank's slab spectrum (complex numbers, in message
    /// order) that make its message to / from the pencil rank `peer`: the block of its planes
    /// and of `peer`'s middle wavenumbers, ordered `[s - s0][km - m0(peer)][kf][3]`.
    pub fn slab_runs(&self, peer: usize) -> impl Iterator<Item = Range<usize>> {
        let (n, nh) = (self.n, self.nh());
        let m = self.pencil(peer);
        (0..self.planes(self.rank).len()).map(move |sl| {
            let start = 3 * (sl * n + m.start) * nh;
            start..start + 3 * m.len() * nh
        })
    }

    /// On the pencil side: the one run of this rank's pencil spectrum (complex numbers) that
    /// makes its message to / from the slab rank `peer`: the planes `ks` of `peer` (the `s`
    /// index keeps its place through the transpose), same order as [`Self::slab_runs`].
    pub fn pencil_run(&self, peer: usize) -> Range<usize> {
        let row = 3 * self.pencil(self.rank).len() * self.nh();
        let s = self.planes(peer);
        s.start * row..s.end * row
    }

    /// Bytes this rank sends to the others in one transpose (one direction; the other sends
    /// as many in total, though not per rank when the bounds are uneven).
    pub fn bytes_sent_per_transpose(&self) -> usize {
        let nh = self.nh();
        let mine = self.planes(self.rank).len();
        (0..self.ranks())
            .filter(|&r| r != self.rank)
            .map(|r| 16 * 3 * mine * self.pencil(r).len() * nh)
            .sum()
    }

    /// The strided block of this rank's slab spectrum that travels to / from the pencil rank
    /// `peer`: per own plane, the run of `peer`'s middle wavenumbers (the same runs as
    /// [`Self::slab_runs`], as one row each).
    pub fn slab_rows(&self, peer: usize) -> Rows {
        let (n, nh) = (self.n, self.nh());
        let m = self.pencil(peer);
        Rows {
            first: 3 * m.start * nh,
            width: 3 * m.len() * nh,
            stride: 3 * n * nh,
            rows: self.planes(self.rank).len(),
        }
    }

    /// The place (complex numbers) of the message to / from the pencil rank `peer` in the
    /// message buffer of the slab side, ordered by peer: `[peer][s - s0][km - m0(peer)][kf][3]`.
    pub fn wire_block(&self, peer: usize) -> Range<usize> {
        let row = 3 * self.planes(self.rank).len() * self.nh();
        row * self.pencils[peer]..row * self.pencils[peer + 1]
    }

    /// The forward transpose's exchange (doubles): the message buffer's blocks to the pencil
    /// ranks, received into the pencil spectrum. The own block is copied straight from the
    /// slab spectrum into the pencil spectrum, so it does not appear (empty ranges).
    pub fn forward_parts(&self) -> Result<Parts, ExchangeError> {
        let d = |r: Range<usize>| 2 * r.start..2 * r.end;
        let me = self.rank;
        let skip = |r: usize, v: Range<usize>| if r == me { 0..0 } else { d(v) };
        Parts::new(
            me,
            (0..self.ranks())
                .map(|r| skip(r, self.wire_block(r)))
                .collect(),
            (0..self.ranks())
                .map(|r| skip(r, self.pencil_run(r)))
                .collect(),
        )
    }

    /// The inverse transpose's exchange: the forward one with the roles of the buffers swapped.
    pub fn inverse_parts(&self) -> Result<Parts, ExchangeError> {
        let f = self.forward_parts()?;
        Parts::new(self.rank, f.recv_all().to_vec(), f.send_all().to_vec())
    }

    /// Element `t` of the pencil spectrum (complex, per component: `t = (ks nq + kml) nh +
    /// kf`) as its indices `(ks, km, kf)` along `s`, `m` (global) and `f`.
    pub fn pencil_index(&self, t: usize) -> [usize; 3] {
        let (nh, p) = (self.nh(), self.pencil(self.rank));
        let kf = t % nh;
        let kml = (t / nh) % p.len();
        [t / (nh * p.len()), p.start + kml, kf]
    }

    /// The physical integer wavevector `(kx, ky, kz)` of the indices `(ks, km, kf)`, each
    /// signed by `signed` (the half axis `f` is never negative).
    pub fn wavevector(&self, idx: [usize; 3], signed: fn(usize, usize) -> f64) -> [f64; 3] {
        let n = self.n;
        let (s, m, f) = (signed(idx[0], n), signed(idx[1], n), idx[2] as f64);
        match self.axis {
            SlabAxis::X => [s, m, f],
            SlabAxis::Z => [f, m, s],
        }
    }

    /// Whether `(ks, km, kf)` lies on a Nyquist plane (even `n`).
    pub fn nyquist(&self, idx: [usize; 3]) -> bool {
        self.n % 2 == 0 && idx.contains(&(self.n / 2))
    }

    /// Shells of the spectrum, `ceil(sqrt(3) n / 2) + 1` (`vortex_spectral::diagnostics`).
    pub fn shells(&self) -> usize {
        (3.0f64.sqrt() * self.n as f64 / 2.0).ceil() as usize + 1
    }

    /// Bytes this rank allocates on its device for [`SlabFourier`]: the slab spectrum, the
    /// message buffer of the transposes (as large as the slab spectrum), the pencil spectrum,
    /// the spectrum partials, and an upper estimate of cuFFT's work areas (the 2-D plans
    /// batched over the own planes: one component's slab spectrum each; the 1-D plan: the
    /// pencil spectrum). The lattice field itself (`8 real_len()` bytes) is the caller's.
    pub fn device_bytes(&self) -> usize {
        16 * (2 * self.slab_len() + 2 * self.pencil_len())
            + 2 * 16 * self.slab_len() / 3
            + 8 * device::SPECTRUM_BLOCKS * (self.shells() + 2)
    }

    /// Bytes of page-locked host memory this rank uses when the transposes go through the
    /// host (`vortex_exchange::Transport::Pinned`): a send and a receive buffer as large as
    /// the larger spectrum. None with NCCL.
    pub fn host_bytes(&self) -> usize {
        2 * 16 * self.slab_len().max(self.pencil_len())
    }

    fn check_comm(&self, comm: &dyn Comm) -> Result<(), SlabError> {
        if comm.rank() != self.rank || comm.size() != self.ranks() {
            return Err(SlabError::CommMismatch {
                layout_rank: self.rank,
                layout_ranks: self.ranks(),
                rank: comm.rank(),
                ranks: comm.size(),
            });
        }
        Ok(())
    }

    fn check_field(&self, got: usize) -> Result<(), SlabError> {
        if got < self.real_len() {
            return Err(SlabError::FieldLength {
                got,
                want: self.real_len(),
                rank: self.rank,
                planes: self.planes(self.rank).len(),
                n: self.n,
            });
        }
        Ok(())
    }

    fn check_eig(&self, got: usize) -> Result<(), SlabError> {
        if got < self.n {
            return Err(SlabError::EigenLength { got, n: self.n });
        }
        Ok(())
    }
}

/// `r n / R`, `r = 0..=R`.
pub fn even_bounds(n: usize, ranks: usize) -> Vec<usize> {
    (0..=ranks).map(|r| r * n / ranks).collect()
}

/// Wavenumber of index `i` on an axis of `n` as the Biot-Savart factor takes it (`i <= n/2`
/// positive, the kernels' `wavenumber`).
pub fn wavenumber_solve(i: usize, n: usize) -> f64 {
    if i <= n / 2 {
        i as f64
    } else {
        i as f64 - n as f64
    }
}

/// Wavenumber of index `i` as the spectrum takes it (`i < n/2` positive, the Nyquist index
/// negative: `vortex_spectral::fft::wavenumber`).
pub fn wavenumber_spectrum(i: usize, n: usize) -> f64 {
    if i < n / 2 {
        i as f64
    } else {
        i as f64 - n as f64
    }
}

/// Copies the strided block `rows` of `src` (complex numbers as `f64` pairs) into `dst` with
/// the row stride `dst_stride` (complex numbers), from the complex offsets `src_at` and
/// `dst_at`: the host twin of the kernel `sf_copy_rows`.
fn copy_rows(
    dst: &mut [f64],
    dst_at: usize,
    dst_stride: usize,
    src: &[f64],
    src_at: usize,
    rows: Rows,
) {
    for r in 0..rows.rows {
        let (d, s) = (
            2 * (dst_at + r * dst_stride),
            2 * (src_at + r * rows.stride),
        );
        let w = 2 * rows.width;
        dst[d..d + w].copy_from_slice(&src[s..s + w]);
    }
}

/// Forward transpose on the host (collective): the slab spectrum (`2 slab_len` doubles) into
/// the pencil spectrum (`2 pencil_len`), through the message buffer `wire` (`2 slab_len`):
/// the plan of the device's transpose ([`SlabLayout::slab_rows`], [`SlabLayout::forward_parts`]).
pub fn slabs_to_pencils(
    layout: &SlabLayout,
    comm: &dyn Comm,
    slab: &[f64],
    wire: &mut [f64],
    pencil: &mut [f64],
) -> Result<usize, SlabError> {
    let me = layout.rank();
    for d in 0..layout.ranks() {
        let rows = layout.slab_rows(d);
        if d == me {
            copy_rows(
                pencil,
                layout.pencil_run(me).start,
                rows.width,
                slab,
                rows.first,
                rows,
            );
        } else {
            copy_rows(
                wire,
                layout.wire_block(d).start,
                rows.width,
                slab,
                rows.first,
                rows,
            );
        }
    }
    alltoallv_host(comm, wire, pencil, &layout.forward_parts()?).map_err(SlabError::from)
}

/// Inverse transpose on the host (collective): the pencil spectrum back to the slab spectrum.
pub fn pencils_to_slabs(
    layout: &SlabLayout,
    comm: &dyn Comm,
    pencil: &[f64],
    wire: &mut [f64],
    slab: &mut [f64],
) -> Result<usize, SlabError> {
    let me = layout.rank();
    let bytes = alltoallv_host(comm, pencil, wire, &layout.inverse_parts()?)?;
    for q in 0..layout.ranks() {
        let rows = layout.slab_rows(q);
        let (src, at) = if q == me {
            (pencil, layout.pencil_run(me).start)
        } else {
            (&*wire, layout.wire_block(q).start)
        };
        let packed = Rows {
            first: 0,
            stride: rows.width,
            ..rows
        };
        copy_rows(slab, rows.first, rows.stride, src, at, packed);
    }
    Ok(bytes)
}

/// Shell spectrum, energy and enstrophy from the per-rank partial sums `[shells..., E, Z]`,
/// summed over the ranks in rank order (collective).
pub fn reduce_spectrum(comm: &dyn Comm, mut partial: Vec<f64>) -> GridSpectrum {
    comm.allreduce_f64(&mut partial, ReduceOp::Sum);
    let ns = partial.len() - 2;
    GridSpectrum {
        shells: partial[..ns].to_vec(),
        energy: partial[ns],
        enstrophy: partial[ns + 1],
    }
}

#[cfg(test)]
mod tests;
