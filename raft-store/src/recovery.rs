//! Quorum-loss recovery (`lode node --force-new-cluster`): a surviving
//! member rewrites the membership to itself alone, keeping every entry it
//! has, as etcd's `--force-new-cluster` does.
//!
//! Nothing is truncated or rewritten in place: a membership entry naming
//! this member as the only voter is appended after its last entry, under a
//! term above every term it has seen, with its vote for itself in that
//! term. openraft takes the last membership entry in the log as the
//! effective one, so on start the member is the only voter, elects itself
//! and commits everything its log holds. The cluster gets a new id, so the
//! members it replaces, if they come back with their old data, answer none
//! of its messages.

use std::collections::{BTreeMap, BTreeSet};

use openraft::storage::{RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership, StorageError, Vote};

use crate::engine::Engine;
use crate::error::write_error;
use crate::log_store::LogStore;
use crate::state_machine::StateMachineStore;
use crate::type_config::{Member, NodeId, TypeConfig};

/// Entries read at once while looking for the last membership entry.
const MEMBERSHIP_SCAN_ENTRIES: u64 = 1024;

/// Who the survivor is and the id of the cluster it starts.
#[derive(Clone, Debug)]
pub struct ForcePlan {
    pub member_id: NodeId,
    pub member: Member,
    pub cluster_id: u128,
}

/// Why a forced membership cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum ForceError {
    #[error("this member holds no cluster state: there is nothing to recover from")]
    NoState,
    #[error("reading or writing the log failed: {0}")]
    Storage(#[from] Box<StorageError<NodeId>>),
}

impl From<StorageError<NodeId>> for ForceError {
    fn from(error: StorageError<NodeId>) -> Self {
        Self::Storage(Box::new(error))
    }
}

/// The membership in effect: the last membership entry in the log, or
/// the state machine's if the log holds none; `NoState` if the member
/// never belonged to a cluster.
pub async fn effective_membership<E: Engine>(
    log: &mut LogStore<E>,
    state: &mut StateMachineStore<E>,
) -> Result<Membership<NodeId, Member>, ForceError> {
    let log_state = log.get_log_state().await?;
    let Some(last) = log_state.last_log_id else {
        return Err(ForceError::NoState);
    };
    let first_index = log_state.last_purged_log_id.map_or(0, |purged| purged.index + 1);
    let mut end = last.index + 1;
    while end > first_index {
        let start = end.saturating_sub(MEMBERSHIP_SCAN_ENTRIES).max(first_index);
        let entries = log.try_get_log_entries(start..end).await?;
        if let Some(membership) = entries.iter().rev().find_map(|entry| match &entry.payload {
            EntryPayload::Membership(membership) => Some(membership.clone()),
            _ => None,
        }) {
            return Ok(membership);
        }
        end = start;
    }
    let (_, stored) = state.applied_state().await?;
    Ok(stored.membership().clone())
}

/// Makes `plan.member_id` the only voter of a cluster with id
/// `plan.cluster_id`, keeping every entry; before Raft starts. Answers the
/// position of the membership entry it appended.
pub async fn force_single_voter<E: Engine>(
    log: &mut LogStore<E>,
    plan: &ForcePlan,
) -> Result<LogId<NodeId>, ForceError> {
    let log_state = log.get_log_state().await?;
    let vote = log.read_vote().await?.unwrap_or_default();
    let Some(last) = log_state.last_log_id else {
        return Err(ForceError::NoState);
    };
    let term = vote.leader_id().term.max(last.leader_id.term) + 1;
    let log_id = LogId::new(CommittedLeaderId::new(term, plan.member_id), last.index + 1);
    let membership = Membership::new(
        vec![BTreeSet::from([plan.member_id])],
        BTreeMap::from([(plan.member_id, plan.member.clone())]),
    );
    let entry = Entry::<TypeConfig> {
        log_id,
        payload: EntryPayload::Membership(membership),
    };
    // Not committed: on start the member elects itself in the next term,
    // the one voter's quorum.
    let vote = Vote::new(term, plan.member_id);
    log.write_forced(&entry, &vote, plan.cluster_id)
        .await
        .map_err(write_error)?;
    Ok(log_id)
}
