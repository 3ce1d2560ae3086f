//! The command model: what one Raft log entry asks the state machine to do,
//! and what applying it answered.
//!
//! Commands are versioned (`Command::V1`) so that logs and snapshots written
//! by an older Lode stay readable: a new shape is a new variant, never a
//! change to an old one.

use serde::{Deserialize, Serialize};

pub use lode_types::{
    ChangeEvent, ChangeKind, CounterKind, Encoding, EnqueueOptions, Fence, FinishedAs, MessageId, Operation,
    OperationResult, Precondition, QueueDelivery, Selector, SessionLink,
};

/// A client-chosen operation id: a command carrying one is applied at most
/// once while its dedup record is retained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpId(pub u128);

/// What one Raft log entry carries: commands, usually from different
/// clients, that the leader grouped so that one log append (one fsync)
/// commits them all. Each command is atomic on its own and applies after the
/// ones before it; the leader never groups two commands that write the same
/// key, so a version (the entry's log index) names exactly one value of a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// Shared: openraft copies an entry for each follower it replicates to
    /// and for apply (`recent_entries.rs`), and a copy shares them. Encoded
    /// as a sequence, the same bytes as a `Vec`.
    pub commands: std::sync::Arc<[Command]>,
    /// How long dedup records and change events are kept, chosen by the
    /// proposing leader and logged, so every replica prunes alike.
    pub retention: Retention,
}

/// Retention of the state machine's bounded tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// How long a dedup record protects its op id, in log time.
    pub dedup_micros: u64,
    /// Most change events kept.
    pub change_events_max: u64,
    /// Most bytes of change events kept.
    pub change_bytes_max: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            dedup_micros: crate::limits::DEDUP_RETENTION_MICROS,
            change_events_max: crate::limits::CHANGE_EVENTS_MAX_DEFAULT,
            change_bytes_max: crate::limits::CHANGE_BYTES_MAX_DEFAULT,
        }
    }
}

/// What applying one log entry produced: one outcome per command, in order.
/// Blank and membership entries produce none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ProposalOutcome {
    pub outcomes: Vec<CommandOutcome>,
}

impl Proposal {
    /// A proposal of one command, with the default dedup retention.
    pub fn single(command: Command) -> Self {
        Self::new(vec![command])
    }

    /// A proposal of `commands`, with the default dedup retention.
    pub fn new(commands: Vec<Command>) -> Self {
        Self {
            commands: commands.into(),
            retention: Retention::default(),
        }
    }
}

/// One replicated command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    V1(CommandV1),
    /// A command whose caller's grants the proposing member checked
    /// against the auth state as of grants revision `grants_revision` (the
    /// log index of the last auth change that may have taken a permission
    /// away). Apply refuses it, applying nothing, when a later such change
    /// applied first: a permission taken away binds every write after it
    /// in the log, wherever its check ran.
    V2 {
        command: CommandV1,
        grants_revision: u64,
    },
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

/// Why a command answers no results: it was refused at apply time and
/// nothing of it was applied, or (`AnswerCompacted` only) it is a repeat
/// whose original answer can no longer be rebuilt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Rejection {
    /// The command broke a limit or was malformed. The server checks before
    /// proposing; apply checks again because the log is the boundary.
    #[error("invalid: {0}")]
    Invalid(String),
    /// A precondition did not hold; `current` is the key's live version.
    #[error("version conflict on {key:?}: current version is {current:?}")]
    VersionConflict {
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        current: Option<u64>,
    },
    /// The operation needs a live entry that is absent or expired.
    #[error("not found: {0}")]
    NotFound(String),
    /// A fenced write or a renewal named a lease that is no longer held
    /// with that token.
    #[error("lease lost: {0}")]
    LeaseLost(String),
    /// Checks of the command did not hold; `indexes` are the failing
    /// checks' places among the command's `Check` operations.
    #[error("checks {indexes:?} failed")]
    ChecksFailed { indexes: Vec<u32> },
    /// A repeat of an op id whose command applied at log index `index`:
    /// its answer carried values that dedup records do not keep, and those
    /// values are no longer live nor in the change log (trimmed through
    /// `trimmed_through`). The command is not applied again.
    #[error("the answer of the command applied at index {index} is no longer kept (changes trimmed through {trimmed_through:?})")]
    AnswerCompacted { index: u64, trimmed_through: (u64, u32) },
    /// The caller's grants were checked at grants revision `checked`, and
    /// an auth change that may take permissions away applied since (at
    /// `current`). Nothing applied and no dedup record is kept, so the
    /// write may be checked again and retried under the same op id.
    #[error("the caller's grants changed (revision {checked} checked, {current} now) while the write was in flight")]
    GrantsChanged { checked: u64, current: u64 },
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
    /// The command's time, op id and operations.
    pub fn body(&self) -> &CommandV1 {
        match self {
            Command::V1(command) | Command::V2 { command, .. } => command,
        }
    }

    /// The grants revision the caller's grants were checked at, if they were.
    pub fn grants_revision(&self) -> Option<u64> {
        match self {
            Command::V1(_) => None,
            Command::V2 { grants_revision, .. } => Some(*grants_revision),
        }
    }

    /// The operation id, if the proposer gave one.
    pub fn op_id(&self) -> Option<OpId> {
        self.body().op_id
    }

    /// The stored keys this command may write, or `None` when the set is
    /// not known before apply (a sweep, a range delete): such a command is
    /// proposed alone.
    pub fn written_keys(&self) -> Option<Vec<Vec<u8>>> {
        let command = self.body();
        let mut written = Vec::new();
        for operation in &command.operations {
            written.extend(operation.written_keys()?.into_iter().map(crate::keys::written_key));
        }
        Some(written)
    }

    /// Checks every limit of every operation; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        self.body().validate()
    }

    /// The length of the command's encoding in a log entry: every field
    /// counted, so a group of commands is bounded by what it weighs on the
    /// wire between members.
    pub fn encoded_bytes(&self) -> usize {
        // Encoding a command cannot fail (no maps with non-string keys, no
        // unsized sequences); a failure counts as the largest write.
        lode_types::binary::encoded_size(self).unwrap_or(lode_types::limits::REQUEST_BYTES_MAX)
    }
}

impl CommandV1 {
    /// Checks every limit of every operation; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        lode_types::validate_write(&self.operations)
    }
}

/// The stored-key range `[start, end)` a selector covers inside
/// `namespace`; `KeyContains` covers the whole namespace and filters.
pub fn stored_range(selector: &Selector, namespace: &str) -> (Vec<u8>, Option<Vec<u8>>) {
    let prefix = crate::keys::namespace_prefix(namespace);
    let namespace_end = crate::keys::prefix_end(&prefix);
    match selector {
        Selector::All | Selector::KeyContains(_) => (prefix, namespace_end),
        Selector::Prefix(key_prefix) => {
            let start = crate::keys::entry_key(namespace, key_prefix);
            let end = crate::keys::prefix_end(&start).or(namespace_end);
            (start, end)
        }
        Selector::Range { start, end } => (
            crate::keys::entry_key(namespace, start),
            Some(crate::keys::entry_key(namespace, end)),
        ),
    }
}
