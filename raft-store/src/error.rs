//! Errors of the storage layer.

/// A storage engine failed, or bytes read back from it did not decode.
/// Either way the node cannot trust its state and openraft stops it.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// RocksDB reported an error.
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// A filesystem operation around the engine (checkpoint, snapshot file) failed.
    #[error("io while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// Stored bytes did not decode: the data on disk is not what Lode wrote.
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
}

impl EngineError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        EngineError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corrupt(what: &'static str, detail: impl std::fmt::Display) -> Self {
        EngineError::Corrupt {
            what,
            detail: detail.to_string(),
        }
    }
}

/// Serializes a value for storage. Encoding our own types cannot fail short
/// of a bug, which is still reported rather than panicking.
pub(crate) fn encode<T: serde::Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, EngineError> {
    lode_types::binary::encode(value).map_err(|error| EngineError::corrupt(what, error))
}

/// Deserializes a stored value, reporting which kind of record was corrupt.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, EngineError> {
    lode_types::binary::decode(bytes).map_err(|error| EngineError::corrupt(what, error))
}

/// A storage failure on the way in, as openraft's error (it stops Raft).
pub(crate) fn read_error(error: EngineError) -> openraft::StorageError<crate::type_config::NodeId> {
    openraft::StorageIOError::read(&error).into()
}

/// A storage failure on the way out, as openraft's error (it stops Raft).
pub(crate) fn write_error(error: EngineError) -> openraft::StorageError<crate::type_config::NodeId> {
    openraft::StorageIOError::write(&error).into()
}
