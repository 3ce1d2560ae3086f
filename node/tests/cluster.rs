//! Whole-cluster tests: real `lode node` processes, real RocksDB, real TCP.

mod support;

use std::time::Duration;

use lode_client::protocol::WriteRequest;
use lode_client::{Client, Consistency};
use support::{wait_for_voter, wait_until, TestCluster};

const NAMESPACE: &str = "test";

/// An unconditional single-key write with a chosen op id.
fn set_request(op_id: u128, key: &[u8], value: &[u8]) -> WriteRequest {
    WriteRequest {
        op_id,
        operations: vec![support::plain_set(NAMESPACE, key.to_vec(), value.to_vec())],
    }
}

async fn write_keys(client: &Client, keys: std::ops::Range<u64>, tasks: u64) -> u64 {
    let mut handles = Vec::new();
    for task in 0..tasks {
        let kv = client.kv(NAMESPACE);
        let keys = keys.clone();
        handles.push(tokio::spawn(async move {
            let mut highest = 0;
            for key in keys.filter(|key| key % tasks == task) {
                let version = kv
                    .set(format!("key-{key}"))
                    .bytes(format!("value-{key}"))
                    .send()
                    .await
                    .expect("write");
                highest = highest.max(version);
            }
            highest
        }));
    }
    let mut highest = 0;
    for handle in handles {
        highest = highest.max(handle.await.expect("writer task"));
    }
    highest
}

fn is_learner(status: &lode_client::protocol::ClusterStatus, id: u64) -> bool {
    status.members.iter().any(|member| member.id == id && !member.voter)
}

async fn assert_keys_on(cluster: &TestCluster, id: u64, keys: std::ops::Range<u64>, position: u64) {
    let kv = cluster.client_of(id).kv(NAMESPACE);
    for key in keys {
        let (entry, served_at) = kv
            .get_entry_with(format!("key-{key}"), Consistency::AtLeast(position))
            .await
            .expect("read");
        let entry = entry.unwrap_or_else(|| panic!("member {id} lacks key-{key}"));
        assert_eq!(
            entry.value,
            format!("value-{key}").into_bytes(),
            "member {id}, key-{key}"
        );
        assert!(served_at >= position);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_replicate_a_thousand_writes() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let position = write_keys(&client, 0..1000, 16).await;
    // Concurrent writes share log entries, so the last position is at most
    // 1000 entries past the membership entries.
    assert!(
        position > 0 && position <= 1010,
        "1000 writes end at position {position}"
    );
    for id in 1..=3 {
        assert_keys_on(&cluster, id, 0..1000, position).await;
    }
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_loses_no_acknowledged_write() {
    let mut cluster = TestCluster::start(3, 10_000);
    let old_leader = cluster.wait_for_leader().await;
    let client = cluster.client();
    write_keys(&client, 0..200, 8).await;

    let killed_at = tokio::time::Instant::now();
    cluster.kill(old_leader);
    let new_leader = cluster.wait_for_leader().await;
    let election = killed_at.elapsed();
    assert_ne!(new_leader, old_leader);
    // Election timeouts are 400-800 ms; "a few" of them, with process and
    // test overhead on a loaded 2-core machine.
    assert!(election < Duration::from_secs(10), "new leader took {election:?}");
    eprintln!("new leader {new_leader} elected {election:?} after the kill");

    let kv = client.kv(NAMESPACE);
    for key in 0..200 {
        let value = kv.get(format!("key-{key}")).await.expect("linearizable read");
        assert_eq!(value, Some(format!("value-{key}").into_bytes()));
    }
    let position = write_keys(&client, 200..300, 4).await;

    // Restarted with the same --peers flags: it rejoins, and no new cluster
    // is initialized (the term does not restart and the data is all there).
    let term_before = client.cluster_status().await.expect("status").term;
    cluster.restart_as_founder(old_leader);
    cluster.wait_applied(old_leader, position).await;
    let status = cluster.client_of(old_leader).node_status().await.expect("status");
    assert!(
        status.term >= term_before,
        "term went from {term_before} to {}",
        status.term
    );
    let log = cluster.log_text(old_leader);
    assert!(
        log.matches("initialized a new cluster").count() <= 1,
        "initialized twice"
    );
    assert!(log.contains("restarting as a member of an existing cluster"));
    assert_keys_on(&cluster, old_leader, 0..300, position).await;
    // The survivors report the dead member as unreachable; nothing else.
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError"]);
    // The new leader warned of the outage when it began, not at each of
    // its retries over the election, 200 reads and 100 writes, and said
    // when it ended; the election's stale messages raised no warning.
    let log = cluster.log_text(new_leader);
    let warnings: Vec<&str> = log.lines().filter(|line| line.contains("WARN")).collect();
    assert!(
        !warnings.is_empty() && warnings.iter().all(|line| line.contains("peer unreachable")),
        "warnings other than the outage:\n{}",
        warnings.join("\n")
    );
    let of_the_killed = format!("peer={old_leader} ");
    let outage_warnings = warnings.iter().filter(|line| line.contains(&of_the_killed)).count();
    assert!(
        (1..=2).contains(&outage_warnings),
        "the outage warned at its retries:\n{}",
        warnings.join("\n")
    );
    assert!(log.contains("peer reachable again"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_member_catches_up_from_a_snapshot_and_a_removed_one_stops() {
    let mut cluster = TestCluster::start(3, 50);
    let leader = cluster.wait_for_leader().await;
    let client = cluster.client();
    // One writer: each write is an entry of its own (concurrent writers
    // share entries), so the log passes several snapshots.
    let position = write_keys(&client, 0..300, 1).await;

    // The leader has snapshotted and purged its log past the start.
    let status = wait_until("the leader to purge its log", || async {
        let status = cluster.client_of(leader).node_status().await.ok()?;
        status.purged_index.is_some_and(|purged| purged > 100).then_some(status)
    })
    .await;
    assert!(status.snapshot_index.is_some());

    let address = cluster.start_spare(4);
    let added = cluster.lode(&["cluster", "add", "4", &address]);
    assert!(added.status.success(), "{added:?}");
    // A learner first (promotion waits until it has kept up for 3 s).
    let status = client.cluster_status().await.expect("status");
    assert!(status.members.iter().any(|member| member.id == 4 && !member.voter));
    wait_for_voter(&client, 4).await;
    cluster.wait_applied(4, position).await;
    assert_keys_on(&cluster, 4, 0..300, position).await;
    let status = cluster
        .client_of(4)
        .node_status()
        .await
        .expect("status of the new member");
    assert!(status.snapshot_index.is_some(), "member 4 caught up without a snapshot");
    assert!(
        cluster.log_text(4).contains("installed snapshot"),
        "member 4 installed no snapshot"
    );

    // Adding the same member again is a no-op; a conflicting address is refused.
    client.add_member(4, address).await.expect("idempotent add");
    let conflict = client
        .add_member(4, "127.0.0.1:1".to_owned())
        .await
        .expect_err("address conflict");
    assert!(conflict.is_invalid(), "{conflict:?}");

    let removed = cluster
        .running()
        .into_iter()
        .find(|id| *id != leader && *id != 4)
        .expect("a follower");
    let removal = cluster.lode(&["cluster", "remove", &removed.to_string()]);
    assert!(removal.status.success(), "{removal:?}");
    let after_removal = client.cluster_status().await.expect("status");
    assert!(!after_removal.members.iter().any(|member| member.id == removed));
    let removed_applied = cluster
        .client_of(removed)
        .node_status()
        .await
        .expect("status")
        .applied_index;
    let position = write_keys(&client, 300..400, 4).await;
    for id in cluster.running().into_iter().filter(|id| *id != removed) {
        cluster.wait_applied(id, position).await;
    }
    let status = cluster
        .client_of(removed)
        .node_status()
        .await
        .expect("status of the removed member");
    assert!(
        status.applied_index < position,
        "removed member applied {} >= {position}",
        status.applied_index
    );
    assert!(
        status.applied_index <= removed_applied + 2,
        "removed member kept applying"
    );
    let missing = client.remove_member(99).await.expect_err("unknown member");
    assert!(missing.is_not_found(), "{missing:?}");

    // Started again on its old data, the removed member is refused.
    cluster.kill(removed);
    cluster.restart(removed);
    let exit = cluster.wait_for_exit(removed);
    assert!(!exit.success(), "the removed member started");
    let log = cluster.log_text(removed);
    assert!(
        log.contains(&format!("member {removed} was removed")) && log.contains("empty data directory"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linearizable_read_on_a_follower_sees_the_latest_write() {
    let cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let writer = cluster.client_of(leader).kv(NAMESPACE);
    let reader = Client::connect([cluster.members[&follower].address.clone()])
        .expect("client")
        .kv(NAMESPACE);
    for round in 0..20 {
        let value = format!("round-{round}");
        let version = writer.set("shared").bytes(&value).send().await.expect("write");
        let entry = reader.get_entry("shared").await.expect("read").expect("entry");
        assert_eq!(entry.value, value.into_bytes());
        assert_eq!(entry.version, version);
    }
    // An eventual read is served locally; an at-least read of a far future
    // position is refused as stale, not answered with old data.
    let (_, local_position) = reader
        .get_entry_with("shared", Consistency::Eventual)
        .await
        .expect("eventual read");
    assert!(local_position > 0);
    let stale = reader
        .get_entry_with("shared", Consistency::AtLeast(local_position + 1_000_000))
        .await;
    assert!(stale.as_ref().is_err_and(|error| error.is_stale()), "{stale:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_operation_applies_once() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let first = set_request(42, b"counter", b"first");
    let applied = client.write(first.clone()).await.expect("first write");
    let later = client
        .kv(NAMESPACE)
        .set("counter")
        .bytes("later")
        .send()
        .await
        .expect("later write");
    assert!(later > applied.position);
    // The same op id again: the stored response comes back and nothing is written.
    let retried = client.write(first).await.expect("retried write");
    assert_eq!(retried, applied);
    assert_eq!(
        client.kv(NAMESPACE).get("counter").await.expect("read"),
        Some(b"later".to_vec())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_started_with_join_becomes_a_voter_and_catches_up() {
    let mut cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let client = cluster.client();
    let position = write_keys(&client, 0..100, 4).await;
    // Join through a follower: the request is forwarded to the leader.
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let seed = cluster.members[&follower].peer_address.clone();
    cluster.start_joining(4, &seed);
    wait_for_voter(&client, 4).await;
    cluster.wait_applied(4, position).await;
    assert_keys_on(&cluster, 4, 0..100, position).await;
    // Restarted with the same --join flag, it stays one member, not two.
    cluster.kill(4);
    cluster.restart_with_join(4, &seed);
    let position = write_keys(&client, 100..120, 2).await;
    cluster.wait_applied(4, position).await;
    let status = client.cluster_status().await.expect("status");
    assert_eq!(status.members.iter().filter(|member| member.voter).count(), 4);
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_with_an_unknown_outcome_is_ambiguous_and_its_retry_applies_once() {
    let cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let options = lode_client::ClientOptions {
        attempt_timeout: Duration::from_millis(300),
        call_timeout: Duration::from_secs(1),
        ..lode_client::ClientOptions::default()
    };
    let only_leader = Client::with_options([cluster.members[&leader].address.clone()], options).expect("client");
    only_leader
        .kv(NAMESPACE)
        .set("warm")
        .bytes("up")
        .send()
        .await
        .expect("write before the pause");

    let request = set_request(7, b"fate", b"first");
    cluster.signal(leader, "STOP");
    let error = only_leader
        .write(request.clone())
        .await
        .expect_err("a paused leader cannot answer");
    assert!(error.is_ambiguous_mutation(), "{error:?}");
    assert_eq!(
        error.ambiguous_recovery(),
        Some(&lode_client::MutationRecovery::RetrySameOperation { op_id: 7 })
    );
    cluster.signal(leader, "CONT");

    // The recovery: send the same operation again, through any member.
    let client = cluster.client();
    let applied = client.write(request.clone()).await.expect("retry");
    let kv = client.kv(NAMESPACE);
    assert_eq!(kv.get("fate").await.expect("read"), Some(b"first".to_vec()));
    kv.set("fate").bytes("second").send().await.expect("later write");
    let again = client.write(request).await.expect("second retry");
    assert_eq!(again, applied, "a retry returns the first outcome");
    assert_eq!(
        kv.get("fate").await.expect("read"),
        Some(b"second".to_vec()),
        "and applies nothing"
    );
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError", "Timeout", "timeout"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_missed_purged_entries_catches_up_from_a_snapshot() {
    let mut cluster = TestCluster::start(3, 50);
    let leader = cluster.wait_for_leader().await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let client = cluster.client();
    write_keys(&client, 0..20, 2).await;
    let follower_applied = cluster
        .client_of(follower)
        .node_status()
        .await
        .expect("status")
        .applied_index;
    cluster.kill(follower);
    // Write until the leader's log no longer holds what the follower lacks.
    let mut written = 20;
    let position = loop {
        let position = write_keys(&client, written..written + 100, 8).await;
        written += 100;
        let status = cluster.client_of(leader).node_status().await.expect("leader status");
        if status.purged_index.is_some_and(|purged| purged > follower_applied) {
            break position;
        }
        assert!(written < 5_000, "the leader never purged past {follower_applied}");
    };
    cluster.restart(follower);
    cluster.wait_applied(follower, position).await;
    assert_keys_on(&cluster, follower, 0..written, position).await;
    assert!(cluster.log_text(follower).contains("installed snapshot"));
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_operation_returns_its_first_outcome_after_a_leader_change() {
    let mut cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let client = cluster.client();
    let request = set_request(4242, b"replayed", b"first");
    let applied = client.write(request.clone()).await.expect("write");
    client
        .kv(NAMESPACE)
        .set("replayed")
        .bytes("later")
        .send()
        .await
        .expect("later write");
    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader().await;
    assert_ne!(new_leader, leader);
    let replayed = client.write(request).await.expect("replay");
    assert_eq!(replayed, applied, "the new leader answers with the first outcome");
    assert_eq!(
        client.kv(NAMESPACE).get("replayed").await.expect("read"),
        Some(b"later".to_vec()),
        "and applies nothing"
    );
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError"]);
}

#[test]
fn a_dedup_retention_out_of_bounds_is_refused_at_start() {
    let directory = tempfile::tempdir().expect("temp dir");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lode"))
        .args([
            "node",
            "--id",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--peer-listen",
            "127.0.0.1:0",
            "--dedup-retention",
            "1s",
            "--data-dir",
        ])
        .arg(directory.path())
        .output()
        .expect("run lode node");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("dedup_retention_micros_min"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_that_would_lose_quorum_is_refused_unless_forced() {
    let mut cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let down = cluster.a_follower(leader);
    let healthy = (1..=3).find(|id| *id != leader && *id != down).expect("a third member");
    cluster.kill(down);
    // Removing the healthy follower would leave the leader and a member
    // that does not answer: no quorum of two.
    let refused = cluster.lode(&["cluster", "remove", &healthy.to_string()]);
    assert!(!refused.status.success(), "{refused:?}");
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("quorum") && message.contains("--force"), "{message}");
    let status = cluster.client().cluster_status().await.expect("status");
    assert_eq!(status.members.len(), 3, "nothing was removed");
    // Forced, the change goes through once the member that was down
    // answers again.
    let healthy_text = healthy.to_string();
    let forced = {
        let endpoints = cluster.endpoints().join(",");
        std::thread::spawn(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_lode"))
                .args(["cluster", "remove", &healthy_text, "--force"])
                .env("LODE_ENDPOINTS", endpoints)
                .output()
                .expect("run lode cluster remove --force")
        })
    };
    cluster.restart(down);
    let forced = forced.join().expect("the forced removal");
    assert!(forced.status.success(), "{forced:?}");
    assert!(
        String::from_utf8_lossy(&forced.stderr).contains("without checking"),
        "{forced:?}"
    );
    let status = cluster.client().cluster_status().await.expect("status");
    assert!(status.members.iter().all(|member| member.id != healthy), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_is_promoted_once_it_keeps_up_and_one_that_lags_never_is() {
    let flags = ["--promote-lag-entries-max", "10", "--promote-caught-up", "1s"];
    let mut cluster = TestCluster::start_with_flags(3, 10_000, &flags);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    write_keys(&client, 0..20, 2).await;

    // Member 4 is added, then stopped while the log moves on: it trails by
    // far more than 10 entries.
    let address = cluster.start_spare(4);
    client.add_member(4, address).await.expect("add member 4");
    cluster.signal(4, "STOP");
    write_keys(&client, 20..120, 4).await;

    // Member 5, added later and healthy, is promoted; member 4 stays a
    // learner all the while.
    let address = cluster.start_spare(5);
    let added = client.add_member(5, address).await.expect("add member 5");
    assert!(is_learner(&added, 5), "{added:?}");
    wait_for_voter(&client, 5).await;
    let status = client.cluster_status().await.expect("status");
    assert!(is_learner(&status, 4), "a lagging learner was promoted: {status:?}");
    assert_eq!(status.members.iter().filter(|member| member.voter).count(), 4);

    // Once it runs again it catches up and is promoted in turn.
    cluster.signal(4, "CONT");
    wait_for_voter(&client, 4).await;
    let position = write_keys(&client, 120..130, 2).await;
    cluster.wait_applied(4, position).await;
    assert_keys_on(&cluster, 4, 0..130, position).await;
    let promotions: usize = (1..=3)
        .map(|id| {
            cluster
                .log_text(id)
                .matches("learner caught up; promoted to voter")
                .count()
        })
        .sum();
    assert_eq!(promotions, 2, "one promotion each for members 4 and 5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_rejoins_as_a_learner_and_never_founds_a_second_cluster() {
    let mut cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let position = write_keys(&client, 0..100, 4).await;
    let cluster_id = cluster.cluster_id();

    // Member 1 founded the cluster; member 2 is another founder. Each loses
    // its data and restarts with the flags it first had.
    for (round, wiped) in [1u64, 2].into_iter().enumerate() {
        cluster.kill(wiped);
        std::fs::remove_dir_all(&cluster.members[&wiped].data_dir).expect("wipe the data directory");
        cluster.restart_as_founder(wiped);
        let readmitted = format!("member={wiped}");
        let learner_seen = wait_until(&format!("member {wiped} to be readmitted"), || async {
            let status = client.cluster_status().await.ok()?;
            let leader = status.leader?;
            cluster
                .log_text(leader)
                .lines()
                .any(|line| line.contains("readmitted a member that had lost its data") && line.ends_with(&readmitted))
                .then_some(leader)
        })
        .await;
        wait_for_voter(&client, wiped).await;
        let keys = (round as u64 * 100)..(round as u64 * 100 + 100);
        let position = write_keys(&client, keys.clone(), 2).await.max(position);
        cluster.wait_applied(wiped, position).await;
        assert_keys_on(&cluster, wiped, 0..keys.end, position).await;
        let log = cluster.log_text(learner_seen);
        assert!(
            log.contains("it is a learner again"),
            "the wiped voter was not demoted first"
        );
        let own = cluster.client_of(wiped).node_status().await.expect("status");
        assert_eq!(own.cluster_id.map(|id| id.to_string()), Some(cluster_id.clone()));
    }
    let foundings: usize = (1..=3)
        .map(|id| cluster.log_text(id).matches("initialized a new cluster").count())
        .sum();
    assert_eq!(foundings, 1, "a wiped founder founded a second cluster");
    assert!(cluster.log_text(1).contains("instead of founding a second cluster"));
    let status = client.cluster_status().await.expect("status");
    assert_eq!(
        status.members.iter().filter(|member| member.voter).count(),
        3,
        "{status:?}"
    );
    assert_eq!(cluster.cluster_id(), cluster_id);
}

/// A founder that was not up when the others founded the cluster (as a
/// StatefulSet's last pod, started after the others) joins once it
/// starts, as a learner first; the leader says so, and does not report
/// it as a member that lost its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_founder_started_late_joins_and_is_not_reported_as_lost() {
    let mut cluster = TestCluster::start_without(3, 10_000, 3);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let position = write_keys(&client, 0..50, 4).await;
    cluster.restart_as_founder(3);
    let leader = wait_until("the late founder to be admitted", || async {
        let leader = client.cluster_status().await.ok()?.leader?;
        cluster
            .log_text(leader)
            .lines()
            .any(|line| line.contains("admitted a late founder, as a learner") && line.ends_with("member=3"))
            .then_some(leader)
    })
    .await;
    wait_for_voter(&client, 3).await;
    cluster.wait_applied(3, position).await;
    assert_keys_on(&cluster, 3, 0..50, position).await;
    for id in 1..=3 {
        let log = cluster.log_text(id);
        assert!(
            !log.contains("its data was lost"),
            "member {id} reported a loss of data: {log}"
        );
    }
    assert!(cluster
        .log_text(leader)
        .contains("was not up when the cluster was founded"));
    let foundings: usize = (1..=3)
        .map(|id| cluster.log_text(id).matches("initialized a new cluster").count())
        .sum();
    assert_eq!(foundings, 1);
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError"]);
}
