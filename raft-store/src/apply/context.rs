//! What every operation's apply works with: the state as the entry sees it,
//! the current command's own batch (which joins the entry's only if the
//! command is applied whole), the entry's position and the command's time.

use super::overlay::Overlay;
use crate::command::{Encoding, SessionLink};
use crate::engine::{Engine, Space, WriteBatch};
use crate::entry::{SourceId, StoredEntry};
use crate::error::EngineError;
use crate::queue::ReadyFloor;

/// One entry's apply, command by command.
pub(crate) struct ApplyContext<'a, E: Engine> {
    overlay: Overlay<'a, E>,
    /// The current command's writes.
    scratch: WriteBatch,
    position: SourceId,
    /// The current command's time: `max(command time, last applied time)`.
    now_micros: u64,
}

impl<'a, E: Engine> ApplyContext<'a, E> {
    pub(super) fn new(engine: &'a E, position: SourceId, ready_floor: ReadyFloor) -> Self {
        Self {
            overlay: Overlay::new(engine, ready_floor),
            scratch: WriteBatch::default(),
            position,
            now_micros: 0,
        }
    }

    /// Starts the next command of the entry, at `now_micros`.
    pub(super) fn begin_command(&mut self, now_micros: u64) {
        self.now_micros = now_micros;
        self.overlay.now_micros = now_micros;
        self.scratch = WriteBatch::default();
    }

    /// Adds the current command's writes to the entry's `batch`.
    pub(super) fn commit_command(&mut self, batch: &mut WriteBatch) {
        // A programmer error, not bad data, would get here with a key an
        // earlier command of the entry wrote: then one version would name
        // two values.
        debug_assert!(
            self.overlay.rewritten_key().is_none(),
            "a command that rewrites a key of its entry is committed"
        );
        batch.ops.append(&mut self.scratch.ops);
        self.overlay.settle();
    }

    /// Drops the current command's writes: it was refused.
    pub(super) fn discard_command(&mut self) {
        self.scratch = WriteBatch::default();
        self.overlay.discard();
    }

    /// The floor the entry leaves, for the next entry's apply.
    pub(super) fn into_ready_floor(self) -> ReadyFloor {
        self.overlay.into_ready_floor()
    }

    /// Where a claim's search for ready messages starts.
    pub(crate) fn ready_floor(&self) -> &ReadyFloor {
        self.overlay.ready_floor()
    }

    /// Moves the floor for the current command (kept if it is applied).
    pub(crate) fn move_ready_floor(&mut self, floor: ReadyFloor) {
        self.overlay.move_ready_floor(floor);
    }

    pub(super) fn overlay(&mut self) -> &mut Overlay<'a, E> {
        &mut self.overlay
    }

    pub(crate) fn engine(&self) -> &'a E {
        self.overlay.engine
    }

    pub(crate) fn now_micros(&self) -> u64 {
        self.now_micros
    }

    pub(crate) fn position(&self) -> SourceId {
        self.position
    }

    /// The version of every key this entry writes: its log index.
    pub(crate) fn version(&self) -> u64 {
        self.position.index
    }

    /// Where the entry sits in the log: the source of what it writes.
    pub(crate) fn source(&self) -> SourceId {
        self.position
    }

    /// A new stored entry written by this entry: its version and source.
    pub(crate) fn stored(
        &self,
        value: Vec<u8>,
        encoding: Encoding,
        expires_at_micros: Option<u64>,
        session: Option<SessionLink>,
    ) -> StoredEntry {
        StoredEntry {
            value,
            encoding,
            version: self.version(),
            expires_at_micros,
            source: self.source(),
            session,
        }
    }

    pub(crate) fn get(&mut self, entry_key: &[u8]) -> Result<Option<StoredEntry>, EngineError> {
        self.overlay.get(entry_key)
    }

    /// The entry at a key if it is live at the command's time.
    pub(crate) fn live(&mut self, entry_key: &[u8]) -> Result<Option<StoredEntry>, EngineError> {
        let now_micros = self.now_micros;
        self.live_at(entry_key, now_micros)
    }

    /// The entry at a key if it is live at `time_micros`.
    pub(crate) fn live_at(&mut self, entry_key: &[u8], time_micros: u64) -> Result<Option<StoredEntry>, EngineError> {
        Ok(self
            .overlay
            .get(entry_key)?
            .filter(|entry| entry.is_live_at(time_micros)))
    }

    pub(crate) fn put(&mut self, entry_key: Vec<u8>, entry: StoredEntry) -> Result<(), EngineError> {
        // What this entry writes has its index as version; what it only
        // touches (an expiry change, a renewal) keeps an older one.
        let index = self.position.index;
        debug_assert!(
            entry.version <= index && (entry.source.index != index || entry.version == index),
            "an entry written at index {index} carries version {} from index {}",
            entry.version,
            entry.source.index
        );
        self.overlay.put(&mut self.scratch, entry_key, entry)
    }

    /// Removes the entry at a key; answers what was stored there.
    pub(crate) fn remove(&mut self, entry_key: Vec<u8>) -> Result<Option<StoredEntry>, EngineError> {
        self.overlay.remove(&mut self.scratch, entry_key)
    }

    /// Deletes a raw key of an index space (not an entry).
    pub(crate) fn delete_raw(&mut self, space: Space, key: Vec<u8>) {
        self.scratch.delete(space, key);
    }

    /// Keys in `[start, end)` that this entry has read or written.
    pub(crate) fn written_between(&self, start: &[u8], end: &[u8]) -> Vec<Vec<u8>> {
        self.overlay.written_between(start, end)
    }

    /// Whether an earlier command of this entry wrote or removed the key:
    /// the current command may not write it again.
    pub(crate) fn written_by_earlier_command(&self, entry_key: &[u8]) -> bool {
        self.overlay.written_by_earlier_command(entry_key)
    }

    /// The sequence of the next message this entry enqueues.
    pub(crate) fn next_message_sequence(&mut self) -> u32 {
        self.overlay.next_message_sequence()
    }
}
