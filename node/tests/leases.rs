//! Leases with fencing tokens and fenced writes against a real 3-member
//! cluster: a bug here means two workers acting at once.

mod support;

use std::time::Duration;

use lode_client::protocol::{Operation, WriteRequest};
use lode_client::{Client, LodeError};
use support::{wait_until, TestCluster};

const NAMESPACE: &str = "coordination";
const LOCK: &str = "lease:job";

/// One contender: acquire, read at the grant's position, append its token
/// to the shared log with a fenced CAS, maybe stall past its TTL, release.
async fn contend(client: Client, holder: String, rounds: usize, stall_every: usize) -> (usize, usize) {
    let kv = client.kv(NAMESPACE);
    let ttl = Duration::from_millis(150);
    let (mut accepted, mut refused) = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut round = 0;
    while round < rounds && tokio::time::Instant::now() < deadline {
        let lease = match kv.lease(LOCK, holder.clone(), ttl).await {
            Ok(lease) => lease,
            Err(error) if error.is_version_conflict() => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            Err(error) => panic!("{holder}: acquire failed: {error}"),
        };
        round += 1;
        if stall_every > 0 && round % stall_every == 0 {
            // A stalled worker: its lease expires and others may take over.
            tokio::time::sleep(ttl * 2).await;
        }
        let entry = kv
            .get_entry_at_least("log", lease.position)
            .await
            .expect("barriered read");
        let mut tokens: Vec<u64> = match &entry {
            Some(entry) => serde_json::from_slice(&entry.value).expect("a token list"),
            None => Vec::new(),
        };
        tokens.push(lease.token);
        let write = kv
            .cas_fenced("log", NAMESPACE, LOCK, lease.token)
            .json(&tokens)
            .expect("json");
        let write = match &entry {
            Some(entry) => write.expect_version(entry.version),
            None => write.expect_absent(),
        };
        match write.commit().await {
            Ok(_) => accepted += 1,
            Err(error) if error.is_lease_lost() || error.is_version_conflict() => refused += 1,
            Err(error) => panic!("{holder}: fenced write failed: {error}"),
        }
        // Releasing a lease that was lost is simply false.
        kv.release(LOCK, holder.clone(), lease.token).await.expect("release");
    }
    (accepted, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_holders_write_in_one_sequence_of_increasing_tokens() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let mut workers = Vec::new();
    for index in 0..8 {
        // Each worker has its own client (its own lease gate) and holder id.
        let client = cluster.client();
        let stall_every = if index % 3 == 0 { 2 } else { 0 };
        workers.push(tokio::spawn(contend(client, format!("worker-{index}"), 6, stall_every)));
    }
    let (mut accepted, mut refused) = (0, 0);
    for worker in workers {
        let (worker_accepted, worker_refused) = worker.await.expect("worker");
        accepted += worker_accepted;
        refused += worker_refused;
    }
    let log: Vec<u64> = cluster
        .client()
        .kv(NAMESPACE)
        .get_typed("log")
        .await
        .expect("read the log")
        .expect("a log");
    assert_eq!(
        log.len(),
        accepted,
        "every accepted write is in the log, and only those"
    );
    assert!(
        log.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens must strictly increase: {log:?}"
    );
    assert!(refused > 0, "stalled workers must have been fenced off");
    eprintln!("{accepted} fenced writes accepted, {refused} refused");
    cluster.assert_no_errors();
}

/// A fenced write of "config" with a token that may no longer be current.
async fn stale_write(kv: &lode_client::Kv, token: u64, version: u64) -> Result<u64, LodeError> {
    kv.cas_fenced("config", NAMESPACE, LOCK, token)
        .bytes("stale")
        .expect_version(version)
        .commit()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_past_its_ttl_loses_its_fenced_writes() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let kv = cluster.client().kv(NAMESPACE);
    kv.set("config").bytes("v1").send().await.expect("set");
    let lease = kv
        .lease(LOCK, "worker-a", Duration::from_millis(300))
        .await
        .expect("acquire");
    let entry = kv
        .get_entry_at_least("config", lease.position)
        .await
        .expect("read")
        .expect("entry");
    let version = kv
        .cas_fenced("config", NAMESPACE, LOCK, lease.token)
        .bytes("v2")
        .expect_version(entry.version)
        .commit()
        .await
        .expect("fenced write while held");

    // No renewal: once the TTL has passed, the lease is gone by log time.
    wait_until("the lease to expire", || async {
        kv.lease_info(LOCK).await.expect("show").is_none().then_some(())
    })
    .await;
    let lost = stale_write(&kv, lease.token, version).await.expect_err("expired lease");
    assert!(lost.is_lease_lost(), "{lost:?}");
    let renewal = kv
        .renew_lease(LOCK, "worker-a", lease.token, Duration::from_secs(1))
        .await
        .expect_err("renewing an expired lease");
    assert!(renewal.is_lease_lost(), "{renewal:?}");

    // After another holder acquires, the old token stays fenced off.
    let other = kv
        .lease(LOCK, "worker-b", Duration::from_secs(30))
        .await
        .expect("acquire");
    assert!(other.token > lease.token);
    let lost = stale_write(&kv, lease.token, version)
        .await
        .expect_err("superseded token");
    assert!(lost.is_lease_lost(), "{lost:?}");
    assert_eq!(kv.get("config").await.expect("get"), Some(b"v2".to_vec()));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_release_conflicts_and_the_ttl_cap() {
    let cluster = TestCluster::start_with_flags(3, 10_000, &["--lease-ttl-ms-max", "2000"]);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let kv = client.kv(NAMESPACE);

    // The server grants at most its maximum, never more than asked.
    let lease = kv
        .lease(LOCK, "worker-a", Duration::from_secs(3600))
        .await
        .expect("acquire");
    assert_eq!(lease.ttl, Duration::from_secs(2));
    assert_eq!(lease.token, lease.position, "the token is the grant's log index");
    let held = kv
        .lease(LOCK, "worker-a", Duration::from_secs(1))
        .await
        .expect_err("held, also by its holder");
    assert_eq!(
        held,
        LodeError::VersionConflict {
            current: Some(lease.token)
        }
    );

    // Renewal keeps the token and moves the expiry.
    let renewed = kv
        .renew_lease(LOCK, "worker-a", lease.token, Duration::from_millis(1500))
        .await
        .expect("renew");
    assert_eq!(renewed.token, lease.token);
    assert_eq!(renewed.ttl, Duration::from_millis(1500));
    let shown = kv.lease_info(LOCK).await.expect("show").expect("held");
    assert_eq!((shown.holder.as_str(), shown.token), ("worker-a", lease.token));
    assert_eq!(shown.expires_at_micros, renewed.expires_at_micros);
    let wrong_holder = kv
        .renew_lease(LOCK, "worker-b", lease.token, Duration::from_secs(1))
        .await;
    assert!(wrong_holder.expect_err("not the holder").is_lease_lost());

    // Release: true once, then false; the wrong token releases nothing.
    assert!(!kv
        .release(LOCK, "worker-a", lease.token + 1)
        .await
        .expect("wrong token"));
    assert!(kv.release(LOCK, "worker-a", lease.token).await.expect("release"));
    assert!(!kv.release(LOCK, "worker-a", lease.token).await.expect("release again"));
    assert!(kv.lease_info(LOCK).await.expect("show").is_none());

    // A fenced write needs a precondition and .commit().
    let next = kv
        .lease(LOCK, "worker-b", Duration::from_secs(1))
        .await
        .expect("acquire");
    let unguarded = kv.cas_fenced("x", NAMESPACE, LOCK, next.token).bytes("v").send().await;
    assert!(unguarded.expect_err("send").is_invalid());
    let unguarded = kv
        .cas_fenced("x", NAMESPACE, LOCK, next.token)
        .bytes("v")
        .commit()
        .await;
    assert!(unguarded.expect_err("no precondition").is_invalid());

    // A renewal repeated with the same op id (a lost reply) applies once.
    let renewal = WriteRequest {
        op_id: 99,
        operations: vec![Operation::RenewLease {
            namespace: NAMESPACE.to_owned(),
            key: LOCK.as_bytes().to_vec(),
            holder: "worker-b".to_owned(),
            token: next.token,
            ttl_micros: 1_000_000,
        }],
    };
    let first = client.write(renewal.clone()).await.expect("renew");
    let repeated = client.write(renewal).await.expect("repeat");
    assert_eq!(first, repeated, "the repeat returns the first outcome");
    let shown = kv.lease_info(LOCK).await.expect("show").expect("held");
    match &first.results[0] {
        lode_client::OperationResult::RenewLease { expires_at_micros, .. } => {
            assert_eq!(shown.expires_at_micros, *expires_at_micros, "applied once")
        }
        other => panic!("unexpected {other:?}"),
    }

    // Leases follow stream scoping; bad input names its limit.
    let invalid = kv
        .lease(LOCK, "", Duration::from_secs(1))
        .await
        .expect_err("empty holder");
    assert!(invalid.to_string().contains("holder must not be empty"), "{invalid}");
    let invalid = kv.lease(LOCK, "h", Duration::ZERO).await.expect_err("zero ttl");
    assert!(invalid.to_string().contains("lease ttl"), "{invalid}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_cli_acquires_renews_shows_and_releases() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let run = |arguments: &[&str]| cluster.lode(arguments);
    let acquired = run(&[
        "lease",
        "acquire",
        NAMESPACE,
        LOCK,
        "cli-worker",
        "--ttl",
        "30s",
        "--json",
    ]);
    assert!(acquired.status.success(), "{acquired:?}");
    let lease: serde_json::Value = serde_json::from_slice(&acquired.stdout).expect("json");
    let token = lease["token"].as_u64().expect("token").to_string();
    assert_eq!(lease["ttl_ms"], 30_000);
    let held = run(&["lease", "acquire", NAMESPACE, LOCK, "other", "--ttl", "30s"]);
    assert_eq!(held.status.code(), Some(2));
    let held = String::from_utf8_lossy(&held.stderr);
    assert!(!held.contains("Some("), "Rust debug text in a message: {held}");
    let renewed = run(&["lease", "renew", NAMESPACE, LOCK, "cli-worker", &token, "--ttl", "1m"]);
    assert!(renewed.status.success(), "{renewed:?}");
    let renewed = String::from_utf8_lossy(&renewed.stdout);
    assert!(
        renewed.starts_with(&format!("token={token} ttl_ms=60000 ")),
        "{renewed}"
    );
    let shown = run(&["lease", "show", NAMESPACE, LOCK, "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("json");
    assert_eq!(shown["holder"], "cli-worker");
    assert_eq!(shown["token"].to_string(), token);
    let shown = run(&["lease", "show", NAMESPACE, LOCK]);
    assert!(
        String::from_utf8_lossy(&shown.stdout).starts_with("holder=cli-worker token="),
        "{shown:?}"
    );
    let released = run(&["lease", "release", NAMESPACE, LOCK, "cli-worker", &token]);
    assert_eq!(String::from_utf8_lossy(&released.stdout).trim(), "released=true");
    let again = run(&["lease", "release", NAMESPACE, LOCK, "cli-worker", &token, "--json"]);
    assert_eq!(again.status.code(), Some(1));
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).expect("json");
    assert_eq!(again["released"], false);
    let gone = run(&["lease", "show", NAMESPACE, LOCK]);
    assert_eq!(gone.status.code(), Some(1));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_acquisition_waits_out_its_ttl_behind_a_gate_that_outlives_the_caller() {
    let cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let options = lode_client::ClientOptions {
        attempt_timeout: Duration::from_millis(300),
        call_timeout: Duration::from_millis(600),
        ..lode_client::ClientOptions::default()
    };
    let client = Client::with_options([cluster.members[&leader].address.clone()], options).expect("client");
    let kv = client.kv(NAMESPACE);
    kv.lease("warm-up", "w", Duration::from_secs(1)).await.expect("warm up");
    let ttl = Duration::from_millis(1500);

    cluster.signal(leader, "STOP");
    let started = tokio::time::Instant::now();
    let error = kv.lease(LOCK, "worker-a", ttl).await.expect_err("no answer");
    assert!(started.elapsed() >= ttl, "the call returned before waiting out the TTL");
    assert_eq!(
        error.ambiguous_recovery(),
        Some(&lode_client::MutationRecovery::WaitOutLeaseTtl { ttl_micros: 1_500_000 })
    );

    // A caller that gives up during the wait does not open the gate: the
    // next acquisition on this client waits for the first one's TTL.
    let abandoned = {
        let kv = kv.clone();
        tokio::spawn(async move { kv.lease(LOCK, "worker-b", ttl).await })
    };
    let abandoned_at = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(700)).await;
    abandoned.abort();
    cluster.signal(leader, "CONT");
    kv.lease("another-lock", "worker-c", Duration::from_secs(5))
        .await
        .expect("acquire after the gate opens");
    assert!(
        abandoned_at.elapsed() >= Duration::from_millis(600) + ttl,
        "the next acquisition went through the gate before the abandoned one's wait ended"
    );
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError", "Timeout", "timeout"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_fences_follow_stream_scoping_and_a_timed_out_barriered_read_is_a_plain_timeout() {
    let cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let scoped = Client::with_options(
        cluster.endpoints(),
        lode_client::ClientOptions {
            default_stream: Some("orders".to_owned()),
            ..lode_client::ClientOptions::default()
        },
    )
    .expect("client");
    let kv = scoped.kv(NAMESPACE);
    let lease = kv
        .lease(LOCK, "worker-a", Duration::from_secs(30))
        .await
        .expect("acquire");
    // The lease lives in the scoped coordination namespace.
    let unscoped = cluster.client();
    let shown = unscoped
        .kv(format!("stream:orders/{NAMESPACE}"))
        .lease_info(LOCK)
        .await
        .expect("show");
    assert_eq!(shown.map(|lease| lease.token), Some(lease.token));
    assert!(unscoped.kv(NAMESPACE).lease_info(LOCK).await.expect("show").is_none());
    // The fence names the namespace as the application knows it.
    kv.cas_fenced("job", NAMESPACE, LOCK, lease.token)
        .bytes("v")
        .expect_absent()
        .commit()
        .await
        .expect("fenced write in the scoped namespace");

    let dedicated = lode_client::FencedLeaseClient::connect_dedicated(&cluster.members[&leader].address)
        .expect("client")
        .with_attempt_timeout(Duration::from_millis(400));
    cluster.signal(leader, "STOP");
    let read = lode_client::fenced::KvGet {
        namespace: NAMESPACE.to_owned(),
        key: b"job".to_vec(),
        position: 1,
    };
    let error = dedicated.get(&read).await.expect_err("no answer");
    assert!(
        matches!(error, LodeError::Timeout(_)),
        "a read is never ambiguous: {error:?}"
    );
    cluster.signal(leader, "CONT");
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError", "Timeout", "timeout"]);
}
