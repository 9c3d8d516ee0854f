//! Exact, order-independent sums of `f64` values: a fixed-point accumulator wide enough for every
//! finite double (68 limbs of 32 bits above `2^-1074`), rounded once to the nearest double at the
//! end. The result does not depend on the order of the terms, the number of threads or the
//! number of ranks (bitwise), which makes the sums over ranks of the time stepping (the mean
//! strength removed in a periodic box) and of the diagnostics independent of the decomposition.

use rayon::prelude::*;
use vortex_domain::Comm;

const LIMBS: usize = 68;

/// An exact sum in progress.
#[derive(Clone, Debug)]
pub struct ExactSum {
    limbs: [i64; LIMBS],
    adds: u32,
    /// Sum of the non-finite terms (infinities, NaN), which the fixed point cannot hold.
    special: f64,
}

impl Default for ExactSum {
    fn default() -> Self {
        Self {
            limbs: [0; LIMBS],
            adds: 0,
            special: 0.0,
        }
    }
}

fn pow2(k: i32) -> f64 {
    if k >= -1022 {
        f64::from_bits(((k + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (k + 1074))
    }
}

impl ExactSum {
    pub fn add(&mut self, x: f64) {
        if x == 0.0 {
            return;
        }
        if !x.is_finite() {
            self.special += x;
            return;
        }
        let bits = x.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as usize;
        let frac = bits & ((1u64 << 52) - 1);
        // x = m 2^(e - 1074)
        let (m, e) = if exp == 0 {
            (frac, 0)
        } else {
            (frac | (1u64 << 52), exp - 1)
        };
        let v = (m as u128) << (e % 32);
        let k = e / 32;
        let neg = bits >> 63 == 1;
        for j in 0..3 {
            let c = ((v >> (32 * j)) & 0xffff_ffff) as i64;
            if neg {
                self.limbs[k + j] -= c;
            } else {
                self.limbs[k + j] += c;
            }
        }
        self.adds += 1;
        if self.adds >= 1 << 30 {
            self.normalize();
        }
    }

    /// Carries: every limb but the top one in `[0, 2^32)`.
    fn normalize(&mut self) {
        for k in 0..LIMBS - 1 {
            let c = self.limbs[k] >> 32;
            self.limbs[k] -= c << 32;
            self.limbs[k + 1] += c;
        }
        self.adds = 1;
    }

    pub fn merge(&mut self, other: &ExactSum) {
        self.normalize();
        let mut o = other.clone();
        o.normalize();
        for (a, b) in self.limbs.iter_mut().zip(&o.limbs) {
            *a += b;
        }
        self.special += o.special;
        self.normalize();
    }

    /// The sum rounded to the nearest double (ties to even).
    pub fn value(&self) -> f64 {
        if self.special != 0.0 || self.special.is_nan() {
            return self.special;
        }
        let mut s = self.clone();
        s.normalize();
        let neg = s.limbs[LIMBS - 1] < 0;
        if neg {
            s.limbs.iter_mut().for_each(|x| *x = -*x);
            s.normalize();
        }
        let l = &s.limbs;
        let Some(t) = (0..LIMBS).rev().find(|&k| l[k] != 0) else {
            return 0.0;
        };
        let lo = t.saturating_sub(2);
        let mut w: u128 = 0;
        for k in (lo..=t).rev() {
            w = (w << 32) | l[k] as u128;
        }
        if l[..lo].iter().any(|&x| x != 0) {
            w |= 1; // sticky: below the rounding position (w has more than 64 bits here)
        }
        let r = (w as f64) * pow2(32 * lo as i32 - 1074);
        if neg {
            -r
        } else {
            r
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut s = self.clone();
        s.normalize();
        let mut b: Vec<u8> = s.limbs.iter().flat_map(|x| x.to_le_bytes()).collect();
        b.extend_from_slice(&s.special.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Self {
        let mut s = Self::default();
        for (k, c) in b.chunks_exact(8).take(LIMBS).enumerate() {
            s.limbs[k] = i64::from_le_bytes(c.try_into().unwrap());
        }
        s.special = f64::from_le_bytes(b[8 * LIMBS..8 * LIMBS + 8].try_into().unwrap());
        s.adds = 1;
        s
    }
}

/// Exact sums of the `K` components of `f(i)` for `i < n` (rayon-parallel, bitwise independent
/// of the thread count).
pub fn sums<const K: usize>(n: usize, f: impl Fn(usize) -> [f64; K] + Sync) -> Vec<ExactSum> {
    (0..n.div_ceil(4096))
        .into_par_iter()
        .map(|c| {
            let mut acc: Vec<ExactSum> = (0..K).map(|_| ExactSum::default()).collect();
            for i in c * 4096..((c + 1) * 4096).min(n) {
                for (a, v) in acc.iter_mut().zip(f(i)) {
                    a.add(v);
                }
            }
            acc
        })
        .reduce(
            || (0..K).map(|_| ExactSum::default()).collect(),
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(&b) {
                    x.merge(y);
                }
                a
            },
        )
}

/// The exact sums over all ranks of this rank's `parts`, rounded: bitwise the same on every
/// rank and for every number of ranks. Collective.
pub fn allreduce(comm: &dyn Comm, parts: &[ExactSum]) -> Vec<f64> {
    if comm.size() == 1 {
        return parts.iter().map(ExactSum::value).collect();
    }
    let mine: Vec<u8> = parts.iter().flat_map(|p| p.to_bytes()).collect();
    let all = comm.allgatherv(&mine);
    let w = 8 * (LIMBS + 1);
    (0..parts.len())
        .map(|k| {
            let mut acc = ExactSum::default();
            for b in &all {
                acc.merge(&ExactSum::from_bytes(&b[k * w..(k + 1) * w]));
            }
            acc.value()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_order_independent() {
        let xs = [1e16, 1.0, -1e16, 3.5, 1e-300, -2.25, 7e200, -7e200, 5e-324];
        let mut a = ExactSum::default();
        xs.iter().for_each(|&x| a.add(x));
        let mut b = ExactSum::default();
        xs.iter().rev().for_each(|&x| b.add(x));
        assert_eq!(a.value().to_bits(), b.value().to_bits());
        assert_eq!(a.value(), 2.25); // 1 + 3.5 - 2.25 (+ 1e-300 + 5e-324, below half an ulp)
                                     // rounding: 2^53 + 1 + 2^-60 rounds up to 2^53 + 2
        let mut c = ExactSum::default();
        for x in [9007199254740992.0, 1.0, 2f64.powi(-60)] {
            c.add(x);
        }
        assert_eq!(c.value(), 9007199254740994.0);
        let mut d = ExactSum::default();
        d.add(-0.1);
        d.add(-0.2);
        assert_eq!(d.value(), -0.30000000000000004);
        // merged parts equal the whole; random terms against a compensated reference
        let v: Vec<f64> = (0..10000)
            .map(|i| ((i * 7919) % 1000) as f64 * 1.1e-3 - 0.5)
            .collect();
        let whole = sums(v.len(), |i| [v[i]]);
        let mut p = sums(5000, |i| [v[i]]);
        p[0].merge(&sums(5000, |i| [v[5000 + i]])[0]);
        assert_eq!(whole[0].value().to_bits(), p[0].value().to_bits());
        let naive: f64 = v.iter().sum();
        assert!((whole[0].value() - naive).abs() < 1e-10);
    }
}
