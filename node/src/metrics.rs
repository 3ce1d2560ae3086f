//! A member's Prometheus metrics, through `prometheus-client`: latency of
//! every call by API family, call, outcome and port; the storage layer's
//! log appends (one fsync each), applies and snapshots; Raft's term,
//! leader, positions and each follower's replication lag; the state's
//! size, memtables, pending compaction and quota; the change log; requests
//! in flight; and, unprefixed, the process's CPU time, memory, threads and
//! file descriptors (`process_metrics.rs`). `docs/metrics.md` explains
//! each. Gauges read from Raft and
//! RocksDB are set when a scrape asks, so they cost nothing in between.

use std::time::Duration;

use lode_client::LodeError;
use lode_raft_store::command::Operation;
use lode_raft_store::observer::StorageObserver;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// Seconds, from 50 µs to about 26 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
}

/// Counts from 1 to 2,048 (commands per entry, entries per append).
fn count_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 12))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// kv, leases, queue, state, deno_kv, changes, admin.
    pub api: &'static str,
    /// write or read.
    pub call: &'static str,
    /// The operation a write carried (`atomic` for several) or the query
    /// a read asked (`operation_name`, `Query::name`).
    pub operation: &'static str,
    /// ok, or the error's kind.
    pub outcome: &'static str,
    /// client or peer (a request a member forwarded).
    pub port: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadRouteLabels {
    /// leader (this member led), follower (served here once applied as
    /// far as the leader's read index) or forwarded (sent to the leader
    /// whole).
    pub route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FollowerLabels {
    pub follower: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpaceLabels {
    /// The column family: entries, dedup, change_log, ...
    pub space: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PortLabels {
    /// client, peer or http.
    pub port: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub call: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// A call counted in `lode_requests_in_flight` until dropped.
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Every metric a member exports.
pub struct Metrics {
    registry: Registry,
    pub requests: HistogramFamily<RequestLabels>,
    pub log_append_seconds: Histogram,
    pub log_append_entries: Histogram,
    pub log_sync_seconds: Histogram,
    pub apply_seconds: Histogram,
    pub commands_per_entry: Histogram,
    pub snapshot_build_seconds: Histogram,
    pub snapshot_built_bytes: Counter,
    pub snapshot_install_seconds: Histogram,
    pub snapshot_sent_bytes: Counter,
    pub snapshots_sent: Counter,
    pub snapshot_send_seconds: Histogram,
    pub snapshot_received_bytes: Counter,
    pub leader_changes: Counter,
    pub term: Gauge,
    pub leader: Gauge,
    pub is_leader: Gauge,
    pub applied_index: Gauge,
    pub last_log_index: Gauge,
    pub snapshot_index: Gauge,
    pub replication_lag: Family<FollowerLabels, Gauge>,
    pub quorum_ack_age_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub state_bytes: Gauge,
    pub space_bytes: Family<SpaceLabels, Gauge>,
    pub memtable_bytes: Gauge,
    pub block_cache_bytes: Gauge,
    pub table_readers_bytes: Gauge,
    pub pending_compaction_bytes: Gauge,
    pub quota_bytes: Gauge,
    pub quota_used_bytes: Gauge,
    pub change_log_events: Gauge,
    pub change_log_bytes: Gauge,
    pub dedup_records: Gauge,
    pub requests_in_flight: Family<PortLabels, Gauge>,
    pub connections_open: Family<PortLabels, Gauge>,
    pub kv_connect_requests: Family<CallLabels, Counter>,
    pub linearizable_reads: Family<ReadRouteLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let requests: HistogramFamily<RequestLabels> = Family::new_with_constructor(latency_histogram);
        let mut metrics = Self {
            registry: Registry::default(),
            requests,
            log_append_seconds: latency_histogram(),
            log_append_entries: count_histogram(),
            log_sync_seconds: latency_histogram(),
            apply_seconds: latency_histogram(),
            commands_per_entry: count_histogram(),
            snapshot_build_seconds: latency_histogram(),
            snapshot_built_bytes: Counter::default(),
            snapshot_install_seconds: latency_histogram(),
            snapshot_sent_bytes: Counter::default(),
            snapshots_sent: Counter::default(),
            snapshot_send_seconds: latency_histogram(),
            snapshot_received_bytes: Counter::default(),
            leader_changes: Counter::default(),
            term: Gauge::default(),
            leader: Gauge::default(),
            is_leader: Gauge::default(),
            applied_index: Gauge::default(),
            last_log_index: Gauge::default(),
            snapshot_index: Gauge::default(),
            replication_lag: Family::default(),
            quorum_ack_age_seconds: Gauge::default(),
            state_bytes: Gauge::default(),
            space_bytes: Family::default(),
            memtable_bytes: Gauge::default(),
            block_cache_bytes: Gauge::default(),
            table_readers_bytes: Gauge::default(),
            pending_compaction_bytes: Gauge::default(),
            quota_bytes: Gauge::default(),
            quota_used_bytes: Gauge::default(),
            change_log_events: Gauge::default(),
            change_log_bytes: Gauge::default(),
            dedup_records: Gauge::default(),
            requests_in_flight: Family::default(),
            connections_open: Family::default(),
            kv_connect_requests: Family::default(),
            linearizable_reads: Family::default(),
        };
        metrics.register();
        metrics
    }

    fn register(&mut self) {
        self.registry
            .register_collector(Box::new(crate::process_metrics::ProcessCollector));
        let registry = self.registry.sub_registry_with_prefix("lode");
        let seconds = || Unit::Seconds;
        registry.register_with_unit(
            "request_duration",
            "Calls served, by API family, call, outcome and port",
            seconds(),
            self.requests.clone(),
        );
        registry.register_with_unit(
            "log_append_duration",
            "Log appends, each one batch: a follower's synced, a leader's own only written",
            seconds(),
            self.log_append_seconds.clone(),
        );
        registry.register_with_unit(
            "log_sync_duration",
            "Background syncs of the leader's own log appends, which apply waits for",
            seconds(),
            self.log_sync_seconds.clone(),
        );
        registry.register(
            "log_append_entries",
            "Entries per log append",
            self.log_append_entries.clone(),
        );
        registry.register_with_unit(
            "apply_duration",
            "Log entries applied to the state",
            seconds(),
            self.apply_seconds.clone(),
        );
        registry.register(
            "commands_per_entry",
            "Commands per applied log entry",
            self.commands_per_entry.clone(),
        );
        registry.register_with_unit(
            "snapshot_build_duration",
            "Snapshots built",
            seconds(),
            self.snapshot_build_seconds.clone(),
        );
        registry.register_with_unit(
            "snapshot_built",
            "Bytes of snapshot images packed to send to a follower",
            Unit::Bytes,
            self.snapshot_built_bytes.clone(),
        );
        registry.register_with_unit(
            "snapshot_install_duration",
            "Received snapshots checked and installed",
            seconds(),
            self.snapshot_install_seconds.clone(),
        );
        registry.register_with_unit(
            "snapshot_sent",
            "Bytes of snapshot images this member sent to followers, as acknowledged chunks",
            Unit::Bytes,
            self.snapshot_sent_bytes.clone(),
        );
        registry.register(
            "snapshots_sent",
            "Snapshots this member sent whole to a follower (last chunk acknowledged)",
            self.snapshots_sent.clone(),
        );
        registry.register_with_unit(
            "snapshot_send_duration",
            "Snapshots sent to a follower, from the first chunk to the last acknowledged",
            seconds(),
            self.snapshot_send_seconds.clone(),
        );
        registry.register_with_unit(
            "snapshot_received",
            "Bytes of snapshot chunks this member received and accepted",
            Unit::Bytes,
            self.snapshot_received_bytes.clone(),
        );
        registry.register(
            "leader_changes",
            "Changes of the leader this member saw",
            self.leader_changes.clone(),
        );
        registry.register("raft_term", "The current Raft term", self.term.clone());
        registry.register(
            "raft_leader",
            "The leader's member id (0: none known)",
            self.leader.clone(),
        );
        registry.register("raft_is_leader", "1 while this member leads", self.is_leader.clone());
        registry.register(
            "raft_applied_index",
            "The last log index applied",
            self.applied_index.clone(),
        );
        registry.register(
            "raft_last_log_index",
            "The last log index held",
            self.last_log_index.clone(),
        );
        registry.register(
            "raft_snapshot_index",
            "The last log index the snapshot covers",
            self.snapshot_index.clone(),
        );
        registry.register(
            "raft_replication_lag_entries",
            "On the leader: entries each follower lacks",
            self.replication_lag.clone(),
        );
        registry.register_with_unit(
            "raft_quorum_ack_age",
            "On the leader: time since a quorum acknowledged it",
            seconds(),
            self.quorum_ack_age_seconds.clone(),
        );
        registry.register_with_unit(
            "state",
            "The state's live SST files and memtables, all but the change log",
            Unit::Bytes,
            self.state_bytes.clone(),
        );
        registry.register_with_unit(
            "space",
            "The state's SST files and memtables, by space (column family)",
            Unit::Bytes,
            self.space_bytes.clone(),
        );
        registry.register_with_unit(
            "memtable",
            "Bytes in memtables",
            Unit::Bytes,
            self.memtable_bytes.clone(),
        );
        registry.register_with_unit(
            "block_cache",
            "Bytes the state's block cache holds",
            Unit::Bytes,
            self.block_cache_bytes.clone(),
        );
        registry.register_with_unit(
            "table_readers",
            "Bytes the state's table files' indexes and filters hold outside the cache",
            Unit::Bytes,
            self.table_readers_bytes.clone(),
        );
        registry.register_with_unit(
            "pending_compaction",
            "Bytes RocksDB estimates compaction must rewrite",
            Unit::Bytes,
            self.pending_compaction_bytes.clone(),
        );
        registry.register_with_unit("quota", "The storage quota", Unit::Bytes, self.quota_bytes.clone());
        registry.register_with_unit(
            "quota_used",
            "The state's size as the quota counts it",
            Unit::Bytes,
            self.quota_used_bytes.clone(),
        );
        registry.register(
            "change_log_events",
            "Change events kept",
            self.change_log_events.clone(),
        );
        registry.register_with_unit(
            "change_log",
            "Bytes of change events kept",
            Unit::Bytes,
            self.change_log_bytes.clone(),
        );
        registry.register(
            "dedup_records",
            "Dedup records kept (RocksDB's estimate)",
            self.dedup_records.clone(),
        );
        registry.register(
            "requests_in_flight",
            "Calls being served, by port",
            self.requests_in_flight.clone(),
        );
        registry.register(
            "connections_open",
            "Connections open, by port",
            self.connections_open.clone(),
        );
        registry.register(
            "kv_connect_requests",
            "KV Connect requests received, by call",
            self.kv_connect_requests.clone(),
        );
        registry.register(
            "linearizable_reads",
            "Linearizable reads this member took, by route",
            self.linearizable_reads.clone(),
        );
    }

    /// Counts a linearizable read that took `route` (`ReadRouteLabels`).
    pub fn count_linearizable_read(&self, route: &'static str) {
        self.linearizable_reads.get_or_create(&ReadRouteLabels { route }).inc();
    }

    /// Records one call's latency and outcome.
    pub fn observe_request(&self, labels: RequestLabels, duration: Duration) {
        self.requests.get_or_create(&labels).observe(duration.as_secs_f64());
    }

    /// Counts a call on `port` as in flight while the guard lives.
    pub fn request_in_flight(&self, port: &'static str) -> InFlight {
        let gauge = self.requests_in_flight.get_or_create(&PortLabels { port }).clone();
        gauge.inc();
        InFlight(gauge)
    }

    /// The gauge of `port`'s open connections.
    pub fn connections_open(&self, port: &'static str) -> Gauge {
        self.connections_open.get_or_create(&PortLabels { port }).clone()
    }

    /// The Prometheus text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(%error, "encoding the metrics failed");
        }
        out
    }
}

impl StorageObserver for Metrics {
    fn log_appended(&self, entries: usize, duration: Duration) {
        self.log_append_seconds.observe(duration.as_secs_f64());
        self.log_append_entries.observe(entries as f64);
    }

    fn log_synced(&self, duration: Duration) {
        self.log_sync_seconds.observe(duration.as_secs_f64());
    }

    fn entry_applied(&self, commands: usize, duration: Duration) {
        self.apply_seconds.observe(duration.as_secs_f64());
        if commands > 0 {
            self.commands_per_entry.observe(commands as f64);
        }
    }

    fn snapshot_built(&self, duration: Duration) {
        self.snapshot_build_seconds.observe(duration.as_secs_f64());
    }

    fn image_packed(&self, bytes: u64) {
        self.snapshot_built_bytes.inc_by(bytes);
    }

    fn snapshot_installed(&self, duration: Duration) {
        self.snapshot_install_seconds.observe(duration.as_secs_f64());
    }
}

/// The API family of a write, by its operations.
pub fn write_api(operations: &[Operation]) -> &'static str {
    let mut api = "kv";
    for operation in operations {
        api = match operation {
            Operation::AcquireLease { .. } | Operation::RenewLease { .. } | Operation::ReleaseLease { .. } => {
                return "leases"
            }
            Operation::Enqueue { .. } | Operation::ClaimMessage { .. } | Operation::FinishMessage { .. } => {
                return "queue"
            }
            Operation::StateUpdate { .. } => return "state",
            Operation::Auth { .. } => return "admin",
            Operation::Set { namespace, .. } if namespace == lode_types::DENO_NAMESPACE => "deno_kv",
            Operation::SumV8 { .. } => "deno_kv",
            _ => api,
        };
    }
    api
}

/// A write's `operation` label: its one operation's name, or `atomic`.
pub fn operation_name(operations: &[Operation]) -> &'static str {
    let [operation] = operations else {
        return "atomic";
    };
    operation.name()
}

/// The API family of a read, by its query.
pub fn read_api(query: &lode_client::protocol::Query) -> &'static str {
    use lode_client::protocol::Query;
    let by_namespace = |namespace: &str| {
        if namespace == lode_types::DENO_NAMESPACE {
            "deno_kv"
        } else if namespace.starts_with(lode_types::state_update::SCOPE_NAMESPACE_PREFIX) {
            "state"
        } else {
            "kv"
        }
    };
    match query {
        Query::Get { namespace, .. }
        | Query::Exists { namespace, .. }
        | Query::GetMany { namespace, .. }
        | Query::Scan { namespace, .. } => by_namespace(namespace),
        Query::Ranges { .. } => "deno_kv",
        Query::Lease { .. } => "leases",
        Query::NextDelivery { .. } => "queue",
        Query::StateEvents { .. } => "state",
        Query::Changes { .. } => "changes",
        Query::Namespaces { .. } | Query::SessionKeys { .. } => "kv",
    }
}

/// The outcome label of a call's result.
pub fn outcome<T>(result: &Result<T, LodeError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(LodeError::Invalid(_)) => "invalid",
        Err(LodeError::NotFound(_)) => "not_found",
        Err(LodeError::VersionConflict { .. } | LodeError::ChecksFailed { .. }) => "conflict",
        Err(LodeError::LeaseLost) => "lease_lost",
        Err(LodeError::Forbidden { .. } | LodeError::Unauthorized) => "refused",
        Err(LodeError::QuotaExceeded { .. } | LodeError::DiskFull { .. }) => "quota_exceeded",
        Err(LodeError::NotLeader { .. }) => "not_leader",
        Err(LodeError::AmbiguousMutation { .. }) => "ambiguous",
        Err(LodeError::Timeout(_)) => "timeout",
        Err(_) => "unavailable",
    }
}
