//! Untrusted bytes and connections are bounded, tried as an attacker would
//! against real `lode node` processes: frames announced larger than the
//! port's limit, more connections than the port keeps, a header trickled
//! a byte at a time, connections that say nothing.

mod support;

use std::time::Duration;

use support::TestCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn pid(cluster: &TestCluster, id: u64) -> u32 {
    cluster.members[&id].process.as_ref().expect("running").id()
}

/// Waits until the server closes `stream` (a read returns end of file or
/// an error), failing after `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buffer = [0u8; 256];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_announced_past_the_limit_are_refused_before_they_are_buffered() {
    let cluster = TestCluster::start(1, 10_000);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    client
        .kv("config")
        .set("before")
        .bytes("flood")
        .send()
        .await
        .expect("write");
    let before = support::memory_kib(pid(&cluster, 1), "VmRSS");
    let mut floods = Vec::new();
    // Each announces an 80 MiB frame and sends 4 MiB of it, on the client
    // port (limit 2 MiB) and the peer port (limit 80 MiB: what arrives is
    // buffered, nothing more).
    for (index, address) in std::iter::repeat_n(cluster.members[&1].address.clone(), 16)
        .chain(std::iter::repeat_n(cluster.members[&1].peer_address.clone(), 4))
        .enumerate()
    {
        let mut stream = TcpStream::connect(&address).await.expect("connect");
        stream.write_all(&(80u32 << 20).to_be_bytes()).await.expect("announce");
        let chunk = vec![index as u8; 64 * 1024];
        for _ in 0..64 {
            if stream.write_all(&chunk).await.is_err() {
                break;
            }
        }
        floods.push(stream);
    }
    for stream in floods.iter_mut().take(16) {
        assert!(
            closed_within(stream, Duration::from_secs(10)).await,
            "the client port kept a connection that announced 80 MiB"
        );
    }
    let after = support::memory_kib(pid(&cluster, 1), "VmRSS");
    // Four peer-port floods of 4 MiB each arrived; allow their bytes twice
    // over (the buffer doubles as it grows) and some noise.
    let growth_mib = after.saturating_sub(before) / 1024;
    assert!(
        growth_mib < 48,
        "RSS grew by {growth_mib} MiB ({before} KiB -> {after} KiB)"
    );
    let value = client.kv("config").get("before").await.expect("still serving");
    assert_eq!(value, Some(b"flood".to_vec()));
    eprintln!("rss before {before} KiB, after {after} KiB");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_a_member_serves_its_connections_and_stays_leader() {
    let cluster = TestCluster::start_with_flags(3, 10_000, &["--client-connections-max", "4"]);
    let leader = cluster.wait_for_leader().await;
    let term = cluster.client_of(leader).node_status().await.expect("status").term;
    // One connection of the SDK's, opened before the flood.
    let client = lode_client::Client::connect([cluster.members[&leader].address.clone()]).expect("client");
    client.kv("config").set("cap").bytes("0").send().await.expect("write");
    let mut flood = Vec::new();
    for _ in 0..200 {
        flood.push(
            TcpStream::connect(&cluster.members[&leader].address)
                .await
                .expect("connect"),
        );
    }
    // The cap keeps at most three of them; the rest are closed at once.
    let mut closed = 0;
    for stream in flood.iter_mut() {
        if closed_within(stream, Duration::from_secs(2)).await {
            closed += 1;
        }
    }
    assert!(
        closed >= 197,
        "{} connections past the cap were kept open",
        200 - closed - 3
    );
    for round in 1..=50 {
        let value = round.to_string();
        client
            .kv("config")
            .set("cap")
            .bytes(value)
            .send()
            .await
            .expect("write at the cap");
    }
    let status = cluster
        .client()
        .cluster_status()
        .await
        .expect("status through other members");
    assert_eq!((status.leader, status.term), (Some(leader), term), "leadership moved");
    assert_eq!(
        client.kv("config").get("cap").await.expect("read"),
        Some(b"50".to_vec())
    );
    drop(flood);
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_header_and_a_silent_connection_are_cut_off() {
    let mut cluster = TestCluster::start_with_http(1, 10_000);
    cluster.wait_for_leader().await;
    cluster.kill(1);
    // Restart with short limits (the HTTP port keeps its address).
    let flags = ["--http-header-timeout", "1s", "--connection-idle-timeout", "1s"];
    cluster.restart_with_flags(1, &flags);
    cluster.wait_for_leader().await;
    let http = cluster.members[&1].http.clone().expect("http");

    let mut trickled = TcpStream::connect(&http).await.expect("connect");
    let start = tokio::time::Instant::now();
    let mut cut_off = false;
    for byte in b"GET /health HTTP/1.1\r\nHost: lode\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
        if trickled.write_all(&[*byte]).await.is_err() || closed_within(&mut trickled, Duration::from_millis(300)).await {
            cut_off = true;
            break;
        }
    }
    assert!(cut_off, "a header trickled for {:?} was still open", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(10));

    // A client-port connection that says nothing is closed; the SDK, whose
    // connection was closed the same way, dials again unnoticed.
    let client = cluster.client();
    client.kv("config").set("idle").bytes("1").send().await.expect("write");
    let mut silent = TcpStream::connect(&cluster.members[&1].address).await.expect("connect");
    assert!(
        closed_within(&mut silent, Duration::from_secs(10)).await,
        "a silent connection stayed open"
    );
    // The SDK's connection went quiet before the silent one was opened, so
    // it was closed first.
    assert_eq!(
        client.kv("config").get("idle").await.expect("read after idle"),
        Some(b"1".to_vec())
    );
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_data_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = TestCluster::start(1, 10_000);
    cluster.wait_for_leader().await;
    cluster
        .client()
        .kv("config")
        .set("private")
        .bytes("1")
        .send()
        .await
        .expect("write");
    let mut checked = 0;
    let mut pending = vec![cluster.members[&1].data_dir.clone()];
    while let Some(path) = pending.pop() {
        let metadata = std::fs::metadata(&path).expect("metadata");
        let mode = metadata.permissions().mode() & 0o777;
        if metadata.is_dir() {
            assert_eq!(mode, 0o700, "{} is {mode:o}", path.display());
            pending.extend(
                std::fs::read_dir(&path)
                    .expect("read dir")
                    .map(|entry| entry.expect("entry").path()),
            );
        } else {
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
        }
        checked += 1;
    }
    assert!(checked > 10, "only {checked} paths under the data directory");
}
