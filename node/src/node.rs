//! One cluster member: storage, Raft, the listener, bootstrap or join, the
//! expiry sweeper, and graceful shutdown.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lode_client::facade::Listener;
use lode_client::in_process::InProcess;
use lode_client::tls::Transport;
use lode_raft_store::command::{Operation, Retention};
use lode_raft_store::limits::SWEEP_ENTRIES_MAX;
use lode_raft_store::log_bytes::LogBytes;
use lode_raft_store::{LogStore, Member, RocksEngine, SelectedEngine, StateMachineStore, StateReader, TypeConfig};
use openraft::{Config, Raft, SnapshotPolicy};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::clock::MemberClock;
use crate::cluster_identity::{founding_cluster_id, ClusterIdentity};
use crate::config::{Membership, NodeConfig, Storage};
use crate::log_size_snapshots::snapshot_by_log_size;
use crate::network::{NetworkFactory, PeerConnections};
use crate::ports::{serve, PortServer};
use crate::proposer::Proposer;
use crate::reads::ReadIndex;
use crate::service::{NodeService, Port};
use crate::shared::Shared;

/// Most log entries in one Raft append message; with `proposal_bytes_max`
/// it bounds the largest frame between peers.
pub const RAFT_PAYLOAD_ENTRIES_MAX: u64 = 16;

/// The largest proposal: the encoded byte limit, plus one command that
/// started below it (no larger than a client-port request), plus the
/// proposal's own fields.
const PROPOSAL_BYTES_LARGEST: usize =
    crate::proposer::PROPOSAL_BYTES_MAX + lode_types::limits::REQUEST_BYTES_MAX + 64 * 1024;
// A full Raft append fits in one frame between peers.
const _: () =
    assert!(RAFT_PAYLOAD_ENTRIES_MAX as usize * PROPOSAL_BYTES_LARGEST < lode_client::rpc::PEER_FRAME_BYTES_MAX);

/// How long a log purge waits for the snapshot it follows to reach the
/// disk (an install runs beside it); past that it purges what is covered.
pub const PURGE_WAIT_FOR_SNAPSHOT: Duration = Duration::from_secs(30);
/// How long the founder waits for each other founder's answer, and how
/// long between rounds of asking, before it initializes the cluster.
const FOUNDER_PING_TIMEOUT_MS: u64 = 1_000;
const FOUNDER_PING_INTERVAL_MS: u64 = 200;
/// How long the founder, once a quorum of the founders has answered, still
/// waits for the others before it founds the cluster without them:
/// founders started together (`lode dev`, a StatefulSet's pods started in
/// parallel) then all take part from the first entry, instead of the
/// late ones being made learners and promoted again.
const FOUNDERS_ALL_WAIT_MS: u64 = 2_000;
const _: () = assert!(FOUNDER_PING_INTERVAL_MS < FOUNDERS_ALL_WAIT_MS);

/// The two ports a member listens on.
pub struct Listeners {
    /// Clients: every call but `raft`.
    pub client: Box<dyn Listener>,
    /// Members: Raft, snapshots and forwarded requests.
    pub peer: Box<dyn Listener>,
}

/// A running member.
pub struct Node {
    shared: Arc<Shared>,
    address: String,
    peer_address: String,
    /// The client port, reached without a socket by the member's own
    /// HTTP gateway.
    in_process: InProcess,
    stop_accepting: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// The member's metrics, with the gauges read from Raft and RocksDB when
/// a scrape asks.
struct MemberMetrics(Arc<Shared>);

impl crate::http::MetricsSource for MemberMetrics {
    fn metrics(&self) -> &crate::metrics::Metrics {
        &self.0.metrics
    }

    fn refresh(&self) {
        refresh_gauges(&self.0);
    }
}

fn refresh_gauges(shared: &Shared) {
    let metrics = &shared.metrics;
    let raft = shared.raft.metrics().borrow().clone();
    let index = |log_id: Option<openraft::LogId<u64>>| log_id.map_or(0, |log_id| log_id.index) as i64;
    metrics.term.set(raft.current_term as i64);
    metrics.leader.set(raft.current_leader.unwrap_or(0) as i64);
    metrics.is_leader.set(i64::from(raft.current_leader == Some(shared.id)));
    metrics.applied_index.set(index(raft.last_applied));
    metrics.last_log_index.set(raft.last_log_index.unwrap_or(0) as i64);
    metrics.snapshot_index.set(index(raft.snapshot));
    metrics.replication_lag.clear();
    if let Some(replication) = &raft.replication {
        let last = raft.last_log_index.unwrap_or(0);
        for (follower, matched) in replication.iter().filter(|(follower, _)| **follower != shared.id) {
            let lag = last.saturating_sub(matched.map_or(0, |log_id| log_id.index));
            let labels = crate::metrics::FollowerLabels {
                follower: follower.to_string(),
            };
            metrics.replication_lag.get_or_create(&labels).set(lag as i64);
        }
    }
    metrics
        .quorum_ack_age_seconds
        .set(raft.millis_since_quorum_ack.map_or(0.0, |age| age as f64 / 1000.0));
    metrics.quota_bytes.set(shared.quota.quota_bytes() as i64);
    metrics.quota_used_bytes.set(shared.quota.used_bytes() as i64);
    if let Some(rocks) = shared.state_engine.as_rocks() {
        match rocks.properties() {
            Ok(properties) => {
                metrics.state_bytes.set(properties.live_bytes as i64);
                metrics.memtable_bytes.set(properties.memtable_bytes as i64);
                metrics.block_cache_bytes.set(properties.block_cache_bytes as i64);
                metrics.table_readers_bytes.set(properties.table_readers_bytes as i64);
                metrics
                    .pending_compaction_bytes
                    .set(properties.pending_compaction_bytes as i64);
                metrics.dedup_records.set(properties.dedup_records as i64);
                for (space, bytes) in properties.space_bytes {
                    let labels = crate::metrics::SpaceLabels { space: space.name() };
                    metrics.space_bytes.get_or_create(&labels).set(bytes as i64);
                }
            }
            Err(error) => tracing::warn!(%error, "reading RocksDB's properties failed"),
        }
    }
    match shared.reader.change_log_size() {
        Ok((events, bytes)) => {
            metrics.change_log_events.set(events as i64);
            metrics.change_log_bytes.set(bytes as i64);
        }
        Err(error) => tracing::warn!(%error, "reading the change log's size failed"),
    }
}

/// The node's answers to its HTTP port's questions about callers.
struct MemberAuthView(Arc<Shared>);

impl crate::http::AuthView for MemberAuthView {
    fn users_exist(&self) -> bool {
        self.0.auth.state().map_or(true, |state| state.is_enabled())
    }

    fn holds_role(&self, token: &lode_client::protocol::AccessToken, role: &str) -> bool {
        self.0.auth.token_holds_role(token, role, self.0.clock.now_micros())
    }
}

impl Node {
    /// Opens storage under `config.data_dir`, starts Raft and serves on
    /// `listeners`. Returns once the node is serving; joining or
    /// bootstrapping continues in the background.
    pub async fn start(config: NodeConfig, listeners: Listeners) -> Result<Self, anyhow::Error> {
        use lode_raft_store::limits::{DEDUP_RETENTION_MICROS_MAX, DEDUP_RETENTION_MICROS_MIN};
        let retention_micros = config.dedup_retention_ms.saturating_mul(1000);
        if !(DEDUP_RETENTION_MICROS_MIN..=DEDUP_RETENTION_MICROS_MAX).contains(&retention_micros) {
            anyhow::bail!(
                "dedup retention must be {} s to {} s (dedup_retention_micros_min/max)",
                DEDUP_RETENTION_MICROS_MIN / 1_000_000,
                DEDUP_RETENTION_MICROS_MAX / 1_000_000
            );
        }
        let address = listeners.client.local_addr()?.to_string();
        let peer_address = listeners.peer.local_addr()?.to_string();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let peers = PeerConnections::new(match &config.tls {
            Some(tls) => Transport::Tls(tls.peer_client()),
            None => Transport::Plain,
        });
        let opened = match open_storage(&config, &peers, &metrics).await? {
            Ok(opened) => opened,
            Err(removed) if config.rejoin_through.is_some() && matches!(config.storage, Storage::Disk) => {
                // Every engine opened above is closed again by now.
                tracing::warn!(
                    node = config.id,
                    %removed,
                    "this data directory is from before the member's removal; deleting it and joining again as a new learner"
                );
                remove_member_data(&config.data_dir)?;
                open_storage(&config, &peers, &metrics).await??
            }
            Err(removed) => return Err(removed.into()),
        };
        let OpenedStorage {
            log_store,
            state_machine,
            state_engine,
            cluster,
            holds_state,
            log_bytes,
        } = opened;
        let reader = state_machine.reader();
        let backups = crate::backup::Backups::new(state_engine.clone());
        let quota = Arc::new(crate::storage_quota::StorageQuota::new(
            state_engine.clone(),
            config.storage_bytes_max,
            crate::storage_quota::DiskReserve {
                member: config.id,
                data_dir: config.data_dir.clone(),
                reserve_bytes: config.disk_free_bytes_min,
            },
        ));
        settle_cluster_id(&config, &cluster).await?;
        let raft_config = Config {
            cluster_name: config.cluster_name.clone(),
            heartbeat_interval: config.heartbeat_interval_ms,
            election_timeout_min: config.election_timeout_ms_min,
            election_timeout_max: config.election_timeout_ms_max(),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_logs_max),
            max_in_snapshot_log_to_keep: 0,
            max_payload_entries: RAFT_PAYLOAD_ENTRIES_MAX,
            ..Default::default()
        };
        let raft_config = Arc::new(raft_config.validate()?);
        let lost_members = Arc::new(crate::admission::LostMembers::default());
        let raft = Raft::new(
            config.id,
            raft_config,
            NetworkFactory {
                peers: peers.clone(),
                cluster: cluster.clone(),
                lost_members: lost_members.clone(),
                metrics: metrics.clone(),
                log_durability: log_store.durability(),
                outages: Arc::default(),
            },
            log_store,
            state_machine,
        )
        .await?;
        let read_index = ReadIndex::start(raft.clone(), config.reads_waiting_max);
        let clock = MemberClock::new(config.clock_offset_micros);
        let auth = crate::auth::AuthCache::new(reader.clone(), config.bootstrap_token.clone());
        let shared = Arc::new(Shared {
            id: config.id,
            raft: raft.clone(),
            reader,
            read_index,
            follower_reads: Default::default(),
            proposer: Proposer::start(
                raft.clone(),
                Retention {
                    dedup_micros: config.dedup_retention_ms.saturating_mul(1000),
                    change_events_max: config.change_log_events_max,
                    change_bytes_max: config.change_log_bytes_max,
                },
                clock,
            ),
            peers,
            config: config.clone(),
            clock,
            cluster,
            membership_changes: tokio::sync::Mutex::new(()),
            in_flight: Arc::new(()),
            auth,
            backups,
            quota: quota.clone(),
            metrics,
            state_engine,
            leading_since: std::sync::Mutex::new(None),
            admission: crate::admission::Admission::new(holds_state),
            lost_members,
            refusal_rechecks: tokio::sync::Semaphore::new(crate::service::REFUSAL_RECHECKS_MAX),
        });
        let (stop_accepting, stop_receiver) = watch::channel(false);
        let span = tracing::info_span!("node", id = config.id);
        let client_port = PortServer::new(Port::Client, shared.clone());
        let in_process =
            crate::ports::in_process_client_port(&address, client_port.clone(), stop_receiver.clone(), span.clone());
        let tasks = vec![
            tokio::spawn(serve(listeners.client, client_port, stop_receiver.clone()).instrument(span.clone())),
            tokio::spawn(
                serve(
                    listeners.peer,
                    PortServer::new(Port::Peer, shared.clone()),
                    stop_receiver,
                )
                .instrument(span.clone()),
            ),
            tokio::spawn(sweep_expired(shared.clone()).instrument(span.clone())),
            tokio::spawn(enter_cluster(shared.clone()).instrument(span.clone())),
            tokio::spawn(publish_client_address(shared.clone()).instrument(span.clone())),
            tokio::spawn(bootstrap_admin(shared.clone()).instrument(span.clone())),
            tokio::spawn(report_leadership(shared.clone()).instrument(span.clone())),
            tokio::spawn(snapshot_by_log_size(raft.clone(), log_bytes).instrument(span.clone())),
            tokio::spawn(
                crate::promotion::promote_learners(shared.clone(), NodeService::background(shared.clone()))
                    .instrument(span.clone()),
            ),
            tokio::spawn(
                crate::admission::readmit_lost_members(shared.clone(), NodeService::background(shared.clone()))
                    .instrument(span.clone()),
            ),
            tokio::spawn(quota.watch().instrument(span)),
        ];
        tracing::info!(node = config.id, %address, %peer_address, "node serving");
        Ok(Self {
            shared,
            address,
            peer_address,
            in_process,
            stop_accepting,
            tasks,
        })
    }

    /// The address the node serves clients on.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The metrics the HTTP port serves.
    pub fn metrics_source(&self) -> Arc<dyn crate::http::MetricsSource> {
        Arc::new(MemberMetrics(self.shared.clone()))
    }

    /// What the HTTP port asks this node about its callers.
    pub fn auth_view(&self) -> Arc<dyn crate::http::AuthView> {
        Arc::new(MemberAuthView(self.shared.clone()))
    }

    /// The client port for a client in this process (the member's own
    /// HTTP gateway): its address, whose calls run in the caller's task.
    pub fn in_process(&self) -> InProcess {
        self.in_process.clone()
    }

    /// The token this node's own HTTP gateway presents to its client port:
    /// it may do everything, and only this process knows it.
    pub fn member_token(&self) -> lode_client::protocol::AccessToken {
        self.shared.auth.member_token()
    }

    /// The address the node serves its peers on.
    pub fn peer_address(&self) -> &str {
        &self.peer_address
    }

    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.shared.raft
    }

    /// A read handle on this member's state machine.
    pub fn reader(&self) -> StateReader<SelectedEngine> {
        self.shared.reader.clone()
    }

    /// Waits until Raft stops by itself (a storage failure or a bug, never
    /// a shutdown) and answers why.
    pub async fn raft_stopped(&self) -> String {
        raft_core_exited(&self.shared.raft).await
    }

    /// As leader, hands the leadership to a caught-up voter (bounded by
    /// `handoff::HANDOFF_MS_MAX`); on a follower, does nothing.
    pub async fn hand_off_leadership(&self) {
        crate::handoff::hand_off_leadership(&self.shared).await;
    }

    /// Stops accepting, lets in-flight requests finish (bounded), stops Raft
    /// and closes storage. A leader that should hand off its leadership
    /// first is asked to (`hand_off_leadership`) before.
    pub async fn shutdown(self) {
        let _ = self.stop_accepting.send(true);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&self.shared.in_flight) > 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for task in &self.tasks {
            task.abort();
        }
        if let Err(error) = self.shared.raft.shutdown().await {
            tracing::warn!(%error, "raft did not shut down cleanly");
        }
        self.shared.cluster.close();
        tracing::info!(node = self.shared.id, "node stopped");
    }
}

/// A member's storage, opened and checked before Raft starts.
struct OpenedStorage {
    log_store: LogStore<SelectedEngine>,
    state_machine: StateMachineStore<SelectedEngine>,
    state_engine: Arc<SelectedEngine>,
    cluster: Arc<ClusterIdentity>,
    holds_state: bool,
    /// The log's bytes since its last purge, for snapshots by size.
    log_bytes: Arc<LogBytes>,
}

/// Opens the log and the state machine, runs a forced recovery when asked,
/// and answers `Removed` for data from before this member's removal. On
/// any error every engine it opened is closed again.
async fn open_storage(
    config: &NodeConfig,
    peers: &PeerConnections,
    metrics: &Arc<crate::metrics::Metrics>,
) -> Result<Result<OpenedStorage, crate::admission::Removed>, anyhow::Error> {
    let (log_engine, state_engine) = match &config.storage {
        Storage::Disk => {
            private_directory(&config.data_dir)?;
            (
                SelectedEngine::Rocks(RocksEngine::open(config.data_dir.join("log"))?),
                SelectedEngine::Rocks(RocksEngine::open(config.data_dir.join("state"))?),
            )
        }
        Storage::Memory { log, state } => (
            SelectedEngine::Memory(log.clone()),
            SelectedEngine::Memory(state.clone()),
        ),
    };
    let (log_engine, state_engine) = (Arc::new(log_engine), Arc::new(state_engine));
    let mut state_machine = StateMachineStore::open(state_engine.clone())?;
    let snapshot_on_disk = state_machine.snapshot_on_disk();
    let log_bytes = Arc::new(LogBytes::new(config.snapshot_log_bytes_max));
    let mut log_store = LogStore::new(log_engine)
        .purging_only_behind(snapshot_on_disk, PURGE_WAIT_FOR_SNAPSHOT)
        .syncing_own_appends_behind(config.id)
        .counting_bytes_into(log_bytes.clone());
    state_machine = state_machine.applying_only_durable(log_store.durability());
    // Timed on disk only: a simulated run records nothing.
    if matches!(config.storage, Storage::Disk) {
        state_machine = state_machine.observed_by(metrics.clone());
        log_store = log_store.observed_by(metrics.clone());
    }
    if config.force_new_cluster {
        crate::quorum_recovery::force_new_cluster(config, &mut log_store, &mut state_machine, peers).await?;
    }
    let holds_state = holds_cluster_state(&mut log_store).await?;
    let cluster = Arc::new(ClusterIdentity::open(log_store.clone())?);
    if let (true, Some(cluster_id)) = (holds_state, cluster.get()) {
        // A vote alone (a founder that voted before any entry) knows no membership yet.
        let known = lode_raft_store::recovery::effective_membership(&mut log_store, &mut state_machine)
            .await
            .ok()
            .filter(|membership| membership.nodes().next().is_some());
        if let Some(membership) = known {
            if let Err(removed) = crate::admission::refuse_if_removed(config.id, &membership, peers, cluster_id).await {
                return Ok(Err(removed));
            }
        }
    }
    Ok(Ok(OpenedStorage {
        log_store,
        state_machine,
        state_engine,
        cluster,
        holds_state,
        log_bytes,
    }))
}

/// Deletes a removed member's log and state, so it starts as a new member.
fn remove_member_data(data_dir: &std::path::Path) -> Result<(), anyhow::Error> {
    for part in ["log", "state"] {
        let path = data_dir.join(part);
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => anyhow::bail!("deleting {}: {error}", path.display()),
        }
    }
    Ok(())
}

/// Creates `path` (and its parents) readable by its owner only, and makes
/// an existing one so: a member's data is nobody else's.
/// Whether this member's log holds an entry or a vote: then it belongs to
/// a cluster and takes part in Raft at once (`admission.rs`).
async fn holds_cluster_state(log: &mut LogStore<SelectedEngine>) -> Result<bool, anyhow::Error> {
    use openraft::storage::RaftLogStorage;
    let entries = log.get_log_state().await?.last_log_id.is_some();
    let vote = log
        .read_vote()
        .await?
        .is_some_and(|vote| vote != openraft::Vote::default());
    Ok(entries || vote)
}

fn private_directory(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// Bootstraps or joins on first start; does nothing on a restart.
async fn enter_cluster(shared: Arc<Shared>) {
    let initialized = match shared.raft.is_initialized().await {
        Ok(initialized) => initialized,
        Err(error) => {
            tracing::error!(%error, "raft stopped before the node entered a cluster");
            return;
        }
    };
    if initialized {
        tracing::info!(node = shared.id, "restarting as a member of an existing cluster");
        return;
    }
    match shared.config.membership.clone() {
        Membership::Existing => match shared.config.rejoin_through.clone() {
            Some(seed) => join(&shared, &seed).await,
            None => tracing::info!(
                node = shared.id,
                "no cluster state yet; waiting to be added by a member"
            ),
        },
        Membership::Bootstrap(members) => {
            if members.keys().next() != Some(&shared.id) {
                tracing::info!(
                    node = shared.id,
                    "waiting for the founding member to initialize the cluster (or, if it exists, to be admitted)"
                );
                if let Some(seed) = shared.config.rejoin_through.clone() {
                    join_if_founded_without_this_member(&shared, &members, &seed).await;
                }
                return;
            }
            match founders_agree(&shared, &members).await {
                Founding::Initialize => {}
                Founding::Exists => return,
                Founding::ExistsWithoutThisMember => {
                    if let Some(seed) = shared.config.rejoin_through.clone() {
                        join(&shared, &seed).await;
                    }
                    return;
                }
            }
            // The other founders publish their client addresses once they run.
            let nodes: BTreeMap<u64, Member> = members
                .iter()
                .map(|(id, peer_address)| {
                    let client_address = if *id == shared.id {
                        shared.config.advertise.client.clone()
                    } else {
                        String::new()
                    };
                    (
                        *id,
                        Member {
                            peer_address: peer_address.clone(),
                            client_address,
                        },
                    )
                })
                .collect();
            match shared.raft.initialize(nodes).await {
                Ok(()) => tracing::info!(node = shared.id, members = ?members, "initialized a new cluster"),
                Err(error) => tracing::warn!(%error, "cluster initialization refused"),
            }
        }
        Membership::Join(seed) => join(&shared, &seed).await,
    }
}

/// The founders but this member, by id and peer address.
fn other_founders(shared: &Shared, founders: &BTreeMap<u64, String>) -> Vec<(u64, String)> {
    founders
        .iter()
        .filter(|(id, _)| **id != shared.id)
        .map(|(id, address)| (*id, address.clone()))
        .collect()
}

/// What the founder found when it asked the other founders.
enum Founding {
    /// A quorum holds no state and was admitted: initialize the cluster.
    Initialize,
    /// The cluster exists and lists this member, which lost its data: the
    /// leader readmits it.
    Exists,
    /// The cluster exists without this member: it was removed.
    ExistsWithoutThisMember,
}

/// Whether one of `answers` holds a cluster, and if so whether that
/// cluster lists member `id`.
fn existing_cluster_lists(answers: &[(u64, lode_client::protocol::ClusterStatus)], id: u64) -> Option<bool> {
    let (_, status) = answers.iter().find(|(_, status)| !status.members.is_empty())?;
    Some(status.members.iter().any(|member| member.id == id))
}

/// Before the founder initializes: `Initialize` once a quorum of the
/// founders (itself included) answer holding no state, after admitting
/// those that answered; `Exists` as soon as one answers holding the
/// cluster's state (this member lost its data, and the leader readmits it,
/// or it was removed).
async fn founders_agree(shared: &Shared, founders: &BTreeMap<u64, String>) -> Founding {
    // Settled before Raft started: a founder always has the founding id.
    let Some(cluster) = shared.cluster.get() else {
        return Founding::Exists;
    };
    let others = other_founders(shared, founders);
    let timeout = Duration::from_millis(FOUNDER_PING_TIMEOUT_MS);
    let mut waiting_logged = false;
    let mut quorum_since = None;
    loop {
        let answers = shared.peers.statuses(others.clone(), cluster, timeout).await;
        match existing_cluster_lists(&answers, shared.id) {
            Some(true) => {
                tracing::warn!(
                    node = shared.id,
                    "the cluster exists (a founder holds its state) but this member holds none: its data was lost; \
                     it waits to be readmitted as a learner instead of founding a second cluster"
                );
                return Founding::Exists;
            }
            Some(false) => return Founding::ExistsWithoutThisMember,
            None => {}
        }
        let quorum = answers.len() + 1 > founders.len() / 2;
        if !quorum {
            quorum_since = None;
        }
        // How long a quorum has answered, while one has.
        let quorum_for = quorum.then(|| quorum_since.get_or_insert_with(tokio::time::Instant::now).elapsed());
        let all_answered = answers.len() == others.len();
        if quorum_for.is_some_and(|waited| all_answered || waited >= Duration::from_millis(FOUNDERS_ALL_WAIT_MS)) {
            let admissions = answers.iter().filter_map(|(id, _)| {
                let address = founders.get(id)?;
                Some(crate::admission::admit(&shared.peers, address, cluster))
            });
            if futures::future::join_all(admissions).await.iter().all(Result::is_ok) {
                shared.admission.admit();
                let late = others.iter().map(|(id, _)| *id);
                let late = late.filter(|id| !answers.iter().any(|(answered, _)| answered == id));
                shared.lost_members.note_late_founders(late);
                return Founding::Initialize;
            }
        } else if !quorum && !waiting_logged {
            tracing::info!(
                node = shared.id,
                "waiting for a quorum of the founders to answer before founding the cluster"
            );
            waiting_logged = true;
        }
        tokio::time::sleep(Duration::from_millis(FOUNDER_PING_INTERVAL_MS)).await;
    }
}

/// A founder other than the first holding no state: until it takes part
/// in Raft, asks the other founders; once one holds a cluster that does
/// not list this member (it was removed, and started again without its
/// data), it joins through `seed` as a new learner.
async fn join_if_founded_without_this_member(shared: &Shared, founders: &BTreeMap<u64, String>, seed: &str) {
    let others = other_founders(shared, founders);
    let timeout = Duration::from_millis(FOUNDER_PING_TIMEOUT_MS);
    while !shared.raft.is_initialized().await.unwrap_or(true) {
        if let Some(cluster) = shared.cluster.get() {
            let answers = shared.peers.statuses(others.clone(), cluster, timeout).await;
            match existing_cluster_lists(&answers, shared.id) {
                // Founded with this member: it is admitted (or readmitted) by the leader.
                Some(true) => return,
                Some(false) => return join(shared, seed).await,
                None => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(FOUNDER_PING_INTERVAL_MS * 5)).await;
    }
}

/// Asks the member at `seed` (its peer port) which cluster it belongs to,
/// adopts that cluster, then asks to be added, until it is.
async fn join(shared: &Shared, seed: &str) {
    let connection = shared.peers.get(seed);
    let timeout = Duration::from_millis(shared.config.forward_timeout_ms);
    loop {
        let status = connection
            .call(
                timeout,
                |client, context| async move { client.node_status(context).await },
            )
            .await
            .map_err(|failure| failure.into_error(seed))
            .and_then(|answer| answer);
        let cluster = match status.map(|status| status.cluster_id) {
            Ok(Some(cluster)) => cluster,
            Ok(None) => {
                tracing::warn!(%seed, "the seed belongs to no cluster yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(error) => {
                tracing::warn!(%error, %seed, "join attempt failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(error) = shared.cluster.adopt(cluster).await {
            tracing::error!(%error, %seed, "cannot join through this seed");
            return;
        }
        let addresses = shared.config.advertise.clone();
        let added = connection
            .request(timeout, |client, context| async move {
                client.add_member(context, shared.id, addresses, Some(cluster)).await
            })
            .await;
        match added {
            Ok(status) => {
                tracing::info!(
                    node = shared.id,
                    leader = ?status.leader,
                    "joined the cluster as a learner; the leader promotes it once it keeps up"
                );
                return;
            }
            Err(error) => {
                tracing::warn!(%error, %seed, "join attempt failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Settles this member's cluster id before Raft starts: the stored one,
/// or, on a first start, the founding id or the one the operator gave. A
/// member joining through a seed learns its id from the seed later.
async fn settle_cluster_id(config: &NodeConfig, cluster: &ClusterIdentity) -> Result<(), anyhow::Error> {
    let wanted = match &config.membership {
        Membership::Bootstrap(founders) => Some(founding_cluster_id(&config.cluster_name, founders)),
        Membership::Existing => config.cluster_id,
        Membership::Join(_) => None,
    };
    match (cluster.get(), wanted) {
        (Some(stored), Some(wanted)) if stored != wanted && config.cluster_id.is_some() => {
            anyhow::bail!("this member belongs to cluster {stored}, not to cluster {wanted}")
        }
        (Some(_), _) => Ok(()),
        (None, Some(wanted)) => Ok(cluster.adopt(wanted).await?),
        (None, None) if matches!(config.membership, Membership::Existing) => anyhow::bail!(
            "a new member needs --peers (found a cluster), --join (join through a member) \
             or --cluster-id (wait to be added to that cluster)"
        ),
        (None, None) => Ok(()),
    }
}

/// Keeps the membership's record of this member's client address equal to
/// the one it advertises, so leader hints name it: founders start without
/// one, and a member may move its client port across restarts. Looks
/// again at every change of Raft's server metrics (the membership among
/// them), and retries failures after a pause.
async fn publish_client_address(shared: Arc<Shared>) {
    let service = NodeService::background(shared.clone());
    let mut metrics = shared.raft.server_metrics();
    loop {
        let recorded = metrics
            .borrow_and_update()
            .membership_config
            .membership()
            .get_node(&shared.id)
            .cloned();
        match recorded {
            Some(recorded) if recorded.client_address != shared.config.advertise.client => {
                let addresses = lode_client::protocol::MemberAddresses {
                    peer: recorded.peer_address,
                    client: shared.config.advertise.client.clone(),
                };
                if let Err(error) = service.publish(addresses).await {
                    tracing::debug!(%error, "publishing the client address failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            _ => {
                if metrics.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// On the leader, proposes sweeps while expired entries exist, so every
/// replica removes them at the same log position.
async fn sweep_expired(shared: Arc<Shared>) {
    let interval = Duration::from_millis(shared.config.sweep_interval_ms.max(10));
    loop {
        tokio::time::sleep(interval).await;
        if shared.raft.current_leader().await != Some(shared.id) {
            continue;
        }
        let now_micros = shared.clock.now_micros();
        let mut operations = Vec::new();
        match shared.reader.expired_awaiting_sweep(now_micros, 1) {
            Ok(0) => {}
            Ok(_) => operations.push(Operation::SweepExpired {
                entries_max: SWEEP_ENTRIES_MAX,
            }),
            Err(error) => tracing::error!(%error, "reading the expiry index failed"),
        }
        // Claimed queue deliveries whose listener went quiet count as failed.
        match shared.reader.has_overdue_deliveries(now_micros) {
            Ok(false) => {}
            Ok(true) => operations.push(Operation::RequeueOverdue {
                messages_max: lode_raft_store::limits::QUEUE_REQUEUE_MESSAGES_MAX,
            }),
            Err(error) => tracing::error!(%error, "reading the queue's claims failed"),
        }
        // Tokens that expired or lost their user or parent.
        if shared.auth.state().is_ok_and(|state| state.has_dead_tokens(now_micros)) {
            let tokens_max = lode_types::limits::TOKENS_PRUNED_PER_CHANGE_MAX as u32;
            operations.push(Operation::Auth {
                change: lode_types::auth::AuthChange::PruneTokens { tokens_max },
            });
        }
        for operation in operations {
            if let Err(error) = shared.proposer.propose(None, vec![operation]).await {
                tracing::debug!(%error, "sweep proposal failed; the next leader sweeps");
            }
        }
    }
}

/// The commands that create the first admin from the bootstrap token.
fn bootstrap_operations(token: &lode_types::auth::TokenParts) -> Vec<Operation> {
    use lode_types::auth::{AuthChange, Grant, Permission};
    let secret_sha256 = lode_types::auth::sha256(&token.secret);
    let root = || "root".to_owned();
    [
        AuthChange::PutUser { name: root() },
        AuthChange::PutRole {
            name: root(),
            grants: vec![Grant {
                prefix: String::new(),
                permission: Permission::Admin,
            }],
        },
        AuthChange::BindRole {
            user: root(),
            role: root(),
        },
        AuthChange::IssueToken {
            id: token.id,
            user: root(),
            secret_sha256,
            expires_at_micros: None,
        },
    ]
    .into_iter()
    .map(|change| Operation::Auth { change })
    .collect()
}

/// Turns authentication on with the bootstrap token, once: whichever member
/// holding the token leads while the cluster has no user proposes the
/// first admin. Every holder uses the token's id as op id, so two founders
/// that both try apply it once.
async fn bootstrap_admin(shared: Arc<Shared>) {
    let Some(token) = shared.config.bootstrap_token.clone() else {
        return;
    };
    let mut metrics = shared.raft.server_metrics();
    loop {
        let leading = metrics.borrow_and_update().current_leader == Some(shared.id);
        if leading {
            let failed = match shared.auth.state() {
                Ok(state) if state.is_enabled() => return,
                Ok(_) => {
                    let op_id = Some(lode_raft_store::OpId(token.id));
                    match shared.proposer.propose(op_id, bootstrap_operations(&token)).await {
                        Ok(_) => {
                            tracing::info!("authentication is on: user root holds the bootstrap token");
                            return;
                        }
                        Err(error) => format!("proposing the bootstrap admin failed: {error}"),
                    }
                }
                Err(error) => format!("reading the auth state failed: {error}"),
            };
            tracing::warn!(detail = failed, "turning authentication on failed; trying again");
            // The server metrics change only with the vote, the leader or
            // the membership: a failure while leading is retried after a
            // pause, not at the next change of leader.
            tokio::time::sleep(BOOTSTRAP_ADMIN_RETRY).await;
            continue;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// The pause before a leader tries again to create the first admin.
const BOOTSTRAP_ADMIN_RETRY: Duration = Duration::from_millis(200);

/// Waits until Raft's core task has ended and answers why.
///
/// Waits on the server metrics, which change with the vote, the leader and
/// the membership only, and end with the core. The full metrics change
/// with every append, apply and follower's acknowledgement, and each
/// change woke every waiter: the member's main thread among them, three
/// to six thread wake-ups per write on each member for nothing.
async fn raft_core_exited(raft: &Raft<TypeConfig>) -> String {
    let mut server = raft.server_metrics();
    while server.changed().await.is_ok() {}
    // The core records why it stopped in the full metrics before it drops
    // the server metrics' sender.
    match &raft.metrics().borrow().running_state {
        Err(fatal) => fatal.to_string(),
        Ok(()) => "raft's metrics ended".to_owned(),
    }
}

/// Logs every change of term or leader once, at info level, and a stop of
/// Raft at error level.
async fn report_leadership(shared: Arc<Shared>) {
    let mut metrics = shared.raft.server_metrics();
    let mut last = (0, None);
    loop {
        let current = {
            let seen = metrics.borrow_and_update();
            (seen.vote.leader_id().term, seen.current_leader)
        };
        if current != last {
            if current.1 != last.1 && current.1.is_some() {
                shared.metrics.leader_changes.inc();
            }
            let leading = (current.1 == Some(shared.id)).then(|| (current.0, tokio::time::Instant::now()));
            if let Ok(mut since) = shared.leading_since.lock() {
                *since = leading;
            }
            tracing::info!(term = current.0, leader = ?current.1, "leadership changed");
            last = current;
        }
        if metrics.changed().await.is_err() {
            break;
        }
    }
    if let Err(fatal) = &shared.raft.metrics().borrow().running_state {
        // Raft stops only on a storage failure or a bug: a human must look.
        tracing::error!(error = %fatal, "raft stopped; this member no longer serves");
    }
}
