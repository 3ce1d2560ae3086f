//! `lode dev`, the README's first command: a local cluster with no
//! configuration that serves at once and keeps its data across restarts.

mod support;

use std::process::{Child, Command, Stdio};

use lode_client::Client;
use support::wait_until;

/// A base port whose member ports (base+1 … base+3), HTTP ports
/// (base+101 … base+103) and peer ports (base+201 … base+203) are free on
/// loopback right now. Bases lie below the kernel's ephemeral range
/// (32768 and up), so no outgoing connection of a test running beside
/// this one takes a member's port between this check and `lode dev`'s
/// bind, and the bases this process hands out are 300 apart.
fn free_base_port() -> u16 {
    const BASE_MIN: u32 = 10_000;
    const SLOTS: u32 = 72;
    const _: () = assert!(BASE_MIN + SLOTS * 300 < 32_768);
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    for _ in 0..SLOTS {
        let slot = (std::process::id() + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) % SLOTS;
        let base = u16::try_from(BASE_MIN + slot * 300).expect("below 32768");
        let free = [1, 2, 3, 101, 102, 103, 201, 202, 203]
            .into_iter()
            .all(|offset| std::net::TcpListener::bind(("127.0.0.1", base + offset)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no free base port below the ephemeral range");
}

fn start_dev(base: u16, data_dir: &std::path::Path) -> Child {
    start_dev_with(base, data_dir, &[])
}

fn start_dev_with(base: u16, data_dir: &std::path::Path, extra: &[&str]) -> Child {
    start_dev_logging(base, data_dir, extra, Stdio::null())
}

/// `lode dev` with its logs (standard error) going to `logs`, as a new
/// user's `lode dev 2> file` would.
fn start_dev_logging(base: u16, data_dir: &std::path::Path, extra: &[&str], logs: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_lode"))
        .args(["dev", "--base-port", &base.to_string(), "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .env_remove("LODE_LOG")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(logs)
        .spawn()
        .expect("spawn lode dev")
}

fn stop(child: Child) -> String {
    let pid = child.id().to_string();
    let signalled = Command::new("kill").args(["-TERM", &pid]).status().expect("kill -TERM");
    assert!(signalled.success());
    let output = child.wait_with_output().expect("wait for lode dev");
    assert!(output.status.success(), "lode dev exited with {:?}", output.status);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lode_dev_serves_and_keeps_its_data_across_restarts() {
    let directory = tempfile::tempdir().expect("temp dir");
    let base = free_base_port();
    let endpoints: Vec<String> = (1..=3).map(|offset| format!("127.0.0.1:{}", base + offset)).collect();
    let client = Client::connect(endpoints.clone()).expect("client");

    let dev = start_dev(base, directory.path());
    let kv = client.kv("dev");
    let version = wait_until("lode dev to accept a write", || async {
        kv.set("greeting").bytes("hello").send().await.ok()
    })
    .await;
    let printed = stop(dev);
    for endpoint in &endpoints {
        assert!(
            printed.contains(endpoint.as_str()),
            "lode dev did not print {endpoint}:\n{printed}"
        );
    }
    assert!(
        printed.contains("LODE_ENDPOINTS"),
        "lode dev did not say how to use it:\n{printed}"
    );

    let dev = start_dev(base, directory.path());
    let entry = wait_until("the restarted cluster to serve the old value", || async {
        kv.get_entry("greeting").await.ok().flatten()
    })
    .await;
    assert_eq!((entry.value, entry.version), (b"hello".to_vec(), version));
    stop(dev);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lode_dev_with_tls_makes_its_certificates_and_says_how_to_use_them() {
    let directory = tempfile::tempdir().expect("temp dir");
    let base = free_base_port();
    let endpoints: Vec<String> = (1..=3).map(|offset| format!("127.0.0.1:{}", base + offset)).collect();
    let dev = start_dev_with(base, directory.path(), &["--tls"]);
    let ca = directory.path().join("tls/ca.pem");
    wait_until("lode dev to make its CA", || async { ca.exists().then_some(()) }).await;
    let options = lode_client::ClientOptions {
        tls: Some(lode_client::tls::ClientTls::from_files(&ca, None).expect("the dev CA")),
        ..lode_client::ClientOptions::default()
    };
    let client = Client::with_options(endpoints.clone(), options).expect("client");
    wait_until("lode dev to accept a write over TLS", || async {
        client.kv("dev").set("greeting").bytes("tls").send().await.ok()
    })
    .await;
    let plain = lode_client::ClientOptions {
        call_timeout: std::time::Duration::from_secs(2),
        ..lode_client::ClientOptions::default()
    };
    let plain = Client::with_options(endpoints, plain).expect("client");
    assert!(
        plain.kv("dev").get("greeting").await.is_err(),
        "a plain client was served"
    );
    let printed = stop(dev);
    assert!(printed.contains("LODE_TLS_CA="), "{printed}");
    assert!(
        printed.contains("https://") && printed.contains("DENO_CERT="),
        "{printed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lode_dev_with_auth_makes_a_root_token_and_refuses_anonymous_calls() {
    let directory = tempfile::tempdir().expect("temp dir");
    let base = free_base_port();
    let endpoints: Vec<String> = (1..=3).map(|offset| format!("127.0.0.1:{}", base + offset)).collect();
    let dev = start_dev_with(base, directory.path(), &["--auth"]);
    let token_file = directory.path().join("root.token");
    wait_until("lode dev to make its root token", || async {
        token_file.exists().then_some(())
    })
    .await;
    let text = std::fs::read_to_string(&token_file).expect("the root token");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&token_file).expect("metadata").permissions());
    assert_eq!(mode & 0o077, 0, "the root token is readable by others: {mode:o}");
    let options = lode_client::ClientOptions {
        token: Some(lode_client::protocol::AccessToken(text.trim().to_owned())),
        ..lode_client::ClientOptions::default()
    };
    let root = Client::with_options(endpoints.clone(), options).expect("client");
    wait_until("lode dev to accept the root token's write", || async {
        root.kv("dev").set("greeting").bytes("auth").send().await.ok()
    })
    .await;
    let anonymous = Client::with_options(endpoints, lode_client::ClientOptions::default()).expect("client");
    wait_until("an anonymous call to be refused", || async {
        match anonymous.kv("dev").get("greeting").await {
            Err(error) if error.is_unauthorized() => Some(()),
            _ => None,
        }
    })
    .await;
    let printed = stop(dev);
    assert!(printed.contains("LODE_TOKEN_FILE="), "{printed}");
}

/// Starts `lode dev` with `extra` flags, logging into a file, writes once
/// and stops it; answers what it logged.
async fn logs_of_a_normal_start(extra: &[&str]) -> String {
    let directory = tempfile::tempdir().expect("temp dir");
    let base = free_base_port();
    let endpoints: Vec<String> = (1..=3).map(|offset| format!("127.0.0.1:{}", base + offset)).collect();
    let client = Client::connect(endpoints).expect("client");
    let log_path = directory.path().join("dev.log");
    let logs = std::fs::File::create(&log_path).expect("log file");
    let dev = start_dev_logging(base, &directory.path().join("data"), extra, Stdio::from(logs));
    wait_until("lode dev to accept a write", || async {
        client.kv("dev").set("greeting").bytes("hello").send().await.ok()
    })
    .await;
    stop(dev);
    std::fs::read_to_string(&log_path).expect("read the logs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_start_logs_no_error_no_warning_and_no_colour_into_a_file() {
    let logs = logs_of_a_normal_start(&[]).await;
    assert!(logs.contains("node serving"), "{logs}");
    assert!(!logs.contains('\x1b'), "escape codes in a file:\n{logs}");
    // A WARN asks someone to look; an election's stale messages, which
    // openraft's core warns of, do not.
    let alarms: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("ERROR") || line.contains("WARN"))
        .collect();
    assert!(
        alarms.is_empty(),
        "a normal start logged errors or warnings:\n{}",
        alarms.join("\n")
    );
    // The three founders start together, so all take part from the first
    // entry: none answers `not_admitted` or is made a learner for having
    // answered the founder late.
    let late: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("was not admitted") || line.contains("learner"))
        .collect();
    assert!(late.is_empty(), "a founder started late:\n{}", late.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_format_json_writes_one_object_per_line() {
    let logs = logs_of_a_normal_start(&["--log-format", "json"]).await;
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}")))
        .collect();
    assert!(lines.len() > 3, "{logs}");
    assert!(lines
        .iter()
        .all(|line| line["level"].is_string() && line["timestamp"].is_string()));
    assert!(
        lines.iter().any(|line| line["fields"]["message"] == "node serving"),
        "{logs}"
    );
}
