//! The production engine: one RocksDB instance with a column family per
//! [`Space`].
//!
//! Directory layout under the engine's root:
//! - `db/`: the live database;
//! - `db.installing/`: a snapshot image being restored, complete and fsynced
//!   before it is renamed over `db/`;
//! - `checkpoint-N.tmp/`: a RocksDB checkpoint being packed for a snapshot;
//! - `snapshots/`: `current`, the current snapshot's record and the name
//!   of its image if it has one, replaced by write-to-temp, fsync, rename,
//!   fsync of the directory; and images (`image_archive.rs` is their
//!   format): `received-N`, written by openraft as chunks arrive and kept
//!   only while an install finishes, and `built-N`, packed for a follower,
//!   whose name goes as soon as it is open. An image `current` does not
//!   name is removed at open.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteOptions, DB};
use serde::{Deserialize, Serialize};

use super::{
    collect_range, damage, image_archive, Durability, Engine, Pair, Pairs, RangeRead, SavedSnapshot, Space, WriteBatch,
    WriteOp,
};
use crate::error::{decode, encode, EngineError};
use crate::snapshot::SnapshotImage;

pub struct RocksEngine {
    root: PathBuf,
    /// `None` only in the moment a restore swaps databases, or after a
    /// restore failed to reopen.
    db: RwLock<Option<DB>>,
    checkpoint_sequence: AtomicU64,
    /// Dedup records older than this time are dropped as they are compacted
    /// (`forget_dedup_records_before`); shared with every database the
    /// engine opens, a restored one included.
    dedup_forgotten_before: Arc<AtomicU64>,
}

impl std::fmt::Debug for RocksEngine {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "RocksEngine({})", self.root.display())
    }
}

/// A checkpoint directory waiting to be packed; removed once packed or dropped.
pub struct RocksCheckpoint {
    directory: PathBuf,
}

impl RocksCheckpoint {
    /// The checkpoint as a read-only engine, to read what it holds (a
    /// backup's log position and counts) at the point it was taken.
    pub fn open_read_only(&self) -> Result<RocksEngine, EngineError> {
        let names = Space::ALL.iter().map(|space| space.name());
        let db = DB::open_cf_for_read_only(&options(), &self.directory, names, false)?;
        Ok(RocksEngine {
            root: self.directory.clone(),
            db: RwLock::new(Some(db)),
            checkpoint_sequence: AtomicU64::new(0),
            dedup_forgotten_before: Arc::default(),
        })
    }
}

impl Drop for RocksCheckpoint {
    fn drop(&mut self) {
        if self.directory.exists() {
            if let Err(error) = fs::remove_dir_all(&self.directory) {
                tracing::warn!(directory = %self.directory.display(), %error, "could not remove a checkpoint directory");
            }
        }
    }
}

/// The content of `snapshots/current`.
#[derive(Serialize, Deserialize)]
struct CurrentSnapshot {
    /// The image's file name inside `snapshots/`; empty when the record
    /// stands for the live state (format 1 always named an image).
    image: String,
    #[serde(with = "serde_bytes")]
    record: Vec<u8>,
}

/// RocksDB's figures for a member's metrics, summed over column families.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RocksProperties {
    /// Live SST files and memtables of every space but the change log
    /// (which `--change-log-bytes-max` bounds on its own). Deleted and
    /// overwritten data counts until compaction drops it.
    pub live_bytes: u64,
    pub memtable_bytes: u64,
    pub pending_compaction_bytes: u64,
    /// RocksDB's estimate of the dedup records' count.
    pub dedup_records: u64,
    /// Each space's SST files (live, so also what a checkpoint holds) and
    /// memtables, to say where a member's disk goes.
    pub space_bytes: Vec<(Space, u64)>,
    /// What the instance's one block cache holds (at most
    /// `BLOCK_CACHE_BYTES`).
    pub block_cache_bytes: u64,
    /// Memory the table readers hold outside the cache: every table file's
    /// index and bloom filter, which grow with the data.
    pub table_readers_bytes: u64,
}

/// A received image unpacked into `db.installing/` and opened once.
pub struct RocksPrepared {
    directory: PathBuf,
}

/// Memtable bytes of one instance, all its column families together: past
/// it the largest memtable is flushed. It bounds a member's memory, and a
/// small memtable is also a short skip list to search.
pub const MEMTABLE_BYTES_MAX: usize = 32 << 20;
/// One column family's memtable, for the families written on every entry.
const MEMTABLE_BYTES_BUSY: usize = 8 << 20;
/// Memtables the Raft log's family may hold, the one being written and
/// those waiting for their flush. Past them RocksDB stops the log's
/// appends, and with them everything behind an append: the leader's Raft
/// core appends inline, and sends no heartbeat while it waits. A process
/// has one flush thread for its two instances, so under large values the
/// log's flushes wait behind the state's. With RocksDB's two, the log
/// instance stopped writes 5 to 20 times a minute on each member under 64
/// clients' puts of 64 KiB values; with four, never, and the puts' p999
/// was no worse (`docs/performance.md`, eighteenth round).
const LOG_MEMTABLES_MAX: i32 = 4;
/// The log's memtables fit in its instance's memtable budget.
const _: () = assert!(LOG_MEMTABLES_MAX as usize * MEMTABLE_BYTES_BUSY <= MEMTABLE_BYTES_MAX);
/// One column family's memtable, for the small ones (metadata, expiry).
const MEMTABLE_BYTES_SMALL: usize = 1 << 20;
/// Most a flush trigger (a family's memtable size, an instance's
/// write-ahead log limit) is made smaller, in percent, by a draw at each
/// open. Every member applies the same entries, so with equal triggers
/// every member flushed a family at the same log position, at the same
/// moment: a flush's work and its stall of the writes then fell on the
/// leader and both followers at once, and no quorum was left to answer
/// meanwhile. With the draw, members flush at different moments and the
/// quorum is formed by whichever are not flushing. Under 64 clients' puts
/// the p999 fell from 6.5 to 8.6 times the median to 3.9 to 5.7 times
/// (`docs/performance.md`, twentieth round).
const FLUSH_TRIGGER_SHRINK_PERCENT_MAX: usize = 25;
const _: () = assert!(FLUSH_TRIGGER_SHRINK_PERCENT_MAX < 100);
/// The block cache of one instance: data blocks (index and filter blocks
/// stay with each table reader, see `family_options`).
pub const BLOCK_CACHE_BYTES: usize = 16 << 20;
/// Bloom filter bits per key in table files: about 1% false positives.
const BLOOM_BITS_PER_KEY: f64 = 10.0;
/// The share of a memtable given to its bloom filter, in the families
/// read by key on every write: a dedup lookup almost always misses.
const MEMTABLE_BLOOM_RATIO: f64 = 0.05;

const _: () = assert!(MEMTABLE_BYTES_BUSY * 3 <= MEMTABLE_BYTES_MAX);
/// Longest a dedup table file goes without a compaction, which drops the
/// forgotten records in it. Op ids begin with their client's clock
/// (`lode_client::sdk::new_op_id`), so the family is written almost in key
/// order: a flushed file overlaps few older ones and moves down without a
/// rewrite, and without this its forgotten records would stay on disk
/// until RocksDB's default of 30 days. A record stays on disk at most this
/// long past the snapshot that forgot it.
pub const DEDUP_FILE_AGE_SECONDS_MAX: u64 = 300;
/// So a record forgotten under the default retention leaves the disk
/// within about one more retention.
const _: () = assert!(DEDUP_FILE_AGE_SECONDS_MAX * 1_000_000 <= crate::limits::DEDUP_RETENTION_MICROS);
/// Write-ahead log files an instance keeps before it flushes the column
/// families that hold the oldest one. A family written rarely (metadata)
/// otherwise keeps every log file since its last flush alive: RocksDB's
/// default allows four times all memtables, about 170 MiB an instance.
/// A snapshot's checkpoint copies the log files instead of flushing, so
/// this also bounds what an image carries beside the table files. Each
/// open draws the instance's limit up to `flush_trigger_shrink_percent_max`
/// below it: flushes for a full log would otherwise fall at the same log
/// position on every member.
pub const WAL_BYTES_MAX: u64 = MEMTABLE_BYTES_MAX as u64;
const _: () = assert!(WAL_BYTES_MAX >= MEMTABLE_BYTES_MAX as u64);
/// Bytes a table file (a flush's or a compaction's) is written before
/// RocksDB asks the kernel to write them out. Without it a compaction's
/// output piles up as dirty pages until its final sync, and a synced
/// append of the log, queued behind that writeback in the file system's
/// journal, waits for all of it.
const TABLE_BYTES_PER_SYNC: u64 = 1 << 20;
/// Most bytes per second an instance's flushes and compactions write
/// (RocksDB's rate limiter, flushes first). Unlimited, a compaction wrote
/// its output as fast as the disk took it, and the synced appends of every
/// member on the disk waited behind it (`docs/performance.md`, twelfth
/// round). The limit is fixed, not auto-tuned: the auto-tuned limiter
/// lowers itself to a twentieth while writes are few and rises only slowly
/// when they come back, and a burst of writes after a quiet spell then
/// stopped every write for seconds, waiting on flushes. It was 32 MiB/s
/// until the seventeenth round, which found that it set the write rate of
/// large values: 64 clients' puts of 4 KiB values ran at 2,223/s with a
/// p999 of 1 s (6,780/s and 36 ms at this limit), because every byte
/// written must also be flushed.
const BACKGROUND_WRITE_BYTES_PER_SECOND_MAX: i64 = 256 << 20;
/// A full set of memtables can still be flushed within a second.
const _: () = assert!(BACKGROUND_WRITE_BYTES_PER_SECOND_MAX >= MEMTABLE_BYTES_MAX as i64);
/// The state takes a write's value about three times (the entry, and the
/// change event's old and new values): a thousand writes a second of the
/// largest values can still be flushed.
const _: () = assert!(BACKGROUND_WRITE_BYTES_PER_SECOND_MAX >= 3 * 1_000 * lode_types::limits::VALUE_BYTES_MAX as i64);
/// How often the rate limiter hands out bytes: RocksDB's default.
const BACKGROUND_WRITE_REFILL_MICROS: i64 = 100_000;
/// How often a compaction's request waits behind a flush's, one in this
/// many: RocksDB's default.
const BACKGROUND_WRITE_FAIRNESS: i32 = 10;

fn options() -> Options {
    let mut options = Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    options.set_compression_type(rocksdb::DBCompressionType::Lz4);
    options.set_max_background_jobs(2);
    options.set_keep_log_file_num(4);
    options.set_db_write_buffer_size(MEMTABLE_BYTES_MAX);
    options.set_max_total_wal_size(shrunk_at_random(WAL_BYTES_MAX));
    options.set_bytes_per_sync(TABLE_BYTES_PER_SYNC);
    // The same for the state's write-ahead log, which apply writes without
    // a sync: left to the kernel, its dirty pages went out in bursts that
    // the log's synced appends waited behind (a fresh cluster's put p999
    // was 6 to 7 times its p50, 4 to 5 times with this). The Raft log's
    // own write-ahead log is synced on every append anyway.
    options.set_wal_bytes_per_sync(TABLE_BYTES_PER_SYNC);
    options.set_ratelimiter(
        BACKGROUND_WRITE_BYTES_PER_SECOND_MAX,
        BACKGROUND_WRITE_REFILL_MICROS,
        BACKGROUND_WRITE_FAIRNESS,
    );
    // Every file's size is checked against the manifest at open, and a
    // write-ahead log record that fails its checksum fails the open, unless
    // it is a torn last record (a crash during an unsynced write). RocksDB's
    // default (point in time) would instead drop that record and every
    // later one, synced or not, and open as if they never were.
    options.set_paranoid_checks(true);
    options.set_wal_recovery_mode(rocksdb::DBRecoveryMode::TolerateCorruptedTailRecords);
    options
}

/// A column family's options: bloom filters, the instance's one block
/// cache, and a memtable sized for how much the family is written.
fn family_options(space: Space, cache: &rocksdb::Cache, dedup_forgotten_before: &Arc<AtomicU64>) -> Options {
    let mut options = Options::default();
    options.set_compression_type(rocksdb::DBCompressionType::Lz4);
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
    // Index and filter blocks stay in each table's reader, outside the
    // cache: in the small cache a dedup lookup's whole-file filter (about
    // 1.2 MiB for a million records) was evicted by data blocks and read
    // back, and its checksum taken, on nearly every write.
    table.set_cache_index_and_filter_blocks(false);
    options.set_block_based_table_factory(&table);
    let busy = matches!(
        space,
        Space::Log | Space::Entries | Space::Dedup | Space::DedupByTime | Space::ChangeLog
    );
    let memtable_bytes = if busy {
        MEMTABLE_BYTES_BUSY
    } else {
        MEMTABLE_BYTES_SMALL
    };
    options.set_write_buffer_size(shrunk_at_random(memtable_bytes as u64) as usize);
    if space == Space::Log {
        options.set_max_write_buffer_number(LOG_MEMTABLES_MAX);
    }
    if matches!(space, Space::Entries | Space::Dedup) {
        options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
        options.set_memtable_whole_key_filtering(true);
    }
    if space == Space::ChangeLog {
        // Events are written once, in key order: each flushed file lies
        // past every older one and moves down without a rewrite. Moved at
        // once, it can be dropped whole once trimmed (`delete_file_in_range`
        // passes over level 0), instead of waiting for three more flushes.
        options.set_level_zero_file_num_compaction_trigger(1);
    }
    match space {
        Space::Dedup => {
            options.set_compaction_filter_factory(ForgottenDedupRecords {
                before_micros: dedup_forgotten_before.clone(),
            });
            options.set_periodic_compaction_seconds(DEDUP_FILE_AGE_SECONDS_MAX);
        }
        // Only older directories hold this family, whose time index apply
        // no longer writes: compactions empty it.
        Space::DedupByTime => options
            .set_compaction_filter("lode-dedup-time-index", |_level: u32, _key: &[u8], _value: &[u8]| {
                rocksdb::compaction_filter::Decision::Remove
            }),
        _ => {}
    }
    options
}

/// `bytes` less a random share of at most
/// `flush_trigger_shrink_percent_max`.
fn shrunk_at_random(bytes: u64) -> u64 {
    use rand::Rng;
    let shrink_max = bytes / 100 * FLUSH_TRIGGER_SHRINK_PERCENT_MAX as u64;
    bytes - rand::thread_rng().gen_range(0..=shrink_max)
}

/// Makes each compaction of the dedup family drop the records older than
/// the forgotten-before time at its start.
struct ForgottenDedupRecords {
    before_micros: Arc<AtomicU64>,
}

impl rocksdb::compaction_filter_factory::CompactionFilterFactory for ForgottenDedupRecords {
    type Filter = ForgottenDedupFilter;

    fn create(&mut self, _: rocksdb::compaction_filter_factory::CompactionFilterContext) -> ForgottenDedupFilter {
        ForgottenDedupFilter {
            before_micros: self.before_micros.load(Ordering::Acquire),
        }
    }

    fn name(&self) -> &std::ffi::CStr {
        c"lode-forgotten-dedup-records"
    }
}

struct ForgottenDedupFilter {
    before_micros: u64,
}

impl rocksdb::compaction_filter::CompactionFilter for ForgottenDedupFilter {
    fn filter(&mut self, _level: u32, _key: &[u8], value: &[u8]) -> rocksdb::compaction_filter::Decision {
        // RocksDB turns a removal into a deletion while older levels may
        // hold the key, so no older record comes back in its place.
        match super::dedup_record_forgotten(value, self.before_micros) {
            true => rocksdb::compaction_filter::Decision::Remove,
            false => rocksdb::compaction_filter::Decision::Keep,
        }
    }

    fn name(&self) -> &std::ffi::CStr {
        c"lode-forgotten-dedup-records"
    }
}

fn open_database(path: &Path, dedup_forgotten_before: &Arc<AtomicU64>) -> Result<DB, EngineError> {
    let cache = rocksdb::Cache::new_lru_cache(BLOCK_CACHE_BYTES);
    let families = Space::ALL
        .iter()
        .map(|space| ColumnFamilyDescriptor::new(space.name(), family_options(*space, &cache, dedup_forgotten_before)));
    let db = DB::open_cf_descriptors(&options(), path, families).map_err(|error| damage::open_error(path, error))?;
    damage::verify_tables(&db).map_err(|error| damage::open_error(path, error))?;
    Ok(db)
}

/// A range that can hold only `key`, read with a point lookup: bloom
/// filters answer most absent keys, and no iterator is built over every
/// memtable and table file. Under 64 readers' Deno KV gets, whose every
/// range is one key, the range reads were 13% of a follower's samples with
/// iterators and are 8.5% with point lookups, most of it the memtable's
/// skip-list search that both do.
fn read_single_key(
    db: &DB,
    family: &rocksdb::ColumnFamily,
    options: &rocksdb::ReadOptions,
    key: &[u8],
    range: &RangeRead,
    keep: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Result<Pairs, EngineError> {
    let value = db.get_pinned_cf_opt(family, key, options)?;
    let pair = value.map(|value| Ok((key.to_vec(), value.to_vec())));
    // The same limits and filter as every other range.
    collect_range(pair.into_iter(), range, keep)
}

/// Fsyncs a directory so that renames and creations inside it are durable.
fn sync_directory(path: &Path) -> Result<(), EngineError> {
    fs::File::open(path)
        .and_then(|directory| directory.sync_all())
        .map_err(|error| EngineError::io(format!("syncing directory {}", path.display()), error))
}

fn io_context(path: &Path, action: &str) -> impl FnOnce(std::io::Error) -> EngineError {
    let context = format!("{action} {}", path.display());
    move |error| EngineError::io(context, error)
}

impl RocksEngine {
    /// Opens (or creates) the engine under `root`, finishing or discarding a
    /// restore that a crash interrupted.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, EngineError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io_context(&root, "creating"))?;
        let live = root.join("db");
        let installing = root.join("db.installing");
        let old = root.join("db.old");
        if installing.exists() {
            if live.exists() {
                // The swap never started: the live database is whole and the
                // partial image is discarded (the leader sends it again).
                fs::remove_dir_all(&installing).map_err(io_context(&installing, "removing"))?;
            } else {
                // The crash fell between the two renames: the image was
                // complete and fsynced before the first one.
                fs::rename(&installing, &live).map_err(io_context(&installing, "renaming"))?;
                sync_directory(&root)?;
            }
        }
        if old.exists() {
            fs::remove_dir_all(&old).map_err(io_context(&old, "removing"))?;
        }
        for leftover in fs::read_dir(&root).map_err(io_context(&root, "listing"))? {
            let leftover = leftover.map_err(io_context(&root, "listing"))?;
            if leftover.file_name().to_string_lossy().starts_with("checkpoint-") {
                fs::remove_dir_all(leftover.path()).map_err(io_context(&leftover.path(), "removing"))?;
            }
        }
        let dedup_forgotten_before = Arc::default();
        let db = open_database(&live, &dedup_forgotten_before)?;
        let engine = Self {
            root,
            db: RwLock::new(Some(db)),
            checkpoint_sequence: AtomicU64::new(0),
            dedup_forgotten_before,
        };
        let next = engine.remove_unnamed_images()?;
        engine.checkpoint_sequence.store(next, Ordering::Relaxed);
        Ok(engine)
    }

    fn snapshots(&self) -> PathBuf {
        self.root.join("snapshots")
    }

    /// RocksDB's own figures: the state's size (what the storage quota
    /// counts) and a member's metrics.
    pub fn properties(&self) -> Result<RocksProperties, EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        let mut properties = RocksProperties::default();
        for space in Space::ALL {
            let family = family(db, space)?;
            let value = |name: &str| db.property_int_value_cf(family, name).map(|value| value.unwrap_or(0));
            let memtable = value("rocksdb.cur-size-all-mem-tables")?;
            let space_bytes = value("rocksdb.live-sst-files-size")? + memtable;
            properties.memtable_bytes += memtable;
            properties.space_bytes.push((space, space_bytes));
            properties.table_readers_bytes += value("rocksdb.estimate-table-readers-mem")?;
            // One cache serves every family: each reports the same usage.
            properties.block_cache_bytes = value("rocksdb.block-cache-usage")?;
            if space != Space::ChangeLog {
                properties.live_bytes += space_bytes;
            }
            properties.pending_compaction_bytes += value("rocksdb.estimate-pending-compaction-bytes")?;
            if space == Space::Dedup {
                properties.dedup_records = value("rocksdb.estimate-num-keys")?;
            }
        }
        Ok(properties)
    }

    /// Compacts every column family whole, dropping deleted and
    /// overwritten data; reads and writes go on meanwhile. Slow: run it
    /// off the async runtime.
    pub fn compact(&self) -> Result<(), EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        for space in Space::ALL {
            db.compact_range_cf(family(db, space)?, None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }

    /// Opens a new engine under the fresh directory `root` whose database
    /// is the image of `total` bytes that `image` reads, checked as an
    /// install checks it. Answers the engine and the image's digest.
    pub fn restore_image(
        root: impl Into<PathBuf>,
        image: impl std::io::Read,
        total: u64,
    ) -> Result<(Self, [u8; 32]), EngineError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io_context(&root, "creating"))?;
        let digest = image_archive::unpack_from(image, total, &root.join("db"))?;
        sync_directory(&root)?;
        Ok((Self::open(root)?, digest))
    }

    /// Packs `checkpoint` as a backup image, `snapshots/backup-N` (removed
    /// at the next open if still there), and answers its file and digest.
    pub fn pack_backup(&self, checkpoint: RocksCheckpoint) -> Result<(PathBuf, image_archive::Packed), EngineError> {
        let (path, _) = self.new_image_file("backup")?;
        match image_archive::write(&checkpoint.directory, &path) {
            Ok(packed) => Ok((path, packed)),
            Err(error) => {
                let _ = fs::remove_file(&path);
                Err(error)
            }
        }
    }

    /// The current snapshot's pointer, if one was saved.
    fn current_snapshot(&self) -> Result<Option<CurrentSnapshot>, EngineError> {
        let path = self.snapshots().join("current");
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(decode("current snapshot", &bytes)?)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(EngineError::io(format!("reading {}", path.display()), error)),
        }
    }

    /// Removes every image `current` does not name: built ones never saved,
    /// received ones a crash or a refusal left behind. Answers the first
    /// sequence number no kept image uses.
    fn remove_unnamed_images(&self) -> Result<u64, EngineError> {
        let snapshots = self.snapshots();
        fs::create_dir_all(&snapshots).map_err(io_context(&snapshots, "creating"))?;
        let kept = self.current_snapshot()?.map(|current| current.image);
        for item in fs::read_dir(&snapshots).map_err(io_context(&snapshots, "listing"))? {
            let item = item.map_err(io_context(&snapshots, "listing"))?;
            let name = item.file_name().to_string_lossy().into_owned();
            if name != "current" && Some(&name) != kept.as_ref() {
                fs::remove_file(item.path()).map_err(io_context(&item.path(), "removing"))?;
            }
        }
        let kept_sequence = kept
            .as_deref()
            .and_then(|name| name.rsplit('-').next())
            .and_then(|sequence| sequence.parse::<u64>().ok());
        Ok(kept_sequence.map_or(0, |sequence| sequence.saturating_add(1)))
    }

    /// A new image file under `snapshots/`, open for reading and writing.
    fn new_image_file(&self, prefix: &str) -> Result<(PathBuf, fs::File), EngineError> {
        let sequence = self.checkpoint_sequence.fetch_add(1, Ordering::Relaxed);
        let path = self.snapshots().join(format!("{prefix}-{sequence}"));
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io_context(&path, "creating"))?;
        Ok((path, file))
    }

    /// The file of a file image, which must lie in `snapshots/`.
    fn image_path<'a>(&self, image: &'a SnapshotImage) -> Result<&'a Path, EngineError> {
        image
            .path()
            .filter(|path| path.parent() == Some(self.snapshots().as_path()))
            .ok_or_else(|| EngineError::corrupt("snapshot image", format!("{image:?} is not a file of this engine")))
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, Option<DB>>, EngineError> {
        // A panic while holding the lock cannot leave the database handle
        // half-changed: it is replaced whole or not at all.
        Ok(self.db.read().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    fn closed() -> EngineError {
        EngineError::io(
            "using the database",
            std::io::Error::other("the database is closed after a failed restore"),
        )
    }
}

fn family(db: &DB, space: Space) -> Result<&rocksdb::ColumnFamily, EngineError> {
    db.cf_handle(space.name())
        .ok_or_else(|| EngineError::corrupt("column family", format!("{} is missing", space.name())))
}

impl Engine for RocksEngine {
    type Checkpoint = RocksCheckpoint;
    type Prepared = RocksPrepared;

    fn blocks_on_disk(&self) -> bool {
        true
    }

    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        Ok(db.get_cf(family(db, space)?, key)?)
    }

    fn get_many(&self, space: Space, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        let family = family(db, space)?;
        // One MultiGet reads every key at the same sequence number.
        db.batched_multi_get_cf(family, keys, false)
            .into_iter()
            .map(|value| Ok(value?.map(|value| value.to_vec())))
            .collect()
    }

    fn scan(&self, space: Space, start: &[u8], end: Option<&[u8]>, limit: usize) -> Result<Pairs, EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        let mut options = rocksdb::ReadOptions::default();
        if let Some(end) = end {
            options.set_iterate_upper_bound(end.to_vec());
        }
        // Never a step past the limit or the bound: past them RocksDB would
        // step over every removed key up to the next live one, of any
        // namespace (the queue's claimed and overdue keys, removed by the
        // thousand, follow its ready ones). The raw iterator, because the
        // crate's `Iterator` steps on before it hands out a pair.
        let mut iterator = db.raw_iterator_cf_opt(family(db, space)?, options);
        iterator.seek(start);
        let mut out = Vec::new();
        while out.len() < limit {
            let (Some(key), Some(value)) = (iterator.key(), iterator.value()) else {
                break;
            };
            if end.is_some_and(|end| key >= end) {
                break;
            }
            out.push((key.to_vec(), value.to_vec()));
            if out.len() < limit {
                iterator.next();
            }
        }
        iterator.status()?;
        Ok(out)
    }

    fn walk(&self, space: Space, start: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        // A walk reads each pair once: its blocks would only push the ones
        // point reads come back to out of the small cache.
        let mut options = rocksdb::ReadOptions::default();
        options.fill_cache(false);
        let mut iterator = db.raw_iterator_cf_opt(family(db, space)?, options);
        iterator.seek(start);
        while let (Some(key), Some(value)) = (iterator.key(), iterator.value()) {
            if !visit(key, value) {
                break;
            }
            iterator.next();
        }
        iterator.status()?;
        Ok(())
    }

    fn read_ranges(
        &self,
        space: Space,
        ranges: &[RangeRead],
        keep: &dyn Fn(&[u8], &[u8]) -> bool,
    ) -> Result<Vec<Pairs>, EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        let family = family(db, space)?;
        // Every range reads at the sequence number of one snapshot.
        let snapshot = db.snapshot();
        ranges
            .iter()
            .map(|range| {
                if range.start >= range.end {
                    return Ok(Vec::new());
                }
                let mut options = rocksdb::ReadOptions::default();
                options.set_snapshot(&snapshot);
                if let Some(key) = range.single_key() {
                    return read_single_key(db, family, &options, key, range, keep);
                }
                // Bounded both ways, so the iterator never steps over
                // removed keys outside the range.
                options.set_iterate_lower_bound(range.start.clone());
                options.set_iterate_upper_bound(range.end.clone());
                let mode = if range.reverse {
                    // Positions at the last key <= end; `end` itself is
                    // excluded below.
                    IteratorMode::From(&range.end, Direction::Reverse)
                } else {
                    IteratorMode::From(&range.start, Direction::Forward)
                };
                let pairs = db
                    .iterator_cf_opt(family, options, mode)
                    .map(|item| {
                        item.map(|(key, value)| (key.into_vec(), value.into_vec()))
                            .map_err(EngineError::from)
                    })
                    .filter(|pair| !matches!(pair, Ok((key, _)) if range.reverse && *key == range.end));
                collect_range(pairs, range, keep)
            })
            .collect()
    }

    fn last(&self, space: Space) -> Result<Option<Pair>, EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        let last = db.iterator_cf(family(db, space)?, IteratorMode::End).next();
        let pair = match last {
            Some(item) => {
                let (key, value) = item?;
                Some((key.into_vec(), value.into_vec()))
            }
            None => None,
        };
        Ok(pair)
    }

    fn write(&self, batch: WriteBatch, durability: Durability) -> Result<(), EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        let mut rocks_batch = rocksdb::WriteBatch::default();
        for op in &batch.ops {
            match op {
                WriteOp::Put { space, key, value } => rocks_batch.put_cf(family(db, *space)?, key, value),
                WriteOp::Delete { space, key } => rocks_batch.delete_cf(family(db, *space)?, key),
                WriteOp::DeleteRange { space, start, end } => {
                    rocks_batch.delete_range_cf(family(db, *space)?, start, end)
                }
            }
        }
        let mut write_options = WriteOptions::default();
        write_options.set_sync(durability == Durability::Synced);
        Ok(db.write_opt(rocks_batch, &write_options)?)
    }

    fn checkpoint(&self) -> Result<RocksCheckpoint, EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        let sequence = self.checkpoint_sequence.fetch_add(1, Ordering::Relaxed);
        let directory = self.root.join(format!("checkpoint-{sequence}.tmp"));
        if directory.exists() {
            fs::remove_dir_all(&directory).map_err(io_context(&directory, "removing"))?;
        }
        // Taken between two applies, which wait for it: a checkpoint that
        // first flushed every memtable (RocksDB's default) held apply up
        // for the whole flush. Below `WAL_BYTES_MAX` (which the instance's
        // own flushes keep the log files under) it copies the write-ahead
        // log files instead, which an open of the image replays.
        rocksdb::checkpoint::Checkpoint::new(db)?.create_checkpoint_with_log_size(&directory, WAL_BYTES_MAX)?;
        Ok(RocksCheckpoint { directory })
    }

    fn pack(&self, checkpoint: RocksCheckpoint) -> Result<SnapshotImage, EngineError> {
        let (path, _) = self.new_image_file("built")?;
        if let Err(error) = image_archive::write(&checkpoint.directory, &path).map(drop) {
            let _ = fs::remove_file(&path);
            return Err(error);
        }
        let file = fs::File::open(&path).map_err(io_context(&path, "opening"))?;
        // Read through its handle only: the space goes with the last one,
        // and a crash leaves nothing behind.
        fs::remove_file(&path).map_err(io_context(&path, "removing"))?;
        Ok(SnapshotImage::open_file(&path, file))
    }

    fn sync_writes(&self) -> Result<(), EngineError> {
        let guard = self.read()?;
        let db = guard.as_ref().ok_or_else(Self::closed)?;
        Ok(db.flush_wal(true)?)
    }

    fn receiving_image(&self) -> Result<SnapshotImage, EngineError> {
        let (path, file) = self.new_image_file("received")?;
        Ok(SnapshotImage::open_received(&path, file))
    }

    fn adopt_image(&self, image: SnapshotImage) -> Result<SnapshotImage, EngineError> {
        let image = match image {
            SnapshotImage::Unpacked(unpacked) => unpacked.pack_now()?,
            image => image,
        };
        if self.image_path(&image).is_ok_and(Path::exists) {
            return Ok(image);
        }
        // Read through the image's own handle: its file may be gone by name.
        let SnapshotImage::File { path: source, file, .. } = image else {
            return Err(EngineError::corrupt("snapshot image", "bytes, not a file"));
        };
        let mut input = file.try_into_std().map_err(|_| {
            EngineError::io(
                format!("reading {}", source.display()),
                std::io::Error::other("an operation on the image is still in flight"),
            )
        })?;
        std::io::Seek::seek(&mut input, std::io::SeekFrom::Start(0)).map_err(io_context(&source, "seeking"))?;
        let (path, mut copy) = self.new_image_file("received")?;
        std::io::copy(&mut input, &mut copy).map_err(io_context(&path, "writing"))?;
        Ok(SnapshotImage::open_received(&path, copy))
    }

    fn prepare_restore(&self, image: &SnapshotImage) -> Result<RocksPrepared, EngineError> {
        let installing = self.root.join("db.installing");
        let prepared = image_archive::unpack(self.image_path(image)?, &installing)
            .and_then(|()| open_database(&installing, &Arc::default()).map(drop));
        if let Err(error) = prepared {
            if installing.exists() {
                fs::remove_dir_all(&installing).map_err(io_context(&installing, "removing"))?;
            }
            return Err(EngineError::corrupt(
                "snapshot image",
                format!("does not restore as a database: {error}"),
            ));
        }
        Ok(RocksPrepared { directory: installing })
    }

    fn finish_restore(&self, prepared: RocksPrepared) -> Result<(), EngineError> {
        let live = self.root.join("db");
        let old = self.root.join("db.old");
        let mut guard = self.db.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        drop(guard.take());
        fs::rename(&live, &old).map_err(io_context(&live, "renaming"))?;
        fs::rename(&prepared.directory, &live).map_err(io_context(&prepared.directory, "renaming"))?;
        sync_directory(&self.root)?;
        *guard = Some(open_database(&live, &self.dedup_forgotten_before)?);
        drop(guard);
        fs::remove_dir_all(&old).map_err(io_context(&old, "removing"))?;
        Ok(())
    }

    fn save_snapshot(&self, record: &[u8], image: Option<&SnapshotImage>) -> Result<(), EngineError> {
        let name = match image {
            Some(image) => {
                let path = self.image_path(image)?;
                fs::File::open(path)
                    .and_then(|file| file.sync_all())
                    .map_err(io_context(path, "syncing"))?;
                path.file_name()
                    .map(|name| name.to_string_lossy().into_owned())
                    .unwrap_or_default()
            }
            None => String::new(),
        };
        let previous = self.current_snapshot()?;
        let current = CurrentSnapshot {
            image: name.clone(),
            record: record.to_vec(),
        };
        let snapshots = self.snapshots();
        let temporary = snapshots.join("current.tmp");
        let mut file = fs::File::create(&temporary).map_err(io_context(&temporary, "creating"))?;
        std::io::Write::write_all(&mut file, &encode("current snapshot", &current)?)
            .map_err(io_context(&temporary, "writing"))?;
        file.sync_all().map_err(io_context(&temporary, "syncing"))?;
        fs::rename(&temporary, snapshots.join("current")).map_err(io_context(&temporary, "renaming"))?;
        sync_directory(&snapshots)?;
        // An image still being sent stays readable through its open file.
        if let Some(previous) = previous.filter(|previous| !previous.image.is_empty() && previous.image != name) {
            let old = snapshots.join(previous.image);
            fs::remove_file(&old).map_err(io_context(&old, "removing"))?;
        }
        Ok(())
    }

    fn load_snapshot(&self) -> Result<Option<SavedSnapshot>, EngineError> {
        let Some(current) = self.current_snapshot()? else {
            return Ok(None);
        };
        if current.image.is_empty() {
            return Ok(Some(SavedSnapshot {
                record: current.record,
                image: None,
            }));
        }
        let path = self.snapshots().join(&current.image);
        let file = fs::File::open(&path).map_err(io_context(&path, "opening"))?;
        Ok(Some(SavedSnapshot {
            record: current.record,
            image: Some(SnapshotImage::open_file(&path, file)),
        }))
    }

    fn forget_dedup_records_before(&self, time_micros: u64) {
        self.dedup_forgotten_before.fetch_max(time_micros, Ordering::AcqRel);
    }

    fn forget_change_events_through(&self, position: (u64, u32)) {
        let end = crate::keys::change_key(position.0, position.1);
        let dropped = self.read().and_then(|guard| {
            let db = guard.as_ref().ok_or_else(Self::closed)?;
            // Whole files, never a deletion: a file is dropped only if its
            // last key is at or before `end`. The family holds no deletions
            // that dropping a file could undo but in directories written
            // before trims stopped deleting, and what such a deletion would
            // bring back lies before the position, where no reader looks.
            db.delete_file_in_range_cf(family(db, Space::ChangeLog)?, &[][..], &end[..])?;
            Ok(())
        });
        if let Err(error) = dropped {
            // Harmless to the state: the events stay on disk until a later
            // call drops them.
            tracing::warn!(%error, ?position, "could not drop the change log's trimmed table files");
        }
    }

    fn discard_image(&self, image: &SnapshotImage) -> Result<(), EngineError> {
        let path = self.image_path(image)?;
        let current = self.current_snapshot()?.map(|current| current.image);
        if path.file_name().map(|name| name.to_string_lossy().into_owned()) != current {
            fs::remove_file(path).map_err(io_context(path, "removing"))?;
        }
        Ok(())
    }
}
