//! The change feed on a real cluster: commit order, resumption after a
//! leader change and a subscriber restart without gaps, and `compacted`
//! instead of a silent gap.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use lode_client::protocol::ChangeKind;
use lode_client::{Client, LodeError};
use support::TestCluster;

async fn write_range(client: &Client, namespace: &str, keys: std::ops::Range<u64>) {
    let writes: Vec<_> = keys
        .map(|index| {
            let kv = client.kv(namespace);
            async move { kv.set(format!("key-{index:04}")).bytes("v").send().await }
        })
        .collect();
    for write in futures::future::join_all(writes).await {
        write.expect("write");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_sees_every_change_in_order_across_a_leader_change_and_a_restart() {
    let mut cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let client = cluster.client();
    write_range(&client, "watched", 0..100).await;
    client.kv("ignored").set("x").bytes("y").send().await.expect("write");

    // First subscriber: reads 60 events, then stops (a restart).
    let mut first = client.changes((0, 0)).namespace_prefix("watched").stream().boxed();
    let mut seen = Vec::new();
    while seen.len() < 60 {
        seen.push(first.next().await.expect("an event").expect("no error"));
    }
    drop(first);
    let resume_at = seen.last().expect("events").position();

    cluster.kill(leader);
    cluster.wait_for_leader().await;
    write_range(&client, "watched", 100..150).await;
    client.kv("watched").delete("key-0000").await.expect("delete");

    // Second subscriber, on the survivors, resumes after the last event seen.
    let survivors = cluster.client();
    let mut second = survivors
        .changes(resume_at)
        .namespace_prefix("watched")
        .stream()
        .boxed();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 151 {
        let event = tokio::time::timeout_at(deadline, second.next())
            .await
            .expect("events in time")
            .expect("an event")
            .expect("no error");
        seen.push(event);
    }
    let positions: Vec<_> = seen.iter().map(|event| event.position()).collect();
    assert!(
        positions.windows(2).all(|pair| pair[0] < pair[1]),
        "commit order, no repeats"
    );
    let created: BTreeSet<_> = seen
        .iter()
        .filter(|event| event.kind == ChangeKind::Created)
        .map(|event| event.key.clone())
        .collect();
    assert_eq!(
        created.len(),
        150,
        "every write is there: no gap across the restart and the failover"
    );
    let last = seen.last().expect("events");
    assert_eq!(
        (last.kind, last.key.as_slice()),
        (ChangeKind::Deleted, &b"key-0000"[..])
    );
    assert_eq!(last.old_value.as_deref(), Some(&b"v"[..]));
    assert!(seen.iter().all(|event| event.namespace == "watched"));
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_older_than_the_retained_changes_is_compacted() {
    let cluster = TestCluster::start_with_flags(3, 10_000, &["--change-log-events-max", "20"]);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    for index in 0..60 {
        client
            .kv("busy")
            .set(format!("k{index}"))
            .bytes("v")
            .send()
            .await
            .expect("write");
    }
    let mut stream = client.changes((0, 0)).stream().boxed();
    let error = stream.next().await.expect("an item").expect_err("trimmed");
    let LodeError::Compacted { trimmed_through, .. } = error else {
        panic!("expected compacted, got {error:?}");
    };
    // Reading after the trimmed position works and ends with the last write.
    let mut resumed = client.changes(trimmed_through).stream().boxed();
    let mut last = None;
    for _ in 0..20 {
        last = Some(resumed.next().await.expect("an event").expect("no error"));
    }
    assert_eq!(last.map(|event| event.key), Some(b"k59".to_vec()));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lode_changes_prints_one_json_line_per_change() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let first = client.kv("config").set("a").bytes("1").send().await.expect("write");
    client.kv("config").set("a").bytes("2").send().await.expect("write");
    client.kv("config").delete("a").await.expect("delete");
    let output = cluster.lode(&["changes", "--prefix", "config", "--count", "3"]);
    assert!(output.status.success(), "{output:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|line| line["kind"].as_str()).collect();
    assert_eq!(kinds, vec!["created", "updated", "deleted"]);
    assert_eq!(lines[0]["position"], format!("{first}.0"));
    assert_eq!(lines[1]["old_value"], "1");
    let after_first = cluster.lode(&["changes", "--after", &first.to_string(), "--count", "2"]);
    let kinds: Vec<String> = String::from_utf8_lossy(&after_first.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("json")["kind"].to_string())
        .collect();
    assert_eq!(kinds, vec!["\"updated\"", "\"deleted\""]);
    cluster.assert_no_errors();
}

/// Long waits on the server (changes, state triggers, due queue messages)
/// fit inside one attempt, so a client with short attempts sees "nothing
/// yet" on an idle cluster rather than a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_waits_answer_within_a_short_attempt() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let options = lode_client::ClientOptions {
        attempt_timeout: Duration::from_millis(800),
        call_timeout: Duration::from_millis(1_500),
        ..lode_client::ClientOptions::default()
    };
    let client = Client::with_options(cluster.endpoints(), options).expect("client options");
    client.kv("busy").set("x").bytes("y").send().await.expect("write");
    let position = client.kv("busy").set("x").bytes("z").send().await.expect("write");

    let mut changes = client.changes((position, u32::MAX)).namespace_prefix("idle");
    let events = changes.next_batch().await.expect("an idle change read answers");
    assert!(events.is_empty(), "{events:?}");

    let mut trigger = client.state().trigger().scope("idle").after((position, u32::MAX));
    let events = trigger.next_batch().await.expect("an idle trigger read answers");
    assert!(events.is_empty(), "{events:?}");

    // An idle listener waits for due messages without failing: it is
    // still listening when a message comes, and delivers it.
    let (delivered, mut received) = tokio::sync::mpsc::unbounded_channel();
    let listening = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .queue()
                .listen(|delivery| {
                    let delivered = delivered.clone();
                    async move {
                        let _ = delivered.send(delivery.payload);
                        Ok::<(), String>(())
                    }
                })
                .await
        }
    });
    // Twice the call timeout: every wait inside ran idle.
    let mut listening = listening;
    if let Ok(ended) = tokio::time::timeout(Duration::from_secs(3), &mut listening).await {
        panic!("the idle listener stopped: {ended:?}");
    }
    let message = lode_client::queue::Message::new(b"late".to_vec(), lode_client::Encoding::Bytes);
    client.queue().enqueue(&message).await.expect("enqueue");
    let payload = tokio::time::timeout(Duration::from_secs(30), received.recv())
        .await
        .expect("the listener delivers the message");
    assert_eq!(payload.as_deref(), Some(&b"late"[..]));
    listening.abort();
    cluster.assert_no_errors();
}
