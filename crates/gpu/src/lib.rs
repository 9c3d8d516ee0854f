//! CUDA backend (work in progress).
