//! The types Lode's SDK, server and state machine share: the operations of
//! an atomic write, their results, and every request limit.
//!
//! They live in their own crate so that lode-client (no storage) and
//! lode-raft-store (no network) use the very same definitions and checks,
//! with nothing to convert between them. Operations are stored in the Raft
//! log: new shapes are new variants appended at the end, never changes to old
//! ones, so old logs stay readable.

pub mod limits;

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
}

/// A condition on a key's current state that a write needs to go ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Precondition {
    /// The key holds a live entry at exactly this version.
    Version(u64),
    /// The key holds no live entry.
    Absent,
}

/// Which keys of a namespace a bulk operation or a scan selects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Selector {
    /// Every key of the namespace.
    All,
    /// Keys that start with these bytes.
    Prefix(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Keys with `start <= key < end`.
    Range {
        #[serde(with = "serde_bytes")]
        start: Vec<u8>,
        #[serde(with = "serde_bytes")]
        end: Vec<u8>,
    },
    /// UTF-8 keys that contain this text; other keys are skipped.
    KeyContains(String),
}

/// One operation of an atomic write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operation {
    Set {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        encoding: Encoding,
        /// Absolute expiry in microseconds since the epoch.
        expires_at_micros: Option<u64>,
        /// When set and not met, the whole command is refused with a
        /// version conflict.
        precondition: Option<Precondition>,
        /// When set, the write goes ahead only while the named lease is held
        /// with this token; otherwise the command is refused with
        /// `lease_lost`. A fenced write also needs a precondition.
        fence: Option<Fence>,
        /// The session this write belongs to; stored with the entry.
        session: Option<SessionLink>,
    },
    Delete {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        /// The session this delete belongs to.
        session: Option<SessionLink>,
    },
    /// Physically removes up to `entries_max` entries whose expiry is at or
    /// before the command's time. Proposed by the leader so that every
    /// replica removes the same entries at the same log position.
    SweepExpired { entries_max: u32 },
    /// Sets or clears a live entry's expiry; the value and version stay.
    Expire {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        expires_at_micros: Option<u64>,
    },
    /// Applies an RFC 7386 JSON merge patch to a live JSON entry.
    Patch {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        #[serde(with = "serde_bytes")]
        patch: Vec<u8>,
        /// The session this patch belongs to; stored with the entry.
        session: Option<SessionLink>,
    },
    /// Writes a live entry's value, encoding and remaining expiry to another
    /// key (overwriting it), and with `remove_source` removes the source.
    Copy {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        to_namespace: String,
        #[serde(with = "serde_bytes")]
        to_key: Vec<u8>,
        remove_source: bool,
    },
    /// Examines up to `entries_max` entries of a namespace in key order,
    /// after the key `after` when given, and removes those the selector
    /// picks. The result's `resume_after` is where to continue, or `None`
    /// when the selected range is done.
    DeleteRange {
        namespace: String,
        selector: Selector,
        #[serde(with = "serde_bytes")]
        after: Option<Vec<u8>>,
        entries_max: u32,
    },
    /// Grants the lease at (`namespace`, `key`) to `holder` for `ttl_micros`
    /// (already capped by the leader) unless a live lease exists, which is a
    /// version conflict carrying the live lease's token. The token is the
    /// log index of the grant.
    AcquireLease {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        holder: String,
        ttl_micros: u64,
    },
    /// Extends a live lease held by `holder` with `token` to `ttl_micros`
    /// from now, keeping the token; otherwise `lease_lost`.
    RenewLease {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        holder: String,
        token: u64,
        ttl_micros: u64,
    },
    /// Revokes a live lease held by `holder` with `token`.
    ReleaseLease {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        holder: String,
        token: u64,
    },
}

/// The session a write belongs to: the session's stream (by name, never a
/// numeric id) and the session's id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionLink {
    pub stream: String,
    pub session_id: String,
}

impl SessionLink {
    /// Checks the link's names against their limits.
    pub fn validate(&self) -> Result<(), String> {
        limits::check_name("session stream", &self.stream)?;
        limits::check_name("session id", &self.session_id)
    }
}

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

/// A lease that must be held, with this token, for a fenced write to apply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The coordination namespace of the lease.
    pub namespace: String,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    pub token: u64,
}

/// The result of one operation, in the order the operations were given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperationResult {
    Set {
        version: u64,
    },
    Delete {
        removed_live_entry: bool,
    },
    SweepExpired {
        removed: u32,
    },
    /// The entry's version, unchanged.
    Expire {
        version: u64,
    },
    Patch {
        version: u64,
    },
    /// The destination's new version.
    Copy {
        version: u64,
    },
    /// Live entries removed, and the last key examined when entries may be
    /// left.
    DeleteRange {
        removed: u32,
        #[serde(with = "serde_bytes")]
        resume_after: Option<Vec<u8>>,
    },
    /// The grant: its token (the log index), the granted TTL and when it
    /// expires (in log time).
    AcquireLease {
        token: u64,
        ttl_micros: u64,
        expires_at_micros: u64,
    },
    RenewLease {
        token: u64,
        ttl_micros: u64,
        expires_at_micros: u64,
    },
    /// True when a held lease was released.
    ReleaseLease {
        released: bool,
    },
}

impl Operation {
    /// The session a write names, if any.
    pub fn session(&self) -> Option<&SessionLink> {
        match self {
            Operation::Set { session, .. } | Operation::Delete { session, .. } | Operation::Patch { session, .. } => {
                session.as_ref()
            }
            _ => None,
        }
    }

    /// Checks the limits of one operation; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(session) = self.session() {
            session.validate()?;
        }
        use crate::limits::{check_key, check_namespace, check_value, DELETE_RANGE_ENTRIES_MAX, SWEEP_ENTRIES_MAX};
        match self {
            Operation::Set {
                namespace,
                key,
                value,
                encoding,
                precondition,
                fence,
                ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                check_value(value)?;
                if let Some(fence) = fence {
                    if precondition.is_none() {
                        return Err("a fenced write needs a precondition (expect_version or expect_absent)".to_owned());
                    }
                    check_namespace(&fence.namespace).map_err(|message| format!("fence {message}"))?;
                    check_key(&fence.key).map_err(|message| format!("fence {message}"))?;
                }
                if let Encoding::Custom(name) = encoding {
                    if name.is_empty() || name.len() > limits::ENCODING_NAME_BYTES_MAX {
                        return Err(format!(
                            "encoding name must be 1 to {} bytes (encoding_name_bytes_max)",
                            limits::ENCODING_NAME_BYTES_MAX
                        ));
                    }
                }
                Ok(())
            }
            Operation::Delete { namespace, key, .. } | Operation::Expire { namespace, key, .. } => {
                check_namespace(namespace)?;
                check_key(key)
            }
            Operation::Patch {
                namespace, key, patch, ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                check_value(patch).map_err(|message| message.replacen("value", "patch", 1))
            }
            Operation::Copy {
                namespace,
                key,
                to_namespace,
                to_key,
                ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                check_namespace(to_namespace).map_err(|message| format!("destination {message}"))?;
                check_key(to_key).map_err(|message| format!("destination {message}"))
            }
            Operation::DeleteRange {
                namespace,
                selector,
                after,
                entries_max,
            } => {
                check_namespace(namespace)?;
                selector.validate()?;
                if let Some(after) = after {
                    check_key(after).map_err(|message| message.replacen("key", "after", 1))?;
                }
                if *entries_max == 0 || *entries_max > DELETE_RANGE_ENTRIES_MAX {
                    return Err(format!(
                        "entries_max must be 1 to delete_range_entries_max = {DELETE_RANGE_ENTRIES_MAX}"
                    ));
                }
                Ok(())
            }
            Operation::AcquireLease {
                namespace,
                key,
                holder,
                ttl_micros,
            }
            | Operation::RenewLease {
                namespace,
                key,
                holder,
                ttl_micros,
                ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                limits::check_holder(holder)?;
                limits::check_lease_ttl(*ttl_micros)
            }
            Operation::ReleaseLease {
                namespace, key, holder, ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                limits::check_holder(holder)
            }
            Operation::SweepExpired { entries_max } => {
                if *entries_max == 0 || *entries_max > SWEEP_ENTRIES_MAX {
                    return Err(format!(
                        "entries_max must be 1 to sweep_entries_max = {SWEEP_ENTRIES_MAX}"
                    ));
                }
                Ok(())
            }
        }
    }
}

impl Selector {
    /// Checks the bounds against the key limit; an empty prefix or text
    /// selects everything and is allowed.
    pub fn validate(&self) -> Result<(), String> {
        use crate::limits::KEY_BYTES_MAX;
        let check = |field: &str, length: usize| {
            if length > KEY_BYTES_MAX {
                Err(format!(
                    "{field} is {length} bytes, over the limit key_bytes_max = {KEY_BYTES_MAX}"
                ))
            } else {
                Ok(())
            }
        };
        match self {
            Selector::All => Ok(()),
            Selector::Prefix(prefix) => check("prefix", prefix.len()),
            Selector::Range { start, end } => {
                check("range start", start.len())?;
                check("range end", end.len())
            }
            Selector::KeyContains(text) => check("key_contains", text.len()),
        }
    }

    /// Bytes the selector carries.
    pub fn size_bytes(&self) -> usize {
        match self {
            Selector::All => 0,
            Selector::Prefix(prefix) => prefix.len(),
            Selector::Range { start, end } => start.len() + end.len(),
            Selector::KeyContains(text) => text.len(),
        }
    }

    /// Whether a key inside the covered range is selected.
    pub fn matches(&self, key: &[u8]) -> bool {
        match self {
            Selector::KeyContains(text) => std::str::from_utf8(key).is_ok_and(|key| key.contains(text.as_str())),
            _ => true,
        }
    }
}

/// Checks an atomic write: its operation count, every operation's limits and
/// its total size. The message names the field and the limit.
pub fn validate_write(operations: &[Operation]) -> Result<(), String> {
    if operations.is_empty() {
        return Err("operations must not be empty".to_owned());
    }
    if operations.len() > limits::OPERATIONS_PER_WRITE_MAX {
        return Err(format!(
            "operations has {} items, over the limit operations_per_write_max = {}",
            operations.len(),
            limits::OPERATIONS_PER_WRITE_MAX
        ));
    }
    for operation in operations {
        operation.validate()?;
    }
    let size_bytes = write_size_bytes(operations);
    if size_bytes > limits::WRITE_BYTES_MAX {
        return Err(format!(
            "the write holds {size_bytes} bytes of namespaces, keys and values, over the limit write_bytes_max = {}",
            limits::WRITE_BYTES_MAX
        ));
    }
    Ok(())
}

/// Bytes of namespaces, keys and values a write carries.
pub fn write_size_bytes(operations: &[Operation]) -> usize {
    operations
        .iter()
        .map(|operation| match operation {
            Operation::Set {
                namespace,
                key,
                value,
                fence,
                ..
            } => {
                namespace.len()
                    + key.len()
                    + value.len()
                    + fence
                        .as_ref()
                        .map_or(0, |fence| fence.namespace.len() + fence.key.len())
            }
            Operation::Delete { namespace, key, .. } | Operation::Expire { namespace, key, .. } => {
                namespace.len() + key.len()
            }
            Operation::Patch {
                namespace, key, patch, ..
            } => namespace.len() + key.len() + patch.len(),
            Operation::Copy {
                namespace,
                key,
                to_namespace,
                to_key,
                ..
            } => namespace.len() + key.len() + to_namespace.len() + to_key.len(),
            Operation::DeleteRange {
                namespace,
                selector,
                after,
                ..
            } => namespace.len() + selector.size_bytes() + after.as_ref().map_or(0, Vec::len),
            Operation::AcquireLease {
                namespace, key, holder, ..
            }
            | Operation::RenewLease {
                namespace, key, holder, ..
            }
            | Operation::ReleaseLease {
                namespace, key, holder, ..
            } => namespace.len() + key.len() + holder.len(),
            Operation::SweepExpired { .. } => 0,
        })
        .sum()
}
