//! openraft's storage conformance suite, run against both engines.

use std::sync::Arc;

use lode_raft_store::{LogStore, MemoryEngine, NodeId, RocksEngine, StateMachineStore, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{StorageError, StorageIOError};

struct MemoryBuilder;

impl StoreBuilder<TypeConfig, LogStore<MemoryEngine>, StateMachineStore<MemoryEngine>, ()> for MemoryBuilder {
    async fn build(
        &self,
    ) -> Result<((), LogStore<MemoryEngine>, StateMachineStore<MemoryEngine>), StorageError<NodeId>> {
        let log = LogStore::new(Arc::new(MemoryEngine::new()));
        let state =
            StateMachineStore::open(Arc::new(MemoryEngine::new())).map_err(|error| StorageIOError::read(&error))?;
        Ok(((), log, state))
    }
}

struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore<RocksEngine>, StateMachineStore<RocksEngine>, tempfile::TempDir>
    for RocksBuilder
{
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore<RocksEngine>, StateMachineStore<RocksEngine>), StorageError<NodeId>> {
        let directory = tempfile::tempdir().map_err(|error| StorageIOError::read(&error))?;
        let log_engine =
            RocksEngine::open(directory.path().join("log")).map_err(|error| StorageIOError::read(&error))?;
        let state_engine =
            RocksEngine::open(directory.path().join("state")).map_err(|error| StorageIOError::read(&error))?;
        let log = LogStore::new(Arc::new(log_engine));
        let state = StateMachineStore::open(Arc::new(state_engine)).map_err(|error| StorageIOError::read(&error))?;
        Ok((directory, log, state))
    }
}

#[test]
fn memory_engine_passes_the_openraft_suite() -> Result<(), Box<StorageError<NodeId>>> {
    Suite::test_all(MemoryBuilder).map_err(Box::new)
}

#[test]
fn rocks_engine_passes_the_openraft_suite() -> Result<(), Box<StorageError<NodeId>>> {
    Suite::test_all(RocksBuilder).map_err(Box::new)
}
