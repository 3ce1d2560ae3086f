//! One reconnecting tarpc connection to one node.
//!
//! Timeouts are enforced here with `tokio::time::timeout`, never with tarpc
//! deadlines (those use the real clock, which simulation cannot control), and
//! a connection is dropped after any transport error or timeout so the next
//! call dials afresh.

use std::future::Future;
use std::time::Duration;

use tarpc::tokio_serde::formats::Bincode;
use tarpc::tokio_util::codec::length_delimited::LengthDelimitedCodec;
use tokio::sync::Mutex;

use crate::error::LodeError;
use crate::protocol::LodeServiceClient;

/// Largest frame on the wire, in bytes: room for a Raft append of
/// `raft_payload_entries_max` entries of `proposal_bytes_max` each (lode-node)
/// plus framing. Snapshots travel in chunks far below it.
pub const FRAME_BYTES_MAX: usize = 80 << 20;

/// The length-delimited codec every Lode connection uses, client or server.
pub fn codec() -> tarpc::tokio_util::codec::length_delimited::Builder {
    let mut builder = LengthDelimitedCodec::builder();
    builder.max_frame_length(FRAME_BYTES_MAX);
    builder
}

/// A request context whose tarpc deadline never decides anything: our own
/// timeouts do.
pub fn context() -> tarpc::context::Context {
    let mut context = tarpc::context::current();
    context.deadline = std::time::Instant::now() + Duration::from_secs(24 * 3600);
    context
}

/// Dials `address` and starts a tarpc client on the connection.
pub async fn dial(address: &str) -> std::io::Result<LodeServiceClient> {
    let stream = crate::facade::connect(address).await?;
    let transport = tarpc::serde_transport::new(codec().new_framed(stream), Bincode::default());
    Ok(LodeServiceClient::new(tarpc::client::Config::default(), transport).spawn())
}

/// A lazily dialed connection that redials after failures.
pub struct Connection {
    address: String,
    client: Mutex<Option<LodeServiceClient>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Connection({})", self.address)
    }
}

/// How a call failed before any answer came back.
#[derive(Debug)]
pub enum CallFailure {
    /// The request may have reached the node; its fate is unknown.
    Transport(String),
    /// No answer within the time limit; the request may have been applied.
    Timeout,
    /// The connection could not be made: the request was never sent.
    Dial(String),
}

impl CallFailure {
    /// The error to report when the request is not a mutation (or was
    /// certainly not sent).
    pub fn into_error(self, address: &str) -> LodeError {
        match self {
            CallFailure::Transport(detail) => LodeError::Unavailable(format!("{address}: {detail}")),
            CallFailure::Timeout => LodeError::Timeout(format!("{address} did not answer in time")),
            CallFailure::Dial(detail) => LodeError::Unavailable(format!("cannot connect to {address}: {detail}")),
        }
    }
}

impl Connection {
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            client: Mutex::new(None),
        }
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    async fn client(&self, timeout: Duration) -> Result<LodeServiceClient, CallFailure> {
        let mut guard = self.client.lock().await;
        if let Some(client) = guard.as_ref() {
            return Ok(client.clone());
        }
        let client = match tokio::time::timeout(timeout, dial(&self.address)).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(CallFailure::Dial(error.to_string())),
            Err(_) => return Err(CallFailure::Dial("connect timed out".to_owned())),
        };
        *guard = Some(client.clone());
        Ok(client)
    }

    async fn reset(&self) {
        *self.client.lock().await = None;
    }

    /// Runs one call with a time limit. A transport error or a timeout drops
    /// the connection.
    pub async fn call<T, F, Fut>(&self, timeout: Duration, call: F) -> Result<Result<T, LodeError>, CallFailure>
    where
        F: FnOnce(LodeServiceClient, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<Result<T, LodeError>, tarpc::client::RpcError>>,
    {
        let client = self.client(timeout).await?;
        match tokio::time::timeout(timeout, call(client, context())).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => {
                self.reset().await;
                Err(CallFailure::Transport(error.to_string()))
            }
            Err(_) => {
                self.reset().await;
                Err(CallFailure::Timeout)
            }
        }
    }
}
