//! Versions are log positions and behave like them: each key's versions
//! strictly increase in the change log and equal the index of the entry
//! that wrote them; a write acknowledged before another began has the
//! smaller version; a client never sees a key's version go back; and one
//! value has one version wherever it is seen.

use std::collections::BTreeMap;

use lode_types::ChangeKind;

use crate::history::{History, Outcome};
use crate::simulation::ReplicaState;

pub fn check(history: &History, replicas: &[ReplicaState]) -> Result<(), String> {
    for replica in replicas {
        let mut last: BTreeMap<(&str, &[u8]), u64> = BTreeMap::new();
        for event in &replica.changes {
            if event.kind != ChangeKind::Deleted && event.version != event.index {
                return Err(format!(
                    "member {}: a change at index {} gave {:?} version {}",
                    replica.id,
                    event.index,
                    String::from_utf8_lossy(&event.key),
                    event.version
                ));
            }
            if let Some(previous) = last.insert((event.namespace.as_str(), event.key.as_slice()), event.index) {
                if previous >= event.index {
                    return Err(format!(
                        "member {}: changes of {:?} at index {previous} and then {}",
                        replica.id,
                        String::from_utf8_lossy(&event.key),
                        event.index
                    ));
                }
            }
        }
    }

    // Real-time order: sort acknowledged writes by completion and sweep
    // them against the invocations.
    let mut writes: Vec<(u64, u64, u64)> = history
        .operations
        .iter()
        .filter_map(|operation| match (operation.outcome.clone(), operation.completed) {
            (Outcome::Written { version }, Some(completed)) => Some((operation.invoked, completed, version)),
            _ => None,
        })
        .collect();
    let mut by_completion = writes.clone();
    by_completion.sort_by_key(|(_, completed, _)| *completed);
    writes.sort_by_key(|(invoked, _, _)| *invoked);
    let mut completed_before = 0;
    let mut highest: Option<(u64, u64)> = None;
    for (invoked, _, version) in &writes {
        while completed_before < by_completion.len() && by_completion[completed_before].1 < *invoked {
            let (_, completed, earlier) = by_completion[completed_before];
            if highest.is_none_or(|(highest, _)| earlier > highest) {
                highest = Some((earlier, completed));
            }
            completed_before += 1;
        }
        if let Some((earlier, completed)) = highest {
            if *version <= earlier {
                return Err(format!(
                    "a write invoked at tick {invoked} got version {version}, not above version {earlier} \
                     of a write acknowledged at tick {completed}"
                ));
            }
        }
    }

    // Per client and key, in the order the client saw them; and one
    // version per value.
    let mut seen: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    let mut value_versions: BTreeMap<&str, u64> = BTreeMap::new();
    for operation in &history.operations {
        let observed = match &operation.outcome {
            Outcome::Read(Some((value, version))) => Some((value.as_str(), *version)),
            Outcome::Written { version } => operation.call.written_value().map(|value| (value, *version)),
            _ => None,
        };
        let Some((value, version)) = observed else {
            continue;
        };
        if let Some(other) = value_versions.insert(value, version) {
            if other != version {
                return Err(format!(
                    "{value:?} was seen at version {other} and at version {version}"
                ));
            }
        }
        let key = (operation.client, operation.call.key());
        if let Some(previous) = seen.insert(key, version) {
            if version < previous {
                return Err(format!(
                    "client {} saw {:?} at version {previous} and later at version {version}",
                    operation.client,
                    operation.call.key()
                ));
            }
        }
    }
    Ok(())
}
