//! The trace digest of a run: FNV-1a over the run's observable record, so
//! that two runs of one seed can be compared by one number. FNV, not std's
//! hasher, because the digest must not depend on the process.

use std::fmt::Debug;

pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv {
    pub fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// Feeds the value's debug rendering, which covers every field.
    pub fn write_debug(&mut self, value: &impl Debug) {
        self.write(format!("{value:?}").as_bytes());
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}
