//! Between the wire and the state machine: the two share their operation
//! types (`lode-types`), so what is left is wrapping a write into a command
//! and turning stored entries and refusals into their wire forms.

use lode_client::protocol::{self as wire};
use lode_client::LodeError;
use lode_raft_store::command::{OperationResult, Rejection};
use lode_raft_store::StoredEntry;

/// Grants at most `ttl_micros_max` to every lease acquisition and renewal
/// of a write, before it is proposed: the granted TTL is decided once, by
/// the leader, and logged.
pub fn cap_lease_ttls(operations: &mut [wire::Operation], ttl_micros_max: u64) {
    for operation in operations {
        if let wire::Operation::AcquireLease { ttl_micros, .. } | wire::Operation::RenewLease { ttl_micros, .. } =
            operation
        {
            *ttl_micros = (*ttl_micros).min(ttl_micros_max);
        }
    }
}

pub fn rejection_to_wire(rejection: Rejection) -> LodeError {
    match rejection {
        Rejection::Invalid(message) => LodeError::Invalid(message),
        Rejection::VersionConflict { current, .. } => LodeError::VersionConflict { current },
        Rejection::NotFound(message) => LodeError::NotFound(message),
        Rejection::LeaseLost(_) => LodeError::LeaseLost,
        Rejection::ChecksFailed { indexes } => LodeError::ChecksFailed { indexes },
        Rejection::AnswerCompacted { index, trimmed_through } => LodeError::Compacted {
            requested: (index, 0),
            trimmed_through,
        },
        // Retryable: the member that took the write checks it again.
        changed @ Rejection::GrantsChanged { .. } => LodeError::Unavailable(format!("retry: {changed}")),
    }
}

/// Results for the client: sweeps are the leader's own and never answer one.
pub fn results_to_wire(results: Vec<OperationResult>) -> Result<Vec<OperationResult>, LodeError> {
    if results
        .iter()
        .any(|result| matches!(result, OperationResult::SweepExpired { .. }))
    {
        return Err(LodeError::Invalid("sweep results never answer a client".to_owned()));
    }
    Ok(results)
}

pub fn entry_to_wire(key: Vec<u8>, entry: StoredEntry) -> wire::Entry {
    wire::Entry {
        key,
        value: entry.value,
        encoding: entry.encoding,
        version: entry.version,
        expires_at_micros: entry.expires_at_micros,
        source_term: entry.source.term,
        source_index: entry.source.index,
        session: entry.session,
    }
}
