//! The commit id openraft reports is written with the next append's
//! batch, not on its own (`raft-store/src/log_store.rs`): these tests hold
//! the log store to what that promises, on the memory engine, whose crash
//! loses every write not synced.

use std::sync::Arc;

use lode_raft_store::command::Proposal;
use lode_raft_store::{LogStore, MemoryEngine, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};

type TestResult = Result<(), Box<dyn std::error::Error>>;

mod support;

fn entry(index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(2, 1, index),
        payload: EntryPayload::Normal(Proposal::single(support::set_command("commits", index))),
    }
}

/// A log store over a fresh memory engine, holding entries 1 to 3.
async fn log_of_three_entries() -> Result<(Arc<MemoryEngine>, LogStore<MemoryEngine>), Box<dyn std::error::Error>> {
    let engine = Arc::new(MemoryEngine::new());
    let mut log = LogStore::new(engine.clone());
    log.blocking_append([entry(1), entry(2), entry(3)]).await?;
    Ok((engine, log))
}

#[tokio::test]
async fn a_reported_commit_id_reads_back_at_once_and_reaches_the_disk_with_the_next_append() -> TestResult {
    let (engine, mut log) = log_of_three_entries().await?;
    log.save_committed(Some(log_id(2, 1, 2))).await?;

    assert_eq!(
        log.read_committed().await?,
        Some(log_id(2, 1, 2)),
        "the log store that was told a commit id forgot it"
    );
    assert_eq!(
        LogStore::new(engine.clone()).read_committed().await?,
        None,
        "a commit id was written on its own, before any append"
    );

    log.blocking_append([entry(4)]).await?;
    engine.crash();
    assert_eq!(
        LogStore::new(engine.clone()).read_committed().await?,
        Some(log_id(2, 1, 2)),
        "the commit id did not reach the disk with the append after it"
    );
    Ok(())
}

#[tokio::test]
async fn a_newer_commit_id_replaces_an_unwritten_one_and_an_append_writes_it_once() -> TestResult {
    let (engine, mut log) = log_of_three_entries().await?;
    log.save_committed(Some(log_id(2, 1, 1))).await?;
    log.save_committed(Some(log_id(2, 1, 3))).await?;
    log.blocking_append([entry(4)]).await?;
    assert_eq!(
        LogStore::new(engine.clone()).read_committed().await?,
        Some(log_id(2, 1, 3)),
        "the append wrote an older commit id than the newest reported"
    );

    // Nothing newer reported: the next append leaves the stored one alone,
    // and the store reads it back from the disk.
    log.blocking_append([entry(5)]).await?;
    assert_eq!(log.read_committed().await?, Some(log_id(2, 1, 3)));
    Ok(())
}
