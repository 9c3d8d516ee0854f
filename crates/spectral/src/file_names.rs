//! The names of the output files at a time, shared by both solvers and by the configuration
//! that checks its output times against them (below `config` and `io`, which re-exports them).

/// The file name of the spectrum at time `t`, `spectrum_TTTTT.TTTT.csv` (both solvers).
pub fn spectrum_file_name(t: f64) -> String {
    format!("spectrum_{t:010.4}.csv")
}

/// The file name of the spectrum at time `t` with `decimals` decimals of the time (at least
/// 4: [`spectrum_file_name`]); for runs whose outputs are closer than 1e-4 in time.
pub fn spectrum_file_name_with(t: f64, decimals: usize) -> String {
    if decimals <= 4 {
        return spectrum_file_name(t);
    }
    let width = 6 + decimals;
    format!("spectrum_{t:0width$.decimals$}.csv")
}

/// The time tag of the field files at time `t` (`velocity_TTTTT.TTTT.npy`,
/// `vorticity_...`, `fields_....vtk`).
pub fn field_time_tag(t: f64) -> String {
    format!("{t:010.4}")
}
