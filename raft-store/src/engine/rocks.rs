//! The production engine: one RocksDB instance with a column family per
//! [`Space`].
//!
//! Directory layout under the engine's root:
//! - `db/`: the live database;
//! - `db.installing/`: a snapshot image being restored, complete and fsynced
//!   before it is renamed over `db/`;
//! - `checkpoint-N.tmp/`: a RocksDB checkpoint being packed for a snapshot;
//! - `snapshot`: the current snapshot, replaced by write-to-temp, fsync,
//!   rename, fsync of the directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteOptions, DB};
use serde::{Deserialize, Serialize};

use super::{collect_range, Durability, Engine, Pair, Pairs, RangeRead, Space, WriteBatch, WriteOp};
use crate::error::{decode, encode, EngineError};

/// Most files a packed image may hold; a checkpoint of a live database has a
/// few dozen.
const IMAGE_FILES_MAX: usize = 100_000;

pub struct RocksEngine {
    root: PathBuf,
    /// `None` only in the moment a restore swaps databases, or after a
    /// restore failed to reopen.
    db: RwLock<Option<DB>>,
    checkpoint_sequence: AtomicU64,
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

impl Drop for RocksCheckpoint {
    fn drop(&mut self) {
        if self.directory.exists() {
            if let Err(error) = fs::remove_dir_all(&self.directory) {
                tracing::warn!(directory = %self.directory.display(), %error, "could not remove a checkpoint directory");
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
struct PackedImage {
    files: Vec<(String, serde_bytes::ByteBuf)>,
}

fn options() -> Options {
    let mut options = Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    options.set_compression_type(rocksdb::DBCompressionType::Lz4);
    options.set_max_background_jobs(2);
    options.set_keep_log_file_num(4);
    options
}

fn open_database(path: &Path) -> Result<DB, EngineError> {
    let families = Space::ALL
        .iter()
        .map(|space| ColumnFamilyDescriptor::new(space.name(), options()));
    Ok(DB::open_cf_descriptors(&options(), path, families)?)
}

/// Writes the files of a packed image into a fresh `directory`, synced.
fn unpack(packed: &[u8], directory: &Path) -> Result<(), EngineError> {
    let image: PackedImage = decode("packed image", packed)?;
    if image.files.len() > IMAGE_FILES_MAX {
        return Err(EngineError::corrupt(
            "packed image",
            format!("{} files, over {IMAGE_FILES_MAX}", image.files.len()),
        ));
    }
    if directory.exists() {
        fs::remove_dir_all(directory).map_err(io_context(directory, "removing"))?;
    }
    fs::create_dir_all(directory).map_err(io_context(directory, "creating"))?;
    for (name, contents) in &image.files {
        let plain = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
        if !plain {
            return Err(EngineError::corrupt("packed image", format!("file name {name:?}")));
        }
        let path = directory.join(name);
        let mut file = fs::File::create(&path).map_err(io_context(&path, "creating"))?;
        std::io::Write::write_all(&mut file, contents).map_err(io_context(&path, "writing"))?;
        file.sync_all().map_err(io_context(&path, "syncing"))?;
    }
    sync_directory(directory)
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
        let db = open_database(&live)?;
        Ok(Self {
            root,
            db: RwLock::new(Some(db)),
            checkpoint_sequence: AtomicU64::new(0),
        })
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
        let mut out = Vec::new();
        for item in db.iterator_cf(family(db, space)?, IteratorMode::From(start, Direction::Forward)) {
            if out.len() >= limit {
                break;
            }
            let (key, value) = item?;
            if end.is_some_and(|end| key.as_ref() >= end) {
                break;
            }
            out.push((key.into_vec(), value.into_vec()));
        }
        Ok(out)
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
        rocksdb::checkpoint::Checkpoint::new(db)?.create_checkpoint(&directory)?;
        Ok(RocksCheckpoint { directory })
    }

    fn pack(checkpoint: RocksCheckpoint) -> Result<Vec<u8>, EngineError> {
        let mut files = Vec::new();
        let listing = fs::read_dir(&checkpoint.directory).map_err(io_context(&checkpoint.directory, "listing"))?;
        for item in listing {
            let item = item.map_err(io_context(&checkpoint.directory, "listing"))?;
            let path = item.path();
            let name = item.file_name().to_string_lossy().into_owned();
            let contents = fs::read(&path).map_err(io_context(&path, "reading"))?;
            files.push((name, serde_bytes::ByteBuf::from(contents)));
        }
        files.sort();
        encode("packed image", &PackedImage { files })
    }

    fn check_image(&self, packed: &[u8]) -> Result<(), EngineError> {
        let checking = self.root.join("db.checking");
        let opened = unpack(packed, &checking).and_then(|()| open_database(&checking).map(drop));
        if checking.exists() {
            fs::remove_dir_all(&checking).map_err(io_context(&checking, "removing"))?;
        }
        opened.map_err(|error| EngineError::corrupt("packed image", format!("does not open as a database: {error}")))
    }

    fn restore(&self, packed: &[u8]) -> Result<(), EngineError> {
        let installing = self.root.join("db.installing");
        unpack(packed, &installing)?;

        let live = self.root.join("db");
        let old = self.root.join("db.old");
        let mut guard = self.db.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        drop(guard.take());
        fs::rename(&live, &old).map_err(io_context(&live, "renaming"))?;
        fs::rename(&installing, &live).map_err(io_context(&installing, "renaming"))?;
        sync_directory(&self.root)?;
        *guard = Some(open_database(&live)?);
        drop(guard);
        fs::remove_dir_all(&old).map_err(io_context(&old, "removing"))?;
        Ok(())
    }

    fn save_snapshot(&self, bytes: &[u8]) -> Result<(), EngineError> {
        let temporary = self.root.join("snapshot.tmp");
        let target = self.root.join("snapshot");
        let mut file = fs::File::create(&temporary).map_err(io_context(&temporary, "creating"))?;
        std::io::Write::write_all(&mut file, bytes).map_err(io_context(&temporary, "writing"))?;
        file.sync_all().map_err(io_context(&temporary, "syncing"))?;
        fs::rename(&temporary, &target).map_err(io_context(&temporary, "renaming"))?;
        sync_directory(&self.root)
    }

    fn load_snapshot(&self) -> Result<Option<Vec<u8>>, EngineError> {
        let target = self.root.join("snapshot");
        match fs::read(&target) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(EngineError::io(format!("reading {}", target.display()), error)),
        }
    }
}
