//! A member's configuration: who it is, where it keeps its data, how it
//! joins, and every limit and timing it runs with.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use lode_client::protocol::{ClusterId, MemberAddresses};
use lode_raft_store::MemoryEngine;

use crate::tls::MemberTls;

/// How a node becomes part of a cluster on its first start.
#[derive(Clone, Debug)]
pub enum Membership {
    /// Founding members by id and peer address; the smallest id
    /// initializes the cluster when it has never been initialized.
    Bootstrap(BTreeMap<u64, String>),
    /// Ask a running member (any, by its peer address) to add this node.
    Join(String),
    /// The node's data says which cluster it belongs to (a restart), or
    /// it waits to be added to the cluster it was told (`cluster_id`).
    Existing,
}

/// Where a member keeps its log and state machine.
#[derive(Clone, Debug)]
pub enum Storage {
    /// RocksDB under the data directory: `log/` and `state/`.
    Disk,
    /// In-memory engines with a crash model, for the deterministic
    /// simulation; restarting with the same engines is a restart from what
    /// was synced (after `MemoryEngine::crash`).
    Memory { log: MemoryEngine, state: MemoryEngine },
}

/// The cluster name when none is given.
pub const CLUSTER_NAME_DEFAULT: &str = "lode";

#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub id: u64,
    /// The addresses peers and clients use to reach this node.
    pub advertise: MemberAddresses,
    /// Tells founding clusters apart whose peer lists are the same; part
    /// of the founding cluster id.
    pub cluster_name: String,
    /// The cluster a new member that neither founds nor joins through a
    /// seed waits to be added to; it answers no other cluster's peers.
    pub cluster_id: Option<ClusterId>,
    pub data_dir: PathBuf,
    pub storage: Storage,
    pub membership: Membership,
    /// Applied entries between snapshots; the log before a snapshot is purged.
    pub snapshot_logs_max: u64,
    /// Bytes appended to the log since its last purge at which this member
    /// takes a snapshot, whatever the count of entries.
    pub snapshot_log_bytes_max: u64,
    pub heartbeat_interval_ms: u64,
    pub election_timeout_ms_min: u64,
    /// How long at-least-position reads wait before answering `stale`.
    pub read_wait_ms_max: u64,
    /// Time limit for one forwarded request to the leader.
    pub forward_timeout_ms: u64,
    /// How often the leader checks for expired entries to sweep.
    pub sweep_interval_ms: u64,
    /// The longest lease this node grants as leader, whatever is asked.
    pub lease_ttl_ms_max: u64,
    /// How long op ids proposed by this node as leader stay deduplicated.
    pub dedup_retention_ms: u64,
    /// Most change events the cluster keeps while this node leads.
    pub change_log_events_max: u64,
    /// Most bytes of change events the cluster keeps while this node leads.
    pub change_log_bytes_max: u64,
    /// TLS on every port and towards peers; `None`: in the clear.
    pub tls: Option<Arc<MemberTls>>,
    /// Connections the client port keeps open at once.
    pub client_connections_max: usize,
    /// Calls the client port runs at once, all connections together.
    pub client_requests_in_flight_max: usize,
    /// Connections the peer port keeps open at once.
    pub peer_connections_max: usize,
    /// Linearizable reads that may wait for the next read-index round, on
    /// the leader (its quorum round) and on a follower (its call to the
    /// leader) alike; more are refused at once as `unavailable`.
    pub reads_waiting_max: usize,
    /// Longest TLS handshake on any port.
    pub tls_handshake_ms_max: u64,
    /// How long a connection with no call running may stay silent.
    pub connection_idle_ms_max: u64,
    /// How far this member's clock is from the environment's. Zero in
    /// production (no flag sets it); the simulation skews members' clocks.
    pub clock_offset_micros: i64,
    /// The first admin's token: while the cluster has no user, this member
    /// as leader creates user `root` (role `root`, `admin` on every
    /// namespace) holding it, which turns authentication on.
    pub bootstrap_token: Option<lode_types::auth::TokenParts>,
    /// The state's size past which this member as leader refuses writes
    /// that grow it.
    pub storage_bytes_max: u64,
    /// The free space on the data volume under which this member as
    /// leader refuses writes that grow the state (`disk_full`).
    pub disk_free_bytes_min: u64,
    /// How far behind the leader's log a learner may be and count as
    /// caught up.
    pub promote_lag_entries_max: u64,
    /// How long a learner stays caught up before the leader promotes it.
    pub promote_caught_up_ms: u64,
    /// Quorum-loss recovery: before starting, make this member the only
    /// voter of a new cluster, keeping every entry (`quorum_recovery.rs`).
    pub force_new_cluster: bool,
    /// Where a member its cluster no longer lists (removed, then started
    /// again on its old data or on none) joins again as a new learner, by
    /// a member's peer address; `None`: such a member refuses to start
    /// (old data) or waits to be added (no data).
    pub rejoin_through: Option<String>,
}

impl NodeConfig {
    /// The upper end of the election timeout, twice its lower end; openraft
    /// also takes it as the leader lease a voter keeps after hearing from
    /// its leader.
    pub fn election_timeout_ms_max(&self) -> u64 {
        self.election_timeout_ms_min * 2
    }

    pub fn new(id: u64, advertise: MemberAddresses, data_dir: impl Into<PathBuf>, membership: Membership) -> Self {
        Self {
            id,
            advertise,
            cluster_name: CLUSTER_NAME_DEFAULT.to_owned(),
            cluster_id: None,
            data_dir: data_dir.into(),
            storage: Storage::Disk,
            membership,
            snapshot_logs_max: 10_000,
            snapshot_log_bytes_max: crate::log_size_snapshots::SNAPSHOT_LOG_BYTES_MAX_DEFAULT,
            heartbeat_interval_ms: 100,
            election_timeout_ms_min: 400,
            read_wait_ms_max: 5_000,
            forward_timeout_ms: 10_000,
            sweep_interval_ms: 1_000,
            lease_ttl_ms_max: 300_000,
            dedup_retention_ms: lode_raft_store::limits::DEDUP_RETENTION_MICROS / 1000,
            change_log_events_max: lode_raft_store::limits::CHANGE_EVENTS_MAX_DEFAULT,
            change_log_bytes_max: lode_raft_store::limits::CHANGE_BYTES_MAX_DEFAULT,
            tls: None,
            client_connections_max: crate::accept::CLIENT_CONNECTIONS_MAX_DEFAULT,
            client_requests_in_flight_max: crate::accept::CLIENT_REQUESTS_IN_FLIGHT_MAX_DEFAULT,
            peer_connections_max: crate::accept::PEER_CONNECTIONS_MAX_DEFAULT,
            reads_waiting_max: crate::reads::READS_WAITING_MAX_DEFAULT,
            tls_handshake_ms_max: crate::accept::TLS_HANDSHAKE_MS_MAX_DEFAULT,
            connection_idle_ms_max: crate::accept::CONNECTION_IDLE_MS_MAX_DEFAULT,
            clock_offset_micros: 0,
            bootstrap_token: None,
            storage_bytes_max: crate::storage_quota::STORAGE_BYTES_MAX_DEFAULT,
            disk_free_bytes_min: crate::storage_quota::DISK_FREE_BYTES_MIN_DEFAULT,
            promote_lag_entries_max: 1_000,
            promote_caught_up_ms: 3_000,
            force_new_cluster: false,
            rejoin_through: None,
        }
    }
}
