//! The KV API of the KV seed, operation by operation, through the Rust SDK
//! against a real 3-member cluster: success, the edge cases the seed names,
//! and failures.

mod support;

use std::time::Duration;

use futures::TryStreamExt;
use lode_client::codec::Codec;
use lode_client::protocol::EntryMeta;
use lode_client::{Bounds, Capability, Client, ClientOptions, Encoding, JsonCodec, LodeError, MsgpackCodec};
use serde::{Deserialize, Serialize};
use support::{wait_until, TestCluster};

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Settings {
    log_level: String,
    retries: u32,
}

fn settings() -> Settings {
    Settings {
        log_level: "debug".to_owned(),
        retries: 3,
    }
}

/// An application codec: JSON text reversed, to prove any codec works.
struct ReversedJson;

impl Codec for ReversedJson {
    fn encoding(&self) -> Encoding {
        Encoding::Custom("reversed-json".to_owned())
    }
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, LodeError> {
        let mut bytes = JsonCodec.encode(value)?;
        bytes.reverse();
        Ok(bytes)
    }
    fn decode<T: serde::de::DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, LodeError> {
        let mut bytes = bytes.to_vec();
        bytes.reverse();
        JsonCodec.decode(&bytes)
    }
}

fn past_micros() -> u64 {
    lode_client::facade::now_micros() - 1_000_000
}

async fn started() -> (TestCluster, Client) {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    (cluster, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_and_get_in_every_encoding() {
    let (cluster, client) = started().await;
    let kv = client.kv("config");

    let version = kv.set("raw").bytes([0u8, 255, 7]).send().await.expect("bytes");
    assert_eq!(kv.get("raw").await.expect("get"), Some(vec![0, 255, 7]));
    let entry = kv.get_entry("raw").await.expect("get_entry").expect("entry");
    assert_eq!(
        (entry.key.as_slice(), entry.version, entry.encoding.clone()),
        (&b"raw"[..], version, Encoding::Bytes)
    );
    assert_eq!(entry.source_index, version, "the source is the log id that wrote it");
    assert!(entry.source_term >= 1);
    assert_eq!(entry.expires_at_micros, None);

    kv.set("json")
        .json(&settings())
        .expect("encode")
        .send()
        .await
        .expect("json");
    assert_eq!(kv.get_typed::<Settings>("json").await.expect("typed"), Some(settings()));
    assert_eq!(
        kv.get_entry("json").await.expect("entry").expect("some").encoding,
        Encoding::Json
    );

    kv.set("packed")
        .msgpack(&settings())
        .expect("encode")
        .send()
        .await
        .expect("msgpack");
    assert_eq!(
        kv.get_as::<Settings, _>("packed", &MsgpackCodec).await.expect("as"),
        Some(settings())
    );
    assert_eq!(
        kv.get_entry("packed").await.expect("entry").expect("some").encoding,
        Encoding::Msgpack
    );

    kv.set("custom")
        .encode_with(&ReversedJson, &settings())
        .expect("encode")
        .send()
        .await
        .expect("custom");
    assert_eq!(
        kv.get_as::<Settings, _>("custom", &ReversedJson).await.expect("as"),
        Some(settings())
    );
    let custom = kv.get_entry("custom").await.expect("entry").expect("some");
    assert_eq!(custom.encoding, Encoding::Custom("reversed-json".to_owned()));
    // Decoding with the wrong codec is an error, not garbage.
    assert!(kv
        .get_typed::<Settings>("packed")
        .await
        .expect_err("msgpack is not JSON")
        .is_invalid());

    // Missing and expired both read as absent.
    assert_eq!(kv.get("missing").await.expect("get"), None);
    kv.set("gone")
        .bytes("x")
        .expires_at(past_micros())
        .send()
        .await
        .expect("expired write");
    assert_eq!(kv.get("gone").await.expect("get"), None);
    assert_eq!(kv.exists("gone").await.expect("exists"), None);
    let soon = kv
        .set("soon")
        .bytes("x")
        .ttl(Duration::from_millis(300))
        .send()
        .await
        .expect("ttl");
    let meta = kv.exists("soon").await.expect("exists").expect("live");
    assert_eq!(meta.version, soon);
    assert!(meta.expires_at_micros.is_some());
    wait_until("the TTL to pass", || async {
        kv.get("soon").await.expect("get").is_none().then_some(())
    })
    .await;

    // Keys are bytes: a non-UTF-8 key works like any other.
    kv.set([0xffu8, 0x00])
        .bytes("binary key")
        .send()
        .await
        .expect("binary key");
    assert_eq!(kv.get([0xffu8, 0x00]).await.expect("get"), Some(b"binary key".to_vec()));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_swap_commits_preconditions_and_never_drops_them() {
    let (cluster, client) = started().await;
    let kv = client.kv("counters");

    let first = kv
        .set("hits")
        .bytes("1")
        .expect_absent()
        .commit()
        .await
        .expect("absent key");
    let conflict = kv
        .set("hits")
        .bytes("1")
        .expect_absent()
        .commit()
        .await
        .expect_err("present key");
    assert!(conflict.is_version_conflict(), "{conflict:?}");
    assert_eq!(conflict, LodeError::VersionConflict { current: Some(first) });

    let second = kv
        .set("hits")
        .bytes("2")
        .expect_version(first)
        .commit()
        .await
        .expect("current version");
    assert!(second > first);
    let stale = kv
        .set("hits")
        .bytes("3")
        .expect_version(first)
        .commit()
        .await
        .expect_err("stale version");
    assert_eq!(stale, LodeError::VersionConflict { current: Some(second) });
    assert_eq!(
        kv.get("hits").await.expect("get"),
        Some(b"2".to_vec()),
        "a refused write changes nothing"
    );

    let absent = kv
        .set("never")
        .bytes("x")
        .expect_version(5)
        .commit()
        .await
        .expect_err("absent key");
    assert_eq!(absent, LodeError::VersionConflict { current: None });

    // An expired entry counts as absent.
    kv.set("lapsed")
        .bytes("old")
        .expires_at(past_micros())
        .send()
        .await
        .expect("expired");
    kv.set("lapsed")
        .bytes("new")
        .expect_absent()
        .commit()
        .await
        .expect("expired is absent");

    let unguarded = kv.set("hits").bytes("4").commit().await.expect_err("no precondition");
    assert!(
        unguarded.is_invalid() && unguarded.to_string().contains("expect_version"),
        "{unguarded}"
    );
    let dropped = kv
        .set("hits")
        .bytes("4")
        .expect_version(second)
        .send()
        .await
        .expect_err("send with precondition");
    assert!(
        dropped.is_invalid() && dropped.to_string().contains(".commit()"),
        "{dropped}"
    );
    assert_eq!(kv.get("hits").await.expect("get"), Some(b"2".to_vec()));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_exists_expire_and_patch() {
    let (cluster, client) = started().await;
    let kv = client.kv("items");

    let version = kv.set("a").bytes("12345").send().await.expect("set");
    assert_eq!(
        kv.exists("a").await.expect("exists"),
        Some(EntryMeta {
            version,
            expires_at_micros: None,
            size_bytes: 5
        })
    );
    assert!(kv.delete("a").await.expect("delete live"));
    assert!(!kv.delete("a").await.expect("delete absent"));
    kv.set("b")
        .bytes("x")
        .expires_at(past_micros())
        .send()
        .await
        .expect("expired");
    assert!(
        !kv.delete("b").await.expect("delete expired"),
        "an expired entry is not live"
    );

    // expire changes the expiry, never the value or the version.
    let version = kv.set("c").bytes("value").send().await.expect("set");
    kv.expire("c", Some(Duration::from_secs(3600))).await.expect("expire");
    let meta = kv.exists("c").await.expect("exists").expect("live");
    assert_eq!(meta.version, version);
    let expiry = meta.expires_at_micros.expect("an expiry");
    assert!(expiry > lode_client::facade::now_micros() + 3_000_000_000);
    let at = expiry + 5;
    kv.expire_at("c", Some(at)).await.expect("expire_at");
    assert_eq!(
        kv.exists("c").await.expect("exists").expect("live").expires_at_micros,
        Some(at)
    );
    kv.expire("c", None).await.expect("clear");
    let entry = kv.get_entry("c").await.expect("get").expect("live");
    assert_eq!(
        (entry.version, entry.expires_at_micros, entry.value),
        (version, None, b"value".to_vec())
    );
    kv.expire_at("c", Some(past_micros())).await.expect("expire now");
    assert_eq!(kv.get("c").await.expect("get"), None);
    let missing = kv.expire("c", None).await.expect_err("expired key");
    assert!(missing.is_not_found(), "{missing:?}");

    // patch merges JSON (RFC 7386) and returns the new version.
    let before = kv
        .set("doc")
        .json(&serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}}))
        .expect("json")
        .send()
        .await
        .expect("set");
    let after = kv
        .patch("doc", br#"{"b": {"c": null, "e": 4}, "f": "g"}"#)
        .await
        .expect("patch");
    assert!(after > before);
    let doc: serde_json::Value = kv.get_typed("doc").await.expect("get").expect("doc");
    assert_eq!(doc, serde_json::json!({"a": 1, "b": {"d": 3, "e": 4}, "f": "g"}));
    let not_json = kv.set("bin").bytes("{}").send().await.expect("bytes");
    assert!(not_json > 0);
    let refused = kv.patch("bin", b"{}").await.expect_err("bytes entry");
    assert!(
        refused.is_invalid() && refused.to_string().contains("JSON"),
        "{refused}"
    );
    let malformed = kv.patch("doc", b"{nope").await.expect_err("malformed patch");
    assert!(malformed.is_invalid(), "{malformed}");
    assert!(kv.patch("nothing", b"{}").await.expect_err("absent").is_not_found());
    let unchanged: serde_json::Value = kv.get_typed("doc").await.expect("get").expect("doc");
    assert_eq!(unchanged, doc, "a refused patch changes nothing");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_and_move_within_and_across_namespaces() {
    let (cluster, client) = started().await;
    let kv = client.kv("source");
    let other = client.kv("destination");

    let expiry = lode_client::facade::now_micros() + 3_600_000_000;
    kv.set("from")
        .json(&settings())
        .expect("json")
        .expires_at(expiry)
        .send()
        .await
        .expect("set");
    kv.set("to").bytes("old").send().await.expect("set");
    let copied = kv.copy_to("from", "to").send().await.expect("copy");
    let destination = kv.get_entry("to").await.expect("get").expect("copied");
    assert_eq!(destination.version, copied);
    assert_eq!(destination.encoding, Encoding::Json);
    assert_eq!(
        destination.expires_at_micros,
        Some(expiry),
        "the remaining expiry is kept"
    );
    assert_eq!(kv.get_typed::<Settings>("to").await.expect("get"), Some(settings()));
    assert!(kv.get("from").await.expect("get").is_some(), "copy keeps the source");

    let moved = kv
        .move_to("from", "elsewhere")
        .into_namespace("destination")
        .send()
        .await
        .expect("move");
    assert_eq!(
        other.get_entry("elsewhere").await.expect("get").expect("moved").version,
        moved
    );
    assert_eq!(kv.get("from").await.expect("get"), None, "move removes the source");

    let absent = kv.copy_to("from", "x").send().await.expect_err("absent source");
    assert!(absent.is_not_found(), "{absent:?}");
    kv.set("lapsed")
        .bytes("x")
        .expires_at(past_micros())
        .send()
        .await
        .expect("expired");
    assert!(kv
        .move_to("lapsed", "x")
        .send()
        .await
        .expect_err("expired source")
        .is_not_found());
    assert_eq!(kv.get("x").await.expect("get"), None);
    // Moving onto itself keeps the entry.
    kv.move_to("to", "to").send().await.expect("move onto itself");
    assert!(kv.get("to").await.expect("get").is_some());
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_many_delete_many_and_scans() {
    let (cluster, client) = started().await;
    let kv = client.kv("bulk");
    for key in ["a1", "a2", "b1", "b2", "c1"] {
        kv.set(key).bytes(key).send().await.expect("set");
    }
    kv.set([0xffu8, b'a'])
        .bytes("not utf-8")
        .send()
        .await
        .expect("binary key");
    kv.set("a3")
        .bytes("x")
        .expires_at(past_micros())
        .send()
        .await
        .expect("expired");

    // get_many: one value per key, in the order given.
    let values = kv.get_many(&["b2", "zz", "a1", "a3"]).await.expect("get_many");
    assert_eq!(values, vec![Some(b"b2".to_vec()), None, Some(b"a1".to_vec()), None]);
    let too_many: Vec<String> = (0..1001).map(|index| format!("k{index}")).collect();
    let refused = kv.get_many(&too_many).await.expect_err("over the limit");
    assert!(refused.to_string().contains("get_many_keys_max = 1000"), "{refused}");

    // scan: bounds, limits and cursors; expired entries never appear.
    let keys = |entries: &[lode_client::Entry]| entries.iter().map(|entry| entry.key.clone()).collect::<Vec<_>>();
    let all: Vec<lode_client::Entry> = kv.scan().entries().try_collect().await.expect("walk");
    assert_eq!(
        keys(&all),
        vec![
            b"a1".to_vec(),
            b"a2".to_vec(),
            b"b1".to_vec(),
            b"b2".to_vec(),
            b"c1".to_vec(),
            vec![0xff, b'a']
        ]
    );
    let prefix = kv.scan().prefix("a").fetch().await.expect("prefix");
    assert_eq!(keys(&prefix.entries), vec![b"a1".to_vec(), b"a2".to_vec()]);
    let range = kv.scan().range("a2", "b2").fetch().await.expect("range");
    assert_eq!(
        keys(&range.entries),
        vec![b"a2".to_vec(), b"b1".to_vec()],
        "start included, end excluded"
    );
    let contains = kv.scan().key_contains("1").fetch().await.expect("contains");
    assert_eq!(
        keys(&contains.entries),
        vec![b"a1".to_vec(), b"b1".to_vec(), b"c1".to_vec()]
    );
    let contains_a = kv.scan().key_contains("a").fetch().await.expect("contains a");
    assert_eq!(
        keys(&contains_a.entries),
        vec![b"a1".to_vec(), b"a2".to_vec()],
        "non-UTF-8 keys are skipped"
    );
    let first = kv.scan().limit(2).fetch().await.expect("page 1");
    assert_eq!(keys(&first.entries), vec![b"a1".to_vec(), b"a2".to_vec()]);
    let cursor = first.cursor.expect("more pages");
    let second = kv.scan().limit(2).cursor(cursor).fetch().await.expect("page 2");
    assert_eq!(keys(&second.entries), vec![b"b1".to_vec(), b"b2".to_vec()]);
    let bad = kv
        .scan()
        .cursor("not a cursor")
        .fetch()
        .await
        .expect_err("foreign cursor");
    assert!(bad.is_invalid());
    assert!(kv.scan().limit(0).fetch().await.expect_err("zero limit").is_invalid());

    // delete_many: each bound, counts of live entries, then the whole namespace.
    assert_eq!(
        kv.delete_many().prefix("a").send().await.expect("prefix"),
        2,
        "a3 had expired"
    );
    assert_eq!(kv.delete_many().range("b1", "b2").send().await.expect("range"), 1);
    assert_eq!(kv.delete_many().key_contains("2").send().await.expect("contains"), 1);
    assert_eq!(kv.delete_many().send().await.expect("everything"), 2);
    assert!(kv.scan().fetch().await.expect("empty").entries.is_empty());

    // A selection larger than one round trip is removed whole.
    let many = client.kv("many");
    let writes: Vec<_> = (0..2500)
        .map(|index| {
            let many = many.clone();
            async move { many.set(format!("k{index:05}")).bytes("v").send().await }
        })
        .collect();
    for write in futures::future::join_all(writes).await {
        write.expect("write");
    }
    assert_eq!(many.delete_many().send().await.expect("delete 2500"), 2500);
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_under_concurrent_writes_returns_each_stable_key_once() {
    let (cluster, client) = started().await;
    let kv = client.kv("walk");
    for index in 0..300 {
        kv.set(format!("stable-{index:04}"))
            .bytes("s")
            .send()
            .await
            .expect("set");
    }
    // Writers add and remove other keys all through the walk.
    let writer = {
        let kv = kv.clone();
        tokio::spawn(async move {
            for index in 0..300 {
                kv.set(format!("churn-{index:04}"))
                    .bytes("c")
                    .send()
                    .await
                    .expect("churn set");
                kv.delete(format!("stable-x{index:04}")).await.expect("churn delete");
            }
        })
    };
    let walked: Vec<lode_client::Entry> = kv.scan().limit(7).entries().try_collect().await.expect("walk");
    writer.await.expect("writer");
    let mut seen = std::collections::BTreeSet::new();
    for entry in &walked {
        assert!(seen.insert(entry.key.clone()), "key {:?} returned twice", entry.key);
    }
    for index in 0..300 {
        assert!(
            seen.contains(format!("stable-{index:04}").as_bytes()),
            "stable-{index:04} skipped"
        );
    }
    let ordered: Vec<_> = walked.iter().map(|entry| entry.key.clone()).collect();
    let mut sorted = ordered.clone();
    sorted.sort();
    assert_eq!(ordered, sorted, "a walk is in key order");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_streams_and_capabilities() {
    let (cluster, client) = started().await;
    client.kv("alpha").set("k").bytes("v").send().await.expect("set");
    client
        .kv("beta")
        .set("k")
        .bytes("v")
        .expires_at(past_micros())
        .send()
        .await
        .expect("expired only");
    let scoped = Client::with_options(
        cluster.endpoints(),
        ClientOptions {
            default_stream: Some("orders".to_owned()),
            ..ClientOptions::default()
        },
    )
    .expect("client");
    let config = scoped.kv("config");
    assert_eq!(config.namespace(), "config");
    assert_eq!(config.resource_namespace(), "stream:orders/config");
    config.set("k").bytes("scoped").send().await.expect("scoped set");
    scoped
        .kv_unscoped("gamma")
        .set("k")
        .bytes("v")
        .send()
        .await
        .expect("opt-out set");

    assert_eq!(
        scoped.kv_namespaces().await.expect("scoped list"),
        vec!["config".to_owned()]
    );
    let mut everything = client.kv_namespaces().await.expect("list");
    everything.sort();
    assert_eq!(
        everything,
        vec!["alpha", "gamma", "stream:orders/config"],
        "beta holds no live entry"
    );
    assert_eq!(
        client.kv("stream:orders/config").get("k").await.expect("get"),
        Some(b"scoped".to_vec())
    );
    // into_namespace follows the same scoping.
    config
        .copy_to("k", "k")
        .into_namespace("copy")
        .send()
        .await
        .expect("copy");
    assert_eq!(scoped.kv("copy").get("k").await.expect("get"), Some(b"scoped".to_vec()));

    let offered = client.capabilities().await.expect("capabilities");
    for capability in [Capability::Kv, Capability::Cas, Capability::FencedLeases] {
        assert!(offered.contains(&capability), "{capability:?} is not offered");
    }
    let missing = client.require(Capability::Forks).await.expect_err("not offered");
    assert!(matches!(missing, LodeError::Unsupported(_)), "{missing:?}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_entries_are_swept_from_every_replica() {
    let (cluster, client) = started().await;
    let kv = client.kv("ephemeral");
    for index in 0..50 {
        kv.set(format!("session-{index}"))
            .bytes("token")
            .ttl(Duration::from_millis(200))
            .send()
            .await
            .expect("set");
    }
    kv.set("kept").bytes("forever").send().await.expect("set");
    // Expired entries vanish from reads at once, and from every replica's
    // storage once the leader's sweep has applied everywhere.
    for id in 1..=3 {
        let member = cluster.client_of(id);
        wait_until(&format!("member {id} to sweep"), || async {
            let status = member.node_status().await.ok()?;
            let visible = member
                .kv("ephemeral")
                .with_consistency(lode_client::Consistency::Eventual);
            let page = visible.scan().fetch().await.ok()?;
            let only_kept = page.entries.len() == 1 && page.entries[0].key == b"kept";
            (status.expired_awaiting_sweep == 0 && only_kept).then_some(())
        })
        .await;
    }
    assert_eq!(kv.get("kept").await.expect("get"), Some(b"forever".to_vec()));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_links_are_stored_with_entries_and_list_the_keys_written() {
    let (cluster, client) = started().await;
    let session = lode_client::protocol::SessionLink {
        stream: "support".to_owned(),
        session_id: "ticket-42".to_owned(),
    };
    let flags = client.kv("ticket-flags").in_session(session.clone());
    flags
        .set("ticket:42")
        .json(&serde_json::json!({"escalated": true}))
        .expect("json")
        .send()
        .await
        .expect("set");
    let entry = flags.get_entry("ticket:42").await.expect("get").expect("entry");
    assert_eq!(
        entry.session.as_ref(),
        Some(&session),
        "the link is stored with the entry"
    );
    let version = flags
        .set("ticket:43")
        .bytes("x")
        .expect_absent()
        .commit()
        .await
        .expect("cas");
    flags.patch("ticket:42", br#"{"owner":"ana"}"#).await.expect("patch");
    flags.delete("ticket:43").await.expect("delete");
    assert!(version > 0);
    client
        .kv("other")
        .in_session(session.clone())
        .set("note")
        .bytes("n")
        .send()
        .await
        .expect("set");
    // An unlinked write replaces the link with none.
    client
        .kv("ticket-flags")
        .set("ticket:44")
        .bytes("y")
        .send()
        .await
        .expect("unlinked");
    assert_eq!(
        client
            .kv("ticket-flags")
            .get_entry("ticket:44")
            .await
            .expect("get")
            .expect("entry")
            .session,
        None
    );

    let written = client.session_keys(&session).await.expect("session keys");
    assert_eq!(
        written,
        vec![
            ("other".to_owned(), b"note".to_vec()),
            ("ticket-flags".to_owned(), b"ticket:42".to_vec()),
            ("ticket-flags".to_owned(), b"ticket:43".to_vec()),
        ],
        "every key the session set, swapped, patched or deleted, once"
    );
    let elsewhere = lode_client::protocol::SessionLink {
        stream: "support".to_owned(),
        session_id: "ticket-7".to_owned(),
    };
    assert!(client.session_keys(&elsewhere).await.expect("empty").is_empty());
    let bad = lode_client::protocol::SessionLink {
        stream: String::new(),
        session_id: "x".to_owned(),
    };
    let refused = client
        .kv("k")
        .in_session(bad)
        .set("a")
        .bytes("b")
        .send()
        .await
        .expect_err("empty stream");
    assert!(
        refused.to_string().contains("session stream must not be empty"),
        "{refused}"
    );
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_page_stops_at_its_byte_limit_and_the_walk_goes_on() {
    let (_cluster, client) = started().await;
    let kv = client.kv("large");
    let value = vec![7u8; 60 * 1024];
    for index in 0..100 {
        kv.set(format!("k{index:03}"))
            .bytes(value.clone())
            .send()
            .await
            .expect("write");
    }
    let first = kv.scan().limit(1000).fetch().await.expect("first page");
    let bytes: usize = first
        .entries
        .iter()
        .map(|entry| entry.key.len() + entry.value.len())
        .sum();
    let page_max = lode_types::limits::SCAN_PAGE_BYTES_MAX;
    assert!(
        first.entries.len() < 100,
        "one page held all {} entries",
        first.entries.len()
    );
    assert!(bytes < page_max + value.len() + 16, "a page of {bytes} bytes");
    assert!(first.cursor.is_some(), "a short page without a cursor");
    let all: Vec<lode_client::Entry> = kv.scan().entries().try_collect().await.expect("walk");
    let keys: Vec<String> = all
        .iter()
        .map(|entry| String::from_utf8_lossy(&entry.key).into_owned())
        .collect();
    let expected: Vec<String> = (0..100).map(|index| format!("k{index:03}")).collect();
    assert_eq!(keys, expected);
}
