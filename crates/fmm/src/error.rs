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
    #[error("expansion order p = {0} is out of range (1..={max})", max = crate::MAX_ORDER)]
    OrderOutOfRange(usize),
    #[error("invalid parameter {name} = {value}: {reason}")]
    BadParameter {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("backend error: {0}")]
    Backend(String),
}
