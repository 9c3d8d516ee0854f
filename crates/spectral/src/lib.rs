//! Pseudo-spectral solver (work in progress).
