//! After faults heal, every voter that applied the same log holds the same
//! state: equal applied indexes and equal state-machine digests.

use crate::simulation::ReplicaState;

pub fn check(replicas: &[ReplicaState]) -> Result<(), String> {
    let Some(first) = replicas.first() else {
        return Err("no replica state was collected".to_owned());
    };
    for replica in &replicas[1..] {
        if (replica.applied_index, replica.digest) != (first.applied_index, first.digest) {
            return Err(format!(
                "member {} (applied {}, digest {:016x}) differs from member {} (applied {}, digest {:016x})",
                replica.id, replica.applied_index, replica.digest, first.id, first.applied_index, first.digest
            ));
        }
    }
    Ok(())
}
