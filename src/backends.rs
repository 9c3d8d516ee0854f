//! Choosing the compute backend at the command line (`--backend auto|cpu|cuda`, `--device N`,
//! `--grid adaptive|uniform`): the code lives in the `engine` crate (`crates/engine`), which
//! the Python package shares.

pub use engine::backends::*;
