//! No acknowledged write is lost: every write a client saw succeed is in
//! the replicated history (the change log) at the version it was told, with
//! its value, on every replica; every granted lease token was a real grant.

use crate::history::{History, Outcome};
use crate::simulation::ReplicaState;
use crate::workload::{GUARDED_KEY, NAMESPACE};

pub fn check(history: &History, replicas: &[ReplicaState]) -> Result<(), String> {
    let acknowledged = history
        .operations
        .iter()
        .filter_map(|operation| match (&operation.outcome, operation.call.written_value()) {
            (Outcome::Written { version }, Some(value)) => Some((operation.call.key(), value, *version)),
            _ => None,
        })
        .chain(history.fenced_writes.iter().filter_map(|write| match write.outcome {
            Outcome::Written { version } => Some((GUARDED_KEY, write.value.as_str(), version)),
            _ => None,
        }));
    let acknowledged: Vec<(&str, &str, u64)> = acknowledged.collect();
    for replica in replicas {
        if replica.changes_trimmed {
            return Err(format!(
                "member {}'s change log was trimmed; raise the run's change log limits",
                replica.id
            ));
        }
        for (key, value, version) in &acknowledged {
            let found = replica.changes.iter().any(|event| {
                event.namespace == NAMESPACE
                    && event.key == key.as_bytes()
                    && event.index == *version
                    && event.new_value.as_deref() == Some(value.as_bytes())
            });
            if !found {
                return Err(format!(
                    "member {} has no change writing {value:?} to {key:?} at version {version}, \
                     though a client was told it was written",
                    replica.id
                ));
            }
        }
        // A grant's token is the log index of the grant, which the replica
        // has applied.
        for grant in &history.grants {
            if grant.token > replica.applied_index {
                return Err(format!(
                    "member {} applied through {}, before the lease grant with token {} a client holds",
                    replica.id, replica.applied_index, grant.token
                ));
            }
        }
    }
    Ok(())
}
