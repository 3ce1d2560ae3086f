//! Quorum-loss recovery with `lode node --force-new-cluster`, step by step
//! as README's "Recovering from the loss of a quorum" tells it: two of three
//! members are killed and wiped, the survivor is restarted with the flag,
//! two fresh members are added back. Real processes, real RocksDB.

mod support;

use lode_client::Client;
use support::{wait_for_voter, TestCluster};

const NAMESPACE: &str = "recovery";

async fn write_keys(client: &Client, keys: std::ops::Range<u64>) -> u64 {
    let kv = client.kv(NAMESPACE);
    let mut position = 0;
    for key in keys {
        position = kv
            .set(format!("key-{key}"))
            .bytes(format!("value-{key}"))
            .send()
            .await
            .expect("write");
    }
    position
}

async fn assert_keys(client: &Client, keys: std::ops::Range<u64>) {
    let kv = client.kv(NAMESPACE);
    for key in keys {
        let value = kv.get(format!("key-{key}")).await.expect("read");
        assert_eq!(value, Some(format!("value-{key}").into_bytes()), "key-{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_forces_a_new_cluster_with_every_write_and_fresh_members_join_it() {
    // Snapshots every 100 entries: the survivor's early log, with the
    // founding membership, is purged into its snapshot.
    let mut cluster = TestCluster::start(3, 100);
    let leader = cluster.wait_for_leader().await;
    let survivor = cluster.a_follower(leader);
    let position = write_keys(&cluster.client(), 0..300).await;
    cluster.wait_applied(survivor, position).await;
    let old_cluster = cluster.cluster_id();

    // Two members are lost with their disks; the survivor alone is stuck.
    for id in (1..=3).filter(|id| *id != survivor) {
        cluster.kill(id);
        std::fs::remove_dir_all(&cluster.members[&id].data_dir).expect("wipe a lost member");
    }
    cluster.kill(survivor);
    cluster.restart_with_flags(survivor, &["--force-new-cluster"]);
    assert_eq!(cluster.wait_for_leader().await, survivor);
    let client = cluster.client_of(survivor);
    assert_keys(&client, 0..300).await;
    let position = write_keys(&client, 300..310).await;
    let status = client.cluster_status().await.expect("status");
    assert_eq!(status.members.len(), 1, "{status:?}");
    let new_cluster = cluster.cluster_id();
    assert_ne!(new_cluster, old_cluster, "a forced cluster gets a new id");
    assert!(cluster
        .log_text(survivor)
        .contains("now the only voter of a new cluster"));

    // Fresh members are added back and catch up.
    for id in [4, 5] {
        let address = cluster.start_spare(id);
        let added = cluster.lode(&["cluster", "add", &id.to_string(), &address]);
        assert!(added.status.success(), "{added:?}");
        wait_for_voter(&client, id).await;
        cluster.wait_applied(id, position).await;
    }
    let client = cluster.client();
    assert_keys(&client, 0..310).await;

    // The flag left on the survivor's command line changes nothing once a
    // quorum answers again.
    cluster.kill(survivor);
    cluster.restart_with_flags(survivor, &["--force-new-cluster"]);
    let position = write_keys(&client, 310..320).await;
    cluster.wait_applied(survivor, position).await;
    let status = client.cluster_status().await.expect("status");
    assert_eq!(
        status.members.iter().filter(|member| member.voter).count(),
        3,
        "{status:?}"
    );
    assert_eq!(cluster.cluster_id(), new_cluster);
    assert!(cluster.log_text(survivor).contains("a quorum of the voters answers"));
    assert_keys(&client, 0..320).await;
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError"]);
}

#[test]
fn forcing_a_new_cluster_without_cluster_state_is_refused() {
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
        ])
        .arg("--force-new-cluster")
        .arg("--data-dir")
        .arg(directory.path().join("empty"))
        .env("NO_COLOR", "1")
        .output()
        .expect("run lode node");
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("holds no cluster state"), "{stderr}");
}
