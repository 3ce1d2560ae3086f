//! The operations of an atomic write and what each asks of the rest of
//! Lode in one place: the namespaces it touches, the keys it writes, its
//! size, whether only the leader proposes it (validation is
//! `validation.rs`). Operations are stored in the Raft log: new shapes are
//! new variants appended at the end, never changes to old ones.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::encoding::Encoding;
use crate::limits;
use crate::queue::EnqueueOptions;
use crate::MessageId;

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

/// A lease that must be held, with this token, for a fenced write to apply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The coordination namespace of the lease.
    pub namespace: String,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    pub token: u64,
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
    /// The name permission checks give the links of this session's stream:
    /// writing with a link needs `write` on it, listing a session's keys
    /// `read`. It starts with NUL, so no user namespace is it; a grant names
    /// it as `\0session\0<stream>` (see `auth::Grant::parse`).
    pub fn grant_namespace(&self) -> String {
        format!("{SESSION_GRANT_PREFIX}{}", self.stream)
    }

    /// Checks the link's names against their limits.
    pub fn validate(&self) -> Result<(), String> {
        limits::check_name("session stream", &self.stream)?;
        limits::check_name("session id", &self.session_id)
    }
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
    /// A change of users, roles or tokens (`crate::auth`).
    Auth { change: crate::auth::AuthChange },
}

impl Operation {
    /// The operation's name in messages and metrics labels.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Set { .. } => "set",
            Operation::Delete { .. } => "delete",
            Operation::SweepExpired { .. } => "sweep_expired",
            Operation::Expire { .. } => "expire",
            Operation::Patch { .. } => "patch",
            Operation::Copy { .. } => "copy",
            Operation::DeleteRange { .. } => "delete_range",
            Operation::AcquireLease { .. } => "acquire_lease",
            Operation::RenewLease { .. } => "renew_lease",
            Operation::ReleaseLease { .. } => "release_lease",
            Operation::Check { .. } => "check",
            Operation::Enqueue { .. } => "enqueue",
            Operation::ClaimMessage { .. } => "claim_message",
            Operation::FinishMessage { .. } => "finish_message",
            Operation::RequeueOverdue { .. } => "requeue_overdue",
            Operation::StateUpdate { .. } => "state_update",
            Operation::Take { .. } => "take",
            Operation::SumV8 { .. } => "sum_v8",
            Operation::Counter { .. } => "counter",
            Operation::Auth { .. } => "auth",
        }
    }

    /// Whether the operation may add to the stored state, so a member over
    /// its storage quota refuses it. Removals, releases, renewals, expiry
    /// changes, checks, the queue's claims and finishes and auth changes
    /// keep working over the quota: they are how space is reclaimed, and
    /// refusing them would wedge locks and queues.
    pub fn grows_state(&self) -> bool {
        match self {
            Operation::Set { .. }
            | Operation::Patch { .. }
            | Operation::Copy { .. }
            | Operation::AcquireLease { .. }
            | Operation::Enqueue { .. }
            | Operation::StateUpdate { .. }
            | Operation::Counter { .. }
            | Operation::SumV8 { .. } => true,
            Operation::Delete { .. }
            | Operation::SweepExpired { .. }
            | Operation::Expire { .. }
            | Operation::DeleteRange { .. }
            | Operation::RenewLease { .. }
            | Operation::ReleaseLease { .. }
            | Operation::Check { .. }
            | Operation::ClaimMessage { .. }
            | Operation::FinishMessage { .. }
            | Operation::RequeueOverdue { .. }
            | Operation::Take { .. }
            | Operation::Auth { .. } => false,
        }
    }

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

    /// Bytes of namespaces, keys and values the operation carries.
    pub fn size_bytes(&self) -> usize {
        match self {
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
            Operation::Auth { change } => change.size_bytes(),
        }
    }

    /// The namespaces the operation reads or writes, for a permission
    /// check per namespace. The queue is [`QUEUE_NAMESPACE`]; the leader's
    /// own sweeps and requeues touch none a client could name.
    pub fn namespaces(&self) -> Vec<NamespaceAccess<'_>> {
        let mut touched = self.namespaces_of_data();
        if let Some(session) = self.session() {
            touched.push(NamespaceAccess {
                namespace: Cow::Owned(session.grant_namespace()),
                access: Access::Write,
            });
        }
        touched
    }

    fn namespaces_of_data(&self) -> Vec<NamespaceAccess<'_>> {
        use Access::{Read, Write};
        fn one(namespace: &str, access: Access) -> Vec<NamespaceAccess<'_>> {
            vec![NamespaceAccess {
                namespace: Cow::Borrowed(namespace),
                access,
            }]
        }
        match self {
            Operation::Set { namespace, fence, .. } => {
                let mut touched = one(namespace, Write);
                if let Some(fence) = fence {
                    touched.push(NamespaceAccess {
                        namespace: Cow::Borrowed(&fence.namespace),
                        access: Read,
                    });
                }
                touched
            }
            Operation::Delete { namespace, .. }
            | Operation::Expire { namespace, .. }
            | Operation::Patch { namespace, .. }
            | Operation::DeleteRange { namespace, .. }
            | Operation::AcquireLease { namespace, .. }
            | Operation::RenewLease { namespace, .. }
            | Operation::ReleaseLease { namespace, .. }
            | Operation::StateUpdate { namespace, .. }
            | Operation::Take { namespace, .. }
            | Operation::SumV8 { namespace, .. }
            | Operation::Counter { namespace, .. } => one(namespace, Write),
            Operation::Check { namespace, .. } => one(namespace, Read),
            Operation::Copy {
                namespace,
                to_namespace,
                remove_source,
                ..
            } => {
                let mut touched = one(namespace, if *remove_source { Write } else { Read });
                touched.push(NamespaceAccess {
                    namespace: Cow::Borrowed(to_namespace),
                    access: Write,
                });
                touched
            }
            Operation::Enqueue { options, .. } => {
                let mut touched = one(QUEUE_NAMESPACE, Write);
                if !options.keys_if_undelivered.is_empty() {
                    touched.push(NamespaceAccess {
                        namespace: Cow::Borrowed(crate::DENO_NAMESPACE),
                        access: Write,
                    });
                }
                touched
            }
            Operation::ClaimMessage { .. } | Operation::FinishMessage { .. } => one(QUEUE_NAMESPACE, Write),
            Operation::SweepExpired { .. } | Operation::RequeueOverdue { .. } => Vec::new(),
            Operation::Auth { .. } => one(crate::auth::AUTH_NAMESPACE, Access::Admin),
        }
    }

    /// The keys the operation may write, for the proposer's grouping (no
    /// two commands of one log entry write one key), or `None` when they
    /// are known only at apply (sweeps, range deletes, failed finishes of
    /// queue messages): such a command is proposed alone.
    pub fn written_keys(&self) -> Option<Vec<WrittenKey<'_>>> {
        let entry = |namespace, key| WrittenKey::Entry { namespace, key };
        let mut written = Vec::new();
        if let (
            Some(session),
            Operation::Set { namespace, key, .. }
            | Operation::Delete { namespace, key, .. }
            | Operation::Patch { namespace, key, .. },
        ) = (self.session(), self)
        {
            written.push(WrittenKey::SessionIndex {
                session,
                namespace,
                key,
            });
        }
        match self {
            Operation::Set { namespace, key, .. }
            | Operation::Delete { namespace, key, .. }
            | Operation::Expire { namespace, key, .. }
            | Operation::Patch { namespace, key, .. }
            | Operation::Counter { namespace, key, .. }
            | Operation::SumV8 { namespace, key, .. }
            | Operation::StateUpdate { namespace, key, .. }
            | Operation::Take { namespace, key } => written.push(entry(namespace, key)),
            // A check writes nothing; an enqueue writes a key no other
            // command can name (its id holds the entry's index). A claim
            // writes the keys of the message it takes, and a delivered
            // finish those of the message it names, which no other command
            // of the entry writes: a claim or finish passes over a message
            // an earlier command of its entry wrote (the state machine's
            // `apply/queue.rs`), and a second finish of one message finds
            // it finished and writes nothing.
            Operation::Check { .. }
            | Operation::Enqueue { .. }
            | Operation::ClaimMessage { .. }
            | Operation::FinishMessage { delivered: true, .. } => {}
            // A failed delivery may be written to the message's undelivered
            // keys, which only the stored message names.
            Operation::FinishMessage { delivered: false, .. }
            | Operation::RequeueOverdue { .. }
            | Operation::SweepExpired { .. }
            | Operation::DeleteRange { .. }
            | Operation::Auth { .. } => return None,
            Operation::Copy {
                namespace,
                key,
                to_namespace,
                to_key,
                remove_source,
            } => {
                written.push(entry(to_namespace, to_key));
                if *remove_source {
                    written.push(entry(namespace, key));
                }
            }
            Operation::AcquireLease { namespace, key, .. }
            | Operation::RenewLease { namespace, key, .. }
            | Operation::ReleaseLease { namespace, key, .. } => written.push(WrittenKey::Lease { namespace, key }),
        }
        Some(written)
    }
}

/// Whether an operation reads, writes or administers a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    /// Changes who may use it: only the auth namespace is touched so.
    Admin,
}

/// One namespace an operation touches, and how. Most are the operation's
/// own; a session link's is made from its stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceAccess<'o> {
    pub namespace: Cow<'o, str>,
    pub access: Access,
}

/// The name permission checks give the queue. No user namespace starts
/// with NUL, so it cannot be confused with one.
pub const QUEUE_NAMESPACE: &str = "\0queue";

/// The start of the names permission checks give session links, one per
/// stream ([`SessionLink::grant_namespace`]).
pub const SESSION_GRANT_PREFIX: &str = "\0session\0";

/// A key an operation writes, by what it is; the state machine lays each
/// out in its own stored form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrittenKey<'o> {
    /// An entry of a namespace.
    Entry { namespace: &'o str, key: &'o [u8] },
    /// The lease at (`namespace`, `key`).
    Lease { namespace: &'o str, key: &'o [u8] },
    /// The session index record of a write with a session.
    SessionIndex {
        session: &'o SessionLink,
        namespace: &'o str,
        key: &'o [u8],
    },
}

impl Selector {
    /// Checks the bounds against the key limit; an empty prefix or text
    /// selects everything and is allowed.
    pub fn validate(&self) -> Result<(), String> {
        use crate::limits::KEY_BYTES_MAX;
        let check = |field: &str, length: usize| {
            if length > KEY_BYTES_MAX {
                Err(limits::over_limit(
                    field,
                    limits::bytes(length),
                    "key_bytes_max",
                    KEY_BYTES_MAX,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn set(namespace: &str, fence: Option<Fence>) -> Operation {
        Operation::Set {
            namespace: namespace.to_owned(),
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            encoding: Encoding::Bytes,
            expires_at_micros: None,
            precondition: Some(Precondition::Absent),
            fence,
            session: None,
        }
    }

    /// What a permission check per operation will be: one loop.
    fn allowed(operation: &Operation, may: impl Fn(&str, Access) -> bool) -> bool {
        operation
            .namespaces()
            .iter()
            .all(|touched| may(&touched.namespace, touched.access))
    }

    #[test]
    fn each_operation_names_the_namespaces_it_reads_and_writes() {
        let fence = Fence {
            namespace: "locks".to_owned(),
            key: b"l".to_vec(),
            token: 3,
        };
        let fenced = set("config", Some(fence));
        let read = |namespace| NamespaceAccess {
            namespace: Cow::Borrowed(namespace),
            access: Access::Read,
        };
        let write = |namespace| NamespaceAccess {
            namespace: Cow::Borrowed(namespace),
            access: Access::Write,
        };
        assert_eq!(fenced.namespaces(), vec![write("config"), read("locks")]);
        let moved = Operation::Copy {
            namespace: "a".to_owned(),
            key: b"k".to_vec(),
            to_namespace: "b".to_owned(),
            to_key: b"k".to_vec(),
            remove_source: true,
        };
        assert_eq!(moved.namespaces(), vec![write("a"), write("b")]);
        let enqueue = Operation::Enqueue {
            payload: Vec::new(),
            encoding: Encoding::Bytes,
            options: EnqueueOptions {
                deliver_at_micros: 0,
                backoff_schedule_ms: Vec::new(),
                keys_if_undelivered: vec![b"u".to_vec()],
            },
        };
        assert_eq!(
            enqueue.namespaces(),
            vec![write(QUEUE_NAMESPACE), write(crate::DENO_NAMESPACE)]
        );
        assert_eq!(Operation::SweepExpired { entries_max: 1 }.namespaces(), vec![]);
        let linked = Operation::Delete {
            namespace: "orders".to_owned(),
            key: b"k".to_vec(),
            session: Some(SessionLink {
                stream: "checkout".to_owned(),
                session_id: "s1".to_owned(),
            }),
        };
        assert_eq!(linked.namespaces(), vec![write("orders"), write("\0session\0checkout")]);

        // Read-only access to "locks" is enough for the fence, not for "config".
        let reader_of_locks = |namespace: &str, access| namespace == "locks" || access == Access::Read;
        assert!(!allowed(&fenced, reader_of_locks));
        assert!(allowed(&fenced, |namespace, _| ["config", "locks"].contains(&namespace)));
    }

    #[test]
    fn written_keys_are_unknown_only_where_apply_decides_them() {
        let lease = Operation::AcquireLease {
            namespace: "locks".to_owned(),
            key: b"l".to_vec(),
            holder: "h".to_owned(),
            ttl_micros: 1,
        };
        assert_eq!(
            lease.written_keys(),
            Some(vec![WrittenKey::Lease {
                namespace: "locks",
                key: b"l"
            }])
        );
        assert_eq!(
            Operation::ClaimMessage { visibility_ms: 1 }.written_keys(),
            Some(vec![])
        );
        let finish = |delivered| Operation::FinishMessage {
            id: MessageId { index: 7, sequence: 0 },
            attempt: 1,
            delivered,
        };
        assert_eq!(finish(true).written_keys(), Some(vec![]));
        assert_eq!(finish(false).written_keys(), None);
        assert_eq!(Operation::RequeueOverdue { messages_max: 1 }.written_keys(), None);
        let check = Operation::Check {
            namespace: "n".to_owned(),
            key: b"k".to_vec(),
            precondition: Precondition::Absent,
        };
        assert_eq!(check.written_keys(), Some(vec![]));
        assert_eq!(set("n", None).size_bytes(), 3);
    }
}
