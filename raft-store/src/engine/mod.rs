//! The storage-engine trait the log store and state machine are written
//! against, so their logic exists once and runs on RocksDB in production and
//! in memory in unit and simulation tests.
//!
//! The trait is deliberately small: point reads, bounded range scans, atomic
//! write batches with a sync flag, and whole-engine images for snapshots
//! (files for RocksDB, streamed; bytes for the in-memory engine).

mod damage;
pub mod image_archive;
pub mod memory;
pub mod rocks;
pub mod selected;

use crate::error::EngineError;
use crate::snapshot::SnapshotImage;

/// A keyspace inside an engine (a RocksDB column family).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Space {
    /// Raft log entries by index.
    Log,
    /// Vote, committed and last-purged log ids.
    RaftMeta,
    /// Stored entries by namespace and key.
    Entries,
    /// Expiry time → entry key, for sweeps.
    Expiry,
    /// Op id → dedup record.
    Dedup,
    /// Dedup record time → op id, for pruning.
    DedupByTime,
    /// Last applied log id, membership and the apply clock.
    StateMeta,
    /// Change events by (log index, sequence in the entry).
    ChangeLog,
}

impl Space {
    pub const ALL: [Space; 8] = [
        Space::Log,
        Space::RaftMeta,
        Space::Entries,
        Space::Expiry,
        Space::Dedup,
        Space::DedupByTime,
        Space::StateMeta,
        Space::ChangeLog,
    ];

    /// The column family name; stable on disk.
    pub fn name(self) -> &'static str {
        match self {
            Space::Log => "log",
            Space::RaftMeta => "raft_meta",
            Space::Entries => "entries",
            Space::Expiry => "expiry",
            Space::Dedup => "dedup",
            Space::DedupByTime => "dedup_by_time",
            Space::StateMeta => "state_meta",
            Space::ChangeLog => "change_log",
        }
    }
}

/// One change inside a write batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOp {
    Put {
        space: Space,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        space: Space,
        key: Vec<u8>,
    },
    /// Deletes `[start, end)`.
    DeleteRange {
        space: Space,
        start: Vec<u8>,
        end: Vec<u8>,
    },
}

/// Changes applied atomically: all of them or none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub ops: Vec<WriteOp>,
}

impl WriteBatch {
    pub fn put(&mut self, space: Space, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::Put {
            space,
            key: key.into(),
            value: value.into(),
        });
    }

    pub fn delete(&mut self, space: Space, key: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::Delete { space, key: key.into() });
    }

    pub fn delete_range(&mut self, space: Space, start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::DeleteRange {
            space,
            start: start.into(),
            end: end.into(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Whether a write must be on stable storage before `write` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The write-ahead log is fsynced before returning.
    Synced,
    /// The write survives a process crash but may be lost with the machine.
    Buffered,
}

/// The current snapshot as an engine stores it.
pub struct SavedSnapshot {
    /// openraft's meta, encoded (`snapshot::StoredSnapshot`).
    pub record: Vec<u8>,
    /// The image stored with the record, if there is one.
    pub image: Option<SnapshotImage>,
}

/// One stored key and its value.
pub type Pair = (Vec<u8>, Vec<u8>);

/// Key-value pairs returned by a scan, in key order.
pub type Pairs = Vec<Pair>;

/// Runs `work` against `engine`: on a blocking thread when the engine blocks
/// on the disk, so a slow fsync never stalls the async runtime's workers;
/// inline otherwise.
pub async fn run_blocking<E, T, F>(engine: &std::sync::Arc<E>, work: F) -> Result<T, EngineError>
where
    E: Engine,
    T: Send + 'static,
    F: FnOnce(&E) -> Result<T, EngineError> + Send + 'static,
{
    if !engine.blocks_on_disk() {
        return work(engine);
    }
    let engine = engine.clone();
    tokio::task::spawn_blocking(move || work(&engine))
        .await
        .map_err(|error| {
            EngineError::io(
                "running a blocking storage task",
                std::io::Error::other(error.to_string()),
            )
        })?
}

/// One range of [`Engine::read_ranges`]: `start <= key < end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeRead {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
    /// Walk from the end towards the start.
    pub reverse: bool,
    /// Most pairs returned.
    pub limit: usize,
    /// Most pairs looked at, kept or not: bounds the work of one range.
    pub examined_max: usize,
}

impl RangeRead {
    /// The one key the range can hold, when it is `[key, key ++ [0])`: no
    /// byte string lies between the two, so a point read answers it. A
    /// Deno KV `get` reads such a range.
    pub fn single_key(&self) -> Option<&[u8]> {
        let (last, before_last) = self.end.split_last()?;
        (*last == 0 && before_last == self.start.as_slice()).then_some(self.start.as_slice())
    }
}

/// Whether a stored dedup record is older than `before_micros`, for an
/// engine dropping forgotten records; bytes that are not a record are kept.
pub(crate) fn dedup_record_forgotten(value: &[u8], before_micros: u64) -> bool {
    crate::apply::dedup::record_time_micros(value).is_some_and(|time| time < before_micros)
}

/// Collects one range from an iterator already positioned and ordered.
pub(crate) fn collect_range<I>(
    pairs: I,
    range: &RangeRead,
    keep: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Result<Pairs, EngineError>
where
    I: Iterator<Item = Result<(Vec<u8>, Vec<u8>), EngineError>>,
{
    let mut out = Vec::new();
    // Counted before the next pair is pulled: a pull past the limit could
    // step over removed keys for nothing.
    let mut pairs = pairs.take(range.examined_max);
    while out.len() < range.limit {
        let Some(pair) = pairs.next() else {
            break;
        };
        let (key, value) = pair?;
        let inside = if range.reverse {
            key.as_slice() >= range.start.as_slice()
        } else {
            key.as_slice() < range.end.as_slice()
        };
        if !inside {
            break;
        }
        if keep(&key, &value) {
            out.push((key, value));
        }
    }
    Ok(out)
}

/// The engine interface. Every method is synchronous and short; callers
/// bound scans with `limit`.
pub trait Engine: Send + Sync + 'static {
    /// A point-in-time image of the whole engine, cheap to take.
    type Checkpoint: Send + Sync + 'static;
    /// An image checked and ready to replace the live contents.
    type Prepared: Send + 'static;

    /// Whether synced writes and image packing block the calling thread on
    /// the disk, so async callers should move them to a blocking thread.
    /// False for the in-memory engine, which keeps simulation on one thread.
    fn blocks_on_disk(&self) -> bool;

    /// How long a sync takes in a model of a disk, so a simulation can
    /// crash a member between a write and its sync. Zero for a real disk,
    /// whose syncs take what they take.
    fn modelled_sync_delay(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError>;

    /// Point reads of several keys from one consistent view of the engine.
    fn get_many(&self, space: Space, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, EngineError>;

    /// Pairs with `start <= key < end` (no end: to the end of the space), in
    /// key order, at most `limit` of them.
    fn scan(&self, space: Space, start: &[u8], end: Option<&[u8]>, limit: usize) -> Result<Pairs, EngineError>;

    /// The last pair of a space, if any.
    fn last(&self, space: Space) -> Result<Option<Pair>, EngineError>;

    /// Hands `visit` the pairs with `start <= key`, in key order and
    /// without copying them, while it answers true and the space lasts:
    /// `visit` is the bound. No step is taken past the pair it answered
    /// false to. `visit` must not call the engine. Meant for one pass over
    /// pairs not read again soon: what it reads is not kept in a cache.
    fn walk(&self, space: Space, start: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), EngineError>;

    /// Several ranges read from one consistent view of the engine: for each,
    /// the pairs `keep` accepts, in key order (descending when reversed),
    /// at most `limit` of them after examining at most `examined_max`.
    fn read_ranges(
        &self,
        space: Space,
        ranges: &[RangeRead],
        keep: &dyn Fn(&[u8], &[u8]) -> bool,
    ) -> Result<Vec<Pairs>, EngineError>;

    fn write(&self, batch: WriteBatch, durability: Durability) -> Result<(), EngineError>;

    /// Takes a consistent image of every space as of the last write.
    fn checkpoint(&self) -> Result<Self::Checkpoint, EngineError>;

    /// Turns a checkpoint into an image another member can restore (for
    /// RocksDB a file, written as a stream, whose name is removed at once:
    /// it is gone with its last handle). Slow; runs off the apply path.
    fn pack(&self, checkpoint: Self::Checkpoint) -> Result<SnapshotImage, EngineError>;

    /// Makes every write so far durable, as a synced write would.
    fn sync_writes(&self) -> Result<(), EngineError>;

    /// An empty image for openraft to write a received snapshot into.
    fn receiving_image(&self) -> Result<SnapshotImage, EngineError>;

    /// `image` as one this engine keeps: a file image from elsewhere (another
    /// engine's, as openraft's storage suite hands over) is copied in.
    fn adopt_image(&self, image: SnapshotImage) -> Result<SnapshotImage, EngineError>;

    /// Checks that an image restores (it decodes, and for RocksDB its files
    /// open as a database) and readies it to replace the live contents,
    /// without touching them.
    fn prepare_restore(&self, image: &SnapshotImage) -> Result<Self::Prepared, EngineError>;

    /// Replaces the whole contents of the engine with a prepared image,
    /// durably.
    fn finish_restore(&self, prepared: Self::Prepared) -> Result<(), EngineError>;

    /// Stores `record` (a snapshot's meta) durably as the current snapshot,
    /// with `image` beside it if one is given, replacing the previous one
    /// and its image. Without an image the record stands for the live
    /// state, which the caller has made durable at least that far.
    fn save_snapshot(&self, record: &[u8], image: Option<&SnapshotImage>) -> Result<(), EngineError>;

    /// The record and, if one was stored with it, the image last stored by
    /// `save_snapshot`.
    fn load_snapshot(&self) -> Result<Option<SavedSnapshot>, EngineError>;

    /// Lets the engine drop, whenever it likes, the dedup records older than
    /// `time_micros`: the forgotten-before time of the snapshot just stored,
    /// so no state the engine can return to answers from them
    /// (`apply/dedup.rs`). The time only ever moves forward.
    fn forget_dedup_records_before(&self, time_micros: u64);

    /// Lets the engine drop the change events at or before `position`: the
    /// trimmed-through position of a state the engine has made durable,
    /// so no state it can return to reads them (`apply/change_log.rs`).
    /// RocksDB drops the table files that hold only such events; events
    /// in a file that also holds later ones stay until a later call.
    fn forget_change_events_through(&self, position: (u64, u32));

    /// Removes an image that was not saved (a built one older than the
    /// snapshot on disk, a received one that was refused); a file image
    /// stays readable through the handle `image` holds until it is dropped.
    fn discard_image(&self, image: &SnapshotImage) -> Result<(), EngineError>;
}
