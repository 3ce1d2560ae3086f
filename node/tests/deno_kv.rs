//! Deno KV on Lode over KV Connect, driven by the real clients: the Deno
//! runtime (HTTP/2 without TLS) runs the seed's examples and keeps writing
//! through a leader kill, and `@deno/kv` on Node (HTTP/1.1) covers set, get,
//! atomic checks, counters, list cursors, watch and enqueue. The failure
//! paths of the protocol (tokens, versions, malformed and over-limit
//! requests) are checked with raw HTTP.
//!
//! The clients come from `node/tests/deno/package-lock.json`; `.ci/run`
//! installs them, and a test installs them itself when they are missing.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use denokv_proto::{encode_key, Key, KeyPart};
use lode_client::protocol::Encoding;
use lode_client::queue::FinishedAs;
use support::{post, post_bytes, TestCluster, ACCESS_TOKEN};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Longest a client script may run before the test fails.
const SCRIPT_TIME_MAX: Duration = Duration::from_secs(180);

fn clients_directory() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/deno")
}

static INSTALL: Mutex<()> = Mutex::new(());

/// The directory holding the installed clients, installing them first when
/// they are missing.
fn clients() -> PathBuf {
    let directory = clients_directory();
    let _installing = INSTALL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed =
        directory.join("node_modules/deno/deno").exists() && directory.join("node_modules/@deno/kv").exists();
    if !installed {
        let status = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&directory)
            .status()
            .expect("run npm");
        assert!(
            status.success(),
            "`npm ci` in {} failed: these tests need the deno and @deno/kv packages",
            directory.display()
        );
    }
    directory
}

fn deno_binary() -> PathBuf {
    clients().join("node_modules/deno/deno")
}

/// A client process with member `id`'s URL, the token and (when the
/// cluster runs TLS) the cluster CA in its environment: Deno reads
/// `DENO_CERT`, Node `NODE_EXTRA_CA_CERTS`.
fn client_command(program: &Path, cluster: &TestCluster, id: u64, deno_dir: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    if let Some(dir) = &cluster.tls_dir {
        command
            .env("DENO_CERT", dir.join("ca.pem"))
            .env("NODE_EXTRA_CA_CERTS", dir.join("ca.pem"));
    }
    command
        .current_dir(clients())
        .env("LODE_KV_URL", cluster.kv_connect_url(id))
        .env("DENO_KV_ACCESS_TOKEN", ACCESS_TOKEN)
        .env("DENO_DIR", deno_dir)
        .env("DENO_NO_UPDATE_CHECK", "1")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs a client to completion and returns its stdout; fails the test with
/// its output when it fails or runs too long.
async fn run_client(mut command: tokio::process::Command, what: &str) -> String {
    let child = command.spawn().unwrap_or_else(|error| panic!("start {what}: {error}"));
    let output = tokio::time::timeout(SCRIPT_TIME_MAX, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} ran longer than {SCRIPT_TIME_MAX:?}"))
        .unwrap_or_else(|error| panic!("wait for {what}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    stdout
}

/// `deno run` of one of the scripts against member `id`'s KV Connect URL.
fn deno_run(cluster: &TestCluster, id: u64, script: &str, deno_dir: &Path) -> tokio::process::Command {
    let mut command = client_command(&deno_binary(), cluster, id, deno_dir);
    command.args([
        "run",
        "--unstable-kv",
        "--allow-env",
        "--allow-net",
        "--no-lock",
        script,
    ]);
    command
}

fn deno_key(parts: &[&str]) -> Vec<u8> {
    let key = Key(parts.iter().map(|part| KeyPart::String((*part).to_owned())).collect());
    encode_key(&key).expect("encode a tuple key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deno_runs_the_seed_examples_against_a_three_member_cluster() {
    deno_runs_the_seed_examples(TestCluster::start_with_http(3, 10_000)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deno_runs_the_seed_examples_over_https_with_the_cluster_ca() {
    let cluster = TestCluster::start_with_tls(3, 10_000);
    assert!(cluster.kv_connect_url(1).starts_with("https://"));
    deno_runs_the_seed_examples(cluster).await;
}

async fn deno_runs_the_seed_examples(cluster: TestCluster) {
    let leader = cluster.wait_for_leader().await;
    // A follower's port: strong reads and writes go through the leader.
    let follower = cluster.a_follower(leader);
    let deno_dir = tempfile::tempdir().expect("temp dir");
    let mut command = client_command(&deno_binary(), &cluster, follower, deno_dir.path());
    command.args([
        "test",
        "--no-prompt",
        "--unstable-kv",
        "--allow-env",
        "--allow-net",
        "--no-lock",
        "--config",
        "deno.json",
        "deno-kv.test.ts",
    ]);
    let stdout = run_client(command, "deno test deno-kv.test.ts").await;
    assert!(stdout.contains("ok | 14 passed | 0 failed"), "{stdout}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deno_kv_on_node_speaks_kv_connect_over_https_with_the_cluster_ca() {
    let cluster = TestCluster::start_with_tls(3, 10_000);
    cluster.wait_for_leader().await;
    let deno_dir = tempfile::tempdir().expect("temp dir");
    let mut command = client_command(Path::new("node"), &cluster, 1, deno_dir.path());
    command.arg("node-client.mjs");
    let stdout = run_client(command, "node node-client.mjs over https").await;
    assert!(stdout.contains(r#""ok":true"#), "{stdout}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deno_kv_on_node_speaks_kv_connect_over_http1() {
    let cluster = TestCluster::start_with_http(3, 10_000);
    cluster.wait_for_leader().await;
    let deno_dir = tempfile::tempdir().expect("temp dir");
    let mut command = client_command(Path::new("node"), &cluster, 1, deno_dir.path());
    command.arg("node-client.mjs");
    let stdout = run_client(command, "node node-client.mjs").await;
    assert!(stdout.contains(r#""ok":true"#), "{stdout}");

    // The enqueue @deno/kv sent is a queue message. The library sends its
    // own backoff schedule (100, 200, 400 and 800 ms) whatever the caller
    // asks, so the fifth failed delivery parks the payload at its
    // undelivered key.
    let client = cluster.client();
    let queue = client.queue();
    let mut attempts = Vec::new();
    let first = loop {
        let delivery = support::wait_until("the next delivery", || async { queue.claim().await.expect("claim") }).await;
        assert_eq!(delivery.encoding, Encoding::V8);
        attempts.push(delivery.attempt);
        match queue.finish(&delivery, false).await.expect("finish") {
            FinishedAs::Retrying { .. } => continue,
            FinishedAs::DeadLettered => break delivery,
            other => panic!("a failed delivery finished as {other:?}"),
        }
    };
    assert_eq!(attempts, vec![1, 2, 3, 4, 5]);
    let parked = client
        .kv_unscoped(lode_types::DENO_NAMESPACE)
        .get_entry(&deno_key(&["node", "undelivered"]))
        .await
        .expect("read the undelivered key")
        .expect("the payload is at the undelivered key");
    assert_eq!((parked.value, parked.encoding), (first.payload, Encoding::V8));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deno_client_keeps_writing_while_the_leader_is_killed() {
    const WRITES: usize = 150;
    let mut cluster = TestCluster::start_with_http(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.a_follower(leader);
    let deno_dir = tempfile::tempdir().expect("temp dir");
    let mut command = deno_run(&cluster, follower, "writer.ts", deno_dir.path());
    command.env("LODE_WRITES", WRITES.to_string());
    let mut child = command.spawn().expect("start the Deno writer");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut committed = Vec::new();
    let deadline = tokio::time::Instant::now() + SCRIPT_TIME_MAX;
    while let Some(line) = tokio::time::timeout_at(deadline, lines.next_line())
        .await
        .expect("the writer stalled")
        .expect("read the writer's output")
    {
        let line: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        committed.push(line);
        if committed.len() == 30 {
            cluster.kill(leader);
        }
    }
    let status = tokio::time::timeout_at(deadline, child.wait())
        .await
        .expect("the writer did not exit")
        .expect("wait for the writer");
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = pipe.read_to_string(&mut stderr).await;
    }
    assert!(status.success(), "the Deno writer failed ({status}): {stderr}");
    assert_eq!(committed.len(), WRITES, "every write committed: {stderr}");

    // Every committed write is in the cluster at the versionstamp the
    // client was given.
    cluster.wait_for_leader().await;
    let kv = cluster.client().kv_unscoped(lode_types::DENO_NAMESPACE);
    for line in &committed {
        let index = line["index"].as_f64().expect("index");
        let stamp = line["versionstamp"].as_str().expect("versionstamp");
        let version = u64::from_str_radix(&stamp[..16], 16).expect("hex versionstamp");
        let key = Key(vec![KeyPart::String("writer".to_owned()), KeyPart::Float(index)]);
        let entry = kv
            .get_entry(&encode_key(&key).expect("key"))
            .await
            .expect("read")
            .unwrap_or_else(|| panic!("write {index} was acknowledged and lost"));
        assert_eq!(entry.version, version, "write {index}");
        assert_eq!(&stamp[16..], "0000");
    }
    cluster.assert_no_errors_except(&["unreachable", "connection refused", "Connection refused"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_connect_refuses_bad_tokens_versions_and_requests_with_reasons() {
    use denokv_proto::datapath as pb;
    use prost::Message;
    let cluster = TestCluster::start_with_http(1, 10_000);
    cluster.wait_for_leader().await;
    let url = cluster.kv_connect_url(1);
    let address = url.trim_start_matches("http://").to_owned();
    let json = "application/json";
    let protobuf = "application/x-protobuf";

    let (status, body) = post(&address, "/", None, json, br#"{"supportedVersions":[1,2,3]}"#);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("Authorization: Bearer"), "{body}");
    let (status, body) = post(&address, "/", Some("wrong"), json, br#"{"supportedVersions":[3]}"#);
    assert_eq!(status, 401, "{body}");
    let (status, body) = post(&address, "/", Some(ACCESS_TOKEN), json, br#"{"supportedVersions":[7]}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no protocol version in common"), "{body}");
    let (status, body) = post(
        &address,
        "/",
        Some(ACCESS_TOKEN),
        json,
        br#"{"supportedVersions":[1,2,3]}"#,
    );
    assert_eq!(status, 200, "{body}");
    let metadata: serde_json::Value = serde_json::from_str(body.trim()).expect("metadata JSON");
    assert_eq!(metadata["version"], 3);
    assert_eq!(metadata["token"], ACCESS_TOKEN);
    assert_eq!(metadata["endpoints"][0]["consistency"], "strong");
    assert_eq!(metadata["endpoints"][0]["url"], format!("{url}/kv/strong"));

    let read = "/kv/strong/snapshot_read";
    let (status, body) = post(&address, read, Some(ACCESS_TOKEN), protobuf, &[0xff, 0xff, 0xff]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid SnapshotRead"), "{body}");
    let range = pb::ReadRange {
        start: vec![2],
        end: vec![3],
        limit: 10,
        reverse: false,
    };
    let eleven = pb::SnapshotRead {
        ranges: vec![range.clone(); 11],
    };
    let (status, body) = post(&address, read, Some(ACCESS_TOKEN), protobuf, &eleven.encode_to_vec());
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("ranges_per_read_max = 10"), "{body}");
    let unlimited = pb::SnapshotRead {
        ranges: vec![pb::ReadRange {
            limit: 0,
            ..range.clone()
        }],
    };
    let (status, body) = post(&address, read, Some(ACCESS_TOKEN), protobuf, &unlimited.encode_to_vec());
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("ranges[0].limit"), "{body}");
    let (status, _) = post(&address, "/kv/other/snapshot_read", Some(ACCESS_TOKEN), protobuf, &[]);
    assert_eq!(status, 404);

    let write = "/kv/strong/atomic_write";
    let too_long = pb::AtomicWrite {
        mutations: vec![pb::Mutation {
            key: vec![b'k'; 2049],
            value: Some(pb::KvValue {
                data: vec![1],
                encoding: pb::ValueEncoding::VeBytes as i32,
            }),
            mutation_type: pb::MutationType::MSet as i32,
            ..Default::default()
        }],
        ..Default::default()
    };
    let (status, body) = post(&address, write, Some(ACCESS_TOKEN), protobuf, &too_long.encode_to_vec());
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("mutations[0].key") && body.contains("max 2048 bytes"),
        "{body}"
    );
    let (status, _) = post(&address, write, Some("wrong"), protobuf, &too_long.encode_to_vec());
    assert_eq!(status, 401);

    // Checks report every failing one by index, and nothing applies.
    let set = |key: u8, data: u8| pb::Mutation {
        key: vec![2, key, 0],
        value: Some(pb::KvValue {
            data: vec![data],
            encoding: pb::ValueEncoding::VeBytes as i32,
        }),
        mutation_type: pb::MutationType::MSet as i32,
        ..Default::default()
    };
    let first = pb::AtomicWrite {
        mutations: vec![set(b'a', 1), set(b'b', 1)],
        ..Default::default()
    };
    let (status, body) = post(&address, write, Some(ACCESS_TOKEN), protobuf, &first.encode_to_vec());
    assert_eq!(status, 200, "{body}");
    let checks_fail = pb::AtomicWrite {
        checks: vec![
            pb::Check {
                key: vec![2, b'a', 0],
                versionstamp: Vec::new(),
            },
            pb::Check {
                key: vec![2, b'z', 0],
                versionstamp: Vec::new(),
            },
            pb::Check {
                key: vec![2, b'b', 0],
                versionstamp: vec![0; 10],
            },
        ],
        mutations: vec![set(b'c', 3)],
        ..Default::default()
    };
    let (status, response) = post_bytes(
        &address,
        write,
        Some(ACCESS_TOKEN),
        protobuf,
        &checks_fail.encode_to_vec(),
    );
    assert_eq!(status, 200);
    let output = pb::AtomicWriteOutput::decode(response.as_slice()).expect("an AtomicWriteOutput");
    assert_eq!(output.status, pb::AtomicWriteStatus::AwCheckFailure as i32);
    assert_eq!(output.failed_checks, vec![0, 2]);
    let c = cluster
        .client()
        .kv_unscoped(lode_types::DENO_NAMESPACE)
        .get_entry(&[2, b'c', 0])
        .await
        .expect("read");
    assert!(c.is_none(), "a write whose checks failed applied");

    let watch = "/kv/strong/watch";
    let many = pb::Watch {
        keys: (0..11u8).map(|key| pb::WatchKey { key: vec![2, key, 0] }).collect(),
    };
    let (status, body) = post(&address, watch, Some(ACCESS_TOKEN), protobuf, &many.encode_to_vec());
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("1 to 10 keys"), "{body}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_cleanly_when_its_member_stops_and_the_client_reconnects() {
    let mut cluster = TestCluster::start_with_http(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.a_follower(leader);
    let deno_dir = tempfile::tempdir().expect("temp dir");
    let mut command = deno_run(&cluster, follower, "watcher.ts", deno_dir.path());
    command.env("LODE_STATES", "3");
    let mut child = command.spawn().expect("start the Deno watcher");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let deadline = tokio::time::Instant::now() + SCRIPT_TIME_MAX;
    let mut next_state = async || -> serde_json::Value {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .expect("the watcher stalled")
            .expect("read the watcher's output")
            .expect("the watcher ended early");
        serde_json::from_str(&line).expect("a JSON line")
    };
    let status_key = deno_key(&["status"]);
    let deno = cluster.client().kv_unscoped(lode_types::DENO_NAMESPACE);

    assert_eq!(next_state().await["versionstamp"], serde_json::Value::Null);
    deno.set(&status_key).bytes("one").send().await.expect("write");
    assert_eq!(next_state().await["value"], "one");

    // The member serving the watch stops: its open watch must not hold up
    // the shutdown, and the client reconnects once it is back.
    let stopping = cluster.stop_gracefully(follower);
    assert!(stopping < Duration::from_secs(10), "shutdown took {stopping:?}");
    cluster.restart(follower);
    cluster.wait_for_leader().await;
    let deno = cluster.client().kv_unscoped(lode_types::DENO_NAMESPACE);
    deno.set(&status_key).bytes("two").send().await.expect("write");
    assert_eq!(next_state().await["value"], "two");
    let status = tokio::time::timeout_at(deadline, child.wait())
        .await
        .expect("the watcher did not exit")
        .expect("wait for the watcher");
    assert!(status.success(), "the watcher failed: {status}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v8_sums_keep_within_their_bounds_or_clamp() {
    use denokv_proto::datapath as pb;
    use lode_types::v8_number::V8Number;
    use prost::Message;
    let cluster = TestCluster::start_with_http(1, 10_000);
    cluster.wait_for_leader().await;
    let url = cluster.kv_connect_url(1);
    let address = url.trim_start_matches("http://").to_owned();
    let key = deno_key(&["score"]);
    let sum = |operand: V8Number, max: Option<V8Number>, clamp: bool| pb::AtomicWrite {
        mutations: vec![pb::Mutation {
            key: key.clone(),
            value: Some(pb::KvValue {
                data: operand.encode(),
                encoding: pb::ValueEncoding::VeV8 as i32,
            }),
            mutation_type: pb::MutationType::MSum as i32,
            sum_max: max.map(|max| max.encode()).unwrap_or_default(),
            sum_clamp: clamp,
            ..Default::default()
        }],
        ..Default::default()
    };
    let write = |request: pb::AtomicWrite| {
        post_bytes(
            &address,
            "/kv/strong/atomic_write",
            Some(ACCESS_TOKEN),
            "application/x-protobuf",
            &request.encode_to_vec(),
        )
    };
    let read = || async {
        let entry = cluster
            .client()
            .kv_unscoped(lode_types::DENO_NAMESPACE)
            .get_entry(&key)
            .await
            .expect("read")
            .expect("the sum's key");
        V8Number::decode(&entry.value).expect("a V8 number")
    };
    assert_eq!(write(sum(V8Number::Number(5.0), None, false)).0, 200);
    assert_eq!(
        write(sum(V8Number::Number(2.5), Some(V8Number::Number(10.0)), false)).0,
        200
    );
    assert_eq!(read().await, V8Number::Number(7.5));
    let (status, body) = write(sum(V8Number::Number(5.0), Some(V8Number::Number(10.0)), false));
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("out of range"), "{body}");
    assert_eq!(read().await, V8Number::Number(7.5), "a refused sum applied");
    assert_eq!(
        write(sum(V8Number::Number(5.0), Some(V8Number::Number(10.0)), true)).0,
        200
    );
    assert_eq!(read().await, V8Number::Number(10.0));
    let (status, body) = write(sum(V8Number::BigInt(1), None, false));
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("cannot sum a number with a bigint"), "{body}");
    cluster.assert_no_errors();
}

/// A Deno client acts as the user whose token it holds: a grant on `deno`
/// lets it write and read Deno KV, a user without one is refused, and so
/// is the shared token once the cluster has users. The metadata exchange
/// hands out a session token of its own, which dies with its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deno_client_with_a_users_token_gets_that_users_grants() {
    let support::Secured { cluster, root, .. } = support::secured().await;
    let app = support::user_with(&root, "deno-app", &["write:deno"]).await;
    let other = support::user_with(&root, "other", &["read:config"]).await;
    let leader = cluster.wait_for_leader().await;
    let deno_dir = tempfile::tempdir().expect("DENO_DIR");
    let run_with = |token: &str| {
        let mut command = deno_run(&cluster, leader, "user-token.ts", deno_dir.path());
        command.env("DENO_KV_ACCESS_TOKEN", token);
        command
    };
    let allowed = run_client(run_with(&app.token.0), "a Deno client with write:deno").await;
    assert_eq!(allowed.trim(), "allowed");
    let refused = run_client(run_with(&other.token.0), "a Deno client without a deno grant").await;
    assert!(refused.starts_with("refused"), "{refused}");
    let shared = run_client(run_with(ACCESS_TOKEN), "a Deno client with the shared token").await;
    assert!(shared.starts_with("refused"), "{shared}");

    let address = cluster.kv_connect_url(leader).trim_start_matches("http://").to_owned();
    let (status, body) = post(
        &address,
        "/",
        Some(&app.token.0),
        "application/json",
        br#"{"supportedVersions":[1,2,3]}"#,
    );
    assert_eq!(status, 200, "{body}");
    let metadata: serde_json::Value = serde_json::from_str(&body).expect("metadata JSON");
    let session = metadata["token"].as_str().expect("a session token").to_owned();
    assert!(
        session.starts_with("lode_") && session != app.token.0,
        "the credential came back"
    );
    let read = |token: &str| {
        post_bytes(
            &address,
            "/kv/strong/snapshot_read",
            Some(token),
            "application/x-protobuf",
            &[],
        )
        .0
    };
    assert_eq!(read(&session), 200, "the session token works");
    root.auth().revoke_token(app.id).await.expect("revoke the parent");
    support::wait_until("the session token to die with its parent", || async {
        (read(&session) == 401).then_some(())
    })
    .await;
}
