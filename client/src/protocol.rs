//! The wire protocol: one service that every member serves on its client
//! port and on its peer port. The client port refuses the `raft` call;
//! the peer port, mutually authenticated when TLS is on, serves members
//! only. tarpc's macro declares it; the `rpc` module carries its requests
//! and answers.

use serde::{Deserialize, Serialize};
pub use serde_bytes::ByteBuf;

use crate::error::LodeError;
use crate::limits::{bytes, over_limit};

pub use lode_types::{
    ChangeEvent, ChangeKind, CounterKind, Encoding, Fence, KeyRange, Operation, OperationResult, Precondition,
    Selector, SessionLink,
};

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

/// What a read asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    /// The live entry at a key.
    Get {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    /// A live entry's version, expiry and size, without its value.
    Exists {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    /// The live entries at several keys, from one consistent view.
    GetMany { namespace: String, keys: Vec<ByteBuf> },
    /// One page of live selected entries in key order, after `after`.
    Scan {
        namespace: String,
        selector: Selector,
        #[serde(with = "serde_bytes")]
        after: Option<Vec<u8>>,
        limit: u32,
    },
    /// Namespaces holding live entries whose names start with `prefix`.
    Namespaces { prefix: String },
    /// One page of the (namespace, key) pairs written under a session.
    SessionKeys {
        session: SessionLink,
        #[serde(with = "serde_bytes")]
        after: Option<Vec<u8>>,
        limit: u32,
    },
    /// Change events after a change log position, in commit order, of
    /// namespaces starting with `namespace_prefix`. Waits up to `wait_ms`
    /// for new events when there are none yet.
    Changes {
        after_index: u64,
        after_sequence: u32,
        namespace_prefix: String,
        limit: u32,
        wait_ms: u64,
    },
    /// The live lease at a key of a coordination namespace.
    Lease {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    /// Live entries of several key ranges of a namespace, all read from one
    /// consistent view of one replica (Deno KV's snapshot read).
    Ranges { namespace: String, ranges: Vec<KeyRange> },
    /// When the next queue message is due. Waits up to `wait_ms` for one
    /// to be due now before answering.
    NextDelivery { wait_ms: u64 },
    /// State API change events (namespaces `state:<scope>`) after a change
    /// log position that match `filter`, waiting up to `wait_ms` for one;
    /// answered as `Changes`, whose `resume_after` passes over the events
    /// the filter dropped.
    StateEvents {
        after_index: u64,
        after_sequence: u32,
        filter: StateEventFilter,
        limit: u32,
        wait_ms: u64,
    },
}

/// The answer to a [`Query`], variant for variant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueryResult {
    Entry(Option<Entry>),
    Exists(Option<EntryMeta>),
    Entries(Vec<Option<Entry>>),
    Page {
        entries: Vec<Entry>,
        /// Where the next page starts; `None` when the range is done.
        #[serde(with = "serde_bytes")]
        resume_after: Option<Vec<u8>>,
    },
    Namespaces(Vec<String>),
    Lease(Option<LeaseInfo>),
    SessionKeys {
        keys: Vec<(String, ByteBuf)>,
        #[serde(with = "serde_bytes")]
        resume_after: Option<Vec<u8>>,
    },
    Changes {
        events: Vec<ChangeEvent>,
        /// Where the next read continues: (log index, sequence).
        resume_after: (u64, u32),
    },
    /// One list of entries per requested range, in the range's walk order.
    Ranges(Vec<Vec<Entry>>),
    /// When the next queue message is due, if any waits, and whether it
    /// is due now by the answering member's clock.
    NextDelivery {
        due_at_micros: Option<u64>,
        due_now: bool,
    },
}

/// A live lease: who holds it, its fencing token and its expiry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    pub holder: String,
    pub token: u64,
    pub expires_at_micros: u64,
}

/// What `exists` reports of a live entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryMeta {
    pub version: u64,
    pub expires_at_micros: Option<u64>,
    /// The value's size in bytes.
    pub size_bytes: u64,
}

impl Query {
    /// The query's name in messages and metrics labels.
    pub fn name(&self) -> &'static str {
        match self {
            Query::Get { .. } => "get",
            Query::Exists { .. } => "exists",
            Query::GetMany { .. } => "get_many",
            Query::Scan { .. } => "scan",
            Query::Namespaces { .. } => "namespaces",
            Query::SessionKeys { .. } => "session_keys",
            Query::Changes { .. } => "changes",
            Query::Lease { .. } => "lease",
            Query::Ranges { .. } => "ranges",
            Query::NextDelivery { .. } => "next_delivery",
            Query::StateEvents { .. } => "state_events",
        }
    }

    /// Checks the query's limits; the message names the field and the limit.
    pub fn validate(&self) -> Result<(), String> {
        use crate::limits::{
            check_key, check_namespace, GET_MANY_KEYS_MAX, NAMESPACE_BYTES_MAX, SCAN_PAGE_ENTRIES_MAX,
        };
        match self {
            Query::Get { namespace, key } | Query::Exists { namespace, key } | Query::Lease { namespace, key } => {
                check_namespace(namespace)?;
                check_key(key)
            }
            Query::GetMany { namespace, keys } => {
                check_namespace(namespace)?;
                if keys.len() > GET_MANY_KEYS_MAX {
                    return Err(over_limit(
                        "the number of keys",
                        keys.len(),
                        "get_many_keys_max",
                        GET_MANY_KEYS_MAX,
                    ));
                }
                keys.iter().try_for_each(|key| check_key(key))
            }
            Query::Scan {
                namespace,
                selector,
                after,
                limit,
            } => {
                check_namespace(namespace)?;
                selector.validate()?;
                if let Some(after) = after {
                    check_key(after).map_err(|message| message.replacen("key", "cursor", 1))?;
                }
                if *limit == 0 || *limit as usize > SCAN_PAGE_ENTRIES_MAX {
                    return Err(format!(
                        "limit must be 1 to scan_page_entries_max = {SCAN_PAGE_ENTRIES_MAX}"
                    ));
                }
                Ok(())
            }
            Query::SessionKeys { session, limit, .. } => {
                session.validate()?;
                if *limit == 0 || *limit as usize > SCAN_PAGE_ENTRIES_MAX {
                    return Err(format!(
                        "limit must be 1 to scan_page_entries_max = {SCAN_PAGE_ENTRIES_MAX}"
                    ));
                }
                Ok(())
            }
            Query::Changes {
                namespace_prefix,
                limit,
                wait_ms,
                ..
            } => {
                if namespace_prefix.len() > NAMESPACE_BYTES_MAX {
                    return Err(over_limit(
                        "namespace_prefix",
                        bytes(namespace_prefix.len()),
                        "namespace_bytes_max",
                        NAMESPACE_BYTES_MAX,
                    ));
                }
                check_change_page(*limit, *wait_ms)
            }
            Query::StateEvents {
                filter, limit, wait_ms, ..
            } => {
                filter.validate()?;
                check_change_page(*limit, *wait_ms)
            }
            Query::NextDelivery { wait_ms } => check_wait(*wait_ms),
            Query::Ranges { namespace, ranges } => {
                check_namespace(namespace)?;
                lode_types::validate_ranges(ranges)
            }
            Query::Namespaces { prefix } => {
                if prefix.len() > NAMESPACE_BYTES_MAX {
                    return Err(over_limit(
                        "prefix",
                        bytes(prefix.len()),
                        "namespace_bytes_max",
                        NAMESPACE_BYTES_MAX,
                    ));
                }
                Ok(())
            }
        }
    }
}

/// Checks the page size and the wait of a change read.
fn check_change_page(limit: u32, wait_ms: u64) -> Result<(), String> {
    use crate::limits::CHANGES_PAGE_EVENTS_MAX;
    if limit == 0 || limit as usize > CHANGES_PAGE_EVENTS_MAX {
        return Err(format!(
            "limit must be 1 to changes_page_events_max = {CHANGES_PAGE_EVENTS_MAX}"
        ));
    }
    check_wait(wait_ms)
}

/// Checks a server-side wait.
fn check_wait(wait_ms: u64) -> Result<(), String> {
    use crate::limits::CHANGES_WAIT_MS_MAX;
    if wait_ms > CHANGES_WAIT_MS_MAX {
        return Err(over_limit(
            "wait_ms",
            wait_ms,
            "changes_wait_ms_max",
            CHANGES_WAIT_MS_MAX,
        ));
    }
    Ok(())
}

/// Which State API changes a trigger receives; every field left empty
/// matches everything. Judged on the server, so events that cannot match
/// are never shipped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateEventFilter {
    /// Only this scope.
    pub scope: Option<String>,
    /// Only this key.
    pub key: Option<String>,
    /// Only these kinds of change (empty: all).
    pub kinds: Vec<ChangeKind>,
    /// Only changes where the JSON value at this pointer (RFC 6901, e.g.
    /// `/email`) differs between the old and the new value.
    pub changed_pointer: Option<String>,
}

impl StateEventFilter {
    /// The change-log namespace prefix the filter reads.
    pub fn namespace_prefix(&self) -> String {
        match &self.scope {
            Some(scope) => lode_types::state_update::scope_namespace(scope),
            None => lode_types::state_update::SCOPE_NAMESPACE_PREFIX.to_owned(),
        }
    }

    /// Checks the filter's fields against their limits.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(scope) = &self.scope {
            crate::limits::check_namespace(&lode_types::state_update::scope_namespace(scope))
                .map_err(|message| message.replacen("namespace", "scope", 1))?;
        }
        if let Some(key) = &self.key {
            crate::limits::check_key(key.as_bytes())?;
        }
        if let Some(pointer) = &self.changed_pointer {
            if !(pointer.is_empty() || pointer.starts_with('/')) || pointer.len() > crate::limits::KEY_BYTES_MAX {
                return Err(format!(
                    "changed_pointer must be a JSON pointer (empty or starting with '/') of at most {} bytes",
                    crate::limits::KEY_BYTES_MAX
                ));
            }
        }
        Ok(())
    }

    /// Whether a change event passes the filter.
    pub fn matches(&self, event: &ChangeEvent) -> bool {
        let Some(scope) = event
            .namespace
            .strip_prefix(lode_types::state_update::SCOPE_NAMESPACE_PREFIX)
        else {
            return false;
        };
        if self.scope.as_deref().is_some_and(|wanted| wanted != scope) {
            return false;
        }
        if self
            .key
            .as_ref()
            .is_some_and(|wanted| wanted.as_bytes() != event.key.as_slice())
        {
            return false;
        }
        if !self.kinds.is_empty() && !self.kinds.contains(&event.kind) {
            return false;
        }
        if let Some(pointer) = &self.changed_pointer {
            let at = |value: &Option<Vec<u8>>| {
                value
                    .as_deref()
                    .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(bytes).ok())
                    .and_then(|value| value.pointer(pointer).cloned())
            };
            if at(&event.old_value) == at(&event.new_value) {
                return false;
            }
        }
        true
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRequest {
    pub query: Query,
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
    /// The session whose write last set the value, if it named one.
    pub session: Option<SessionLink>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadResponse {
    pub result: QueryResult,
    /// The applied position the read was served at: a barrier for the next
    /// read elsewhere.
    pub position: u64,
}

/// A feature a server may or may not offer; the SDK checks before it sends
/// a call that needs one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Capability {
    /// Key-value reads and writes, scans, bulk deletes, patch, copy and move.
    Kv,
    /// Compare-and-swap: writes with a version or absence precondition.
    Cas,
    /// Leases with fencing tokens and fenced writes.
    FencedLeases,
    /// Copy-on-write branches of materialized views; no Lode server offers
    /// them yet.
    Forks,
}

/// A cluster's identity: created when the cluster is bootstrapped, stored
/// by every member, carried by every Raft message and join. Binary formats
/// carry the number; JSON carries its 32 hexadecimal digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterId(pub u128);

impl Serialize for ClusterId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&self.to_string())
        } else {
            serializer.serialize_u128(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for ClusterId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            text.parse().map_err(serde::de::Error::custom)
        } else {
            u128::deserialize(deserializer).map(ClusterId)
        }
    }
}

impl std::fmt::Display for ClusterId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{:032x}", self.0)
    }
}

impl std::str::FromStr for ClusterId {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.len() != 32 {
            return Err(format!("cluster id {text:?} is not 32 hexadecimal digits"));
        }
        u128::from_str_radix(text, 16)
            .map(ClusterId)
            .map_err(|_| format!("cluster id {text:?} is not 32 hexadecimal digits"))
    }
}

/// Where a member is reached: its peer port (members only) and its client
/// port. An empty client address is one the member has not published yet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberAddresses {
    pub peer: String,
    pub client: String,
}

/// One member as the cluster status reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    pub id: u64,
    /// The member's client address (empty until it has published it).
    pub address: String,
    pub peer_address: String,
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
    /// The answering member's cluster; `None` before it has joined one.
    pub cluster_id: Option<ClusterId>,
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
    /// Entries on the answering node that have expired and wait for the
    /// leader's sweep to remove them (counted up to 10,000).
    pub expired_awaiting_sweep: u64,
    /// On a leader, milliseconds since a quorum last acknowledged it;
    /// `None` on any other member, or before the first acknowledgement.
    pub quorum_ack_ms: Option<u64>,
}

/// A caller's token, kept out of `Debug` output and logs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessToken(pub String);

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("AccessToken(<hidden>)")
    }
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
    /// A write a member forwards to the leader after checking its caller's
    /// grants at `grants_revision` (none: a caller allowed everything).
    /// Served on the peer port only.
    async fn write_checked(request: WriteRequest, grants_revision: Option<u64>) -> Result<WriteResponse, LodeError>;
    async fn read(request: ReadRequest) -> Result<ReadResponse, LodeError>;
    /// What this server offers.
    async fn capabilities() -> Vec<Capability>;
    /// The cluster as the leader sees it (forwarded when needed).
    async fn cluster_status() -> Result<ClusterStatus, LodeError>;
    /// The cluster as the answering node itself sees it, never forwarded.
    async fn node_status() -> Result<ClusterStatus, LodeError>;
    /// Adds a member as a learner; the leader promotes it to voter once it
    /// keeps up.
    /// A member already present with the same peer address has its client
    /// address updated (members publish their own this way). `cluster` is
    /// the joining member's cluster, when it has one: another cluster's is
    /// refused.
    async fn add_member(
        id: u64,
        addresses: MemberAddresses,
        cluster: Option<ClusterId>,
    ) -> Result<ClusterStatus, LodeError>;
    /// Removes a member. A voter's removal is refused when the remaining
    /// voters that answer the leader would be no quorum of the remaining
    /// voters, unless `force`.
    async fn remove_member(id: u64, force: bool) -> Result<ClusterStatus, LodeError>;
    /// A Raft message from a peer of cluster `cluster`, answered with
    /// openraft's response bytes. Served on the peer port only.
    async fn raft(cluster: ClusterId, kind: RaftMessageKind, payload: ByteBuf) -> Result<ByteBuf, LodeError>;
    /// From a leader of cluster `cluster` handing off its leadership:
    /// start an election now (this member holds the leader's whole log).
    /// Served on the peer port only.
    async fn campaign(cluster: ClusterId) -> Result<(), LodeError>;
    /// From the leader (or the founder) of cluster `cluster`: this member,
    /// which holds no cluster state, may take part in Raft from now on.
    /// Served on the peer port only.
    async fn admit(cluster: ClusterId) -> Result<(), LodeError>;
    /// Names the caller of every later call on this connection by a token
    /// (`lode_types::auth`); answers the user it names. Checked again at
    /// every call, so a revoked or expired token stops working at once.
    async fn authenticate(token: AccessToken) -> Result<String, LodeError>;
    /// Admin: takes a backup of this member's state once it has applied
    /// every entry the leader had committed when asked. Answers the
    /// backup's id on this member and its header; the image is read with
    /// `backup_read` until `backup_end` (or a minute unread) removes it.
    async fn backup_begin() -> Result<(u64, lode_types::backup::BackupHeader), LodeError>;
    /// Admin: at most `backup_chunk_bytes_max` bytes of an open backup's
    /// image from `offset` (fewer only at its end).
    async fn backup_read(backup: u64, offset: u64, length: u32) -> Result<ByteBuf, LodeError>;
    /// Admin: removes an open backup's image.
    async fn backup_end(backup: u64) -> Result<(), LodeError>;
    /// From a follower of cluster `cluster` serving a linearizable read: the
    /// leader's read index (its commit index, once a quorum round that began
    /// after this call confirmed its leadership). The follower serves the
    /// read once it has applied that far. Served on the peer port only.
    async fn read_index(cluster: ClusterId) -> Result<u64, LodeError>;
}

/// The service's client over one `rpc` connection.
pub type ServiceClient = LodeServiceClient<crate::rpc::Channel<LodeServiceRequest, LodeServiceResponse>>;

/// Whether the connection under `client` has ended (a server closes an
/// idle one): the next call should dial afresh rather than fail.
pub(crate) fn has_ended(client: &ServiceClient) -> bool {
    client.0.is_ended()
}
