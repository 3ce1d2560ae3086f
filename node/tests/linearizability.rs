//! The simulation's checkers on real processes: three `lode node`
//! processes on loopback with RocksDB, a concurrent get/set/compare-and-set
//! and delete workload with a recorded history, while the leader and a
//! follower are SIGKILLed and restarted and a member is SIGSTOPped and
//! SIGCONTed, again and again. Then the history must be linearizable and
//! every acknowledged write must be in the cluster's change log.

mod support;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use lode_sim_tests::checkers::{acknowledged_writes, applied_once, linearizability, phantom_values, versions};
use lode_sim_tests::history::{self, Call, History, Outcome, SharedHistory};
use lode_sim_tests::workload::{self, KvClientPlan, NAMESPACE};
use lode_sim_tests::ReplicaState;
use support::TestCluster;

/// How long clients start operations while members are killed and stopped.
const WORKLOAD: Duration = Duration::from_secs(24);
const CLIENTS: usize = 4;
const KEYS: usize = 3;
/// The history's client number of the final checks.
const VERIFIER: usize = 1000;

#[tokio::test(flavor = "current_thread")]
async fn kills_restarts_and_stops_of_real_members_keep_the_history_linearizable() {
    let mut cluster = TestCluster::start(3, 200);
    cluster.wait_for_leader().await;
    let history: SharedHistory = Rc::new(RefCell::new(History::default()));
    let local = tokio::task::LocalSet::new();
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let plan = KvClientPlan {
            client,
            seed: 0x5eed + client as u64,
            keys: KEYS,
            until: WORKLOAD,
            read_only: false,
        };
        clients.push(local.spawn_local(workload::run_kv_client(plan, cluster.endpoints(), history.clone())));
    }
    let mut faults = Vec::new();
    local
        .run_until(async {
            let started = Instant::now();
            let mut round = 0u64;
            while started.elapsed() < WORKLOAD {
                round += 1;
                let leader = cluster.wait_for_leader().await;
                cluster.kill(leader);
                faults.push(format!("killed leader {leader}"));
                eprintln!("{:?}: killed leader {leader}", started.elapsed());
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                cluster.restart(leader);

                let leader = cluster.wait_for_leader().await;
                let follower = (1..=3).find(|id| *id != leader).unwrap_or(1);
                cluster.kill(follower);
                faults.push(format!("killed follower {follower}"));
                eprintln!("{:?}: killed follower {follower}", started.elapsed());
                tokio::time::sleep(Duration::from_millis(1_000)).await;
                cluster.restart(follower);

                let stopped = 1 + round % 3;
                cluster.signal(stopped, "STOP");
                faults.push(format!("stopped member {stopped}"));
                eprintln!("{:?}: stopped member {stopped}", started.elapsed());
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                cluster.signal(stopped, "CONT");
            }
            for client in clients {
                client.await.expect("client task");
            }
        })
        .await;
    eprintln!("faults: {faults:?}");
    assert!(faults.len() >= 6, "the fault loop ran too little: {faults:?}");

    // Every member back and agreeing; then a last write and final reads.
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let kv = client.kv(NAMESPACE);
    let slot = history::invoke(
        &history,
        VERIFIER,
        Call::Set {
            key: "final".to_owned(),
            value: "final.1".to_owned(),
        },
    );
    let last = kv
        .set("final")
        .bytes("final.1")
        .send()
        .await
        .expect("a write after the faults");
    history::complete(&history, slot, Outcome::Written { version: last });
    for key in (0..KEYS).map(|index| format!("k{index}")) {
        let slot = history::invoke(&history, VERIFIER, Call::Get { key: key.clone() });
        let entry = kv.get_entry(&key).await.expect("final read");
        let read = entry.map(|entry| (String::from_utf8_lossy(&entry.value).into_owned(), entry.version));
        history::complete(&history, slot, Outcome::Read(read));
    }

    // The cluster's change log, through the last write.
    let mut changes = client.changes((0, 0));
    let mut events = Vec::new();
    while changes.position().0 < last {
        events.extend(changes.next_batch().await.expect("change log"));
    }
    let replica = ReplicaState {
        id: 0,
        applied_index: last,
        digest: 0,
        changes: events,
        changes_trimmed: false,
    };

    let history = history.borrow().clone();
    let acknowledged = history
        .operations
        .iter()
        .filter(|operation| matches!(operation.outcome, Outcome::Written { .. } | Outcome::Deleted { .. }))
        .count();
    let unknown = history
        .operations
        .iter()
        .filter(|operation| operation.outcome == Outcome::Unknown)
        .count();
    eprintln!(
        "{} operations, {acknowledged} acknowledged writes, {unknown} with unknown outcome",
        history.operations.len()
    );
    assert!(
        acknowledged >= 50,
        "too few writes were acknowledged to judge: {acknowledged}"
    );
    let replicas = [replica];
    for (checker, result) in [
        ("linearizability", linearizability::check(&history)),
        ("acknowledged_writes", acknowledged_writes::check(&history, &replicas)),
        ("phantom_values", phantom_values::check(&history, &replicas)),
        ("versions", versions::check(&history, &replicas)),
        ("applied_once", applied_once::check(&replicas)),
    ] {
        assert_eq!(result, Ok(()), "{checker}");
    }
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError", "Timeout", "timeout"]);
}
