//! The command model: what one Raft log entry asks the state machine to do,
//! and what applying it answered.
//!
//! Commands are versioned (`Command::V1`) so that logs and snapshots written
//! by an older Lode stay readable: a new shape is a new variant, never a
//! change to an old one.

use serde::{Deserialize, Serialize};

/// A client-chosen operation id: a command carrying one is applied at most
/// once while its dedup record is retained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpId(pub u128);

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

/// What one Raft log entry carries: commands, usually from different
/// clients, that the leader grouped so that one log append (one fsync)
/// commits them all. Each command is atomic on its own and applies after the
/// ones before it; the leader never groups two commands that write the same
/// key, so a version (the entry's log index) names exactly one value of a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub commands: Vec<Command>,
}

/// What applying one log entry produced: one outcome per command, in order.
/// Blank and membership entries produce none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ProposalOutcome {
    pub outcomes: Vec<CommandOutcome>,
}

impl Proposal {
    /// A proposal of one command.
    pub fn single(command: Command) -> Self {
        Self {
            commands: vec![command],
        }
    }
}

/// One replicated command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    V1(CommandV1),
}

/// The first command shape: one atomic batch stamped with the leader's time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandV1 {
    pub op_id: Option<OpId>,
    /// The proposing leader's wall clock in microseconds since the epoch,
    /// made monotonic by the leader. Apply uses
    /// `max(time_micros, last applied time)`.
    pub time_micros: u64,
    /// Applied all together or not at all.
    pub operations: Vec<Operation>,
}

/// One operation inside a command.
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
    },
    Delete {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    /// Physically removes up to `entries_max` entries whose expiry is at or
    /// before the command's time. Proposed by the leader so that every
    /// replica removes the same entries at the same log position.
    SweepExpired { entries_max: u32 },
}

/// The result of one operation, in the order the operations were given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperationResult {
    Set { version: u64 },
    Delete { removed_live_entry: bool },
    SweepExpired { removed: u32 },
}

/// Why a whole command was refused at apply time; nothing of it was applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Rejection {
    /// The command broke a limit or was malformed. The server checks before
    /// proposing; apply checks again because the log is the boundary.
    #[error("invalid: {0}")]
    Invalid(String),
}

/// What applying one command produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandOutcome {
    /// The log index of the command: the version of every key it wrote.
    pub index: u64,
    /// The term of the leader that proposed it.
    pub term: u64,
    /// The time the state machine used for the command.
    pub time_micros: u64,
    pub result: Result<Vec<OperationResult>, Rejection>,
    /// True when this outcome was returned from the dedup table: an earlier
    /// command with the same op id was applied and this one was not.
    pub deduplicated: bool,
}

impl Command {
    /// The operation id, if the proposer gave one.
    pub fn op_id(&self) -> Option<OpId> {
        match self {
            Command::V1(command) => command.op_id,
        }
    }

    /// The entry keys this command may write, or `None` when the set is not
    /// known before apply (a sweep): such a command is proposed alone.
    pub fn written_keys(&self) -> Option<Vec<Vec<u8>>> {
        let Command::V1(command) = self;
        command
            .operations
            .iter()
            .map(|operation| match operation {
                Operation::Set { namespace, key, .. } | Operation::Delete { namespace, key } => {
                    Some(crate::keys::entry_key(namespace, key))
                }
                Operation::SweepExpired { .. } => None,
            })
            .collect()
    }

    /// Checks every limit of every operation; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let Command::V1(command) = self;
        command.validate()
    }

    /// Bytes of namespaces, keys and values the command carries.
    pub fn size_bytes(&self) -> usize {
        let Command::V1(command) = self;
        command.size_bytes()
    }
}

impl CommandV1 {
    /// Checks every limit of every operation; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.operations.is_empty() {
            return Err("operations must not be empty".to_owned());
        }
        if self.operations.len() > crate::limits::OPERATIONS_PER_WRITE_MAX {
            return Err(format!(
                "operations has {} items, over the limit operations_per_write_max = {}",
                self.operations.len(),
                crate::limits::OPERATIONS_PER_WRITE_MAX
            ));
        }
        for operation in &self.operations {
            operation.validate()?;
        }
        let size_bytes = self.size_bytes();
        if size_bytes > crate::limits::WRITE_BYTES_MAX {
            return Err(format!(
                "the write holds {size_bytes} bytes of namespaces, keys and values, over the limit write_bytes_max = {}",
                crate::limits::WRITE_BYTES_MAX
            ));
        }
        Ok(())
    }

    /// Bytes of namespaces, keys and values the command carries.
    pub fn size_bytes(&self) -> usize {
        self.operations
            .iter()
            .map(|operation| match operation {
                Operation::Set {
                    namespace, key, value, ..
                } => namespace.len() + key.len() + value.len(),
                Operation::Delete { namespace, key } => namespace.len() + key.len(),
                Operation::SweepExpired { .. } => 0,
            })
            .sum()
    }
}

impl Operation {
    /// Checks the limits of one operation; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        use crate::limits::{check_key, check_namespace, check_value, SWEEP_ENTRIES_MAX};
        match self {
            Operation::Set {
                namespace,
                key,
                value,
                encoding,
                ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                check_value(value)?;
                if let Encoding::Custom(name) = encoding {
                    if name.is_empty() || name.len() > 64 {
                        return Err("encoding name must be 1 to 64 bytes (encoding_name_bytes_max = 64)".to_owned());
                    }
                }
                Ok(())
            }
            Operation::Delete { namespace, key } => {
                check_namespace(namespace)?;
                check_key(key)
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
