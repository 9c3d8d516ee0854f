//! Phase times inside a step at `RUST_LOG=vortex_resident=debug`: each lap synchronises the
//! stream and logs the seconds since the previous one (nothing is synchronised otherwise).

use cudarc::driver::CudaStream;
use std::sync::Arc;
use std::time::Instant;

pub struct Laps {
    stream: Arc<CudaStream>,
    what: &'static str,
    last: Instant,
    parts: Vec<(&'static str, f64)>,
    on: bool,
}

impl Laps {
    pub fn new(stream: &Arc<CudaStream>, what: &'static str) -> Self {
        let on = log::log_enabled!(log::Level::Debug);
        if on {
            let _ = stream.synchronize();
        }
        Self {
            stream: stream.clone(),
            what,
            last: Instant::now(),
            parts: Vec::new(),
            on,
        }
    }

    /// Ends the phase `name`.
    pub fn lap(&mut self, name: &'static str) {
        if self.on {
            let _ = self.stream.synchronize();
            let now = Instant::now();
            self.parts.push((name, (now - self.last).as_secs_f64()));
            self.last = now;
        }
    }
}

impl Drop for Laps {
    fn drop(&mut self) {
        if self.on && !self.parts.is_empty() {
            let text: Vec<String> = self
                .parts
                .iter()
                .map(|(k, v)| format!("{k} {:.1} ms", 1e3 * v))
                .collect();
            log::debug!("{}: {}", self.what, text.join(", "));
        }
    }
}
