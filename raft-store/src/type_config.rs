//! The openraft type configuration shared by every Lode crate that speaks Raft.

use serde::{Deserialize, Serialize};

use crate::command::{Proposal, ProposalOutcome};

/// A member's id in the cluster; ids are chosen by the operator and never reused.
pub type NodeId = u64;

/// How a member is reached, as the membership records it: peers talk to
/// its peer port (Raft, snapshots, forwarded requests), clients to its
/// client port, which a leader hint names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub peer_address: String,
    pub client_address: String,
}

impl std::fmt::Display for Member {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "peer {} client {}", self.peer_address, self.client_address)
    }
}

openraft::declare_raft_types!(
    /// Lode's Raft types: proposals (grouped commands) in, their outcomes out, members addressed by
    /// their peer and client addresses, snapshots as engine images (files for RocksDB) streamed in chunks.
    pub TypeConfig:
        D = Proposal,
        R = ProposalOutcome,
        NodeId = NodeId,
        Node = Member,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = crate::snapshot::SnapshotImage,
        AsyncRuntime = crate::runtime::LodeRuntime,
);
