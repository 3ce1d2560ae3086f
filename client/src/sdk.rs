//! The SDK's cluster client: finds the leader among the endpoints, follows
//! leader hints, and retries retryable failures with bounded backoff.
//!
//! Every mutation carries an op id chosen once, before the first attempt, so
//! a retry after a lost reply is applied at most once by the cluster.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::connection::{CallFailure, Connection};
use crate::error::{LodeError, MutationRecovery};
use crate::in_process::InProcess;
use crate::protocol::{
    AccessToken, Capability, ClusterStatus, Consistency, MemberAddresses, Query, QueryResult, ReadRequest,
    ReadResponse, ServiceClient, SessionLink, WriteRequest, WriteResponse,
};
use crate::tls::{ClientTls, Transport};

/// Keys per page when `session_keys` walks a session's writes.
pub const SESSION_KEYS_PAGE: u32 = 1000;

/// How long `cluster_status` waits for each member's own report.
pub const STATUS_MEMBER_TIMEOUT: Duration = Duration::from_secs(1);

/// How a client behaves: time limits (every one bounded) and naming.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// One attempt against one node.
    pub attempt_timeout: Duration,
    /// All attempts of one call together.
    pub call_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// When set, `kv("config")` addresses `stream:<stream>/config`, and
    /// `kv_namespaces()` lists only this stream's names, without the prefix.
    /// `kv_unscoped` opts out for one handle.
    pub default_stream: Option<String>,
    /// TLS towards the cluster's client ports; `None`: in the clear.
    pub tls: Option<ClientTls>,
    /// The caller's token, sent once per connection; `None` for a cluster
    /// without authentication.
    pub token: Option<AccessToken>,
    /// A node in this process: calls to its address run in the caller's
    /// task instead of crossing a socket (and no TLS, as no byte leaves
    /// the process). Other addresses, a leader hint's, are dialed as usual.
    pub in_process: Option<InProcess>,
}

impl ClientOptions {
    fn transport(&self, address: &str) -> Transport {
        match (&self.in_process, &self.tls) {
            (Some(server), _) if server.address() == address => Transport::InProcess(server.clone()),
            (_, Some(tls)) => Transport::Tls(tls.clone()),
            (_, None) => Transport::Plain,
        }
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            attempt_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(30),
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_millis(500),
            default_stream: None,
            tls: None,
            token: None,
            in_process: None,
        }
    }
}

struct Inner {
    /// Lease acquisitions run one at a time per client; the gate stays
    /// closed through the wait after an ambiguous acquisition.
    lease_gate: Arc<tokio::sync::Mutex<()>>,
    /// What the cluster offers, asked once on first need.
    capabilities: tokio::sync::OnceCell<Vec<Capability>>,
    connections: RwLock<Vec<Arc<Connection>>>,
    /// Index of the connection believed to reach the leader.
    preferred: AtomicUsize,
    options: ClientOptions,
}

/// A handle on a cluster. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Client")
    }
}

impl Client {
    /// How long a server-side wait (a change read, a trigger read, a wait
    /// for a due queue message) may last: `preferred_ms`, but at most three
    /// quarters of one attempt, so that an idle wait answers "nothing yet"
    /// instead of timing the attempt out.
    pub(crate) fn server_wait_ms(&self, preferred_ms: u64) -> u64 {
        let options = &self.inner.options;
        let attempt_ms =
            u64::try_from(options.attempt_timeout.min(options.call_timeout).as_millis()).unwrap_or(u64::MAX);
        preferred_ms.min(attempt_ms / 4 * 3)
    }
}

impl Client {
    /// A connection per endpoint, in the order given.
    pub(crate) fn member_connections(&self) -> Vec<Arc<Connection>> {
        self.inner
            .connections
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The time limit of one attempt against one node.
    pub(crate) fn attempt_timeout(&self) -> Duration {
        self.inner.options.attempt_timeout.min(self.inner.options.call_timeout)
    }
}

/// Random bits at the bottom of an op id; the wall clock's milliseconds
/// fill the 48 above them.
const OP_ID_RANDOM_BITS: u32 = 80;
const _: () = assert!(OP_ID_RANDOM_BITS + 48 == u128::BITS);

/// A fresh op id for a mutation: the wall clock's milliseconds, then 80
/// random bits. Ids made about the same time sort together, so each
/// member's dedup records, keyed by op id, are written near the end of
/// their family rather than anywhere in it: a memtable insert follows a
/// path it just took, and a flushed file overlaps few older ones. Nothing
/// relies on the order; ids only need to be unique, which 80 random bits
/// a millisecond keep them.
pub fn new_op_id() -> u128 {
    let millis = u128::from(crate::facade::now_micros() / 1_000);
    let random_mask = (1u128 << OP_ID_RANDOM_BITS) - 1;
    (millis << OP_ID_RANDOM_BITS) | (crate::facade::random_u128() & random_mask)
}

/// A duration in whole microseconds, saturating.
pub(crate) fn duration_micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl Client {
    /// A client for the cluster reachable at `endpoints` (`host:port` each).
    /// Connections are made on first use.
    pub fn connect<I, S>(endpoints: I) -> Result<Self, LodeError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_options(endpoints, ClientOptions::default())
    }

    pub fn with_options<I, S>(endpoints: I, options: ClientOptions) -> Result<Self, LodeError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let connections: Vec<Arc<Connection>> = endpoints
            .into_iter()
            .map(Into::into)
            .filter(|endpoint: &String| !endpoint.trim().is_empty())
            .map(|endpoint| {
                Arc::new(
                    Connection::new(endpoint.trim(), options.transport(endpoint.trim()))
                        .with_token(options.token.clone()),
                )
            })
            .collect();
        if connections.is_empty() {
            return Err(LodeError::Invalid(
                "endpoints must name at least one host:port".to_owned(),
            ));
        }
        if options.attempt_timeout.is_zero() || options.call_timeout.is_zero() {
            return Err(LodeError::Invalid(
                "attempt_timeout and call_timeout must be above zero".to_owned(),
            ));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                lease_gate: Arc::new(tokio::sync::Mutex::new(())),
                capabilities: tokio::sync::OnceCell::new(),
                connections: RwLock::new(connections),
                preferred: AtomicUsize::new(0),
                options,
            }),
        })
    }

    pub(crate) fn stream_prefix(&self) -> Option<String> {
        self.inner
            .options
            .default_stream
            .as_ref()
            .map(|stream| format!("stream:{stream}/"))
    }

    /// The name sent to the cluster for the namespace `namespace`.
    pub fn resource_namespace(&self, namespace: &str) -> String {
        match self.stream_prefix() {
            Some(prefix) => format!("{prefix}{namespace}"),
            None => namespace.to_owned(),
        }
    }

    /// The namespaces that hold live entries (this stream's, without the
    /// prefix, when the client has a default stream).
    pub async fn kv_namespaces(&self) -> Result<Vec<String>, LodeError> {
        self.require(Capability::Kv).await?;
        let prefix = self.stream_prefix().unwrap_or_default();
        let request = ReadRequest {
            query: Query::Namespaces { prefix: prefix.clone() },
            consistency: Consistency::Linearizable,
        };
        match self.read(request).await?.result {
            QueryResult::Namespaces(names) => Ok(names
                .into_iter()
                .filter_map(|name| name.strip_prefix(prefix.as_str()).map(str::to_owned))
                .collect()),
            other => Err(crate::error::unexpected("kv_namespaces", &other)),
        }
    }

    /// The (namespace, key) pairs written under `session`, in order, walking
    /// every page.
    pub async fn session_keys(&self, session: &SessionLink) -> Result<Vec<(String, Vec<u8>)>, LodeError> {
        self.require(Capability::Kv).await?;
        let mut written = Vec::new();
        let mut after = None;
        loop {
            let request = ReadRequest {
                query: Query::SessionKeys {
                    session: session.clone(),
                    after: after.take(),
                    limit: SESSION_KEYS_PAGE,
                },
                consistency: Consistency::Linearizable,
            };
            match self.read(request).await?.result {
                QueryResult::SessionKeys { keys, resume_after } => {
                    written.extend(keys.into_iter().map(|(namespace, key)| (namespace, key.into_vec())));
                    match resume_after {
                        Some(key) => after = Some(key),
                        None => return Ok(written),
                    }
                }
                other => return Err(crate::error::unexpected("session_keys", &other)),
            }
        }
    }

    /// What the cluster offers; asked once, then remembered.
    pub async fn capabilities(&self) -> Result<Vec<Capability>, LodeError> {
        Ok(self.offered().await?.clone())
    }

    /// The cluster's capabilities, asked once per client.
    async fn offered(&self) -> Result<&Vec<Capability>, LodeError> {
        self.inner
            .capabilities
            // Boxed: asked once per client, yet every call that requires a
            // capability would otherwise carry this call's future.
            .get_or_try_init(|| {
                Box::pin(self.send(None, |client, context| async move {
                    client.capabilities(context).await.map(Ok)
                }))
            })
            .await
    }

    /// `unsupported`, before anything else is sent, when the cluster lacks
    /// `capability`. Once the capabilities are known it costs no copy of
    /// them: every call of the SDK asks it.
    pub async fn require(&self, capability: Capability) -> Result<(), LodeError> {
        if self.offered().await?.contains(&capability) {
            Ok(())
        } else {
            Err(LodeError::Unsupported(format!(
                "the cluster does not offer {capability:?}"
            )))
        }
    }

    fn connections_read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Connection>>> {
        self.inner
            .connections
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The preferred connection and its place, without copying the list:
    /// every attempt of every call picks one.
    fn preferred_connection(&self) -> (usize, Arc<Connection>) {
        let connections = self.connections_read();
        let index = self.inner.preferred.load(Ordering::Relaxed) % connections.len();
        (index, connections[index].clone())
    }

    /// Points the client at `address`, adding it when it is not an endpoint yet.
    fn prefer_address(&self, address: &str) {
        let mut connections = self
            .inner
            .connections
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let index = match connections
            .iter()
            .position(|connection| connection.address() == address)
        {
            Some(index) => index,
            None => {
                connections.push(Arc::new(
                    Connection::new(address, self.inner.options.transport(address))
                        .with_token(self.inner.options.token.clone()),
                ));
                connections.len() - 1
            }
        };
        self.inner.preferred.store(index, Ordering::Relaxed);
    }

    fn rotate(&self, from: usize) {
        let count = self.connections_read().len().max(1);
        let _ = self
            .inner
            .preferred
            .compare_exchange(from, (from + 1) % count, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Sends one request with retries. `op_id` is set for mutations: after
    /// a transport failure or timeout their outcome is unknown, and the call
    /// ends with `ambiguous_mutation` if no later attempt settles it.
    pub(crate) async fn send<T, F, Fut>(&self, op_id: Option<u128>, call: F) -> Result<T, LodeError>
    where
        F: Fn(ServiceClient, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<Result<T, LodeError>, tarpc::client::RpcError>>,
    {
        let options = &self.inner.options;
        let deadline = tokio::time::Instant::now() + options.call_timeout;
        let mut backoff = options.backoff_initial;
        let mut uncertain: Option<String> = None;
        let mut last_error: LodeError;
        loop {
            let (index, connection) = self.preferred_connection();
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let attempt_timeout = options.attempt_timeout.min(remaining).max(Duration::from_millis(1));
            let mut follow_hint_now = false;
            // Boxed: an attempt is a future of kilobytes (the channel's
            // call inside a timeout), and each async caller above would
            // carry it and copy it again as it starts the one below.
            match Box::pin(connection.call(attempt_timeout, &call)).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(LodeError::NotLeader { hint: Some(hint) })) => {
                    tracing::debug!(from = connection.address(), leader = %hint.address, "following leader hint");
                    follow_hint_now = connection.address() != hint.address;
                    self.prefer_address(&hint.address);
                    last_error = LodeError::NotLeader { hint: Some(hint) };
                }
                Ok(Err(error)) if matches!(error, LodeError::NotLeader { .. } | LodeError::Unavailable(_)) => {
                    self.rotate(index);
                    last_error = error;
                }
                // The serving member lost its leadership with the mutation in
                // flight: sending it again (same op id) settles it.
                Ok(Err(LodeError::AmbiguousMutation { detail, .. })) if op_id.is_some() => {
                    uncertain = Some(format!("{detail} at {}", connection.address()));
                    self.rotate(index);
                    last_error = LodeError::Unavailable(detail);
                }
                Ok(Err(error)) | Err(CallFailure::Refused(error)) => return Err(error),
                Err(failure) => {
                    if !matches!(failure, CallFailure::Dial(_) | CallFailure::Busy(_)) {
                        uncertain = Some(format!("{failure:?} at {}", connection.address()));
                    }
                    self.rotate(index);
                    last_error = failure.into_error(connection.address());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(match (op_id, uncertain) {
                    (Some(op_id), Some(detail)) => LodeError::AmbiguousMutation {
                        recovery: MutationRecovery::RetrySameOperation { op_id },
                        detail,
                    },
                    _ => last_error,
                });
            }
            if !follow_hint_now {
                let pause = backoff.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                tokio::time::sleep(pause).await;
                backoff = (backoff * 2).min(options.backoff_max);
            }
        }
    }

    /// Sends a lease acquisition behind the client's lease gate. When its
    /// outcome stays unknown, waits out `ttl` before answering
    /// `ambiguous_mutation`, in a task of its own so that the gate stays
    /// closed through the wait even if the caller stops waiting.
    pub(crate) async fn acquire_gated(&self, request: WriteRequest, ttl: Duration) -> Result<WriteResponse, LodeError> {
        let gate = self.inner.lease_gate.clone();
        let client = self.clone();
        let (answer, answered) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _closed = gate.lock_owned().await;
            let result = match client.write(request).await {
                Err(LodeError::AmbiguousMutation { detail, .. }) => {
                    tokio::time::sleep(ttl).await;
                    Err(LodeError::AmbiguousMutation {
                        recovery: MutationRecovery::WaitOutLeaseTtl {
                            ttl_micros: duration_micros(ttl),
                        },
                        detail,
                    })
                }
                other => other,
            };
            // A caller that stopped waiting has dropped its receiver.
            let _ = answer.send(result);
        });
        answered
            .await
            .map_err(|_| LodeError::Unavailable("the lease acquisition task stopped".to_owned()))?
    }

    /// Applies an atomic batch. `request.op_id` makes it safe to retry.
    pub async fn write(&self, request: WriteRequest) -> Result<WriteResponse, LodeError> {
        lode_types::validate_client_write(&request.operations).map_err(LodeError::Invalid)?;
        let op_id = request.op_id;
        self.send(Some(op_id), |client, context| {
            let request = request.clone();
            async move { client.write(context, request).await }
        })
        .await
    }

    /// Sends one operation as its own atomic write with a fresh op id, and
    /// answers its one result.
    pub(crate) async fn write_one(
        &self,
        operation: crate::protocol::Operation,
    ) -> Result<crate::protocol::OperationResult, LodeError> {
        let request = WriteRequest {
            op_id: new_op_id(),
            operations: vec![operation],
        };
        let mut results = self.write(request).await?.results.into_iter();
        match (results.next(), results.next()) {
            (Some(result), None) => Ok(result),
            _ => Err(LodeError::Unavailable(
                "the server answered one operation with another number of results".to_owned(),
            )),
        }
    }

    pub async fn read(&self, request: ReadRequest) -> Result<ReadResponse, LodeError> {
        request.query.validate().map_err(LodeError::Invalid)?;
        self.send(None, |client, context| {
            let request = request.clone();
            async move { client.read(context, request).await }
        })
        .await
    }

    /// The cluster's status as the leader (or, failing that, any node) sees
    /// it, with each member's applied index as that member reports it
    /// (asked concurrently, `STATUS_MEMBER_TIMEOUT` each; `None` for a
    /// member that did not answer).
    pub async fn cluster_status(&self) -> Result<ClusterStatus, LodeError> {
        let mut status = self.leader_status().await?;
        let options = &self.inner.options;
        let asks = status.members.iter().map(|member| {
            let connection = Connection::new(member.address.clone(), options.transport(&member.address))
                .with_token(options.token.clone());
            async move {
                let answer = connection
                    .call(STATUS_MEMBER_TIMEOUT, |client, context| async move {
                        client.node_status(context).await
                    })
                    .await;
                match answer {
                    Ok(Ok(own)) => Some(own.applied_index),
                    _ => None,
                }
            }
        });
        let applied = futures::future::join_all(asks).await;
        for (member, applied) in status.members.iter_mut().zip(applied) {
            member.applied_index = applied.or(member.applied_index);
        }
        Ok(status)
    }

    /// The cluster's status as the leader sees it (the answering node's
    /// own when no leader answers), without asking each member.
    pub async fn leader_status(&self) -> Result<ClusterStatus, LodeError> {
        self.send(
            None,
            |client, context| async move { client.cluster_status(context).await },
        )
        .await
    }

    /// The status as the first reachable endpoint itself sees it; with a
    /// one-endpoint client, that node's own view.
    pub async fn node_status(&self) -> Result<ClusterStatus, LodeError> {
        self.send(None, |client, context| async move { client.node_status(context).await })
            .await
    }

    /// Adds a member reached by its peers at `peer_address`, as a learner
    /// until it has caught up, then as a voter. The member publishes its
    /// client address itself once it runs.
    pub async fn add_member(&self, id: u64, peer_address: impl Into<String>) -> Result<ClusterStatus, LodeError> {
        let addresses = MemberAddresses {
            peer: peer_address.into(),
            client: String::new(),
        };
        self.send(None, |client, context| {
            let addresses = addresses.clone();
            async move { client.add_member(context, id, addresses, None).await }
        })
        .await
    }

    /// Removes a member; a voter only while the voters left that answer
    /// the leader are a quorum of the voters left.
    pub async fn remove_member(&self, id: u64) -> Result<ClusterStatus, LodeError> {
        self.send(None, |client, context| async move {
            client.remove_member(context, id, false).await
        })
        .await
    }

    /// Removes a member even when the voters left could not reach a
    /// quorum: the cluster may then stop until they answer again.
    pub async fn remove_member_forced(&self, id: u64) -> Result<ClusterStatus, LodeError> {
        self.send(None, |client, context| async move {
            client.remove_member(context, id, true).await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_ids_begin_with_the_millisecond_they_were_made_and_never_repeat() {
        let before = crate::facade::now_micros() / 1_000;
        let ids: Vec<u128> = (0..10_000).map(|_| new_op_id()).collect();
        let after = crate::facade::now_micros() / 1_000;
        for id in &ids {
            let millis = id >> OP_ID_RANDOM_BITS;
            assert!((u128::from(before)..=u128::from(after)).contains(&millis), "{id:032x}");
        }
        let distinct: std::collections::HashSet<u128> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), ids.len());
        // Ids of different milliseconds sort by them.
        let later = loop {
            let id = new_op_id();
            if id >> OP_ID_RANDOM_BITS > u128::from(after) {
                break id;
            }
            std::thread::yield_now();
        };
        assert!(ids.iter().all(|id| *id < later));
    }

    #[test]
    fn only_the_in_process_address_skips_the_socket() {
        let options = ClientOptions {
            in_process: Some(InProcess::new(
                "127.0.0.1:7001",
                Arc::new(|| unreachable!("no channel is opened in this test")),
            )),
            ..ClientOptions::default()
        };
        assert!(matches!(options.transport("127.0.0.1:7001"), Transport::InProcess(_)));
        // A leader hint's address is dialed as usual, in the clear here.
        assert!(matches!(options.transport("127.0.0.1:7002"), Transport::Plain));
    }

    /// Every KV call first checks a capability, almost always answered
    /// from memory: its future must not carry the rare call that asks the
    /// cluster (kilobytes, built and copied by every call otherwise).
    #[tokio::test]
    async fn a_capability_check_carries_no_call() {
        let client = Client::connect(["127.0.0.1:1"]).expect("a client");
        let bytes = std::mem::size_of_val(&client.require(Capability::Kv));
        assert!(bytes <= 512, "the capability check's future is {bytes} bytes");
    }
}
