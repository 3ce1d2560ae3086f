//! The two-phase coordination API: prepare a lease or fenced-write request
//! once, then send the prepared object as often as needed. Repeating it
//! sends the same op id and the same request, so the cluster applies it at
//! most once, and an ambiguous outcome comes with the recovery action.
//!
//! A [`FencedLeaseClient`] sends through a [`CoordinationTransport`]: the
//! dedicated one over its own cluster connection, or one the application
//! supplies.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{LodeError, MutationRecovery};
use crate::kv::Lease;
use crate::protocol::{
    Consistency, Encoding, Entry, Fence, Operation, OperationResult, Precondition, Query, QueryResult, ReadRequest,
    ReadResponse, WriteRequest, WriteResponse,
};
use crate::sdk::{new_op_id, Client, ClientOptions};

/// The version of the request structs below.
pub const KV_LEASE_OP_VERSION: u32 = 1;
/// How long one attempt may take unless `with_attempt_timeout` says otherwise.
pub const ATTEMPT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// A boxed future, for the transport trait's object safety.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a coordination client sends through: writes, reads, a way to drop
/// the connection, and optionally readiness and closing.
pub trait CoordinationTransport: Send + Sync {
    fn send_write(&self, request: WriteRequest, timeout: Duration) -> BoxFuture<'_, Result<WriteResponse, LodeError>>;
    fn send_read(&self, request: ReadRequest, timeout: Duration) -> BoxFuture<'_, Result<ReadResponse, LodeError>>;
    /// Retires the connection; in-flight work stops before this returns.
    fn reset(&self) -> BoxFuture<'_, ()>;
    /// Fails, before anything is sent, when the transport cannot be used.
    fn ready(&self) -> BoxFuture<'_, Result<(), LodeError>> {
        Box::pin(async { Ok(()) })
    }
    /// Releases the transport for good.
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// A transport over its own cluster connection, opened on first use.
pub struct DedicatedTransport {
    endpoints: Vec<String>,
    client: Mutex<Option<Client>>,
}

impl DedicatedTransport {
    /// `connection_string` is `host:port,host:port`, optionally after
    /// `lode://`.
    pub fn new(connection_string: &str) -> Result<Self, LodeError> {
        let list = connection_string.strip_prefix("lode://").unwrap_or(connection_string);
        let endpoints: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|endpoint| !endpoint.is_empty())
            .map(str::to_owned)
            .collect();
        if endpoints.is_empty() {
            return Err(LodeError::Invalid(format!(
                "connection string {connection_string:?} names no host:port"
            )));
        }
        Ok(Self {
            endpoints,
            client: Mutex::new(None),
        })
    }

    fn client(&self, timeout: Duration) -> Result<Client, LodeError> {
        let mut guard = self.client.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(client) = guard.as_ref() {
            return Ok(client.clone());
        }
        // One attempt's worth of time per call: an uncertain outcome is
        // reported, not retried away.
        let options = ClientOptions {
            attempt_timeout: timeout,
            call_timeout: timeout,
            ..ClientOptions::default()
        };
        let client = Client::with_options(self.endpoints.clone(), options)?;
        *guard = Some(client.clone());
        Ok(client)
    }
}

impl CoordinationTransport for DedicatedTransport {
    fn send_write(&self, request: WriteRequest, timeout: Duration) -> BoxFuture<'_, Result<WriteResponse, LodeError>> {
        Box::pin(async move { self.client(timeout)?.write(request).await })
    }

    fn send_read(&self, request: ReadRequest, timeout: Duration) -> BoxFuture<'_, Result<ReadResponse, LodeError>> {
        Box::pin(async move { self.client(timeout)?.read(request).await })
    }

    fn reset(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            *self.client.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        })
    }
}

/// Acquire a lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLease {
    pub v: u32,
    pub namespace: String,
    pub key: Vec<u8>,
    pub lease_ttl_micros: u64,
    pub holder_id: String,
    pub subject_user_id: Option<String>,
}

/// Renew a held lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLeaseRenew {
    pub v: u32,
    pub namespace: String,
    pub key: Vec<u8>,
    pub holder_id: String,
    pub subject_user_id: Option<String>,
    pub lease_token: u64,
    pub lease_ttl_micros: u64,
}

/// Release a held lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvRelease {
    pub v: u32,
    pub namespace: String,
    pub key: Vec<u8>,
    pub holder_id: String,
    pub subject_user_id: Option<String>,
    pub lease_token: u64,
}

/// A fenced compare-and-swap write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvCasFenced {
    pub v: u32,
    pub namespace: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub encoding: Encoding,
    pub precondition: Precondition,
    pub fence_namespace: String,
    pub fence_key: Vec<u8>,
    pub lease_token: u64,
}

/// A barriered read: the entry once the serving node has applied `position`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvGet {
    pub namespace: String,
    pub key: Vec<u8>,
    pub position: u64,
}

/// Which call a prepared mutation belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreparedKind {
    Acquire,
    Renew,
    Release,
    CasFenced,
}

/// A request validated once, with its op id fixed, bound to one client and
/// one operation.
#[derive(Clone, Debug)]
pub struct PreparedMutation {
    client_id: u128,
    kind: PreparedKind,
    request: WriteRequest,
    lease_ttl_micros: u64,
}

impl PreparedMutation {
    pub fn kind(&self) -> PreparedKind {
        self.kind
    }

    pub fn op_id(&self) -> u128 {
        self.request.op_id
    }

    /// The exact request every send of this mutation carries.
    pub fn request(&self) -> &WriteRequest {
        &self.request
    }

    /// What to do when sending it ended in `ambiguous_mutation`.
    pub fn ambiguous_recovery(&self) -> MutationRecovery {
        match self.kind {
            PreparedKind::Acquire => MutationRecovery::WaitOutLeaseTtl {
                ttl_micros: self.lease_ttl_micros,
            },
            _ => MutationRecovery::RepeatPrepared,
        }
    }
}

/// The two-phase coordination client.
pub struct FencedLeaseClient {
    id: u128,
    transport: Arc<dyn CoordinationTransport>,
    attempt_timeout: Duration,
    closed: AtomicBool,
}

impl std::fmt::Debug for FencedLeaseClient {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("FencedLeaseClient")
    }
}

fn check_version(v: u32) -> Result<(), LodeError> {
    if v != KV_LEASE_OP_VERSION {
        return Err(LodeError::Invalid(format!(
            "v is {v}; this client speaks KV_LEASE_OP_VERSION = {KV_LEASE_OP_VERSION}"
        )));
    }
    Ok(())
}

impl FencedLeaseClient {
    /// A client over its own connection to the cluster named by
    /// `connection_string` (`host:port,...`), opened on first use.
    pub fn connect_dedicated(connection_string: &str) -> Result<Self, LodeError> {
        Ok(Self::new(Arc::new(DedicatedTransport::new(connection_string)?)))
    }

    /// A client over an application's own transport.
    pub fn new(transport: Arc<dyn CoordinationTransport>) -> Self {
        Self {
            id: new_op_id(),
            transport,
            attempt_timeout: ATTEMPT_TIMEOUT_DEFAULT,
            closed: AtomicBool::new(false),
        }
    }

    /// How long one attempt may take; zero is refused before sending.
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    fn prepare(
        &self,
        kind: PreparedKind,
        operation: Operation,
        lease_ttl_micros: u64,
    ) -> Result<PreparedMutation, LodeError> {
        let operations = vec![operation];
        lode_types::validate_client_write(&operations).map_err(LodeError::Invalid)?;
        Ok(PreparedMutation {
            client_id: self.id,
            kind,
            request: WriteRequest {
                op_id: new_op_id(),
                operations,
            },
            lease_ttl_micros,
        })
    }

    pub fn prepare_acquire(&self, request: &KvLease) -> Result<PreparedMutation, LodeError> {
        check_version(request.v)?;
        let operation = Operation::AcquireLease {
            namespace: request.namespace.clone(),
            key: request.key.clone(),
            holder: request.holder_id.clone(),
            ttl_micros: request.lease_ttl_micros,
        };
        self.prepare(PreparedKind::Acquire, operation, request.lease_ttl_micros)
    }

    pub fn prepare_renew(&self, request: &KvLeaseRenew) -> Result<PreparedMutation, LodeError> {
        check_version(request.v)?;
        let operation = Operation::RenewLease {
            namespace: request.namespace.clone(),
            key: request.key.clone(),
            holder: request.holder_id.clone(),
            token: request.lease_token,
            ttl_micros: request.lease_ttl_micros,
        };
        self.prepare(PreparedKind::Renew, operation, request.lease_ttl_micros)
    }

    pub fn prepare_release(&self, request: &KvRelease) -> Result<PreparedMutation, LodeError> {
        check_version(request.v)?;
        let operation = Operation::ReleaseLease {
            namespace: request.namespace.clone(),
            key: request.key.clone(),
            holder: request.holder_id.clone(),
            token: request.lease_token,
        };
        self.prepare(PreparedKind::Release, operation, 0)
    }

    pub fn prepare_cas_fenced(&self, request: &KvCasFenced) -> Result<PreparedMutation, LodeError> {
        check_version(request.v)?;
        let operation = Operation::Set {
            namespace: request.namespace.clone(),
            key: request.key.clone(),
            value: request.value.clone(),
            encoding: request.encoding.clone(),
            expires_at_micros: None,
            precondition: Some(request.precondition),
            fence: Some(Fence {
                namespace: request.fence_namespace.clone(),
                key: request.fence_key.clone(),
                token: request.lease_token,
            }),
            session: None,
        };
        self.prepare(PreparedKind::CasFenced, operation, 0)
    }

    /// Checks everything that can fail before sending: closed, timeout,
    /// readiness, and that the prepared object is this client's and for
    /// this call.
    async fn definite_checks(&self, prepared: Option<(&PreparedMutation, PreparedKind)>) -> Result<(), LodeError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(LodeError::Invalid("the client is closed".to_owned()));
        }
        if self.attempt_timeout.is_zero() {
            return Err(LodeError::Invalid("attempt_timeout must be above zero".to_owned()));
        }
        if let Some((prepared, kind)) = prepared {
            if prepared.client_id != self.id {
                return Err(LodeError::Invalid(
                    "the prepared mutation belongs to another client".to_owned(),
                ));
            }
            if prepared.kind != kind {
                return Err(LodeError::Invalid(format!(
                    "the prepared mutation is for {:?}, not {kind:?}",
                    prepared.kind
                )));
            }
        }
        self.transport.ready().await
    }

    async fn send(&self, prepared: &PreparedMutation, kind: PreparedKind) -> Result<WriteResponse, LodeError> {
        self.definite_checks(Some((prepared, kind))).await?;
        let sent = self
            .transport
            .send_write(prepared.request.clone(), self.attempt_timeout)
            .await;
        match sent {
            Err(LodeError::AmbiguousMutation { detail, .. }) | Err(LodeError::Timeout(detail)) => {
                self.transport.reset().await;
                Err(LodeError::AmbiguousMutation {
                    recovery: prepared.ambiguous_recovery(),
                    detail,
                })
            }
            other => other,
        }
    }

    /// Sends a prepared acquisition. On an ambiguous outcome the caller
    /// waits out the TTL before acquiring again (the recovery says so).
    pub async fn acquire(&self, prepared: &PreparedMutation) -> Result<Lease, LodeError> {
        Lease::from_response(&self.send(prepared, PreparedKind::Acquire).await?)
    }

    /// Sends a prepared renewal; repeat it after an ambiguous outcome.
    pub async fn renew(&self, prepared: &PreparedMutation) -> Result<Lease, LodeError> {
        Lease::from_response(&self.send(prepared, PreparedKind::Renew).await?)
    }

    /// Sends a prepared release; true when a held lease was released.
    pub async fn release(&self, prepared: &PreparedMutation) -> Result<bool, LodeError> {
        match self.send(prepared, PreparedKind::Release).await?.results.first() {
            Some(OperationResult::ReleaseLease { released }) => Ok(*released),
            other => Err(crate::error::unexpected("release", &other)),
        }
    }

    /// Sends a prepared fenced write and returns the new version.
    pub async fn cas_fenced(&self, prepared: &PreparedMutation) -> Result<u64, LodeError> {
        match self.send(prepared, PreparedKind::CasFenced).await?.results.first() {
            Some(OperationResult::Set { version }) => Ok(*version),
            other => Err(crate::error::unexpected("cas_fenced", &other)),
        }
    }

    /// The barriered read: the entry once the serving node has applied the
    /// position. A timeout is a plain `timeout`; reads change nothing.
    pub async fn get(&self, request: &KvGet) -> Result<Option<Entry>, LodeError> {
        self.definite_checks(None).await?;
        let read = ReadRequest {
            query: Query::Get {
                namespace: request.namespace.clone(),
                key: request.key.clone(),
            },
            consistency: Consistency::AtLeast(request.position),
        };
        read.query.validate().map_err(LodeError::Invalid)?;
        match self.transport.send_read(read, self.attempt_timeout).await {
            Ok(ReadResponse {
                result: QueryResult::Entry(entry),
                ..
            }) => Ok(entry),
            Ok(other) => Err(crate::error::unexpected("get", &other)),
            Err(LodeError::AmbiguousMutation { detail, .. }) | Err(LodeError::Timeout(detail)) => {
                self.transport.reset().await;
                Err(LodeError::Timeout(detail))
            }
            Err(error) => Err(error),
        }
    }

    /// Closes the client for good; later calls fail before sending.
    pub async fn close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            self.transport.close().await;
        }
    }
}
