//! The operations `POST /kv/v1/write` takes (`{"op": "set", …}`), the KV
//! family's own: set (also compare-and-swap and fenced), delete, expire,
//! patch, copy, move, delete_range, the lease calls and check; and what
//! each answers. Limits are checked where every other client's are, by
//! the SDK the gateway writes through and by the node.

use lode_client::protocol::{Fence, Operation, OperationResult, Precondition, Selector, SessionLink};
use lode_client::LodeError;
use serde::{Deserialize, Serialize};

use super::wire::{parse_encoding, WireBytes, WireU64};

/// A key's precondition, spelled as the SDKs' builders spell it.
struct Expectation {
    expect_version: Option<WireU64>,
    expect_absent: bool,
}

impl Expectation {
    fn precondition(&self) -> Result<Option<Precondition>, LodeError> {
        match (self.expect_version, self.expect_absent) {
            (Some(_), true) => Err(LodeError::Invalid(
                "expect_version and expect_absent exclude each other".to_owned(),
            )),
            (Some(version), false) => Ok(Some(Precondition::Version(version.0))),
            (None, true) => Ok(Some(Precondition::Absent)),
            (None, false) => Ok(None),
        }
    }
}

/// A fenced write's lease: its coordination namespace, key and token.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FenceJson {
    namespace: String,
    key: WireBytes,
    token: WireU64,
}

/// The keys a delete_range selects: at most one of a prefix, a range
/// (`start` included, `end` excluded) or a text the key contains; none
/// selects the whole namespace.
pub(super) struct SelectorJson {
    pub(super) prefix: Option<WireBytes>,
    pub(super) start: Option<WireBytes>,
    pub(super) end: Option<WireBytes>,
    pub(super) key_contains: Option<String>,
}

impl SelectorJson {
    pub(super) fn selector(self) -> Result<Selector, LodeError> {
        match (self.prefix, self.start, self.end, self.key_contains) {
            (None, None, None, None) => Ok(Selector::All),
            (Some(prefix), None, None, None) => Ok(Selector::Prefix(prefix.0)),
            (None, Some(start), Some(end), None) => Ok(Selector::Range {
                start: start.0,
                end: end.0,
            }),
            (None, None, None, Some(text)) => Ok(Selector::KeyContains(text)),
            (None, Some(_), None, None) | (None, None, Some(_), None) => Err(LodeError::Invalid(
                "a range needs both start (included) and end (excluded)".to_owned(),
            )),
            _ => Err(LodeError::Invalid(
                "select with one of prefix, start and end, or key_contains".to_owned(),
            )),
        }
    }
}

/// One operation of a write, named by its `op` field (read through
/// `wire::untag`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum OperationJson {
    Set {
        namespace: String,
        key: WireBytes,
        value: WireBytes,
        #[serde(default)]
        encoding: Option<String>,
        /// Expires this long after the gateway's member receives the write.
        #[serde(default)]
        ttl_micros: Option<WireU64>,
        #[serde(default)]
        expires_at_micros: Option<WireU64>,
        #[serde(default)]
        expect_version: Option<WireU64>,
        #[serde(default)]
        expect_absent: bool,
        #[serde(default)]
        fence: Option<FenceJson>,
        #[serde(default)]
        session: Option<SessionLink>,
    },
    Delete {
        namespace: String,
        key: WireBytes,
        #[serde(default)]
        session: Option<SessionLink>,
    },
    /// Neither `ttl_micros` nor `expires_at_micros`: the expiry is cleared.
    Expire {
        namespace: String,
        key: WireBytes,
        #[serde(default)]
        ttl_micros: Option<WireU64>,
        #[serde(default)]
        expires_at_micros: Option<WireU64>,
    },
    Patch {
        namespace: String,
        key: WireBytes,
        patch: WireBytes,
        #[serde(default)]
        session: Option<SessionLink>,
    },
    Copy {
        namespace: String,
        key: WireBytes,
        to_key: WireBytes,
        #[serde(default)]
        to_namespace: Option<String>,
    },
    Move {
        namespace: String,
        key: WireBytes,
        to_key: WireBytes,
        #[serde(default)]
        to_namespace: Option<String>,
    },
    DeleteRange {
        namespace: String,
        #[serde(default)]
        prefix: Option<WireBytes>,
        #[serde(default)]
        start: Option<WireBytes>,
        #[serde(default)]
        end: Option<WireBytes>,
        #[serde(default)]
        key_contains: Option<String>,
        /// Resume after this key (a result's `resume_after`).
        #[serde(default)]
        after: Option<WireBytes>,
        #[serde(default)]
        entries_max: Option<u32>,
    },
    AcquireLease {
        namespace: String,
        key: WireBytes,
        holder: String,
        ttl_micros: WireU64,
    },
    RenewLease {
        namespace: String,
        key: WireBytes,
        holder: String,
        token: WireU64,
        ttl_micros: WireU64,
    },
    ReleaseLease {
        namespace: String,
        key: WireBytes,
        holder: String,
        token: WireU64,
    },
    Check {
        namespace: String,
        key: WireBytes,
        #[serde(default)]
        expect_version: Option<WireU64>,
        #[serde(default)]
        expect_absent: bool,
    },
}

/// Entries a delete_range examines when `entries_max` is not given: the
/// SDKs' round size.
const DELETE_RANGE_ENTRIES_DEFAULT: u32 = lode_client::kv::DELETE_MANY_ENTRIES_PER_CALL;

/// An absolute expiry from a relative or an absolute one (not both);
/// `now_micros` is the member's clock.
fn expiry(
    ttl_micros: Option<WireU64>,
    expires_at_micros: Option<WireU64>,
    now_micros: u64,
) -> Result<Option<u64>, LodeError> {
    match (ttl_micros, expires_at_micros) {
        (Some(_), Some(_)) => Err(LodeError::Invalid(
            "ttl_micros and expires_at_micros exclude each other".to_owned(),
        )),
        (Some(ttl), None) => Ok(Some(now_micros.saturating_add(ttl.0))),
        (None, Some(at)) => Ok(Some(at.0)),
        (None, None) => Ok(None),
    }
}

impl OperationJson {
    /// The protocol operation; `now_micros` turns a TTL into an expiry.
    pub(super) fn operation(self, now_micros: u64) -> Result<Operation, LodeError> {
        Ok(match self {
            OperationJson::Set {
                namespace,
                key,
                value,
                encoding,
                ttl_micros,
                expires_at_micros,
                expect_version,
                expect_absent,
                fence,
                session,
            } => {
                let precondition = Expectation {
                    expect_version,
                    expect_absent,
                }
                .precondition()?;
                if fence.is_some() && precondition.is_none() {
                    return Err(LodeError::Invalid(
                        "a fenced set needs expect_version or expect_absent".to_owned(),
                    ));
                }
                Operation::Set {
                    namespace,
                    key: key.0,
                    value: value.0,
                    encoding: parse_encoding(encoding.as_deref().unwrap_or("bytes")).map_err(LodeError::Invalid)?,
                    expires_at_micros: expiry(ttl_micros, expires_at_micros, now_micros)?,
                    precondition,
                    fence: fence.map(|fence| Fence {
                        namespace: fence.namespace,
                        key: fence.key.0,
                        token: fence.token.0,
                    }),
                    session,
                }
            }
            OperationJson::Delete {
                namespace,
                key,
                session,
            } => Operation::Delete {
                namespace,
                key: key.0,
                session,
            },
            OperationJson::Expire {
                namespace,
                key,
                ttl_micros,
                expires_at_micros,
            } => Operation::Expire {
                namespace,
                key: key.0,
                expires_at_micros: expiry(ttl_micros, expires_at_micros, now_micros)?,
            },
            OperationJson::Patch {
                namespace,
                key,
                patch,
                session,
            } => Operation::Patch {
                namespace,
                key: key.0,
                patch: patch.0,
                session,
            },
            OperationJson::Copy {
                namespace,
                key,
                to_key,
                to_namespace,
            } => copy(namespace, key, to_key, to_namespace, false),
            OperationJson::Move {
                namespace,
                key,
                to_key,
                to_namespace,
            } => copy(namespace, key, to_key, to_namespace, true),
            OperationJson::DeleteRange {
                namespace,
                prefix,
                start,
                end,
                key_contains,
                after,
                entries_max,
            } => Operation::DeleteRange {
                namespace,
                selector: SelectorJson {
                    prefix,
                    start,
                    end,
                    key_contains,
                }
                .selector()?,
                after: after.map(|after| after.0),
                entries_max: entries_max.unwrap_or(DELETE_RANGE_ENTRIES_DEFAULT),
            },
            OperationJson::AcquireLease {
                namespace,
                key,
                holder,
                ttl_micros,
            } => Operation::AcquireLease {
                namespace,
                key: key.0,
                holder,
                ttl_micros: ttl_micros.0,
            },
            OperationJson::RenewLease {
                namespace,
                key,
                holder,
                token,
                ttl_micros,
            } => Operation::RenewLease {
                namespace,
                key: key.0,
                holder,
                token: token.0,
                ttl_micros: ttl_micros.0,
            },
            OperationJson::ReleaseLease {
                namespace,
                key,
                holder,
                token,
            } => Operation::ReleaseLease {
                namespace,
                key: key.0,
                holder,
                token: token.0,
            },
            OperationJson::Check {
                namespace,
                key,
                expect_version,
                expect_absent,
            } => Operation::Check {
                namespace,
                key: key.0,
                precondition: Expectation {
                    expect_version,
                    expect_absent,
                }
                .precondition()?
                .ok_or_else(|| LodeError::Invalid("a check needs expect_version or expect_absent".to_owned()))?,
            },
        })
    }
}

fn copy(
    namespace: String,
    key: WireBytes,
    to_key: WireBytes,
    to_namespace: Option<String>,
    remove_source: bool,
) -> Operation {
    Operation::Copy {
        to_namespace: to_namespace.unwrap_or_else(|| namespace.clone()),
        namespace,
        key: key.0,
        to_key: to_key.0,
        remove_source,
    }
}

/// What one operation answered (`copy` for a move too).
#[derive(Debug, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(super) enum ResultJson {
    Set {
        version: WireU64,
    },
    Delete {
        removed_live_entry: bool,
    },
    Expire {
        version: WireU64,
    },
    Patch {
        version: WireU64,
    },
    Copy {
        version: WireU64,
    },
    DeleteRange {
        removed: u32,
        resume_after: Option<WireBytes>,
    },
    AcquireLease {
        token: WireU64,
        ttl_micros: WireU64,
        expires_at_micros: WireU64,
    },
    RenewLease {
        token: WireU64,
        ttl_micros: WireU64,
        expires_at_micros: WireU64,
    },
    ReleaseLease {
        released: bool,
    },
    Check,
}

impl ResultJson {
    /// The JSON of a KV operation's result; another kind is a server bug,
    /// reported as `unavailable`.
    pub(super) fn from_result(result: OperationResult) -> Result<Self, LodeError> {
        Ok(match result {
            OperationResult::Set { version } => ResultJson::Set {
                version: WireU64(version),
            },
            OperationResult::Delete { removed_live_entry } => ResultJson::Delete { removed_live_entry },
            OperationResult::Expire { version } => ResultJson::Expire {
                version: WireU64(version),
            },
            OperationResult::Patch { version } => ResultJson::Patch {
                version: WireU64(version),
            },
            OperationResult::Copy { version } => ResultJson::Copy {
                version: WireU64(version),
            },
            OperationResult::DeleteRange { removed, resume_after } => ResultJson::DeleteRange {
                removed,
                resume_after: resume_after.map(WireBytes),
            },
            OperationResult::AcquireLease {
                token,
                ttl_micros,
                expires_at_micros,
            } => ResultJson::AcquireLease {
                token: WireU64(token),
                ttl_micros: WireU64(ttl_micros),
                expires_at_micros: WireU64(expires_at_micros),
            },
            OperationResult::RenewLease {
                token,
                ttl_micros,
                expires_at_micros,
            } => ResultJson::RenewLease {
                token: WireU64(token),
                ttl_micros: WireU64(ttl_micros),
                expires_at_micros: WireU64(expires_at_micros),
            },
            OperationResult::ReleaseLease { released } => ResultJson::ReleaseLease { released },
            OperationResult::Check => ResultJson::Check,
            other => {
                return Err(LodeError::Unavailable(format!(
                    "the server answered a KV operation with {other:?}"
                )))
            }
        })
    }
}
