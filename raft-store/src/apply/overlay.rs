//! The state as the entry being applied sees it: the engine, plus what
//! the entry's earlier commands wrote, plus what the current command has
//! written so far. Every write goes through here, so the expiry index and
//! the change events follow every entry written or removed.

use std::collections::{BTreeMap, BTreeSet};

use super::change_log::{user_key, Change};
use crate::command::{ChangeKind, CommandOutcome, OpId};
use crate::engine::{Engine, Space, WriteBatch};
use crate::entry::StoredEntry;
use crate::error::{decode, encode, EngineError};
use crate::keys;
use crate::queue::ReadyFloor;

/// The state as the entry being applied sees it: the engine, plus what the
/// entry's earlier commands wrote (`settled`), plus what the current command
/// has written so far (`pending`, dropped if the command is rejected).
pub(super) struct Overlay<'a, E: Engine> {
    pub(super) engine: &'a E,
    settled: BTreeMap<Vec<u8>, Option<StoredEntry>>,
    pending: BTreeMap<Vec<u8>, Option<StoredEntry>>,
    /// Entry keys written by settled commands: a key is written at most once
    /// per log entry, so that a version names exactly one value.
    written: BTreeSet<Vec<u8>>,
    /// Op ids of settled commands, with their outcomes.
    pub(super) outcomes: BTreeMap<OpId, CommandOutcome>,
    /// The current command's time: what "live" means for change events.
    pub(super) now_micros: u64,
    /// Change events of the current command, and of the settled ones.
    pending_changes: Vec<Change>,
    pub(super) settled_changes: Vec<Change>,
    /// Queue messages this entry enqueued so far: the next one's sequence.
    enqueued: u32,
    /// Where claims search for ready messages, as of the settled commands,
    /// and as the current command moved it.
    ready_floor: ReadyFloor,
    pending_ready_floor: Option<ReadyFloor>,
}

impl<'a, E: Engine> Overlay<'a, E> {
    pub(super) fn new(engine: &'a E, ready_floor: ReadyFloor) -> Self {
        Self {
            ready_floor,
            pending_ready_floor: None,
            engine,
            settled: BTreeMap::new(),
            pending: BTreeMap::new(),
            written: BTreeSet::new(),
            outcomes: BTreeMap::new(),
            now_micros: 0,
            pending_changes: Vec::new(),
            settled_changes: Vec::new(),
            enqueued: 0,
        }
    }

    /// The sequence of the next message this entry enqueues: ids stay
    /// unique even for commands the entry refuses.
    pub(super) fn next_message_sequence(&mut self) -> u32 {
        let sequence = self.enqueued;
        self.enqueued = self.enqueued.saturating_add(1);
        sequence
    }

    /// Where a claim's search for ready messages starts.
    pub(super) fn ready_floor(&self) -> &ReadyFloor {
        self.pending_ready_floor.as_ref().unwrap_or(&self.ready_floor)
    }

    /// Moves the floor for the current command (kept if it is applied).
    pub(super) fn move_ready_floor(&mut self, floor: ReadyFloor) {
        self.pending_ready_floor = Some(floor);
    }

    /// The floor the entry leaves, for the next entry's apply.
    pub(super) fn into_ready_floor(self) -> ReadyFloor {
        self.ready_floor
    }

    /// Keys in `[start, end)` that this entry has read or written.
    pub(super) fn written_between(&self, start: &[u8], end: &[u8]) -> Vec<Vec<u8>> {
        let range = (
            std::ops::Bound::Included(start.to_vec()),
            std::ops::Bound::Excluded(end.to_vec()),
        );
        self.pending
            .range(range.clone())
            .chain(self.settled.range(range))
            .map(|(key, _)| key.clone())
            .collect()
    }

    pub(super) fn get(&mut self, entry_key: &[u8]) -> Result<Option<StoredEntry>, EngineError> {
        if let Some(entry) = self.pending.get(entry_key).or_else(|| self.settled.get(entry_key)) {
            return Ok(entry.clone());
        }
        let stored = match self.engine.get(Space::Entries, entry_key)? {
            Some(bytes) => Some(decode::<StoredEntry>("entry", &bytes)?),
            None => None,
        };
        // Caching an engine read in `settled` is safe: it is what every
        // command of this entry would read.
        self.settled.insert(entry_key.to_vec(), stored.clone());
        Ok(stored)
    }

    pub(super) fn put(
        &mut self,
        batch: &mut WriteBatch,
        entry_key: Vec<u8>,
        entry: StoredEntry,
    ) -> Result<(), EngineError> {
        let previous = self.get(&entry_key)?;
        if let Some((namespace, key)) = user_key(&entry_key) {
            let live_previous = previous
                .as_ref()
                .filter(|previous| previous.is_live_at(self.now_micros));
            // An expiry change keeps value and version: not a change of value.
            let value_changed =
                live_previous.is_none_or(|previous| previous.version != entry.version || previous.value != entry.value);
            if value_changed {
                self.pending_changes.push(Change {
                    namespace,
                    key,
                    kind: if live_previous.is_some() {
                        ChangeKind::Updated
                    } else {
                        ChangeKind::Created
                    },
                    old_value: live_previous.map(|previous| previous.value.clone()),
                    new_value: Some(entry.value.clone()),
                    encoding: entry.encoding.clone(),
                    version: entry.version,
                });
            }
        }
        if let Some(expires_at) = previous.as_ref().and_then(|previous| previous.expires_at_micros) {
            batch.delete(Space::Expiry, keys::expiry_key(expires_at, &entry_key));
        }
        if let Some(expires_at) = entry.expires_at_micros {
            batch.put(Space::Expiry, keys::expiry_key(expires_at, &entry_key), Vec::new());
        }
        batch.put(Space::Entries, entry_key.clone(), encode("entry", &entry)?);
        if let Some(lowered) = self.ready_floor().lowered_to(&entry_key) {
            self.pending_ready_floor = Some(lowered);
        }
        self.pending.insert(entry_key, Some(entry));
        Ok(())
    }

    pub(super) fn remove(
        &mut self,
        batch: &mut WriteBatch,
        entry_key: Vec<u8>,
    ) -> Result<Option<StoredEntry>, EngineError> {
        let previous = self.get(&entry_key)?;
        let live_previous = previous
            .as_ref()
            .filter(|previous| previous.is_live_at(self.now_micros));
        if let (Some((namespace, key)), Some(live_previous)) = (user_key(&entry_key), live_previous) {
            self.pending_changes.push(Change {
                namespace,
                key,
                kind: ChangeKind::Deleted,
                old_value: Some(live_previous.value.clone()),
                new_value: None,
                encoding: live_previous.encoding.clone(),
                version: live_previous.version,
            });
        }
        if let Some(previous) = &previous {
            if let Some(expires_at) = previous.expires_at_micros {
                batch.delete(Space::Expiry, keys::expiry_key(expires_at, &entry_key));
            }
            batch.delete(Space::Entries, entry_key.clone());
        }
        self.pending.insert(entry_key, None);
        Ok(previous)
    }

    /// Whether a settled command of the entry wrote or removed the key.
    pub(super) fn written_by_earlier_command(&self, entry_key: &[u8]) -> bool {
        self.written.contains(entry_key)
    }

    /// The first key the pending command writes that an earlier command of
    /// the entry already wrote.
    pub(super) fn rewritten_key(&self) -> Option<&Vec<u8>> {
        self.pending.keys().find(|key| self.written.contains(*key))
    }

    pub(super) fn settle(&mut self) {
        for (key, entry) in std::mem::take(&mut self.pending) {
            self.written.insert(key.clone());
            self.settled.insert(key, entry);
        }
        let changes = std::mem::take(&mut self.pending_changes);
        self.settled_changes.extend(changes);
        if let Some(floor) = self.pending_ready_floor.take() {
            self.ready_floor = floor;
        }
    }

    pub(super) fn discard(&mut self) {
        self.pending.clear();
        self.pending_changes.clear();
        self.pending_ready_floor = None;
    }
}
