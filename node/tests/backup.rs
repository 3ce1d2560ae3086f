//! Backups against real processes: `lode snapshot save` from a running
//! cluster, `inspect`, and `restore` into the data directories of a new
//! cluster whose state is the image's, entry for entry; damaged backups
//! are refused without touching the target; only admins may take one.

mod support;

use std::path::Path;
use std::time::Duration;

use futures::TryStreamExt;
use lode_client::protocol::ChangeEvent;
use lode_client::queue::Message;
use lode_client::{Client, Encoding, Entry};
use serde_json::{json, Value};
use support::{wait_until, TestCluster};

async fn entries(client: &Client, namespace: &str) -> Vec<Entry> {
    client.kv(namespace).scan().entries().try_collect().await.expect("scan")
}

/// Every change event up to log index `through`, from the start.
async fn changes_through(client: &Client, through: u64, expected: Option<usize>) -> Vec<ChangeEvent> {
    let mut changes = client.changes((0, 0));
    let mut events = Vec::new();
    loop {
        let batch = changes.next_batch().await.expect("changes");
        let past = batch.iter().any(|event| event.index > through);
        events.extend(batch.into_iter().filter(|event| event.index <= through));
        if past || expected.is_some_and(|expected| events.len() >= expected) {
            return events;
        }
    }
}

fn lode_json(cluster: &TestCluster, arguments: &[&str]) -> Value {
    let output = cluster.lode(arguments);
    assert!(output.status.success(), "lode {arguments:?}: {output:?}");
    serde_json::from_slice(&output.stdout).expect("JSON output")
}

/// Writes one of everything a backup must carry.
async fn write_every_kind(client: &Client) {
    let config = client.kv("config");
    for index in 0..40 {
        config
            .set(format!("key-{index:02}"))
            .bytes(format!("value {index}"))
            .send()
            .await
            .expect("set");
    }
    config.set("key-03").bytes("rewritten").send().await.expect("rewrite");
    config.delete("key-04").await.expect("delete");
    config
        .set("expiring")
        .bytes("for a while")
        .ttl(Duration::from_secs(3600))
        .send()
        .await
        .expect("set with a ttl");
    client
        .kv("locks")
        .lease("leader", "worker-a", Duration::from_secs(300))
        .await
        .expect("lease");
    let queue = client.queue();
    for payload in ["first job", "second job"] {
        queue
            .enqueue(&Message::new(payload.as_bytes().to_vec(), Encoding::Bytes))
            .await
            .expect("enqueue");
    }
    let state = client.state();
    state
        .set("cart", "alice", json!({"items": ["apple"], "total": 3}))
        .await
        .expect("state set");
    state.set("cart", "bob", json!({"items": []})).await.expect("state set");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_restores_every_kind_of_state_into_a_new_cluster() {
    let cluster = TestCluster::start(3, 50);
    let leader = cluster.wait_for_leader().await;
    let client = cluster.client();
    write_every_kind(&client).await;
    let backup_dir = tempfile::tempdir().expect("temporary directory");
    let file = backup_dir.path().join("lode.backup");
    let file_text = file.display().to_string();
    // Taken from a follower: it waits to apply what the leader committed.
    let follower = cluster.a_follower(leader);
    let output = cluster.lode(&[
        "snapshot",
        "save",
        &file_text,
        "--json",
        "--endpoints",
        &cluster.address_of(follower),
    ]);
    assert!(output.status.success(), "save: {output:?}");
    let saved: Value = serde_json::from_slice(&output.stdout).expect("save JSON");
    assert_eq!(saved["taken_by"], json!(follower));
    assert!(!Path::new(&format!("{file_text}.partial")).exists());
    let through = saved["last_log_index"].as_u64().expect("an index");
    // Written after the backup: the new cluster must not have it.
    client
        .kv("config")
        .set("after")
        .bytes("later")
        .send()
        .await
        .expect("set");

    let inspected = lode_json(&cluster, &["snapshot", "inspect", &file_text, "--json"]);
    assert_eq!(
        inspected,
        saved
            .as_object()
            .map(|saved| {
                let mut saved = saved.clone();
                saved.remove("seconds");
                Value::Object(saved)
            })
            .expect("an object")
    );
    let counts = &inspected["counts"];
    assert_eq!(counts["kv_entries"], json!(40), "{counts}");
    assert_eq!(counts["state_values"], json!(2), "{counts}");
    assert_eq!(counts["leases"], json!(1), "{counts}");
    assert_eq!(counts["queue_messages"], json!(2), "{counts}");
    assert_eq!(inspected["cluster_id"], json!(cluster.cluster_id()));

    let old_config = entries(&client, "config").await;
    let old_locks = client.kv("locks").lease_info("leader").await.expect("lease info");
    let old_changes = changes_through(&client, through, None).await;

    let restored = TestCluster::start_restored(&file, 3, 50);
    restored.wait_for_leader().await;
    let new_client = restored.client();
    assert_ne!(
        restored.cluster_id(),
        cluster.cluster_id(),
        "a restore founds a new cluster"
    );
    let mut new_config = wait_until("the restored cluster to serve", || async {
        new_client.kv("config").get("key-00").await.ok().flatten()?;
        Some(entries(&new_client, "config").await)
    })
    .await;
    let mut expected_config = old_config;
    expected_config.retain(|entry| entry.key != b"after");
    new_config.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(
        new_config, expected_config,
        "every entry, version and expiry is the image's"
    );
    assert_eq!(
        new_client.kv("locks").lease_info("leader").await.expect("lease info"),
        old_locks
    );
    let state = new_client.state();
    assert_eq!(
        state.get("cart", "alice").await.expect("state get"),
        json!({"items": ["apple"], "total": 3})
    );
    assert_eq!(state.list("cart").await.expect("state list").len(), 2);
    let new_changes = changes_through(&new_client, through, Some(old_changes.len())).await;
    assert_eq!(new_changes, old_changes, "the change log, position for position");
    let queue = new_client.queue();
    let mut payloads = Vec::new();
    while let Some(delivery) = queue.claim().await.expect("claim") {
        payloads.push(String::from_utf8_lossy(&delivery.payload).into_owned());
    }
    assert_eq!(payloads, ["first job", "second job"]);
    // The new cluster writes on past the image's positions.
    let version = new_client.kv("config").set("new").bytes("x").send().await.expect("set");
    assert!(version > through, "version {version} after index {through}");
    cluster.assert_no_errors();
    restored.assert_no_errors();
}

fn restore(file: &Path, data_dir: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lode"))
        .args(["snapshot", "restore"])
        .arg(file)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--id", "1", "--peers", "1=127.0.0.1:1"])
        .output()
        .expect("run lode snapshot restore")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_backup_is_refused_and_the_target_stays_untouched() {
    let cluster = TestCluster::start(1, 10_000);
    cluster.wait_for_leader().await;
    cluster
        .client()
        .kv("config")
        .set("k")
        .bytes("v")
        .send()
        .await
        .expect("set");
    let scratch = tempfile::tempdir().expect("temporary directory");
    let file = scratch.path().join("good.backup");
    let saved = lode_json(&cluster, &["snapshot", "save", &file.display().to_string(), "--json"]);
    let good = std::fs::read(&file).expect("read the backup");
    let image_start = good.len() - saved["image_bytes"].as_u64().expect("a length") as usize;
    let mut image_flipped = good.clone();
    image_flipped[image_start + (good.len() - image_start) / 2] ^= 0x40;
    let mut header_flipped = good.clone();
    header_flipped[20] ^= 1;
    let mut padded = good.clone();
    padded.push(0);
    let cases = [
        ("truncated", good[..good.len() - 100].to_vec(), "cut short"),
        ("image flipped", image_flipped, "corrupt"),
        ("header flipped", header_flipped, "header is damaged"),
        ("padded", padded, "added to"),
        ("not a backup", b"hello".to_vec(), "not a whole Lode backup"),
    ];
    for (what, bytes, expected) in cases {
        let bad = scratch.path().join("bad.backup");
        std::fs::write(&bad, &bytes).expect("write");
        let target = scratch.path().join(format!("restored-{}", what.replace(' ', "-")));
        let output = restore(&bad, &target);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{what}: restored");
        assert!(stderr.contains(expected), "{what}: {stderr}");
        assert!(!target.exists(), "{what}: the target was created");
        let leftovers: Vec<_> = std::fs::read_dir(scratch.path())
            .expect("list")
            .filter_map(Result::ok)
            .filter(|item| item.file_name().to_string_lossy().contains("restoring"))
            .collect();
        assert!(leftovers.is_empty(), "{what}: a staging directory was left");
        let inspected = cluster.lode(&["snapshot", "inspect", &bad.display().to_string()]);
        assert!(!inspected.status.success(), "{what}: inspect accepted it");
    }
    // A data directory in use is never written over.
    let occupied = scratch.path().join("occupied");
    std::fs::create_dir(&occupied).expect("create");
    std::fs::write(occupied.join("keep"), b"mine").expect("write");
    let output = restore(&file, &occupied);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("is not empty"),
        "{output:?}"
    );
    assert_eq!(std::fs::read(occupied.join("keep")).expect("read"), b"mine");
    // The good file restores.
    let output = restore(&file, &scratch.path().join("fresh"));
    assert!(output.status.success(), "{output:?}");
    assert!(scratch.path().join("fresh").join("state").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn only_an_admin_takes_a_backup() {
    let secured = support::secured().await;
    let reader = support::user_with(&secured.root, "reader", &["read:"]).await;
    let scratch = tempfile::tempdir().expect("temporary directory");
    let token_file = scratch.path().join("reader.token");
    std::fs::write(&token_file, &reader.token.0).expect("write token");
    let file = scratch.path().join("refused.backup");
    let output = secured.cluster.lode(&[
        "snapshot",
        "save",
        &file.display().to_string(),
        "--token-file",
        &token_file.display().to_string(),
    ]);
    assert!(!output.status.success(), "a reader took a backup");
    assert!(String::from_utf8_lossy(&output.stderr).contains("admin"), "{output:?}");
    assert!(!file.exists() && !scratch.path().join("refused.backup.partial").exists());
    let anonymous = secured.cluster.lode(&["snapshot", "save", &file.display().to_string()]);
    assert!(!anonymous.status.success(), "an anonymous caller took a backup");
}
