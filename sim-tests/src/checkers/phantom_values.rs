//! No phantom value: every value a client read, and every value the change
//! log holds, was written by some client.

use std::collections::BTreeSet;

use crate::history::{History, Outcome};
use crate::simulation::ReplicaState;
use crate::workload::NAMESPACE;

pub fn check(history: &History, replicas: &[ReplicaState]) -> Result<(), String> {
    let written: BTreeSet<&str> = history.written_values().collect();
    for operation in &history.operations {
        if let Outcome::Read(Some((value, version))) = &operation.outcome {
            if !written.contains(value.as_str()) {
                return Err(format!(
                    "client {} read {value:?} (version {version}) from {:?}, which no client wrote",
                    operation.client,
                    operation.call.key()
                ));
            }
        }
    }
    for replica in replicas {
        for event in replica.changes.iter().filter(|event| event.namespace == NAMESPACE) {
            if let Some(value) = &event.new_value {
                let value = String::from_utf8_lossy(value);
                if !written.contains(value.as_ref()) {
                    return Err(format!(
                        "member {}'s change log holds {value:?} at index {}, which no client wrote",
                        replica.id, event.index
                    ));
                }
            }
        }
    }
    Ok(())
}
