//! Fencing safety: a fenced write is accepted only for the current token
//! (no later grant came between the token's grant and the write), and the
//! accepted writes of two tokens never interleave (tokens never go back in
//! log order).
//!
//! The accepted writes come from the change log of the guarded key, so
//! writes whose answer was lost count too; grants are the acknowledged ones
//! (a grant whose answer was lost waited out its TTL unused).

use lode_types::ChangeKind;

use crate::history::History;
use crate::simulation::ReplicaState;
use crate::workload::{token_of, GUARDED_KEY, NAMESPACE};

pub fn check(history: &History, replicas: &[ReplicaState]) -> Result<(), String> {
    let Some(replica) = replicas.first() else {
        return Ok(());
    };
    let mut grants: Vec<u64> = history.grants.iter().map(|grant| grant.token).collect();
    grants.sort_unstable();
    let mut previous: Option<(u64, u64)> = None;
    for event in &replica.changes {
        if event.namespace != NAMESPACE || event.key != GUARDED_KEY.as_bytes() || event.kind == ChangeKind::Deleted {
            continue;
        }
        let value = String::from_utf8_lossy(event.new_value.as_deref().unwrap_or_default()).into_owned();
        let Some(token) = token_of(&value) else {
            return Err(format!(
                "guarded value {value:?} at index {} names no token",
                event.index
            ));
        };
        if token >= event.index {
            return Err(format!(
                "write {value:?} at index {} carries token {token}, which was not granted before it",
                event.index
            ));
        }
        if let Some(later) = grants.iter().find(|grant| **grant > token && **grant < event.index) {
            return Err(format!(
                "write {value:?} with token {token} was accepted at index {}, after the lease was granted \
                 again with token {later}",
                event.index
            ));
        }
        if let Some((previous_token, previous_index)) = previous {
            if token < previous_token {
                return Err(format!(
                    "write with token {token} at index {} follows a write with token {previous_token} at \
                     index {previous_index}",
                    event.index
                ));
            }
        }
        previous = Some((token, event.index));
    }
    Ok(())
}
