//! openraft's log storage over an [`Engine`].
//!
//! Durability rules, each of which was a real bug elsewhere:
//! - `append` writes all entries in one batch and syncs it before calling
//!   the flush callback, except a leader's append of its own entries once
//!   [`LogStore::syncing_own_appends_behind`] is set: that one is synced
//!   by a background task, and [`LogDurability`] holds apply and the
//!   commit index followers hear until it is;
//! - vote writes are synced;
//! - `last_purged` is written in the same batch as the purge's range delete;
//! - the commit id is written with the next append's batch, not on its own.
//!
//! The newest entries are also held in memory ([`RecentEntries`]), so the
//! reads openraft makes right after an append skip the engine.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogId, StorageError, Vote};

use crate::engine::{run_blocking, Durability, Engine, Space, WriteBatch};
use crate::error::{decode, encode, read_error, write_error, EngineError};
use crate::injected_bugs::{self, InjectedBug};
use crate::keys::{self, meta};
use crate::log_bytes::LogBytes;
use crate::log_durability::LogDurability;
use crate::recent_entries::RecentEntries;
use crate::state_machine::SnapshotOnDisk;
use crate::type_config::{NodeId, TypeConfig};

/// How often a purge looks whether the snapshot it waits for is on disk.
const PURGE_POLL_INTERVAL: Duration = Duration::from_millis(5);

/// Most log entries one read returns; openraft asks again for the rest.
const LOG_READ_ENTRIES_MAX: usize = 4096;

/// The Raft log and vote of one node. Clones share the engine.
pub struct LogStore<E: Engine> {
    engine: Arc<E>,
    recent: RecentEntries,
    /// When set, purges wait (this long at most) for the snapshot on disk
    /// to cover them, and stop at it.
    purge_limit: Option<(SnapshotOnDisk, Duration)>,
    observer: crate::observer::Observer,
    durability: Arc<LogDurability>,
    background_sync: Option<Arc<BackgroundSync>>,
    /// The newest commit id openraft saved that is not written yet.
    committed_unwritten: Arc<Mutex<Option<Option<LogId<NodeId>>>>>,
    /// When set, counts the bytes appended since the last purge.
    log_bytes: Option<Arc<LogBytes>>,
}

/// What a leader's unsynced appends need: whose entries they are, and the
/// task that syncs them.
struct BackgroundSync {
    /// This member's id: its appends are its own entries while its saved
    /// vote is a committed one for itself.
    node_id: NodeId,
    /// The saved vote, when it makes this member the leader.
    leading: Mutex<Option<Vote<NodeId>>>,
    /// Wakes the sync task; it is started by the first unsynced append
    /// (inside the runtime) and ends when the last log store handle goes.
    wake: OnceLock<tokio::sync::mpsc::Sender<()>>,
}

impl BackgroundSync {
    /// Whether `vote` makes this member the leader.
    fn leads_by(&self, vote: &Vote<NodeId>) -> bool {
        vote.is_committed() && vote.leader_id().node_id == self.node_id
    }
}

impl<E: Engine> Clone for LogStore<E> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
            recent: self.recent.clone(),
            purge_limit: self.purge_limit.clone(),
            observer: self.observer.clone(),
            durability: self.durability.clone(),
            background_sync: self.background_sync.clone(),
            committed_unwritten: self.committed_unwritten.clone(),
            log_bytes: self.log_bytes.clone(),
        }
    }
}

impl<E: Engine> Debug for LogStore<E> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("LogStore")
    }
}

impl<E: Engine> LogStore<E> {
    pub fn new(engine: Arc<E>) -> Self {
        Self {
            engine,
            recent: RecentEntries::default(),
            purge_limit: None,
            observer: None,
            durability: Arc::default(),
            background_sync: None,
            committed_unwritten: Arc::default(),
            log_bytes: None,
        }
    }

    /// Counts the bytes appended since the last purge into `log_bytes`, so
    /// the node can ask for a snapshot by the log's size.
    pub fn counting_bytes_into(mut self, log_bytes: Arc<LogBytes>) -> Self {
        self.log_bytes = Some(log_bytes);
        self
    }

    /// Lets member `node_id`, while it leads, report its appends of its own
    /// entries flushed once written, and sync them in the background; see
    /// [`crate::log_durability`]. Apply and the network must then consult
    /// [`Self::durability`]. Without it every append is synced first.
    ///
    /// Whatever the log held when it was opened counts as on disk: RocksDB
    /// writes what it recovers from its write-ahead log to synced tables
    /// before it opens.
    pub fn syncing_own_appends_behind(mut self, node_id: NodeId) -> Self {
        self.background_sync = Some(Arc::new(BackgroundSync {
            node_id,
            leading: Mutex::new(None),
            wake: OnceLock::new(),
        }));
        self
    }

    /// Which entries are on disk, for apply and for the commit index sent
    /// to followers.
    pub fn durability(&self) -> Arc<LogDurability> {
        self.durability.clone()
    }

    /// Whether `entries` may be written without a sync: they are this
    /// member's own, made while its saved vote makes it the leader.
    fn own_entries(&self, first: &Entry<TypeConfig>) -> bool {
        let Some(background) = &self.background_sync else {
            return false;
        };
        let leading = background
            .leading
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        leading.is_some_and(|vote| first.log_id.leader_id == *vote.leader_id())
    }

    /// Wakes the task that syncs unsynced appends, starting it first if
    /// this is the first. It holds the engine only while it syncs, so a
    /// member that stops closes its engine as before.
    fn wake_background_sync(&self) {
        let Some(background) = &self.background_sync else {
            return;
        };
        let wake = background.wake.get_or_init(|| {
            let (wake, woken) = tokio::sync::mpsc::channel(1);
            tokio::spawn(sync_in_background(
                Arc::downgrade(&self.engine),
                self.durability.clone(),
                self.observer.clone(),
                woken,
            ));
            wake
        });
        // Full means a wake-up is pending, which syncs this append too.
        let _ = wake.try_send(());
    }

    /// Reports every append's entries and time to `observer`.
    pub fn observed_by(mut self, observer: std::sync::Arc<dyn crate::observer::StorageObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Purges no entry the snapshot on disk does not cover, whatever
    /// openraft asks: openraft 0.9 purges right after it hands a snapshot
    /// to the state machine to install, without waiting for the install to
    /// be durable (see [`SnapshotOnDisk`]). A purge waits up to `wait` for
    /// the snapshot to reach the disk. It must not simply be skipped: after
    /// an install the log has a gap below the snapshot, which only a purge
    /// explains.
    pub fn purging_only_behind(mut self, snapshot: SnapshotOnDisk, wait: Duration) -> Self {
        self.purge_limit = Some((snapshot, wait));
        self
    }

    fn read_meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, EngineError> {
        match self.engine.get(Space::RaftMeta, key)? {
            Some(bytes) => Ok(Some(decode("raft meta", &bytes)?)),
            None => Ok(None),
        }
    }

    /// A synced write, off the async runtime's threads when it blocks on disk.
    async fn write_synced(&self, batch: WriteBatch) -> Result<(), EngineError> {
        run_blocking(&self.engine, move |engine| engine.write(batch, Durability::Synced)).await?;
        self.durability.all_synced();
        Ok(())
    }

    /// The id of the cluster this member belongs to, once it was stored.
    pub fn cluster_id(&self) -> Result<Option<u128>, EngineError> {
        self.read_meta(meta::CLUSTER_ID)
    }

    /// Stores the cluster id (synced): from then on the member answers
    /// only that cluster's peers.
    pub async fn save_cluster_id(&self, cluster_id: u128) -> Result<(), EngineError> {
        self.write_synced(Self::meta_batch(meta::CLUSTER_ID, &cluster_id)?)
            .await
    }

    /// Quorum-loss recovery only (`recovery.rs`): appends `entry` after the
    /// last entry, with `vote` and the new cluster id, in one synced batch.
    pub(crate) async fn write_forced(
        &self,
        entry: &Entry<TypeConfig>,
        vote: &Vote<NodeId>,
        cluster_id: u128,
    ) -> Result<(), EngineError> {
        self.recent.forget();
        let mut batch = WriteBatch::default();
        batch.put(
            Space::Log,
            keys::log_key(entry.log_id.index).to_vec(),
            encode("log entry", entry)?,
        );
        put_meta(&mut batch, meta::VOTE, vote)?;
        put_meta(&mut batch, meta::CLUSTER_ID, &cluster_id)?;
        self.write_synced(batch).await
    }

    fn committed_unwritten(&self) -> std::sync::MutexGuard<'_, Option<Option<LogId<NodeId>>>> {
        // Every critical section is one assignment or take.
        self.committed_unwritten
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn meta_batch<T: serde::Serialize>(key: &[u8], value: &T) -> Result<WriteBatch, EngineError> {
        let mut batch = WriteBatch::default();
        put_meta(&mut batch, key, value)?;
        Ok(batch)
    }
}

/// Adds the Raft metadata `key`, set to `value`, to `batch`.
fn put_meta<T: serde::Serialize>(batch: &mut WriteBatch, key: &[u8], value: &T) -> Result<(), EngineError> {
    batch.put(Space::RaftMeta, key.to_vec(), encode("raft meta", value)?);
    Ok(())
}

/// Syncs the log each time it is woken, for the unsynced appends written
/// before; ends when every log store handle is gone, or at the first
/// failure, after which nothing more is known to reach the disk and apply
/// fails (the member stops).
async fn sync_in_background<E: Engine>(
    engine: Weak<E>,
    durability: Arc<LogDurability>,
    observer: crate::observer::Observer,
    mut woken: tokio::sync::mpsc::Receiver<()>,
) {
    while woken.recv().await.is_some() {
        let Some(engine) = engine.upgrade() else {
            return;
        };
        // Zero on a real disk: only a simulation sleeps here.
        let delay = engine.modelled_sync_delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let Some(newest) = durability.newest_unsynced() else {
            continue;
        };
        let began = observer.as_ref().map(|_| tokio::time::Instant::now());
        let synced = run_blocking(&engine, |engine| engine.sync_writes()).await;
        drop(engine);
        match synced {
            Ok(()) => {
                durability.synced_up_to(newest);
                if let (Some(observer), Some(began)) = (&observer, began) {
                    observer.log_synced(began.elapsed());
                }
            }
            Err(error) => {
                // Not logged here: apply fails with it, and the member
                // stops and says why.
                durability.sync_failed(error.to_string());
                return;
            }
        }
    }
}

fn index_bounds(range: &impl RangeBounds<u64>) -> Option<(u64, Option<u64>)> {
    let start = match range.start_bound() {
        Bound::Included(start) => *start,
        Bound::Excluded(start) => start.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(end) => end.checked_add(1),
        Bound::Excluded(end) => Some(*end),
        Bound::Unbounded => None,
    };
    Some((start, end))
}

impl<E: Engine> RaftLogReader<TypeConfig> for LogStore<E> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let Some((start, end)) = index_bounds(&range) else {
            return Ok(Vec::new());
        };
        if let Some(entries) = self.recent.read(start, end, LOG_READ_ENTRIES_MAX) {
            return Ok(entries);
        }
        let end_key = end.map(keys::log_key);
        let pairs = self
            .engine
            .scan(
                Space::Log,
                &keys::log_key(start),
                end_key.as_ref().map(|key| key.as_slice()),
                LOG_READ_ENTRIES_MAX,
            )
            .map_err(read_error)?;
        let mut entries = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            let entry: Entry<TypeConfig> = decode("log entry", &value).map_err(read_error)?;
            // Checked after reading back: the key and the entry must agree,
            // or the log is not what this node wrote.
            if keys::log_index(&key) != Some(entry.log_id.index) {
                return Err(read_error(EngineError::corrupt(
                    "log entry",
                    format!("key {key:?} holds {}", entry.log_id),
                )));
            }
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl<E: Engine> RaftLogStorage<TypeConfig> for LogStore<E> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let last_purged_log_id: Option<LogId<NodeId>> = self.read_meta(meta::LAST_PURGED).map_err(read_error)?;
        let last_log_id = match self.engine.last(Space::Log).map_err(read_error)? {
            Some((_, value)) => {
                let entry: Entry<TypeConfig> = decode("log entry", &value).map_err(read_error)?;
                Some(*entry.get_log_id())
            }
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let batch = Self::meta_batch(meta::VOTE, vote).map_err(write_error)?;
        self.write_synced(batch).await.map_err(write_error)?;
        if let Some(background) = &self.background_sync {
            let leads = background.leads_by(vote);
            *background
                .leading
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = leads.then_some(*vote);
        }
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        let vote: Option<Vote<NodeId>> = self.read_meta(meta::VOTE).map_err(read_error)?;
        // openraft 0.9 resumes leading at once when it starts with a
        // committed vote for itself. A leader whose unsynced appends a
        // crash took, but a follower holds, would then write other
        // entries under the same log ids, and the two logs would agree on
        // ids and differ in content (the simulation's convergence checker
        // caught it). Read as not yet committed, the vote makes it win an
        // election in a new term first.
        let resumes_leading = |vote: &Vote<NodeId>| {
            !injected_bugs::enabled(InjectedBug::ResumeLeadingAfterRestart)
                && self
                    .background_sync
                    .as_ref()
                    .is_some_and(|background| background.leads_by(vote))
        };
        Ok(vote.map(|vote| {
            if resumes_leading(&vote) {
                Vote::new(vote.leader_id().term, vote.leader_id().node_id)
            } else {
                vote
            }
        }))
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError<NodeId>> {
        // Kept until the next append writes it in its batch. openraft
        // reports every commit, and a write of its own was a system call
        // and a memtable insert on every member, before apply, for each
        // one. The stored id only lets a restarted member re-apply before
        // it hears from a leader, so an older one (a crash, an idle log)
        // costs nothing but that: openraft starts from the state machine's
        // applied id when the stored commit id is behind it.
        *self.committed_unwritten() = Some(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        if let Some(committed) = *self.committed_unwritten() {
            return Ok(committed);
        }
        Ok(self
            .read_meta::<Option<LogId<NodeId>>>(meta::COMMITTED)
            .map_err(read_error)?
            .flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let began = self.observer.as_ref().map(|_| tokio::time::Instant::now());
        let mut batch = WriteBatch::default();
        let mut previous_index: Option<u64> = None;
        let mut appended = Vec::new();
        let mut own_entries = false;
        for entry in entries {
            // openraft hands over a contiguous run; a gap would leave a
            // hole in the log that a later read takes for a purge.
            debug_assert!(
                previous_index.is_none_or(|previous| entry.log_id.index == previous + 1),
                "appending log index {} after {previous_index:?}",
                entry.log_id.index
            );
            if previous_index.is_none() {
                own_entries = self.own_entries(&entry);
            }
            previous_index = Some(entry.log_id.index);
            let bytes = encode("log entry", &entry).map_err(write_error)?;
            let length = bytes.len();
            batch.put(Space::Log, keys::log_key(entry.log_id.index).to_vec(), bytes);
            appended.push((entry, length));
        }
        let Some(first_index) = appended.first().map(|(entry, _)| entry.log_id.index) else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        if let Some(committed) = self.committed_unwritten().take() {
            put_meta(&mut batch, meta::COMMITTED, &committed).map_err(write_error)?;
        }
        // One batch. A follower's is synced before the callback: openraft
        // counts the entries as persisted (and may commit them) as soon as
        // it is called. A leader's own is not, and is synced in the
        // background while it replicates them (`log_durability.rs`).
        //
        // Written on the calling task, not on a blocking thread: openraft
        // 0.9's core awaits this append before it does anything else, so
        // no core work waits longer, and the two thread handoffs a blocking
        // thread costs were a tenth of a single client's put (p50 1.22 ms
        // against 1.09 ms inline; `block_in_place` was no better than
        // `spawn_blocking`). The runtime keeps another worker for the
        // ports meanwhile (`node/src/main.rs`).
        let acknowledged_unsynced = injected_bugs::enabled(InjectedBug::AcknowledgeBeforeSync);
        let synced_behind = own_entries && !acknowledged_unsynced;
        let durability = if synced_behind || acknowledged_unsynced {
            Durability::Buffered
        } else {
            Durability::Synced
        };
        match self.engine.write(batch, durability) {
            Ok(()) => {
                if synced_behind {
                    self.durability.written_unsynced(first_index);
                } else {
                    self.durability.all_synced();
                }
                if let (Some(observer), Some(began)) = (&self.observer, began) {
                    observer.log_appended(appended.len(), began.elapsed());
                }
                if let Some(log_bytes) = &self.log_bytes {
                    log_bytes.appended(appended.iter().map(|(_, length)| *length as u64).sum());
                }
                // Before the callback: openraft reads the entries back as
                // soon as it learns they are on disk.
                self.recent.appended(appended);
                callback.log_io_completed(Ok(()));
                if synced_behind {
                    self.wake_background_sync();
                }
                Ok(())
            }
            Err(error) => {
                let message = error.to_string();
                callback.log_io_completed(Err(std::io::Error::other(message)));
                Err(write_error(error))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.recent.truncating(log_id.index);
        let mut batch = WriteBatch::default();
        batch.delete_range(
            Space::Log,
            keys::log_key(log_id.index).to_vec(),
            keys::log_key(u64::MAX).to_vec(),
        );
        batch.delete(Space::Log, keys::log_key(u64::MAX).to_vec());
        self.write_synced(batch).await.map_err(write_error)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let log_id = match &self.purge_limit {
            None => log_id,
            Some((snapshot, wait)) => {
                let covers = |snapshot: &SnapshotOnDisk| {
                    snapshot
                        .last_log_id()
                        .is_some_and(|stored| stored.index >= log_id.index)
                };
                let deadline = tokio::time::Instant::now() + *wait;
                while !covers(snapshot) && !snapshot.state_machine_failed() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(PURGE_POLL_INTERVAL).await;
                }
                if !covers(snapshot) && snapshot.state_machine_failed() {
                    // Waiting would hold openraft's core, which answers no
                    // peer meanwhile, for `wait`; failing stops the member
                    // now, as its state machine's error is about to.
                    return Err(write_error(EngineError::io(
                        "purging the log",
                        std::io::Error::other("the state machine failed before its snapshot reached the disk"),
                    )));
                }
                match snapshot.last_log_id() {
                    Some(stored) if stored.index >= log_id.index => log_id,
                    Some(stored) => {
                        tracing::warn!(asked = %log_id, snapshot = %stored, "purging only what the snapshot on disk covers");
                        stored
                    }
                    None => {
                        tracing::warn!(asked = %log_id, "no snapshot on disk; purging nothing");
                        return Ok(());
                    }
                }
            }
        };
        let purged: Option<LogId<NodeId>> = self.read_meta::<LogId<NodeId>>(meta::LAST_PURGED).map_err(read_error)?;
        if purged.is_some_and(|purged| purged.index >= log_id.index) {
            return Ok(());
        }
        self.recent.purging(log_id.index);
        // `last_purged` and the range delete share one batch, so no reader
        // ever sees a log whose start is unexplained.
        let mut batch = WriteBatch::default();
        put_meta(&mut batch, meta::LAST_PURGED, &log_id).map_err(write_error)?;
        let end = log_id.index.saturating_add(1);
        batch.delete_range(Space::Log, keys::log_key(0).to_vec(), keys::log_key(end).to_vec());
        self.write_synced(batch).await.map_err(write_error)?;
        if let Some(log_bytes) = &self.log_bytes {
            log_bytes.purged();
        }
        Ok(())
    }
}
