//! Files: checkpoints (bincode with a version header, written atomically), `.npy` and legacy VTK
//! fields, spectra CSV.

use crate::config::Dealias;
use crate::field::{SpectralField, VelocityField};
use num_complex::Complex64;
use serde::{Deserialize, Serialize};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Errors of the file layer.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// An operating-system error on a file.
    #[error("{path}: {source}")]
    Os {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A checkpoint that cannot be used.
    #[error("{path}: bad checkpoint: {msg}")]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A plotting failure.
    #[error("{path}: plot: {msg}")]
    Plot {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
}

pub(crate) fn os(path: &Path) -> impl FnOnce(std::io::Error) -> IoError + '_ {
    move |source| IoError::Os {
        path: path.to_path_buf(),
        source,
    }
}

/// Magic bytes at the start of a checkpoint.
pub const CHECKPOINT_MAGIC: &[u8; 8] = b"VXSPECCK";
/// Checkpoint format version.
pub const CHECKPOINT_VERSION: u32 = 1;

/// The content of a checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Grid size.
    pub n: usize,
    /// Viscosity.
    pub nu: f64,
    /// Dealiasing rule.
    pub dealias: Dealias,
    /// Time.
    pub t: f64,
    /// Steps taken.
    pub steps: u64,
    /// Fourier coefficients, components one after the other, each as (re, im) pairs.
    pub data: Vec<f64>,
}

impl Checkpoint {
    /// Capture a spectral state.
    pub fn from_state(s: &SpectralField, nu: f64, dealias: Dealias, t: f64, steps: u64) -> Self {
        let mut data = Vec::with_capacity(6 * s.c[0].len());
        for c in &s.c {
            for v in c {
                data.push(v.re);
                data.push(v.im);
            }
        }
        Checkpoint {
            n: s.n,
            nu,
            dealias,
            t,
            steps,
            data,
        }
    }

    /// The spectral state.
    pub fn state(&self) -> SpectralField {
        let mut s = SpectralField::zeros(self.n);
        let len = s.c[0].len();
        for (c, comp) in s.c.iter_mut().enumerate() {
            for (i, v) in comp.iter_mut().enumerate() {
                let j = 2 * (c * len + i);
                *v = Complex64::new(self.data[j], self.data[j + 1]);
            }
        }
        s
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Write a checkpoint: magic, version (u32 LE), payload length (u64 LE), FNV-1a checksum (u64 LE),
/// bincode payload; to `path.tmp`, then renamed over `path`.
pub fn write_checkpoint(path: &Path, ck: &Checkpoint) -> Result<(), IoError> {
    let payload = bincode::serde::encode_to_vec(ck, bincode::config::standard()).map_err(|e| {
        IoError::Checkpoint {
            path: path.to_path_buf(),
            msg: format!("encode: {e}"),
        }
    })?;
    let tmp = path.with_extension("tmp");
    {
        let f = std::fs::File::create(&tmp).map_err(os(&tmp))?;
        let mut w = BufWriter::new(f);
        w.write_all(CHECKPOINT_MAGIC).map_err(os(&tmp))?;
        w.write_all(&CHECKPOINT_VERSION.to_le_bytes())
            .map_err(os(&tmp))?;
        w.write_all(&(payload.len() as u64).to_le_bytes())
            .map_err(os(&tmp))?;
        w.write_all(&fnv1a(&payload).to_le_bytes())
            .map_err(os(&tmp))?;
        w.write_all(&payload).map_err(os(&tmp))?;
        let f = w.into_inner().map_err(|e| IoError::Os {
            path: tmp.clone(),
            source: e.into_error(),
        })?;
        f.sync_all().map_err(os(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(os(path))?;
    Ok(())
}

/// Read and check a checkpoint (magic, version, length, checksum, consistency of the sizes).
pub fn read_checkpoint(path: &Path) -> Result<Checkpoint, IoError> {
    let bad = |msg: String| IoError::Checkpoint {
        path: path.to_path_buf(),
        msg,
    };
    let mut f = std::fs::File::open(path).map_err(os(path))?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(os(path))?;
    if bytes.len() < 28 || &bytes[..8] != CHECKPOINT_MAGIC {
        return Err(bad(
            "not a vortex spectral checkpoint (wrong magic bytes)".into()
        ));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if version != CHECKPOINT_VERSION {
        return Err(bad(format!(
            "format version {version}, this build reads version {CHECKPOINT_VERSION}"
        )));
    }
    let len = u64::from_le_bytes(bytes[12..20].try_into().unwrap()) as usize;
    let sum = u64::from_le_bytes(bytes[20..28].try_into().unwrap());
    let payload = &bytes[28..];
    if payload.len() != len {
        return Err(bad(format!(
            "truncated or padded: payload {} bytes, header says {len}",
            payload.len()
        )));
    }
    if fnv1a(payload) != sum {
        return Err(bad("checksum mismatch (corrupt file)".into()));
    }
    let (ck, _): (Checkpoint, usize) =
        bincode::serde::decode_from_slice(payload, bincode::config::standard())
            .map_err(|e| bad(format!("decode: {e}")))?;
    if ck.data.len() != 6 * ck.n * ck.n * (ck.n / 2 + 1) {
        return Err(bad("data length does not match the grid size".into()));
    }
    Ok(ck)
}

/// Write `.npy` (little-endian float64, C order) with the given shape.
pub fn write_npy(
    path: &Path,
    shape: &[usize],
    data: impl Iterator<Item = f64>,
) -> Result<(), IoError> {
    let shape_s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {shape_s}, }}");
    let total = 10 + header.len() + 1;
    let pad = (64 - total % 64) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let tmp = path.with_extension("npy.tmp");
    let f = std::fs::File::create(&tmp).map_err(os(&tmp))?;
    let mut w = BufWriter::new(f);
    w.write_all(b"\x93NUMPY\x01\x00").map_err(os(&tmp))?;
    w.write_all(&(header.len() as u16).to_le_bytes())
        .map_err(os(&tmp))?;
    w.write_all(header.as_bytes()).map_err(os(&tmp))?;
    for v in data {
        w.write_all(&v.to_le_bytes()).map_err(os(&tmp))?;
    }
    w.flush().map_err(os(&tmp))?;
    drop(w);
    std::fs::rename(&tmp, path).map_err(os(path))?;
    Ok(())
}

/// Write a vector field as `.npy` of shape `(n, n, n, 3)`, index `[i][j][k][component]`, `i` along x.
pub fn write_field_npy(path: &Path, f: &VelocityField) -> Result<(), IoError> {
    let n = f.n;
    let it = (0..n * n * n)
        .flat_map(|i| (0..3).map(move |c| (i, c)))
        .map(|(i, c)| f.u[c][i]);
    write_npy(path, &[n, n, n, 3], it)
}

/// Write legacy VTK `STRUCTURED_POINTS` (binary, big-endian, x fastest) with one or more vector
/// fields on the grid of the box `[-pi, pi)^3`. ParaView opens it as image data.
pub fn write_vtk(
    path: &Path,
    title: &str,
    fields: &[(&str, &VelocityField)],
) -> Result<(), IoError> {
    let n = fields.first().map(|f| f.1.n).unwrap_or(0);
    let h = 2.0 * std::f64::consts::PI / n as f64;
    let tmp = path.with_extension("vtk.tmp");
    let f = std::fs::File::create(&tmp).map_err(os(&tmp))?;
    let mut w = BufWriter::new(f);
    let title: String = title.chars().filter(|c| *c != '\n').take(250).collect();
    write!(
        w,
        "# vtk DataFile Version 3.0\n{title}\nBINARY\nDATASET STRUCTURED_POINTS\nDIMENSIONS {n} {n} {n}\nORIGIN {o} {o} {o}\nSPACING {h} {h} {h}\nPOINT_DATA {np}\n",
        o = -std::f64::consts::PI,
        np = n * n * n
    )
    .map_err(os(&tmp))?;
    for (name, fld) in fields {
        assert_eq!(fld.n, n);
        writeln!(w, "VECTORS {name} double").map_err(os(&tmp))?;
        for k in 0..n {
            for j in 0..n {
                for i in 0..n {
                    let idx = (i * n + j) * n + k;
                    for c in 0..3 {
                        w.write_all(&fld.u[c][idx].to_be_bytes())
                            .map_err(os(&tmp))?;
                    }
                }
            }
        }
        w.write_all(b"\n").map_err(os(&tmp))?;
    }
    w.flush().map_err(os(&tmp))?;
    drop(w);
    std::fs::rename(&tmp, path).map_err(os(path))?;
    Ok(())
}

/// Write a spectrum as CSV `k,E`.
pub fn write_spectrum_csv(path: &Path, spec: &[(f64, f64)]) -> Result<(), IoError> {
    let mut s = String::from("k,E\n");
    for (k, e) in spec {
        s.push_str(&format!("{k},{e:.16e}\n"));
    }
    std::fs::write(path, s).map_err(os(path))
}

/// Read a two-or-more-column numeric CSV with a header; returns the rows.
pub fn read_csv(path: &Path) -> Result<Vec<Vec<f64>>, IoError> {
    let text = std::fs::read_to_string(path).map_err(os(path))?;
    Ok(text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let row: Result<Vec<f64>, _> = l.split(',').map(|x| x.trim().parse::<f64>()).collect();
            row.ok()
        })
        .collect())
}
