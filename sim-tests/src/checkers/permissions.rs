//! No write lands where its writer's grants did not reach: every write of
//! the tenant into the guarded namespace that was acknowledged, and every
//! value the guarded namespace's change log holds (only the tenant writes
//! there), applied at a log index where the tenant's role, as the
//! grantor's acknowledged changes place it in the log, allowed it.

use crate::auth_workload::GUARDED_NAMESPACE;
use crate::history::{History, RoleChange, TenantOutcome};
use crate::simulation::ReplicaState;
use lode_types::ChangeKind;

/// Whether the role allowed writing the guarded namespace at log `index`:
/// the last change before it decides; before the first, nothing does.
fn allowed_at(changes: &[RoleChange], index: u64) -> bool {
    changes
        .iter()
        .filter(|change| change.index < index)
        .max_by_key(|change| change.index)
        .is_some_and(|change| change.writes_guarded)
}

/// The acknowledged changes around `index`, for a violation's detail.
fn around(changes: &[RoleChange], index: u64) -> String {
    let before = changes
        .iter()
        .filter(|change| change.index < index)
        .max_by_key(|change| change.index);
    let after = changes
        .iter()
        .filter(|change| change.index > index)
        .min_by_key(|change| change.index);
    format!("the role changed before it at {before:?}, after it at {after:?}")
}

pub fn check(history: &History, replicas: &[ReplicaState]) -> Result<(), String> {
    let changes = &history.role_changes;
    for write in &history.tenant_writes {
        if let TenantOutcome::Applied { index } = write.outcome {
            if !allowed_at(changes, index) {
                return Err(format!(
                    "the tenant's {} of {:?} into {GUARDED_NAMESPACE} was acknowledged at index {index}, where its \
                     role did not allow it; {}",
                    if write.copy { "copy" } else { "set" },
                    write.value,
                    around(changes, index)
                ));
            }
        }
    }
    for replica in replicas {
        let written = replica
            .changes
            .iter()
            .filter(|event| event.namespace == GUARDED_NAMESPACE && event.kind != ChangeKind::Deleted);
        for event in written {
            if !allowed_at(changes, event.index) {
                return Err(format!(
                    "member {}'s change log holds a write into {GUARDED_NAMESPACE} at index {}, where the tenant's \
                     role did not allow it; {}",
                    replica.id,
                    event.index,
                    around(changes, event.index)
                ));
            }
        }
    }
    Ok(())
}
