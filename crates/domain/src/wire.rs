//! Little-endian byte encoding of the messages (no dependency, no padding).

use vortex_fmm::expansions::Complex64;

#[derive(Default, Debug, Clone)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f64(&mut self, v: f64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn vec3(&mut self, v: [f64; 3]) {
        v.iter().for_each(|&x| self.f64(x));
    }
    pub fn complex(&mut self, v: &[Complex64]) {
        for c in v {
            self.f64(c.re);
            self.f64(c.im);
        }
    }
    pub fn f64s(&mut self, v: &[f64]) {
        v.iter().for_each(|&x| self.f64(x));
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// Writes `words` little-endian into `out` (fixed-size records of 64-bit words).
#[inline]
pub fn put_words(out: &mut [u8], words: &[u64]) {
    for (o, w) in out.chunks_exact_mut(8).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
}

/// Word `k` of a record written by [`put_words`].
#[inline]
pub fn word(rec: &[u8], k: usize) -> u64 {
    u64::from_le_bytes(rec[8 * k..8 * k + 8].try_into().unwrap())
}

pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    pub fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }
    pub fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    pub fn f64(&mut self) -> f64 {
        f64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    pub fn vec3(&mut self) -> [f64; 3] {
        [self.f64(), self.f64(), self.f64()]
    }
    pub fn f64s_into(&mut self, out: &mut [f64]) {
        for x in out.iter_mut() {
            *x = self.f64();
        }
    }
    pub fn complex_into(&mut self, out: &mut [Complex64]) {
        for c in out.iter_mut() {
            c.re = self.f64();
            c.im = self.f64();
        }
    }
}
