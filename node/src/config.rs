//! A member's configuration: who it is, where it keeps its data, how it
//! joins, and every limit and timing it runs with.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lode_raft_store::MemoryEngine;

/// How a node becomes part of a cluster on its first start.
#[derive(Clone, Debug)]
pub enum Membership {
    /// Founding members by id and address; the smallest id initializes the
    /// cluster when it has never been initialized.
    Bootstrap(BTreeMap<u64, String>),
    /// Ask a running member (any) to add this node.
    Join(String),
    /// Restart only: the node's data says which cluster it belongs to.
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

#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub id: u64,
    /// The address peers and clients use to reach this node.
    pub advertise: String,
    pub data_dir: PathBuf,
    pub storage: Storage,
    pub membership: Membership,
    /// Applied entries between snapshots; the log before a snapshot is purged.
    pub snapshot_logs_max: u64,
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
    /// How far this member's clock is from the environment's. Zero in
    /// production (no flag sets it); the simulation skews members' clocks.
    pub clock_offset_micros: i64,
}

impl NodeConfig {
    pub fn new(id: u64, advertise: impl Into<String>, data_dir: impl Into<PathBuf>, membership: Membership) -> Self {
        Self {
            id,
            advertise: advertise.into(),
            data_dir: data_dir.into(),
            storage: Storage::Disk,
            membership,
            snapshot_logs_max: 10_000,
            heartbeat_interval_ms: 100,
            election_timeout_ms_min: 400,
            read_wait_ms_max: 5_000,
            forward_timeout_ms: 10_000,
            sweep_interval_ms: 1_000,
            lease_ttl_ms_max: 300_000,
            dedup_retention_ms: lode_raft_store::limits::DEDUP_RETENTION_MICROS / 1000,
            change_log_events_max: lode_raft_store::limits::CHANGE_EVENTS_MAX_DEFAULT,
            change_log_bytes_max: lode_raft_store::limits::CHANGE_BYTES_MAX_DEFAULT,
            clock_offset_micros: 0,
        }
    }
}
