//! The openraft type configuration shared by every Lode crate that speaks Raft.

use std::io::Cursor;

use crate::command::{Proposal, ProposalOutcome};

/// A member's id in the cluster; ids are chosen by the operator and never reused.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// Lode's Raft types: proposals (grouped commands) in, their outcomes out, members addressed by
    /// their `host:port`, snapshots held in memory as one packed image.
    pub TypeConfig:
        D = Proposal,
        R = ProposalOutcome,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = crate::runtime::LodeRuntime,
);
