//! The change feed's events: what a change did to a key, with its old and
//! new values and its place in the log.

use serde::{Deserialize, Serialize};

use crate::encoding::Encoding;

/// What a change did to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeKind {
    Created,
    Updated,
    Deleted,
}

/// One change of one key, as apply emitted it. Only values of live entries
/// count: writing over an expired entry creates, and the sweep of an expired
/// entry emits nothing (readers stopped seeing it when it expired).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeEvent {
    /// The log index of the entry that made the change.
    pub index: u64,
    /// The change's place among the entry's changes.
    pub sequence: u32,
    pub namespace: String,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    pub kind: ChangeKind,
    #[serde(with = "serde_bytes")]
    pub old_value: Option<Vec<u8>>,
    #[serde(with = "serde_bytes")]
    pub new_value: Option<Vec<u8>>,
    pub encoding: Encoding,
    /// The key's version after the change (its old one for a delete).
    pub version: u64,
}

impl ChangeEvent {
    /// The event's place in the change log: (log index, sequence).
    pub fn position(&self) -> (u64, u32) {
        (self.index, self.sequence)
    }
}
