//! A leader's appends of its own entries are synced in the background
//! (`raft-store/src/log_durability.rs`): these tests hold the log store and
//! the state machine to the rules that make that safe, on the memory
//! engine, whose crash loses every write not synced. Each runs on one
//! thread, so the background sync runs only when the test waits.

use std::sync::Arc;

use lode_raft_store::command::Proposal;
use lode_raft_store::{LogStore, MemoryEngine, NodeId, StateMachineStore, TypeConfig};
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload, Vote};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const LEADER: NodeId = 1;

mod support;

fn entry(leader: NodeId, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(3, leader, index),
        payload: EntryPayload::Normal(Proposal::single(support::set_command("appends", index))),
    }
}

struct Member {
    log_engine: Arc<MemoryEngine>,
    log: LogStore<MemoryEngine>,
    state: StateMachineStore<MemoryEngine>,
}

/// Member `LEADER` with a saved vote for `leader` in term 3.
async fn member_voting_for(leader: NodeId) -> Result<Member, Box<dyn std::error::Error>> {
    let log_engine = Arc::new(MemoryEngine::new());
    let mut log = LogStore::new(log_engine.clone()).syncing_own_appends_behind(LEADER);
    let state = StateMachineStore::open(Arc::new(MemoryEngine::new()))?.applying_only_durable(log.durability());
    log.save_vote(&Vote::new_committed(3, leader)).await?;
    Ok(Member { log_engine, log, state })
}

/// The indexes the log holds after its engine crashed.
async fn indexes_after_crash(member: &Member) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    member.log_engine.crash();
    let mut reopened = LogStore::new(member.log_engine.clone());
    let entries = reopened.try_get_log_entries(0..100).await?;
    Ok(entries.iter().map(|entry| entry.log_id.index).collect())
}

#[tokio::test(flavor = "current_thread")]
async fn a_leaders_own_append_reports_before_its_sync_and_apply_waits_for_it() -> TestResult {
    let mut member = member_voting_for(LEADER).await?;
    member.log.blocking_append([entry(LEADER, 1), entry(LEADER, 2)]).await?;
    // Reported written, not yet on disk: the sync task has not run.
    let durability = member.log.durability();
    assert!(
        !durability.is_durable(1),
        "the leader's append was synced before it reported"
    );
    // Apply waits for the sync, so what it applied survives a crash.
    member.state.apply([entry(LEADER, 1), entry(LEADER, 2)]).await?;
    assert_eq!(member.state.reader().applied_index(), 2);
    assert!(durability.is_durable(2));
    assert_eq!(indexes_after_crash(&member).await?, vec![1, 2]);
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn a_crash_before_the_background_sync_loses_only_what_nothing_applied() -> TestResult {
    let mut member = member_voting_for(LEADER).await?;
    member.log.blocking_append([entry(LEADER, 1)]).await?;
    member.state.apply([entry(LEADER, 1)]).await?;
    member.log.blocking_append([entry(LEADER, 2)]).await?;
    // The crash comes before the second append's sync: it is gone, and it
    // was never applied.
    assert_eq!(indexes_after_crash(&member).await?, vec![1]);
    assert_eq!(member.state.reader().applied_index(), 1);
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn a_followers_append_is_on_disk_when_it_reports() -> TestResult {
    let other_leader = LEADER + 1;
    let mut member = member_voting_for(other_leader).await?;
    member.log.blocking_append([entry(other_leader, 1)]).await?;
    assert!(member.log.durability().is_durable(1));
    assert_eq!(indexes_after_crash(&member).await?, vec![1]);
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn the_members_old_entries_from_another_leader_are_synced_first() -> TestResult {
    // Entries this member made as leader of an earlier term, sent back by
    // the current leader (another member): this member only follows now.
    let mut member = member_voting_for(LEADER + 1).await?;
    member.log.blocking_append([entry(LEADER, 1)]).await?;
    assert_eq!(indexes_after_crash(&member).await?, vec![1]);
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn a_restarted_leader_does_not_resume_its_term() -> TestResult {
    let member = member_voting_for(LEADER).await?;
    // Restarted, it must be elected in a later term before it appends: a
    // crash may have taken entries of its term that a follower holds.
    let mut restarted = LogStore::new(member.log_engine.clone()).syncing_own_appends_behind(LEADER);
    let vote = restarted.read_vote().await?.ok_or("the vote is gone")?;
    assert_eq!(vote, Vote::new(3, LEADER));
    assert!(!vote.is_committed(), "a restarted leader resumes leading its term");
    // Another member's committed vote reads back as it was saved.
    let follower = member_voting_for(LEADER + 1).await?;
    let mut restarted = LogStore::new(follower.log_engine.clone()).syncing_own_appends_behind(LEADER);
    assert_eq!(restarted.read_vote().await?, Some(Vote::new_committed(3, LEADER + 1)));
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_background_sync_stops_apply() -> TestResult {
    let mut member = member_voting_for(LEADER).await?;
    member.log.blocking_append([entry(LEADER, 1)]).await?;
    // The volume fills before the sync: the sync fails, and the entry it
    // was for is never applied.
    member.log_engine.set_full(true);
    let applied = member.state.apply([entry(LEADER, 1)]).await;
    let error = applied.err().ok_or("applied an entry whose sync failed")?;
    assert!(
        error.to_string().contains("not known to be on disk"),
        "unexpected error: {error}"
    );
    assert_eq!(member.state.reader().applied_index(), 0);
    Ok(())
}
