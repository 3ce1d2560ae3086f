//! The one door through which the node reads the clock and draws
//! randomness, so that simulation can replace both.
//!
//! Timers and sockets go through tokio (`tokio::time`, `tokio::net`), which
//! the simulation issue replaces as a whole; wall-clock time and random
//! numbers that reach behaviour come from here.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time in microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_micros() as u64)
        .unwrap_or(0)
}

/// A random 128-bit number (operation ids).
pub fn random_u128() -> u128 {
    rand::random()
}
