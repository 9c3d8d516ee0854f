//! Reading and writing the project's NumPy files (`docs/CONVENTIONS.md`, "Files").
//!
//! Every error names the file and what is wrong with it.

use anyhow::{bail, Context, Result};
use ndarray::{Array2, ArrayView2};
use ndarray_npy::{read_npy, write_npy};
use std::path::Path;
use vortex_fmm::{Fields, Sources, Targets};

/// The shape a `.npy` header claims and the offset of its data (format versions 1 to 3); `None`
/// where the header cannot be read (then `read_npy` names what is wrong).
fn npy_shape(path: &Path) -> Option<(Vec<u64>, u64)> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 12];
    f.read_exact(&mut head).ok()?;
    if &head[..6] != b"\x93NUMPY" {
        return None;
    }
    let (len, start) = match head[6] {
        1 => (u16::from_le_bytes([head[8], head[9]]) as usize, 10),
        2 | 3 => (
            u32::from_le_bytes(head[8..12].try_into().ok()?) as usize,
            12,
        ),
        _ => return None,
    };
    let mut text = vec![0u8; len.min(1 << 16)];
    let rest = &head[start..];
    let got = rest.len().min(text.len());
    text[..got].copy_from_slice(&rest[..got]);
    f.read_exact(&mut text[got..]).ok()?;
    let text = String::from_utf8_lossy(&text);
    let shape = text.split("'shape'").nth(1)?;
    let inner = shape.split('(').nth(1)?.split(')').next()?;
    let dims = inner
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| x.trim_end_matches('L').parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()?;
    Some((dims, (start + len) as u64))
}

/// Refuses a `.npy` file whose header claims more (or less) data than the file holds, or more
/// than the memory available, before `read_npy` allocates what the header claims.
fn check_npy_size(path: &Path, what: &str) -> Result<()> {
    let Some((dims, offset)) = npy_shape(path) else {
        return Ok(());
    };
    let elements = dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .and_then(|e| e.checked_mul(8));
    let file_len = std::fs::metadata(path)
        .with_context(|| format!("{what} file {}", path.display()))?
        .len();
    let data = file_len.saturating_sub(offset);
    match elements {
        Some(bytes) if bytes == data => {}
        _ => bail!(
            "{what} file {}: the header claims shape {dims:?} ({} bytes of float64 data), the file \
             holds {data} bytes after its header: truncated or not float64",
            path.display(),
            elements.map_or("more than 2^64".to_string(), |b| b.to_string())
        ),
    }
    vortex_spectral::durable::check_memory(
        &format!("{what} file {} of shape {dims:?}", path.display()),
        data as f64 * 2.0,
    )
    .map_err(|e| anyhow::anyhow!(e))
}

fn read_matrix(path: &Path, cols: usize, what: &str) -> Result<Array2<f64>> {
    // a FIFO or a device refused by its type before anything is read
    vortex_spectral::inputs::open_regular(path, &format!("{what} file"))?;
    check_npy_size(path, what)?;
    let a: Array2<f64> = read_npy(path).with_context(|| {
        format!(
            "{what} file {}: not a readable .npy file of 2-D little-endian float64 (dtype '<f8') \
             data",
            path.display()
        )
    })?;
    // the checks (and messages) the Python package applies to its arrays
    let what = format!("{what} file {}", path.display());
    vortex_engine::input::check_matrix_shape(&what, a.shape(), None, cols)?;
    let rows = a.as_standard_layout();
    let flat = rows.as_slice().expect("a standard layout is contiguous");
    vortex_engine::input::check_finite(&what, flat, cols)?;
    Ok(a)
}

/// Reads an `(N, 7)` particle file: `x, y, z, alpha_x, alpha_y, alpha_z, sigma`.
pub fn read_particles(path: &Path) -> Result<Sources> {
    let a = read_matrix(path, 7, "particle")?;
    let mut s = Sources::default();
    vortex_engine::input::check_core_radii(
        &format!("particle file {}", path.display()),
        a.column(6).iter().copied(),
        " (column 6)",
    )?;
    for row in a.rows() {
        s.position.push([row[0], row[1], row[2]]);
        s.strength.push([row[3], row[4], row[5]]);
        s.sigma.push(row[6]);
    }
    Ok(s)
}

/// Reads an `(M, 3)` target file of positions.
pub fn read_targets(path: &Path) -> Result<Targets> {
    let a = read_matrix(path, 3, "target")?;
    Ok(Targets::points(
        a.rows().into_iter().map(|r| [r[0], r[1], r[2]]).collect(),
    ))
}

/// Writes an `(N, 7)` particle file.
pub fn write_particles(path: &Path, s: &Sources) -> Result<()> {
    let mut a = Array2::<f64>::zeros((s.len(), 7));
    for i in 0..s.len() {
        for c in 0..3 {
            a[[i, c]] = s.position[i][c];
            a[[i, 3 + c]] = s.strength[i][c];
        }
        a[[i, 6]] = s.sigma[i];
    }
    write_atomic_npy(path, &a.view())
        .with_context(|| format!("writing particle file {}", path.display()))
}

/// Writes a `.npy` file through a temporary name (`NAME.tmp`, renamed over `NAME` once
/// complete): a full disk or any other error leaves no truncated file, and no `.tmp`.
pub fn write_atomic_npy(path: &Path, a: &ArrayView2<f64>) -> Result<()> {
    let tmp = vortex_spectral::durable::with_suffix(path, ".tmp");
    let r = write_npy(&tmp, a)
        .map_err(anyhow::Error::from)
        .and_then(|_| std::fs::rename(&tmp, path).map_err(anyhow::Error::from));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// Writes an `(N, 3)` float64 array.
pub fn write_vectors(path: &Path, v: &[[f64; 3]]) -> Result<()> {
    let flat: Vec<f64> = v.iter().flatten().copied().collect();
    let view = ArrayView2::from_shape((v.len(), 3), &flat)?;
    write_atomic_npy(path, &view).with_context(|| format!("writing {}", path.display()))
}

/// Writes `velocity.npy` and, when `with_stretching`, `stretching.npy` into `dir`.
pub fn write_fields(dir: &Path, f: &Fields, with_stretching: bool) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating output directory {}", dir.display()))?;
    write_vectors(&dir.join("velocity.npy"), &f.velocity)?;
    if with_stretching {
        write_vectors(&dir.join("stretching.npy"), &f.stretching)?;
    }
    Ok(())
}
