//! Particle snapshots for ParaView in binary form: XML VTK PolyData (`.vtp`, VTK file format
//! 1.0, little-endian, appended raw data with UInt64 block headers) and the `.pvd` collection that
//! gives each snapshot its physical time (`docs/CONVENTIONS.md`, "Files"). Under MPI every rank
//! writes its own particles as one piece (a `.vtp`) and rank 0 the `.pvtp` that names the pieces
//! ([`write_pvtp`]): nothing is gathered.
//!
//! Per particle: position, strength `alpha` (3 x f64), `|alpha|`, `sigma` (f64), optionally the
//! velocity (3 x f64), one vertex cell (connectivity and offset, 2 x i64): 104 B with the velocity,
//! against 186 B of the legacy ASCII `.vtk`, written 4x faster (`BENCHMARKS.md`, "Robustness").

use crate::error::{Error, Result};
use crate::particles::{norm, Particles};
use std::io::Write;
use std::path::Path;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

/// Hands every value of an array, as little-endian 8-byte words, to a sink.
type Values<'a> = Box<dyn Fn(&mut dyn FnMut([u8; 8])) + 'a>;

/// One array of the appended block: name, VTK type, components, and its values, streamed to
/// the file (never held as bytes in memory).
struct Array<'a> {
    name: &'static str,
    ty: &'static str,
    comps: usize,
    values: Values<'a>,
}

impl<'a> Array<'a> {
    fn f64s<I: Iterator<Item = f64>>(
        name: &'static str,
        comps: usize,
        v: impl Fn() -> I + 'a,
    ) -> Self {
        Array {
            name,
            ty: "Float64",
            comps,
            values: Box::new(move |w| v().for_each(|x| w(x.to_le_bytes()))),
        }
    }

    fn i64s(name: &'static str, v: std::ops::Range<i64>) -> Self {
        Array {
            name,
            ty: "Int64",
            comps: 1,
            values: Box::new(move |w| v.clone().for_each(|x| w(x.to_le_bytes()))),
        }
    }

    fn header(&self, offset: usize) -> String {
        format!(
            "<DataArray type=\"{}\" Name=\"{}\" NumberOfComponents=\"{}\" format=\"appended\" offset=\"{offset}\"/>\n",
            self.ty, self.name, self.comps
        )
    }
}

/// Writes `p` (and `velocity`, aligned with it) as a `.vtp` file, atomically (temporary file,
/// rename). Under MPI each rank writes its own particles as one piece of a `.pvtp`.
pub fn write_particles(path: &Path, p: &Particles, velocity: Option<&[[f64; 3]]>) -> Result<()> {
    let n = p.len();
    let points = Array::f64s("Points", 3, || p.position.iter().flatten().copied());
    let conn = Array::i64s("connectivity", 0..n as i64);
    let offs = Array::i64s("offsets", 1..n as i64 + 1);
    let mut data = vec![
        Array::f64s("alpha", 3, || p.strength.iter().flatten().copied()),
        Array::f64s("alpha_magnitude", 1, || p.strength.iter().map(|a| norm(*a))),
        Array::f64s("sigma", 1, || p.sigma.iter().copied()),
    ];
    if let Some(v) = velocity {
        data.push(Array::f64s("velocity", 3, || v.iter().flatten().copied()));
    }
    let mut xml = String::from(
        "<?xml version=\"1.0\"?>\n<VTKFile type=\"PolyData\" version=\"1.0\" \
         byte_order=\"LittleEndian\" header_type=\"UInt64\">\n<PolyData>\n",
    );
    xml.push_str(&format!(
        "<Piece NumberOfPoints=\"{n}\" NumberOfVerts=\"{n}\" NumberOfLines=\"0\" \
         NumberOfStrips=\"0\" NumberOfPolys=\"0\">\n"
    ));
    let bytes = |a: &Array| 8 * n * a.comps;
    let mut offset = 0;
    let mut next = |a: &Array| {
        let h = a.header(offset);
        offset += 8 + bytes(a);
        h
    };
    xml.push_str("<PointData Scalars=\"sigma\" Vectors=\"alpha\">\n");
    for a in &data {
        xml.push_str(&next(a));
    }
    xml.push_str("</PointData>\n<Points>\n");
    xml.push_str(&next(&points));
    xml.push_str("</Points>\n<Verts>\n");
    xml.push_str(&next(&conn));
    xml.push_str(&next(&offs));
    xml.push_str("</Verts>\n</Piece>\n</PolyData>\n<AppendedData encoding=\"raw\">\n_");
    let tmp = path.with_extension("vtp.tmp");
    let r = (|| -> std::io::Result<()> {
        let f = std::fs::File::create(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 22, f);
        w.write_all(xml.as_bytes())?;
        for a in data.iter().chain([&points, &conn, &offs]) {
            w.write_all(&(bytes(a) as u64).to_le_bytes())?;
            let mut err = Ok(());
            (a.values)(&mut |b| {
                if err.is_ok() {
                    err = w.write_all(&b);
                }
            });
            err?;
        }
        w.write_all(b"\n</AppendedData>\n</VTKFile>\n")?;
        w.flush()
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_err(&tmp)(e));
    }
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// Writes the `.pvtp` file of a snapshot written in pieces (one `.vtp` per rank, `pieces`
/// relative to the `.pvtp`'s directory) with the arrays [`write_particles`] writes, atomically.
pub fn write_pvtp(path: &Path, pieces: &[String], with_velocity: bool) -> Result<()> {
    let array = |ty: &str, name: &str, comps: usize| {
        format!("<PDataArray type=\"{ty}\" Name=\"{name}\" NumberOfComponents=\"{comps}\"/>\n")
    };
    let mut s = String::from(
        "<?xml version=\"1.0\"?>\n<VTKFile type=\"PPolyData\" version=\"1.0\" \
         byte_order=\"LittleEndian\" header_type=\"UInt64\">\n<PPolyData GhostLevel=\"0\">\n\
         <PPointData Scalars=\"sigma\" Vectors=\"alpha\">\n",
    );
    s.push_str(&array("Float64", "alpha", 3));
    s.push_str(&array("Float64", "alpha_magnitude", 1));
    s.push_str(&array("Float64", "sigma", 1));
    if with_velocity {
        s.push_str(&array("Float64", "velocity", 3));
    }
    s.push_str("</PPointData>\n<PPoints>\n");
    s.push_str(&array("Float64", "Points", 3));
    s.push_str("</PPoints>\n");
    for f in pieces {
        s.push_str(&format!("<Piece Source=\"{f}\"/>\n"));
    }
    s.push_str("</PPolyData>\n</VTKFile>\n");
    vortex_spectral::durable::write_atomic(path, &[s.as_bytes()], 1)
        .map_err(|e| Error::Other(e.to_string()))
}

/// The piece file names of a `.pvtp` written by [`write_pvtp`] (empty when absent).
pub fn read_pvtp(path: &Path) -> Vec<String> {
    let Ok(text) = vortex_spectral::inputs::read_own_text(path, "VTK collection") else {
        return vec![];
    };
    text.lines()
        .filter_map(|l| {
            let i = l.find("Source=\"")? + 8;
            Some(l[i..i + l[i..].find('"')?].to_string())
        })
        .collect()
}

/// Writes the `.pvd` collection of `(time, file name)` snapshots, atomically.
pub fn write_pvd(path: &Path, entries: &[(f64, String)]) -> Result<()> {
    let mut s = String::from(
        "<?xml version=\"1.0\"?>\n<VTKFile type=\"Collection\" version=\"1.0\" \
         byte_order=\"LittleEndian\">\n<Collection>\n",
    );
    for (t, f) in entries {
        s.push_str(&format!(
            "<DataSet timestep=\"{t:e}\" part=\"0\" file=\"{f}\"/>\n"
        ));
    }
    s.push_str("</Collection>\n</VTKFile>\n");
    vortex_spectral::durable::write_atomic(path, &[s.as_bytes()], 1)
        .map_err(|e| Error::Other(e.to_string()))
}

/// The entries of an existing `.pvd` written by [`write_pvd`] (empty when absent or unreadable).
pub fn read_pvd(path: &Path) -> Vec<(f64, String)> {
    let Ok(text) = vortex_spectral::inputs::read_own_text(path, "VTK collection") else {
        return vec![];
    };
    let attr = |l: &str, k: &str| -> Option<String> {
        let i = l.find(&format!("{k}=\""))? + k.len() + 2;
        Some(l[i..i + l[i..].find('"')?].to_string())
    };
    text.lines()
        .filter_map(|l| Some((attr(l, "timestep")?.parse().ok()?, attr(l, "file")?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Reads the appended arrays back in file order: (name, bytes).
    fn arrays(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
        let text_end = bytes.windows(2).position(|w| w == b"\n_").unwrap() + 2;
        let head = std::str::from_utf8(&bytes[..text_end]).unwrap();
        let mut out = vec![];
        for l in head.lines().filter(|l| l.starts_with("<DataArray")) {
            let get = |k: &str| {
                let i = l.find(&format!("{k}=\"")).unwrap() + k.len() + 2;
                l[i..i + l[i..].find('"').unwrap()].to_string()
            };
            let off: usize = get("offset").parse().unwrap();
            let at = text_end + off;
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            out.push((get("Name"), bytes[at + 8..at + 8 + len].to_vec()));
        }
        out
    }

    #[test]
    fn appended_arrays_read_back_bit_for_bit() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let n = 57;
        let mut r3 = || [rng.gen::<f64>(), rng.gen(), rng.gen()];
        let p = Particles {
            position: (0..n).map(|_| r3()).collect(),
            strength: (0..n).map(|_| r3()).collect(),
            sigma: (0..n).map(|i| 0.1 + i as f64).collect(),
            ..Default::default()
        };
        let v: Vec<[f64; 3]> = (0..n).map(|_| r3()).collect();
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.vtp");
        write_particles(&f, &p, Some(&v)).unwrap();
        let got = arrays(&std::fs::read(&f).unwrap());
        let le = |x: &[[f64; 3]]| -> Vec<u8> {
            x.iter().flatten().flat_map(|v| v.to_le_bytes()).collect()
        };
        let find = |name: &str| got.iter().find(|(k, _)| k == name).unwrap().1.clone();
        assert_eq!(find("Points"), le(&p.position));
        assert_eq!(find("alpha"), le(&p.strength));
        assert_eq!(find("velocity"), le(&v));
        let sig: Vec<u8> = p.sigma.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(find("sigma"), sig);
        let off = find("offsets");
        assert_eq!(
            i64::from_le_bytes(off[off.len() - 8..].try_into().unwrap()),
            n as i64
        );
        // the collection round-trips
        let pvd = dir.path().join("p.pvd");
        let e = vec![(0.0, "a.vtp".to_string()), (0.25, "b.vtp".to_string())];
        write_pvd(&pvd, &e).unwrap();
        assert_eq!(read_pvd(&pvd), e);
        // the parallel file names its pieces
        let pvtp = dir.path().join("p.pvtp");
        let pieces = vec!["p_p0000.vtp".to_string(), "p_p0001.vtp".to_string()];
        write_pvtp(&pvtp, &pieces, true).unwrap();
        assert_eq!(read_pvtp(&pvtp), pieces);
        assert!(std::fs::read_to_string(&pvtp)
            .unwrap()
            .contains("Name=\"velocity\""));
    }
}
