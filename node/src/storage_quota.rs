//! A member's storage quota (`--storage-bytes-max`): as leader it refuses
//! a write that would grow the state past the quota (`quota_exceeded`,
//! naming the quota and the size), while removals, releases, claims and
//! sweeps go on. There is no alarm to disarm: the size is read again every
//! second, and once it is back under the quota writes are accepted again
//! by themselves. Between two readings the size counts every write let
//! through since the last one, so a fast writer cannot overshoot the quota
//! by a second's worth of writes.
//!
//! The size is the state's but for its change log, which
//! `--change-log-bytes-max` bounds on its own: a delete's events carry
//! the deleted values, and they are trimmed only when a later entry
//! records changes, which a full member would never get to.
//!
//! Deleted data leaves RocksDB only when compaction drops it, so a member
//! near its quota (90%) compacts its state online, as often as its last
//! compaction allows (at least 5 s apart, and ten times as long as the
//! last one took), so space reclaimed by deletes shows without anyone
//! asking. Reads and writes never wait for it.
//!
//! The data volume has a reserve too (`--disk-free-bytes-min`): as leader
//! a member refuses a write that may grow the state once the volume's free
//! space, read before the member serves and every second after, less three
//! times the writes let through since (the log, the state's write-ahead
//! log, a table file), is under it (`disk_full`). RocksDB then never
//! meets a full disk on the write path, where a failed write stops Raft;
//! the followers hold the same data. Like the quota, it needs no reset:
//! writes resume once the space is back.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lode_client::LodeError;
use lode_raft_store::command::Operation;
use lode_raft_store::SelectedEngine;

/// The quota when none is given.
pub const STORAGE_BYTES_MAX_DEFAULT: u64 = 8 << 30;
/// The data volume's reserve when none is given: room for RocksDB's
/// write-ahead logs (`WAL_BYTES_MAX` per instance, two instances) and the
/// output of a compaction.
pub const DISK_FREE_BYTES_MIN_DEFAULT: u64 = 256 << 20;
const _: () = assert!(DISK_FREE_BYTES_MIN_DEFAULT >= 2 * lode_raft_store::engine::rocks::WAL_BYTES_MAX);
/// What a write may take on the volume per byte of its operations before
/// the next reading: the log entry, the state's write-ahead log, a table.
const DISK_BYTES_PER_WRITE_BYTE: u64 = 3;
/// How often the state's size is read.
const USAGE_INTERVAL: Duration = Duration::from_secs(1);
/// The share of the quota (percent) past which the member compacts.
const COMPACT_AT_PERCENT: u64 = 90;
/// The shortest time between two compactions.
const COMPACT_INTERVAL_MIN: Duration = Duration::from_secs(5);

/// The free space a member keeps on its data volume.
#[derive(Clone, Debug)]
pub struct DiskReserve {
    /// The member, named in refusals.
    pub member: u64,
    pub data_dir: PathBuf,
    pub reserve_bytes: u64,
}

/// The quota and the state's size as last read.
pub struct StorageQuota {
    engine: Arc<SelectedEngine>,
    quota_bytes: u64,
    disk: DiskReserve,
    /// The volume's free space as last read (`u64::MAX` for a member in
    /// memory, and until a reading of the volume succeeds).
    free_bytes: AtomicU64,
    used_bytes: AtomicU64,
    /// Bytes of the writes let through since `used_bytes` was read.
    admitted_bytes: AtomicU64,
    compacting: Arc<AtomicBool>,
}

impl StorageQuota {
    /// Takes the first reading before returning, so that a member started
    /// on a volume already under its reserve, or with a state already over
    /// its quota, refuses its first write rather than a second of writes.
    pub fn new(engine: Arc<SelectedEngine>, quota_bytes: u64, disk: DiskReserve) -> Self {
        let quota = Self {
            engine,
            quota_bytes,
            disk,
            free_bytes: AtomicU64::new(u64::MAX),
            used_bytes: AtomicU64::new(0),
            admitted_bytes: AtomicU64::new(0),
            compacting: Arc::new(AtomicBool::new(false)),
        };
        quota.take_reading();
        quota
    }

    pub fn quota_bytes(&self) -> u64 {
        self.quota_bytes
    }

    /// The state's size as last read (0 for a member in memory), plus
    /// the writes let through since.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
            .load(Ordering::Relaxed)
            .saturating_add(self.admitted_bytes.load(Ordering::Relaxed))
    }

    /// Refuses `operations` when one of them may grow the state and the
    /// state plus the write would pass the quota, or the volume's free
    /// space is under its reserve.
    pub fn check(&self, operations: &[Operation]) -> Result<(), LodeError> {
        if !operations.iter().any(Operation::grows_state) {
            return Ok(());
        }
        let used_bytes = self.used_bytes();
        let write_bytes = lode_types::write_size_bytes(operations) as u64;
        if used_bytes.saturating_add(write_bytes) > self.quota_bytes {
            return Err(LodeError::QuotaExceeded {
                quota_bytes: self.quota_bytes,
                used_bytes,
            });
        }
        let taken_bytes = self
            .admitted_bytes
            .load(Ordering::Relaxed)
            .saturating_add(write_bytes)
            .saturating_mul(DISK_BYTES_PER_WRITE_BYTE);
        let free_bytes = self.free_bytes.load(Ordering::Relaxed).saturating_sub(taken_bytes);
        if free_bytes < self.disk.reserve_bytes {
            return Err(LodeError::DiskFull {
                member: self.disk.member,
                free_bytes,
                reserve_bytes: self.disk.reserve_bytes,
            });
        }
        self.admitted_bytes.fetch_add(write_bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Reads the state's size every second, and compacts when it nears
    /// the quota; runs until the member stops. A member in memory (the
    /// simulation) has no size to read and never stops a write.
    pub async fn watch(self: Arc<Self>) {
        if self.engine.as_rocks().is_none() {
            return;
        }
        let next_compaction = Arc::new(std::sync::Mutex::new(tokio::time::Instant::now()));
        loop {
            tokio::time::sleep(USAGE_INTERVAL).await;
            let quota = self.clone();
            if !matches!(
                tokio::task::spawn_blocking(move || quota.take_reading()).await,
                Ok(true)
            ) {
                return;
            }
            let near = self.used_bytes() >= self.quota_bytes / 100 * COMPACT_AT_PERCENT;
            let due = *lock(&next_compaction) <= tokio::time::Instant::now();
            if near && due && !self.compacting.swap(true, Ordering::SeqCst) {
                tokio::spawn(self.clone().compact(next_compaction.clone()));
            }
        }
    }

    /// Reads the state's size and the volume's free space, and counts the
    /// writes let through afresh from here. False for a member in memory,
    /// which has neither to read.
    fn take_reading(&self) -> bool {
        let Some(rocks) = self.engine.as_rocks() else {
            return false;
        };
        match rocks.properties() {
            Ok(properties) => {
                self.used_bytes.store(properties.live_bytes, Ordering::Relaxed);
                self.store_free_bytes(rustix::fs::statvfs(&self.disk.data_dir));
                self.admitted_bytes.store(0, Ordering::Relaxed);
            }
            Err(error) => tracing::warn!(%error, "reading the state's size failed"),
        }
        true
    }

    /// Keeps the volume's free space as read; a volume that cannot be read
    /// keeps the last reading (and is warned about).
    fn store_free_bytes(&self, free: rustix::io::Result<rustix::fs::StatVfs>) {
        match free {
            Ok(volume) => {
                let free_bytes = volume.f_bavail.saturating_mul(volume.f_frsize);
                self.free_bytes.store(free_bytes, Ordering::Relaxed);
            }
            Err(error) => {
                tracing::warn!(%error, data_dir = %self.disk.data_dir.display(), "reading the data volume's free space failed")
            }
        }
    }

    /// Compacts the state beside the size readings, then sets when the
    /// next compaction may begin.
    async fn compact(self: Arc<Self>, next_compaction: Arc<std::sync::Mutex<tokio::time::Instant>>) {
        tracing::info!(
            used_bytes = self.used_bytes(),
            quota_bytes = self.quota_bytes,
            "near the storage quota; compacting to reclaim deleted data"
        );
        let began = tokio::time::Instant::now();
        let engine = self.engine.clone();
        let compacted = tokio::task::spawn_blocking(move || engine.as_rocks().map(|rocks| rocks.compact())).await;
        if let Ok(Some(Err(error))) = compacted {
            tracing::warn!(%error, "compacting the state failed");
        }
        let took = began.elapsed();
        *lock(&next_compaction) = tokio::time::Instant::now() + COMPACT_INTERVAL_MIN.max(took * 10);
        self.compacting.store(false, Ordering::SeqCst);
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves a whole instant behind.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
