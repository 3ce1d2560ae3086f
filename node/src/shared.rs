//! What a member's request handlers and background tasks share: Raft, the
//! state reader, the read index, the proposer, peer connections, the
//! configuration and the member's clock.

use std::collections::BTreeSet;
use std::sync::Arc;

use lode_raft_store::{SelectedEngine, StateReader, TypeConfig};
use openraft::Raft;

use crate::clock::MemberClock;
use crate::cluster_identity::ClusterIdentity;
use crate::config::NodeConfig;
use crate::network::PeerConnections;
use crate::proposer::Proposer;
use crate::reads::ReadIndex;

/// What request handlers share.
pub struct Shared {
    pub id: u64,
    pub raft: Raft<TypeConfig>,
    pub reader: StateReader<SelectedEngine>,
    pub read_index: ReadIndex,
    /// Linearizable reads served on this member while it follows.
    pub follower_reads: crate::follower_reads::FollowerReads,
    pub proposer: Proposer,
    pub peers: PeerConnections,
    pub config: NodeConfig,
    pub clock: MemberClock,
    pub cluster: Arc<ClusterIdentity>,
    /// Held by every membership change this member makes as leader:
    /// openraft refuses (and logs at ERROR) a change while another is
    /// uncommitted, and members publishing their client addresses at once
    /// would race.
    pub membership_changes: tokio::sync::Mutex<()>,
    /// Requests being served; shutdown waits for them.
    pub in_flight: Arc<()>,
    /// Users, roles and tokens as this member applied them.
    pub auth: crate::auth::AuthCache,
    /// Backups being read from this member.
    pub backups: crate::backup::Backups,
    /// The state's size and its quota.
    pub quota: Arc<crate::storage_quota::StorageQuota>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The state engine, for the metrics' RocksDB properties.
    pub state_engine: Arc<SelectedEngine>,
    /// When this member was first seen leading in its current term (the
    /// handoff waits until its own vote is older than the leader lease).
    pub leading_since: std::sync::Mutex<Option<(u64, tokio::time::Instant)>>,
    /// Whether this member may take part in Raft (`admission.rs`).
    pub admission: crate::admission::Admission,
    /// Members that answered `not_admitted`, for the leader to readmit.
    pub lost_members: Arc<crate::admission::LostMembers>,
    /// Refusals being decided again after a catch-up
    /// (`service::REFUSAL_RECHECKS_MAX`).
    pub refusal_rechecks: tokio::sync::Semaphore,
}

/// Voter ids in the current membership.
pub fn voter_ids(raft: &Raft<TypeConfig>) -> BTreeSet<u64> {
    raft.metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect()
}
