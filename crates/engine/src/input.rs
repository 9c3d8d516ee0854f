//! Checks of input arrays (positions, strengths, core radii; `CONVENTIONS.md`, "Files"), with
//! the messages of the command line: each names the array (or file), the row, the column and
//! the value. The binary checks the `.npy` files it reads with them, the Python package the
//! numpy arrays it is given.

use crate::{EngineError, Result};
use vortex_fmm::{Sources, Targets};

fn shape_text(shape: &[usize]) -> String {
    match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Checks that `shape` is `(rows, cols)` (any `rows` when `None`) with at least one row;
/// returns the number of rows.
pub fn check_matrix_shape(
    what: &str,
    shape: &[usize],
    rows: Option<usize>,
    cols: usize,
) -> Result<usize> {
    let n = rows.unwrap_or(shape.first().copied().unwrap_or(0));
    if shape.len() != 2 || shape[1] != cols || shape[0] != n {
        return Err(EngineError::Input(format!(
            "{what}: shape {} but ({n}, {cols}) expected",
            shape_text(shape)
        )));
    }
    if n == 0 {
        return Err(EngineError::Input(format!(
            "{what}: contains no rows (N = 0)"
        )));
    }
    Ok(n)
}

/// Checks that `shape` is `(rows,)`.
pub fn check_vector_shape(what: &str, shape: &[usize], rows: usize) -> Result<()> {
    if shape != [rows] {
        return Err(EngineError::Input(format!(
            "{what}: shape {} but ({rows},) expected",
            shape_text(shape)
        )));
    }
    Ok(())
}

/// Checks that every value of a row-major matrix with `cols` columns is finite.
pub fn check_finite(what: &str, data: &[f64], cols: usize) -> Result<()> {
    match data.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(k) => Err(EngineError::Input(format!(
            "{what}: row {}, column {} is {} (values must be finite)",
            k / cols,
            k % cols,
            data[k]
        ))),
    }
}

/// Checks that every core radius is positive; `column` says where sigma sits in a row (e.g.
/// `" (column 6)"`, or empty for a vector of radii).
pub fn check_core_radii(
    what: &str,
    sigma: impl IntoIterator<Item = f64>,
    column: &str,
) -> Result<()> {
    match sigma
        .into_iter()
        .enumerate()
        .find(|(_, s)| s.is_nan() || *s <= 0.0)
    {
        None => Ok(()),
        Some((i, s)) => Err(EngineError::Input(format!(
            "{what}: row {i}: core radius sigma{column} is {s} but must be positive"
        ))),
    }
}

/// Sources from row-major arrays of positions `x` (N x 3), strengths `alpha` (N x 3, vorticity
/// times volume) and core radii `sigma` (N), each with its shape as given: checked (shapes,
/// finiteness, sigma > 0) and copied into the engine's layout.
pub fn sources_from_arrays(
    x: (&[f64], &[usize]),
    alpha: (&[f64], &[usize]),
    sigma: (&[f64], &[usize]),
) -> Result<Sources> {
    let n = check_matrix_shape("x", x.1, None, 3)?;
    check_matrix_shape("alpha", alpha.1, Some(n), 3)?;
    check_vector_shape("sigma", sigma.1, n)?;
    check_finite("x", x.0, 3)?;
    check_finite("alpha", alpha.0, 3)?;
    check_finite("sigma", sigma.0, 1)?;
    check_core_radii("sigma", sigma.0.iter().copied(), "")?;
    Ok(Sources {
        position: rows3(x.0),
        strength: rows3(alpha.0),
        sigma: sigma.0.to_vec(),
    })
}

/// Plain evaluation points (zero strength) from a row-major `(M, 3)` array, checked.
pub fn targets_from_array(name: &str, t: (&[f64], &[usize])) -> Result<Targets> {
    check_matrix_shape(name, t.1, None, 3)?;
    check_finite(name, t.0, 3)?;
    Ok(Targets::points(rows3(t.0)))
}

fn rows3(flat: &[f64]) -> Vec<[f64; 3]> {
    flat.chunks_exact(3).map(|r| [r[0], r[1], r[2]]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err<T: std::fmt::Debug>(r: Result<T>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn messages_name_array_row_column_and_value() {
        let x = [0.0, 1.0, 2.0, 3.0, f64::NAN, 5.0];
        let a = [0.1; 6];
        let s = [0.5, -0.25];
        let e = err(sources_from_arrays(
            (&x, &[2, 3]),
            (&a, &[2, 3]),
            (&s, &[2]),
        ));
        assert_eq!(e, "x: row 1, column 1 is NaN (values must be finite)");
        let x = [0.0; 6];
        let e = err(sources_from_arrays(
            (&x, &[2, 3]),
            (&a, &[2, 3]),
            (&s, &[2]),
        ));
        assert_eq!(
            e,
            "sigma: row 1: core radius sigma is -0.25 but must be positive"
        );
        let e = err(sources_from_arrays(
            (&x, &[3, 2]),
            (&a, &[2, 3]),
            (&s, &[2]),
        ));
        assert_eq!(e, "x: shape (3, 2) but (3, 3) expected");
        let e = err(sources_from_arrays(
            (&x, &[2, 3]),
            (&a, &[3, 2]),
            (&s, &[2]),
        ));
        assert_eq!(e, "alpha: shape (3, 2) but (2, 3) expected");
        let e = err(sources_from_arrays(
            (&x, &[2, 3]),
            (&a, &[2, 3]),
            (&s, &[3]),
        ));
        assert_eq!(e, "sigma: shape (3,) but (2,) expected");
        let e = err(sources_from_arrays(
            (&[], &[0, 3]),
            (&[], &[0, 3]),
            (&[], &[0]),
        ));
        assert_eq!(e, "x: contains no rows (N = 0)");
        let e = err(targets_from_array("targets", (&x, &[6])));
        assert_eq!(e, "targets: shape (6,) but (6, 3) expected");
    }

    #[test]
    fn good_arrays_give_the_rows_in_order() {
        let x = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        let a = [6.0, 7.0, 8.0, 9.0, 10.0, 11.0];
        let s = [0.5, 0.25];
        let src = sources_from_arrays((&x, &[2, 3]), (&a, &[2, 3]), (&s, &[2])).unwrap();
        assert_eq!(src.position, vec![[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]);
        assert_eq!(src.strength, vec![[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]);
        assert_eq!(src.sigma, vec![0.5, 0.25]);
        src.validate().unwrap();
    }
}
