//! A member's wall clock: the environment's clock plus the member's offset.
//!
//! Production members run with offset zero. The deterministic simulation
//! gives each member its own offset, because real members' clocks disagree
//! by whatever NTP leaves, and everything Lode derives from time (command
//! stamps, expiry, leases) must stay safe when they do.

use lode_client::facade;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberClock {
    offset_micros: i64,
}

impl MemberClock {
    pub fn new(offset_micros: i64) -> Self {
        Self { offset_micros }
    }

    /// This member's idea of the time, in microseconds since the Unix epoch.
    pub fn now_micros(&self) -> u64 {
        facade::now_micros().saturating_add_signed(self.offset_micros)
    }
}
