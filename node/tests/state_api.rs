//! The State API over HTTP (`POST /state/v1/<function>`) on a three-member
//! cluster, through a follower's port: set/get/delete with old and new
//! values, every update op and every error code of the seed's table, the
//! nested-path examples, both JSON error examples, list and list_groups,
//! and the seed's user-profile example.

mod support;

use serde_json::{json, Value};
use support::{post, TestCluster, ACCESS_TOKEN};

struct StateHttp {
    address: String,
}

impl StateHttp {
    /// Calls `state::<function>`: (HTTP status, JSON answer).
    fn call(&self, function: &str, parameters: Value) -> (u16, Value) {
        let (status, body) = post(
            &self.address,
            &format!("/state/v1/{function}"),
            Some(ACCESS_TOKEN),
            "application/json",
            parameters.to_string().as_bytes(),
        );
        let body = serde_json::from_str(body.trim()).unwrap_or_else(|error| panic!("{function}: {error}: {body}"));
        (status, body)
    }

    fn ok(&self, function: &str, parameters: Value) -> Value {
        let (status, body) = self.call(function, parameters);
        assert_eq!(status, 200, "state::{function}: {body}");
        body
    }
}

async fn cluster() -> (TestCluster, StateHttp) {
    let cluster = TestCluster::start_with_http(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.a_follower(leader);
    let address = cluster
        .kv_connect_url(follower)
        .trim_start_matches("http://")
        .to_owned();
    (cluster, StateHttp { address })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_get_delete_list_and_list_groups() {
    let (cluster, state) = cluster().await;
    let created = state.ok(
        "set",
        json!({ "scope": "users", "key": "u1", "value": { "name": "Ada" } }),
    );
    assert_eq!(created, json!({ "old_value": null, "new_value": { "name": "Ada" } }));
    let updated = state.ok("set", json!({ "scope": "users", "key": "u1", "data": [1, 2] }));
    assert_eq!(updated, json!({ "old_value": { "name": "Ada" }, "new_value": [1, 2] }));
    assert_eq!(state.ok("get", json!({ "scope": "users", "key": "u1" })), json!([1, 2]));
    assert_eq!(
        state.ok("get", json!({ "scope": "users", "key": "nobody" })),
        Value::Null
    );
    state.ok("set", json!({ "scope": "users", "key": "u0", "value": "zero" }));
    state.ok("set", json!({ "scope": "orders", "key": "o1", "value": 5 }));
    assert_eq!(state.ok("list", json!({ "scope": "users" })), json!(["zero", [1, 2]]));
    assert_eq!(
        state.ok("list_groups", json!({})),
        json!({ "groups": ["orders", "users"] })
    );
    assert_eq!(state.ok("delete", json!({ "scope": "orders", "key": "o1" })), json!(5));
    assert_eq!(
        state.ok("delete", json!({ "scope": "orders", "key": "o1" })),
        Value::Null
    );
    assert_eq!(state.ok("list_groups", json!({})), json!({ "groups": ["users"] }));
    assert_eq!(state.ok("list", json!({ "scope": "orders" })), json!([]));

    // Bad calls name what is wrong.
    let (status, body) = state.call("set", json!({ "scope": "users", "key": "u1" }));
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("value")),
        "{body}"
    );
    let (status, body) = state.call("get", json!({ "scope": "", "key": "k" }));
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid")),
        "{body}"
    );
    let (status, body) = state.call("set", json!({ "scope": "s".repeat(300), "key": "k", "value": 1 }));
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("256")),
        "{body}"
    );
    let (status, _) = state.call("unknown", json!({}));
    assert_eq!(status, 404);
    let (status, _) = post(
        &state.address,
        "/state/v1/get",
        Some("wrong"),
        "application/json",
        br#"{"scope":"users","key":"u1"}"#,
    );
    assert_eq!(status, 401);
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_ops_nested_paths_and_every_error_code() {
    let (cluster, state) = cluster().await;
    let update = |key: &str, ops: Value| state.ok("update", json!({ "scope": "s", "key": key, "ops": ops }));

    // The nested-path examples of the seed.
    let nested = update(
        "session",
        json!([
            { "type": "merge", "path": "", "value": { "status": "active" } },
            { "type": "merge", "path": "session-abc", "value": { "author": "alice" } },
            { "type": "append", "path": "events", "value": { "kind": "chunk" } },
            { "type": "merge", "path": ["sessions", "abc"], "value": { "ts": "chunk" } },
            { "type": "append", "path": ["sessions", "abc", "events"], "value": { "kind": "chunk" } },
            { "type": "merge", "path": ["a.b"], "value": { "x": 1 } },
        ]),
    );
    assert_eq!(nested["old_value"], Value::Null);
    assert_eq!(
        nested["new_value"],
        json!({
            "status": "active",
            "session-abc": { "author": "alice" },
            "events": [{ "kind": "chunk" }],
            "sessions": { "abc": { "ts": "chunk", "events": [{ "kind": "chunk" }] } },
            "a.b": { "x": 1 },
        })
    );
    assert!(nested.get("errors").is_none(), "errors is omitted when empty: {nested}");
    state.ok(
        "set",
        json!({ "scope": "s", "key": "arr", "value": { "a": [1, 2, 3] } }),
    );
    assert_eq!(
        update("arr", json!([{ "type": "append", "path": ["a", "b"], "value": 42 }]))["new_value"],
        json!({ "a": { "b": [42] } })
    );
    assert_eq!(
        update("fresh", json!([{ "type": "append", "path": ["x", "y"], "value": "s" }]))["new_value"],
        json!({ "x": { "y": ["s"] } })
    );
    assert_eq!(
        update(
            "counter",
            json!([
                { "type": "set", "path": "count", "value": 1 },
                { "type": "increment", "path": "count", "by": 5 },
                { "type": "decrement", "path": "count", "by": 2 },
                { "type": "set", "path": "gone", "value": true },
                { "type": "remove", "path": "gone" },
            ])
        )["new_value"],
        json!({ "count": 4 })
    );

    // Both JSON error examples of the seed, exactly.
    state.ok("set", json!({ "scope": "s", "key": "ada", "value": { "name": "Ada" } }));
    assert_eq!(
        update("ada", json!([{ "type": "increment", "path": "name", "by": 1 }])),
        json!({
            "old_value": { "name": "Ada" },
            "new_value": { "name": "Ada" },
            "errors": [{
                "op_index": 0,
                "code": "increment.not_number",
                "message": "Expected number at path 'name', got string.",
                "doc_url": "https://iii.dev/docs/workers/iii-state#error-codes"
            }]
        })
    );
    state.ok("set", json!({ "scope": "s", "key": "empty", "value": {} }));
    assert_eq!(
        update("empty", json!([{ "type": "set", "path": "__proto__", "value": 1 }])),
        json!({
            "old_value": {},
            "new_value": {},
            "errors": [{
                "op_index": 0,
                "code": "set.path.proto_polluted",
                "message": "Path segment '__proto__' is not allowed (prototype pollution).",
                "doc_url": "https://iii.dev/docs/workers/iii-state#error-codes"
            }]
        })
    );

    // Every code of the table, each against a stored value that provokes
    // it; the value stays as it was.
    let deep_path: Vec<String> = (0..33).map(|index| format!("s{index}")).collect();
    let mut deep_value = json!(1);
    for _ in 0..17 {
        deep_value = json!({ "d": deep_value });
    }
    let many_keys: serde_json::Map<String, Value> =
        (0..1025).map(|index| (format!("k{index}"), json!(index))).collect();
    let cases = [
        (
            json!([1]),
            json!({ "type": "set", "path": "f", "value": 1 }),
            "set.target_not_object",
        ),
        (
            json!(7),
            json!({ "type": "append", "path": "f", "value": 1 }),
            "append.target_not_object",
        ),
        (
            json!({ "n": 1 }),
            json!({ "type": "append", "path": "n", "value": 1 }),
            "append.type_mismatch",
        ),
        (
            json!("x"),
            json!({ "type": "increment", "path": "f", "by": 1 }),
            "increment.target_not_object",
        ),
        (
            json!({ "f": "a" }),
            json!({ "type": "increment", "path": "f", "by": 1 }),
            "increment.not_number",
        ),
        (
            json!(true),
            json!({ "type": "decrement", "path": "f", "by": 1 }),
            "decrement.target_not_object",
        ),
        (
            json!({ "f": [] }),
            json!({ "type": "decrement", "path": "f", "by": 1 }),
            "decrement.not_number",
        ),
        (
            json!([]),
            json!({ "type": "remove", "path": "f" }),
            "remove.target_not_object",
        ),
        (
            json!({}),
            json!({ "type": "merge", "path": ["constructor"], "value": {} }),
            "merge.path.proto_polluted",
        ),
        (
            json!({}),
            json!({ "type": "set", "path": "x".repeat(257), "value": 1 }),
            "set.path.segment_too_long",
        ),
        (
            json!({}),
            json!({ "type": "merge", "path": deep_path, "value": {} }),
            "merge.path.too_deep",
        ),
        (
            json!({}),
            json!({ "type": "merge", "path": ["a", ""], "value": {} }),
            "merge.path.empty_segment",
        ),
        (
            json!({}),
            json!({ "type": "append", "path": deep_path, "value": 1 }),
            "append.path.too_deep",
        ),
        (
            json!({}),
            json!({ "type": "append", "path": ["", "a"], "value": 1 }),
            "append.path.empty_segment",
        ),
        (
            json!({}),
            json!({ "type": "merge", "value": [1] }),
            "merge.value.not_an_object",
        ),
        (
            json!({}),
            json!({ "type": "merge", "value": deep_value }),
            "merge.value.too_deep",
        ),
        (
            json!({}),
            json!({ "type": "merge", "value": many_keys }),
            "merge.value.too_many_keys",
        ),
        (
            json!({}),
            json!({ "type": "merge", "value": { "prototype": 1 } }),
            "merge.value.proto_polluted",
        ),
    ];
    for (index, (stored, op, code)) in cases.into_iter().enumerate() {
        let key = format!("case-{index}");
        state.ok("set", json!({ "scope": "s", "key": key, "value": stored }));
        let answer = update(&key, json!([op, { "type": "set", "path": null, "value": stored }]));
        assert_eq!(answer["errors"][0]["op_index"], 0, "{code}: {answer}");
        assert_eq!(answer["errors"][0]["code"], code, "{answer}");
        assert!(answer["errors"][0]["message"]
            .as_str()
            .is_some_and(|message| !message.is_empty()));
        assert_eq!(answer["errors"].as_array().map(Vec::len), Some(1), "{answer}");
        assert_eq!(answer["new_value"], stored, "{code}");
        assert_eq!(state.ok("get", json!({ "scope": "s", "key": key })), stored, "{code}");
    }

    // A malformed op is refused whole, before anything is proposed.
    let (status, body) = state.call(
        "update",
        json!({ "scope": "s", "key": "k", "ops": [{ "type": "explode" }] }),
    );
    assert_eq!(status, 400, "{body}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_profile_example() {
    let (cluster, state) = cluster().await;
    let dark = json!({ "name": "Alice", "email": "alice@example.com", "preferences": { "theme": "dark" } });
    let light = json!({ "name": "Alice", "email": "alice@example.com", "preferences": { "theme": "light" } });
    state.ok("set", json!({ "scope": "users", "key": "user-123", "value": dark }));
    assert_eq!(state.ok("get", json!({ "scope": "users", "key": "user-123" })), dark);
    let second = state.ok("set", json!({ "scope": "users", "key": "user-123", "value": light }));
    assert_eq!(second, json!({ "old_value": dark, "new_value": light }));
    assert_eq!(state.ok("list", json!({ "scope": "users" })), json!([light]));
    assert_eq!(state.ok("list_groups", json!({})), json!({ "groups": ["users"] }));

    // The changes are in the change feed, in commit order, for triggers.
    let client = cluster.client();
    let mut changes = client.changes((0, 0)).namespace_prefix("state:");
    let mut events = Vec::new();
    while events.len() < 2 {
        events.extend(changes.next_batch().await.expect("changes"));
    }
    let kinds: Vec<_> = events
        .iter()
        .map(|event| (event.namespace.as_str(), event.kind))
        .collect();
    use lode_client::protocol::ChangeKind;
    assert_eq!(
        kinds,
        vec![
            ("state:users", ChangeKind::Created),
            ("state:users", ChangeKind::Updated)
        ]
    );
    cluster.assert_no_errors();
}

/// `state::list` answers a scope whole, with no cursor: a scope holding
/// more than `state_list_bytes_max` bytes of values is refused, naming the
/// limit, and smaller scopes still list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_too_large_to_list_whole_is_invalid_and_names_the_limit() {
    use lode_types::limits::STATE_LIST_BYTES_MAX;

    let (cluster, state) = cluster().await;
    let sdk = cluster.client().state();
    let text = "x".repeat(60_000);
    let count = STATE_LIST_BYTES_MAX / text.len() + 4;
    let indexes: Vec<usize> = (0..count).collect();
    for chunk in indexes.chunks(16) {
        let keys: Vec<String> = chunk.iter().map(|index| format!("k{index:04}")).collect();
        let writes = keys.iter().map(|key| sdk.set("wide", key, json!(text)));
        for written in futures::future::join_all(writes).await {
            written.expect("set");
        }
    }
    let (status, body) = state.call("list", json!({ "scope": "wide" }));
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("state_list_bytes_max")),
        "{body}"
    );
    state.ok("set", json!({ "scope": "narrow", "key": "k", "value": 1 }));
    assert_eq!(state.ok("list", json!({ "scope": "narrow" })), json!([1]));
}
