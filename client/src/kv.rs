//! A namespace handle: set, get, get_entry and delete with the read
//! consistency the caller chooses.

use std::time::Duration;

use crate::error::LodeError;
use crate::limits;
use crate::protocol::{
    Consistency, Encoding, Entry, Operation, OperationResult, ReadRequest, ReadResponse, WriteRequest,
};
use crate::sdk::{new_op_id, Client};

/// Operations on one namespace.
#[derive(Clone, Debug)]
pub struct Kv {
    client: Client,
    namespace: String,
}

/// Checks every operation's limits before anything is sent.
pub(crate) fn validate_operations(operations: &[Operation]) -> Result<(), LodeError> {
    if operations.is_empty() {
        return Err(LodeError::Invalid("operations must not be empty".to_owned()));
    }
    if operations.len() > limits::OPERATIONS_PER_WRITE_MAX {
        return Err(LodeError::Invalid(format!(
            "operations has {} items, over the limit operations_per_write_max = {}",
            operations.len(),
            limits::OPERATIONS_PER_WRITE_MAX
        )));
    }
    let mut size_bytes = 0;
    for operation in operations {
        size_bytes += match operation {
            Operation::Set {
                namespace, key, value, ..
            } => namespace.len() + key.len() + value.len(),
            Operation::Delete { namespace, key } => namespace.len() + key.len(),
        };
        let checked = match operation {
            Operation::Set {
                namespace, key, value, ..
            } => limits::check_namespace(namespace)
                .and_then(|()| limits::check_key(key))
                .and_then(|()| limits::check_value(value)),
            Operation::Delete { namespace, key } => {
                limits::check_namespace(namespace).and_then(|()| limits::check_key(key))
            }
        };
        checked.map_err(LodeError::Invalid)?;
    }
    if size_bytes > limits::WRITE_BYTES_MAX {
        return Err(LodeError::Invalid(format!(
            "the write holds {size_bytes} bytes of namespaces, keys and values, over the limit write_bytes_max = {}",
            limits::WRITE_BYTES_MAX
        )));
    }
    Ok(())
}

pub(crate) fn validate_read(request: &ReadRequest) -> Result<(), LodeError> {
    limits::check_namespace(&request.namespace)
        .and_then(|()| limits::check_key(&request.key))
        .map_err(LodeError::Invalid)
}

impl Kv {
    pub(crate) fn new(client: Client, namespace: String) -> Self {
        Self { client, namespace }
    }

    /// Sends one operation as its own atomic write, with a fresh op id.
    async fn write_one(&self, operation: Operation) -> Result<OperationResult, LodeError> {
        let request = WriteRequest {
            op_id: new_op_id(),
            operations: vec![operation],
        };
        let response = self.client.write(request).await?;
        response
            .results
            .into_iter()
            .next()
            .ok_or_else(|| LodeError::Unavailable("the server answered a write with no result".to_owned()))
    }

    /// The namespace this handle addresses.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Starts a write of `key`; finish it with `.bytes(..)` and `.send()`.
    pub fn set(&self, key: impl AsRef<[u8]>) -> SetBuilder {
        SetBuilder {
            kv: self.clone(),
            key: key.as_ref().to_vec(),
            value: Vec::new(),
            encoding: Encoding::Bytes,
            expires_at_micros: None,
        }
    }

    /// The value at `key` from a linearizable read, or `None` when absent or
    /// expired.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, LodeError> {
        Ok(self.get_entry(key).await?.map(|entry| entry.value))
    }

    /// The entry at `key` (value, version, expiry, source) from a
    /// linearizable read.
    pub async fn get_entry(&self, key: impl AsRef<[u8]>) -> Result<Option<Entry>, LodeError> {
        Ok(self.read(key, Consistency::Linearizable).await?.entry)
    }

    /// The entry at `key` once the serving node has applied `position`; a
    /// `stale` error when it does not catch up in time.
    pub async fn get_entry_at_least(&self, key: impl AsRef<[u8]>, position: u64) -> Result<Option<Entry>, LodeError> {
        Ok(self.read(key, Consistency::AtLeast(position)).await?.entry)
    }

    /// A read with explicit consistency, reporting the position it was served at.
    pub async fn read(&self, key: impl AsRef<[u8]>, consistency: Consistency) -> Result<ReadResponse, LodeError> {
        let request = ReadRequest {
            namespace: self.namespace.clone(),
            key: key.as_ref().to_vec(),
            consistency,
        };
        self.client.read(request).await
    }

    /// Removes `key`; true when a live entry was removed.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool, LodeError> {
        let operation = Operation::Delete {
            namespace: self.namespace.clone(),
            key: key.as_ref().to_vec(),
        };
        match self.write_one(operation).await? {
            OperationResult::Delete { removed_live_entry } => Ok(removed_live_entry),
            other => Err(unexpected("delete", &other)),
        }
    }
}

/// The error for a result of the wrong kind: a server bug, reported rather
/// than trusted.
fn unexpected(operation: &str, result: &OperationResult) -> LodeError {
    LodeError::Unavailable(format!("the server answered {operation} with {result:?}"))
}

/// A write being built.
#[derive(Debug)]
pub struct SetBuilder {
    kv: Kv,
    key: Vec<u8>,
    value: Vec<u8>,
    encoding: Encoding,
    expires_at_micros: Option<u64>,
}

impl SetBuilder {
    /// Raw bytes.
    pub fn bytes(mut self, value: impl AsRef<[u8]>) -> Self {
        self.value = value.as_ref().to_vec();
        self.encoding = Encoding::Bytes;
        self
    }

    /// A JSON document, stored with the JSON encoding.
    pub fn json<T: serde::Serialize>(mut self, value: &T) -> Result<Self, LodeError> {
        self.value = serde_json::to_vec(value).map_err(|error| LodeError::Invalid(format!("value: {error}")))?;
        self.encoding = Encoding::Json;
        Ok(self)
    }

    /// Expires `ttl` from now.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.expires_at_micros = Some(crate::facade::now_micros().saturating_add(ttl.as_micros() as u64));
        self
    }

    /// Expires at an absolute time, in microseconds since the epoch.
    pub fn expires_at(mut self, epoch_micros: u64) -> Self {
        self.expires_at_micros = Some(epoch_micros);
        self
    }

    /// Writes unconditionally and returns the new version.
    pub async fn send(self) -> Result<u64, LodeError> {
        let operation = Operation::Set {
            namespace: self.kv.namespace.clone(),
            key: self.key,
            value: self.value,
            encoding: self.encoding,
            expires_at_micros: self.expires_at_micros,
        };
        match self.kv.write_one(operation).await? {
            OperationResult::Set { version } => Ok(version),
            other => Err(unexpected("set", &other)),
        }
    }
}
