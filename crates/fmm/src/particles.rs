//! Vortex elements (sources) and evaluation points (targets), with input validation.
//!
//! Units and conventions follow `docs/CONVENTIONS.md`: `strength` is the vector strength
//! `alpha = omega * volume`, `sigma` the Gaussian core radius of the source.

use crate::error::FmmError;

/// A set of vortex elements: position, vector strength and core radius of each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sources {
    pub position: Vec<[f64; 3]>,
    pub strength: Vec<[f64; 3]>,
    pub sigma: Vec<f64>,
}

/// Points where velocity and stretching are wanted. `strength` is the vector strength of the
/// element sitting at the target (it enters the stretching `(alpha_i . grad) u`); zero for
/// plain evaluation points, whose stretching is then zero.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Targets {
    pub position: Vec<[f64; 3]>,
    pub strength: Vec<[f64; 3]>,
}

/// Velocity and stretching at each target, in the targets' order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fields {
    pub velocity: Vec<[f64; 3]>,
    pub stretching: Vec<[f64; 3]>,
}

impl Sources {
    pub fn len(&self) -> usize {
        self.position.len()
    }

    pub fn is_empty(&self) -> bool {
        self.position.is_empty()
    }

    /// The same elements seen as targets (self-evaluation: every element feels all others).
    pub fn as_targets(&self) -> Targets {
        Targets {
            position: self.position.clone(),
            strength: self.strength.clone(),
        }
    }

    /// Checks lengths, finiteness and positive core radii; the error names the first bad
    /// element and field.
    pub fn validate(&self) -> Result<(), FmmError> {
        let n = self.position.len();
        if n == 0 {
            return Err(FmmError::Empty("sources"));
        }
        if self.strength.len() != n || self.sigma.len() != n {
            return Err(FmmError::LengthMismatch {
                what: "sources",
                position: n,
                other: self.strength.len().min(self.sigma.len()),
            });
        }
        for i in 0..n {
            check_finite("position", i, &self.position[i])?;
            check_finite("strength", i, &self.strength[i])?;
            let s = self.sigma[i];
            if !s.is_finite() || s <= 0.0 {
                return Err(FmmError::BadCoreRadius { index: i, value: s });
            }
        }
        Ok(())
    }

    /// Largest core radius (0 for an empty set).
    pub fn max_sigma(&self) -> f64 {
        self.sigma.iter().copied().fold(0.0, f64::max)
    }

    /// The piece of rank `rank` of `ranks` when the set is split into contiguous, even pieces
    /// in input order: elements `len * rank / ranks .. len * (rank + 1) / ranks`.
    pub fn rank_piece(&self, rank: usize, ranks: usize) -> Sources {
        let r = rank_piece_range(self.len(), rank, ranks);
        Sources {
            position: self.position[r.clone()].to_vec(),
            strength: self.strength[r.clone()].to_vec(),
            sigma: self.sigma[r].to_vec(),
        }
    }
}

impl Targets {
    pub fn len(&self) -> usize {
        self.position.len()
    }

    pub fn is_empty(&self) -> bool {
        self.position.is_empty()
    }

    /// The piece of rank `rank` of `ranks` when the set is split into contiguous, even pieces
    /// in input order: elements `len * rank / ranks .. len * (rank + 1) / ranks`.
    pub fn rank_piece(&self, rank: usize, ranks: usize) -> Targets {
        let r = rank_piece_range(self.len(), rank, ranks);
        Targets {
            position: self.position[r.clone()].to_vec(),
            strength: self.strength[r].to_vec(),
        }
    }

    /// Plain evaluation points with zero strength.
    pub fn points(position: Vec<[f64; 3]>) -> Self {
        let strength = vec![[0.0; 3]; position.len()];
        Self { position, strength }
    }

    pub fn validate(&self) -> Result<(), FmmError> {
        let n = self.position.len();
        if n == 0 {
            return Err(FmmError::Empty("targets"));
        }
        if self.strength.len() != n {
            return Err(FmmError::LengthMismatch {
                what: "targets",
                position: n,
                other: self.strength.len(),
            });
        }
        for i in 0..n {
            check_finite("target position", i, &self.position[i])?;
            check_finite("target strength", i, &self.strength[i])?;
        }
        Ok(())
    }
}

/// Indices `len * rank / ranks .. len * (rank + 1) / ranks`: the contiguous piece of rank `rank`
/// when `len` items are split evenly over `ranks` ranks in order.
fn rank_piece_range(len: usize, rank: usize, ranks: usize) -> std::ops::Range<usize> {
    len * rank / ranks..len * (rank + 1) / ranks
}

impl Fields {
    pub fn zeros(n: usize) -> Self {
        Self {
            velocity: vec![[0.0; 3]; n],
            stretching: vec![[0.0; 3]; n],
        }
    }

    pub fn len(&self) -> usize {
        self.velocity.len()
    }

    pub fn is_empty(&self) -> bool {
        self.velocity.is_empty()
    }

    /// [`relative_l2_error`] of the velocity and of the stretching against `reference`.
    pub fn relative_l2_errors(&self, reference: &Fields) -> (f64, f64) {
        (
            relative_l2_error(&self.velocity, &reference.velocity),
            relative_l2_error(&self.stretching, &reference.stretching),
        )
    }
}

fn check_finite(field: &'static str, index: usize, v: &[f64; 3]) -> Result<(), FmmError> {
    if let Some(c) = v.iter().position(|x| !x.is_finite()) {
        return Err(FmmError::NonFinite {
            field,
            index,
            component: c,
            value: v[c],
        });
    }
    Ok(())
}

/// Relative L2 error `sqrt(sum |v - v_ref|^2 / sum |v_ref|^2)` (docs/CONVENTIONS.md).
pub fn relative_l2_error(value: &[[f64; 3]], reference: &[[f64; 3]]) -> f64 {
    assert_eq!(value.len(), reference.len());
    let (mut num, mut den) = (0.0, 0.0);
    for (v, r) in value.iter().zip(reference) {
        for c in 0..3 {
            num += (v[c] - r[c]).powi(2);
            den += r[c] * r[c];
        }
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}
