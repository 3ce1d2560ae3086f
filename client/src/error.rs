//! The one error kind set on the wire, used by every API.

use serde::{Deserialize, Serialize};

/// What a caller should do after a mutation whose outcome is unknown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MutationRecovery {
    /// The mutation carried an op id that the cluster remembers for the
    /// dedup retention window: send the same mutation (same op id) again
    /// and the cluster applies it at most once.
    RetrySameOperation { op_id: u128 },
    /// Send the same prepared mutation again: it carries the same op id and
    /// bytes, so the cluster applies it at most once.
    RepeatPrepared,
    /// A lease acquisition: any grant it made has expired once the
    /// requested TTL has passed; acquire again after that.
    WaitOutLeaseTtl { ttl_micros: u64 },
}

/// A leader a follower knows of, for the SDK to follow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderHint {
    pub id: u64,
    pub address: String,
}

/// Every failure a Lode API reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum LodeError {
    /// The request broke a limit or was malformed; the message names the
    /// field and the limit. Nothing was proposed.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The addressed entry, member or resource does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A precondition named a version that is no longer current.
    #[error("version conflict: {}", current_version(.current))]
    VersionConflict { current: Option<u64> },
    /// The caller's lease is no longer held or its token is stale.
    #[error("lease lost")]
    LeaseLost,
    /// The serving replica did not reach the requested position in time;
    /// retrying later or elsewhere may succeed.
    #[error("stale: applied position {applied} has not reached {wanted}")]
    Stale { applied: u64, wanted: u64 },
    /// The server lacks a capability the call needs.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The mutation may or may not have been applied.
    #[error("ambiguous mutation: {detail}; to recover, {recovery}")]
    AmbiguousMutation { recovery: MutationRecovery, detail: String },
    /// The node is not the leader; `hint` names the leader it knows of.
    #[error("not leader ({})", leader_hint(.hint))]
    NotLeader { hint: Option<LeaderHint> },
    /// No node could serve the request now (no quorum, no leader, transport
    /// down); retryable.
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("unauthorized")]
    Unauthorized,
    /// The request did not finish within its time limit.
    #[error("timeout: {0}")]
    Timeout(String),
    /// A requested change log position is older than what is retained;
    /// reading after `trimmed_through` is possible.
    #[error(
        "compacted: changes after {}.{} were trimmed through {}.{}",
        .requested.0, .requested.1, .trimmed_through.0, .trimmed_through.1
    )]
    Compacted {
        requested: (u64, u32),
        trimmed_through: (u64, u32),
    },
    /// A version conflict of an atomic write's checks (Deno KV's
    /// `check`): `indexes` are the places, among the write's checks, of
    /// every check that did not hold. Nothing was applied.
    #[error("version conflict: {} failed", checks_text(.indexes))]
    ChecksFailed { indexes: Vec<u32> },
    /// The caller's grants do not allow `operation` on `namespace`.
    /// Nothing was proposed.
    #[error("forbidden: {operation} needs {access} on namespace {namespace:?}")]
    Forbidden {
        operation: String,
        namespace: String,
        access: String,
    },
    /// The write would grow the state past the leader's storage quota.
    /// Nothing was proposed. Deletes still work, and writes are accepted
    /// again by themselves once compaction reclaims the space.
    #[error(
        "quota exceeded: the state holds {used_bytes} bytes of its {quota_bytes}-byte quota (storage_bytes_max); \
         delete data, and writes resume once its space is reclaimed"
    )]
    QuotaExceeded { quota_bytes: u64, used_bytes: u64 },
    /// Between members: this member holds no cluster state and no leader
    /// admitted it yet, so it takes no part in Raft (a member whose data
    /// was lost must not vote or acknowledge entries as the voter it was).
    #[error(
        "member {member} holds no cluster state and was not admitted: the leader makes it a learner \
         before it takes part"
    )]
    NotAdmitted { member: u64 },
    /// The write may grow the state and the leader's data volume has less
    /// free space than its reserve. Nothing was proposed; deletes still
    /// work, and writes are accepted again by themselves once space
    /// returns (read every second).
    #[error(
        "disk full: member {member}'s data volume has {free_bytes} bytes free, under its reserve of \
         {reserve_bytes} bytes (disk_free_bytes_min); free space or grow the volume, and writes resume"
    )]
    DiskFull {
        member: u64,
        free_bytes: u64,
        reserve_bytes: u64,
    },
}

impl std::fmt::Display for MutationRecovery {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MutationRecovery::RetrySameOperation { op_id } => {
                write!(formatter, "send the same mutation again with op id {op_id:032x}")
            }
            MutationRecovery::RepeatPrepared => formatter.write_str("send the same prepared mutation again"),
            MutationRecovery::WaitOutLeaseTtl { ttl_micros } => write!(
                formatter,
                "wait out the lease's TTL of {} ms, then acquire again",
                ttl_micros.div_ceil(1000)
            ),
        }
    }
}

fn current_version(current: &Option<u64>) -> String {
    match current {
        Some(version) => format!("the current version is {version}"),
        None => "the key is absent".to_owned(),
    }
}

fn leader_hint(hint: &Option<LeaderHint>) -> String {
    match hint {
        Some(hint) if hint.address.is_empty() => format!("the leader is member {}", hint.id),
        Some(hint) => format!("the leader is member {} at {}", hint.id, hint.address),
        None => "no leader is known".to_owned(),
    }
}

fn checks_text(indexes: &[u32]) -> String {
    let listed: Vec<String> = indexes.iter().map(u32::to_string).collect();
    match listed.len() {
        1 => format!("check {}", listed[0]),
        _ => format!("checks {}", listed.join(", ")),
    }
}

impl LodeError {
    pub fn is_invalid(&self) -> bool {
        matches!(self, LodeError::Invalid(_))
    }
    pub fn is_not_found(&self) -> bool {
        matches!(self, LodeError::NotFound(_))
    }
    pub fn is_version_conflict(&self) -> bool {
        matches!(self, LodeError::VersionConflict { .. } | LodeError::ChecksFailed { .. })
    }
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, LodeError::LeaseLost)
    }
    pub fn is_stale(&self) -> bool {
        matches!(self, LodeError::Stale { .. })
    }
    pub fn is_forbidden(&self) -> bool {
        matches!(self, LodeError::Forbidden { .. })
    }
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, LodeError::Unauthorized)
    }
    pub fn is_quota_exceeded(&self) -> bool {
        matches!(self, LodeError::QuotaExceeded { .. } | LodeError::DiskFull { .. })
    }
    pub fn is_compacted(&self) -> bool {
        matches!(self, LodeError::Compacted { .. })
    }
    pub fn is_ambiguous_mutation(&self) -> bool {
        matches!(self, LodeError::AmbiguousMutation { .. })
    }
    /// The recovery action of an ambiguous mutation.
    pub fn ambiguous_recovery(&self) -> Option<&MutationRecovery> {
        match self {
            LodeError::AmbiguousMutation { recovery, .. } => Some(recovery),
            _ => None,
        }
    }
    /// Errors after which the same request may succeed on another try or
    /// another node.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LodeError::NotLeader { .. } | LodeError::Unavailable(_) | LodeError::Stale { .. }
        )
    }
}

/// The error for an answer of the wrong kind: a server bug, reported rather
/// than trusted.
pub(crate) fn unexpected(what: &str, answer: &impl std::fmt::Debug) -> LodeError {
    LodeError::Unavailable(format!("the server answered {what} with {answer:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_sentences_without_rust_debug_text() {
        let cases = [
            (LodeError::VersionConflict { current: Some(8) }, "version conflict: the current version is 8"),
            (LodeError::VersionConflict { current: None }, "version conflict: the key is absent"),
            (LodeError::NotLeader { hint: None }, "not leader (no leader is known)"),
            (
                LodeError::NotLeader {
                    hint: Some(LeaderHint {
                        id: 2,
                        address: "127.0.0.1:7102".to_owned(),
                    }),
                },
                "not leader (the leader is member 2 at 127.0.0.1:7102)",
            ),
            (
                LodeError::Compacted {
                    requested: (5, 0),
                    trimmed_through: (90, 3),
                },
                "compacted: changes after 5.0 were trimmed through 90.3",
            ),
            (LodeError::ChecksFailed { indexes: vec![0, 2] }, "version conflict: checks 0, 2 failed"),
            (
                LodeError::AmbiguousMutation {
                    recovery: MutationRecovery::WaitOutLeaseTtl { ttl_micros: 30_000_000 },
                    detail: "the leader changed".to_owned(),
                },
                "ambiguous mutation: the leader changed; to recover, wait out the lease's TTL of 30000 ms, then acquire again",
            ),
        ];
        for (error, expected) in cases {
            let text = error.to_string();
            assert_eq!(text, expected);
            assert!(!text.contains("Some(") && !text.contains('['), "{text}");
        }
    }
}
