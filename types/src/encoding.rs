//! How a value's bytes are to be read.

use serde::{Deserialize, Serialize};

/// How a value's bytes are to be read; stored with the entry and returned
/// unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Encoding {
    #[default]
    Bytes,
    Json,
    Msgpack,
    /// An application codec, named by the application.
    Custom(String),
    /// V8 ValueSerializer bytes: a Deno KV value (anything structured
    /// cloning carries).
    V8,
    /// A little-endian unsigned 64-bit integer: Deno KV's `KvU64`, the only
    /// encoding `Counter` operations combine.
    Le64,
}
