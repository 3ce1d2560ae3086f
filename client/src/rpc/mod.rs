//! Calls and answers over one byte stream, for the service declared in
//! `protocol.rs`.
//!
//! tarpc's macro declares the service (the request and response enums, the
//! client whose methods build them, and the server's `Serve`); this module
//! carries those enums instead of tarpc's own channels. tarpc's channels
//! arm a timer per request from the real clock (the request's deadline),
//! and under simulation the wake-ups of those timers depended on how fast
//! the host machine ran: one replay of a seed in a few hundred diverged.
//! Here nothing is timed: callers bound their calls with `tokio::time`, and
//! a call whose future is dropped cancels its request on the server.
//!
//! A connection carries length-prefixed frames (`frame.rs`), each one
//! bincode value: [`ClientFrame`] one way, [`ServerFrame`] the other. A
//! frame over the limit or that does not decode ends the connection,
//! never the process.

mod channel;
mod frame;
mod in_process;
mod server;

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use channel::Channel;
pub use frame::FrameCodec;
pub use server::{serve_connection, Handler};

/// Largest frame between members (the peer port) and of any answer, in
/// bytes: room for a Raft append of `raft_payload_entries_max` entries of
/// `proposal_bytes_max` each (lode-node) plus framing.
pub const PEER_FRAME_BYTES_MAX: usize = 80 << 20;
const _: () = assert!(lode_types::limits::REQUEST_BYTES_MAX < PEER_FRAME_BYTES_MAX);

/// What a server holds a connection to.
#[derive(Clone, Debug)]
pub struct ServerLimits {
    /// Largest request frame.
    pub frame_bytes_max: usize,
    /// A connection with no call running that sends nothing for this long
    /// is closed.
    pub idle: Duration,
    /// The calls running on all the connections of one port at once.
    pub port_calls: PortCalls,
}

/// Calls the connections of one port may have running at once, shared by
/// them: past it, a call is refused as it arrives, naming the limit,
/// instead of queueing behind the others. This bounds the tasks a member
/// runs for one port however many clients send, so that Raft's own tasks
/// (heartbeats) keep being scheduled in time under a flood of requests.
#[derive(Clone, Debug)]
pub struct PortCalls {
    running: Arc<Semaphore>,
    /// The limit's name in refusals: its flag, as an operator sets it.
    name: &'static str,
    max: usize,
}

impl PortCalls {
    /// At most `max` calls at once, named `name` in refusals.
    pub fn new(name: &'static str, max: usize) -> Self {
        let max = max.min(Semaphore::MAX_PERMITS);
        Self {
            running: Arc::new(Semaphore::new(max)),
            name,
            max,
        }
    }

    /// No limit but the per-connection one: for the peer port, whose calls
    /// (Raft's, and writes other members forward, bounded by their own
    /// client ports) must not be refused for the clients' load.
    pub fn unlimited() -> Self {
        Self::new("unlimited", Semaphore::MAX_PERMITS)
    }

    /// A place for one call, held until the call ends; `Err` names the
    /// limit when there is none.
    pub(crate) fn admit(&self) -> Result<OwnedSemaphorePermit, String> {
        self.running
            .clone()
            .try_acquire_owned()
            .map_err(|_| format!("too many calls running on this port ({} = {})", self.name, self.max))
    }
}

/// Requests one connection may have running on the server at once; more
/// are refused with a message naming this limit.
pub const REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX: usize = 1024;

/// Calls one channel may have waiting to be written at once; more wait.
pub const CALLS_QUEUED_PER_CHANNEL_MAX: usize = 1024;

/// What a client sends.
#[derive(Debug, Serialize, Deserialize)]
pub enum ClientFrame<Request> {
    /// A request; `id` is unique among the connection's calls.
    Call { id: u64, request: Request },
    /// The caller stopped waiting: stop working on `id`.
    Cancel { id: u64 },
}

/// What a server sends: the answer to one call.
#[derive(Debug, Serialize, Deserialize)]
pub struct ServerFrame<Response> {
    pub id: u64,
    /// `Err` when the server refused the call before running it.
    pub outcome: Result<Response, String>,
}

/// A call the server refused before running it, as its caller sees it.
fn refused(detail: String) -> tarpc::client::RpcError {
    tarpc::client::RpcError::Server(tarpc::ServerError::new(std::io::ErrorKind::Other, detail))
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    lode_types::binary::encode(value).map_err(|error| format!("encoding a frame: {error}"))
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    lode_types::binary::decode(bytes).map_err(|error| format!("decoding a frame: {error}"))
}
