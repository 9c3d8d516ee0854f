//! FMM operators (being written).
