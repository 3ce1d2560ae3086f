//! A member's open backups: each an image file taken by
//! `lode_raft_store::backup::take`, read in chunks by one client until it
//! ends the backup or leaves it unread for a minute, then removed. At most
//! two are open at once, and one is taken at a time, so backups bound the
//! disk they use and never stall the member's applies.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lode_client::LodeError;
use lode_raft_store::SelectedEngine;
use lode_types::backup::{BackupHeader, BACKUP_CHUNK_BYTES_MAX};

/// Most backups open on one member at once.
pub const BACKUPS_OPEN_MAX: usize = 2;
/// How long an open backup may go unread before it is removed.
pub const BACKUP_IDLE_MS_MAX: u64 = 60_000;

struct OpenBackup {
    image: PathBuf,
    file: Arc<std::fs::File>,
    image_bytes: u64,
    last_read: tokio::time::Instant,
}

impl Drop for OpenBackup {
    fn drop(&mut self) {
        // A read still running keeps its handle; the name goes now.
        if let Err(error) = std::fs::remove_file(&self.image) {
            tracing::warn!(image = %self.image.display(), %error, "could not remove a backup image");
        }
    }
}

/// The backups open on this member.
pub struct Backups {
    engine: Arc<SelectedEngine>,
    open: Mutex<BTreeMap<u64, OpenBackup>>,
    /// Held while one is taken: taking reads the whole state.
    taking: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
}

fn internal(action: &str, error: impl std::fmt::Display) -> LodeError {
    tracing::error!(%error, "{action} failed");
    LodeError::Unavailable(format!("{action} failed: {error}"))
}

impl Backups {
    pub fn new(engine: Arc<SelectedEngine>) -> Self {
        Self {
            engine,
            open: Mutex::new(BTreeMap::new()),
            taking: tokio::sync::Mutex::new(()),
            next_id: AtomicU64::new(1),
        }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, OpenBackup>> {
        // A panic while holding the lock leaves whole entries only.
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn remove_idle(&self) {
        let idle = Duration::from_millis(BACKUP_IDLE_MS_MAX);
        let now = tokio::time::Instant::now();
        self.open()
            .retain(|_, backup| now.saturating_duration_since(backup.last_read) < idle);
    }

    /// Takes a backup of the state as applied now; answers its id and
    /// header.
    pub async fn take(
        &self,
        cluster_id: u128,
        member_id: u64,
        now_micros: u64,
    ) -> Result<(u64, BackupHeader), LodeError> {
        let _taking = self.taking.lock().await;
        self.remove_idle();
        if self.open().len() >= BACKUPS_OPEN_MAX {
            return Err(LodeError::Unavailable(format!(
                "{BACKUPS_OPEN_MAX} backups are open on this member (backups_open_max); \
                 try again once one ends or after {} s unread",
                BACKUP_IDLE_MS_MAX / 1000
            )));
        }
        if self.engine.as_rocks().is_none() {
            return Err(LodeError::Unsupported(
                "this member keeps its state in memory; backups are taken of members on disk".to_owned(),
            ));
        }
        let engine = self.engine.clone();
        let taken = tokio::task::spawn_blocking(move || {
            let rocks = engine
                .as_rocks()
                .ok_or_else(|| "the engine is not RocksDB".to_owned())?;
            let taken = lode_raft_store::backup::take(rocks, cluster_id, member_id, now_micros)
                .map_err(|error| error.to_string())?;
            let file = std::fs::File::open(&taken.image).map_err(|error| error.to_string())?;
            Ok::<_, String>((taken, file))
        })
        .await
        .map_err(|error| internal("taking a backup", error))?
        .map_err(|error| internal("taking a backup", error))?;
        let (taken, file) = taken;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let backup = OpenBackup {
            image: taken.image,
            file: Arc::new(file),
            image_bytes: taken.header.image_bytes,
            last_read: tokio::time::Instant::now(),
        };
        self.open().insert(id, backup);
        tracing::info!(
            backup = id,
            bytes = taken.header.image_bytes,
            index = taken.header.last_log_index,
            "took a backup"
        );
        Ok((id, taken.header))
    }

    /// At most `length` bytes of backup `id`'s image from `offset`.
    pub async fn read(&self, id: u64, offset: u64, length: u32) -> Result<Vec<u8>, LodeError> {
        if length > BACKUP_CHUNK_BYTES_MAX {
            return Err(LodeError::Invalid(format!(
                "length {length} is over {BACKUP_CHUNK_BYTES_MAX} bytes (backup_chunk_bytes_max)"
            )));
        }
        self.remove_idle();
        let (file, image_bytes) = {
            let mut open = self.open();
            let backup = open.get_mut(&id).ok_or_else(|| {
                LodeError::NotFound(format!(
                    "backup {id} is not open on this member (ended, unread for {} s, or taken elsewhere)",
                    BACKUP_IDLE_MS_MAX / 1000
                ))
            })?;
            backup.last_read = tokio::time::Instant::now();
            (backup.file.clone(), backup.image_bytes)
        };
        if offset > image_bytes {
            return Err(LodeError::Invalid(format!(
                "offset {offset} is past the image's {image_bytes} bytes"
            )));
        }
        let wanted = (image_bytes - offset).min(u64::from(length)) as usize;
        tokio::task::spawn_blocking(move || {
            let mut chunk = vec![0u8; wanted];
            file.read_exact_at(&mut chunk, offset).map(|()| chunk)
        })
        .await
        .map_err(|error| internal("reading a backup", error))?
        .map_err(|error| internal("reading a backup", error))
    }

    /// Removes backup `id`; ending one that is gone is no error.
    pub fn end(&self, id: u64) {
        self.open().remove(&id);
    }
}
