//! The queue through the Rust SDK on a three-member cluster: delayed
//! delivery, retries per the backoff schedule, the atomic dead-letter write,
//! enqueue inside an atomic write, redelivery after a listener vanished
//! mid-delivery, and delayed messages surviving a leader kill and restart.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lode_client::protocol::{Encoding, Operation, OperationResult, Precondition, WriteRequest};
use lode_client::queue::FinishedAs;
use lode_client::queue::Message;
use lode_client::sdk::new_op_id;
use lode_client::LodeError;
use support::{wait_until, TestCluster};

/// Deliveries a handler saw: payload, attempt, and when.
type Seen = Arc<Mutex<Vec<(Vec<u8>, u32, Duration)>>>;

fn deno_key(name: &str) -> Vec<u8> {
    let key = denokv_proto::Key(vec![denokv_proto::KeyPart::String(name.to_owned())]);
    denokv_proto::encode_key(&key).expect("encode a tuple key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_gets_each_message_after_its_delay_and_retries_per_the_schedule() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let queue = client.queue();

    let enqueued_at = Instant::now();
    let delayed = Message::new(b"later".to_vec(), Encoding::Bytes).delay(Duration::from_millis(800));
    queue.enqueue(&delayed).await.expect("enqueue");
    assert!(
        queue.claim().await.expect("claim").is_none() || enqueued_at.elapsed() >= Duration::from_millis(800),
        "a delayed message was delivered before its delay"
    );
    let failing = Message::new(b"flaky".to_vec(), Encoding::Bytes)
        .backoff_schedule(vec![Duration::from_millis(50), Duration::from_millis(300)]);
    queue.enqueue(&failing).await.expect("enqueue");

    // The handler fails "flaky" twice, then takes it; "later" at once.
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let listener = tokio::spawn(async move {
        let started = Instant::now();
        client
            .listen_queue(move |delivery| {
                let record = record.clone();
                async move {
                    record.lock().expect("record").push((
                        delivery.payload.clone(),
                        delivery.attempt,
                        started.elapsed(),
                    ));
                    if delivery.payload == b"flaky" && delivery.attempt < 3 {
                        return Err(format!("attempt {} fails on purpose", delivery.attempt));
                    }
                    Ok(())
                }
            })
            .await
    });
    wait_until("both messages delivered", || async {
        let seen = seen.lock().expect("seen");
        let flaky_done = seen
            .iter()
            .any(|(payload, attempt, _)| payload == b"flaky" && *attempt == 3);
        let later_done = seen.iter().any(|(payload, _, _)| payload == b"later");
        (flaky_done && later_done).then_some(())
    })
    .await;
    listener.abort();
    let seen = seen.lock().expect("seen").clone();
    let flaky: Vec<&(Vec<u8>, u32, Duration)> = seen.iter().filter(|(payload, _, _)| payload == b"flaky").collect();
    assert_eq!(
        flaky.iter().map(|(_, attempt, _)| *attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    // Each retry waits at least its delay from the schedule.
    assert!(flaky[1].2 - flaky[0].2 >= Duration::from_millis(50), "{seen:?}");
    assert!(flaky[2].2 - flaky[1].2 >= Duration::from_millis(300), "{seen:?}");
    assert!(enqueued_at.elapsed() >= Duration::from_millis(800));
    assert_eq!(seen.iter().filter(|(payload, _, _)| payload == b"later").count(), 1);
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_failure_writes_the_payload_to_every_undelivered_key() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let queue = client.queue();
    let keys = vec![deno_key("dead-1"), deno_key("dead-2")];
    let message = Message::new(br#"{"job":7}"#.to_vec(), Encoding::Json)
        .backoff_schedule(vec![Duration::from_millis(10)])
        .keys_if_undelivered(keys.clone());
    let id = queue.enqueue(&message).await.expect("enqueue");
    let first = queue.claim().await.expect("claim").expect("due at once");
    assert_eq!((first.id, first.attempt), (id, 1));
    assert!(matches!(
        queue.finish(&first, false).await.expect("finish"),
        FinishedAs::Retrying { .. }
    ));
    let deno = client.kv_unscoped(lode_types::DENO_NAMESPACE);
    assert!(
        deno.get_entry(&keys[0]).await.expect("read").is_none(),
        "dead-lettered too early"
    );
    let second = wait_until("the retry", || async { queue.claim().await.expect("claim") }).await;
    assert_eq!(second.attempt, 2);
    assert_eq!(
        queue.finish(&second, false).await.expect("finish"),
        FinishedAs::DeadLettered
    );
    // Both keys hold the payload at one version: one atomic write.
    let first_key = deno.get_entry(&keys[0]).await.expect("read").expect("dead letter");
    let second_key = deno.get_entry(&keys[1]).await.expect("read").expect("dead letter");
    assert_eq!(first_key.value, message.payload);
    assert_eq!(first_key.encoding, Encoding::Json);
    assert_eq!(first_key.version, second_key.version);
    assert_eq!(
        queue.finish(&second, true).await.expect("finish"),
        FinishedAs::NotClaimed
    );
    assert!(
        queue.claim().await.expect("claim").is_none(),
        "a dead-lettered message came back"
    );
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_in_an_atomic_write_applies_with_it_or_not_at_all() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let set = |precondition| Operation::Set {
        namespace: "jobs".to_owned(),
        key: b"state".to_vec(),
        value: b"queued".to_vec(),
        encoding: Encoding::Bytes,
        expires_at_micros: None,
        precondition,
        fence: None,
        session: None,
    };
    let enqueue = Message::new(b"job".to_vec(), Encoding::Bytes)
        .operation()
        .expect("enqueue");
    let refused = client
        .write(WriteRequest {
            op_id: new_op_id(),
            operations: vec![set(Some(Precondition::Version(999_999))), enqueue.clone()],
        })
        .await;
    assert!(matches!(refused, Err(LodeError::VersionConflict { .. })), "{refused:?}");
    assert!(
        client.queue().claim().await.expect("claim").is_none(),
        "a refused write enqueued"
    );
    let written = client
        .write(WriteRequest {
            op_id: new_op_id(),
            operations: vec![set(Some(Precondition::Absent)), enqueue],
        })
        .await
        .expect("write");
    let OperationResult::Enqueued { id } = written.results[1] else {
        panic!("{:?}", written.results);
    };
    assert_eq!(id.index, written.position);
    let delivery = client.queue().claim().await.expect("claim").expect("enqueued");
    assert_eq!(delivery.id, id);

    // Limits name the field.
    let too_many = Message::new(b"x".to_vec(), Encoding::Bytes).backoff_schedule(vec![Duration::from_millis(1); 11]);
    let refused = client.queue().enqueue(&too_many).await;
    assert!(
        matches!(&refused, Err(LodeError::Invalid(message)) if message.contains("queue_backoff_delays_max = 10")),
        "{refused:?}"
    );
    let too_late = Message::new(b"x".to_vec(), Encoding::Bytes).delay(Duration::from_secs(31 * 24 * 3600));
    let refused = client.queue().enqueue(&too_late).await;
    assert!(
        matches!(&refused, Err(LodeError::Invalid(message)) if message.contains("queue_delay_ms_max")),
        "{refused:?}"
    );
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_survive_a_leader_kill_and_a_vanished_listener() {
    let mut cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let client = cluster.client();
    let queue = client.queue();
    let delayed = Message::new(b"delayed".to_vec(), Encoding::Bytes).delay(Duration::from_secs(2));
    let delayed_id = queue.enqueue(&delayed).await.expect("enqueue");
    let abandoned = Message::new(b"abandoned".to_vec(), Encoding::Bytes);
    let abandoned_id = queue.enqueue(&abandoned).await.expect("enqueue");
    // A listener claims "abandoned" and vanishes without finishing.
    let short = client
        .queue()
        .with_visibility(Duration::from_millis(500))
        .expect("visibility");
    let claimed = short.claim().await.expect("claim").expect("due");
    assert_eq!(claimed.id, abandoned_id);

    cluster.kill(leader);
    cluster.wait_for_leader().await;
    cluster.restart(leader);
    cluster.wait_for_leader().await;

    let (delivered, listener) = spawn_recording_listener(cluster.client());
    wait_until("both messages after the leader change", || async {
        let delivered = delivered.lock().expect("delivered");
        (delivered.len() == 2).then_some(())
    })
    .await;
    listener.abort();
    let mut delivered: Vec<(Vec<u8>, u32)> = delivered
        .lock()
        .expect("delivered")
        .iter()
        .map(|(payload, attempt, _)| (payload.clone(), *attempt))
        .collect();
    delivered.sort();
    // The abandoned claim ran out and counted as a failed delivery.
    assert_eq!(
        delivered,
        vec![(b"abandoned".to_vec(), 2), (b"delayed".to_vec(), 1)],
        "ids {delayed_id:?} {abandoned_id:?}"
    );
    cluster.assert_no_errors_except(&["unreachable", "connection refused", "Connection refused"]);
}

/// A listener that records every delivery and finishes it as delivered.
fn spawn_recording_listener(client: lode_client::Client) -> (Seen, tokio::task::JoinHandle<Result<(), LodeError>>) {
    let delivered: Seen = Arc::default();
    let record = delivered.clone();
    let listener = tokio::spawn(async move {
        client
            .listen_queue(move |delivery| {
                let record = record.clone();
                async move {
                    record
                        .lock()
                        .expect("record")
                        .push((delivery.payload, delivery.attempt, Duration::ZERO));
                    Ok::<(), String>(())
                }
            })
            .await
    });
    (delivered, listener)
}

/// How long the idle-listener test watches the log.
const IDLE_TIME: Duration = Duration::from_secs(30);

/// A listener on an empty queue only reads: over 30 s the log grows by its
/// one first claim (sent at most twice, plus a blank entry per leader
/// change, if any), and it
/// still delivers the next message as soon as it is enqueued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_listener_leaves_the_log_where_it_was() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    // One-second attempts make each server-side wait 750 ms: a listener
    // that claimed after every wait would add 40 entries in 30 s.
    let options = lode_client::ClientOptions {
        attempt_timeout: Duration::from_secs(1),
        call_timeout: Duration::from_secs(5),
        ..lode_client::ClientOptions::default()
    };
    let client = lode_client::Client::with_options(cluster.endpoints(), options).expect("client");
    let before = client.cluster_status().await.expect("status before");
    let (delivered, listener) = spawn_recording_listener(client.clone());
    // The interval measured, not a wait for a condition.
    tokio::time::sleep(IDLE_TIME).await;
    assert!(!listener.is_finished(), "the listener ended: {:?}", listener.await);
    let after = client.cluster_status().await.expect("status after");
    let grown = after.applied_index - before.applied_index;
    let leader_changes = after.term - before.term;
    eprintln!(
        "an idle listener for {IDLE_TIME:?}: the applied index went from {} to {} ({grown} entries, {leader_changes} leader changes)",
        before.applied_index, after.applied_index
    );
    // The first claim may be sent twice: an attempt that outlasts its one
    // second (a loaded machine) is repeated under the same op id, and the
    // repeat is an entry of its own that applies nothing.
    assert!(
        grown <= 2 + leader_changes,
        "an idle listener grew the log by {grown} entries in {IDLE_TIME:?} ({leader_changes} leader changes)"
    );

    let started = Instant::now();
    client
        .queue()
        .enqueue(&Message::new(b"after the quiet".to_vec(), Encoding::Bytes))
        .await
        .expect("enqueue after the quiet");
    wait_until("the message enqueued after the quiet", || async {
        let delivered = delivered.lock().expect("delivered");
        (delivered.len() == 1).then_some(())
    })
    .await;
    eprintln!("delivered {:?} after the enqueue", started.elapsed());
    listener.abort();
    assert_eq!(delivered.lock().expect("delivered")[0].0, b"after the quiet".to_vec());
    cluster.assert_no_errors();
}
