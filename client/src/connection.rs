//! One reconnecting connection to one node.
//!
//! Timeouts are enforced here with `tokio::time::timeout` (`rpc` arms no
//! timer of its own), and a connection is dropped after any transport error
//! or timeout so the next call dials afresh.

use std::future::Future;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_util::codec::length_delimited::LengthDelimitedCodec;

use crate::error::LodeError;
use crate::protocol::ServiceClient;
use crate::rpc;

/// Largest frame on the wire, in bytes: room for a Raft append of
/// `raft_payload_entries_max` entries of `proposal_bytes_max` each (lode-node)
/// plus framing. Snapshots travel in chunks far below it.
pub const FRAME_BYTES_MAX: usize = 80 << 20;

/// The length-delimited codec every Lode connection uses, client or server.
pub fn codec() -> tokio_util::codec::length_delimited::Builder {
    let mut builder = LengthDelimitedCodec::builder();
    builder.max_frame_length(FRAME_BYTES_MAX);
    builder
}

/// The context the service's generated client methods take. `rpc` does not
/// send it: nothing on the wire is timed.
pub fn context() -> tarpc::context::Context {
    tarpc::context::current()
}

/// Dials `address` and starts a client channel on the connection.
pub async fn dial(address: &str) -> std::io::Result<ServiceClient> {
    let stream = crate::facade::connect(address).await?;
    Ok(ServiceClient::from(rpc::Channel::spawn(stream)))
}

/// A lazily dialed connection that redials after failures.
pub struct Connection {
    address: String,
    client: Mutex<Option<ServiceClient>>,
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

    async fn client(&self, timeout: Duration) -> Result<ServiceClient, CallFailure> {
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
        F: FnOnce(ServiceClient, tarpc::context::Context) -> Fut,
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
