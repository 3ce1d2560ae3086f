//! The engine a node runs on, chosen when it starts: RocksDB in production,
//! memory in the deterministic simulation. One concrete type keeps the node,
//! its request handlers and its reader free of an engine type parameter.

use super::memory::{Image, MemoryEngine};
use super::rocks::{RocksCheckpoint, RocksEngine, RocksPrepared};
use super::{Durability, Engine, Pair, Pairs, RangeRead, SavedSnapshot, Space, WriteBatch};
use crate::error::EngineError;
use crate::snapshot::SnapshotImage;

/// RocksDB on disk or the in-memory engine with its crash model.
#[derive(Debug)]
pub enum SelectedEngine {
    Rocks(RocksEngine),
    Memory(MemoryEngine),
}

impl SelectedEngine {
    /// The RocksDB engine, if this is one: backups are files of it.
    pub fn as_rocks(&self) -> Option<&RocksEngine> {
        match self {
            SelectedEngine::Rocks(engine) => Some(engine),
            SelectedEngine::Memory(_) => None,
        }
    }
}

/// An image prepared by whichever engine checked it.
pub enum SelectedPrepared {
    Rocks(RocksPrepared),
    Memory(Image),
}

/// A checkpoint of whichever engine took it.
pub enum SelectedCheckpoint {
    Rocks(RocksCheckpoint),
    Memory(Vec<u8>),
}

impl Engine for SelectedEngine {
    type Checkpoint = SelectedCheckpoint;
    type Prepared = SelectedPrepared;

    fn blocks_on_disk(&self) -> bool {
        match self {
            SelectedEngine::Rocks(engine) => engine.blocks_on_disk(),
            SelectedEngine::Memory(engine) => engine.blocks_on_disk(),
        }
    }

    fn modelled_sync_delay(&self) -> std::time::Duration {
        match self {
            SelectedEngine::Rocks(engine) => engine.modelled_sync_delay(),
            SelectedEngine::Memory(engine) => engine.modelled_sync_delay(),
        }
    }

    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.get(space, key),
            SelectedEngine::Memory(engine) => engine.get(space, key),
        }
    }

    fn get_many(&self, space: Space, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.get_many(space, keys),
            SelectedEngine::Memory(engine) => engine.get_many(space, keys),
        }
    }

    fn scan(&self, space: Space, start: &[u8], end: Option<&[u8]>, limit: usize) -> Result<Pairs, EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.scan(space, start, end, limit),
            SelectedEngine::Memory(engine) => engine.scan(space, start, end, limit),
        }
    }

    fn read_ranges(
        &self,
        space: Space,
        ranges: &[RangeRead],
        keep: &dyn Fn(&[u8], &[u8]) -> bool,
    ) -> Result<Vec<Pairs>, EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.read_ranges(space, ranges, keep),
            SelectedEngine::Memory(engine) => engine.read_ranges(space, ranges, keep),
        }
    }

    fn last(&self, space: Space) -> Result<Option<Pair>, EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.last(space),
            SelectedEngine::Memory(engine) => engine.last(space),
        }
    }

    fn walk(&self, space: Space, start: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.walk(space, start, visit),
            SelectedEngine::Memory(engine) => engine.walk(space, start, visit),
        }
    }

    fn write(&self, batch: WriteBatch, durability: Durability) -> Result<(), EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.write(batch, durability),
            SelectedEngine::Memory(engine) => engine.write(batch, durability),
        }
    }

    fn checkpoint(&self) -> Result<SelectedCheckpoint, EngineError> {
        Ok(match self {
            SelectedEngine::Rocks(engine) => SelectedCheckpoint::Rocks(engine.checkpoint()?),
            SelectedEngine::Memory(engine) => SelectedCheckpoint::Memory(engine.checkpoint()?),
        })
    }

    fn pack(&self, checkpoint: SelectedCheckpoint) -> Result<SnapshotImage, EngineError> {
        match (self, checkpoint) {
            (SelectedEngine::Rocks(engine), SelectedCheckpoint::Rocks(checkpoint)) => engine.pack(checkpoint),
            (SelectedEngine::Memory(engine), SelectedCheckpoint::Memory(checkpoint)) => engine.pack(checkpoint),
            _ => Err(EngineError::corrupt("checkpoint", "taken by the other kind of engine")),
        }
    }

    fn sync_writes(&self) -> Result<(), EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.sync_writes(),
            SelectedEngine::Memory(engine) => engine.sync_writes(),
        }
    }

    fn receiving_image(&self) -> Result<SnapshotImage, EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.receiving_image(),
            SelectedEngine::Memory(engine) => engine.receiving_image(),
        }
    }

    fn adopt_image(&self, image: SnapshotImage) -> Result<SnapshotImage, EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.adopt_image(image),
            SelectedEngine::Memory(engine) => engine.adopt_image(image),
        }
    }

    fn prepare_restore(&self, image: &SnapshotImage) -> Result<SelectedPrepared, EngineError> {
        Ok(match self {
            SelectedEngine::Rocks(engine) => SelectedPrepared::Rocks(engine.prepare_restore(image)?),
            SelectedEngine::Memory(engine) => SelectedPrepared::Memory(engine.prepare_restore(image)?),
        })
    }

    fn finish_restore(&self, prepared: SelectedPrepared) -> Result<(), EngineError> {
        match (self, prepared) {
            (SelectedEngine::Rocks(engine), SelectedPrepared::Rocks(prepared)) => engine.finish_restore(prepared),
            (SelectedEngine::Memory(engine), SelectedPrepared::Memory(prepared)) => engine.finish_restore(prepared),
            _ => Err(EngineError::corrupt(
                "prepared image",
                "prepared by the other kind of engine",
            )),
        }
    }

    fn save_snapshot(&self, record: &[u8], image: Option<&SnapshotImage>) -> Result<(), EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.save_snapshot(record, image),
            SelectedEngine::Memory(engine) => engine.save_snapshot(record, image),
        }
    }

    fn load_snapshot(&self) -> Result<Option<SavedSnapshot>, EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.load_snapshot(),
            SelectedEngine::Memory(engine) => engine.load_snapshot(),
        }
    }

    fn forget_dedup_records_before(&self, time_micros: u64) {
        match self {
            SelectedEngine::Rocks(engine) => engine.forget_dedup_records_before(time_micros),
            SelectedEngine::Memory(engine) => engine.forget_dedup_records_before(time_micros),
        }
    }

    fn forget_change_events_through(&self, position: (u64, u32)) {
        match self {
            SelectedEngine::Rocks(engine) => engine.forget_change_events_through(position),
            SelectedEngine::Memory(engine) => engine.forget_change_events_through(position),
        }
    }

    fn discard_image(&self, image: &SnapshotImage) -> Result<(), EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.discard_image(image),
            SelectedEngine::Memory(engine) => engine.discard_image(image),
        }
    }
}
