//! Data written by an earlier version stays readable: a member's data
//! directory (log, state, snapshot) and a backup file, both checked in under
//! `tests/fixtures/format-1/`, are opened by today's binary and every value
//! is read back and compared with what was written.
//!
//! The fixtures are written once per on-disk format by
//! `LODE_WRITE_FORMAT_FIXTURES=1 cargo test -p lode-node --test
//! format_compatibility`. A change that fails this test either keeps the
//! old format readable or ships a migration; it never rewrites the
//! fixtures in place.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::TryStreamExt;
use lode_client::protocol::{AccessToken, ChangeEvent, SessionLink};
use lode_client::queue::Message;
use lode_client::{Client, Encoding, Entry};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use support::{client_with, wait_until, TestCluster};

const FIXTURE: &str = "format-1";
const NAMESPACES: [&str; 3] = ["config", "jobs", "sessions"];
const STATE_SCOPE: &str = "cart";

/// What a member holds, as read through the public API: the fixture's
/// `contents.json` is this, read at writing time.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Contents {
    entries: BTreeMap<String, Vec<Entry>>,
    changes: Vec<ChangeEvent>,
    state: Vec<Value>,
}

/// What the fixture was written with, and what it holds.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    root_token: String,
    reader_token: String,
    /// The log index of the last write.
    through: u64,
    /// The fencing token of the lease taken (it expired long since).
    lease_token: u64,
    queue_payloads: Vec<String>,
    contents: Contents,
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(FIXTURE)
}

async fn read_contents(client: &Client, through: u64) -> Contents {
    let mut entries = BTreeMap::new();
    for namespace in NAMESPACES {
        let found: Vec<Entry> = client.kv(namespace).scan().entries().try_collect().await.expect("scan");
        entries.insert(namespace.to_owned(), found);
    }
    let mut changes = client.changes((0, 0));
    let mut events = Vec::new();
    loop {
        let batch = changes.next_batch().await.expect("changes");
        let done = batch.is_empty() || batch.iter().any(|event| event.index >= through);
        events.extend(batch);
        if done {
            break;
        }
    }
    let state = client.state().list(STATE_SCOPE).await.expect("state list");
    Contents {
        entries,
        changes: events,
        state,
    }
}

/// Writes one of every kind of record, through a snapshot (the member
/// snapshots every 20 entries) and beyond it: the manifest without its
/// contents.
async fn write_everything(root: &Client) -> Manifest {
    let auth = root.auth();
    auth.put_user("reader").await.expect("user");
    let grants = vec![lode_types::auth::Grant::parse("read:config").expect("grant")];
    auth.put_role("reader", grants).await.expect("role");
    auth.bind_role("reader", "reader").await.expect("bind");
    let reader = auth.issue_token("reader", None).await.expect("token");

    let config = root.kv("config");
    for index in 0..40 {
        let value = format!("value {index}");
        config
            .set(format!("key-{index:02}"))
            .bytes(value)
            .send()
            .await
            .expect("set");
    }
    config.set("key-03").bytes("rewritten").send().await.expect("rewrite");
    config.delete("key-04").await.expect("delete");
    config
        .set("json")
        .json(&json!({"replicas": 3, "tags": ["a", "b"]}))
        .expect("json")
        .send()
        .await
        .expect("set");
    config
        .set("msgpack")
        .msgpack(&json!({"limit": 7}))
        .expect("msgpack")
        .send()
        .await
        .expect("set");
    config.patch("json", r#"{"replicas": 5}"#).await.expect("patch");
    // 2200-01-01: still live whenever this test runs.
    config
        .set("far-expiry")
        .bytes("kept")
        .expires_at(7_258_118_400_000_000)
        .send()
        .await
        .expect("set");
    config
        .set(vec![0xff_u8, 0x00, 0x7f])
        .bytes(vec![0x80_u8, 0x81])
        .send()
        .await
        .expect("binary key");
    config
        .copy_to("key-00", "copied")
        .into_namespace("jobs")
        .send()
        .await
        .expect("copy");
    config
        .move_to("key-01", "moved")
        .into_namespace("jobs")
        .send()
        .await
        .expect("move");
    let lease = root
        .kv("locks")
        .lease("leader", "worker-a", Duration::from_millis(1))
        .await
        .expect("lease");
    let queue = root.queue();
    let queue_payloads = vec!["first job".to_owned(), "second job".to_owned()];
    for payload in &queue_payloads {
        let message = Message::new(payload.as_bytes().to_vec(), Encoding::Bytes);
        queue.enqueue(&message).await.expect("enqueue");
    }
    let state = root.state();
    state
        .set(STATE_SCOPE, "alice", json!({"items": ["apple"], "total": 3}))
        .await
        .expect("state set");
    state
        .set(STATE_SCOPE, "bob", json!({"items": []}))
        .await
        .expect("state set");
    let session = SessionLink {
        stream: "sessions".to_owned(),
        session_id: "s-1".to_owned(),
    };
    root.kv("sessions")
        .in_session(session)
        .set("turn")
        .bytes("1")
        .send()
        .await
        .expect("session write");
    let through = config.set("last").bytes("written last").send().await.expect("set");
    Manifest {
        root_token: String::new(),
        reader_token: reader.token.0,
        through,
        lease_token: lease.token,
        queue_payloads,
        contents: Contents {
            entries: BTreeMap::new(),
            changes: Vec::new(),
            state: Vec::new(),
        },
    }
}

/// Copies a directory tree, leaving out RocksDB's own text logs and lock
/// file (neither is data; the logs grow with every open).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create directory");
    for item in std::fs::read_dir(from).expect("read directory") {
        let item = item.expect("directory entry");
        let name = item.file_name();
        let text = name.to_string_lossy();
        if text == "LOCK" || text.starts_with("LOG") {
            continue;
        }
        let target = to.join(&name);
        if item.file_type().expect("file type").is_dir() {
            copy_tree(&item.path(), &target);
        } else {
            std::fs::copy(item.path(), &target).expect("copy file");
        }
    }
}

/// Writes the fixtures: a one-member cluster's data directory after a
/// graceful stop, a backup of the same state, and the manifest.
async fn write_fixtures() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let (token_path, root_token) = support::bootstrap_token_file(directory.path());
    let mut cluster = TestCluster::start_with_flags(1, 20, &["--bootstrap-token-file", &token_path]);
    cluster.wait_for_leader().await;
    let root = client_with(&cluster, cluster.endpoints(), &root_token);
    wait_until("the first admin to be able to read", || async {
        root.kv("config").get("probe").await.ok().map(|_| ())
    })
    .await;
    let mut manifest = write_everything(&root).await;
    manifest.root_token = root_token.0.clone();
    manifest.contents = read_contents(&root, manifest.through).await;
    let fixture = fixture_dir();
    let _ = std::fs::remove_dir_all(&fixture);
    std::fs::create_dir_all(&fixture).expect("fixture directory");
    let backup = fixture.join("backup.lode");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lode"));
    command
        .args(["snapshot", "save"])
        .arg(&backup)
        .args(["--endpoints", &cluster.address_of(1)])
        .arg("--token-file")
        .arg(&token_path);
    support::run_checked("lode snapshot save", &mut command);
    cluster.stop_gracefully(1);
    copy_tree(&cluster.members[&1].data_dir, &fixture.join("node-1"));
    let text = serde_json::to_string_pretty(&manifest).expect("manifest JSON");
    std::fs::write(fixture.join("manifest.json"), text + "\n").expect("write manifest");
}

fn read_manifest() -> Manifest {
    let text = std::fs::read_to_string(fixture_dir().join("manifest.json")).expect("read manifest.json");
    serde_json::from_str(&text).expect("manifest.json")
}

/// Reads everything back from a cluster on the fixture's data, checks
/// that tokens and grants still hold, and that the member writes on past
/// the fixture's log.
async fn check_cluster(cluster: &TestCluster, manifest: &Manifest) {
    cluster.wait_for_leader().await;
    let root = client_with(cluster, cluster.endpoints(), &AccessToken(manifest.root_token.clone()));
    let contents = wait_until("the fixture's state to be served", || async {
        root.kv("config").get("last").await.ok()?;
        Some(read_contents(&root, manifest.through).await)
    })
    .await;
    assert_eq!(
        contents, manifest.contents,
        "every entry, change and state value as written"
    );
    let config = root.kv("config");
    // Not only equal to the manifest: the values the writer wrote.
    assert_eq!(
        config.get("key-07").await.expect("get").as_deref(),
        Some(&b"value 7"[..])
    );
    assert_eq!(
        config.get("key-03").await.expect("get").as_deref(),
        Some(&b"rewritten"[..])
    );
    assert_eq!(config.get("key-04").await.expect("get"), None);
    let json: Value = config.get_typed("json").await.expect("get").expect("present");
    assert_eq!(json, json!({"replicas": 5, "tags": ["a", "b"]}));
    assert_eq!(
        contents.entries["config"].len(),
        43,
        "40 keys less one deleted and one moved, and 5 more"
    );
    assert_eq!(contents.state.len(), 2);

    let reader = client_with(
        cluster,
        cluster.endpoints(),
        &AccessToken(manifest.reader_token.clone()),
    );
    assert_eq!(
        reader.kv("config").get("key-08").await.expect("reader get").as_deref(),
        Some(&b"value 8"[..])
    );
    let refused = reader
        .kv("config")
        .set("k")
        .bytes("v")
        .send()
        .await
        .expect_err("a reader's write");
    assert!(refused.is_forbidden(), "{refused:?}");

    let lease = root
        .kv("locks")
        .lease("leader", "worker-b", Duration::from_secs(5))
        .await
        .expect("the expired lease taken again");
    assert!(
        lease.token > manifest.lease_token,
        "fencing tokens only grow: {lease:?}"
    );
    let mut payloads = Vec::new();
    while let Some(delivery) = root.queue().claim().await.expect("claim") {
        payloads.push(String::from_utf8_lossy(&delivery.payload).into_owned());
    }
    assert_eq!(payloads, manifest.queue_payloads);
    let version = config.set("after").bytes("x").send().await.expect("write after");
    assert!(
        version > manifest.through,
        "version {version} after index {}",
        manifest.through
    );
}

/// One test, so that writing the fixtures comes before both reads.
#[tokio::test(flavor = "multi_thread")]
async fn a_data_directory_and_a_backup_of_format_1_are_read_back_value_for_value() {
    if std::env::var_os("LODE_WRITE_FORMAT_FIXTURES").is_some() {
        write_fixtures().await;
    }
    let manifest = read_manifest();
    let on_data = TestCluster::start_on_copies(&fixture_dir(), 1, 20);
    check_cluster(&on_data, &manifest).await;
    on_data.assert_no_errors();
    drop(on_data);
    let restored = TestCluster::start_restored(&fixture_dir().join("backup.lode"), 1, 20);
    check_cluster(&restored, &manifest).await;
    restored.assert_no_errors();
}
