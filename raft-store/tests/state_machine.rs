//! The state machine through openraft's traits: deterministic apply, dedup,
//! expiry and sweeps, rejections, snapshots between engines, and what a
//! crash leaves of the state and its snapshot.

use std::sync::Arc;

use lode_raft_store::command::{
    Command, CommandV1, Encoding, OpId, Operation, OperationResult, Precondition, Proposal, Rejection,
};
use lode_raft_store::engine::{Engine, Space};
use lode_raft_store::{CommandOutcome, LogStore, MemoryEngine, RocksEngine, StateMachineStore, TypeConfig};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn set(key: &str, value: &str, expires_at_micros: Option<u64>) -> Operation {
    Operation::Set {
        namespace: "ns".to_owned(),
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        encoding: Encoding::Json,
        expires_at_micros,
        precondition: None,
        fence: None,
        session: None,
    }
}

fn delete(key: &str) -> Operation {
    Operation::Delete {
        namespace: "ns".to_owned(),
        key: key.as_bytes().to_vec(),
        session: None,
    }
}

fn entry(index: u64, time_micros: u64, op_id: Option<u128>, operations: Vec<Operation>) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(2, 1, index),
        payload: EntryPayload::Normal(Proposal::single(Command::V1(CommandV1 {
            op_id: op_id.map(OpId),
            time_micros,
            operations,
        }))),
    }
}

async fn apply_one<E: Engine>(
    state: &mut StateMachineStore<E>,
    entry: Entry<TypeConfig>,
) -> Result<CommandOutcome, Box<dyn std::error::Error>> {
    Ok(apply_all(state, vec![entry]).await?.remove(0))
}

/// Applies entries of one command each and returns each command's outcome.
async fn apply_all<E: Engine>(
    state: &mut StateMachineStore<E>,
    entries: Vec<Entry<TypeConfig>>,
) -> Result<Vec<CommandOutcome>, Box<dyn std::error::Error>> {
    let outcomes = state.apply(entries).await?;
    Ok(outcomes.into_iter().flat_map(|outcome| outcome.outcomes).collect())
}

/// A log with every operation kind, times that go backwards, and a repeat.
fn sample_log() -> Vec<Entry<TypeConfig>> {
    vec![
        entry(1, 1_000, Some(1), vec![set("a", "1", None), set("b", "2", Some(5_000))]),
        entry(2, 900, Some(2), vec![delete("a"), set("c", "3", Some(2_000))]),
        entry(3, 3_000, None, vec![Operation::SweepExpired { entries_max: 10 }]),
        entry(4, 4_000, Some(1), vec![set("a", "repeat", None)]),
        entry(5, 6_000, None, vec![Operation::SweepExpired { entries_max: 10 }]),
    ]
}

#[tokio::test]
async fn replicas_that_apply_the_same_log_hold_identical_state() -> TestResult {
    let engines = [Arc::new(MemoryEngine::new()), Arc::new(MemoryEngine::new())];
    let mut outcomes = Vec::new();
    for engine in &engines {
        let mut state = StateMachineStore::open(engine.clone())?;
        outcomes.push(apply_all(&mut state, sample_log()).await?);
    }
    assert_eq!(outcomes[0], outcomes[1]);
    assert_eq!(engines[0].checkpoint()?, engines[1].checkpoint()?);
    Ok(())
}

#[tokio::test]
async fn apply_follows_the_command_time_and_sweeps_expired_entries() -> TestResult {
    let mut state = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    let reader = state.reader();
    let outcomes = apply_all(&mut state, sample_log()).await?;

    // Entry 2's time went backwards: apply used the later time instead.
    assert_eq!(outcomes[1].time_micros, 1_000);
    assert_eq!(
        outcomes[0].result,
        Ok(vec![
            OperationResult::Set { version: 1 },
            OperationResult::Set { version: 1 }
        ])
    );
    assert_eq!(
        outcomes[1].result,
        Ok(vec![
            OperationResult::Delete {
                removed_live_entry: true
            },
            OperationResult::Set { version: 2 }
        ])
    );
    // At 3000 only "c" (expiring at 2000) is due.
    assert_eq!(
        outcomes[2].result,
        Ok(vec![OperationResult::SweepExpired { removed: 1 }])
    );
    // Op id 1 again: the first outcome comes back and nothing is written.
    assert!(outcomes[3].deduplicated);
    assert_eq!(outcomes[3].index, 1);
    assert_eq!(reader.get_entry("ns", b"a", 0)?, None);
    // At 6000 "b" (expiring at 5000) is swept.
    assert_eq!(
        outcomes[4].result,
        Ok(vec![OperationResult::SweepExpired { removed: 1 }])
    );
    assert_eq!(
        reader.get_entry("ns", b"b", 0)?,
        None,
        "swept entries are physically gone"
    );
    assert_eq!(reader.applied_index(), 5);
    Ok(())
}

#[tokio::test]
async fn expired_entries_read_as_absent_before_the_sweep() -> TestResult {
    let mut state = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    let reader = state.reader();
    apply_one(&mut state, entry(1, 1_000, None, vec![set("k", "v", Some(2_000))])).await?;
    let stored = reader.get_entry("ns", b"k", 1_999)?.ok_or("live before expiry")?;
    assert_eq!((stored.version, stored.source.term, stored.source.index), (1, 2, 1));
    assert_eq!(stored.encoding, Encoding::Json);
    assert_eq!(reader.get_entry("ns", b"k", 2_000)?, None, "expiry is inclusive");
    assert_eq!(reader.expired_awaiting_sweep(2_000, 10)?, 1);
    assert_eq!(reader.expired_awaiting_sweep(1_999, 10)?, 0);
    // Deleting an expired entry reports that no live entry was removed.
    let outcome = apply_one(&mut state, entry(2, 2_500, None, vec![delete("k")])).await?;
    assert_eq!(
        outcome.result,
        Ok(vec![OperationResult::Delete {
            removed_live_entry: false
        }])
    );
    Ok(())
}

#[tokio::test]
async fn an_invalid_command_applies_nothing() -> TestResult {
    let mut state = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    let reader = state.reader();
    let oversized = Operation::Set {
        namespace: "ns".to_owned(),
        key: vec![1; 2049],
        value: Vec::new(),
        encoding: Encoding::Bytes,
        expires_at_micros: None,
        precondition: None,
        fence: None,
        session: None,
    };
    let outcome = apply_one(&mut state, entry(1, 1, Some(9), vec![set("ok", "1", None), oversized])).await?;
    match outcome.result {
        Err(Rejection::Invalid(message)) => assert!(message.contains("key_bytes_max = 2048"), "{message}"),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(
        reader.get_entry("ns", b"ok", 0)?,
        None,
        "no part of a rejected batch is applied"
    );
    assert_eq!(reader.applied_index(), 1);
    Ok(())
}

/// Streams `image` into `follower` the way openraft's chunked transfer
/// does (a seek to the end for its length, then reads from the start, each
/// written into an image the follower began receiving), and installs it.
async fn send<E: Engine>(
    snapshot: openraft::storage::Snapshot<TypeConfig>,
    follower: &mut StateMachineStore<E>,
) -> TestResult {
    use tokio::io::AsyncSeekExt;
    let mut image = snapshot.snapshot;
    let length = image.seek(std::io::SeekFrom::End(0)).await?;
    image.seek(std::io::SeekFrom::Start(0)).await?;
    let mut receiving = follower.begin_receiving_snapshot().await?;
    let copied = tokio::io::copy(&mut image, &mut receiving).await?;
    assert_eq!(copied, length, "the image streams whole");
    receiving.shutdown().await?;
    follower.install_snapshot(&snapshot.meta, receiving).await?;
    Ok(())
}

async fn snapshot_moves_state<E: Engine>(source: Arc<E>, target: Arc<E>) -> TestResult {
    let mut leader = StateMachineStore::open(source)?;
    leader.apply(sample_log()).await?;
    let mut builder = leader.get_snapshot_builder().await;
    // Applies after the builder was made do not move its meta.
    apply_one(&mut leader, entry(6, 7_000, None, vec![set("late", "x", None)])).await?;
    let built = builder.build_snapshot().await?;
    assert_eq!(built.meta.last_log_id, Some(log_id(2, 1, 5)));
    // The image to send is the state as applied when it is asked for, and
    // a record of it replaces the built one.
    let current = leader.get_current_snapshot().await?.ok_or("a snapshot is stored")?;
    assert_eq!(current.meta.last_log_id, Some(log_id(2, 1, 6)));
    assert_eq!(
        leader.get_current_snapshot().await?.ok_or("a snapshot is stored")?.meta,
        current.meta,
        "asked again with nothing applied since: the same snapshot"
    );
    // Applies after the image was asked for stay out of it, though it is
    // packed only as it is first read.
    apply_one(&mut leader, entry(7, 8_000, None, vec![set("later", "y", None)])).await?;

    let mut follower = StateMachineStore::open(target)?;
    let reader = follower.reader();
    let meta = current.meta.clone();
    send(current, &mut follower).await?;
    assert_eq!(follower.applied_state().await?.0, Some(log_id(2, 1, 6)));
    assert_eq!(reader.applied_index(), 6);
    assert!(reader.get_entry("ns", b"late", 0)?.is_some());
    assert!(reader.get_entry("ns", b"later", 0)?.is_none());
    let installed = follower
        .get_current_snapshot()
        .await?
        .ok_or("installed snapshot is current")?;
    assert_eq!(installed.meta, meta);
    // The follower continues from the snapshot like the leader did.
    let outcome = apply_one(&mut follower, entry(7, 8_000, None, vec![set("later", "y", None)])).await?;
    assert_eq!(outcome.result, Ok(vec![OperationResult::Set { version: 7 }]));
    Ok(())
}

#[tokio::test]
async fn a_snapshot_moves_state_between_memory_engines() -> TestResult {
    snapshot_moves_state(Arc::new(MemoryEngine::new()), Arc::new(MemoryEngine::new())).await
}

/// What a member's `snapshots/` holds.
fn snapshot_files(root: &std::path::Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("snapshots"))?
        .map(|item| item.map(|item| item.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    names.sort();
    Ok(names)
}

#[tokio::test]
async fn a_snapshot_moves_state_between_rocksdb_engines() -> TestResult {
    let directory = tempfile::tempdir()?;
    let source = Arc::new(RocksEngine::open(directory.path().join("source"))?);
    let target = Arc::new(RocksEngine::open(directory.path().join("target"))?);
    snapshot_moves_state(source, target).await?;
    // The image carried the writes in its copy of the write-ahead log: the
    // checkpoint, which apply waits for, flushed no memtable.
    let tables = std::fs::read_dir(directory.path().join("source").join("db"))?
        .filter_map(Result::ok)
        .filter(|item| item.path().extension().is_some_and(|extension| extension == "sst"))
        .count();
    assert_eq!(tables, 0, "taking the image flushed the source's memtables");
    // Neither member keeps an image: the sent one went with its handle,
    // the received one once the state it restored was on disk.
    for member in ["source", "target"] {
        assert_eq!(
            snapshot_files(&directory.path().join(member))?,
            ["current"],
            "{member} keeps a second copy of its state"
        );
    }
    // The restored state survives a reopen of the target directory.
    let reopened = StateMachineStore::open(Arc::new(RocksEngine::open(directory.path().join("target"))?))?;
    assert_eq!(reopened.reader().applied_index(), 7);
    Ok(())
}

/// A reopen removes images `current` does not name, and an image asked for
/// earlier streams whole after newer snapshots replaced its record.
#[tokio::test]
async fn a_reopened_rocksdb_engine_keeps_its_snapshot_record_and_drops_leftovers() -> TestResult {
    let directory = tempfile::tempdir()?;
    let root = directory.path().join("source");
    let first = {
        let mut state = StateMachineStore::open(Arc::new(RocksEngine::open(&root)?))?;
        state.apply(sample_log()).await?;
        state.get_snapshot_builder().await.build_snapshot().await?.meta
    };
    std::fs::write(root.join("snapshots/received-77"), b"a partial image")?;
    let mut state = StateMachineStore::open(Arc::new(RocksEngine::open(&root)?))?;
    assert_eq!(snapshot_files(&root)?, ["current"]);
    let kept = state
        .get_current_snapshot()
        .await?
        .ok_or("the snapshot survives a reopen")?;
    assert_eq!(kept.meta, first);
    apply_one(&mut state, entry(6, 7_000, None, vec![set("late", "x", None)])).await?;
    let second = state.get_snapshot_builder().await.build_snapshot().await?;
    assert_eq!(second.meta.last_log_id, Some(log_id(2, 1, 6)));
    // The first image, asked for before it was replaced, still streams whole.
    let mut follower = StateMachineStore::open(Arc::new(RocksEngine::open(directory.path().join("target"))?))?;
    send(kept, &mut follower).await?;
    assert_eq!(follower.reader().applied_index(), 5);
    assert_eq!(snapshot_files(&root)?, ["current"]);
    drop(state);
    let mut reopened = StateMachineStore::open(Arc::new(RocksEngine::open(&root)?))?;
    assert_eq!(
        reopened
            .get_current_snapshot()
            .await?
            .ok_or("a snapshot is stored")?
            .meta,
        second.meta
    );
    Ok(())
}

#[tokio::test]
async fn a_built_snapshot_leaves_the_state_on_disk_at_least_that_far() -> TestResult {
    let engine = Arc::new(MemoryEngine::new());
    let mut state = StateMachineStore::open(engine.clone())?;
    state.apply(sample_log()).await?;
    apply_one(&mut state, entry(6, 7_000, None, vec![set("built", "x", None)])).await?;
    state.get_snapshot_builder().await.build_snapshot().await?;
    apply_one(&mut state, entry(7, 8_000, None, vec![set("late", "x", None)])).await?;
    // Applies are buffered: the crash loses the one after the build, and
    // keeps everything the build covered.
    engine.crash();
    let mut reopened = StateMachineStore::open(engine)?;
    assert_eq!(reopened.applied_state().await?.0, Some(log_id(2, 1, 6)));
    assert_eq!(
        reopened.reader().get_entry("ns", b"built", 0)?.map(|entry| entry.value),
        Some(b"x".to_vec())
    );
    assert_eq!(reopened.reader().get_entry("ns", b"late", 0)?, None);
    Ok(())
}

/// A record saved with its image and newer than the state (an install a
/// crash cut short, or format 1's buffered state) restores the image.
#[tokio::test]
async fn a_crash_that_leaves_the_state_behind_a_snapshot_with_its_image_restores_the_image() -> TestResult {
    let mut leader = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    leader.apply(sample_log()).await?;
    let current = leader.get_current_snapshot().await?;
    assert!(current.is_none(), "no snapshot before a build");
    leader.get_snapshot_builder().await.build_snapshot().await?;
    let current = leader.get_current_snapshot().await?.ok_or("a snapshot is stored")?;
    let image = current.snapshot.bytes().ok_or("memory images are bytes")?.to_vec();
    let record = lode_raft_store::snapshot::StoredSnapshot { meta: current.meta }.to_bytes()?;
    let engine = Arc::new(MemoryEngine::new());
    engine.save_snapshot(
        &record,
        Some(&lode_raft_store::snapshot::SnapshotImage::Memory(std::io::Cursor::new(
            image,
        ))),
    )?;
    let reopened = StateMachineStore::open(engine)?;
    assert_eq!(reopened.reader().applied_index(), 5);
    Ok(())
}

/// A record saved without an image promises the state was on disk that
/// far; a state behind it lost synced writes, and the member refuses to
/// start rather than serve it.
#[tokio::test]
async fn a_state_behind_a_snapshot_without_an_image_refuses_to_open() -> TestResult {
    let mut leader = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    leader.apply(sample_log()).await?;
    let built = leader.get_snapshot_builder().await.build_snapshot().await?;
    let record = lode_raft_store::snapshot::StoredSnapshot { meta: built.meta }.to_bytes()?;
    let engine = Arc::new(MemoryEngine::new());
    engine.save_snapshot(&record, None)?;
    let opened = StateMachineStore::open(engine);
    let Err(error) = opened else {
        return Err("a state behind its snapshot opened".into());
    };
    assert!(error.to_string().contains("behind its snapshot"), "{error}");
    Ok(())
}

#[tokio::test]
async fn a_snapshot_built_while_a_newer_one_is_installed_does_not_replace_it() -> TestResult {
    // The leader's newer snapshot, at index 6.
    let mut leader = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    leader.apply(sample_log()).await?;
    apply_one(&mut leader, entry(6, 7_000, None, vec![set("late", "x", None)])).await?;
    leader.get_snapshot_builder().await.build_snapshot().await?;
    let newer = leader.get_current_snapshot().await?.ok_or("a snapshot is stored")?;

    // A follower starts building its own (index 5) and, before the build
    // finishes, installs the leader's.
    let engine = Arc::new(MemoryEngine::new());
    let mut follower = StateMachineStore::open(engine.clone())?;
    follower.apply(sample_log()).await?;
    let mut builder = follower.get_snapshot_builder().await;
    follower.install_snapshot(&newer.meta, newer.snapshot).await?;
    let older = builder.build_snapshot().await?;
    assert_eq!(older.meta.last_log_id, Some(log_id(2, 1, 5)));

    let current = follower.get_current_snapshot().await?.ok_or("a snapshot is stored")?;
    assert_eq!(current.meta.last_log_id, Some(log_id(2, 1, 6)));
    // After a crash the stored snapshot still covers what the log may have
    // purged.
    engine.crash();
    let reopened = StateMachineStore::open(engine)?;
    assert_eq!(reopened.reader().applied_index(), 6);
    Ok(())
}

#[tokio::test]
async fn the_log_is_purged_only_as_far_as_the_snapshot_on_disk() -> TestResult {
    use openraft::storage::RaftLogStorage;
    let state = Arc::new(tokio::sync::Mutex::new(StateMachineStore::open(Arc::new(
        MemoryEngine::new(),
    ))?));
    let on_disk = state.lock().await.snapshot_on_disk();
    let mut log = LogStore::new(Arc::new(MemoryEngine::new()))
        .purging_only_behind(on_disk, std::time::Duration::from_millis(200));
    // No snapshot on disk, and none comes: nothing is purged.
    log.purge(log_id(2, 1, 5)).await?;
    assert_eq!(log.get_log_state().await?.last_purged_log_id, None);
    // A purge asked while the snapshot is still being made waits for it.
    let making = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut state = state.lock().await;
            state.apply(sample_log()).await?;
            state.get_snapshot_builder().await.build_snapshot().await?;
            Ok::<_, openraft::StorageError<u64>>(())
        })
    };
    log.purge(log_id(2, 1, 5)).await?;
    making.await??;
    assert_eq!(log.get_log_state().await?.last_purged_log_id, Some(log_id(2, 1, 5)));
    // Asked past the snapshot, it purges up to the snapshot.
    log.purge(log_id(2, 1, 9)).await?;
    assert_eq!(log.get_log_state().await?.last_purged_log_id, Some(log_id(2, 1, 5)));
    Ok(())
}

#[tokio::test]
async fn a_purge_waits_for_no_snapshot_once_the_state_machine_failed() -> TestResult {
    use openraft::storage::RaftLogStorage;
    let engine = Arc::new(MemoryEngine::new());
    let mut state = StateMachineStore::open(engine.clone())?;
    let wait = std::time::Duration::from_secs(30);
    let mut log = LogStore::new(Arc::new(MemoryEngine::new())).purging_only_behind(state.snapshot_on_disk(), wait);
    state.apply(sample_log()).await?;
    // The volume fills: the snapshot is never saved, and openraft stops the
    // state machine at this error.
    engine.set_full(true);
    let failed = state.get_snapshot_builder().await.build_snapshot().await;
    assert!(failed.is_err(), "a snapshot saved to a full volume");
    assert!(state.snapshot_on_disk().state_machine_failed());
    // Waiting would hold openraft's core for `wait`; the purge fails now.
    let began = tokio::time::Instant::now();
    let purged = log.purge(log_id(2, 1, 5)).await;
    assert!(
        purged.is_err(),
        "a purge past a snapshot that will never be saved succeeded"
    );
    assert!(began.elapsed() < wait / 10, "the purge waited {:?}", began.elapsed());
    assert_eq!(log.get_log_state().await?.last_purged_log_id, None);
    Ok(())
}

fn command(time_micros: u64, op_id: Option<u128>, operations: Vec<Operation>) -> Command {
    Command::V1(CommandV1 {
        op_id: op_id.map(OpId),
        time_micros,
        operations,
    })
}

#[tokio::test]
async fn commands_grouped_in_one_entry_apply_in_order_and_each_on_its_own() -> TestResult {
    let mut state = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    let reader = state.reader();
    let proposal = Proposal::new(vec![
        command(10, Some(1), vec![set("a", "1", None)]),
        command(20, Some(2), vec![set("b", "2", None)]),
        // Writes "a" again: refused, or "a" would have two values at one version.
        command(30, Some(3), vec![set("c", "3", None), set("a", "again", None)]),
        // The same op id as the first: its outcome, not a second apply.
        command(40, Some(1), vec![set("d", "4", None)]),
        // "c" was only written by the refused command: nothing to remove.
        command(5, None, vec![delete("c")]),
    ]);
    let grouped = Entry {
        log_id: log_id(3, 1, 7),
        payload: EntryPayload::Normal(proposal),
    };
    let outcomes = state.apply([grouped]).await?.remove(0).outcomes;
    assert_eq!(outcomes.len(), 5);
    assert_eq!(outcomes[0].result, Ok(vec![OperationResult::Set { version: 7 }]));
    assert_eq!(outcomes[1].result, Ok(vec![OperationResult::Set { version: 7 }]));
    assert!(
        matches!(&outcomes[2].result, Err(Rejection::Invalid(message)) if message.contains("two commands")),
        "{:?}",
        outcomes[2].result
    );
    assert!(outcomes[3].deduplicated);
    assert_eq!(outcomes[3].result, outcomes[0].result);
    // The last command does not see the refused command's write, and its
    // time never goes back.
    assert_eq!(
        outcomes[4].result,
        Ok(vec![OperationResult::Delete {
            removed_live_entry: false
        }])
    );
    assert_eq!(outcomes[4].time_micros, 40);
    assert_eq!(
        reader.get_entry("ns", b"a", 0)?.map(|entry| entry.value),
        Some(b"1".to_vec())
    );
    assert_eq!(reader.get_entry("ns", b"b", 0)?.map(|entry| entry.version), Some(7));
    assert_eq!(
        reader.get_entry("ns", b"c", 0)?,
        None,
        "a rejected command writes nothing"
    );
    assert_eq!(
        reader.get_entry("ns", b"d", 0)?,
        None,
        "a deduplicated command writes nothing"
    );
    Ok(())
}

#[tokio::test]
async fn the_dedup_table_travels_in_snapshots() -> TestResult {
    let mut leader = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    let first = apply_one(&mut leader, entry(1, 1_000, Some(77), vec![set("k", "v", None)])).await?;
    leader.get_snapshot_builder().await.build_snapshot().await?;
    let snapshot = leader.get_current_snapshot().await?.ok_or("a snapshot is stored")?;
    let mut follower = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    follower.install_snapshot(&snapshot.meta, snapshot.snapshot).await?;
    // The replay reaches a member that only has the snapshot: it returns
    // the original outcome and writes nothing.
    let replay = apply_one(&mut follower, entry(2, 2_000, Some(77), vec![set("k", "again", None)])).await?;
    assert!(replay.deduplicated);
    assert_eq!((replay.index, &replay.result), (first.index, &first.result));
    let stored = follower.reader().get_entry("ns", b"k", 0)?.ok_or("entry")?;
    assert_eq!(stored.value, b"v".to_vec());
    Ok(())
}

/// A follower that applied part of a log, then caught up by a snapshot of
/// a different state at those keys, applies what follows judging by the
/// snapshot's entries: nothing it held before the install decides an
/// answer or a change event (a cache of applied entries kept over the
/// install fails this).
async fn apply_after_an_install_reads_the_snapshot<E: Engine>(engines: [Arc<E>; 2]) -> TestResult {
    let [leader_engine, follower_engine] = engines;
    let mut leader = StateMachineStore::open(leader_engine)?;
    let mut follower = StateMachineStore::open(follower_engine)?;
    let shared = || entry(1, 1_000, None, vec![set("k", "1", None), set("j", "1", None)]);
    apply_one(&mut leader, shared()).await?;
    apply_one(&mut follower, shared()).await?;
    // Only the leader applies these: the follower catches up by snapshot.
    apply_one(&mut leader, entry(2, 2_000, None, vec![set("k", "2", None)])).await?;
    apply_one(&mut leader, entry(3, 3_000, None, vec![delete("j")])).await?;
    leader.get_snapshot_builder().await.build_snapshot().await?;
    let snapshot = leader.get_current_snapshot().await?.ok_or("a snapshot is stored")?;
    send(snapshot, &mut follower).await?;
    // A write on "k" conditioned on the snapshot's version, and a write of
    // "j", which the snapshot holds deleted.
    let mut conditioned = set("k", "3", None);
    if let Operation::Set { precondition, .. } = &mut conditioned {
        *precondition = Some(Precondition::Version(2));
    }
    let next = || entry(4, 4_000, None, vec![conditioned.clone(), set("j", "3", None)]);
    let on_leader = apply_one(&mut leader, next()).await?;
    let on_follower = apply_one(&mut follower, next()).await?;
    assert_eq!(
        on_leader.result,
        Ok(vec![
            OperationResult::Set { version: 4 },
            OperationResult::Set { version: 4 }
        ])
    );
    assert_eq!(on_follower, on_leader);
    // The change events of entry 4 name the snapshot's values as old ones.
    let changes = |state: &StateMachineStore<E>| -> Result<Vec<_>, Box<dyn std::error::Error>> {
        let page = state
            .reader()
            .changes((3, u32::MAX), 100, "")?
            .map_err(|compacted| format!("{compacted:?}"))?;
        Ok(page.events)
    };
    let follower_changes = changes(&follower)?;
    assert_eq!(follower_changes, changes(&leader)?);
    assert_eq!(follower_changes.len(), 2, "{follower_changes:?}");
    Ok(())
}

#[tokio::test]
async fn apply_after_an_install_reads_the_snapshot_on_memory_engines() -> TestResult {
    apply_after_an_install_reads_the_snapshot([Arc::new(MemoryEngine::new()), Arc::new(MemoryEngine::new())]).await
}

#[tokio::test]
async fn apply_after_an_install_reads_the_snapshot_on_rocksdb_engines() -> TestResult {
    let leader = tempfile::tempdir()?;
    let follower = tempfile::tempdir()?;
    apply_after_an_install_reads_the_snapshot([
        Arc::new(RocksEngine::open(leader.path())?),
        Arc::new(RocksEngine::open(follower.path())?),
    ])
    .await
}

#[tokio::test]
async fn dedup_records_expire_after_the_proposed_retention() -> TestResult {
    let mut state = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    let with_retention = |index: u64, time: u64, op_id: u128, value: &str| {
        let mut proposal = Proposal::single(command(time, Some(op_id), vec![set("k", value, None)]));
        proposal.retention.dedup_micros = 1_000;
        Entry::<TypeConfig> {
            log_id: log_id(2, 1, index),
            payload: EntryPayload::Normal(proposal),
        }
    };
    state.apply([with_retention(1, 10_000, 5, "first")]).await?;
    // Within the retention: deduplicated.
    let within = state
        .apply([with_retention(2, 10_500, 5, "second")])
        .await?
        .remove(0)
        .outcomes
        .remove(0);
    assert!(within.deduplicated);
    // Past it the op id is new again, though no entry has pruned the
    // record yet (pruning runs on every 16th entry).
    state.apply([with_retention(3, 20_000, 6, "other")]).await?;
    let after = state
        .apply([with_retention(4, 20_001, 5, "third")])
        .await?
        .remove(0)
        .outcomes
        .remove(0);
    assert!(!after.deduplicated);
    assert_eq!(
        state.reader().get_entry("ns", b"k", 0)?.ok_or("entry")?.value,
        b"third".to_vec()
    );
    // Entry 16 prunes what is past the retention; the record that replaced
    // op id 5's expired one is not taken with it.
    for index in 5..=16u64 {
        state
            .apply([with_retention(index, 20_001 + index, 100 + u128::from(index), "filler")])
            .await?;
    }
    let repeat = state
        .apply([with_retention(17, 20_030, 5, "fourth")])
        .await?
        .remove(0)
        .outcomes
        .remove(0);
    assert!(repeat.deduplicated, "{repeat:?}");
    assert_eq!(repeat.index, after.index);
    Ok(())
}

/// An entry of one `set` under `op_id`, proposed with a dedup retention of
/// `retention_micros`.
fn retained(index: u64, time: u64, op_id: u128, retention_micros: u64) -> Entry<TypeConfig> {
    let mut proposal = Proposal::single(command(time, Some(op_id), vec![set("k", "v", None)]));
    proposal.retention.dedup_micros = retention_micros;
    Entry::<TypeConfig> {
        log_id: log_id(2, 1, index),
        payload: EntryPayload::Normal(proposal),
    }
}

/// Op ids 1 to 16 at times 10,000 (op id 1) and 20,001 to 20,015, with a
/// retention of 1,000: entry 16 forgets what is older than 19,015.
async fn apply_sixteen<E: Engine>(state: &mut StateMachineStore<E>) -> TestResult {
    state.apply([retained(1, 10_000, 1, 1_000)]).await?;
    for index in 2..=16u64 {
        state
            .apply([retained(index, 20_000 + index - 1, u128::from(index), 1_000)])
            .await?;
    }
    Ok(())
}

/// After `apply_sixteen`: op id 16 still answers, op id 1 does not, even
/// under a retention that would cover it.
async fn answers_after_sixteen<E: Engine>(state: &mut StateMachineStore<E>) -> TestResult {
    let repeat = apply_one(state, retained(17, 20_020, 16, 1_000)).await?;
    assert!(repeat.deduplicated, "{repeat:?}");
    let again = apply_one(state, retained(18, 20_021, 1, 1_000_000)).await?;
    assert!(!again.deduplicated, "{again:?}");
    Ok(())
}

fn dedup_records<E: Engine>(engine: &E) -> Result<usize, Box<dyn std::error::Error>> {
    Ok(engine.scan(Space::Dedup, &[], None, usize::MAX)?.len())
}

#[tokio::test]
async fn a_longer_retention_never_brings_back_a_forgotten_record() -> TestResult {
    let engine = Arc::new(MemoryEngine::new());
    let mut state = StateMachineStore::open(engine.clone())?;
    apply_sixteen(&mut state).await?;
    // Op id 1's record is still stored (no snapshot has let the engine drop
    // it), and a retention of a whole second would cover it, but entry 16
    // forgot it: every replica answers alike whether it still holds it.
    assert_eq!(dedup_records(engine.as_ref())?, 16);
    let long = 1_000_000;
    let repeat = apply_one(&mut state, retained(17, 20_020, 1, long)).await?;
    assert!(!repeat.deduplicated, "{repeat:?}");
    assert_eq!(repeat.index, 17);
    // A record after the forgotten-before time still answers, also under
    // the longer retention.
    let repeat = apply_one(&mut state, retained(18, 20_021, 2, long)).await?;
    assert!(repeat.deduplicated, "{repeat:?}");
    assert_eq!(repeat.index, 2);
    Ok(())
}

#[tokio::test]
async fn a_stored_snapshot_lets_the_engine_drop_forgotten_records() -> TestResult {
    let engine = Arc::new(MemoryEngine::new());
    let mut state = StateMachineStore::open(engine.clone())?;
    apply_sixteen(&mut state).await?;
    state.get_snapshot_builder().await.build_snapshot().await?;
    assert_eq!(dedup_records(engine.as_ref())?, 15, "op id 1's record is dropped");
    // A crash goes back no further than the snapshot: the state there
    // answers alike with or without the record.
    engine.crash();
    let mut state = StateMachineStore::open(engine.clone())?;
    answers_after_sixteen(&mut state).await
}

#[tokio::test]
async fn rocksdb_drops_forgotten_records_as_it_compacts_once_a_snapshot_is_stored() -> TestResult {
    let directory = tempfile::tempdir()?;
    let engine = Arc::new(RocksEngine::open(directory.path().join("state"))?);
    let mut state = StateMachineStore::open(engine.clone())?;
    apply_sixteen(&mut state).await?;
    // Compacting before any snapshot is stored drops nothing: a crash could
    // go back to a state that still answers from op id 1's record.
    engine.compact()?;
    assert_eq!(dedup_records(engine.as_ref())?, 16);
    state.get_snapshot_builder().await.build_snapshot().await?;
    assert_eq!(dedup_records(engine.as_ref())?, 16, "dropped only as it compacts");
    engine.compact()?;
    assert_eq!(dedup_records(engine.as_ref())?, 15);
    answers_after_sixteen(&mut state).await
}

/// Op ids begin with their client's clock, so dedup table files rarely
/// overlap and move down without a rewrite: only a periodic compaction
/// takes each through the filter above. RocksDB's own record of the
/// options a database runs with (its `OPTIONS-*` file) must show one far
/// shorter than its default of 30 days.
#[test]
fn rocksdb_compacts_every_dedup_file_within_minutes() -> TestResult {
    use lode_raft_store::engine::rocks::DEDUP_FILE_AGE_SECONDS_MAX;
    let directory = tempfile::tempdir()?;
    let engine = RocksEngine::open(directory.path().join("state"))?;
    drop(engine);
    let mut options_files = Vec::new();
    for file in std::fs::read_dir(directory.path().join("state").join("db"))? {
        let path = file?.path();
        if path
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("OPTIONS-"))
        {
            options_files.push(path);
        }
    }
    options_files.sort();
    let newest = options_files.last().ok_or("no OPTIONS file")?;
    let text = std::fs::read_to_string(newest)?;
    let family = |name: &str| -> Option<String> {
        let start = text.find(&format!("[CFOptions \"{name}\"]"))?;
        let rest = &text[start + 1..];
        let end = rest.find("\n[CFOptions").unwrap_or(rest.len());
        Some(rest[..end].to_owned())
    };
    let seconds = |section: &str| -> Option<u64> {
        section
            .lines()
            .find_map(|line| line.trim().strip_prefix("periodic_compaction_seconds="))
            .and_then(|value| value.parse().ok())
    };
    let dedup = family(Space::Dedup.name()).ok_or("no dedup family in the options")?;
    assert_eq!(seconds(&dedup), Some(DEDUP_FILE_AGE_SECONDS_MAX));
    Ok(())
}

#[tokio::test]
async fn apply_records_changes_of_live_values_in_commit_order() -> TestResult {
    use lode_raft_store::command::ChangeKind;
    let mut state = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    let reader = state.reader();
    apply_one(
        &mut state,
        entry(1, 1_000, None, vec![set("a", "1", None), set("b", "2", Some(1_500))]),
    )
    .await?;
    apply_one(&mut state, entry(2, 1_100, None, vec![set("a", "3", None)])).await?;
    let oversized = Operation::Delete {
        namespace: "ns".to_owned(),
        key: vec![1; 4096],
        session: None,
    };
    // A refused command records nothing; an expiry change is no value change.
    apply_one(&mut state, entry(3, 1_200, None, vec![delete("a"), oversized])).await?;
    apply_one(
        &mut state,
        entry(
            4,
            1_300,
            None,
            vec![Operation::Expire {
                namespace: "ns".to_owned(),
                key: b"a".to_vec(),
                expires_at_micros: Some(9_000),
            }],
        ),
    )
    .await?;
    // "b" expired at 1500: its sweep records nothing, deleting "a" does.
    apply_one(
        &mut state,
        entry(5, 2_000, None, vec![Operation::SweepExpired { entries_max: 10 }]),
    )
    .await?;
    apply_one(&mut state, entry(6, 2_100, None, vec![delete("a")])).await?;

    let page = reader
        .changes((0, 0), 100, "")?
        .map_err(|compacted| format!("{compacted:?}"))?;
    let summary: Vec<_> = page
        .events
        .iter()
        .map(|event| {
            (
                event.position(),
                event.key.clone(),
                event.kind,
                event.old_value.clone(),
                event.new_value.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ((1, 0), b"a".to_vec(), ChangeKind::Created, None, Some(b"1".to_vec())),
            ((1, 1), b"b".to_vec(), ChangeKind::Created, None, Some(b"2".to_vec())),
            (
                (2, 0),
                b"a".to_vec(),
                ChangeKind::Updated,
                Some(b"1".to_vec()),
                Some(b"3".to_vec())
            ),
            ((6, 0), b"a".to_vec(), ChangeKind::Deleted, Some(b"3".to_vec()), None),
        ]
    );
    assert_eq!(page.resume_after, (6, 0));
    // Reading after a position returns only what follows it.
    let rest = reader
        .changes((2, 0), 100, "")?
        .map_err(|compacted| format!("{compacted:?}"))?;
    assert_eq!(rest.events.len(), 1);
    assert!(reader
        .changes((0, 0), 100, "other")?
        .map_err(|c| format!("{c:?}"))?
        .events
        .is_empty());
    Ok(())
}

#[tokio::test]
async fn the_change_log_is_trimmed_to_its_limit_and_says_so() -> TestResult {
    let mut state = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    let reader = state.reader();
    for index in 1..=10u64 {
        let mut proposal = Proposal::single(command(index, None, vec![set(&format!("k{index}"), "v", None)]));
        proposal.retention.change_events_max = 3;
        let entry = Entry::<TypeConfig> {
            log_id: log_id(2, 1, index),
            payload: EntryPayload::Normal(proposal),
        };
        state.apply([entry]).await?;
    }
    let page = reader.changes((7, 0), 100, "")?.map_err(|c| format!("{c:?}"))?;
    let positions: Vec<_> = page.events.iter().map(|event| event.position()).collect();
    assert_eq!(positions, vec![(8, 0), (9, 0), (10, 0)]);
    let compacted = reader.changes((0, 0), 100, "")?.expect_err("trimmed");
    assert_eq!(compacted.trimmed_through, (7, 0));
    Ok(())
}

/// A large change log runs over its limit by at most 1/64 of it, and each
/// trim takes it back to the limit: trims come in batches, not one event
/// per entry.
#[tokio::test]
async fn a_large_change_log_is_trimmed_back_to_its_limit_past_a_slack() -> TestResult {
    let mut state = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    let reader = state.reader();
    let (limit, slack) = (128u64, 2u64);
    let mut counts = Vec::new();
    for index in 1..=150u64 {
        let mut proposal = Proposal::single(command(index, None, vec![set(&format!("k{index}"), "v", None)]));
        proposal.retention.change_events_max = limit;
        let entry = Entry::<TypeConfig> {
            log_id: log_id(2, 1, index),
            payload: EntryPayload::Normal(proposal),
        };
        state.apply([entry]).await?;
        let after = match reader.changes((0, 0), 1000, "")? {
            Ok(_) => (0, 0),
            Err(compacted) => compacted.trimmed_through,
        };
        let page = reader.changes(after, 1000, "")?.map_err(|c| format!("{c:?}"))?;
        counts.push(page.events.len() as u64);
    }
    assert!(counts.iter().all(|count| *count <= limit + slack), "{counts:?}");
    assert!(counts.contains(&(limit + slack)), "the slack is used: {counts:?}");
    assert_eq!(
        counts[limit as usize + slack as usize],
        limit,
        "a trim goes back to the limit: {counts:?}"
    );
    Ok(())
}

/// A bad or truncated image never replaces live state: the install fails,
/// the member's state and stored snapshot are as before, and it reopens.
async fn a_bad_image_changes_nothing<E: Engine>(source: Arc<E>, target: Arc<E>) -> TestResult {
    let mut leader = StateMachineStore::open(source)?;
    leader.apply(sample_log()).await?;
    leader.get_snapshot_builder().await.build_snapshot().await?;
    let mut snapshot = leader.get_current_snapshot().await?.ok_or("a snapshot is stored")?;
    let mut image = Vec::new();
    snapshot.snapshot.read_to_end(&mut image).await?;

    let mut follower = StateMachineStore::open(target)?;
    apply_one(&mut follower, entry(1, 1_000, None, vec![set("mine", "kept", None)])).await?;
    let reader = follower.reader();
    let applied = follower.applied_state().await?.0;
    assert!(applied.is_some());
    let truncated = image[..image.len() / 2].to_vec();
    let not_an_image = vec![0xff; 64];
    for bad in [truncated, not_an_image, Vec::new()] {
        // Written the way openraft writes a received snapshot.
        let mut receiving = follower.begin_receiving_snapshot().await?;
        receiving.write_all(&bad).await?;
        receiving.shutdown().await?;
        let installed = follower.install_snapshot(&snapshot.meta, receiving).await;
        assert!(installed.is_err(), "a bad image was installed");
        assert_eq!(follower.applied_state().await?.0, applied);
        assert_eq!(
            reader.get_entry("ns", b"mine", 0)?.map(|entry| entry.value),
            Some(b"kept".to_vec())
        );
        assert!(
            follower.get_current_snapshot().await?.is_none(),
            "a bad image was saved"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_bad_snapshot_image_changes_nothing_on_memory_engines() -> TestResult {
    a_bad_image_changes_nothing(Arc::new(MemoryEngine::new()), Arc::new(MemoryEngine::new())).await
}

#[tokio::test]
async fn a_bad_snapshot_image_changes_nothing_on_rocksdb_engines() -> TestResult {
    let directory = tempfile::tempdir()?;
    let source = Arc::new(RocksEngine::open(directory.path().join("source"))?);
    let target = Arc::new(RocksEngine::open(directory.path().join("target"))?);
    a_bad_image_changes_nothing(source, target).await?;
    let left: Vec<_> = std::fs::read_dir(directory.path().join("target/snapshots"))?
        .map(|item| item.map(|item| item.file_name()))
        .collect::<Result<_, _>>()?;
    assert!(left.is_empty(), "refused images were left on disk: {left:?}");
    let reopened = StateMachineStore::open(Arc::new(RocksEngine::open(directory.path().join("target"))?))?;
    assert_eq!(reopened.reader().applied_index(), 1);
    Ok(())
}

/// A namespace listing is whole or refused: past `namespaces_listed_max`
/// it answers `None`, and a longer prefix lists part of them whole.
#[tokio::test]
async fn a_namespace_listing_past_its_limit_is_refused_not_cut() -> TestResult {
    use lode_raft_store::limits::{NAMESPACES_LISTED_MAX, OPERATIONS_PER_WRITE_MAX};
    let mut state = StateMachineStore::open(Arc::new(MemoryEngine::new()))?;
    let names: Vec<String> = (0..=NAMESPACES_LISTED_MAX)
        .map(|index| format!("n{index:05}"))
        .collect();
    for (index, chunk) in names.chunks(OPERATIONS_PER_WRITE_MAX).enumerate() {
        let operations = chunk
            .iter()
            .map(|namespace| {
                let mut operation = set("k", "1", None);
                if let Operation::Set { namespace: target, .. } = &mut operation {
                    target.clone_from(namespace);
                }
                operation
            })
            .collect();
        apply_one(&mut state, entry(index as u64 + 1, 1_000, None, operations)).await?;
    }
    let reader = state.reader();
    assert_eq!(reader.namespaces("n", 0)?, None, "a listing of every namespace was cut");
    let part = reader.namespaces("n0000", 0)?.ok_or("ten namespaces list whole")?;
    assert_eq!(part, names[..10].to_vec());
    Ok(())
}

/// A page of the change feed reads the events it hands out and passes
/// over, and no more: it once read every event it might examine (up to
/// 10,000, values and all) behind a reader catching up, for a page of a few.
#[tokio::test]
async fn a_changes_page_reads_no_event_past_the_one_that_fills_it() -> TestResult {
    use rocksdb::perf::{set_perf_stats, PerfContext, PerfMetric, PerfStatsLevel};
    let directory = tempfile::tempdir()?;
    let mut state = StateMachineStore::open(Arc::new(RocksEngine::open(directory.path())?))?;
    let reader = state.reader();
    let value = "v".repeat(1024);
    let sets = (0..200)
        .map(|key| set(&format!("key-{key:03}"), &value, None))
        .collect();
    apply_one(&mut state, entry(1, 1_000, None, sets)).await?;
    // The events are still in the memtable: each step a read takes over
    // them is a step of the memtable's iterator.
    let mut steps = Vec::new();
    for limit in [5, 200] {
        set_perf_stats(PerfStatsLevel::EnableCount);
        let mut context = PerfContext::default();
        context.reset();
        let page = reader.changes((0, 0), limit, "");
        steps.push(context.metric(PerfMetric::NextOnMemtableCount));
        set_perf_stats(PerfStatsLevel::Disable);
        let page = page?.map_err(|compacted| format!("{compacted:?}"))?;
        assert_eq!(page.events.len(), limit);
        assert_eq!(page.resume_after, (1, limit as u32 - 1));
    }
    assert!(steps[0] < 5, "a page of 5 stepped over {} events", steps[0]);
    assert!(
        steps[1] >= 199,
        "the count can tell: a page of 200 stepped {} times",
        steps[1]
    );
    Ok(())
}
