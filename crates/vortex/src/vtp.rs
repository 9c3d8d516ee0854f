//! Particle snapshots for ParaView in binary form: XML VTK PolyData (`.vtp`, VTK file format
//! 1.0, little-endian, appended raw data with UInt64 block headers) and the `.pvd` collection that
//! gives each snapshot its physical time (`docs/CONVENTIONS.md`, "Files").
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

/// One array of the appended block: name, VTK type, components, little-endian bytes.
struct Array {
    name: &'static str,
    ty: &'static str,
    comps: usize,
    bytes: Vec<u8>,
}

fn f64s(name: &'static str, comps: usize, v: impl Iterator<Item = f64>) -> Array {
    Array {
        name,
        ty: "Float64",
        comps,
        bytes: v.flat_map(f64::to_le_bytes).collect(),
    }
}

fn i64s(name: &'static str, v: impl Iterator<Item = i64>) -> Array {
    Array {
        name,
        ty: "Int64",
        comps: 1,
        bytes: v.flat_map(i64::to_le_bytes).collect(),
    }
}

fn header(a: &Array, offset: usize) -> String {
    format!(
        "<DataArray type=\"{}\" Name=\"{}\" NumberOfComponents=\"{}\" format=\"appended\" offset=\"{offset}\"/>\n",
        a.ty, a.name, a.comps
    )
}

/// Writes `p` (and `velocity`, aligned with it) as a `.vtp` file, atomically (temporary file,
/// rename).
pub fn write_particles(path: &Path, p: &Particles, velocity: Option<&[[f64; 3]]>) -> Result<()> {
    let n = p.len();
    let points = f64s("Points", 3, p.position.iter().flatten().copied());
    let conn = i64s("connectivity", 0..n as i64);
    let offs = i64s("offsets", 1..=n as i64);
    let mut data = vec![
        f64s("alpha", 3, p.strength.iter().flatten().copied()),
        f64s("alpha_magnitude", 1, p.strength.iter().map(|a| norm(*a))),
        f64s("sigma", 1, p.sigma.iter().copied()),
    ];
    if let Some(v) = velocity {
        data.push(f64s("velocity", 3, v.iter().flatten().copied()));
    }
    let mut xml = String::from(
        "<?xml version=\"1.0\"?>\n<VTKFile type=\"PolyData\" version=\"1.0\" \
         byte_order=\"LittleEndian\" header_type=\"UInt64\">\n<PolyData>\n",
    );
    xml.push_str(&format!(
        "<Piece NumberOfPoints=\"{n}\" NumberOfVerts=\"{n}\" NumberOfLines=\"0\" \
         NumberOfStrips=\"0\" NumberOfPolys=\"0\">\n"
    ));
    let mut offset = 0;
    let mut next = |a: &Array| {
        let h = header(a, offset);
        offset += 8 + a.bytes.len();
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
        let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        w.write_all(xml.as_bytes())?;
        for a in data.iter().chain([&points, &conn, &offs]) {
            w.write_all(&(a.bytes.len() as u64).to_le_bytes())?;
            w.write_all(&a.bytes)?;
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
    spectral::durable::write_atomic(path, &[s.as_bytes()], 1)
        .map_err(|e| Error::Other(e.to_string()))
}

/// The entries of an existing `.pvd` written by [`write_pvd`] (empty when absent or unreadable).
pub fn read_pvd(path: &Path) -> Vec<(f64, String)> {
    let Ok(text) = std::fs::read_to_string(path) else {
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
    }
}
