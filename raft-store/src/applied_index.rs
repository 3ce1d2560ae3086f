//! A replica's applied index and the tasks waiting for it to reach a
//! position (linearizable reads, position barriers, change-feed polls).
//!
//! Not a `tokio::sync::watch`: a watch spreads its waiters over shards
//! picked at random, so waiters woken by one apply run in a random order,
//! and the deterministic simulation would not replay. Waiters here are woken
//! in the order they began waiting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Clones share the index.
#[derive(Clone, Debug, Default)]
pub struct AppliedIndex {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    index: AtomicU64,
    advanced: Notify,
}

impl AppliedIndex {
    pub fn new(index: u64) -> Self {
        let applied = Self::default();
        applied.inner.index.store(index, Ordering::Release);
        applied
    }

    pub fn get(&self) -> u64 {
        self.inner.index.load(Ordering::Acquire)
    }

    /// Records a new applied index (a restored snapshot may move it back)
    /// and wakes every waiter to look again.
    pub fn set(&self, index: u64) {
        self.inner.index.store(index, Ordering::Release);
        self.inner.advanced.notify_waiters();
    }

    /// Waits until the index is at least `index`; returns the index seen.
    pub async fn wait_for(&self, index: u64) -> u64 {
        loop {
            let advanced = self.inner.advanced.notified();
            tokio::pin!(advanced);
            // Registered before the check, so a `set` between the check and
            // the wait is not missed.
            advanced.as_mut().enable();
            let current = self.get();
            if current >= index {
                return current;
            }
            advanced.await;
        }
    }
}
