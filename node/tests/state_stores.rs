//! State stores: FileStore across a real process kill, torn temporary files,
//! and a Kv namespace as the managed store on a real cluster.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use lode_client::{FileStore, StateStore};
use support::TestCluster;

const CHILD_ROOT_VARIABLE: &str = "LODE_FILE_STORE_CHILD_ROOT";
const KEYS: usize = 200;

#[tokio::test]
async fn a_file_store_keeps_its_data_across_a_killed_process() {
    if let Ok(root) = std::env::var(CHILD_ROOT_VARIABLE) {
        // The child: write every key, say so, then wait to be killed.
        let store = FileStore::new(root);
        for index in 0..KEYS {
            store
                .set(&format!("cursor:{index}"), index.to_string().into_bytes())
                .await
                .expect("set");
        }
        println!("written");
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        return;
    }
    let root = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "a_file_store_keeps_its_data_across_a_killed_process",
            "--nocapture",
        ])
        .env(CHILD_ROOT_VARIABLE, root.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let written = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("written"));
    assert!(written, "the child did not finish writing");
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");

    let store = FileStore::new(root.path());
    for index in 0..KEYS {
        let value = store.get(&format!("cursor:{index}")).await.expect("get");
        assert_eq!(value, Some(index.to_string().into_bytes()), "cursor:{index}");
    }
}

#[tokio::test]
async fn a_torn_temporary_file_never_replaces_a_good_value() {
    let root = tempfile::tempdir().expect("temp dir");
    let store = FileStore::new(root.path());
    store.set("checkpoint", b"good".to_vec()).await.expect("set");
    // A crash mid-write leaves a partial temporary file beside the value.
    let value_file = std::fs::read_dir(root.path())
        .expect("list")
        .map(|entry| entry.expect("entry").path())
        .next()
        .expect("the value's file");
    std::fs::write(value_file.with_extension("0123.tmp"), b"go").expect("torn file");
    let reopened = FileStore::new(root.path());
    assert_eq!(reopened.get("checkpoint").await.expect("get"), Some(b"good".to_vec()));
    reopened.set("checkpoint", b"better".to_vec()).await.expect("set over");
    assert_eq!(reopened.get("checkpoint").await.expect("get"), Some(b"better".to_vec()));
    // Keys are hex-encoded in file names: any string is a key.
    reopened.set("a/b\\c..d", b"x".to_vec()).await.expect("odd key");
    assert_eq!(reopened.get("a/b\\c..d").await.expect("get"), Some(b"x".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_namespace_is_the_managed_state_store() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let store = cluster.client().kv("agent-state");
    StateStore::set(&store, "cursor:metrics", b"42".to_vec())
        .await
        .expect("set");
    assert_eq!(
        StateStore::get(&store, "cursor:metrics").await.expect("get"),
        Some(b"42".to_vec())
    );
    let entry = store
        .get_entry("cursor:metrics")
        .await
        .expect("entry")
        .expect("present");
    assert_eq!(entry.expires_at_micros, None, "the managed store never expires");
    let too_big = StateStore::set(&store, "big", vec![0; 65_537])
        .await
        .expect_err("value limit");
    assert!(too_big.to_string().contains("value_bytes_max"), "{too_big}");
    assert!(StateStore::delete(&store, "cursor:metrics").await.expect("delete"));
    assert_eq!(StateStore::get(&store, "cursor:metrics").await.expect("get"), None);
    cluster.assert_no_errors();
}
