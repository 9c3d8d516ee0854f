//! The vortex method (being written).
