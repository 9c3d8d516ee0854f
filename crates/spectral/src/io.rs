//! Files: checkpoints (bincode with a version header, written atomically), `.npy` and legacy VTK
//! fields, spectra CSV.

use crate::config::Dealias;
use crate::durable;
use crate::field::{SpectralField, VelocityField};
pub use crate::file_names::{field_time_tag, spectrum_file_name, spectrum_file_name_with};
use num_complex::Complex64;
use serde::{Deserialize, Serialize};
use std::io::Write;
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
pub const CHECKPOINT_VERSION: u32 = 2;

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
    /// Energy at the start of the run (reference of the blow-up check).
    pub initial_energy: f64,
    /// The configuration keys a restart must not change (flattened TOML, `key = value` lines;
    /// see `run::restart_keys`).
    pub config: String,
    /// Fourier coefficients, components one after the other, each as (re, im) pairs.
    pub data: Vec<f64>,
}

impl Checkpoint {
    /// Capture a spectral state.
    pub fn from_state(
        s: &SpectralField,
        nu: f64,
        dealias: Dealias,
        t: f64,
        steps: u64,
        config: String,
    ) -> Self {
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
            initial_energy: f64::NAN,
            config,
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

/// Write a checkpoint through [`crate::durable::write_container`] (magic, version, length,
/// FNV-1a checksum, bincode payload; atomic, the last `keep` kept).
pub fn write_checkpoint(path: &Path, ck: &Checkpoint, keep: usize) -> Result<(), IoError> {
    let payload = bincode::serde::encode_to_vec(ck, bincode::config::standard()).map_err(|e| {
        IoError::Checkpoint {
            path: path.to_path_buf(),
            msg: format!("encode: {e}"),
        }
    })?;
    durable::write_container(path, CHECKPOINT_MAGIC, CHECKPOINT_VERSION, &payload, keep)
        .map_err(durable_err)
}

fn durable_err(e: durable::DurableError) -> IoError {
    match e {
        durable::DurableError::Os { path, source } => IoError::Os { path, source },
        durable::DurableError::Corrupt { path, msg }
        | durable::DurableError::OutDir { path, msg } => IoError::Checkpoint { path, msg },
    }
}

/// Read and check a checkpoint (magic, version, length, checksum, consistency of the sizes).
pub fn read_checkpoint(path: &Path) -> Result<Checkpoint, IoError> {
    let bad = |msg: String| IoError::Checkpoint {
        path: path.to_path_buf(),
        msg,
    };
    let payload = durable::read_container(
        path,
        CHECKPOINT_MAGIC,
        CHECKPOINT_VERSION,
        "vortex spectral checkpoint",
    )
    .map_err(durable_err)?;
    let (ck, used): (Checkpoint, usize) =
        bincode::serde::decode_from_slice(&payload, bincode::config::standard())
            .map_err(|e| bad(format!("decode: {e}")))?;
    if used != payload.len() {
        return Err(bad("trailing bytes after the state".into()));
    }
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
    crate::durable::write_via_tmp(path, |w| {
        w.write_all(b"\x93NUMPY\x01\x00")?;
        w.write_all(&(header.len() as u16).to_le_bytes())?;
        w.write_all(header.as_bytes())?;
        for v in data {
            w.write_all(&v.to_le_bytes())?;
        }
        Ok(())
    })
    .map_err(durable_err)
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
    let title: String = title.chars().filter(|c| *c != '\n').take(250).collect();
    crate::durable::write_via_tmp(path, |w| {
        write!(
            w,
            "# vtk DataFile Version 3.0\n{title}\nBINARY\nDATASET STRUCTURED_POINTS\nDIMENSIONS {n} {n} {n}\nORIGIN {o} {o} {o}\nSPACING {h} {h} {h}\nPOINT_DATA {np}\n",
            o = -std::f64::consts::PI,
            np = n * n * n
        )?;
        for (name, fld) in fields {
            assert_eq!(fld.n, n);
            writeln!(w, "VECTORS {name} double")?;
            for k in 0..n {
                for j in 0..n {
                    for i in 0..n {
                        let idx = (i * n + j) * n + k;
                        for c in 0..3 {
                            w.write_all(&fld.u[c][idx].to_be_bytes())?;
                        }
                    }
                }
            }
            w.write_all(b"\n")?;
        }
        Ok(())
    })
    .map_err(durable_err)
}

/// Write a spectrum as CSV `k,E`.
pub fn write_spectrum_csv(path: &Path, spec: &[(f64, f64)]) -> Result<(), IoError> {
    let mut s = String::from("k,E\n");
    for (k, e) in spec {
        s.push_str(&format!("{k},{e:.16e}\n"));
    }
    crate::durable::write_atomic(path, &[s.as_bytes()], 1).map_err(durable_err)
}

/// Spectra in time order: `(t, [(k, E(k))])`.
pub type SpectrumSeries = Vec<(f64, Vec<(f64, f64)>)>;

/// Every spectrum `spectrum_TTTTT.TTTT.csv` in `dir` (the files of both solvers), in time order.
pub fn read_spectra(dir: &Path) -> Result<SpectrumSeries, IoError> {
    let mut found: Vec<(f64, std::path::PathBuf)> = std::fs::read_dir(dir)
        .map_err(os(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let t: f64 = name
                .strip_prefix("spectrum_")?
                .strip_suffix(".csv")?
                .parse()
                .ok()?;
            Some((t, p))
        })
        .collect();
    found.sort_by(|a, b| a.0.total_cmp(&b.0));
    found
        .into_iter()
        .map(|(t, p)| {
            let s = read_csv(&p)?
                .into_iter()
                .filter(|r| r.len() >= 2)
                .map(|r| (r[0], r[1]))
                .collect();
            Ok((t, s))
        })
        .collect()
}

/// Read a two-or-more-column numeric CSV with a header; returns the rows.
pub fn read_csv(path: &Path) -> Result<Vec<Vec<f64>>, IoError> {
    let text = crate::inputs::read_own_text(path, "CSV file").map_err(durable_err)?;
    Ok(text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let row: Result<Vec<f64>, _> = l.split(',').map(|x| x.trim().parse::<f64>()).collect();
            row.ok()
        })
        .collect())
}
