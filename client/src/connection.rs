//! One reconnecting connection to one node.
//!
//! Timeouts are enforced here with `tokio::time::timeout` (`rpc` arms no
//! timer of its own), and a connection is dropped after any transport error
//! or timeout so the next call dials afresh.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;

use crate::error::LodeError;
use crate::protocol::{AccessToken, ServiceClient};
use crate::rpc;
use crate::tls::Transport;

/// The context the service's generated client methods take. `rpc` does not
/// send it: nothing on the wire is timed.
pub fn context() -> tarpc::context::Context {
    tarpc::context::current()
}

/// Dials `address` (with the TLS handshake when `transport` asks for it)
/// and starts a client channel on the connection.
pub async fn dial(address: &str, transport: &Transport) -> std::io::Result<ServiceClient> {
    let stream = match transport {
        Transport::Plain => crate::facade::connect(address).await?,
        Transport::Tls(tls) => tls.connect(crate::facade::connect(address).await?, address).await?,
        Transport::InProcess(server) => return Ok(ServiceClient::from(server.open())),
    };
    Ok(ServiceClient::from(rpc::Channel::spawn(stream)))
}

/// A lazily dialed connection that redials after failures.
///
/// A connection can go silent without failing: the peer vanished without
/// a reset, or a middlebox dropped the flow, and every byte sent waits for
/// an acknowledgement that never comes. A call's own timeout notices that,
/// but a caller that gives up first (its own deadline is shorter, or its
/// caller went away) drops the call before the timeout fires. So a call
/// dropped unanswered also marks its channel as suspect when no call on
/// this connection was answered while it waited; the next call dials
/// afresh. Calls still waiting on the old channel keep it until they end.
pub struct Connection {
    address: String,
    transport: Transport,
    /// Sent in `authenticate` on every channel dialed, before any call.
    token: Option<AccessToken>,
    client: Mutex<Option<Dialed>>,
    /// Answers received through this connection, any channel.
    answers: AtomicU64,
    /// The generation of a channel that a dropped call found silent, plus
    /// one (zero: none).
    suspect: AtomicU64,
    /// Channels dialed so far: the next one's generation.
    dials: AtomicU64,
}

/// One dialed channel and its generation (dial count), so that a verdict
/// about an old channel never drops a newer one.
struct Dialed {
    client: ServiceClient,
    generation: u64,
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
    /// The member refused the connection's token: the request was never
    /// sent, and no other member would take it either.
    Refused(LodeError),
    /// The member answered that a limit was reached (the detail names it)
    /// before it ran the call: the request was not applied, and the
    /// connection is sound.
    Busy(String),
}

impl CallFailure {
    /// The error to report when the request is not a mutation (or was
    /// certainly not sent).
    pub fn into_error(self, address: &str) -> LodeError {
        match self {
            CallFailure::Transport(detail) => LodeError::Unavailable(format!("{address}: {detail}")),
            CallFailure::Timeout => LodeError::Timeout(format!("{address} did not answer in time")),
            CallFailure::Dial(detail) => LodeError::Unavailable(format!("cannot connect to {address}: {detail}")),
            CallFailure::Refused(error) => error,
            CallFailure::Busy(detail) => LodeError::Unavailable(format!("{address}: {detail}")),
        }
    }
}

impl Connection {
    pub fn new(address: impl Into<String>, transport: Transport) -> Self {
        Self {
            address: address.into(),
            transport,
            token: None,
            client: Mutex::new(None),
            answers: AtomicU64::new(0),
            suspect: AtomicU64::new(0),
            dials: AtomicU64::new(0),
        }
    }

    /// Names the caller by `token` on every channel this connection dials.
    pub fn with_token(mut self, token: Option<AccessToken>) -> Self {
        self.token = token;
        self
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// Sends the token on a channel just dialed; a refusal is the caller's
    /// answer, not a reason to try another member.
    async fn authenticate(&self, client: &ServiceClient, timeout: Duration) -> Result<(), CallFailure> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        match tokio::time::timeout(timeout, client.authenticate(context(), token.clone())).await {
            Ok(Ok(Ok(_user))) => Ok(()),
            Ok(Ok(Err(error))) => Err(CallFailure::Refused(error)),
            Ok(Err(error)) => Err(CallFailure::Dial(format!("authenticating: {error}"))),
            Err(_) => Err(CallFailure::Dial("authenticating timed out".to_owned())),
        }
    }

    async fn client(&self, timeout: Duration) -> Result<(ServiceClient, u64), CallFailure> {
        let mut guard = self.client.lock().await;
        let suspect = self.suspect.load(Ordering::SeqCst);
        if let Some(dialed) = guard.as_ref() {
            let ended = crate::protocol::has_ended(&dialed.client);
            if suspect != dialed.generation + 1 && !ended {
                return Ok((dialed.client.clone(), dialed.generation));
            }
            tracing::debug!(address = %self.address, ended, "redialing a connection that ended or answered nothing while calls waited");
        }
        *guard = None;
        let generation = self.dials.fetch_add(1, Ordering::SeqCst);
        // Boxed: dialing (TCP, TLS, authentication) is a future of
        // kilobytes that every call's own would otherwise carry and copy,
        // though almost every call finds its channel dialed.
        let client = Box::pin(self.dial_and_authenticate(timeout)).await?;
        *guard = Some(Dialed {
            client: client.clone(),
            generation,
        });
        Ok((client, generation))
    }

    async fn dial_and_authenticate(&self, timeout: Duration) -> Result<ServiceClient, CallFailure> {
        let client = match tokio::time::timeout(timeout, dial(&self.address, &self.transport)).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(CallFailure::Dial(error.to_string())),
            Err(_) => return Err(CallFailure::Dial("connect timed out".to_owned())),
        };
        self.authenticate(&client, timeout).await?;
        Ok(client)
    }

    async fn reset(&self, generation: u64) {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_some_and(|dialed| dialed.generation == generation) {
            *guard = None;
        }
    }

    /// Runs one call with a time limit. A transport error or a timeout drops
    /// the connection, and so does dropping the call unanswered while the
    /// connection answered nothing else.
    pub async fn call<T, F, Fut>(&self, timeout: Duration, call: F) -> Result<Result<T, LodeError>, CallFailure>
    where
        F: FnOnce(ServiceClient, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<Result<T, LodeError>, tarpc::client::RpcError>>,
    {
        let (client, generation) = self.client(timeout).await?;
        let mut unanswered = Unanswered {
            connection: self,
            generation,
            answers_before: self.answers.load(Ordering::SeqCst),
            waiting: true,
        };
        let outcome = tokio::time::timeout(timeout, call(client, context())).await;
        unanswered.waiting = false;
        match outcome {
            Ok(Ok(answer)) => {
                self.answers.fetch_add(1, Ordering::SeqCst);
                Ok(answer)
            }
            Ok(Err(tarpc::client::RpcError::Server(refusal))) => {
                self.answers.fetch_add(1, Ordering::SeqCst);
                Err(CallFailure::Busy(refusal.detail))
            }
            Ok(Err(error)) => {
                self.reset(generation).await;
                Err(CallFailure::Transport(error.to_string()))
            }
            Err(_) => {
                self.reset(generation).await;
                Err(CallFailure::Timeout)
            }
        }
    }
}

impl Connection {
    /// [`Connection::call`] for a request that changes nothing: a failure
    /// before any answer is reported as its error (`CallFailure::into_error`).
    pub async fn request<T, F, Fut>(&self, timeout: Duration, call: F) -> Result<T, LodeError>
    where
        F: FnOnce(ServiceClient, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<Result<T, LodeError>, tarpc::client::RpcError>>,
    {
        self.call(timeout, call)
            .await
            .map_err(|failure| failure.into_error(&self.address))?
    }
}

/// Marks a call's channel as suspect when the call is dropped while it
/// still waits and no other call on the connection was answered meanwhile.
struct Unanswered<'a> {
    connection: &'a Connection,
    generation: u64,
    answers_before: u64,
    waiting: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.waiting && self.connection.answers.load(Ordering::SeqCst) == self.answers_before {
            self.connection.suspect.store(self.generation + 1, Ordering::SeqCst);
        }
    }
}
