//! State stores: the small get/set/delete interface agents use for
//! checkpoints, cursor offsets and duplicate-suppression keys. Keys are
//! strings, values are bytes.
//!
//! - [`InMemoryStore`] lives in the process and is gone on restart;
//! - [`FileStore`] keeps one file per key under a directory and survives
//!   restarts: a value is replaced by writing a temporary file, fsyncing it,
//!   renaming it over the old one and fsyncing the directory, so a crash
//!   leaves either the old value or the new one, never a torn one;
//! - a [`Kv`] handle is the managed store: it writes without expiry and
//!   keeps the key and value limits.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::LodeError;
use crate::kv::Kv;

/// Get, set and delete of byte values by string key.
pub trait StateStore: Send + Sync {
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, LodeError>> + Send;
    fn set(&self, key: &str, value: Vec<u8>) -> impl Future<Output = Result<(), LodeError>> + Send;
    /// True when a value was removed.
    fn delete(&self, key: &str) -> impl Future<Output = Result<bool, LodeError>> + Send;
}

/// A store in this process's memory.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    values: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl InMemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn values(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        // Every change is one insert or remove: a poisoned map is still whole.
        self.values.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl StateStore for InMemoryStore {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, LodeError> {
        Ok(self.values().get(key).cloned())
    }

    async fn set(&self, key: &str, value: Vec<u8>) -> Result<(), LodeError> {
        self.values().insert(key.to_owned(), value);
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<bool, LodeError> {
        Ok(self.values().remove(key).is_some())
    }
}

/// A store of one file per key under a directory; the file name is the
/// key's UTF-8 bytes in hex.
#[derive(Debug, Clone)]
pub struct FileStore {
    root: PathBuf,
}

/// Suffix of a value being written; such files are never read as values.
const TEMPORARY_SUFFIX: &str = ".tmp";

fn io_error(action: &str, path: &Path, error: std::io::Error) -> LodeError {
    LodeError::Unavailable(format!("{action} {}: {error}", path.display()))
}

impl FileStore {
    /// A store under `root`, created on first write.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn path(&self, key: &str) -> PathBuf {
        let name: String = key.as_bytes().iter().map(|byte| format!("{byte:02x}")).collect();
        // An empty key still needs a file name.
        self.root.join(format!("k{name}"))
    }

    async fn sync_root(&self) -> Result<(), LodeError> {
        let directory = tokio::fs::File::open(&self.root)
            .await
            .map_err(|error| io_error("opening", &self.root, error))?;
        directory
            .sync_all()
            .await
            .map_err(|error| io_error("syncing", &self.root, error))
    }
}

impl StateStore for FileStore {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, LodeError> {
        let path = self.path(key);
        match tokio::fs::read(&path).await {
            Ok(value) => Ok(Some(value)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io_error("reading", &path, error)),
        }
    }

    async fn set(&self, key: &str, value: Vec<u8>) -> Result<(), LodeError> {
        tokio::fs::create_dir_all(&self.root)
            .await
            .map_err(|error| io_error("creating", &self.root, error))?;
        let path = self.path(key);
        let temporary = path.with_extension(format!("{:032x}{TEMPORARY_SUFFIX}", crate::facade::random_u128()));
        let mut file = tokio::fs::File::create(&temporary)
            .await
            .map_err(|error| io_error("creating", &temporary, error))?;
        tokio::io::AsyncWriteExt::write_all(&mut file, &value)
            .await
            .map_err(|error| io_error("writing", &temporary, error))?;
        file.sync_all()
            .await
            .map_err(|error| io_error("syncing", &temporary, error))?;
        drop(file);
        tokio::fs::rename(&temporary, &path)
            .await
            .map_err(|error| io_error("renaming", &temporary, error))?;
        self.sync_root().await
    }

    async fn delete(&self, key: &str) -> Result<bool, LodeError> {
        let path = self.path(key);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => {
                self.sync_root().await?;
                Ok(true)
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(io_error("removing", &path, error)),
        }
    }
}

/// The managed store: entries of this namespace, written without expiry.
impl StateStore for Kv {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, LodeError> {
        Kv::get(self, key).await
    }

    async fn set(&self, key: &str, value: Vec<u8>) -> Result<(), LodeError> {
        Kv::set(self, key).bytes(value).send().await.map(|_| ())
    }

    async fn delete(&self, key: &str) -> Result<bool, LodeError> {
        Kv::delete(self, key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn behaves_like_a_store(store: &impl StateStore) {
        assert_eq!(store.get("cursor:metrics").await.expect("get"), None);
        store.set("cursor:metrics", b"42".to_vec()).await.expect("set");
        assert_eq!(store.get("cursor:metrics").await.expect("get"), Some(b"42".to_vec()));
        store.set("cursor:metrics", b"43".to_vec()).await.expect("replace");
        assert_eq!(store.get("cursor:metrics").await.expect("get"), Some(b"43".to_vec()));
        store.set("", Vec::new()).await.expect("empty key and value");
        assert_eq!(store.get("").await.expect("get"), Some(Vec::new()));
        assert!(store.delete("cursor:metrics").await.expect("delete"));
        assert!(!store.delete("cursor:metrics").await.expect("delete again"));
        assert_eq!(store.get("cursor:metrics").await.expect("get"), None);
    }

    #[tokio::test]
    async fn the_in_memory_store_gets_sets_and_deletes() {
        behaves_like_a_store(&InMemoryStore::new()).await;
    }

    #[tokio::test]
    async fn the_file_store_gets_sets_and_deletes() {
        let directory = std::env::temp_dir().join(format!("lode-file-store-{:x}", crate::facade::random_u128()));
        behaves_like_a_store(&FileStore::new(&directory)).await;
        let _ = std::fs::remove_dir_all(directory);
    }
}
