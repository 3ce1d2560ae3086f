//! Damage found when RocksDB opens a database: every table read once with
//! its checksums checked, and the refusal an operator reads, naming the
//! directory, the damaged file and what to do.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use rocksdb::DB;

use super::Space;
use crate::error::EngineError;

/// How much of the end of RocksDB's info log is read to find the file a
/// failed write-ahead log checksum was in: the lines of one open.
const INFO_LOG_TAIL_BYTES_MAX: u64 = 256 << 10;

/// Reads every table of every family once with block checksums checked,
/// so that a flipped bit anywhere in the stored state stops the open, with
/// RocksDB's error naming the file, instead of surfacing later in a read,
/// or never, in data read rarely. Costs one sequential read of the state
/// per start, bypassing the block cache.
pub(super) fn verify_tables(db: &DB) -> Result<(), rocksdb::Error> {
    for space in Space::ALL {
        let Some(family) = db.cf_handle(space.name()) else {
            continue;
        };
        let mut options = rocksdb::ReadOptions::default();
        options.set_verify_checksums(true);
        options.fill_cache(false);
        let mut iterator = db.raw_iterator_cf_opt(family, options);
        iterator.seek_to_first();
        while iterator.valid() {
            iterator.next();
        }
        iterator.status()?;
    }
    Ok(())
}

/// The error of an open: when it found damage, the directory, RocksDB's
/// words, the damaged file and what the operator can do.
pub(super) fn open_error(path: &Path, error: rocksdb::Error) -> EngineError {
    if error.kind() != rocksdb::ErrorKind::Corruption {
        return EngineError::Rocks(error);
    }
    // A table's damage names its file; a write-ahead log record's names
    // only the checksum, and the file is in RocksDB's info log.
    let file = match damaged_log_file(path) {
        Some(file) if !error.to_string().contains(&file) => format!(" in {file}"),
        _ => String::new(),
    };
    EngineError::corrupt(
        "database",
        format!(
            "{}: {error}{file}; this member cannot start on it. Move its data directory aside and start \
             it with an empty one: the leader readmits it as a learner and it catches up from its peers",
            path.display()
        ),
    )
}

/// The write-ahead log file whose record RocksDB dropped as damaged during
/// this open, from the last such line of its info log (`LOG`, started
/// afresh at every open): `<file>: dropping <n> bytes; Corruption: ...`.
fn damaged_log_file(path: &Path) -> Option<String> {
    let mut log = std::fs::File::open(path.join("LOG")).ok()?;
    let length = log.metadata().ok()?.len();
    log.seek(SeekFrom::Start(length.saturating_sub(INFO_LOG_TAIL_BYTES_MAX)))
        .ok()?;
    let mut tail = Vec::new();
    log.take(INFO_LOG_TAIL_BYTES_MAX).read_to_end(&mut tail).ok()?;
    let tail = String::from_utf8_lossy(&tail);
    let line = tail
        .lines()
        .rev()
        .find(|line| line.contains(": dropping ") && line.contains("Corruption"))?;
    let before = &line[..line.find(": dropping ")?];
    let file = before.rsplit(' ').next()?;
    let name = Path::new(file).file_name()?.to_str()?;
    name.ends_with(".log").then(|| name.to_string())
}
