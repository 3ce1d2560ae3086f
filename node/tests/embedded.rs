//! Embedded mode: the same SDK on a single member in the test's own
//! process, with RocksDB on disk that outlives the process's handle.

use lode_node::Lode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_store_serves_the_sdk_and_keeps_its_data() {
    let directory = tempfile::tempdir().expect("temp dir");
    let lode = Lode::open_embedded(directory.path()).await.expect("open");
    let kv = lode.kv("local");
    let version = kv
        .set("greeting")
        .bytes("hello")
        .expect_absent()
        .commit()
        .await
        .expect("cas");
    kv.set("doc")
        .json(&serde_json::json!({"a": 1}))
        .expect("json")
        .send()
        .await
        .expect("set");
    kv.patch("doc", br#"{"b": 2}"#).await.expect("patch");
    assert_eq!(
        lode.kv_namespaces().await.expect("namespaces"),
        vec!["local".to_owned()]
    );
    lode.close().await;

    // Reopened from the same directory: the data is there, on a new port.
    let lode = Lode::open_embedded(directory.path()).await.expect("reopen");
    let kv = lode.kv("local");
    let entry = kv.get_entry("greeting").await.expect("get").expect("kept");
    assert_eq!((entry.value, entry.version), (b"hello".to_vec(), version));
    let doc: serde_json::Value = kv.get_typed("doc").await.expect("get").expect("doc");
    assert_eq!(doc, serde_json::json!({"a": 1, "b": 2}));
    let conflict = kv
        .set("greeting")
        .bytes("again")
        .expect_absent()
        .commit()
        .await
        .expect_err("present");
    assert!(conflict.is_version_conflict());
    lode.close().await;
}
