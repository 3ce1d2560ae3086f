//! Where queue messages are stored, and the reads the leader's sweep and
//! listeners' waits make; the apply of queue operations is
//! `apply/queue.rs`.
//!
//! Messages are entries of three internal namespaces (NUL-prefixed, so no
//! change events and no user scan sees them): `ready`, keyed by delivery
//! time then id so the next due message is the first key; `claimed`, keyed
//! by id; and `overdue`, keyed by the time a claim's visibility ends then
//! id, so requeueing reads the oldest first.

use crate::command::MessageId;
use crate::engine::{Engine, Space};
use crate::error::EngineError;
use crate::keys;

pub(crate) const READY: &str = "\0queue\0ready";
pub(crate) const CLAIMED: &str = "\0queue\0claimed";
pub(crate) const OVERDUE: &str = "\0queue\0overdue";

pub(crate) fn id_bytes(id: MessageId) -> [u8; 12] {
    keys::change_key(id.index, id.sequence)
}

fn id_from_bytes(bytes: &[u8]) -> Option<MessageId> {
    let index = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    let sequence = u32::from_be_bytes(bytes.get(8..12)?.try_into().ok()?);
    Some(MessageId { index, sequence })
}

/// The time and id of a stored `ready` or `overdue` key.
pub(crate) fn split_timed_key(stored_key: &[u8]) -> Result<(u64, MessageId), EngineError> {
    let (_, suffix) =
        keys::split_entry_key(stored_key).ok_or_else(|| EngineError::corrupt("queue key", "no namespace"))?;
    let at = suffix.get(..8).and_then(|bytes| <[u8; 8]>::try_from(bytes).ok());
    match (at, suffix.get(8..).and_then(id_from_bytes)) {
        (Some(at), Some(id)) => Ok((u64::from_be_bytes(at), id)),
        _ => Err(EngineError::corrupt("queue key", "shorter than 20 bytes")),
    }
}

pub(crate) fn timed_key(namespace: &str, at_micros: u64, id: MessageId) -> Vec<u8> {
    let mut key = at_micros.to_be_bytes().to_vec();
    key.extend_from_slice(&id_bytes(id));
    keys::entry_key(namespace, &key)
}

/// When the next ready message is due, if any: searched from the floor
/// apply last published, so a listener's wait, which asks after every
/// applied entry, steps over no removed message.
pub fn next_due_micros<E: Engine>(engine: &E, floor: &PublishedReadyFloor) -> Result<Option<u64>, EngineError> {
    let start = floor.read().start();
    let end = keys::prefix_end(&keys::namespace_prefix(READY));
    let first = engine.scan(Space::Entries, &start, end.as_deref(), 1)?;
    first
        .first()
        .map(|(key, _)| split_timed_key(key).map(|(at, _)| at))
        .transpose()
}

/// Whether a claim's visibility has run out by `now_micros`.
pub fn has_overdue<E: Engine>(engine: &E, now_micros: u64) -> Result<bool, EngineError> {
    let start = keys::namespace_prefix(OVERDUE);
    let end = keys::entry_key(OVERDUE, &now_micros.saturating_add(1).to_be_bytes());
    Ok(!engine.scan(Space::Entries, &start, Some(&end), 1)?.is_empty())
}

/// Where a claim's search for the next due message starts: no stored ready
/// message is below it. Kept in memory by the state machine and moved only
/// by apply; readers see it once the entry that moved it is on the engine
/// ([`PublishedReadyFloor`]).
///
/// A claim takes the first due message and removes its key, and RocksDB
/// keeps each removed key as a tombstone until compaction drops it. A scan
/// from the namespace's start steps over every tombstone of the messages
/// taken since: with 64 consumers the leader spent 79% of its CPU there,
/// and each claim cost more than the one before (`docs/performance.md`,
/// twenty-third round). Starting at the floor steps over none of them.
///
/// Apply lowers the floor when it writes a ready key below it (an enqueue,
/// a failed delivery due again) and raises it to the first present key a
/// claim's search finds. A command refused after moving it leaves it where
/// it was (`Overlay::discard`). A restart or an installed snapshot starts
/// again from the namespace's start, which is always right.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadyFloor {
    /// None: the namespace's start.
    key: Option<Vec<u8>>,
}

impl ReadyFloor {
    /// The first stored key a search for ready messages looks at.
    pub(crate) fn start(&self) -> Vec<u8> {
        self.key.clone().unwrap_or_else(|| keys::namespace_prefix(READY))
    }

    /// The floor once `entry_key` is written: a ready key below the floor
    /// lowers it. Asked at every write apply makes, so it allocates nothing
    /// unless the floor moves.
    pub(crate) fn lowered_to(&self, entry_key: &[u8]) -> Option<ReadyFloor> {
        // At the namespace's start, no ready key is below the floor.
        let floor = self.key.as_deref()?;
        (entry_key < floor && is_ready_key(entry_key)).then(|| ReadyFloor {
            key: Some(entry_key.to_vec()),
        })
    }

    /// A floor at `entry_key`, below which a search found no message.
    pub(crate) fn at(entry_key: Vec<u8>) -> ReadyFloor {
        ReadyFloor { key: Some(entry_key) }
    }
}

/// Whether a stored entry key is in the ready namespace
/// (`keys::entry_key(READY, ..)`).
fn is_ready_key(entry_key: &[u8]) -> bool {
    let length = (READY.len() as u16).to_be_bytes();
    entry_key
        .strip_prefix(&length[..])
        .is_some_and(|rest| rest.starts_with(READY.as_bytes()))
}

/// The ready floor as of the last entry written to the engine, shared by
/// the state machine and its readers.
///
/// Published after the entry's batch is written and before the applied
/// index moves on: a reader that missed a message below the floor it read
/// had read the applied index before that entry, and a wait for the next
/// applied entry wakes it to look again.
#[derive(Clone, Debug, Default)]
pub struct PublishedReadyFloor(std::sync::Arc<std::sync::Mutex<ReadyFloor>>);

impl PublishedReadyFloor {
    pub(crate) fn read(&self) -> ReadyFloor {
        // Every critical section is one clone or one assignment.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    pub(crate) fn publish(&self, floor: ReadyFloor) {
        *self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = floor;
    }
}
