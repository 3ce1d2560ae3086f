//! The stored form of a snapshot: openraft's meta and the engine's packed
//! image, saved whole so the current snapshot can be served after a restart.

use serde::{Deserialize, Serialize};

use openraft::SnapshotMeta;

use crate::error::{decode, encode, EngineError};
use crate::type_config::NodeId;

#[derive(Serialize, Deserialize)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta<NodeId, crate::type_config::Member>,
    #[serde(with = "serde_bytes")]
    pub image: Vec<u8>,
}

impl StoredSnapshot {
    pub fn to_bytes(&self) -> Result<Vec<u8>, EngineError> {
        encode("snapshot", self)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, EngineError> {
        decode("snapshot", bytes)
    }
}
