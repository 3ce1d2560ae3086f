//! Bad input, malformed frames, the CLI contract and graceful shutdown,
//! against a real cluster.

mod support;

use std::io::Write;
use std::process::Command;

use lode_client::connection::{context, dial};
use lode_client::protocol::{Consistency, Operation, Query, ReadRequest, WriteRequest};
use lode_client::tls::Transport;
use support::{plain_set, wait_until, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_invalid_and_names_the_limit() {
    let cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let sdk = cluster.client().kv("ok");

    // The SDK refuses before sending.
    let cases: Vec<(Operation, &str)> = vec![
        (
            plain_set("", b"k".to_vec(), b"v".to_vec()),
            "namespace must not be empty",
        ),
        (
            plain_set(&"n".repeat(257), b"k".to_vec(), b"v".to_vec()),
            "namespace_bytes_max = 256",
        ),
        (plain_set("ok", Vec::new(), b"v".to_vec()), "key must not be empty"),
        (plain_set("ok", vec![7; 2049], b"v".to_vec()), "key_bytes_max = 2048"),
        (
            plain_set("ok", b"k".to_vec(), vec![7; 65_537]),
            "value_bytes_max = 65536",
        ),
    ];
    let client = cluster.client();
    for (operation, message) in &cases {
        let error = client
            .write(WriteRequest {
                op_id: 1,
                operations: vec![operation.clone()],
            })
            .await
            .expect_err("the SDK must refuse");
        assert!(
            error.is_invalid() && error.to_string().contains(message),
            "{error} lacks {message:?}"
        );
    }
    let too_many = (0..1001)
        .map(|index| plain_set("ok", format!("k{index}").into_bytes(), Vec::new()))
        .collect();
    let error = client
        .write(WriteRequest {
            op_id: 2,
            operations: too_many,
        })
        .await
        .expect_err("too many");
    assert!(error.to_string().contains("operations_per_write_max = 1000"), "{error}");

    let heavy: Vec<Operation> = (0..13)
        .map(|index| plain_set("ok", vec![index], vec![0; 65_536]))
        .collect();
    let error = client
        .write(WriteRequest {
            op_id: 3,
            operations: heavy.clone(),
        })
        .await
        .expect_err("too many bytes");
    assert!(error.to_string().contains("write_bytes_max = 819200"), "{error}");

    // The server refuses the same requests when a client skips the checks.
    let raw = dial(&cluster.members[&leader].address, &Transport::Plain)
        .await
        .expect("dial");
    let answer = raw
        .write(
            context(),
            WriteRequest {
                op_id: 4,
                operations: heavy,
            },
        )
        .await
        .expect("transport");
    let error = answer.expect_err("the server must refuse too many bytes");
    assert!(error.to_string().contains("write_bytes_max = 819200"), "{error}");
    for (index, (operation, message)) in cases.iter().enumerate() {
        let request = WriteRequest {
            op_id: 100 + index as u128,
            operations: vec![operation.clone()],
        };
        let answer = raw.write(context(), request).await.expect("transport");
        let error = answer.expect_err("the server must refuse");
        assert!(
            error.is_invalid() && error.to_string().contains(message),
            "{error} lacks {message:?}"
        );
    }
    let read = ReadRequest {
        query: Query::Get {
            namespace: "ok".to_owned(),
            key: vec![1; 4096],
        },
        consistency: Consistency::Eventual,
    };
    let error = raw
        .read(context(), read)
        .await
        .expect("transport")
        .expect_err("oversized key");
    assert!(error.to_string().contains("key_bytes_max"), "{error}");

    // Limits are inclusive: the largest allowed sizes are stored intact.
    let version = sdk
        .set(vec![9u8; 2048])
        .bytes(vec![8u8; 65_536])
        .send()
        .await
        .expect("largest entry");
    let entry = sdk.get_entry(vec![9u8; 2048]).await.expect("read").expect("entry");
    assert_eq!((entry.version, entry.value.len()), (version, 65_536));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_do_not_crash_a_node() {
    let cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let address = cluster.members[&leader].address.clone();
    let garbage: [&[u8]; 4] = [
        b"\x00\x00\x00\x05hello",
        b"\xff\xff\xff\xff\x00\x01\x02",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        &[0u8; 64],
    ];
    for bytes in garbage {
        let mut stream = std::net::TcpStream::connect(&address).expect("connect");
        stream.write_all(bytes).expect("send garbage");
        drop(stream);
    }
    let kv = cluster.client().kv("after-garbage");
    let version = kv.set("k").bytes("v").send().await.expect("write after garbage");
    assert_eq!(
        kv.get_entry("k").await.expect("read").map(|entry| entry.version),
        Some(version)
    );
    let status = cluster
        .client_of(leader)
        .node_status()
        .await
        .expect("leader still serving");
    assert_eq!(status.leader, Some(leader));
}

fn lode(arguments: &[&str], endpoints: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lode"))
        .args(arguments)
        .env("LODE_ENDPOINTS", endpoints)
        .output()
        .expect("run lode")
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_writes_and_reports() {
    let cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let endpoints = cluster.endpoints().join(",");

    let set = lode(&["kv", "set", "config", "greeting", "hello"], &endpoints);
    assert!(set.status.success(), "{set:?}");
    let version: u64 = stdout(&set).parse().expect("set prints the version");

    let get = lode(&["kv", "get", "config", "greeting"], &endpoints);
    assert_eq!((get.status.code(), stdout(&get)), (Some(0), "hello".to_owned()));
    let at_least = lode(
        &["kv", "get", "config", "greeting", "--at-least", &version.to_string()],
        &endpoints,
    );
    assert_eq!(stdout(&at_least), "hello");
    let eventual = lode(
        &["kv", "get", "config", "greeting", "--consistency", "eventual"],
        &endpoints,
    );
    assert!(eventual.status.success(), "{eventual:?}");

    let entry = lode(&["kv", "entry", "config", "greeting"], &endpoints);
    let json: serde_json::Value = serde_json::from_slice(&entry.stdout).expect("entry prints JSON");
    assert_eq!(json["value"], "hello");
    assert_eq!(json["version"], version);
    assert_eq!(json["source"]["index"], version);
    assert!(json["expires_at_micros"].is_null());

    let deleted = lode(&["kv", "del", "config", "greeting"], &endpoints);
    assert_eq!(stdout(&deleted), "true");
    let missing = lode(&["kv", "get", "config", "greeting"], &endpoints);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));

    let status = lode(&["cluster", "status", "--json"], &endpoints);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status prints JSON");
    assert_eq!(json["leader"], leader);
    let members = json["members"].as_array().expect("members");
    assert_eq!(members.len(), 3);
    for member in members {
        // Each member reports its own applied index.
        assert!(member["applied_index"].is_u64(), "{member}");
    }
    let text = lode(&["cluster", "status"], &endpoints);
    assert!(
        stdout(&text).contains(&format!("leader: {leader}")),
        "{}",
        stdout(&text)
    );

    let bad = lode(&["kv", "set", "", "key", "value"], &endpoints);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("namespace must not be empty"));

    // A TTL'd entry disappears from reads once expired, then from disk by a sweep.
    let ttl = lode(&["kv", "set", "config", "short", "lived", "--ttl", "300ms"], &endpoints);
    assert!(ttl.status.success(), "{ttl:?}");
    let kv = cluster.client().kv("config");
    wait_until("the TTL entry to expire", || async {
        kv.get("short").await.expect("read").is_none().then_some(())
    })
    .await;
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shuts_a_member_down_gracefully() {
    let mut cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let kv = cluster.client().kv("shutdown");
    kv.set("before").bytes("1").send().await.expect("write");
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let mut process = cluster
        .members
        .get_mut(&follower)
        .and_then(|member| member.process.take())
        .expect("process");
    let pid = process.id().to_string();
    let signalled = Command::new("kill").args(["-TERM", &pid]).status().expect("kill -TERM");
    assert!(signalled.success());
    let exit = wait_until("the member to exit", || {
        let status = process.try_wait().expect("try_wait");
        async move { status }
    })
    .await;
    assert!(exit.success(), "member exited with {exit:?}");
    assert!(cluster.log_text(follower).contains("node stopped"));
    // It restarts from its data and rejoins.
    cluster.restart(follower);
    let version = kv.set("after").bytes("2").send().await.expect("write");
    cluster.wait_applied(follower, version).await;
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_covers_every_kv_operation() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let endpoints = cluster.endpoints().join(",");
    let run = |arguments: &[&str]| {
        let output = lode(arguments, &endpoints);
        assert!(output.status.success(), "lode {arguments:?} failed: {output:?}");
        stdout(&output)
    };

    // set with encodings and expiry; cas with both preconditions.
    let version: u64 = run(&["kv", "set", "app", "doc", r#"{"a":1,"b":{"c":2}}"#, "--json"])
        .parse()
        .expect("version");
    run(&[
        "kv",
        "set",
        "app",
        "packed",
        r#"{"x":[1,2]}"#,
        "--msgpack",
        "--ttl",
        "1h",
    ]);
    assert_eq!(
        run(&["kv", "get", "app", "packed"]),
        r#"{"x":[1,2]}"#,
        "msgpack prints as JSON"
    );
    let entry: serde_json::Value = serde_json::from_str(&run(&["kv", "entry", "app", "packed"])).expect("json");
    assert_eq!(entry["encoding"], "msgpack");
    assert!(entry["expires_at_micros"].is_u64());
    let swapped: u64 = run(&[
        "kv",
        "cas",
        "app",
        "doc",
        r#"{"a":2}"#,
        "--json",
        "--expect-version",
        &version.to_string(),
    ])
    .parse()
    .expect("version");
    let conflict = lode(
        &[
            "kv",
            "cas",
            "app",
            "doc",
            "{}",
            "--expect-version",
            &version.to_string(),
        ],
        &endpoints,
    );
    assert_eq!(conflict.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&conflict.stderr).contains(&format!("the current version is {swapped}")));
    run(&["kv", "cas", "app", "fresh", "new", "--expect-absent"]);
    let no_precondition = lode(&["kv", "cas", "app", "fresh", "x"], &endpoints);
    assert_eq!(no_precondition.status.code(), Some(2), "cas needs a precondition");
    let not_json = lode(&["kv", "set", "app", "bad", "{nope", "--json"], &endpoints);
    assert!(String::from_utf8_lossy(&not_json.stderr).contains("VALUE is not JSON"));

    // exists, expire, patch.
    let exists: serde_json::Value =
        serde_json::from_str(&run(&["kv", "exists", "app", "doc", "--json"])).expect("json");
    assert_eq!(exists["version"], swapped);
    assert_eq!(exists["size_bytes"], 7);
    run(&["kv", "expire", "app", "doc", "--ttl", "10m"]);
    assert!(run(&["kv", "exists", "app", "doc"]).contains("expires_at_micros="));
    run(&["kv", "expire", "app", "doc", "--clear"]);
    assert!(run(&["kv", "exists", "app", "doc"]).contains("expires_at_micros=none"));
    let patched: u64 = run(&["kv", "patch", "app", "doc", r#"{"b":{"c":3}}"#])
        .parse()
        .expect("version");
    assert!(patched > swapped);
    assert_eq!(run(&["kv", "get", "app", "doc"]), r#"{"a":2,"b":{"c":3}}"#);
    let missing = lode(&["kv", "exists", "app", "nothing"], &endpoints);
    assert_eq!(missing.status.code(), Some(1));

    // copy, move, get-many.
    run(&["kv", "copy", "app", "doc", "doc-copy"]);
    run(&["kv", "move", "app", "doc-copy", "doc", "--into", "archive"]);
    let many: serde_json::Value =
        serde_json::from_str(&run(&["kv", "get-many", "app", "doc", "doc-copy", "fresh", "--json"])).expect("json");
    assert_eq!(many, serde_json::json!([r#"{"a":2,"b":{"c":3}}"#, null, "new"]));
    assert_eq!(run(&["kv", "get", "archive", "doc"]), r#"{"a":2,"b":{"c":3}}"#);

    // scan with pages, delete-many with bounds, namespaces.
    for key in ["log-1", "log-2", "log-3", "tmp-1"] {
        run(&["kv", "set", "logs", key, "line"]);
    }
    let page: serde_json::Value = serde_json::from_str(&run(&[
        "kv", "scan", "logs", "--prefix", "log-", "--limit", "2", "--json",
    ]))
    .expect("json");
    assert_eq!(page["entries"].as_array().map(Vec::len), Some(2));
    let cursor = page["cursor"].as_str().expect("a cursor").to_owned();
    let rest = run(&[
        "kv", "scan", "logs", "--prefix", "log-", "--limit", "2", "--cursor", &cursor,
    ]);
    assert!(rest.starts_with("log-3\tline"), "{rest}");
    let walked = run(&["kv", "scan", "logs", "--all", "--limit", "1"]);
    assert_eq!(walked.lines().count(), 4, "{walked}");
    assert_eq!(
        run(&["kv", "delete-many", "logs", "--start", "log-2", "--end", "log-3"]),
        "1"
    );
    assert_eq!(run(&["kv", "delete-many", "logs", "--contains", "tmp"]), "1");
    assert_eq!(run(&["kv", "delete-many", "logs"]), "2");
    let names: Vec<String> = serde_json::from_str(&run(&["kv", "namespaces", "--json"])).expect("json");
    assert_eq!(names, vec!["app".to_owned(), "archive".to_owned()]);
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_is_bounded_and_reports_every_workload() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let endpoints = cluster.endpoints().join(",");
    for workload in [
        "put",
        "get",
        "cas",
        "scan",
        "get-many",
        "state-update",
        "lease",
        "lease-renew",
        "queue",
    ] {
        let output = lode(
            &[
                "bench",
                "--clients",
                "4",
                "--duration",
                "300ms",
                "--requests-max",
                "200",
                "--keys",
                "150",
                "--workload",
                workload,
            ],
            &endpoints,
        );
        assert!(output.status.success(), "{workload}: {output:?}");
        let report = stdout(&output);
        assert!(report.contains("errors=0"), "{workload}: {report}");
        let ops: u64 = report
            .split_whitespace()
            .find_map(|field| field.strip_prefix("ops="))
            .and_then(|ops| ops.parse().ok())
            .expect("ops=");
        assert!(ops > 0 && ops <= 200, "{workload}: {ops} ops for a bound of 200");
        assert!(report.contains("p999="), "{workload}: {report}");
    }
    // A run past a second prints progress on standard error; --json
    // prints the result as one object.
    let output = lode(
        &[
            "bench",
            "--clients",
            "2",
            "--duration",
            "1500ms",
            "--workload",
            "lease",
            "--json",
        ],
        &endpoints,
    );
    assert!(output.status.success(), "{output:?}");
    let result: serde_json::Value = serde_json::from_str(stdout(&output).trim()).expect("one JSON object");
    assert_eq!(result["workload"], "Lease");
    assert_eq!(result["errors"], 0);
    assert!(result["ops"].as_u64().is_some_and(|ops| ops > 0), "{result}");
    assert!(
        result["latency_ms"]["p999"].as_f64().is_some_and(|p999| p999 > 0.0),
        "{result}"
    );
    let progress = String::from_utf8_lossy(&output.stderr);
    assert!(progress.contains("progress: 1s,"), "{progress}");
    // Clients may share fewer connections than there are clients, never
    // none and never more.
    let shared = |connections: &str| {
        lode(
            &[
                "bench",
                "--clients",
                "4",
                "--connections",
                connections,
                "--duration",
                "300ms",
                "--requests-max",
                "100",
                "--json",
            ],
            &endpoints,
        )
    };
    let output = shared("2");
    assert!(output.status.success(), "{output:?}");
    let result: serde_json::Value = serde_json::from_str(stdout(&output).trim()).expect("one JSON object");
    assert_eq!(
        (result["clients"].as_u64(), result["connections"].as_u64()),
        (Some(4), Some(2))
    );
    assert!(result["ops"].as_u64().is_some_and(|ops| ops > 0), "{result}");
    for refused in ["0", "5"] {
        let output = shared(refused);
        assert!(!output.status.success(), "--connections {refused}: {output:?}");
        let message = String::from_utf8_lossy(&output.stderr);
        assert!(
            message.contains("--connections must be 1 to --clients (4)"),
            "{message}"
        );
    }
    cluster.assert_no_errors();
}

/// `--log-slower-than` prints each request at or over the threshold with
/// the moment it began, its latency, key and outcome; the lines stop at
/// their bound and the rest are counted; a unit the flag does not know is
/// refused, naming the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_prints_its_slow_requests_within_a_bound() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let endpoints = cluster.endpoints().join(",");
    let bench = |threshold: &str, requests: &str| {
        let arguments = [
            "bench",
            "--workload",
            "get",
            "--clients",
            "4",
            "--keys",
            "1",
            "--duration",
            "60s",
            "--requests-max",
            requests,
            "--json",
            "--quiet",
            "--log-slower-than",
            threshold,
        ];
        lode(&arguments, &endpoints)
    };
    let began = std::time::SystemTime::now();
    let output = bench("0ms", "40");
    let ended = std::time::SystemTime::now();
    assert!(output.status.success(), "{output:?}");
    let result: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one JSON object");
    assert_eq!(
        (result["ops"].as_u64(), result["slow_requests"].as_u64()),
        (Some(40), Some(40)),
        "{result}"
    );
    let printed = String::from_utf8_lossy(&output.stderr).into_owned();
    let lines: Vec<&str> = printed.lines().filter(|line| line.starts_with("slow: at=")).collect();
    assert_eq!(lines.len(), 40, "{printed}");
    let unix = |time: std::time::SystemTime| {
        time.duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64()
    };
    for line in lines {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|field| field.strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {line}"))
        };
        let at: f64 = field("at=").parse().expect("Unix seconds");
        assert!(at >= unix(began) && at <= unix(ended), "{line}");
        let latency: f64 = field("latency_ms=").parse().expect("milliseconds");
        assert!(latency > 0.0 && latency < 60_000.0, "{line}");
        assert_eq!((field("key="), field("outcome=")), ("key-0", "ok"), "{line}");
    }
    // Past the bound the requests are counted, not printed.
    let output = bench("0ms", "10050");
    assert!(output.status.success(), "{output:?}");
    let result: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one JSON object");
    assert_eq!(result["slow_requests"].as_u64(), Some(10_050), "{result}");
    let printed = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        printed.lines().filter(|line| line.starts_with("slow: at=")).count(),
        10_000
    );
    assert!(
        printed.contains(
            "slow: 50 more requests over the threshold not printed (bench_slow_requests_printed_max = 10000)"
        ),
        "{}",
        printed.lines().last().unwrap_or_default()
    );
    // Nothing is slower than an hour.
    let output = bench("1h", "40");
    assert!(output.status.success(), "{output:?}");
    let result: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one JSON object");
    assert_eq!(result["slow_requests"].as_u64(), Some(0), "{result}");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("slow:"), "{output:?}");
    let output = bench("5us", "40");
    assert!(!output.status.success(), "{output:?}");
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.contains("--log-slower-than") && message.contains("has unit \"us\"; use ms, s, m, h or d"),
        "{message}"
    );
    cluster.assert_no_errors();
}

/// The Deno KV workloads speak KV Connect to a follower's HTTP port as the
/// Deno client does, and `state-http-update` the State API's JSON; the
/// reads find what the writes stored, each update answers the value it
/// set, and a wrong token or a missing port is refused, naming what is
/// wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_runs_deno_kv_and_state_workloads_over_http() {
    let cluster = TestCluster::start_with_http(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let endpoints = cluster.endpoints().join(",");
    let url = cluster.kv_connect_url(cluster.a_follower(leader));
    // `requests` from 4 clients, the result as JSON, with `extra` flags.
    let bench_with = |requests: &str, extra: &[&str]| {
        let mut arguments = vec![
            "bench",
            "--clients",
            "4",
            "--duration",
            "5s",
            "--requests-max",
            requests,
            "--json",
            "--quiet",
        ];
        arguments.extend_from_slice(extra);
        lode(&arguments, &endpoints)
    };
    let bench = |workload: &str, token: &str| {
        bench_with(
            "200",
            &[
                "--keys",
                "50",
                "--workload",
                workload,
                "--http",
                &url,
                "--http-token",
                token,
            ],
        )
    };
    for (workload, name) in [
        ("deno-set", "DenoSet"),
        ("deno-get", "DenoGet"),
        ("state-http-update", "StateHttpUpdate"),
    ] {
        let output = bench(workload, support::ACCESS_TOKEN);
        assert!(output.status.success(), "{workload}: {output:?}");
        let result: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one JSON object");
        assert_eq!(result["workload"], name);
        assert_eq!(result["errors"], 0, "{workload}: {result}");
        assert_eq!(result["ops"], 200, "{workload}: {result}");
    }
    // --cpu-of reads the members' CPU time from their /metrics before and
    // after the run: the CPU a request cost each of them, and the bench.
    let cpu_of = [url.clone(), cluster.kv_connect_url(leader)].join(",");
    // CPU time moves in clock ticks (10 ms): enough requests that the
    // members' share is whole ticks; the bench's own, a few microseconds a
    // request, may still read 0 and is only required to be reported.
    let measured = |cpu_of: &str| bench_with("2000", &["--cpu-of", cpu_of]);
    let output = measured(&cpu_of);
    assert!(output.status.success(), "{output:?}");
    let result: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one JSON object");
    let cpu = &result["cpu_us_per_request"];
    assert_eq!(
        cpu["by_member"].as_object().map(|members| members.len()),
        Some(2),
        "{result}"
    );
    assert!(cpu["members"].as_f64().is_some_and(|micros| micros > 0.0), "{result}");
    assert!(cpu["bench"].as_f64().is_some_and(|micros| micros >= 0.0), "{result}");
    // An https:// port needs the cluster's CA (the TLS test scrapes one).
    let output = measured("https://127.0.0.1:1");
    assert!(!output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("--cpu-of https://127.0.0.1:1 is https: give the cluster's CA with --tls-ca"),
        "{output:?}"
    );
    let output = measured("127.0.0.1:1");
    assert!(!output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--cpu-of must name http:// or https:// URLs"),
        "{output:?}"
    );
    let output = measured(&format!("http://127.0.0.1:{}", support::free_port()));
    assert!(!output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("for --cpu-of"),
        "{output:?}"
    );
    // KV Connect's session starts with an authenticated exchange, so a
    // wrong token stops the bench; the State API's calls are each refused
    // and counted as errors.
    let output = bench("deno-set", "not-the-token");
    assert!(!output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("401"), "{output:?}");
    let output = bench("state-http-update", "not-the-token");
    let result: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one JSON object");
    assert_eq!(
        (result["errors"].as_u64(), result["ops"].as_u64()),
        (Some(200), Some(0)),
        "{result}"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("401 Unauthorized"),
        "{output:?}"
    );
    for workload in ["deno-set", "state-http-update"] {
        let output = lode(&["bench", "--workload", workload, "--duration", "1s"], &endpoints);
        assert!(!output.status.success(), "{output:?}");
        let message = String::from_utf8_lossy(&output.stderr);
        assert!(
            message.contains(&format!(
                "--http (a member's HTTP port, http://host:port) is needed for workload {workload}"
            )),
            "{workload}: {message}"
        );
    }
    cluster.assert_no_errors();
}

/// The linearizable reads each member took on its client port, from its
/// `/metrics`: the `read` calls of the KV API.
fn client_reads(cluster: &TestCluster, id: u64) -> f64 {
    let address = cluster.kv_connect_url(id).trim_start_matches("http://").to_owned();
    let (_, body) = support::get(&address, "/metrics", None);
    body.lines()
        .filter(|line| {
            line.starts_with("lode_request_duration_seconds_count{")
                && line.contains("api=\"kv\"")
                && line.contains("call=\"read\"")
                && line.contains("port=\"client\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `--spread` starts the bench's connections at different members, so
/// that every member serves some of the reads; without it they all start
/// at the first endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_spreads_its_connections_over_the_members_when_asked() {
    let cluster = TestCluster::start_with_http(3, 10_000);
    cluster.wait_for_leader().await;
    let endpoints = cluster.endpoints().join(",");
    let ids: Vec<u64> = cluster.members.keys().copied().collect();
    let bench = |spread: bool| {
        let mut arguments = vec![
            "bench",
            "--workload",
            "get",
            "--clients",
            "6",
            "--keys",
            "20",
            "--duration",
            "5s",
            "--requests-max",
            "300",
            "--json",
            "--quiet",
        ];
        if spread {
            arguments.push("--spread");
        }
        let output = lode(&arguments, &endpoints);
        assert!(output.status.success(), "{output:?}");
        let result: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one JSON object");
        assert_eq!(
            (result["errors"].as_u64(), result["spread"].as_bool()),
            (Some(0), Some(spread)),
            "{result}"
        );
    };
    let reads = || ids.iter().map(|id| client_reads(&cluster, *id)).collect::<Vec<f64>>();
    bench(false);
    let together = reads();
    assert_eq!(
        together.iter().filter(|reads| **reads > 0.0).count(),
        1,
        "without --spread every connection starts at the first endpoint: {together:?}"
    );
    bench(true);
    let spread: Vec<f64> = reads()
        .iter()
        .zip(&together)
        .map(|(after, before)| after - before)
        .collect();
    assert!(
        spread.iter().all(|reads| *reads >= 20.0),
        "with --spread every member serves some of the reads: {spread:?}"
    );
    cluster.assert_no_errors();
}

/// Over TLS the bench's KV Connect client dials the member's `https://`
/// HTTP port trusting the cluster's CA, and `--cpu-of` scrapes the
/// members' `https://` ports the same way; without the CA it is refused,
/// naming the flag that is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_runs_deno_kv_workloads_over_tls() {
    let cluster = TestCluster::start_with_tls(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let url = cluster.kv_connect_url(cluster.a_follower(leader));
    assert!(url.starts_with("https://"), "{url}");
    let ca = cluster.tls_dir.as_ref().expect("a TLS cluster").join("ca.pem");
    let ca = ca.to_str().expect("a UTF-8 path");
    let bench = |tls: &[&str]| {
        let mut arguments = vec![
            "bench",
            "--clients",
            "2",
            "--duration",
            "5s",
            "--requests-max",
            "100",
            "--keys",
            "20",
            "--workload",
            "deno-set",
            "--kv-connect",
            &url,
            "--kv-connect-token",
            support::ACCESS_TOKEN,
            "--json",
            "--quiet",
        ];
        arguments.extend_from_slice(tls);
        lode(&arguments, &cluster.endpoints().join(","))
    };
    let cpu_of = [url.clone(), cluster.kv_connect_url(leader)].join(",");
    let output = bench(&["--tls-ca", ca, "--cpu-of", &cpu_of]);
    assert!(output.status.success(), "{output:?}");
    let result: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("one JSON object");
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["ops"], 100, "{result}");
    // Each member's share is whole clock ticks, so it may read 0 after a
    // hundred requests; both members are read and reported.
    let cpu = &result["cpu_us_per_request"];
    assert_eq!(
        cpu["by_member"].as_object().map(|members| members.len()),
        Some(2),
        "{result}"
    );
    assert!(cpu["members"].as_f64().is_some_and(|micros| micros >= 0.0), "{result}");
    let output = bench(&[]);
    assert!(!output.status.success(), "{output:?}");
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(message.contains("--tls-ca"), "{message}");
    cluster.assert_no_errors();
}

/// A range read (Deno KV's snapshot read) has no cursor to return short
/// with: one that would answer more than `ranges_read_bytes_max` is refused,
/// naming the limit, and the member goes on serving reads within it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_read_over_its_byte_limit_is_invalid_and_names_the_limit() {
    use lode_client::protocol::{KeyRange, QueryResult};
    use lode_types::limits::{RANGES_READ_BYTES_MAX, VALUE_BYTES_MAX};

    let cluster = TestCluster::start(1, 10_000);
    let leader = cluster.wait_for_leader().await;
    let kv = cluster.client().kv("wide");
    let value = vec![3u8; VALUE_BYTES_MAX];
    let count = RANGES_READ_BYTES_MAX / VALUE_BYTES_MAX + 8;
    let indexes: Vec<usize> = (0..count).collect();
    for chunk in indexes.chunks(16) {
        let writes = chunk
            .iter()
            .map(|index| kv.set(format!("k{index:04}")).bytes(value.clone()).send());
        for written in futures::future::join_all(writes).await {
            written.expect("write");
        }
    }
    let raw = dial(&cluster.members[&leader].address, &Transport::Plain)
        .await
        .expect("dial");
    let read = |limit: u32| ReadRequest {
        query: Query::Ranges {
            namespace: "wide".to_owned(),
            ranges: vec![KeyRange {
                start: b"k".to_vec(),
                end: b"l".to_vec(),
                limit,
                reverse: false,
            }],
        },
        consistency: Consistency::Linearizable,
    };
    let error = raw
        .read(context(), read(1000))
        .await
        .expect("transport")
        .expect_err("a read over the byte limit");
    assert!(error.is_invalid(), "{error}");
    assert!(error.to_string().contains("ranges_read_bytes_max"), "{error}");
    let answer = raw
        .read(context(), read(500))
        .await
        .expect("transport")
        .expect("a read within the limit");
    match answer.result {
        QueryResult::Ranges(ranges) => assert_eq!(ranges[0].len(), 500),
        other => panic!("expected ranges, got {other:?}"),
    }
}
