//! The end of a recorded workload against real processes: a last write and
//! final reads through the healed cluster, the cluster's change log through
//! that write, and every checker of the simulation over both.

use lode_sim_tests::checkers::{acknowledged_writes, applied_once, fencing, linearizability, phantom_values, versions};
use lode_sim_tests::history::{self, Call, History, Outcome, SharedHistory};
use lode_sim_tests::workload::NAMESPACE;
use lode_sim_tests::ReplicaState;

use super::TestCluster;

/// The history's client number of the final checks.
const VERIFIER: usize = 1000;

/// Adds the final write and reads of `keys` keys (`k0`, `k1`, …) to
/// `history`, then fails the test unless every checker accepts it;
/// answers the whole history for the caller's own counts.
pub async fn judge(cluster: &TestCluster, history: &SharedHistory, keys: usize) -> History {
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let kv = client.kv(NAMESPACE);
    let final_write = Call::Set {
        key: "final".to_owned(),
        value: "final.1".to_owned(),
    };
    let slot = history::invoke(history, VERIFIER, final_write);
    let last = kv
        .set("final")
        .bytes("final.1")
        .send()
        .await
        .expect("a write after the faults");
    history::complete(history, slot, Outcome::Written { version: last });
    for key in (0..keys).map(|index| format!("k{index}")) {
        let slot = history::invoke(history, VERIFIER, Call::Get { key: key.clone() });
        let entry = kv.get_entry(&key).await.expect("final read");
        let read = entry.map(|entry| (String::from_utf8_lossy(&entry.value).into_owned(), entry.version));
        history::complete(history, slot, Outcome::Read(read));
    }
    let mut changes = client.changes((0, 0));
    let mut events = Vec::new();
    while changes.position().0 < last {
        events.extend(changes.next_batch().await.expect("change log"));
    }
    let replicas = [ReplicaState {
        id: 0,
        applied_index: last,
        digest: 0,
        changes: events,
        changes_trimmed: false,
    }];
    let history = history.borrow().clone();
    for (checker, result) in [
        ("linearizability", linearizability::check(&history)),
        ("acknowledged_writes", acknowledged_writes::check(&history, &replicas)),
        ("phantom_values", phantom_values::check(&history, &replicas)),
        ("versions", versions::check(&history, &replicas)),
        ("applied_once", applied_once::check(&replicas)),
        ("fencing", fencing::check(&history, &replicas)),
    ] {
        assert_eq!(result, Ok(()), "{checker}");
    }
    history
}

/// How many writes and deletes of `history` were acknowledged.
pub fn acknowledged(history: &History) -> usize {
    history
        .operations
        .iter()
        .filter(|operation| matches!(operation.outcome, Outcome::Written { .. } | Outcome::Deleted { .. }))
        .count()
}
