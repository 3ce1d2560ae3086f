//! openraft's network over the wire protocol: Raft messages travel as
//! bincode bytes through the `raft` call of the service, to each peer's
//! peer port, with this member's cluster id, on connections that are
//! reused and redialed after any error.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lode_client::connection::{CallFailure, Connection};
use lode_client::protocol::{ByteBuf, ClusterId, ClusterStatus, RaftMessageKind};
use lode_client::tls::Transport;
use lode_client::LodeError;
use lode_raft_store::log_durability::LogDurability;
use lode_raft_store::{Member, NodeId, TypeConfig};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::cluster_identity::ClusterIdentity;

/// Connections to peers' peer ports by address, shared by every
/// replication stream and by request forwarding, all dialed with the
/// member's own transport (its certificate, when TLS is on).
#[derive(Clone)]
pub struct PeerConnections {
    connections: Arc<Mutex<HashMap<String, Arc<Connection>>>>,
    transport: Transport,
}

impl PeerConnections {
    pub fn new(transport: Transport) -> Self {
        Self {
            connections: Arc::default(),
            transport,
        }
    }

    pub fn get(&self, address: &str) -> Arc<Connection> {
        let mut connections = self.connections.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        connections
            .entry(address.to_owned())
            .or_insert_with(|| Arc::new(Connection::new(address, self.transport.clone())))
            .clone()
    }

    /// The status of each of `members` (id, peer address) that answers
    /// within `timeout` as a member of `cluster`, asked concurrently.
    pub async fn statuses(
        &self,
        members: Vec<(NodeId, String)>,
        cluster: ClusterId,
        timeout: Duration,
    ) -> Vec<(NodeId, ClusterStatus)> {
        let asks = members.into_iter().map(|(id, address)| async move {
            let answer = self
                .get(&address)
                .call(
                    timeout,
                    |client, context| async move { client.node_status(context).await },
                )
                .await;
            match answer {
                Ok(Ok(status)) if status.cluster_id == Some(cluster) => Some((id, status)),
                _ => None,
            }
        });
        futures::future::join_all(asks).await.into_iter().flatten().collect()
    }

    /// Which of `members` answer as members of `cluster` ([`Self::statuses`]).
    pub async fn answering(
        &self,
        members: Vec<(NodeId, String)>,
        cluster: ClusterId,
        timeout: Duration,
    ) -> Vec<NodeId> {
        self.statuses(members, cluster, timeout)
            .await
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }
}

pub struct NetworkFactory {
    pub peers: PeerConnections,
    pub cluster: Arc<ClusterIdentity>,
    /// Where a peer answering `not_admitted` is noted.
    pub lost_members: Arc<crate::admission::LostMembers>,
    /// Counts the snapshot bytes sent.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// How far this member's log is on disk: a commit index beyond it is
    /// not sent (`lode_raft_store::log_durability`).
    pub log_durability: Arc<LogDurability>,
    /// The peers out of reach, shared by every client of this member.
    pub outages: Arc<PeerOutages>,
}

/// Whether each peer's last call failed in transport, one flag per peer
/// shared by every client of it. openraft makes a client per replication
/// stream and per election round, so an outage is kept here to be logged
/// once when it starts and once when it ends, whichever client sees it.
#[derive(Default)]
pub struct PeerOutages {
    failing: Mutex<HashMap<NodeId, Arc<AtomicBool>>>,
}

impl PeerOutages {
    fn of(&self, target: NodeId) -> Arc<AtomicBool> {
        let mut failing = self.failing.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        failing.entry(target).or_default().clone()
    }
}

pub struct PeerClient {
    target: NodeId,
    cluster: Arc<ClusterIdentity>,
    connection: Arc<Connection>,
    lost_members: Arc<crate::admission::LostMembers>,
    metrics: Arc<crate::metrics::Metrics>,
    log_durability: Arc<LogDurability>,
    /// When the snapshot being sent sent its first chunk.
    snapshot_started: Option<tokio::time::Instant>,
    /// Whether the last call to this peer, by any client, failed in
    /// transport ([`PeerOutages`]).
    failing: Arc<AtomicBool>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> PeerClient {
        PeerClient {
            target,
            cluster: self.cluster.clone(),
            connection: self.peers.get(&node.peer_address),
            lost_members: self.lost_members.clone(),
            metrics: self.metrics.clone(),
            log_durability: self.log_durability.clone(),
            snapshot_started: None,
            failing: self.outages.of(target),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

impl PeerClient {
    /// Logs an outage when a call first fails and when one first succeeds
    /// after; a call that succeeds with no outage only reads the flag.
    fn note_transport(&self, failure: Option<&str>) {
        match failure {
            Some(detail) if !self.failing.swap(true, Ordering::Relaxed) => {
                tracing::warn!(
                    peer = self.target,
                    address = self.connection.address(),
                    detail,
                    "peer unreachable"
                );
            }
            None if self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!(peer = self.target, "peer reachable again");
            }
            _ => {}
        }
    }

    async fn send<Request, Response, E>(
        &mut self,
        kind: RaftMessageKind,
        request: &Request,
        option: &RPCOption,
    ) -> Result<Response, RPCError<NodeId, Member, RaftError<NodeId, E>>>
    where
        Request: Serialize,
        Response: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let payload = lode_types::binary::encode(request)
            .map_err(|error| RPCError::Network(NetworkError::new(&TransportError(error))))?;
        let payload = ByteBuf::from(payload);
        let Some(cluster) = self.cluster.get() else {
            let detail = "this member has no cluster id yet".to_owned();
            return Err(RPCError::Unreachable(Unreachable::new(&TransportError(detail))));
        };
        let answer = self
            .connection
            .call(option.hard_ttl(), |client, context| async move {
                client.raft(context, cluster, kind, payload).await
            })
            .await;
        let bytes = match answer {
            Ok(Ok(bytes)) => {
                self.note_transport(None);
                bytes
            }
            Ok(Err(error)) => {
                self.note_transport(None);
                if matches!(error, LodeError::NotAdmitted { .. }) {
                    // Unreachable, not a network error: Raft backs off
                    // (and logs nothing per message) until it is admitted.
                    self.lost_members.note(self.target);
                    return Err(RPCError::Unreachable(Unreachable::new(&error)));
                }
                return Err(RPCError::Network(NetworkError::new(&error)));
            }
            Err(CallFailure::Dial(detail)) => {
                self.note_transport(Some(&detail));
                return Err(RPCError::Unreachable(Unreachable::new(&TransportError(detail))));
            }
            Err(failure) => {
                let detail = format!("{failure:?}");
                self.note_transport(Some(&detail));
                return Err(RPCError::Network(NetworkError::new(&TransportError(detail))));
            }
        };
        let decoded: Result<Response, RaftError<NodeId, E>> = lode_types::binary::decode(&bytes)
            .map_err(|error| RPCError::Network(NetworkError::new(&TransportError(error))))?;
        decoded.map_err(|error| RPCError::RemoteError(RemoteError::new(self.target, error)))
    }
}

/// The first pause before Raft retries a peer it could not reach; it
/// doubles at each failure up to `UNREACHABLE_BACKOFF_MS_MAX`. A restarted
/// member is replicated to again within tens of milliseconds of binding its
/// port, instead of openraft's constant 500 ms (the leader's quorum may
/// depend on it, as in a rolling restart).
const UNREACHABLE_BACKOFF_MS_MIN: u64 = 10;
const UNREACHABLE_BACKOFF_MS_MAX: u64 = 500;
const _: () = assert!(UNREACHABLE_BACKOFF_MS_MIN <= UNREACHABLE_BACKOFF_MS_MAX);

impl RaftNetwork<TypeConfig> for PeerClient {
    fn backoff(&self) -> openraft::network::Backoff {
        let pauses = (0..).map(|failures: u32| {
            let pause = UNREACHABLE_BACKOFF_MS_MIN.saturating_mul(1 << failures.min(16));
            std::time::Duration::from_millis(pause.min(UNREACHABLE_BACKOFF_MS_MAX))
        });
        openraft::network::Backoff::new(pauses)
    }

    async fn append_entries(
        &mut self,
        mut request: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        // A message with entries goes at once, with the commit index only
        // if this member holds it on disk; one without (a heartbeat, or
        // news of the commit index) waits a little for that sync, as the
        // commit index is what it carries.
        let wait = if request.entries.is_empty() {
            option.soft_ttl() / 2
        } else {
            Duration::ZERO
        };
        request.leader_commit = self.log_durability.commit_to_send(request.leader_commit, wait).await;
        self.send(RaftMessageKind::AppendEntries, &request, &option).await
    }

    async fn install_snapshot(
        &mut self,
        request: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId, InstallSnapshotError>>>
    {
        let (bytes, done) = (request.data.len() as u64, request.done);
        if request.offset == 0 {
            self.snapshot_started = Some(tokio::time::Instant::now());
        }
        let answer = self.send(RaftMessageKind::InstallSnapshot, &request, &option).await;
        if answer.is_ok() {
            self.metrics.snapshot_sent_bytes.inc_by(bytes);
            if done {
                self.metrics.snapshots_sent.inc();
                if let Some(started) = self.snapshot_started.take() {
                    self.metrics
                        .snapshot_send_seconds
                        .observe(started.elapsed().as_secs_f64());
                }
            }
        }
        answer
    }

    async fn vote(
        &mut self,
        request: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        self.send(RaftMessageKind::Vote, &request, &option).await
    }
}
