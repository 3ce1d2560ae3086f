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
mod server;

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use channel::Channel;
pub use frame::FrameCodec;
pub use server::{serve_connection, Handler};

/// Largest frame between members (the peer port) and of any answer, in
/// bytes: room for a Raft append of `raft_payload_entries_max` entries of
/// `proposal_bytes_max` each (lode-node) plus framing.
pub const PEER_FRAME_BYTES_MAX: usize = 80 << 20;
const _: () = assert!(lode_types::limits::REQUEST_BYTES_MAX < PEER_FRAME_BYTES_MAX);

/// What a server holds a connection to.
#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    /// Largest request frame.
    pub frame_bytes_max: usize,
    /// A connection with no call running that sends nothing for this long
    /// is closed.
    pub idle: Duration,
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

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    lode_types::binary::encode(value).map_err(|error| format!("encoding a frame: {error}"))
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    lode_types::binary::decode(bytes).map_err(|error| format!("decoding a frame: {error}"))
}
