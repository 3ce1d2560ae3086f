//! The wire protocol's server side: client writes and reads, cluster
//! administration, and Raft messages from peers.
//!
//! Requests that need the leader are forwarded to it once; if that fails the
//! caller gets a `not_leader` hint and the SDK goes to the leader directly.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lode_client::connection::CallFailure;
use lode_client::protocol::{
    AccessToken, ByteBuf, Capability, ClusterId, ClusterStatus, Consistency, EntryMeta, LeaseInfo, LodeService,
    MemberAddresses, MemberStatus, Query, QueryResult, RaftMessageKind, ReadRequest, ReadResponse, ServiceClient,
    StateEventFilter, WriteRequest, WriteResponse,
};
use lode_client::LodeError;
use lode_raft_store::injected_bugs::{self, InjectedBug};
use lode_raft_store::{Member, TypeConfig};
use openraft::{ChangeMembers, ServerState};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tarpc::context::Context;
use tracing::Instrument;

use crate::auth::{Allowed, CallerSlot};
use crate::convert;
use crate::follower_reads::{FollowerIndex, FollowerReads, FOLLOWER_READ_LAG_ENTRIES_MAX};
use crate::leadership::Leader;
use crate::shared::{voter_ids, Shared};

/// How long a removal's quorum check waits for each voter left to answer.
const REMOVAL_PING_TIMEOUT_MS: u64 = 1_000;

/// The largest snapshot image a member receives, in bytes. A received
/// image is written to a file chunk by chunk, never held in memory; the
/// bound keeps a chunk's offset from growing a file past any real state.
pub const SNAPSHOT_BYTES_MAX: u64 = 64 << 30;

/// Most expired entries a status counts.
pub const EXPIRED_COUNTED_MAX: usize = 10_000;

/// Which of a member's ports a connection came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// Clients: everything but `raft`.
    Client,
    /// Members (mutually authenticated when TLS is on): everything.
    Peer,
}

impl Port {
    /// The port's name in metrics.
    pub fn label(self) -> &'static str {
        match self {
            Port::Client => "client",
            Port::Peer => "peer",
        }
    }
}

#[derive(Clone)]
pub struct NodeService {
    pub shared: Arc<Shared>,
    pub port: Port,
    /// Who called on this connection (`authenticate`).
    pub caller: CallerSlot,
}

/// Most refusals being decided again after a catch-up at once, per member;
/// each costs a linearizable read, forwarded to the leader from a follower.
pub const REFUSAL_RECHECKS_MAX: usize = 64;

fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, LodeError> {
    lode_types::binary::decode(payload)
        .map_err(|error| LodeError::Invalid(format!("raft payload does not decode: {error}")))
}

fn encode<T: Serialize>(value: &T) -> Result<ByteBuf, LodeError> {
    lode_types::binary::encode(value)
        .map(ByteBuf::from)
        .map_err(|error| LodeError::Unavailable(format!("cannot encode raft response: {error}")))
}

impl NodeService {
    /// The service as the member's own background tasks call it: with the
    /// peer port's rights.
    pub fn background(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            port: Port::Peer,
            caller: CallerSlot::default(),
        }
    }

    /// Counts a call while it is served: for shutdown (which waits for
    /// calls to finish) and for `lode_requests_in_flight`.
    fn in_flight(&self) -> (Arc<()>, crate::metrics::InFlight) {
        (
            self.shared.in_flight.clone(),
            self.shared.metrics.request_in_flight(self.port.label()),
        )
    }

    fn is_leader(&self) -> bool {
        self.shared.raft.metrics().borrow().state == ServerState::Leader
    }

    /// Serves `request` on the leader: forwarded there by `forward` when
    /// another member leads, or by `local` here. The one place a request
    /// takes the route to the leader.
    async fn on_leader<R, T, F, FFut, L, LFut>(&self, request: R, forward: F, local: L) -> Result<T, LodeError>
    where
        F: FnOnce(ServiceClient, Context, R) -> FFut,
        FFut: Future<Output = Result<Result<T, LodeError>, tarpc::client::RpcError>>,
        L: FnOnce(R) -> LFut,
        LFut: Future<Output = Result<T, LodeError>>,
    {
        match crate::leadership::leader_elsewhere(&self.shared.raft, self.shared.id) {
            // Boxed: the forwarding future (a peer connection's call with
            // its time limit) is several KiB, and every call's future would
            // otherwise carry its room and be copied with it, on the leader
            // too.
            Some(leader) => Box::pin(self.forward(leader, |client, context| forward(client, context, request))).await,
            None => local(request).await,
        }
    }

    /// Sends a request to the leader's peer port; when it cannot be
    /// reached, answers with a hint so the SDK can go there itself.
    async fn forward<T, F, Fut>(&self, leader: Leader, call: F) -> Result<T, LodeError>
    where
        F: FnOnce(ServiceClient, Context) -> Fut,
        Fut: Future<Output = Result<Result<T, LodeError>, tarpc::client::RpcError>>,
    {
        let address = &leader.member.peer_address;
        let connection = self.shared.peers.get(address);
        let timeout = Duration::from_millis(self.shared.config.forward_timeout_ms);
        match connection.call(timeout, call).await {
            Ok(answer) => answer,
            Err(CallFailure::Dial(_)) => Err(LodeError::NotLeader { hint: leader.hint() }),
            Err(failure) => Err(failure.into_error(address)),
        }
    }

    /// A linearizable read on a follower, served here once this member has
    /// applied as far as the leader's read index (`follower_reads.rs`). A
    /// follower far behind (catching up, by snapshot perhaps) sends the
    /// read to the leader whole instead of holding it until it caught up.
    async fn read_on_follower(&self, leader: Leader, request: ReadRequest) -> Result<ReadResponse, LodeError> {
        let read_index = match FollowerReads::index(&self.shared, &leader).await? {
            FollowerIndex::Applied(read_index)
                if read_index.saturating_sub(self.shared.reader.applied_index()) <= FOLLOWER_READ_LAG_ENTRIES_MAX =>
            {
                read_index
            }
            FollowerIndex::Applied(_) | FollowerIndex::Whole => {
                self.shared.metrics.count_linearizable_read("forwarded");
                return self
                    .on_leader(
                        request,
                        |client, context, request| async move { client.read(context, request).await },
                        |request| async move { self.read_as_leader(&request).await },
                    )
                    .await;
            }
        };
        self.shared.metrics.count_linearizable_read("follower");
        if !injected_bugs::enabled(InjectedBug::FollowerReadBeforeApply) {
            self.wait_applied(read_index).await?;
        }
        self.read_local(&request)
    }

    /// A linearizable read on the leader: served once a quorum round that
    /// began after it confirmed the leadership (`reads.rs`).
    async fn read_as_leader(&self, request: &ReadRequest) -> Result<ReadResponse, LodeError> {
        self.shared.metrics.count_linearizable_read("leader");
        let read_index = self.shared.read_index.read_index().await?;
        self.wait_applied(read_index).await?;
        self.read_local(request)
    }

    async fn write_on_leader(
        &self,
        request: WriteRequest,
        grants_revision: Option<u64>,
    ) -> Result<WriteResponse, LodeError> {
        lode_types::validate_client_write(&request.operations).map_err(LodeError::Invalid)?;
        self.shared.quota.check(&request.operations)?;
        let mut operations = request.operations.clone();
        convert::cap_lease_ttls(
            &mut operations,
            self.shared.config.lease_ttl_ms_max.saturating_mul(1000),
        );
        let op_id = Some(lode_raft_store::OpId(request.op_id));
        let proposed = self
            .shared
            .proposer
            .propose_checked(op_id, operations, grants_revision)
            .await;
        let outcome = match proposed {
            Ok(outcome) => outcome,
            Err(error @ LodeError::NotLeader { .. }) => {
                // Leadership moved while the write waited: forward it once.
                let Some(leader) = crate::leadership::leader_elsewhere(&self.shared.raft, self.shared.id) else {
                    return Err(error);
                };
                let forwarded = self.forward(leader, |client, context| async move {
                    client.write_checked(context, request, grants_revision).await
                });
                return Box::pin(forwarded).await;
            }
            Err(error) => return Err(error),
        };
        let results = convert::results_to_wire(outcome.result.map_err(convert::rejection_to_wire)?)?;
        Ok(WriteResponse {
            position: outcome.index,
            results,
        })
    }

    fn read_local(&self, request: &ReadRequest) -> Result<ReadResponse, LodeError> {
        // The position is read before the state, so the state served is at
        // least as new as the position reported.
        let position = self.shared.reader.applied_index();
        let result = self.answer(&request.query, self.shared.clock.now_micros())?;
        Ok(ReadResponse { result, position })
    }

    /// Answers a query from this replica's state as of `now_micros`,
    /// without waiting.
    fn answer(&self, query: &Query, now_micros: u64) -> Result<QueryResult, LodeError> {
        self.answer_from_storage(query, now_micros).map_err(storage_error)?
    }

    /// One page of the change feed after `after`, from this replica.
    fn change_page(
        &self,
        after: (u64, u32),
        limit: u32,
        namespace_prefix: &str,
    ) -> Result<(Vec<lode_client::protocol::ChangeEvent>, (u64, u32)), LodeError> {
        match self
            .shared
            .reader
            .changes(after, limit as usize, namespace_prefix)
            .map_err(storage_error)?
        {
            Ok(page) => Ok((page.events, page.resume_after)),
            Err(compacted) => Err(LodeError::Compacted {
                requested: compacted.requested,
                trimmed_through: compacted.trimmed_through,
            }),
        }
    }

    fn answer_from_storage(
        &self,
        query: &Query,
        now_micros: u64,
    ) -> Result<Result<QueryResult, LodeError>, lode_raft_store::EngineError> {
        let reader = &self.shared.reader;
        Ok(Ok(match query {
            Query::Get { namespace, key } => QueryResult::Entry(
                reader
                    .get_entry(namespace, key, now_micros)?
                    .map(|entry| convert::entry_to_wire(key.clone(), entry)),
            ),
            Query::Exists { namespace, key } => {
                QueryResult::Exists(reader.get_entry(namespace, key, now_micros)?.map(|entry| EntryMeta {
                    version: entry.version,
                    expires_at_micros: entry.expires_at_micros,
                    size_bytes: entry.value.len() as u64,
                }))
            }
            Query::GetMany { namespace, keys } => {
                let keys: Vec<Vec<u8>> = keys.iter().map(|key| key.to_vec()).collect();
                let entries = reader.get_many(namespace, &keys, now_micros)?;
                QueryResult::Entries(
                    keys.into_iter()
                        .zip(entries)
                        .map(|(key, entry)| entry.map(|entry| convert::entry_to_wire(key, entry)))
                        .collect(),
                )
            }
            Query::Scan {
                namespace,
                selector,
                after,
                limit,
            } => {
                let page = reader.scan(namespace, selector, after.as_deref(), *limit as usize, now_micros)?;
                QueryResult::Page {
                    entries: page
                        .entries
                        .into_iter()
                        .map(|(key, entry)| convert::entry_to_wire(key, entry))
                        .collect(),
                    resume_after: page.resume_after,
                }
            }
            Query::Namespaces { prefix } => match reader.namespaces(prefix, now_micros)? {
                Some(names) => QueryResult::Namespaces(names),
                None => {
                    use lode_types::limits::{NAMESPACES_EXAMINED_MAX, NAMESPACES_LISTED_MAX};
                    return Ok(Err(LodeError::Invalid(format!(
                        "the namespaces under prefix {prefix:?} are more than namespaces_listed_max = \
                         {NAMESPACES_LISTED_MAX}, or more than namespaces_examined_max = {NAMESPACES_EXAMINED_MAX} \
                         were looked at; list them under longer prefixes"
                    ))));
                }
            },
            // Answered by `read_changes` and `read_next_delivery`, which
            // wait; never from here.
            Query::StateEvents { .. } | Query::NextDelivery { .. } => {
                return Ok(Err(LodeError::Invalid(
                    "state events and due queue messages are read through their waits".to_owned(),
                )))
            }
            Query::Ranges { namespace, ranges } => QueryResult::Ranges(
                match reader.read_ranges(namespace, ranges, now_micros)? {
                    Some(read) => read,
                    None => {
                        return Ok(Err(LodeError::Invalid(format!(
                            "the ranges hold more than ranges_read_bytes_max = {} bytes of keys and values; \
                             read fewer entries per range",
                            lode_types::limits::RANGES_READ_BYTES_MAX
                        ))))
                    }
                }
                .into_iter()
                .map(|entries| {
                    entries
                        .into_iter()
                        .map(|(key, entry)| convert::entry_to_wire(key, entry))
                        .collect()
                })
                .collect(),
            ),
            Query::SessionKeys { session, after, limit } => {
                let page = reader.session_keys(session, after.as_deref(), *limit as usize)?;
                QueryResult::SessionKeys {
                    keys: page
                        .keys
                        .into_iter()
                        .map(|(namespace, key)| (namespace, ByteBuf::from(key)))
                        .collect(),
                    resume_after: page.resume_after,
                }
            }
            Query::Changes {
                after_index,
                after_sequence,
                namespace_prefix,
                limit,
                ..
            } => match self.change_page((*after_index, *after_sequence), *limit, namespace_prefix) {
                Ok((events, resume_after)) => QueryResult::Changes { events, resume_after },
                Err(error) => return Ok(Err(error)),
            },
            Query::Lease { namespace, key } => {
                QueryResult::Lease(reader.lease(namespace, key, now_micros)?.map(|lease| LeaseInfo {
                    holder: lease.holder,
                    token: lease.token,
                    expires_at_micros: lease.expires_at_micros,
                }))
            }
        }))
    }

    /// Change events from this replica's change log, which holds the same
    /// events in the same order on every member. With none yet, waits for
    /// further applies until `wait_ms` has passed.
    async fn read_changes(
        &self,
        after: (u64, u32),
        namespace_prefix: &str,
        limit: u32,
        wait_ms: u64,
        filter: Option<&StateEventFilter>,
    ) -> Result<ReadResponse, LodeError> {
        let reader = &self.shared.reader;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
        let mut cursor = after;
        loop {
            let position = reader.applied_index();
            let (mut events, resume_after) = self.change_page(cursor, limit, namespace_prefix)?;
            if let Some(filter) = filter {
                events.retain(|event| filter.matches(event));
            }
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let progressed = resume_after != cursor;
            cursor = resume_after.max(cursor);
            // Without a filter an advanced position is worth answering; with
            // one, only matching events are, or the deadline.
            if !events.is_empty() || (progressed && filter.is_none()) || remaining.is_zero() {
                let result = QueryResult::Changes {
                    events,
                    resume_after: cursor,
                };
                return Ok(ReadResponse { result, position });
            }
            if !progressed {
                // Nothing new: wait for the next apply (or the deadline).
                let _ = reader.wait_applied(position + 1, remaining).await;
            }
        }
    }

    /// When the next queue message is due; with none due now, waits for
    /// further applies (or the due time) until `wait_ms` has passed.
    async fn read_next_delivery(&self, wait_ms: u64) -> Result<ReadResponse, LodeError> {
        let reader = &self.shared.reader;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
        loop {
            let position = reader.applied_index();
            let now_micros = self.shared.clock.now_micros();
            let due_at_micros = reader.next_queue_due_micros().map_err(storage_error)?;
            let due_in = due_at_micros.map(|due| Duration::from_micros(due.saturating_sub(now_micros)));
            let due_now = due_in.is_some_and(|due_in| due_in.is_zero());
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if due_now || remaining.is_zero() {
                let result = QueryResult::NextDelivery { due_at_micros, due_now };
                return Ok(ReadResponse { result, position });
            }
            let wait = due_in.map_or(remaining, |due_in| due_in.min(remaining));
            let _ = reader.wait_applied(position + 1, wait).await;
        }
    }

    async fn wait_applied(&self, position: u64) -> Result<(), LodeError> {
        let wait = Duration::from_millis(self.shared.config.read_wait_ms_max);
        self.shared
            .reader
            .wait_applied(position, wait)
            .await
            .map(|_| ())
            .map_err(|behind| LodeError::Stale {
                applied: behind.applied,
                wanted: behind.wanted,
            })
    }

    async fn read_request(&self, request: ReadRequest) -> Result<ReadResponse, LodeError> {
        request.query.validate().map_err(LodeError::Invalid)?;
        // Change reads wait for applies; both kinds share one loop.
        let change_read = match &request.query {
            Query::Changes {
                after_index,
                after_sequence,
                namespace_prefix,
                limit,
                wait_ms,
            } => Some((
                (*after_index, *after_sequence),
                namespace_prefix.clone(),
                *limit,
                *wait_ms,
                None,
            )),
            Query::StateEvents {
                after_index,
                after_sequence,
                filter,
                limit,
                wait_ms,
            } => Some((
                (*after_index, *after_sequence),
                filter.namespace_prefix(),
                *limit,
                *wait_ms,
                Some(filter),
            )),
            _ => None,
        };
        if let Some((after, namespace_prefix, limit, wait_ms, filter)) = change_read {
            if let Consistency::AtLeast(position) = request.consistency {
                self.wait_applied(position).await?;
            }
            return self
                .read_changes(after, &namespace_prefix, limit, wait_ms, filter)
                .await;
        }
        if let Query::NextDelivery { wait_ms } = &request.query {
            return self.read_next_delivery(*wait_ms).await;
        }
        match request.consistency {
            Consistency::Eventual => self.read_local(&request),
            Consistency::AtLeast(position) => {
                self.wait_applied(position).await?;
                self.read_local(&request)
            }
            Consistency::Linearizable => match crate::leadership::leader_elsewhere(&self.shared.raft, self.shared.id) {
                None => self.read_as_leader(&request).await,
                // Boxed, as forwarding is (`on_leader`).
                Some(leader) => Box::pin(self.read_on_follower(leader, request)).await,
            },
        }
    }

    fn local_status(&self) -> ClusterStatus {
        let metrics = self.shared.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, node)| {
                let itself = *id == self.shared.id;
                let matched_index = if itself {
                    metrics.last_log_index
                } else {
                    metrics
                        .replication
                        .as_ref()
                        .and_then(|replication| replication.get(id).cloned().flatten())
                        .map(|log_id| log_id.index)
                };
                MemberStatus {
                    id: *id,
                    address: node.client_address.clone(),
                    peer_address: node.peer_address.clone(),
                    voter: voters.contains(id),
                    matched_index,
                    applied_index: itself
                        .then_some(metrics.last_applied.map(|log_id| log_id.index))
                        .flatten(),
                }
            })
            .collect();
        ClusterStatus {
            cluster_id: self.shared.cluster.get(),
            answered_by: self.shared.id,
            leader: metrics.current_leader,
            term: metrics.current_term,
            members,
            applied_index: metrics.last_applied.map(|log_id| log_id.index).unwrap_or(0),
            last_log_index: metrics.last_log_index,
            snapshot_index: metrics.snapshot.map(|log_id| log_id.index),
            purged_index: metrics.purged.map(|log_id| log_id.index),
            quorum_ack_ms: metrics.millis_since_quorum_ack,
            expired_awaiting_sweep: self
                .shared
                .reader
                .expired_awaiting_sweep(self.shared.clock.now_micros(), EXPIRED_COUNTED_MAX)
                .unwrap_or_else(|error| {
                    tracing::error!(%error, "reading the expiry index failed");
                    0
                }) as u64,
        }
    }

    async fn add_member_on_leader(
        &self,
        id: u64,
        addresses: MemberAddresses,
        cluster: Option<ClusterId>,
    ) -> Result<ClusterStatus, LodeError> {
        check_addresses(&addresses)?;
        if let Some(cluster) = cluster {
            self.shared.cluster.check(cluster)?;
        }
        let _changing = self.shared.membership_changes.lock().await;
        self.require_voting_leader()?;
        let existing = self
            .shared
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .cloned();
        let member = Member {
            peer_address: addresses.peer.clone(),
            client_address: addresses.client.clone(),
        };
        match existing {
            Some(node) if node.peer_address != member.peer_address => {
                return Err(LodeError::Invalid(format!(
                    "member {id} already exists with peer address {}",
                    node.peer_address
                )));
            }
            Some(node) => return self.publish_client_address(id, node, member).await,
            None => {}
        }
        if cluster.is_none() {
            self.check_candidate_cluster(&member.peer_address).await?;
        }
        if let Some(ours) = self.shared.cluster.get() {
            crate::admission::admit(&self.shared.peers, &member.peer_address, ours).await?;
        }
        // Not blocking: the learner catches up (from a snapshot if need
        // be) while the leader serves, and `promotion.rs` makes it a voter
        // once it keeps up.
        self.shared
            .raft
            .add_learner(id, member, false)
            .await
            .map_err(crate::proposer::write_error)?;
        tracing::info!(member = id, "member added as a learner");
        Ok(self.local_status())
    }

    /// A member that answered `not_admitted` (its data was lost): a voter
    /// is made a learner first, so it counts towards no quorum before it
    /// holds the log again; then it is admitted (`admission.rs`), and
    /// promoted once it keeps up.
    pub async fn readmit(&self, id: u64) -> Result<(), LodeError> {
        let _changing = self.shared.membership_changes.lock().await;
        self.require_voting_leader()?;
        self.require_settled_membership()?;
        let membership = self.membership();
        let Some(member) = membership.get_node(&id).cloned() else {
            return Ok(());
        };
        let Some(cluster) = self.shared.cluster.get() else {
            return Err(LodeError::Unavailable("this member has no cluster id".to_owned()));
        };
        // Peeked, not taken: a readmission that fails is tried again.
        let late_founder = self.shared.lost_members.is_late_founder(id);
        if membership.voter_ids().any(|voter| voter == id) {
            if late_founder {
                tracing::info!(
                    member = id,
                    "a founder that was not up when the cluster was founded answered: it is a learner until it \
                     has caught up"
                );
            } else {
                tracing::warn!(
                    member = id,
                    "a voter answered that it holds no cluster state (its data was lost): it is a learner \
                     again until it has caught up"
                );
            }
            self.shared
                .raft
                .change_membership(
                    ChangeMembers::RemoveVoters(std::collections::BTreeSet::from([id])),
                    true,
                )
                .await
                .map_err(crate::proposer::write_error)?;
        }
        crate::admission::admit(&self.shared.peers, &member.peer_address, cluster).await?;
        self.shared.lost_members.admitted(id);
        match late_founder {
            true => tracing::info!(member = id, "admitted a late founder, as a learner"),
            false => tracing::info!(member = id, "readmitted a member that had lost its data, as a learner"),
        }
        Ok(())
    }

    /// Makes learner `id` a voter (`promotion.rs` decides when).
    pub async fn promote_learner(&self, id: u64) -> Result<(), LodeError> {
        let _changing = self.shared.membership_changes.lock().await;
        self.require_voting_leader()?;
        self.require_settled_membership()?;
        let membership = self.membership();
        if membership.get_node(&id).is_none() || membership.voter_ids().any(|voter| voter == id) {
            return Ok(());
        }
        self.make_voter(id).await
    }

    async fn make_voter(&self, id: u64) -> Result<(), LodeError> {
        let voters = std::collections::BTreeSet::from([id]);
        self.shared
            .raft
            .change_membership(ChangeMembers::AddVoterIds(voters), false)
            .await
            .map_err(crate::proposer::write_error)?;
        Ok(())
    }

    /// A member already present: records the client address it published
    /// (an empty one changes nothing). Only the client address changes this
    /// way: Raft keeps reaching the member where it always has. A learner
    /// stays one until it keeps up (`promotion.rs`).
    async fn publish_client_address(&self, id: u64, node: Member, member: Member) -> Result<ClusterStatus, LodeError> {
        if !member.client_address.is_empty() && node.client_address != member.client_address {
            self.require_settled_membership()?;
            let nodes = std::collections::BTreeMap::from([(id, member)]);
            self.shared
                .raft
                .change_membership(ChangeMembers::SetNodes(nodes), false)
                .await
                .map_err(crate::proposer::write_error)?;
            tracing::info!(member = id, "member published its client address");
        }
        Ok(self.local_status())
    }

    /// The membership in effect on this member.
    fn membership(&self) -> openraft::Membership<u64, Member> {
        self.shared
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .clone()
    }

    /// `unavailable` unless this member leads as a voter: a leader that
    /// removed itself keeps leading until a successor is elected, and
    /// openraft 0.9 must not be asked for a membership change then (it
    /// asserts against it).
    fn require_voting_leader(&self) -> Result<(), LodeError> {
        let leading = self.shared.raft.metrics().borrow().state == ServerState::Leader;
        if leading && voter_ids(&self.shared.raft).contains(&self.shared.id) {
            return Ok(());
        }
        Err(LodeError::Unavailable(
            "this member is leaving the voters; retry once a successor leads".to_owned(),
        ))
    }

    /// `unavailable` while the last membership change is not applied here:
    /// openraft would refuse the next one, logging an error.
    fn require_settled_membership(&self) -> Result<(), LodeError> {
        let metrics = self.shared.raft.metrics().borrow().clone();
        let changed_at = metrics.membership_config.log_id().map(|log_id| log_id.index);
        let applied = metrics.last_applied.map(|log_id| log_id.index);
        if changed_at > applied {
            return Err(LodeError::Unavailable(
                "a membership change is still in progress".to_owned(),
            ));
        }
        Ok(())
    }

    /// Before an operator's `add_member`: the new member, asked on its peer
    /// port, must belong to no cluster or to this one.
    async fn check_candidate_cluster(&self, peer_address: &str) -> Result<(), LodeError> {
        let connection = self.shared.peers.get(peer_address);
        let timeout = Duration::from_millis(self.shared.config.forward_timeout_ms);
        let status = connection
            .call(
                timeout,
                |client, context| async move { client.node_status(context).await },
            )
            .await
            .map_err(|failure| failure.into_error(peer_address))??;
        match (status.cluster_id, self.shared.cluster.get()) {
            (Some(theirs), Some(ours)) if theirs != ours => Err(LodeError::Invalid(format!(
                "the member at {peer_address} belongs to cluster {theirs}, not to this cluster ({ours})"
            ))),
            _ => Ok(()),
        }
    }

    /// Refuses removing voter `id` when the voters left that answer this
    /// leader (itself included; the others asked on their peer ports,
    /// concurrently) would be no quorum of the voters left.
    async fn check_removal_keeps_quorum(
        &self,
        membership: &openraft::Membership<u64, Member>,
        id: u64,
    ) -> Result<(), LodeError> {
        let left: Vec<u64> = membership.voter_ids().filter(|voter| *voter != id).collect();
        let others: Vec<(u64, String)> = left
            .iter()
            .filter(|voter| **voter != self.shared.id)
            .filter_map(|voter| Some((*voter, membership.get_node(voter)?.peer_address.clone())))
            .collect();
        let mut answering = match self.shared.cluster.get() {
            Some(cluster) => {
                let timeout = Duration::from_millis(REMOVAL_PING_TIMEOUT_MS);
                self.shared.peers.answering(others, cluster, timeout).await
            }
            None => Vec::new(),
        };
        if left.contains(&self.shared.id) {
            answering.push(self.shared.id);
        }
        answering.sort_unstable();
        let quorum = left.len() / 2 + 1;
        if answering.len() >= quorum {
            return Ok(());
        }
        Err(LodeError::Invalid(format!(
            "removing member {id} would leave voters {left:?}, of which only {answering:?} answer: \
             {quorum} are needed for a quorum, so the cluster would stop; bring members back first, \
             or pass --force to remove it anyway"
        )))
    }

    async fn remove_member_on_leader(&self, id: u64, force: bool) -> Result<ClusterStatus, LodeError> {
        let _changing = self.shared.membership_changes.lock().await;
        self.require_voting_leader()?;
        let membership = self.membership();
        if membership.get_node(&id).is_none() {
            return Err(LodeError::NotFound(format!("member {id}")));
        }
        let voter = membership.voter_ids().any(|voter| voter == id);
        if voter && force {
            tracing::warn!(
                member = id,
                "removing a voter without checking that the voters left reach a quorum (--force)"
            );
        } else if voter {
            self.check_removal_keeps_quorum(&membership, id).await?;
        }
        let ids = std::collections::BTreeSet::from([id]);
        let change = if voter {
            ChangeMembers::RemoveVoters(ids)
        } else {
            ChangeMembers::RemoveNodes(ids)
        };
        self.shared
            .raft
            .change_membership(change, false)
            .await
            .map_err(crate::proposer::write_error)?;
        tracing::info!(member = id, "member removed");
        Ok(self.local_status())
    }

    async fn raft_message(
        &self,
        cluster: ClusterId,
        kind: RaftMessageKind,
        payload: ByteBuf,
    ) -> Result<ByteBuf, LodeError> {
        if self.port != Port::Peer {
            return Err(LodeError::Invalid(
                "the raft call is served on the peer port only".to_owned(),
            ));
        }
        self.shared.cluster.check(cluster)?;
        self.shared.admission.check(self.shared.id)?;
        let raft = &self.shared.raft;
        match kind {
            RaftMessageKind::AppendEntries => encode(&raft.append_entries(decode(&payload)?).await),
            RaftMessageKind::Vote => encode(&raft.vote(decode(&payload)?).await),
            RaftMessageKind::InstallSnapshot => {
                let request: openraft::raft::InstallSnapshotRequest<TypeConfig> = decode(&payload)?;
                check_snapshot_chunk(&request)?;
                let bytes = request.data.len() as u64;
                // In a task of its own, which finishes whether or not the
                // call is still awaited. A cancelled call (the leader's
                // timeout, a closed connection) aborts this future, and
                // `install_snapshot` waits on openraft's core for the vote
                // first: the core, answering into a dropped receiver, then
                // logged an ERROR (`with_raft_state: to-Raft tx send
                // error`, which once failed `node/tests/linearizability.rs`,
                // a test that stops and kills members).
                let raft = raft.clone();
                let install = async move { raft.install_snapshot(request).await };
                let answer = tokio::spawn(install.in_current_span())
                    .await
                    .map_err(|error| LodeError::Unavailable(format!("installing a snapshot chunk failed: {error}")))?;
                if answer.is_ok() {
                    self.shared.metrics.snapshot_received_bytes.inc_by(bytes);
                }
                encode(&answer)
            }
        }
    }
}

impl NodeService {
    /// The span of one administrative call: which call, and the term this
    /// node was in when it arrived (the node id comes from the
    /// connection's span), on every line the call logs.
    fn request_span(&self, method: &'static str) -> tracing::Span {
        tracing::info_span!("request", method, term = self.current_term())
    }

    /// The span of one read or write, the same as `request_span` but at
    /// DEBUG: below it the span is never made. A member serves tens of
    /// thousands of reads a second, and making, entering and closing an
    /// INFO span for each took 4 to 6% of the members' CPU per get
    /// (`docs/performance.md`, nineteenth round). The few lines these calls
    /// log at INFO and above name their own context.
    fn data_request_span(&self, method: &'static str) -> tracing::Span {
        tracing::debug_span!("request", method, term = self.current_term())
    }

    fn current_term(&self) -> u64 {
        self.shared.raft.metrics().borrow().current_term
    }

    async fn write_request(
        self,
        request: WriteRequest,
        grants_revision: Option<u64>,
    ) -> Result<WriteResponse, LodeError> {
        self.on_leader(
            request,
            |client, context, request| async move { client.write_checked(context, request, grants_revision).await },
            |request| self.write_on_leader(request, grants_revision),
        )
        .await
    }

    /// The leader's view of the cluster, or this member's own when the
    /// leader cannot be asked.
    async fn leader_status(self) -> Result<ClusterStatus, LodeError> {
        let status = self
            .on_leader(
                (),
                |client, context, ()| async move { client.cluster_status(context).await },
                |()| async { Ok(self.local_status()) },
            )
            .await;
        Ok(status.unwrap_or_else(|_| self.local_status()))
    }

    async fn add_member_request(
        self,
        id: u64,
        addresses: MemberAddresses,
        cluster: Option<ClusterId>,
    ) -> Result<ClusterStatus, LodeError> {
        self.on_leader(
            (id, addresses, cluster),
            |client, context, (id, addresses, cluster)| async move {
                client.add_member(context, id, addresses, cluster).await
            },
            |(id, addresses, cluster)| {
                let service = self.clone();
                async move {
                    service.require_leader()?;
                    service.add_member_on_leader(id, addresses, cluster).await
                }
            },
        )
        .await
    }

    async fn remove_member_request(self, id: u64, force: bool) -> Result<ClusterStatus, LodeError> {
        self.on_leader(
            id,
            |client, context, id| async move { client.remove_member(context, id, force).await },
            |id| {
                let service = self.clone();
                async move {
                    service.require_leader()?;
                    service.remove_member_on_leader(id, force).await
                }
            },
        )
        .await
    }

    /// Records this member's own addresses through the leader (its client
    /// address, published).
    pub async fn publish(&self, addresses: MemberAddresses) -> Result<ClusterStatus, LodeError> {
        let cluster = self.shared.cluster.get();
        self.clone()
            .add_member_request(self.shared.id, addresses, cluster)
            .await
    }

    /// `unavailable` unless this member leads (no leader is known).
    fn require_leader(&self) -> Result<(), LodeError> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(LodeError::Unavailable("no leader is known yet".to_owned()))
        }
    }
}

/// Each call holds `in_flight` while it runs, so shutdown can wait for it,
/// and runs inside its request span.
impl NodeService {
    /// What this connection's caller may touch; members on the peer port
    /// may touch everything.
    /// Waits until this member has applied everything the leader had
    /// committed when the call began (a linearizable read as barrier), so
    /// what it decides next sees every change acknowledged before.
    async fn catch_up(&self) -> Result<(), LodeError> {
        let barrier = ReadRequest {
            query: Query::Exists {
                namespace: "barrier".to_owned(),
                key: b"barrier".to_vec(),
            },
            consistency: Consistency::Linearizable,
        };
        let position = self.clone().read_request(barrier).await?.position;
        self.wait_applied(position).await
    }

    /// A backup of this member's state once it has applied what the leader
    /// had committed (a linearizable read's position), so it holds every
    /// write acknowledged before it was asked for.
    async fn backup_request(self) -> Result<(u64, lode_types::backup::BackupHeader), LodeError> {
        self.catch_up().await?;
        let cluster = self
            .shared
            .cluster
            .get()
            .ok_or_else(|| LodeError::Unavailable("this member has not joined a cluster yet".to_owned()))?;
        let now_micros = self.shared.clock.now_micros();
        self.shared.backups.take(cluster.0, self.shared.id, now_micros).await
    }

    fn allowed(&self) -> Result<Allowed, LodeError> {
        if self.port == Port::Peer {
            return Ok(Allowed::Everything);
        }
        self.shared.auth.allowed(&self.caller, self.shared.clock.now_micros())
    }

    /// What the caller may touch, passed through `check`, decided as
    /// [`Self::decide_current`] does.
    async fn allowed_checked(&self, check: impl Fn(&Allowed) -> Result<(), LodeError>) -> Result<Allowed, LodeError> {
        self.decide_current(|| self.allowed().and_then(|allowed| check(&allowed).map(|()| allowed)))
            .await
    }

    /// Runs an auth decision; a refusal (`unauthorized`, `forbidden`) is
    /// decided again after [`Self::catch_up`], since a follower that has not
    /// yet applied a token or grant the leader acknowledged must not refuse
    /// a call made after it. The first decision stands when this member
    /// cannot catch up (no leader, or not in a cluster yet: a spare still
    /// refuses every token but its bootstrap one), and past
    /// [`REFUSAL_RECHECKS_MAX`] rechecks at once (a caller trying token
    /// after token).
    async fn decide_current<T>(&self, decide: impl Fn() -> Result<T, LodeError>) -> Result<T, LodeError> {
        match decide() {
            Err(refusal @ (LodeError::Unauthorized | LodeError::Forbidden { .. })) => {
                let Ok(_recheck) = self.shared.refusal_rechecks.try_acquire() else {
                    return Err(refusal);
                };
                // Boxed, as a rare path: a linearizable read's future would
                // otherwise be carried by every call's.
                match Box::pin(self.catch_up()).await {
                    Ok(()) => decide(),
                    Err(_) => Err(refusal),
                }
            }
            decided => decided,
        }
    }
}

/// Drops from an answer what the caller may not read: other namespaces'
/// names, session keys and change events.
fn filter_answer(allowed: &Allowed, mut response: ReadResponse) -> ReadResponse {
    if matches!(allowed, Allowed::Everything | Allowed::Open { .. }) {
        return response;
    }
    match &mut response.result {
        QueryResult::Namespaces(names) => names.retain(|name| allowed.keeps_namespace(name)),
        QueryResult::SessionKeys { keys, .. } => keys.retain(|(namespace, _)| allowed.keeps_namespace(namespace)),
        QueryResult::Changes { events, .. } => events.retain(|event| allowed.keeps_event(event)),
        _ => {}
    }
    response
}

impl LodeService for NodeService {
    async fn write(self, _context: Context, request: WriteRequest) -> Result<WriteResponse, LodeError> {
        let _in_flight = self.in_flight();
        let began = tokio::time::Instant::now();
        let (metrics, port, api, operation) = (
            self.shared.metrics.clone(),
            self.port.label(),
            crate::metrics::write_api(&request.operations),
            crate::metrics::operation_name(&request.operations),
        );
        let span = self.data_request_span("write");
        let result = async {
            let allowed = self
                .allowed_checked(|allowed| allowed.check_write(&request.operations))
                .await?;
            self.write_request(request, allowed.grants_revision()).await
        }
        .instrument(span)
        .await;
        let outcome = crate::metrics::outcome(&result);
        let labels = crate::metrics::RequestLabels {
            api,
            call: "write",
            operation,
            outcome,
            port,
        };
        metrics.observe_request(labels, began.elapsed());
        result
    }

    async fn write_checked(
        self,
        _context: Context,
        request: WriteRequest,
        grants_revision: Option<u64>,
    ) -> Result<WriteResponse, LodeError> {
        if self.port != Port::Peer {
            return Err(LodeError::Invalid(
                "write_checked is served on the peer port only".to_owned(),
            ));
        }
        let _in_flight = self.in_flight();
        let span = self.data_request_span("write");
        self.write_request(request, grants_revision).instrument(span).await
    }

    async fn read(self, _context: Context, request: ReadRequest) -> Result<ReadResponse, LodeError> {
        let _in_flight = self.in_flight();
        let began = tokio::time::Instant::now();
        let (metrics, port, api, operation) = (
            self.shared.metrics.clone(),
            self.port.label(),
            crate::metrics::read_api(&request.query),
            request.query.name(),
        );
        let span = self.data_request_span("read");
        let result = async move {
            let allowed = self
                .allowed_checked(|allowed| allowed.check_query(&request.query))
                .await?;
            let response = self.read_request(request).await?;
            Ok(filter_answer(&allowed, response))
        }
        .instrument(span)
        .await;
        let labels = crate::metrics::RequestLabels {
            api,
            call: "read",
            operation,
            outcome: crate::metrics::outcome(&result),
            port,
        };
        metrics.observe_request(labels, began.elapsed());
        result
    }

    async fn cluster_status(self, _context: Context) -> Result<ClusterStatus, LodeError> {
        let _in_flight = self.in_flight();
        let span = self.request_span("cluster_status");
        let admin = self.allowed()?.is_admin();
        let mut status = self.leader_status().instrument(span).await?;
        if !admin {
            // Clients need the members' client addresses to find the
            // leader; how members reach each other is for admins.
            for member in &mut status.members {
                member.peer_address.clear();
            }
        }
        Ok(status)
    }

    /// A token this member does not know may have been issued moments ago
    /// on the leader: it is checked again once this member has caught up.
    async fn authenticate(self, _: Context, token: AccessToken) -> Result<String, LodeError> {
        let now_micros = || self.shared.clock.now_micros();
        self.decide_current(|| self.shared.auth.authenticate(&self.caller, &token, now_micros()))
            .await
    }

    async fn capabilities(self, _: Context) -> Vec<Capability> {
        vec![Capability::Kv, Capability::Cas, Capability::FencedLeases]
    }

    /// Open to every caller, like a health check: how members reach each
    /// other is shown to admins only.
    async fn node_status(self, _: Context) -> Result<ClusterStatus, LodeError> {
        let mut status = self.local_status();
        if !self.allowed().is_ok_and(|allowed| allowed.is_admin()) {
            for member in &mut status.members {
                member.peer_address.clear();
            }
        }
        Ok(status)
    }

    async fn add_member(
        self,
        _context: Context,
        id: u64,
        addresses: MemberAddresses,
        cluster: Option<ClusterId>,
    ) -> Result<ClusterStatus, LodeError> {
        let _in_flight = self.in_flight();
        let span = self.request_span("add_member");
        self.allowed_checked(|allowed| allowed.require_admin("add_member"))
            .await?;
        Box::pin(self.add_member_request(id, addresses, cluster).instrument(span)).await
    }

    async fn remove_member(self, _context: Context, id: u64, force: bool) -> Result<ClusterStatus, LodeError> {
        let _in_flight = self.in_flight();
        let span = self.request_span("remove_member");
        self.allowed_checked(|allowed| allowed.require_admin("remove_member"))
            .await?;
        Box::pin(self.remove_member_request(id, force).instrument(span)).await
    }

    async fn backup_begin(self, _: Context) -> Result<(u64, lode_types::backup::BackupHeader), LodeError> {
        let _in_flight = self.in_flight();
        let span = self.request_span("backup_begin");
        self.allowed_checked(|allowed| allowed.require_admin("backup")).await?;
        self.backup_request().instrument(span).await
    }

    async fn backup_read(self, _: Context, backup: u64, offset: u64, length: u32) -> Result<ByteBuf, LodeError> {
        let _in_flight = self.in_flight();
        self.allowed_checked(|allowed| allowed.require_admin("backup")).await?;
        let chunk = self.shared.backups.read(backup, offset, length).await?;
        Ok(ByteBuf::from(chunk))
    }

    async fn backup_end(self, _: Context, backup: u64) -> Result<(), LodeError> {
        self.allowed_checked(|allowed| allowed.require_admin("backup")).await?;
        self.shared.backups.end(backup);
        Ok(())
    }

    async fn raft(
        self,
        _: Context,
        cluster: ClusterId,
        kind: RaftMessageKind,
        payload: ByteBuf,
    ) -> Result<ByteBuf, LodeError> {
        // Boxed, as are the membership calls': every call's future is as
        // large as the largest method's, and is copied at each call.
        Box::pin(self.raft_message(cluster, kind, payload)).await
    }

    async fn campaign(self, _: Context, cluster: ClusterId) -> Result<(), LodeError> {
        if self.port != Port::Peer {
            return Err(LodeError::Invalid(
                "the campaign call is served on the peer port only".to_owned(),
            ));
        }
        self.shared.cluster.check(cluster)?;
        crate::handoff::campaign(&self.shared).await
    }

    async fn read_index(self, _: Context, cluster: ClusterId) -> Result<u64, LodeError> {
        if self.port != Port::Peer {
            return Err(LodeError::Invalid(
                "the read_index call is served on the peer port only".to_owned(),
            ));
        }
        self.shared.cluster.check(cluster)?;
        self.shared.read_index.read_index().await
    }

    async fn admit(self, _: Context, cluster: ClusterId) -> Result<(), LodeError> {
        if self.port != Port::Peer {
            return Err(LodeError::Invalid(
                "the admit call is served on the peer port only".to_owned(),
            ));
        }
        self.shared.cluster.check(cluster)?;
        self.shared.admission.admit();
        Ok(())
    }
}

/// A snapshot chunk lands in the receiving file at the offset it names: one
/// past the largest snapshot a member takes is refused before openraft
/// writes it.
fn check_snapshot_chunk(request: &openraft::raft::InstallSnapshotRequest<TypeConfig>) -> Result<(), LodeError> {
    let end = request.offset.saturating_add(request.data.len() as u64);
    if end > SNAPSHOT_BYTES_MAX {
        return Err(LodeError::Invalid(format!(
            "a snapshot chunk ending at byte {end} is past the largest snapshot of {SNAPSHOT_BYTES_MAX} bytes \
             (snapshot_bytes_max)"
        )));
    }
    Ok(())
}

/// Both addresses are bounded; the peer address must be given.
fn check_addresses(addresses: &MemberAddresses) -> Result<(), LodeError> {
    use lode_types::limits::ADDRESS_BYTES_MAX;
    if addresses.peer.trim().is_empty() || addresses.peer.len() > ADDRESS_BYTES_MAX {
        return Err(LodeError::Invalid(format!(
            "peer address must be 1 to {ADDRESS_BYTES_MAX} bytes of host:port (address_bytes_max = {ADDRESS_BYTES_MAX})"
        )));
    }
    if addresses.client.len() > ADDRESS_BYTES_MAX {
        return Err(LodeError::Invalid(format!(
            "client address must be at most {ADDRESS_BYTES_MAX} bytes (address_bytes_max = {ADDRESS_BYTES_MAX})"
        )));
    }
    Ok(())
}

/// A storage failure while reading: logged here, once, and answered as
/// `unavailable` (the member cannot trust its state).
fn storage_error(error: lode_raft_store::EngineError) -> LodeError {
    tracing::error!(%error, "reading the state failed");
    LodeError::Unavailable(format!("storage error: {error}"))
}

#[cfg(test)]
mod tests {
    use lode_client::protocol::{LodeServiceRequest, ServeLodeService};

    use super::*;

    /// Most bytes of the future that runs one call of the service. It is as
    /// large as its largest method's, is built for every call on every port
    /// and copied as it is boxed, so a rare path holding a large future
    /// (forwarding, a membership change, a Raft message) is boxed on its own.
    const CALL_FUTURE_BYTES_MAX: usize = 3 << 10;

    fn future_bytes<Future, Call>(_: &Call) -> usize
    where
        Call: Fn(ServeLodeService<NodeService>, Context, LodeServiceRequest) -> Future,
    {
        std::mem::size_of::<Future>()
    }

    #[test]
    fn a_call_future_stays_small() {
        let bytes = future_bytes(&<ServeLodeService<NodeService> as tarpc::server::Serve>::serve);
        assert!(
            bytes <= CALL_FUTURE_BYTES_MAX,
            "one call's future is {bytes} bytes (call_future_bytes_max = {CALL_FUTURE_BYTES_MAX})"
        );
    }
}
