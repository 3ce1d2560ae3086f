//! The KV API as JSON (`/kv/v1/…`) on a three-member cluster, through a
//! follower's HTTP port: every KV operation and read, bytes as text and as
//! base64, 64-bit integers as strings, a repeated op id applied once, every
//! error kind the API can reach with its status and details, the change
//! feed as server-sent events, the body limit, and the served routes held
//! to the OpenAPI document.

mod support;

use serde_json::{json, Value};
use support::{get, get_head, post, server_sent_events, TestCluster, ACCESS_TOKEN};

struct KvHttp {
    address: String,
}

impl KvHttp {
    /// POSTs `body` to `/kv/v1/<path>`: (status, JSON answer).
    fn call(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, text) = post(
            &self.address,
            &format!("/kv/v1/{path}"),
            Some(ACCESS_TOKEN),
            "application/json",
            body.to_string().as_bytes(),
        );
        let answer = serde_json::from_str(text.trim()).unwrap_or_else(|error| panic!("{path}: {error}: {text}"));
        (status, answer)
    }

    fn write(&self, operations: Value) -> Value {
        let (status, answer) = self.call("write", &json!({ "operations": operations }));
        assert_eq!(status, 200, "{answer}");
        answer
    }

    /// A write that must fail: (status, the error object).
    fn write_refused(&self, body: Value) -> (u16, Value) {
        let (status, answer) = self.call("write", &body);
        assert_ne!(status, 200, "{answer}");
        (status, answer["error"].clone())
    }

    fn read(&self, query: Value) -> Value {
        self.read_with(query, json!("linearizable"))
    }

    fn read_with(&self, query: Value, consistency: Value) -> Value {
        let (status, answer) = self.call("read", &json!({ "query": query, "consistency": consistency }));
        assert_eq!(status, 200, "{answer}");
        answer
    }

    /// The one result of a write of one operation.
    fn one(&self, operation: Value) -> Value {
        self.write(json!([operation]))["results"][0].clone()
    }
}

async fn cluster_with(flags: &[&str]) -> (TestCluster, KvHttp) {
    let cluster = TestCluster::start_with_http_and_flags(3, 10_000, flags);
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.a_follower(leader);
    let address = cluster
        .kv_connect_url(follower)
        .trim_start_matches("http://")
        .to_owned();
    (cluster, KvHttp { address })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_reads_of_every_kv_operation() {
    let (cluster, kv) = cluster_with(&[]).await;

    // Set as text and JSON, then read the entry back with every field.
    let set = kv.one(json!({ "op": "set", "namespace": "config", "key": "service:auth",
        "value": "{\"log_level\":\"info\"}", "encoding": "json" }));
    let version = set["version"].as_str().expect("a version as a string").to_owned();
    let entry = kv.read(json!({ "op": "get", "namespace": "config", "key": "service:auth" }));
    assert_eq!(entry["entry"]["value"], "{\"log_level\":\"info\"}");
    assert_eq!(entry["entry"]["encoding"], "json");
    assert_eq!(entry["entry"]["version"], version);
    assert_eq!(entry["entry"]["source_index"], version);
    assert_eq!(entry["entry"]["expires_at_micros"], Value::Null);
    assert!(entry["position"].as_str().is_some());

    // Bytes that are not UTF-8 travel as base64 both ways.
    kv.one(json!({ "op": "set", "namespace": "config", "key": { "base64": "AP8=" }, "value": { "base64": "gAE=" } }));
    let binary = kv.read(json!({ "op": "get", "namespace": "config", "key": { "base64": "AP8=" } }));
    assert_eq!(binary["entry"]["key"], json!({ "base64": "AP8=" }));
    assert_eq!(binary["entry"]["value"], json!({ "base64": "gAE=" }));
    assert_eq!(binary["entry"]["encoding"], "bytes");

    // An expiry past 2^53 microseconds survives as a string.
    let far = "9007199254740993123";
    kv.one(json!({ "op": "set", "namespace": "config", "key": "far", "value": "v", "expires_at_micros": far }));
    let exists = kv.read(json!({ "op": "exists", "namespace": "config", "key": "far" }));
    assert_eq!(exists["exists"]["expires_at_micros"], far);
    assert_eq!(exists["exists"]["size_bytes"], "1");
    let absent = kv.read(json!({ "op": "exists", "namespace": "config", "key": "nobody" }));
    assert_eq!(absent["exists"], Value::Null);

    // Expire: relative, absolute, cleared; the version stays.
    let expired = kv.one(json!({ "op": "expire", "namespace": "config", "key": "far", "ttl_micros": "3600000000" }));
    assert_eq!(expired["op"], "expire");
    kv.one(json!({ "op": "expire", "namespace": "config", "key": "far" }));
    let cleared = kv.read(json!({ "op": "get", "namespace": "config", "key": "far" }));
    assert_eq!(cleared["entry"]["expires_at_micros"], Value::Null);
    assert_eq!(cleared["entry"]["version"], expired["version"]);

    // Patch, copy into another namespace, move.
    let patched = kv.one(json!({ "op": "patch", "namespace": "config", "key": "service:auth",
        "patch": "{\"log_level\":\"debug\",\"retries\":3}" }));
    let after_patch = kv.read(json!({ "op": "get", "namespace": "config", "key": "service:auth" }));
    assert_eq!(after_patch["entry"]["version"], patched["version"]);
    let patched_value: Value =
        serde_json::from_str(after_patch["entry"]["value"].as_str().expect("text")).expect("JSON value");
    assert_eq!(patched_value, json!({ "log_level": "debug", "retries": 3 }));
    kv.one(json!({ "op": "copy", "namespace": "config", "key": "service:auth", "to_key": "copy", "to_namespace": "backup" }));
    let moved = kv.one(json!({ "op": "move", "namespace": "backup", "key": "copy", "to_key": "moved" }));
    assert_eq!(moved["op"], "copy");
    let many = kv.read(json!({ "op": "get_many", "namespace": "backup", "keys": ["copy", "moved"] }));
    assert_eq!(many["entries"][0], Value::Null);
    assert_eq!(many["entries"][1]["encoding"], "json");

    // Delete reports whether a live entry went.
    assert_eq!(
        kv.one(json!({ "op": "delete", "namespace": "backup", "key": "moved" }))["removed_live_entry"],
        true
    );
    assert_eq!(
        kv.one(json!({ "op": "delete", "namespace": "backup", "key": "moved" }))["removed_live_entry"],
        false
    );

    // Scans page with cursors; delete_range selects by prefix, range and text.
    let keys: Vec<Value> = (0..5)
        .map(|at| json!({ "op": "set", "namespace": "pages", "key": format!("k{at}"), "value": "v" }))
        .collect();
    kv.write(Value::Array(keys));
    let first = kv.read(json!({ "op": "scan", "namespace": "pages", "prefix": "k", "limit": 3 }));
    assert_eq!(first["entries"].as_array().expect("entries").len(), 3);
    let cursor = first["cursor"].as_str().expect("a cursor").to_owned();
    let rest = kv.read(json!({ "op": "scan", "namespace": "pages", "prefix": "k", "limit": 3, "cursor": cursor }));
    assert_eq!(rest["entries"].as_array().expect("entries").len(), 2);
    assert_eq!(rest["entries"][0]["key"], "k3");
    assert_eq!(rest["cursor"], Value::Null);
    let ranged = kv.one(json!({ "op": "delete_range", "namespace": "pages", "start": "k1", "end": "k3" }));
    assert_eq!(
        (ranged["removed"].clone(), ranged["resume_after"].clone()),
        (json!(2), Value::Null)
    );
    let contained = kv.one(json!({ "op": "delete_range", "namespace": "pages", "key_contains": "4" }));
    assert_eq!(contained["removed"], 1);
    let all = kv.one(json!({ "op": "delete_range", "namespace": "pages" }));
    assert_eq!(all["removed"], 2);
    let namespaces = kv.read(json!({ "op": "namespaces" }));
    assert_eq!(namespaces["namespaces"], json!(["config"]));

    // An atomic write with a check that fails applies nothing.
    let (status, error) = kv.write_refused(json!({ "operations": [
        { "op": "set", "namespace": "config", "key": "new", "value": "v" },
        { "op": "check", "namespace": "config", "key": "service:auth", "expect_absent": true },
    ] }));
    assert_eq!(
        (status, error["kind"].clone(), error["failed_checks"].clone()),
        (409, json!("version_conflict"), json!([0]))
    );
    assert_eq!(
        kv.read(json!({ "op": "get", "namespace": "config", "key": "new" }))["entry"],
        Value::Null
    );
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_swap_leases_fencing_and_session_links() {
    let (cluster, kv) = cluster_with(&[]).await;
    let created =
        kv.one(json!({ "op": "set", "namespace": "config", "key": "k", "value": "1", "expect_absent": true }));
    let version = created["version"].clone();
    let (status, error) = kv.write_refused(json!({ "operations": [
        { "op": "set", "namespace": "config", "key": "k", "value": "2", "expect_absent": true }] }));
    assert_eq!(
        (status, error["kind"].clone(), error["current_version"].clone()),
        (409, json!("version_conflict"), version.clone())
    );
    let swapped =
        kv.one(json!({ "op": "set", "namespace": "config", "key": "k", "value": "2", "expect_version": version }));
    let (_, stale_swap) = kv.write_refused(json!({ "operations": [
        { "op": "set", "namespace": "config", "key": "k", "value": "3", "expect_version": version }] }));
    assert_eq!(stale_swap["current_version"], swapped["version"]);

    // A lease, its holder's fenced write, renewal, and lease_lost after release.
    let lease = kv.one(json!({ "op": "acquire_lease", "namespace": "config", "key": "lease:k",
        "holder": "worker-a", "ttl_micros": "30000000" }));
    let token = lease["token"].clone();
    assert_eq!(lease["ttl_micros"], "30000000");
    let (_, held) = kv.write_refused(json!({ "operations": [{ "op": "acquire_lease", "namespace": "config",
        "key": "lease:k", "holder": "worker-b", "ttl_micros": "30000000" }] }));
    assert_eq!(held["kind"], "version_conflict");
    let shown = kv.read(json!({ "op": "lease", "namespace": "config", "key": "lease:k" }));
    assert_eq!(
        (shown["lease"]["holder"].clone(), shown["lease"]["token"].clone()),
        (json!("worker-a"), token.clone())
    );
    let fence = json!({ "namespace": "config", "key": "lease:k", "token": token });
    let fenced = kv.one(
        json!({ "op": "set", "namespace": "config", "key": "k", "value": "fenced",
        "expect_version": swapped["version"], "fence": fence }),
    );
    let renewed = kv.one(json!({ "op": "renew_lease", "namespace": "config", "key": "lease:k",
        "holder": "worker-a", "token": token, "ttl_micros": "30000000" }));
    assert_eq!(renewed["token"], token);
    let released = kv.one(json!({ "op": "release_lease", "namespace": "config", "key": "lease:k",
        "holder": "worker-a", "token": token }));
    assert_eq!(released["released"], true);
    let (status, lost) = kv.write_refused(json!({ "operations": [{ "op": "set", "namespace": "config", "key": "k",
        "value": "late", "expect_version": fenced["version"], "fence": fence }] }));
    assert_eq!((status, lost["kind"].clone()), (409, json!("lease_lost")));
    let (_, unfenced) = kv.write_refused(json!({ "operations": [{ "op": "set", "namespace": "config", "key": "k",
        "value": "v", "fence": fence }] }));
    assert!(
        unfenced["message"]
            .as_str()
            .expect("message")
            .contains("expect_version or expect_absent"),
        "{unfenced}"
    );

    // A session link is stored and listed.
    let session = json!({ "stream": "agents", "session_id": "s-1" });
    kv.one(json!({ "op": "set", "namespace": "ticket-flags", "key": "ticket:42", "value": "{}", "session": session }));
    let linked = kv.read(json!({ "op": "get", "namespace": "ticket-flags", "key": "ticket:42" }));
    assert_eq!(linked["entry"]["session"], session);
    let keys = kv.read(json!({ "op": "session_keys", "session": session }));
    assert_eq!(
        keys["keys"],
        json!([{ "namespace": "ticket-flags", "key": "ticket:42" }])
    );

    // Reads at a position: met at once after the write, stale when far ahead.
    let position = fenced["version"].clone();
    let at_least = kv.read_with(
        json!({ "op": "get", "namespace": "config", "key": "k" }),
        json!({ "at_least": position }),
    );
    assert_eq!(at_least["entry"]["value"], "fenced");
    let (status, stale) = kv.call(
        "read",
        &json!({ "query": { "op": "get", "namespace": "config", "key": "k" },
        "consistency": { "at_least": "1000000000" } }),
    );
    assert_eq!(
        (status, stale["error"]["kind"].clone(), stale["error"]["wanted"].clone()),
        (503, json!("stale"), json!("1000000000"))
    );
    let eventual = kv.read_with(json!({ "op": "namespaces" }), json!("eventual"));
    assert!(eventual["namespaces"].as_array().is_some());
    let (status, capabilities) = get(&kv.address, "/kv/v1/capabilities", Some(ACCESS_TOKEN));
    assert_eq!(status, 200);
    let capabilities: Value = serde_json::from_str(&capabilities).expect("JSON");
    assert_eq!(capabilities["capabilities"], json!(["kv", "cas", "fenced_leases"]));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_op_id_applies_once_and_answers_the_first_outcome() {
    let (cluster, kv) = cluster_with(&[]).await;
    let op_id = "0123456789abcdef0123456789abcdef";
    let write =
        json!({ "op_id": op_id, "operations": [{ "op": "set", "namespace": "n", "key": "k", "value": "first" }] });
    let (status, first) = kv.call("write", &write);
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["op_id"], op_id);
    kv.one(json!({ "op": "set", "namespace": "n", "key": "k", "value": "second" }));
    let (status, repeated) = kv.call("write", &write);
    assert_eq!(status, 200, "{repeated}");
    assert_eq!(repeated, first, "a repeat answers the first outcome");
    let entry = kv.read(json!({ "op": "get", "namespace": "n", "key": "k" }));
    assert_eq!(entry["entry"]["value"], "second", "the repeat did not apply again");
    // Without an op id the gateway draws a fresh one each time.
    let unnamed = json!({ "operations": [{ "op": "set", "namespace": "n", "key": "k", "value": "third" }] });
    let (_, one) = kv.call("write", &unnamed);
    let (_, two) = kv.call("write", &unnamed);
    assert_ne!(one["op_id"], two["op_id"]);
    assert_ne!(one["position"], two["position"]);
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_name_the_field_and_the_limit() {
    let (cluster, kv) = cluster_with(&[]).await;
    let refused = |body: Value, status: u16, kind: &str, says: &[&str]| {
        let (got, answer) = kv.call("write", &body);
        assert_eq!(got, status, "{answer}");
        assert_eq!(answer["error"]["kind"], kind, "{answer}");
        let message = answer["error"]["message"].as_str().expect("a message");
        for part in says {
            assert!(message.contains(part), "{message:?} should say {part:?}");
        }
    };
    let long_key = "k".repeat(2049);
    refused(
        json!({ "operations": [{ "op": "set", "namespace": "n", "key": long_key, "value": "v" }] }),
        400,
        "invalid",
        &["key", "2048"],
    );
    refused(
        json!({ "operations": [{ "op": "frobnicate" }] }),
        400,
        "invalid",
        &["operations[0]", "frobnicate"],
    );
    refused(
        json!({ "operations": [{ "op": "set", "namespace": "n", "key": "k", "value": "v", "colour": "red" }] }),
        400,
        "invalid",
        &["colour"],
    );
    refused(
        json!({ "operations": [{ "op": "set", "namespace": "n", "key": { "base64": "@@" }, "value": "v" }] }),
        400,
        "invalid",
        &["base64"],
    );
    refused(
        json!({ "operations": [{ "op": "set", "namespace": "n", "key": "k", "value": "v", "expires_at_micros": "-5" }] }),
        400,
        "invalid",
        &["expires_at_micros", "-5"],
    );
    refused(
        json!({ "operations": [{ "op": "set", "namespace": "n", "key": "k", "value": "v",
            "ttl_micros": "1", "expires_at_micros": "1" }] }),
        400,
        "invalid",
        &["operations[0]", "exclude each other"],
    );
    refused(
        json!({ "operations": [{ "op": "set", "namespace": "n", "key": "k", "value": "v", "encoding": "yaml" }] }),
        400,
        "invalid",
        &["yaml"],
    );
    refused(json!({ "op_id": "12", "operations": [] }), 400, "invalid", &["op_id"]);
    refused(
        json!({ "operations": [{ "op": "expire", "namespace": "n", "key": "absent" }] }),
        404,
        "not_found",
        &[],
    );
    let (status, answer) = kv.call(
        "read",
        &json!({ "query": { "op": "scan", "namespace": "n", "cursor": "zz" } }),
    );
    assert_eq!((status, answer["error"]["kind"].clone()), (400, json!("invalid")));
    let (status, text) = post(&kv.address, "/kv/v1/write", None, "application/json", b"{}");
    assert_eq!(status, 401, "no token, no write");
    let refusal: Value = serde_json::from_str(&text).expect("a JSON refusal");
    assert_eq!(refusal["error"]["kind"], "unauthorized", "{refusal}");
    assert!(
        refusal["error"]["message"]
            .as_str()
            .expect("message")
            .contains("Bearer"),
        "{refusal}"
    );
    let (status, text) = post(
        &kv.address,
        "/kv/v1/write",
        Some(ACCESS_TOKEN),
        "application/json",
        b"{\"operations\": [",
    );
    assert_eq!(status, 400, "{text}");

    // The body limit leaves room for the largest get_many in base64, and
    // no more.
    let keys: Vec<Value> = (0..1000u32)
        .map(|at| {
            let mut key = vec![0xffu8; 2048];
            key[..4].copy_from_slice(&at.to_be_bytes());
            json!({ "base64": base64_of(&key) })
        })
        .collect();
    let (status, answer) = kv.call(
        "read",
        &json!({ "query": { "op": "get_many", "namespace": "n", "keys": keys } }),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["entries"].as_array().expect("entries").len(), 1000);
    let huge = format!("{{\"operations\": [], \"padding\": \"{}\"}}", "x".repeat(5 << 20));
    let (status, _) = post(
        &kv.address,
        "/kv/v1/write",
        Some(ACCESS_TOKEN),
        "application/json",
        huge.as_bytes(),
    );
    assert_eq!(status, 413, "a body over the limit is refused unread");
    cluster.assert_no_errors();
}

/// Standard padded base64, written out here so the test does not trust
/// the server's own encoder.
fn base64_of(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::new();
    for chunk in bytes.chunks(3) {
        let word = chunk
            .iter()
            .enumerate()
            .fold(0u32, |word, (at, byte)| word | u32::from(*byte) << (16 - 8 * at));
        for at in 0..4 {
            if at <= chunk.len() {
                text.push(char::from(ALPHABET[(word >> (18 - 6 * at) & 63) as usize]));
            } else {
                text.push('=');
            }
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_change_feed_streams_resumes_and_reports_compaction() {
    let (cluster, kv) = cluster_with(&["--change-log-events-max", "5"]).await;
    kv.one(json!({ "op": "set", "namespace": "feed", "key": "a", "value": "1" }));
    kv.one(json!({ "op": "set", "namespace": "feed", "key": "a", "value": "2" }));
    kv.one(json!({ "op": "delete", "namespace": "feed", "key": "a" }));
    kv.one(json!({ "op": "set", "namespace": "other", "key": "b", "value": { "base64": "/w==" } }));
    let events = server_sent_events(
        &kv.address,
        "/kv/v1/changes?namespace_prefix=feed",
        ACCESS_TOKEN,
        None,
        3,
    );
    let kinds: Vec<&Value> = events.iter().map(|(_, data)| &data["kind"]).collect();
    assert_eq!(kinds, [&json!("created"), &json!("updated"), &json!("deleted")]);
    assert_eq!(events[1].1["old_value"], "1");
    assert_eq!(events[1].1["new_value"], "2");
    assert_eq!(events[2].1["new_value"], Value::Null);
    assert_eq!(
        events[0].0,
        format!(
            "{}.{}",
            events[0].1["index"].as_str().expect("index"),
            events[0].1["sequence"]
        )
    );
    let resumed = server_sent_events(&kv.address, "/kv/v1/changes", ACCESS_TOKEN, Some(&events[2].0), 1);
    assert_eq!(resumed[0].1["namespace"], "other");
    assert_eq!(resumed[0].1["new_value"], json!({ "base64": "/w==" }));
    let by_query = server_sent_events(
        &kv.address,
        &format!("/kv/v1/changes?after={}", events[1].0),
        ACCESS_TOKEN,
        None,
        1,
    );
    assert_eq!(by_query[0].0, events[2].0);

    // Past the retained window the stream ends with `compacted`.
    for count in 0..20 {
        kv.one(json!({ "op": "set", "namespace": "feed", "key": "c", "value": count.to_string() }));
    }
    let trimmed = support::wait_until("the change log to be trimmed", || async {
        let first = server_sent_events(&kv.address, "/kv/v1/changes?after=1.0", ACCESS_TOKEN, None, 1);
        (first[0].1["kind"] == "compacted").then(|| first[0].1.clone())
    })
    .await;
    assert!(trimmed["trimmed_through"].as_str().is_some(), "{trimmed}");
    let (status, text) = get(&kv.address, "/kv/v1/changes?after=nonsense", Some(ACCESS_TOKEN));
    assert_eq!(status, 400, "{text}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_of_the_openapi_document_is_served() {
    let (cluster, kv) = cluster_with(&[]).await;
    let (status, text) = get(&kv.address, "/kv/v1/openapi.json", None);
    assert_eq!(status, 200);
    let document: Value = serde_json::from_str(&text).expect("the document is JSON");
    let paths = document["paths"].as_object().expect("paths");
    assert!(paths.len() >= 5);
    for (path, item) in paths {
        for method in item.as_object().expect("a path item").keys() {
            // A route that is served answers its own JSON (or the document,
            // or a stream); an unserved one gets axum's empty 404 or 405.
            let (status, body) = match method.as_str() {
                "post" => post(&kv.address, path, Some(ACCESS_TOKEN), "application/json", b"{}"),
                "get" if path.ends_with("/changes") => {
                    let head = get_head(&kv.address, path, Some(ACCESS_TOKEN)).to_ascii_lowercase();
                    assert!(head.starts_with("http/1.1 200"), "{head}");
                    assert!(head.contains("content-type: text/event-stream"), "{head}");
                    continue;
                }
                "get" => get(&kv.address, path, Some(ACCESS_TOKEN)),
                other => panic!("the document names method {other} of {path}"),
            };
            assert!(
                status != 405 && !(status == 404 && body.is_empty()),
                "{method} {path}: {status}"
            );
            let answer: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{method} {path}: {body}"));
            assert!(
                status == 200 || answer["error"]["kind"].is_string(),
                "{method} {path}: {answer}"
            );
        }
    }
    cluster.assert_no_errors();
}

/// The client-port connections open on the member behind `kv`'s port.
fn client_port_connections(kv: &KvHttp) -> f64 {
    let (status, body) = get(&kv.address, "/metrics", Some(ACCESS_TOKEN));
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find_map(|line| line.strip_prefix("lode_connections_open{port=\"client\"} "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no client-port connection gauge in {body}"))
}

/// A follower's gateway is a client of its own member in the same process:
/// its writes (which that member forwards to the leader) and linearizable
/// reads go through in-memory streams, so they open no connection on the
/// member's client port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_reaches_its_own_member_without_a_socket() {
    let (_cluster, kv) = cluster_with(&[]).await;
    kv.one(json!({ "op": "set", "namespace": "config", "key": "first", "value": "1" }));
    // The connections the test's own clients made while waiting for a
    // leader close once those clients are dropped.
    support::wait_until("no connection open on the follower's client port", || async {
        (client_port_connections(&kv) == 0.0).then_some(())
    })
    .await;
    for number in 0..20 {
        let key = format!("key-{number}");
        kv.one(json!({ "op": "set", "namespace": "config", "key": key, "value": number.to_string() }));
        let read = kv.read(json!({ "op": "get", "namespace": "config", "key": key }));
        assert_eq!(read["entry"]["value"], number.to_string());
    }
    assert_eq!(client_port_connections(&kv), 0.0);
}

/// The gateway's in-process calls count against its member's client-port
/// call limit, as they did over TCP: while a client holds the only place
/// (`--client-requests-in-flight-max 1`, a long-polling read), a write
/// through the gateway is refused, naming the limit, once its retries
/// run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_shares_its_members_client_call_limit() {
    use lode_client::protocol::{Consistency, Query, ReadRequest};

    let cluster = TestCluster::start_with_http_and_flags(3, 10_000, &["--client-requests-in-flight-max", "1"]);
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.a_follower(leader);
    let kv = KvHttp {
        address: cluster
            .kv_connect_url(follower)
            .trim_start_matches("http://")
            .to_owned(),
    };
    kv.one(json!({ "op": "set", "namespace": "config", "key": "before", "value": "1" }));
    let patient = lode_client::ClientOptions {
        attempt_timeout: std::time::Duration::from_secs(60),
        call_timeout: std::time::Duration::from_secs(60),
        ..cluster.options()
    };
    let holder = lode_client::Client::with_options([cluster.address_of(follower)], patient).expect("a client");
    // Nothing is queued, so this read waits its whole time on the member.
    let hold = tokio::spawn(async move {
        let wait = ReadRequest {
            query: Query::NextDelivery { wait_ms: 30_000 },
            consistency: Consistency::Eventual,
        };
        holder.read(wait).await
    });
    let (status, error) = support::wait_until("a gateway write refused for the held place", || async {
        let (status, answer) = kv.call(
            "write",
            &json!({ "operations": [{ "op": "set", "namespace": "config", "key": "during", "value": "2" }] }),
        );
        (status != 200).then(|| (status, answer["error"].clone()))
    })
    .await;
    assert_eq!(status, 503, "{error}");
    assert!(
        error.to_string().contains("client_requests_in_flight_max = 1"),
        "{error}"
    );
    hold.abort();
    // The place is given back when the holding call ends.
    kv.one(json!({ "op": "set", "namespace": "config", "key": "after", "value": "3" }));
}
