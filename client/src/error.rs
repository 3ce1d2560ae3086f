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
    #[error("version conflict: current version is {current:?}")]
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
    #[error("ambiguous mutation: {detail}; recovery: {recovery:?}")]
    AmbiguousMutation { recovery: MutationRecovery, detail: String },
    /// The node is not the leader; `hint` names the leader it knows of.
    #[error("not leader (leader hint: {hint:?})")]
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
    #[error("compacted: changes after {requested:?} were trimmed through {trimmed_through:?}")]
    Compacted {
        requested: (u64, u32),
        trimmed_through: (u64, u32),
    },
    /// A version conflict of an atomic write's checks (Deno KV's
    /// `check`): `indexes` are the places, among the write's checks, of
    /// every check that did not hold. Nothing was applied.
    #[error("version conflict: checks {indexes:?} failed")]
    ChecksFailed { indexes: Vec<u32> },
    /// The caller's grants do not allow `operation` on `namespace`.
    /// Nothing was proposed.
    #[error("forbidden: {operation} needs {access} on namespace {namespace:?}")]
    Forbidden {
        operation: String,
        namespace: String,
        access: String,
    },
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
