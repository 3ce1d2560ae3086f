//! The bytes appended to the Raft log since its last purge, and a signal
//! once they pass a limit.
//!
//! openraft 0.9 takes a snapshot, and purges the log behind it, by the
//! number of entries applied since the last one. An entry holds up to
//! `PROPOSAL_BYTES_MAX` of commands, so a count alone bounds the log's
//! disk only for small values: 10,000 entries of 64 KiB values from 64
//! clients (14.4 commands an entry) are about 9.4 GB. The node asks for a
//! snapshot whenever the log passes its byte limit
//! ([`LogBytes::over_limit`]).
//!
//! The count starts at zero when the member starts and when a purge
//! succeeds. It is close, not exact: a purge keeps the entries past its
//! snapshot, which the count then leaves out, and a truncation's entries
//! are not taken off, which brings the next snapshot a little early.
//! After a restart the log may hold up to one limit more than it counts.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// The bytes of one member's log since its last purge, against a limit.
#[derive(Debug)]
pub struct LogBytes {
    since_purge: AtomicU64,
    max: u64,
    /// Holds a permit while the count is past `max`; an append past it
    /// adds the permit (or wakes the one waiter) again.
    over: Notify,
}

impl LogBytes {
    /// A count that signals once the log since its last purge reaches `max`
    /// bytes (at 0, always; the CLI refuses less than 1 MiB).
    pub fn new(max: u64) -> Self {
        Self {
            since_purge: AtomicU64::new(0),
            max,
            over: Notify::new(),
        }
    }

    /// The limit this count signals at.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Bytes appended since the last purge (or the member's start).
    pub fn since_purge(&self) -> u64 {
        self.since_purge.load(Ordering::Relaxed)
    }

    /// Counts an append's encoded entries.
    pub(crate) fn appended(&self, bytes: u64) {
        let total = self
            .since_purge
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        if total >= self.max {
            self.over.notify_one();
        }
    }

    /// The log before a snapshot is gone: counting starts again.
    pub(crate) fn purged(&self) {
        self.since_purge.store(0, Ordering::Relaxed);
    }

    /// Returns once the log since its last purge has reached the limit:
    /// at once if it has, else at the append that takes it there.
    pub async fn over_limit(&self) {
        loop {
            let notified = self.over.notified();
            if self.since_purge() >= self.max {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `over_limit` returns at its first poll.
    async fn over_now(bytes: &LogBytes) -> bool {
        // `timeout` polls the future once before it looks at the clock.
        tokio::time::timeout(std::time::Duration::ZERO, bytes.over_limit())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn signals_at_the_limit_and_again_after_a_purge() {
        let bytes = LogBytes::new(100);
        bytes.appended(60);
        assert!(!over_now(&bytes).await, "60 of 100 bytes is not over the limit");
        bytes.appended(40);
        assert!(over_now(&bytes).await);
        assert!(over_now(&bytes).await, "it stays over until a purge");
        bytes.purged();
        assert_eq!(bytes.since_purge(), 0);
        assert!(!over_now(&bytes).await, "a purge starts the count again");
    }

    #[tokio::test]
    async fn a_waiter_wakes_at_the_append_that_passes_the_limit() {
        let bytes = std::sync::Arc::new(LogBytes::new(100));
        let waiter = tokio::spawn({
            let bytes = bytes.clone();
            async move { bytes.over_limit().await }
        });
        tokio::task::yield_now().await;
        bytes.appended(99);
        bytes.appended(2);
        waiter.await.expect("the waiter returns");
        assert_eq!(bytes.since_purge(), 101);
    }
}
