//! Solid harmonics and rotations (being written).
