//! Trimmed change events: a trim only moves the trimmed-through position,
//! and the engine drops the events behind it once a snapshot has made that
//! position durable. Whether a member's engine has dropped them or not,
//! every reader (the change feed, dedup answers, the state digest, backup
//! counts) sees the same log.

use std::sync::Arc;

use lode_raft_store::command::{Command, CommandV1, Encoding, OpId, Operation, Proposal, Retention};
use lode_raft_store::engine::{Engine, Space};
use lode_raft_store::{CommandOutcome, MemoryEngine, RocksEngine, StateMachineStore, TypeConfig};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn set(key: &str, value: Vec<u8>) -> Operation {
    Operation::Set {
        namespace: "ns".to_owned(),
        key: key.as_bytes().to_vec(),
        value,
        encoding: Encoding::Bytes,
        expires_at_micros: None,
        precondition: None,
        fence: None,
        session: None,
    }
}

/// An entry at `index` of one command with `operations`, kept under
/// `retention`.
fn entry(index: u64, op_id: Option<u128>, operations: Vec<Operation>, retention: Retention) -> Entry<TypeConfig> {
    let mut proposal = Proposal::single(Command::V1(CommandV1 {
        op_id: op_id.map(OpId),
        time_micros: 1_000 * index,
        operations,
    }));
    proposal.retention = retention;
    Entry {
        log_id: log_id(1, 1, index),
        payload: EntryPayload::Normal(proposal),
    }
}

async fn apply<E: Engine>(
    state: &mut StateMachineStore<E>,
    entry: Entry<TypeConfig>,
) -> Result<CommandOutcome, Box<dyn std::error::Error>> {
    Ok(state.apply([entry]).await?.remove(0).outcomes.remove(0))
}

fn stored_events<E: Engine>(engine: &E) -> Result<usize, Box<dyn std::error::Error>> {
    Ok(engine.scan(Space::ChangeLog, &[], None, usize::MAX)?.len())
}

/// The op id of entry 2 of `rewrite`'s log: a take whose answer, the
/// value it took, only entry 2's change event holds once `k` is set again.
const TAKE_OP_ID: u128 = 2;

fn take() -> Operation {
    Operation::Take {
        namespace: "ns".to_owned(),
        key: b"k".to_vec(),
    }
}

/// Entry `index` of a log that rewrites one big value, but for entry 2,
/// which takes it.
fn rewrite(index: u64, retention: Retention) -> Entry<TypeConfig> {
    if index == 2 {
        return entry(index, Some(TAKE_OP_ID), vec![take()], retention);
    }
    let value = vec![u8::try_from(index % 251).unwrap_or(0); 4_096];
    entry(index, None, vec![set("k", value)], retention)
}

/// What every reader of a member's state sees.
#[derive(Debug, PartialEq)]
struct Seen {
    trimmed_through: (u64, u32),
    events: Vec<(u64, u32)>,
    digest: u64,
    counted_events: u64,
}

fn seen<E: Engine>(state: &StateMachineStore<E>, engine: &E) -> Result<Seen, Box<dyn std::error::Error>> {
    let reader = state.reader();
    let trimmed_through = match reader.changes((0, 0), 1_000, "")? {
        Ok(_) => (0, 0),
        Err(compacted) => compacted.trimmed_through,
    };
    let page = reader
        .changes(trimmed_through, 1_000, "")?
        .map_err(|compacted| format!("{compacted:?}"))?;
    Ok(Seen {
        trimmed_through,
        events: page.events.iter().map(|event| event.position()).collect(),
        digest: reader.state_digest()?,
        counted_events: lode_raft_store::backup::count(engine)?.change_events,
    })
}

#[tokio::test]
async fn trimmed_events_read_alike_whether_or_not_the_engine_dropped_them() -> TestResult {
    let retention = Retention {
        change_events_max: 4,
        ..Retention::default()
    };
    let engines = [Arc::new(MemoryEngine::new()), Arc::new(MemoryEngine::new())];
    let mut dropping = StateMachineStore::open(engines[0].clone())?;
    let mut keeping = StateMachineStore::open(engines[1].clone())?;
    for index in 1..=20 {
        apply(&mut dropping, rewrite(index, retention)).await?;
        apply(&mut keeping, rewrite(index, retention)).await?;
    }
    // Only the snapshot lets the engine drop what the trims passed.
    assert_eq!(stored_events(engines[0].as_ref())?, 20);
    dropping.get_snapshot_builder().await.build_snapshot().await?;
    assert!(
        stored_events(engines[0].as_ref())? <= 4,
        "the trimmed events are dropped"
    );
    assert_eq!(
        stored_events(engines[1].as_ref())?,
        20,
        "the other member still holds them"
    );

    let (first, second) = (
        seen(&dropping, engines[0].as_ref())?,
        seen(&keeping, engines[1].as_ref())?,
    );
    assert_eq!(first, second);
    assert_eq!(first.events.len(), 4);
    assert_eq!(first.counted_events, 4);
    // A repeat of the take, whose value only a trimmed event held, answers
    // compacted on both, never from the bytes one of them still has.
    let repeats = [
        apply(&mut dropping, entry(21, Some(TAKE_OP_ID), vec![take()], retention)).await?,
        apply(&mut keeping, entry(21, Some(TAKE_OP_ID), vec![take()], retention)).await?,
    ];
    assert!(repeats[0].deduplicated);
    assert_eq!(repeats[0], repeats[1]);
    assert!(repeats[0].result.is_err(), "{:?}", repeats[0].result);
    Ok(())
}

#[tokio::test]
async fn a_crash_after_the_drop_goes_back_no_further_than_the_snapshot() -> TestResult {
    crash_after_a_drop(30, 20, |_| false).await
}

/// Every 256 entries the state machine drops what trims passed, after a
/// sync: no snapshot needed, and a crash still goes back no further.
#[tokio::test]
async fn trimmed_events_are_dropped_without_a_snapshot_and_a_crash_goes_back_no_further() -> TestResult {
    crash_after_a_drop(300, 0, |stored| stored < 60).await?;
    // A drop that did not sync first would leave the state the crash goes
    // back to (the snapshot's) without the events of its last entries.
    crash_after_a_drop(300, 200, |stored| stored < 60).await
}

/// Applies a `length`-entry log to two members, a snapshot on the first
/// after entry `snapshot_at` (none if 0); crashes the first, which then
/// applies the log again from where its state went back to, and must see
/// what the other sees. `dropped` judges the events the first stores just
/// before its crash.
async fn crash_after_a_drop(length: u64, snapshot_at: u64, dropped: fn(usize) -> bool) -> TestResult {
    let retention = Retention {
        change_events_max: 4,
        ..Retention::default()
    };
    let engines = [Arc::new(MemoryEngine::new()), Arc::new(MemoryEngine::new())];
    let mut crashing = StateMachineStore::open(engines[0].clone())?;
    let mut steady = StateMachineStore::open(engines[1].clone())?;
    let log: Vec<_> = (1..=length).map(|index| rewrite(index, retention)).collect();
    for entry in &log {
        apply(&mut crashing, entry.clone()).await?;
        if entry.log_id.index == snapshot_at {
            crashing.get_snapshot_builder().await.build_snapshot().await?;
        }
    }
    let stored = stored_events(engines[0].as_ref())?;
    assert!(snapshot_at > 0 || dropped(stored), "{stored} events stored");
    // The buffered applies since the last sync are lost; the log applies
    // them again from there, as openraft would.
    engines[0].crash();
    let mut crashing = StateMachineStore::open(engines[0].clone())?;
    let applied = crashing.applied_state().await?.0.map_or(0, |log_id| log_id.index);
    assert!(applied >= snapshot_at && applied < length, "applied through {applied}");
    // Readers see at once what a member that never crashed sees there,
    // and after the log is applied again.
    for part in [&log[..applied as usize], &log[applied as usize..]] {
        for entry in part {
            apply(&mut steady, entry.clone()).await?;
            if entry.log_id.index > applied {
                apply(&mut crashing, entry.clone()).await?;
            }
        }
        assert_eq!(
            seen(&crashing, engines[0].as_ref())?,
            seen(&steady, engines[1].as_ref())?
        );
    }
    Ok(())
}

/// Bytes that LZ4 cannot shrink, so a table file's size follows its events.
fn noise(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

fn change_log_bytes(engine: &RocksEngine) -> Result<u64, Box<dyn std::error::Error>> {
    let properties = engine.properties()?;
    let bytes = properties
        .space_bytes
        .iter()
        .find(|(space, _)| *space == Space::ChangeLog)
        .map(|(_, bytes)| *bytes);
    Ok(bytes.ok_or("no change log figure")?)
}

/// Under a steady load of big values the family stays near its
/// retention: the files behind the trimmed-through position are dropped.
#[tokio::test]
async fn rocksdb_drops_the_table_files_of_trimmed_events_under_load() -> TestResult {
    const SETS_PER_ENTRY: u64 = 16;
    const VALUE_BYTES: usize = 4_096;
    /// Each event holds the old and the new value.
    const ENTRY_EVENTS_BYTES: u64 = SETS_PER_ENTRY * 2 * VALUE_BYTES as u64;
    const ENTRIES: u64 = 1_000;
    let retention = Retention {
        change_bytes_max: 4 << 20,
        ..Retention::default()
    };
    let directory = tempfile::tempdir()?;
    let engine = Arc::new(RocksEngine::open(directory.path().join("state"))?);
    let mut state = StateMachineStore::open(engine.clone())?;
    let big_entry = |index: u64| {
        let sets = (0..SETS_PER_ENTRY)
            .map(|key| set(&format!("k{key}"), noise(index * SETS_PER_ENTRY + key, VALUE_BYTES)))
            .collect();
        entry(index, None, sets, retention)
    };
    for index in 1..=ENTRIES {
        apply(&mut state, big_entry(index)).await?;
    }
    // Drops run on a blocking thread as the load goes on, and files move
    // out of level 0 as RocksDB compacts: the load goes on until they
    // caught up.
    let bound = ENTRIES * ENTRY_EVENTS_BYTES / 3;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut index = ENTRIES;
    while change_log_bytes(&engine)? > bound {
        assert!(
            std::time::Instant::now() < deadline && index < 4 * ENTRIES,
            "{} bytes left, over {bound}",
            change_log_bytes(&engine)?
        );
        index += 1;
        apply(&mut state, big_entry(index)).await?;
        tokio::task::yield_now().await;
    }
    // What readers see is whole: the retained events, newest last.
    let seen = seen(&state, engine.as_ref())?;
    // Each event also holds its key, namespace and position.
    let retained_events_min = (4 << 20) / ENTRY_EVENTS_BYTES * SETS_PER_ENTRY * 9 / 10;
    assert!(
        seen.events.len() as u64 >= retained_events_min,
        "{} events",
        seen.events.len()
    );
    assert_eq!(seen.events.last().map(|position| position.0), Some(index));
    assert_eq!(seen.counted_events, seen.events.len() as u64);
    Ok(())
}
