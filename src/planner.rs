//! From the command line to an evaluation engine: the code lives in `vortex_engine::planner`
//! (`crates/engine/src/planner.rs`), which the Python package shares.

pub use vortex_engine::planner::*;
