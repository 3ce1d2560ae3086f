//! The one binary encoding of Lode: log entries, snapshots, stored records,
//! Raft messages and rpc frames are all bincode 1 with its default options,
//! chosen here once, so that every crate writes and reads the same bytes
//! (`raft-store/tests/golden_bytes.rs` pins them). Callers turn the error
//! text into their own error kind.

use serde::de::DeserializeOwned;
use serde::Serialize;

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    bincode::serialize(value).map_err(|error| error.to_string())
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    bincode::deserialize(bytes).map_err(|error| error.to_string())
}
