//! Crash tests for the RocksDB engine: a real child process appends to the
//! log and applies to the state machine, is killed with SIGKILL, and every
//! write it acknowledged must be there when the directory is reopened.

use std::io::{BufRead, BufReader};
use std::process::{Command as Process, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lode_raft_store::command::{Command, Proposal};
use lode_raft_store::{LogStore, RocksEngine, StateMachineStore, TypeConfig};
use openraft::storage::{RaftLogReader, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};

const CHILD_DIRECTORY_VARIABLE: &str = "LODE_CRASH_CHILD_DIRECTORY";
const WRITES_MAX: u64 = 100_000;
const ACKNOWLEDGED_BEFORE_KILL: u64 = 300;

mod support;

fn command(index: u64) -> Command {
    support::set_command("crash", index)
}

fn entry(index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(1, 1, index),
        payload: EntryPayload::Normal(Proposal::single(command(index))),
    }
}

/// The child: append and apply until killed, printing each acknowledged index.
async fn run_child(directory: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut log = LogStore::new(Arc::new(RocksEngine::open(format!("{directory}/log"))?));
    let mut state = StateMachineStore::open(Arc::new(RocksEngine::open(format!("{directory}/state"))?))?;
    for index in 1..=WRITES_MAX {
        log.blocking_append([entry(index)]).await?;
        state.apply([entry(index)]).await?;
        println!("acknowledged {index}");
    }
    Ok(())
}

#[tokio::test]
async fn sigkill_loses_no_acknowledged_write() -> Result<(), Box<dyn std::error::Error>> {
    if let Ok(directory) = std::env::var(CHILD_DIRECTORY_VARIABLE) {
        return run_child(&directory).await;
    }
    let directory = tempfile::tempdir()?;
    let mut child = Process::new(std::env::current_exe()?)
        .args([
            "--exact",
            "sigkill_loses_no_acknowledged_write",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIRECTORY_VARIABLE, directory.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("child has no stdout")?;
    let mut acknowledged = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    for line in BufReader::new(stdout).lines() {
        if let Some(index) = line?.strip_prefix("acknowledged ") {
            acknowledged = index.trim().parse()?;
        }
        if acknowledged >= ACKNOWLEDGED_BEFORE_KILL || Instant::now() > deadline {
            break;
        }
    }
    child.kill()?; // SIGKILL: no destructor, no clean close.
    child.wait()?;
    assert!(
        acknowledged >= ACKNOWLEDGED_BEFORE_KILL,
        "child acknowledged only {acknowledged} writes"
    );

    let mut log = LogStore::new(Arc::new(RocksEngine::open(directory.path().join("log"))?));
    let entries = log.try_get_log_entries(1..=acknowledged).await?;
    assert_eq!(
        entries.len() as u64,
        acknowledged,
        "acknowledged log entries are missing"
    );
    for (offset, entry) in entries.iter().enumerate() {
        assert_eq!(entry.log_id.index, offset as u64 + 1);
        assert_eq!(
            entry.payload,
            EntryPayload::Normal(Proposal::single(command(offset as u64 + 1)))
        );
    }
    let mut state = StateMachineStore::open(Arc::new(RocksEngine::open(directory.path().join("state"))?))?;
    let (applied, _) = state.applied_state().await?;
    let applied = applied.map(|log_id| log_id.index).unwrap_or(0);
    assert!(
        applied >= acknowledged,
        "state applied {applied}, acknowledged {acknowledged}"
    );
    let reader = state.reader();
    for index in 1..=acknowledged {
        let stored = reader
            .get_entry("crash", format!("key-{index}").as_bytes(), 0)?
            .ok_or("entry missing")?;
        assert_eq!(stored.value, index.to_be_bytes().to_vec());
        assert_eq!(stored.version, index);
    }
    Ok(())
}
