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

use lode_sim_tests::history::{History, Outcome, SharedHistory};
use lode_sim_tests::workload::{self, KvClientPlan};
use support::{verdict, TestCluster};

/// How long clients start operations while members are killed and stopped.
const WORKLOAD: Duration = Duration::from_secs(24);
const CLIENTS: usize = 4;
const KEYS: usize = 3;

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

    // Every member back and agreeing; then a last write, final reads and
    // the checkers' verdicts.
    let history = verdict::judge(&cluster, &history, KEYS).await;
    let acknowledged = verdict::acknowledged(&history);
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
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError", "Timeout", "timeout"]);
}
