//! Errors of the FMM engine.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum FmmError {
    #[error("no {0} given (N = 0)")]
    Empty(&'static str),
    #[error("{what}: {position} positions but {other} strengths/core radii")]
    LengthMismatch {
        what: &'static str,
        position: usize,
        other: usize,
    },
    #[error("{field} of element {index} is not finite (component {component} = {value})")]
    NonFinite {
        field: &'static str,
        index: usize,
        component: usize,
        value: f64,
    },
    #[error("core radius sigma of element {index} must be positive and finite, got {value}")]
    BadCoreRadius { index: usize, value: f64 },
    #[error("expansion order p = {order} is out of range (1..={max})")]
    OrderOutOfRange { order: usize, max: usize },
    #[error("invalid parameter {name} = {value}: {reason}")]
    BadParameter {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
    /// A core of order above 2 with a far-field gap too small for its tail.
    #[error(
        "core_cutoff = {core_cutoff} is too small for cores of order {core}: the singular far \
         field is accepted only where |1 - q| <= 1.14e-3 (the Gaussian's at 4 core radii), i.e. \
         core_cutoff >= {min}"
    )]
    CutoffTooSmall {
        core_cutoff: f64,
        core: crate::kernel::CoreOrder,
        min: f64,
    },
    /// The coordinates span so much that the expansions of order `order` would overflow f64.
    #[error(
        "coordinates span {extent:e} (bounding box edge): the expansions of order {order} would \
         overflow double precision (extent^(2p+2) > 1e300); rescale the problem or use method \
         \"direct\""
    )]
    ExpansionOverflow { extent: f64, order: usize },
    /// The evaluation produced NaN or Inf (a bug or an overflow that the input check missed).
    #[error(
        "the {method} evaluation gave a non-finite {field} at element {index} (position \
         {position:?}){scales}"
    )]
    NonFiniteResult {
        method: String,
        field: &'static str,
        index: usize,
        position: [f64; 3],
        /// The sources' scales that bound the result (largest strength, smallest core), where
        /// they are the likely cause: empty otherwise.
        scales: String,
    },
    #[error("backend error: {0}")]
    Backend(String),
}
