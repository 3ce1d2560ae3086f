//! Local reads of the state machine, for the node's read paths.
//!
//! A reader sees whatever this replica has applied; the node decides whether
//! that is fresh enough (read index, position barrier, or eventual).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::engine::{Engine, Space};
use crate::entry::StoredEntry;
use crate::error::{decode, EngineError};
use crate::keys;

/// A read handle on one replica's state. Clones share the engine.
pub struct StateReader<E: Engine> {
    engine: Arc<E>,
    applied: watch::Receiver<u64>,
}

impl<E: Engine> Clone for StateReader<E> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
            applied: self.applied.clone(),
        }
    }
}

/// The applied position did not reach the requested one in time.
#[derive(Debug, thiserror::Error)]
#[error("applied index {applied} did not reach {wanted} in time")]
pub struct NotCaughtUp {
    pub applied: u64,
    pub wanted: u64,
}

impl<E: Engine> StateReader<E> {
    pub(crate) fn new(engine: Arc<E>, applied: watch::Receiver<u64>) -> Self {
        Self { engine, applied }
    }

    /// The log index of the last entry applied on this replica.
    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Waits until this replica has applied `index`, for at most `timeout`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<u64, NotCaughtUp> {
        let mut applied = self.applied.clone();
        let waited = tokio::time::timeout(timeout, applied.wait_for(|applied| *applied >= index)).await;
        match waited {
            Ok(Ok(reached)) => Ok(*reached),
            _ => Err(NotCaughtUp {
                applied: self.applied_index(),
                wanted: index,
            }),
        }
    }

    /// The live entry at `key`, as of `now_micros`: an expired entry reads
    /// as absent.
    pub fn get_entry(&self, namespace: &str, key: &[u8], now_micros: u64) -> Result<Option<StoredEntry>, EngineError> {
        let Some(bytes) = self.engine.get(Space::Entries, &keys::entry_key(namespace, key))? else {
            return Ok(None);
        };
        let entry: StoredEntry = decode("entry", &bytes)?;
        Ok(entry.is_live_at(now_micros).then_some(entry))
    }

    /// Whether any entry is due for a sweep at `now_micros`.
    pub fn has_expired_entries(&self, now_micros: u64) -> Result<bool, EngineError> {
        let end = now_micros.saturating_add(1).to_be_bytes();
        Ok(!self.engine.scan(Space::Expiry, &[], Some(&end), 1)?.is_empty())
    }
}
