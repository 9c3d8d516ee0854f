//! Per-kernel profile of the uniform-grid pipeline: CUDA events around each kernel (or each
//! group of launches of one kernel), the launches, and the floor each kernel could reach on
//! the card: the bytes it must move over the HBM bandwidth, or the flops it executes over
//! the peak rate of the units it runs on (the roofline bound, Williams, Waterman & Patterson
//! 2009), whichever is larger.
//!
//! Profiling is off by default (no events, no synchronization). [`start`] turns it on for
//! the evaluations of this process that follow (every launch is then timed on its own, with
//! a synchronization after it, so the phase times of a profiled evaluation include those
//! waits: time the evaluation unprofiled, then profile one more); [`finish`] turns it off and
//! returns the kernels timed since [`start`]. `vortex bench fmm --profile` prints the table
//! ([`Profile::table`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The unit whose peak bounds a kernel's arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// FP32 vector (FMA) pipes.
    Fp32,
    /// FP64 vector pipes.
    Fp64,
    /// FP64 tensor cores (DMMA).
    Fp64Tensor,
    /// TF32 tensor cores (HMMA on tf32 inputs).
    Tf32Tensor,
}

/// Peak rates of a card: HBM bytes per second and flops per second of each [`Unit`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peaks {
    pub name: &'static str,
    pub hbm: f64,
    pub fp32: f64,
    pub fp64: f64,
    pub fp64_tensor: f64,
    pub tf32_tensor: f64,
}

/// The NVIDIA H200 (SXM): HBM3e 4.8 TB/s, FP32 67 TFLOP/s, FP64 34 TFLOP/s, FP64 tensor
/// 67 TFLOP/s, TF32 tensor 495 TFLOP/s dense (NVIDIA H200 datasheet, 2024).
pub const H200: Peaks = Peaks {
    name: "H200",
    hbm: 4.8e12,
    fp32: 67e12,
    fp64: 34e12,
    fp64_tensor: 67e12,
    tf32_tensor: 495e12,
};

impl Peaks {
    /// The peak flop rate of `u`.
    pub fn rate(&self, u: Unit) -> f64 {
        match u {
            Unit::Fp32 => self.fp32,
            Unit::Fp64 => self.fp64,
            Unit::Fp64Tensor => self.fp64_tensor,
            Unit::Tf32Tensor => self.tf32_tensor,
        }
    }
}

/// The work of a launch: bytes it must move through HBM at the least, and flops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Work {
    pub bytes: f64,
    pub flops: f64,
    pub unit: Unit,
}

impl Work {
    /// Memory-bound work of `bytes`.
    pub fn bytes(bytes: f64) -> Self {
        Work {
            bytes,
            flops: 0.0,
            unit: Unit::Fp32,
        }
    }

    /// Work of `flops` on `unit` that also moves `bytes`.
    pub fn flops(flops: f64, unit: Unit, bytes: f64) -> Self {
        Work { bytes, flops, unit }
    }
}

/// One kernel of the profile (launches of the same name summed).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    pub name: String,
    pub launches: usize,
    pub seconds: f64,
    pub work: Work,
}

impl KernelTime {
    /// The roofline floor on `peaks` (seconds): bytes over the bandwidth or flops over the
    /// unit's peak, the larger.
    pub fn floor(&self, peaks: &Peaks) -> f64 {
        (self.work.bytes / peaks.hbm).max(self.work.flops / peaks.rate(self.work.unit))
    }
}

/// The kernels timed between [`start`] and [`finish`], in the order of their first launch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    pub kernels: Vec<KernelTime>,
}

impl Profile {
    /// Seconds of every kernel.
    pub fn seconds(&self) -> f64 {
        self.kernels.iter().map(|k| k.seconds).sum()
    }

    /// Launches of every kernel.
    pub fn launches(&self) -> usize {
        self.kernels.iter().map(|k| k.launches).sum()
    }

    /// The profile as a text table: kernel, launches, ms, GB and GFLOP, the floor on `peaks`
    /// (ms), the bound (HBM or the unit) and the fraction of the floor reached.
    pub fn table(&self, peaks: &Peaks) -> String {
        let mut out = format!(
            "{:<28} {:>8} {:>9} {:>8} {:>9} {:>9} {:>6} {:>7}\n",
            "kernel", "launches", "ms", "GB", "GFLOP", "floor_ms", "bound", "of_peak"
        );
        for k in &self.kernels {
            let mem = k.work.bytes / peaks.hbm;
            let arith = k.work.flops / peaks.rate(k.work.unit);
            let bound = if mem >= arith {
                "HBM"
            } else {
                match k.work.unit {
                    Unit::Fp32 => "fp32",
                    Unit::Fp64 => "fp64",
                    Unit::Fp64Tensor => "dmma",
                    Unit::Tf32Tensor => "tf32",
                }
            };
            let floor = k.floor(peaks);
            out += &format!(
                "{:<28} {:>8} {:>9.3} {:>8.3} {:>9.1} {:>9.3} {:>6} {:>6.0}%\n",
                k.name,
                k.launches,
                k.seconds * 1e3,
                k.work.bytes * 1e-9,
                k.work.flops * 1e-9,
                floor * 1e3,
                bound,
                100.0 * floor / k.seconds.max(1e-12)
            );
        }
        let floor: f64 = self.kernels.iter().map(|k| k.floor(peaks)).sum();
        out += &format!(
            "{:<28} {:>8} {:>9.3} {:>8} {:>9} {:>9.3} {:>6} {:>6.0}%\n",
            "sum",
            self.launches(),
            self.seconds() * 1e3,
            "",
            "",
            floor * 1e3,
            "",
            100.0 * floor / self.seconds().max(1e-12)
        );
        out
    }
}

static ON: AtomicBool = AtomicBool::new(false);
static KERNELS: Mutex<Vec<KernelTime>> = Mutex::new(Vec::new());

/// Profiles the evaluations of this process from now on (the record emptied).
pub fn start() {
    KERNELS.lock().expect("profile poisoned").clear();
    ON.store(true, Ordering::SeqCst);
}

/// Stops profiling and returns the kernels timed since [`start`].
pub fn finish() -> Profile {
    ON.store(false, Ordering::SeqCst);
    Profile {
        kernels: std::mem::take(&mut *KERNELS.lock().expect("profile poisoned")),
    }
}

/// Whether launches are profiled now.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Adds `launches` launches of `name` that took `seconds` and did `work`.
pub fn record(name: &str, launches: usize, seconds: f64, work: Work) {
    let mut k = KERNELS.lock().expect("profile poisoned");
    match k.iter_mut().find(|x| x.name == name) {
        Some(x) => {
            x.launches += launches;
            x.seconds += seconds;
            x.work.bytes += work.bytes;
            x.work.flops += work.flops;
        }
        None => k.push(KernelTime {
            name: name.to_string(),
            launches,
            seconds,
            work,
        }),
    }
}

/// Replaces the work of the kernel `name` (work known only after it ran: the pair count of
/// the P2P); nothing when it was not recorded.
pub fn set_work(name: &str, work: Work) {
    if let Some(x) = KERNELS
        .lock()
        .expect("profile poisoned")
        .iter_mut()
        .find(|x| x.name == name)
    {
        x.work = work;
    }
}

/// Flops of one rotation-based translation (`tr_entry<KIND>` of `kernels/fmm.cu`, three
/// components; a complex multiply counted as 6, a fused multiply-add as 2), by the kernel's
/// loop trips: per output coefficient `(n, m)`, the forward rotation (`n + 1` complex
/// products and two FMAs), the shift along z (KIND 0 M2M: `n - m + 1` terms; 1 M2L:
/// `p + 1 - m`; 2 L2L: `p + 1 - n`; 6 flops each), the back rotation (`n + 1` terms of 4) and
/// the phase (8).
pub fn rotation_flops(p: usize, kind: u8) -> f64 {
    let mut f = 0usize;
    for n in 0..=p {
        for m in 0..=n {
            let shift = match kind {
                0 => n - m + 1,
                1 => p + 1 - m,
                _ => p + 1 - n,
            };
            f += 10 * (n + 1) + 6 * shift + 4 * (n + 1) + 8;
        }
    }
    3.0 * f as f64
}

/// Flops per particle of `p2m` (`kernels/fmm.cu`): per coefficient `(n, m)` the regular
/// harmonic by `m` complex steps of 8 and `n - m` recurrence steps of 8, and three
/// complex accumulations of 4.
pub fn p2m_flops(p: usize) -> f64 {
    let mut f = 0usize;
    for n in 0..=p {
        for m in 0..=n {
            f += 8 * m + 8 * (n - m) + 12;
        }
    }
    f as f64
}

/// Flops per target of `l2p` (`kernels/fmm.cu`): per harmonic `(j, m)`, `j < p`, the
/// recurrence (8) and up to 5 x 3 complex multiply-adds (8 each, twice for `m > 0`).
pub fn l2p_flops(p: usize) -> f64 {
    let mut f = 0usize;
    for m in 0..p {
        for j in m..p {
            let na = if j + 2 <= p { 5 } else { 2 };
            f += 8 + na * 3 * 8 * if m > 0 { 2 } else { 1 };
        }
    }
    f as f64
}

/// Flops of one pair of `pair()` (`kernels/p2p.cu`) as executed: differences and distance
/// (8), the closed form of K and K'/r with `rsqrtf`, `__expf` and `erff` (about 40), both
/// series in rho^2 (28), the selection and the cross products and sums (30).
pub const P2P_PAIR_FLOPS: f64 = 106.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_merge_by_name_and_the_floor_is_the_larger_bound() {
        let k = KernelTime {
            name: "x".into(),
            launches: 1,
            seconds: 1e-3,
            work: Work::flops(67e9, Unit::Fp32, 4.8e9),
        };
        // 1 ms of flops, 1 ms of bytes
        assert!((k.floor(&H200) - 1e-3).abs() < 1e-12);
        let k2 = KernelTime {
            work: Work::flops(67e9, Unit::Fp32, 9.6e9),
            ..k.clone()
        };
        assert!((k2.floor(&H200) - 2e-3).abs() < 1e-12);
        let p = Profile {
            kernels: vec![k, k2],
        };
        assert!(p.table(&H200).contains("sum"));
        assert_eq!(p.launches(), 2);
    }

    #[test]
    fn translation_flops_grow_as_p_cubed() {
        let r = rotation_flops(16, 1) / rotation_flops(8, 1);
        assert!(r > 6.0 && r < 9.0, "{r}");
        assert!(p2m_flops(10) > 0.0 && l2p_flops(10) > 0.0);
    }
}
