//! Particles and fields held by rank 0 (the files a run reads and writes): [`gather_to_root`],
//! [`scatter_sources_from_root`], [`scatter_targets_from_root`].

use super::*;

/// Gathers every rank's `fields` (each in its caller's order) on rank 0, concatenated in rank
/// order, i.e. in the global input order. Returns `None` on the other ranks. Collective.
pub fn gather_to_root<C: Comm + ?Sized>(comm: &C, fields: &Fields) -> Option<Fields> {
    let mut w = Writer::new();
    for i in 0..fields.velocity.len() {
        w.vec3(fields.velocity[i]);
        w.vec3(fields.stretching[i]);
    }
    let send: Vec<Vec<u8>> = (0..comm.size())
        .map(|r| if r == 0 { w.buf.clone() } else { Vec::new() })
        .collect();
    let recv = comm.alltoallv(&send);
    if comm.rank() != 0 {
        return None;
    }
    let mut out = Fields::default();
    for buf in &recv {
        let mut rd = Reader::new(buf);
        while !rd.done() {
            out.velocity.push(rd.vec3());
            out.stretching.push(rd.vec3());
        }
    }
    Some(out)
}

/// Scatters a set held by rank 0 in contiguous, nearly equal pieces (rank `r` gets the `r`-th
/// piece): the input distribution of `mpirun vortex eval` when rank 0 reads the file.
/// Collective; `all` is ignored on the other ranks.
pub fn scatter_sources_from_root<C: Comm + ?Sized>(comm: &C, all: Option<&Sources>) -> Sources {
    scatter_from_root(
        comm,
        all,
        Sources::len,
        |w, s, i| {
            w.vec3(s.position[i]);
            w.vec3(s.strength[i]);
            w.f64(s.sigma[i]);
        },
        |rd, out| {
            out.position.push(rd.vec3());
            out.strength.push(rd.vec3());
            out.sigma.push(rd.f64());
        },
    )
}

/// As [`scatter_sources_from_root`] for targets.
pub fn scatter_targets_from_root<C: Comm + ?Sized>(comm: &C, all: Option<&Targets>) -> Targets {
    scatter_from_root(
        comm,
        all,
        Targets::len,
        |w, t, i| {
            w.vec3(t.position[i]);
            w.vec3(t.strength[i]);
        },
        |rd, out| {
            out.position.push(rd.vec3());
            out.strength.push(rd.vec3());
        },
    )
}

/// The scatter of [`scatter_sources_from_root`] for any set of `len` items, each written by
/// `write` and read back by `read`.
fn scatter_from_root<C: Comm + ?Sized, T: Default>(
    comm: &C,
    all: Option<&T>,
    len: impl Fn(&T) -> usize,
    write: impl Fn(&mut Writer, &T, usize),
    read: impl Fn(&mut Reader<'_>, &mut T),
) -> T {
    let n = comm.size();
    let mut send = vec![Vec::new(); n];
    if comm.rank() == 0 {
        let s = all.expect("rank 0 must hold the set");
        for (r, buf) in send.iter_mut().enumerate() {
            let (b, e) = (len(s) * r / n, len(s) * (r + 1) / n);
            let mut w = Writer::new();
            for i in b..e {
                write(&mut w, s, i);
            }
            *buf = w.buf;
        }
    }
    let recv = comm.alltoallv(&send);
    let mut out = T::default();
    let mut rd = Reader::new(&recv[0]);
    while !rd.done() {
        read(&mut rd, &mut out);
    }
    out
}
