//! The types Lode's SDK, server and state machine share: the operations of
//! an atomic write, their results, and every request limit.
//!
//! They live in their own crate so that lode-client (no storage) and
//! lode-raft-store (no network) use the very same definitions and checks,
//! with nothing to convert between them. Each item has one public path:
//! the crate root (the files below are private), or the public modules
//! `auth`, `backup`, `limits`, `binary`, `state_update` and `v8_number`.

pub mod auth;
pub mod backup;
pub mod binary;
mod changes;
mod encoding;
pub mod limits;
mod operation;
mod queue;
mod ranges;
mod results;
pub mod state_update;
pub mod v8_number;
mod validation;

pub use changes::{ChangeEvent, ChangeKind};
pub use encoding::Encoding;
pub use operation::{
    Access, CounterKind, Fence, NamespaceAccess, Operation, Precondition, Selector, SessionLink, WrittenKey,
    QUEUE_NAMESPACE, SESSION_GRANT_PREFIX,
};
pub use queue::{EnqueueOptions, FinishedAs, MessageId, QueueDelivery};
pub use ranges::{validate_ranges, KeyRange};
pub use results::OperationResult;
pub use validation::{validate_client_write, validate_write, write_size_bytes};

/// The namespace that holds Deno KV's entries, keyed by their tuple
/// encoding. It is an ordinary namespace: the KV API can read it.
pub const DENO_NAMESPACE: &str = "deno";
