//! An in-memory engine for unit and simulation tests that behaves like a
//! disk: synced writes survive a simulated crash, buffered writes since the
//! last sync are lost.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::{
    collect_range, dedup_record_forgotten, Durability, Engine, Pair, Pairs, RangeRead, SavedSnapshot, Space,
    WriteBatch, WriteOp,
};
use crate::error::{decode, encode, EngineError};
use crate::snapshot::SnapshotImage;

type Spaces = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

#[derive(Default)]
struct State {
    /// What reads see: every write.
    current: Spaces,
    /// What survives a crash: writes up to the last synced one.
    durable: Spaces,
    /// Buffered batches not yet in `durable`, oldest first.
    unsynced: Vec<WriteBatch>,
    /// The current snapshot: its record and, if stored with one, its image.
    snapshot: Option<(Vec<u8>, Option<Vec<u8>>)>,
    /// A full volume: every write fails, reads still work.
    full: bool,
    /// [`Engine::modelled_sync_delay`]: in the shared state, so a
    /// simulation can slow one member's disk while it runs.
    sync_delay: std::time::Duration,
}

/// Cloning shares the same storage, the way two opens of one directory would.
#[derive(Clone, Default)]
pub struct MemoryEngine {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for MemoryEngine {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("MemoryEngine")
    }
}

/// The whole engine as a snapshot image holds it.
#[derive(Serialize, Deserialize)]
pub struct Image {
    spaces: Spaces,
}

impl MemoryEngine {
    pub fn new() -> Self {
        Self::default()
    }

    /// Models a disk whose syncs take `delay`: a background sync of the
    /// log waits that long (in the runtime's time) before it syncs.
    pub fn with_sync_delay(self, delay: std::time::Duration) -> Self {
        self.set_sync_delay(delay);
        self
    }

    /// Changes how long each background sync of the log waits from the
    /// next one on, as a disk that turns slow (or recovers) does.
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.lock().sync_delay = delay;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves maps that are still
        // consistent (every mutation is a single insert or remove), so the
        // poison flag carries no information here.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Simulates a lost disk: everything, synced or not, is gone.
    pub fn wipe(&self) {
        let mut state = self.lock();
        // A new disk of the same kind: it syncs as fast as the old one.
        *state = State {
            sync_delay: state.sync_delay,
            ..State::default()
        };
    }

    /// Simulates a crash: buffered writes since the last sync are lost.
    pub fn crash(&self) {
        let mut state = self.lock();
        state.current = state.durable.clone();
        state.unsynced.clear();
    }

    /// Simulates the volume filling (`true`) or getting space back: while
    /// full, every write fails the way RocksDB's does on ENOSPC, and
    /// changes nothing.
    pub fn set_full(&self, full: bool) {
        self.lock().full = full;
    }

    /// Every buffered batch reaches `durable`, as a sync of a write-ahead
    /// log makes every earlier record durable.
    fn make_durable(state: &mut State) {
        let pending = std::mem::take(&mut state.unsynced);
        for batch in &pending {
            apply(&mut state.durable, batch);
        }
    }

    fn refuse_when_full(state: &State) -> Result<(), EngineError> {
        if state.full {
            return Err(EngineError::io(
                "writing to a full volume",
                std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device"),
            ));
        }
        Ok(())
    }
}

fn apply(spaces: &mut Spaces, batch: &WriteBatch) {
    for op in &batch.ops {
        match op {
            WriteOp::Put { space, key, value } => {
                spaces
                    .entry(space.name().to_owned())
                    .or_default()
                    .insert(key.clone(), value.clone());
            }
            WriteOp::Delete { space, key } => {
                if let Some(map) = spaces.get_mut(space.name()) {
                    map.remove(key);
                }
            }
            WriteOp::DeleteRange { space, start, end } => {
                if let Some(map) = spaces.get_mut(space.name()) {
                    let doomed: Vec<Vec<u8>> = map
                        .range::<Vec<u8>, _>((Bound::Included(start), Bound::Excluded(end)))
                        .map(|(key, _)| key.clone())
                        .collect();
                    for key in doomed {
                        map.remove(&key);
                    }
                }
            }
        }
    }
}

impl Engine for MemoryEngine {
    type Checkpoint = Vec<u8>;
    type Prepared = Image;

    fn blocks_on_disk(&self) -> bool {
        false
    }

    fn modelled_sync_delay(&self) -> std::time::Duration {
        self.lock().sync_delay
    }

    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self
            .lock()
            .current
            .get(space.name())
            .and_then(|map| map.get(key).cloned()))
    }

    fn get_many(&self, space: Space, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, EngineError> {
        let state = self.lock();
        let map = state.current.get(space.name());
        Ok(keys
            .iter()
            .map(|key| map.and_then(|map| map.get(key).cloned()))
            .collect())
    }

    fn scan(&self, space: Space, start: &[u8], end: Option<&[u8]>, limit: usize) -> Result<Pairs, EngineError> {
        let state = self.lock();
        let Some(map) = state.current.get(space.name()) else {
            return Ok(Vec::new());
        };
        let upper = match end {
            Some(end) => Bound::Excluded(end.to_vec()),
            None => Bound::Unbounded,
        };
        Ok(map
            .range((Bound::Included(start.to_vec()), upper))
            .take(limit)
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect())
    }

    fn walk(&self, space: Space, start: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), EngineError> {
        let state = self.lock();
        if let Some(map) = state.current.get(space.name()) {
            for (key, value) in map.range::<[u8], _>((Bound::Included(start), Bound::Unbounded)) {
                if !visit(key, value) {
                    break;
                }
            }
        }
        Ok(())
    }

    fn read_ranges(
        &self,
        space: Space,
        ranges: &[RangeRead],
        keep: &dyn Fn(&[u8], &[u8]) -> bool,
    ) -> Result<Vec<Pairs>, EngineError> {
        // One lock for every range: no write lands between them.
        let state = self.lock();
        let empty = BTreeMap::new();
        let map = state.current.get(space.name()).unwrap_or(&empty);
        ranges
            .iter()
            .map(|range| {
                if range.start >= range.end {
                    return Ok(Vec::new());
                }
                let inside = map.range::<Vec<u8>, _>((Bound::Included(&range.start), Bound::Excluded(&range.end)));
                let pairs = |(key, value): (&Vec<u8>, &Vec<u8>)| Ok((key.clone(), value.clone()));
                if range.reverse {
                    collect_range(inside.rev().map(pairs), range, keep)
                } else {
                    collect_range(inside.map(pairs), range, keep)
                }
            })
            .collect()
    }

    fn last(&self, space: Space) -> Result<Option<Pair>, EngineError> {
        let state = self.lock();
        Ok(state
            .current
            .get(space.name())
            .and_then(|map| map.iter().next_back())
            .map(|(key, value)| (key.clone(), value.clone())))
    }

    fn write(&self, batch: WriteBatch, durability: Durability) -> Result<(), EngineError> {
        let mut state = self.lock();
        Self::refuse_when_full(&state)?;
        apply(&mut state.current, &batch);
        state.unsynced.push(batch);
        if durability == Durability::Synced {
            Self::make_durable(&mut state);
        }
        Ok(())
    }

    fn checkpoint(&self) -> Result<Vec<u8>, EngineError> {
        let state = self.lock();
        encode(
            "memory image",
            &Image {
                spaces: state.current.clone(),
            },
        )
    }

    fn pack(&self, checkpoint: Vec<u8>) -> Result<SnapshotImage, EngineError> {
        Ok(SnapshotImage::Memory(Cursor::new(checkpoint)))
    }

    fn sync_writes(&self) -> Result<(), EngineError> {
        let mut state = self.lock();
        // A full volume fails a sync too: what was buffered may need
        // blocks it cannot get.
        Self::refuse_when_full(&state)?;
        Self::make_durable(&mut state);
        Ok(())
    }

    fn receiving_image(&self) -> Result<SnapshotImage, EngineError> {
        Ok(SnapshotImage::Memory(Cursor::new(Vec::new())))
    }

    fn adopt_image(&self, image: SnapshotImage) -> Result<SnapshotImage, EngineError> {
        match image {
            SnapshotImage::Memory(_) => Ok(image),
            SnapshotImage::Unpacked(unpacked) => self.adopt_image(unpacked.pack_now()?),
            SnapshotImage::File { .. } => Err(EngineError::corrupt("memory image", "a file, not bytes")),
        }
    }

    fn prepare_restore(&self, image: &SnapshotImage) -> Result<Image, EngineError> {
        let bytes = image
            .bytes()
            .ok_or_else(|| EngineError::corrupt("memory image", "a file, not bytes"))?;
        decode("memory image", bytes)
    }

    fn finish_restore(&self, image: Image) -> Result<(), EngineError> {
        let mut state = self.lock();
        Self::refuse_when_full(&state)?;
        state.current = image.spaces.clone();
        state.durable = image.spaces;
        state.unsynced.clear();
        Ok(())
    }

    fn save_snapshot(&self, record: &[u8], image: Option<&SnapshotImage>) -> Result<(), EngineError> {
        let bytes = image
            .map(|image| {
                image
                    .bytes()
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| EngineError::corrupt("memory image", "a file, not bytes"))
            })
            .transpose()?;
        let mut state = self.lock();
        Self::refuse_when_full(&state)?;
        state.snapshot = Some((record.to_vec(), bytes));
        Ok(())
    }

    fn load_snapshot(&self) -> Result<Option<SavedSnapshot>, EngineError> {
        Ok(self.lock().snapshot.clone().map(|(record, image)| SavedSnapshot {
            record,
            image: image.map(|image| SnapshotImage::Memory(Cursor::new(image))),
        }))
    }

    fn forget_dedup_records_before(&self, time_micros: u64) {
        // At once, where RocksDB waits for a compaction: both are invisible
        // to every answer, and this keeps long simulations' memory flat.
        let mut state = self.lock();
        let State { current, durable, .. } = &mut *state;
        for spaces in [current, durable] {
            if let Some(records) = spaces.get_mut(Space::Dedup.name()) {
                records.retain(|_, value| !dedup_record_forgotten(value, time_micros));
            }
        }
    }

    fn forget_change_events_through(&self, position: (u64, u32)) {
        // Every event at once, where RocksDB drops whole files: the
        // simulation then catches a reader that looks past the position.
        let end = crate::keys::change_key(position.0, position.1);
        let mut state = self.lock();
        let State { current, durable, .. } = &mut *state;
        for spaces in [current, durable] {
            if let Some(events) = spaces.get_mut(Space::ChangeLog.name()) {
                *events = events.split_off(end.as_slice());
                events.remove(end.as_slice());
            }
        }
    }

    fn discard_image(&self, _image: &SnapshotImage) -> Result<(), EngineError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_loses_buffered_writes_and_keeps_synced_ones() -> Result<(), EngineError> {
        let engine = MemoryEngine::new();
        let mut first = WriteBatch::default();
        first.put(Space::Entries, b"a".to_vec(), b"1".to_vec());
        engine.write(first, Durability::Buffered)?;
        let mut second = WriteBatch::default();
        second.put(Space::Entries, b"b".to_vec(), b"2".to_vec());
        engine.write(second, Durability::Synced)?;
        let mut third = WriteBatch::default();
        third.put(Space::Entries, b"c".to_vec(), b"3".to_vec());
        engine.write(third, Durability::Buffered)?;
        engine.crash();
        // The sync of "b" also made the earlier buffered "a" durable, as a
        // write-ahead log would; "c" came after the last sync.
        assert_eq!(engine.get(Space::Entries, b"a")?, Some(b"1".to_vec()));
        assert_eq!(engine.get(Space::Entries, b"b")?, Some(b"2".to_vec()));
        assert_eq!(engine.get(Space::Entries, b"c")?, None);
        Ok(())
    }

    #[test]
    fn a_full_volume_refuses_writes_and_keeps_what_it_had() -> Result<(), EngineError> {
        let engine = MemoryEngine::new();
        let mut first = WriteBatch::default();
        first.put(Space::Entries, b"a".to_vec(), b"1".to_vec());
        engine.write(first, Durability::Synced)?;
        engine.set_full(true);
        let mut second = WriteBatch::default();
        second.put(Space::Entries, b"b".to_vec(), b"2".to_vec());
        let refused = engine.write(second.clone(), Durability::Synced);
        assert!(
            matches!(&refused, Err(error) if error.to_string().contains("No space left on device")),
            "{refused:?}"
        );
        assert_eq!(engine.get(Space::Entries, b"a")?, Some(b"1".to_vec()));
        assert_eq!(engine.get(Space::Entries, b"b")?, None);
        engine.set_full(false);
        engine.write(second, Durability::Synced)?;
        assert_eq!(engine.get(Space::Entries, b"b")?, Some(b"2".to_vec()));
        Ok(())
    }
}
