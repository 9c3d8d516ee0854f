//! What the check binaries (`gpu-check`, `gpu-uniform`) share: a list of checked figures that
//! decides the exit status.

/// Checked figures: each one is printed with its bound and `ok` / `FAIL`; the failures are kept
/// for the summary and the exit status.
#[derive(Default)]
pub struct Check {
    pub failed: Vec<String>,
}

impl Check {
    /// Checks `v <= tol` (a NaN fails).
    pub fn le(&mut self, what: &str, v: f64, tol: f64) {
        let ok = v.is_finite() && v <= tol;
        println!(
            "  {:<52} {:>10.3e}  (tol {:.0e}) {}",
            what,
            v,
            tol,
            if ok { "ok" } else { "FAIL" }
        );
        if !ok {
            self.failed.push(format!("{what}: {v:.3e} > {tol:.0e}"));
        }
    }

    /// Prints `passed` when every check passed; otherwise `failed` and the failures, then
    /// exits with status 1.
    pub fn finish(&self, passed: &str, failed: &str) {
        if self.failed.is_empty() {
            println!("{passed}");
            return;
        }
        println!("{failed}");
        for f in &self.failed {
            println!("  {f}");
        }
        std::process::exit(1);
    }

    /// Prints a figure that is not checked.
    #[allow(dead_code)] // used by one of the binaries only
    pub fn info(&self, what: &str, v: f64) {
        println!("  {what:<52} {v:>10.3e}  (reported, not checked)");
    }
}

/// A count on the command line: an integer or a float such as `1e6` (clap value parser).
pub fn count(s: &str) -> Result<usize, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if !(v >= 0.0 && v.is_finite() && v.fract() == 0.0 && v <= 1e15) {
        return Err(format!("`{s}` is not a whole non-negative count"));
    }
    Ok(v as usize)
}
