//! The types Lode's SDK, server and state machine share: the operations of
//! an atomic write, their results, and every request limit.
//!
//! They live in their own crate so that lode-client (no storage) and
//! lode-raft-store (no network) use the very same definitions and checks,
//! with nothing to convert between them. Operations are stored in the Raft
//! log: new shapes are new variants appended at the end, never changes to old
//! ones, so old logs stay readable.

pub mod limits;
pub mod state_update;
pub mod v8_number;

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

/// One key range of a range read: `start <= key < end`, walked forwards or
/// backwards, at most `limit` live entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRange {
    #[serde(with = "serde_bytes")]
    pub start: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub end: Vec<u8>,
    pub limit: u32,
    pub reverse: bool,
}

impl KeyRange {
    /// Checks the bounds and the limit; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        use crate::limits::{RANGE_BOUND_BYTES_MAX, RANGE_ENTRIES_MAX};
        for (field, bound) in [("range start", &self.start), ("range end", &self.end)] {
            if bound.len() > RANGE_BOUND_BYTES_MAX {
                return Err(format!(
                    "{field} is {} bytes, over the limit range_bound_bytes_max = {RANGE_BOUND_BYTES_MAX}",
                    bound.len()
                ));
            }
        }
        if self.limit == 0 || self.limit as usize > RANGE_ENTRIES_MAX {
            return Err(format!(
                "range limit is {}; it must be 1 to range_entries_max = {RANGE_ENTRIES_MAX}",
                self.limit
            ));
        }
        Ok(())
    }
}

/// Checks the ranges of one range read.
pub fn validate_ranges(ranges: &[KeyRange]) -> Result<(), String> {
    if ranges.len() > limits::RANGES_PER_READ_MAX {
        return Err(format!(
            "ranges has {} items, over the limit ranges_per_read_max = {}",
            ranges.len(),
            limits::RANGES_PER_READ_MAX
        ));
    }
    ranges.iter().try_for_each(KeyRange::validate)
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
    /// Writes nothing; holds when the key's live state meets the
    /// precondition. Every check of a command is judged against the state
    /// before the command, and when any fails the whole command is refused
    /// with the indexes (among its checks) of all that failed.
    Check {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        precondition: Precondition,
    },
    /// Adds a message to the queue, delivered at or after
    /// `options.deliver_at_micros` (at once when that has passed).
    Enqueue {
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
        encoding: Encoding,
        options: EnqueueOptions,
    },
    /// Takes the next message whose delivery time has come, for one
    /// delivery attempt: it is invisible to other claims for
    /// `visibility_ms`, after which an unfinished delivery counts as failed.
    ClaimMessage { visibility_ms: u32 },
    /// Ends delivery `attempt` of a claimed message (a finish naming an
    /// older attempt, whose claim ran out, finds nothing). A failed one is
    /// retried after the next delay of the message's backoff schedule;
    /// after the last, the payload is written to the message's
    /// `keys_if_undelivered` and the message dropped.
    FinishMessage {
        id: MessageId,
        attempt: u32,
        delivered: bool,
    },
    /// Ends, as failed, up to `messages_max` claimed deliveries whose
    /// visibility has run out. Proposed by the leader.
    RequeueOverdue { messages_max: u32 },
    /// The State API's `update` (and `set`): applies the JSON update ops
    /// in `ops_json` (a JSON array of [`state_update::UpdateOp`]) to the
    /// key's live JSON value, best effort (see [`state_update::apply`]),
    /// and stores the result as JSON unless every op failed. The ops travel
    /// as JSON text because the log's binary encoding cannot carry
    /// arbitrary JSON values.
    StateUpdate {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        #[serde(with = "serde_bytes")]
        ops_json: Vec<u8>,
    },
    /// Removes the key's live entry and answers its value (the State API's
    /// `delete`).
    Take {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    /// Deno KV's sum of V8 numbers or bigints (see [`v8_number::sum`]): the
    /// live value at the key plus `operand`, kept within `min..=max` when
    /// given (outside them the command is refused, or with `clamp` the
    /// result is clamped). The result never expires.
    SumV8 {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        #[serde(with = "serde_bytes")]
        operand: Vec<u8>,
        #[serde(with = "serde_bytes")]
        min: Option<Vec<u8>>,
        #[serde(with = "serde_bytes")]
        max: Option<Vec<u8>>,
        clamp: bool,
    },
    /// Combines the live little-endian u64 at the key with `operand` (sum
    /// wraps at 2^64). An absent key takes `operand`; the result never
    /// expires. A live value of another encoding refuses the command.
    Counter {
        namespace: String,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        kind: CounterKind,
        operand: u64,
    },
}

/// The namespace that holds Deno KV's entries, keyed by their tuple
/// encoding. It is an ordinary namespace: the KV API can read it.
pub const DENO_NAMESPACE: &str = "deno";

/// A queue message's id: the log index that enqueued it and its place among
/// that entry's enqueues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MessageId {
    pub index: u64,
    pub sequence: u32,
}

/// How a queue message is delivered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueueOptions {
    /// Not delivered before this time, in microseconds since the epoch.
    pub deliver_at_micros: u64,
    /// The delays before each redelivery after a failed delivery, in
    /// milliseconds; empty means [`limits::QUEUE_BACKOFF_SCHEDULE_DEFAULT_MS`].
    pub backoff_schedule_ms: Vec<u32>,
    /// Keys of [`DENO_NAMESPACE`] that receive the payload when the last
    /// delivery fails.
    pub keys_if_undelivered: Vec<Vec<u8>>,
}

impl EnqueueOptions {
    /// Checks the schedule and the keys against their limits.
    pub fn validate(&self) -> Result<(), String> {
        use limits::{QUEUE_BACKOFF_DELAYS_MAX, QUEUE_BACKOFF_DELAY_MS_MAX, QUEUE_UNDELIVERED_KEYS_MAX};
        if self.backoff_schedule_ms.len() > QUEUE_BACKOFF_DELAYS_MAX {
            return Err(format!(
                "backoff_schedule has {} delays, over the limit queue_backoff_delays_max = {QUEUE_BACKOFF_DELAYS_MAX}",
                self.backoff_schedule_ms.len()
            ));
        }
        if let Some(delay) = self
            .backoff_schedule_ms
            .iter()
            .find(|delay| **delay > QUEUE_BACKOFF_DELAY_MS_MAX)
        {
            return Err(format!(
                "backoff_schedule holds {delay} ms, over the limit queue_backoff_delay_ms_max = {QUEUE_BACKOFF_DELAY_MS_MAX}"
            ));
        }
        if self.keys_if_undelivered.len() > QUEUE_UNDELIVERED_KEYS_MAX {
            return Err(format!(
                "keys_if_undelivered has {} keys, over the limit queue_undelivered_keys_max = {QUEUE_UNDELIVERED_KEYS_MAX}",
                self.keys_if_undelivered.len()
            ));
        }
        self.keys_if_undelivered
            .iter()
            .try_for_each(|key| limits::check_key(key).map_err(|message| format!("keys_if_undelivered: {message}")))
    }

    /// The delays in force: the message's own, or the default.
    pub fn schedule_ms(&self) -> &[u32] {
        if self.backoff_schedule_ms.is_empty() {
            &limits::QUEUE_BACKOFF_SCHEDULE_DEFAULT_MS
        } else {
            &self.backoff_schedule_ms
        }
    }
}

/// One delivery of a queue message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDelivery {
    pub id: MessageId,
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    pub encoding: Encoding,
    /// 1 for the first delivery, 2 for the first retry, and so on.
    pub attempt: u32,
}

/// What ending a delivery did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinishedAs {
    /// The message is done and gone.
    Delivered,
    /// It will be delivered again at this time.
    Retrying { deliver_at_micros: u64 },
    /// Every delivery failed: its payload went to its undelivered keys.
    DeadLettered,
    /// No claimed delivery has this id and attempt (already finished, or
    /// its claim ran out).
    NotClaimed,
}

/// How a `Counter` operation combines the stored value with its operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CounterKind {
    /// Wrapping addition.
    Sum,
    Min,
    Max,
}

impl CounterKind {
    /// Combines the stored value with the operand.
    pub fn combine(self, stored: u64, operand: u64) -> u64 {
        match self {
            CounterKind::Sum => stored.wrapping_add(operand),
            CounterKind::Min => stored.min(operand),
            CounterKind::Max => stored.max(operand),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CounterKind::Sum => "sum",
            CounterKind::Min => "min",
            CounterKind::Max => "max",
        }
    }
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
    /// The check held.
    Check,
    Enqueued {
        id: MessageId,
    },
    /// The claimed delivery, or none when no message is due.
    Claimed {
        delivery: Option<QueueDelivery>,
    },
    Finished {
        finished: FinishedAs,
    },
    Requeued {
        requeued: u32,
    },
    /// The counter's new value and version.
    Counter {
        version: u64,
        value: u64,
    },
    /// The V8 sum's version.
    SumV8 {
        version: u64,
    },
    /// The value before and after a state update (JSON text; `None`: the
    /// key was absent), the version written (`None` when every op failed and
    /// nothing was written), and the failed ops as a JSON array of
    /// [`state_update::UpdateOpError`].
    StateUpdated {
        version: Option<u64>,
        #[serde(with = "serde_bytes")]
        old_value: Option<Vec<u8>>,
        #[serde(with = "serde_bytes")]
        new_value: Vec<u8>,
        #[serde(with = "serde_bytes")]
        errors_json: Vec<u8>,
    },
    /// The removed live value and its encoding, if there was one.
    Taken {
        #[serde(with = "serde_bytes")]
        old_value: Option<Vec<u8>>,
        encoding: Option<Encoding>,
    },
}

impl Operation {
    /// Operations only the leader proposes (sweeps of expired entries,
    /// requeues of overdue deliveries); a client's write may not hold one.
    pub fn is_leader_only(&self) -> bool {
        matches!(self, Operation::SweepExpired { .. } | Operation::RequeueOverdue { .. })
    }

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
            Operation::Delete { namespace, key, .. }
            | Operation::Expire { namespace, key, .. }
            | Operation::Check { namespace, key, .. }
            | Operation::Counter { namespace, key, .. } => {
                check_namespace(namespace)?;
                check_key(key)
            }
            Operation::Take { namespace, key } => {
                check_namespace(namespace)?;
                check_key(key)
            }
            Operation::StateUpdate {
                namespace,
                key,
                ops_json,
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                check_value(ops_json).map_err(|message| message.replacen("value", "ops", 1))?;
                state_update::parse_ops(ops_json).map(|_| ())
            }
            Operation::SumV8 {
                namespace,
                key,
                operand,
                min,
                max,
                ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                for (field, bytes) in [("operand", Some(operand)), ("min", min.as_ref()), ("max", max.as_ref())] {
                    if let Some(bytes) = bytes {
                        if bytes.len() > limits::SUM_OPERAND_BYTES_MAX {
                            return Err(format!(
                                "the sum's {field} is {} bytes, over the limit sum_operand_bytes_max = {}",
                                bytes.len(),
                                limits::SUM_OPERAND_BYTES_MAX
                            ));
                        }
                    }
                }
                // The stored value is known only at apply; the operand and
                // bounds can be judged now, against an absent value.
                v8_number::sum(None, operand, min.as_deref(), max.as_deref(), false).map(|_| ())
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
            Operation::Enqueue { payload, options, .. } => {
                check_value(payload).map_err(|message| message.replacen("value", "payload", 1))?;
                options.validate()
            }
            Operation::ClaimMessage { visibility_ms } => {
                if *visibility_ms == 0 || *visibility_ms > limits::QUEUE_VISIBILITY_MS_MAX {
                    return Err(format!(
                        "visibility_ms must be 1 to queue_visibility_ms_max = {}",
                        limits::QUEUE_VISIBILITY_MS_MAX
                    ));
                }
                Ok(())
            }
            Operation::FinishMessage { .. } => Ok(()),
            Operation::RequeueOverdue { messages_max } => {
                if *messages_max == 0 || *messages_max > limits::QUEUE_REQUEUE_MESSAGES_MAX {
                    return Err(format!(
                        "messages_max must be 1 to queue_requeue_messages_max = {}",
                        limits::QUEUE_REQUEUE_MESSAGES_MAX
                    ));
                }
                Ok(())
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
            Operation::Delete { namespace, key, .. }
            | Operation::Expire { namespace, key, .. }
            | Operation::Check { namespace, key, .. }
            | Operation::Counter { namespace, key, .. }
            | Operation::Take { namespace, key } => namespace.len() + key.len(),
            Operation::StateUpdate {
                namespace,
                key,
                ops_json,
            } => namespace.len() + key.len() + ops_json.len(),
            Operation::SumV8 {
                namespace,
                key,
                operand,
                min,
                max,
                ..
            } => {
                namespace.len()
                    + key.len()
                    + operand.len()
                    + min.as_ref().map_or(0, Vec::len)
                    + max.as_ref().map_or(0, Vec::len)
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
            Operation::Enqueue { payload, options, .. } => {
                payload.len() + options.keys_if_undelivered.iter().map(Vec::len).sum::<usize>()
            }
            Operation::SweepExpired { .. }
            | Operation::ClaimMessage { .. }
            | Operation::FinishMessage { .. }
            | Operation::RequeueOverdue { .. } => 0,
        })
        .sum()
}
