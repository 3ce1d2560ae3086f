//! The engine a node runs on, chosen when it starts: RocksDB in production,
//! memory in the deterministic simulation. One concrete type keeps the node,
//! its request handlers and its reader free of an engine type parameter.

use super::memory::MemoryEngine;
use super::rocks::{RocksCheckpoint, RocksEngine};
use super::{Durability, Engine, Pair, Pairs, RangeRead, Space, WriteBatch};
use crate::error::EngineError;

/// RocksDB on disk or the in-memory engine with its crash model.
#[derive(Debug)]
pub enum SelectedEngine {
    Rocks(RocksEngine),
    Memory(MemoryEngine),
}

/// A checkpoint of whichever engine took it.
pub enum SelectedCheckpoint {
    Rocks(RocksCheckpoint),
    Memory(Vec<u8>),
}

impl Engine for SelectedEngine {
    type Checkpoint = SelectedCheckpoint;

    fn blocks_on_disk(&self) -> bool {
        match self {
            SelectedEngine::Rocks(engine) => engine.blocks_on_disk(),
            SelectedEngine::Memory(engine) => engine.blocks_on_disk(),
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

    fn pack(checkpoint: SelectedCheckpoint) -> Result<Vec<u8>, EngineError> {
        match checkpoint {
            SelectedCheckpoint::Rocks(checkpoint) => RocksEngine::pack(checkpoint),
            SelectedCheckpoint::Memory(checkpoint) => MemoryEngine::pack(checkpoint),
        }
    }

    fn check_image(&self, packed: &[u8]) -> Result<(), EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.check_image(packed),
            SelectedEngine::Memory(engine) => engine.check_image(packed),
        }
    }

    fn restore(&self, packed: &[u8]) -> Result<(), EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.restore(packed),
            SelectedEngine::Memory(engine) => engine.restore(packed),
        }
    }

    fn save_snapshot(&self, bytes: &[u8]) -> Result<(), EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.save_snapshot(bytes),
            SelectedEngine::Memory(engine) => engine.save_snapshot(bytes),
        }
    }

    fn load_snapshot(&self) -> Result<Option<Vec<u8>>, EngineError> {
        match self {
            SelectedEngine::Rocks(engine) => engine.load_snapshot(),
            SelectedEngine::Memory(engine) => engine.load_snapshot(),
        }
    }
}
