//! `lode bench --log-slower-than`: one line on standard error for each
//! request at or over a latency, with the wall-clock moment it began, so a
//! tail can be set beside what else happened then (a member's RocksDB
//! `LOG`, a packet capture, `perf record -k CLOCK_REALTIME`). The lines
//! are bounded: a threshold below the median would otherwise print as
//! fast as the bench runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most slow requests printed in one run; the rest are counted.
pub const BENCH_SLOW_REQUESTS_PRINTED_MAX: u64 = 10_000;

/// How one request ended, as a slow line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    VersionConflict,
    Error,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::VersionConflict => "version_conflict",
            Outcome::Error => "error",
        }
    }
}

/// The threshold and what the clients found over it, shared by them all.
#[derive(Debug)]
pub struct SlowLog {
    threshold_micros: u64,
    seen: AtomicU64,
}

impl SlowLog {
    pub fn new(threshold: Duration) -> Self {
        Self {
            threshold_micros: u64::try_from(threshold.as_micros()).unwrap_or(u64::MAX),
            seen: AtomicU64::new(0),
        }
    }

    /// Prints the request if it took at least the threshold (and fewer
    /// than the most printed came before it).
    pub fn record(&self, began: SystemTime, micros: u64, worker: usize, key: &str, outcome: Outcome) {
        if micros < self.threshold_micros {
            return;
        }
        if self.seen.fetch_add(1, Ordering::Relaxed) >= BENCH_SLOW_REQUESTS_PRINTED_MAX {
            return;
        }
        // A clock set before 1970 prints 0: the latency is still right.
        let at = began.duration_since(UNIX_EPOCH).unwrap_or_default();
        eprintln!(
            "slow: at={}.{:06} latency_ms={:.3} worker={worker} key={key} outcome={}",
            at.as_secs(),
            at.subsec_micros(),
            micros as f64 / 1000.0,
            outcome.name()
        );
    }

    /// Requests at or over the threshold, printed or not.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// The closing line when more were slow than were printed.
    pub fn report_unprinted(&self) {
        let seen = self.seen();
        if seen > BENCH_SLOW_REQUESTS_PRINTED_MAX {
            eprintln!(
                "slow: {} more requests over the threshold not printed \
                 (bench_slow_requests_printed_max = {BENCH_SLOW_REQUESTS_PRINTED_MAX})",
                seen - BENCH_SLOW_REQUESTS_PRINTED_MAX
            );
        }
    }
}
