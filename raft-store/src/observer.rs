//! What the storage layer reports of its own work, for a member's metrics:
//! log appends (one batch each) and the leader's background syncs, entries applied, snapshots built,
//! packed and installed. The node implements it with Prometheus histograms; the
//! simulation sets none, so nothing is timed there.

use std::sync::Arc;
use std::time::Duration;

/// Receives the storage layer's timings; every method defaults to nothing.
pub trait StorageObserver: Send + Sync + 'static {
    /// `entries` log entries were appended in `duration`: synced on a
    /// follower, only written for a leader's own.
    fn log_appended(&self, _entries: usize, _duration: Duration) {}
    /// A background sync of a leader's own appends took `duration`.
    fn log_synced(&self, _duration: Duration) {}
    /// One log entry of `commands` commands was applied in `duration`.
    fn entry_applied(&self, _commands: usize, _duration: Duration) {}
    /// A snapshot (a record of the synced state) was built in `duration`.
    fn snapshot_built(&self, _duration: Duration) {}
    /// An image of `bytes` was packed to send to a follower.
    fn image_packed(&self, _bytes: u64) {}
    /// A received snapshot was checked and installed in `duration`.
    fn snapshot_installed(&self, _duration: Duration) {}
}

/// An observer, when one is set.
pub type Observer = Option<Arc<dyn StorageObserver>>;
