//! The wire protocol: one tarpc service that every node serves on its one
//! listen address, to clients and to peers alike.

use serde::{Deserialize, Serialize};
pub use serde_bytes::ByteBuf;

use crate::error::LodeError;

/// How a value's bytes are to be read; stored with the entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Encoding {
    #[default]
    Bytes,
    Json,
    Msgpack,
    Custom(String),
}

/// One operation of an atomic write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operation {
    Set {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        encoding: Encoding,
        expires_at_micros: Option<u64>,
    },
    Delete {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
}

/// The result of one operation, in request order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperationResult {
    Set { version: u64 },
    Delete { removed_live_entry: bool },
}

/// An atomic batch of operations with the op id that makes retries safe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRequest {
    pub op_id: u128,
    pub operations: Vec<Operation>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteResponse {
    /// The log index of the command: the version of every key it wrote and
    /// the position to use as a read barrier.
    pub position: u64,
    pub results: Vec<OperationResult>,
}

/// How fresh a read must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Consistency {
    /// Served by the leader after a read-index round: sees every write
    /// acknowledged before the read began.
    #[default]
    Linearizable,
    /// Served by any node once it has applied at least this position, or a
    /// `stale` error after the timeout.
    AtLeast(u64),
    /// Served by the receiving node from its local state, without waiting.
    Eventual,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRequest {
    pub namespace: String,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    pub consistency: Consistency,
}

/// A stored entry as a client sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    pub encoding: Encoding,
    pub version: u64,
    pub expires_at_micros: Option<u64>,
    /// The log id (term, index) of the command that wrote the value.
    pub source_term: u64,
    pub source_index: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadResponse {
    pub entry: Option<Entry>,
    /// The applied position the read was served at: a barrier for the next
    /// read elsewhere.
    pub position: u64,
}

/// One member as the cluster status reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    pub id: u64,
    pub address: String,
    pub voter: bool,
    /// The last log index the leader knows the member holds (from the
    /// leader's replication state; the answering node's own last log index
    /// for itself). `None` when the answering node is not the leader.
    pub matched_index: Option<u64>,
    /// The member's applied index as the member itself reports it; `None`
    /// when it could not be asked (down, or not asked).
    pub applied_index: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub answered_by: u64,
    pub leader: Option<u64>,
    pub term: u64,
    pub members: Vec<MemberStatus>,
    pub applied_index: u64,
    pub last_log_index: Option<u64>,
    /// The last log index covered by the answering node's snapshot.
    pub snapshot_index: Option<u64>,
    /// The last log index the answering node purged from its log.
    pub purged_index: Option<u64>,
}

/// Raft messages between nodes, as bincode bytes of openraft's types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RaftMessageKind {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

#[tarpc::service]
pub trait LodeService {
    /// Applies an atomic batch; followers forward it to the leader.
    async fn write(request: WriteRequest) -> Result<WriteResponse, LodeError>;
    async fn read(request: ReadRequest) -> Result<ReadResponse, LodeError>;
    /// The cluster as the leader sees it (forwarded when needed).
    async fn cluster_status() -> Result<ClusterStatus, LodeError>;
    /// The cluster as the answering node itself sees it, never forwarded.
    async fn node_status() -> Result<ClusterStatus, LodeError>;
    /// Adds a member: as a learner first, then as a voter once caught up.
    async fn add_member(id: u64, address: String) -> Result<ClusterStatus, LodeError>;
    async fn remove_member(id: u64) -> Result<ClusterStatus, LodeError>;
    /// A Raft message from a peer, answered with openraft's response bytes.
    async fn raft(kind: RaftMessageKind, payload: ByteBuf) -> Result<ByteBuf, LodeError>;
}
