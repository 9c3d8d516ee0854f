//! Domain decomposition (being written).
