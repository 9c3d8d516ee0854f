//! Seeded random points and strengths of the unit tests.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A point uniform in the cube `[-1, 1)^3` (coordinates drawn in the order x, y, z).
pub(crate) fn in_cube(rng: &mut ChaCha8Rng) -> [f64; 3] {
    [
        rng.gen_range(-1.0..1.0),
        rng.gen_range(-1.0..1.0),
        rng.gen_range(-1.0..1.0),
    ]
}

/// `n` strengths with components uniform in `[-1, 1)`.
pub(crate) fn strengths(rng: &mut ChaCha8Rng, n: usize) -> Vec<[f64; 3]> {
    (0..n).map(|_| in_cube(rng)).collect()
}
