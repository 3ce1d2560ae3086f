//! Every command applies at most once: each value the clients write is
//! unique, so a value that appears in two changes was applied twice (a
//! retried write the dedup table should have answered).

use std::collections::BTreeMap;

use lode_types::ChangeKind;

use crate::simulation::ReplicaState;
use crate::workload::NAMESPACE;

pub fn check(replicas: &[ReplicaState]) -> Result<(), String> {
    for replica in replicas {
        let mut first_write: BTreeMap<(&[u8], &[u8]), u64> = BTreeMap::new();
        for event in &replica.changes {
            if event.namespace != NAMESPACE || event.kind == ChangeKind::Deleted {
                continue;
            }
            let Some(value) = event.new_value.as_deref() else {
                continue;
            };
            if let Some(first) = first_write.insert((event.key.as_slice(), value), event.index) {
                return Err(format!(
                    "member {}: {:?} was written to {:?} at index {first} and again at index {}",
                    replica.id,
                    String::from_utf8_lossy(value),
                    String::from_utf8_lossy(&event.key),
                    event.index
                ));
            }
        }
    }
    Ok(())
}
