//! Lode's client side: the wire protocol every node serves (one service,
//! its request, response and error types, and the `rpc` framing that
//! carries them) and the async Rust SDK.
//!
//! This crate depends on neither RocksDB nor openraft, so an application
//! that only talks to a cluster compiles no C++. Raft's own messages travel
//! through the same service as opaque bytes that only nodes decode.

pub mod auth;
pub mod backup;
pub mod changes;
pub mod codec;
pub mod connection;
pub mod error;
pub mod facade;
pub mod fenced;
pub mod in_process;
pub mod kv;
pub mod leader_election;
pub mod limits;
pub mod protocol;
pub mod queue;
pub mod rpc;
pub mod sdk;
pub mod state;
pub mod state_store;
pub mod tls;

pub use codec::{Codec, JsonCodec, MsgpackCodec};
pub use error::{LodeError, MutationRecovery};
pub use fenced::FencedLeaseClient;
pub use kv::{Bounds, Kv, Lease, ScanPage};
pub use leader_election::{LeaderElection, Leadership};
pub use protocol::{Capability, Consistency, Encoding, Entry, EntryMeta, Operation, OperationResult};
pub use sdk::{Client, ClientOptions};
pub use state_store::{FileStore, InMemoryStore, StateStore};
