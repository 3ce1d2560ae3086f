//! The one door through which Lode reads the wall clock and draws random
//! numbers, so that a deterministic simulation can replace both.
//!
//! Timers and sockets go through tokio (`tokio::time`, `tokio::net`), which a
//! simulation replaces as a whole. Wall-clock time (command stamps, TTLs,
//! expiry checks on reads) and randomness (operation ids) come from here: a
//! process uses the system's unless it installs another environment first.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of time and randomness.
pub trait Environment: Send + Sync + 'static {
    /// Wall-clock time in microseconds since the Unix epoch.
    fn now_micros(&self) -> u64;
    /// A uniformly random 128-bit number.
    fn random_u128(&self) -> u128;
}

/// The real clock and the thread RNG.
#[derive(Debug, Default)]
pub struct SystemEnvironment;

impl Environment for SystemEnvironment {
    fn now_micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_micros() as u64)
            .unwrap_or(0)
    }

    fn random_u128(&self) -> u128 {
        rand::random()
    }
}

static ENVIRONMENT: OnceLock<Box<dyn Environment>> = OnceLock::new();

/// Installs the process's environment. Only the first call wins, and only
/// before anything read the clock; returns false when it came too late.
pub fn install(environment: Box<dyn Environment>) -> bool {
    ENVIRONMENT.set(environment).is_ok()
}

fn environment() -> &'static dyn Environment {
    ENVIRONMENT.get_or_init(|| Box::new(SystemEnvironment)).as_ref()
}

/// Wall-clock time in microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    environment().now_micros()
}

/// A random 128-bit number.
pub fn random_u128() -> u128 {
    environment().random_u128()
}
