//! The stored form of one key's value and its metadata.

use serde::{Deserialize, Serialize};

use crate::command::{Encoding, SessionLink};

/// A place in the log (term and index): where an entry being applied sits,
/// and, stored with every entry, the log id of the command that wrote it
/// (where to find it while the log still holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceId {
    pub term: u64,
    pub index: u64,
}

/// One live or expired entry, as the state machine stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEntry {
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    pub encoding: Encoding,
    /// The log index of the command that last wrote the value.
    pub version: u64,
    /// Absolute expiry in microseconds since the epoch.
    pub expires_at_micros: Option<u64>,
    pub source: SourceId,
    /// The session whose write last set the value, if it named one.
    pub session: Option<SessionLink>,
}

impl StoredEntry {
    /// An entry whose expiry is at or before `now_micros` reads as absent.
    pub fn is_live_at(&self, now_micros: u64) -> bool {
        match self.expires_at_micros {
            Some(expires_at) => expires_at > now_micros,
            None => true,
        }
    }
}
