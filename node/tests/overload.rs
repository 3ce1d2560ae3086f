//! Overload against real processes: 5,000 client connections spread over a
//! 3-member cluster, and a burst of 200,000 requests (writes and
//! linearizable reads) sent on them at once. The members must stay up, keep
//! their leader (no election: its heartbeats stay on time), answer every
//! request, with success or a prompt `unavailable` that says which limit was
//! reached rather than a timeout, keep their memory bounded, and lose no
//! acknowledged write.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lode_client::connection::Connection;
use lode_client::protocol::{Consistency, Query, ReadRequest, WriteRequest};
use lode_client::tls::Transport;
use lode_client::LodeError;
use support::TestCluster;
use tokio::task::JoinSet;

/// Client connections, spread evenly over the members.
const CONNECTIONS: usize = 5_000;
/// Requests in the burst, spread evenly over the connections.
const REQUESTS: usize = 200_000;
const REQUESTS_PER_CONNECTION: usize = REQUESTS / CONNECTIONS;
const _: () = assert!(REQUESTS_PER_CONNECTION * CONNECTIONS == REQUESTS);
/// Keys the writes go to.
const KEYS: usize = 10_000;
/// Bytes of each written value.
const VALUE_BYTES: usize = 64;
/// Each member's connection cap for the test: above its share of the
/// connections, so every connection is served and the burst is what the
/// cluster must absorb (the cap itself is tested in `resources.rs`).
const CLIENT_CONNECTIONS_MAX: usize = 2_000;
const _: () = assert!(CONNECTIONS.div_ceil(3) <= CLIENT_CONNECTIONS_MAX);
/// A call that has no answer after this long counts as timed out: the
/// failure this test exists to rule out.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Each member's peak resident memory may not pass this.
const MEMBER_RSS_KIB_MAX: u64 = 512 * 1024;

const NAMESPACE: &str = "overload";

/// How one call of the burst ended.
#[derive(Debug)]
enum Ending {
    Written {
        key: usize,
        value: Vec<u8>,
        position: u64,
    },
    Read,
    /// Refused for a limit: the backpressure this test wants.
    Unavailable(String),
    /// Any other answer or failure, which fails the test.
    Other(String),
    TimedOut,
}

struct Ended {
    ending: Ending,
    took: Duration,
}

fn classify<T>(outcome: Result<Result<T, LodeError>, lode_client::connection::CallFailure>) -> Result<T, Ending> {
    match outcome {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(LodeError::Unavailable(detail))) => Err(Ending::Unavailable(detail)),
        Ok(Err(error)) => Err(Ending::Other(error.to_string())),
        Err(lode_client::connection::CallFailure::Busy(detail)) => Err(Ending::Unavailable(detail)),
        Err(lode_client::connection::CallFailure::Timeout) => Err(Ending::TimedOut),
        Err(failure) => Err(Ending::Other(format!("{failure:?}"))),
    }
}

/// Call `call` of connection `connection`: a write of a unique value to one
/// of the keys, or a linearizable read of one.
async fn one_call(connection: &Connection, connection_number: usize, call: usize) -> Ended {
    let started = Instant::now();
    let number = connection_number * REQUESTS_PER_CONNECTION + call;
    let key = number.wrapping_mul(7_919) % KEYS;
    let ending = if number.is_multiple_of(2) {
        let mut value = format!("{connection_number}.{call}.").into_bytes();
        value.resize(VALUE_BYTES, b'.');
        let request = WriteRequest {
            op_id: number as u128 + 1,
            operations: vec![support::plain_set(
                NAMESPACE,
                format!("k{key}").into_bytes(),
                value.clone(),
            )],
        };
        let outcome = connection
            .call(CALL_TIMEOUT, |client, context| async move {
                client.write(context, request).await
            })
            .await;
        match classify(outcome) {
            Ok(response) => Ending::Written {
                key,
                value,
                position: response.position,
            },
            Err(ending) => ending,
        }
    } else {
        let request = ReadRequest {
            query: Query::Get {
                namespace: NAMESPACE.to_owned(),
                key: format!("k{key}").into_bytes(),
            },
            consistency: Consistency::Linearizable,
        };
        let outcome = connection
            .call(CALL_TIMEOUT, |client, context| async move {
                client.read(context, request).await
            })
            .await;
        match classify(outcome) {
            Ok(_) => Ending::Read,
            Err(ending) => ending,
        }
    };
    Ended {
        ending,
        took: started.elapsed(),
    }
}

fn percentile(sorted: &[Duration], share: usize) -> Duration {
    sorted
        .get((sorted.len() * share / 100).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

/// Opens every connection (each answers one call first), then sends the
/// whole burst at once; returns every call's ending.
async fn burst(addresses: &[String]) -> Vec<Ended> {
    let connections: Vec<Arc<Connection>> = (0..CONNECTIONS)
        .map(|number| {
            Arc::new(Connection::new(
                addresses[number % addresses.len()].clone(),
                Transport::Plain,
            ))
        })
        .collect();
    let mut opening = JoinSet::new();
    for connection in &connections {
        let connection = connection.clone();
        opening.spawn(async move {
            connection
                .request(CALL_TIMEOUT, |client, context| async move {
                    client.capabilities(context).await.map(Ok::<_, LodeError>)
                })
                .await
        });
    }
    while let Some(opened) = opening.join_next().await {
        let opened = opened.expect("an opening task");
        assert!(opened.is_ok(), "a connection within the cap was not served: {opened:?}");
    }
    let started = Instant::now();
    let mut calls = JoinSet::new();
    for (number, connection) in connections.iter().enumerate() {
        let connection = connection.clone();
        calls.spawn(async move {
            let mut running = JoinSet::new();
            for call in 0..REQUESTS_PER_CONNECTION {
                let connection = connection.clone();
                running.spawn(async move { one_call(&connection, number, call).await });
            }
            let mut ended = Vec::with_capacity(REQUESTS_PER_CONNECTION);
            while let Some(one) = running.join_next().await {
                ended.push(one.expect("a call task"));
            }
            ended
        });
    }
    let mut ended = Vec::with_capacity(REQUESTS);
    while let Some(batch) = calls.join_next().await {
        ended.extend(batch.expect("a connection task"));
    }
    eprintln!(
        "{REQUESTS} requests on {CONNECTIONS} connections answered in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    ended
}

/// The test process holds one descriptor per connection: raises its soft
/// open-file limit to the hard one, as `lode node` does for itself.
fn raise_open_files_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let wanted = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    setrlimit(Resource::Nofile, wanted).expect("raise the open-file limit");
    let allowed = limit.maximum.unwrap_or(u64::MAX);
    assert!(
        allowed >= CONNECTIONS as u64 + 1024,
        "the hard open-file limit ({allowed}) is under the test's {CONNECTIONS} connections"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_capacity_is_answered_with_backpressure_and_keeps_the_leader() {
    raise_open_files_limit();
    let connections_max = CLIENT_CONNECTIONS_MAX.to_string();
    let mut cluster = TestCluster::start_with_flags(3, 10_000, &["--client-connections-max", &connections_max]);
    let leader = cluster.wait_for_leader().await;
    let term_before = cluster.client_of(leader).node_status().await.expect("status").term;
    let addresses = cluster.endpoints();

    let ended = burst(&addresses).await;

    let mut written: BTreeMap<usize, (u64, Vec<u8>)> = BTreeMap::new();
    let (mut writes, mut reads) = (0usize, 0usize);
    let mut unavailable: BTreeMap<String, usize> = BTreeMap::new();
    let mut other: Vec<String> = Vec::new();
    let mut timed_out = 0usize;
    let (mut answered_times, mut refused_times) = (Vec::new(), Vec::new());
    for Ended { ending, took } in ended {
        match ending {
            Ending::Written { key, value, position } => {
                writes += 1;
                answered_times.push(took);
                let latest = written.entry(key).or_insert((0, Vec::new()));
                if position > latest.0 {
                    *latest = (position, value);
                }
            }
            Ending::Read => {
                reads += 1;
                answered_times.push(took);
            }
            Ending::Unavailable(detail) => {
                refused_times.push(took);
                // Group by the limit named, not by the numbers in the text.
                let limit = detail.split('(').nth(1).unwrap_or(&detail).to_owned();
                *unavailable.entry(limit).or_default() += 1;
            }
            Ending::Other(detail) => other.push(detail),
            Ending::TimedOut => timed_out += 1,
        }
    }
    answered_times.sort_unstable();
    refused_times.sort_unstable();
    eprintln!(
        "writes {writes}, reads {reads}, unavailable {} {unavailable:?}, other {}, timed out {timed_out}",
        refused_times.len(),
        other.len()
    );
    eprintln!(
        "answered: p50 {:?}, p99 {:?}, max {:?}; refused: p50 {:?}, p99 {:?}, max {:?}",
        percentile(&answered_times, 50),
        percentile(&answered_times, 99),
        answered_times.last().copied().unwrap_or_default(),
        percentile(&refused_times, 50),
        percentile(&refused_times, 99),
        refused_times.last().copied().unwrap_or_default(),
    );
    assert_eq!(timed_out, 0, "calls timed out instead of being refused");
    assert!(
        other.is_empty(),
        "calls failed other than by backpressure: {:?}",
        &other[..other.len().min(5)]
    );
    assert_eq!(writes + reads + refused_times.len(), REQUESTS);
    assert!(writes > 0 && reads > 0, "the cluster served nothing under load");
    // A refusal says why: the limit it met, or the quorum a linearizable
    // read could not confirm in time.
    for limit in unavailable.keys() {
        assert!(
            limit.contains("_max") || limit.contains("quorum"),
            "a refusal that names no limit: {limit}"
        );
    }

    for id in cluster.running() {
        let process = cluster.members[&id].process.as_ref().expect("running");
        let peak = support::memory_kib(process.id(), "VmHWM");
        eprintln!("member {id}: peak resident memory {} MiB", peak / 1024);
        assert!(peak <= MEMBER_RSS_KIB_MAX, "member {id} peaked at {peak} KiB");
    }
    for member in cluster.members.values_mut() {
        let process = member.process.as_mut().expect("running");
        let exited = process.try_wait().expect("the member's status");
        assert!(exited.is_none(), "member {} exited under load: {exited:?}", member.id);
    }

    let status = cluster
        .client_of(leader)
        .node_status()
        .await
        .expect("status after the burst");
    assert_eq!(status.leader, Some(leader), "the leader changed under load");
    assert_eq!(status.term, term_before, "an election happened under load");

    // Every acknowledged write is there: each key holds its latest
    // acknowledged value, or a later one whose answer was lost or refused
    // after it applied.
    let kv = cluster.client().kv(NAMESPACE);
    for (key, (position, value)) in &written {
        let entry = kv
            .get_entry(&format!("k{key}"))
            .await
            .expect("a read after the burst")
            .unwrap_or_else(|| panic!("acknowledged key k{key} is missing"));
        assert!(
            entry.version >= *position,
            "k{key} went back from version {position} to {}",
            entry.version
        );
        if entry.version == *position {
            assert_eq!(&entry.value, value, "k{key} at version {position}");
        }
    }
    cluster.assert_no_errors();
}

/// Linearizable reads waiting for a read-index round are bounded by
/// `--reads-waiting-max` on the leader (its quorum round) and on a
/// follower (its call to the leader). Three of five members are stopped,
/// so no round can confirm the leadership: a burst of reads on either
/// member is refused at once past the limit, naming it, instead of
/// piling up; the reads within it end with the quorum's failure; and both
/// members serve reads again once the others run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linearizable_reads_past_the_waiting_limit_are_refused_at_once() {
    const READS_WAITING_MAX: usize = 4;
    const BURST: usize = 200;
    let limit = READS_WAITING_MAX.to_string();
    let cluster = TestCluster::start_with_flags(5, 10_000, &["--reads-waiting-max", &limit]);
    let leader = cluster.wait_for_leader().await;
    let kv = cluster.client().kv(NAMESPACE);
    let version = kv.set("held").bytes("before").send().await.expect("a write");
    let followers: Vec<u64> = cluster.running().into_iter().filter(|id| *id != leader).collect();
    let (asked, stopped) = (followers[0], &followers[1..]);
    cluster.wait_applied(asked, version).await;
    for id in stopped {
        cluster.signal(*id, "STOP");
    }

    for member in [leader, asked] {
        let connection = Arc::new(Connection::new(cluster.address_of(member), Transport::Plain));
        let mut reads = JoinSet::new();
        for _ in 0..BURST {
            let connection = connection.clone();
            reads.spawn(async move {
                let request = ReadRequest {
                    query: Query::Get {
                        namespace: NAMESPACE.to_owned(),
                        key: b"held".to_vec(),
                    },
                    consistency: Consistency::Linearizable,
                };
                let started = Instant::now();
                let outcome = connection
                    .call(CALL_TIMEOUT, |client, context| async move {
                        client.read(context, request).await
                    })
                    .await;
                (classify(outcome).map(|_| ()), started.elapsed())
            });
        }
        let (mut refused, mut without_quorum) = (Vec::new(), 0usize);
        while let Some(ended) = reads.join_next().await {
            match ended.expect("a read task") {
                (Err(Ending::Unavailable(detail)), took) if detail.contains("reads_waiting_max = 4") => {
                    refused.push(took);
                }
                (Err(Ending::Unavailable(detail)), _) if detail.contains("quorum") => without_quorum += 1,
                (other, _) => panic!("member {member}: a read ended otherwise: {:?}", other.err()),
            }
        }
        refused.sort_unstable();
        eprintln!(
            "member {member}: {} refused (slowest {:?}), {without_quorum} failed for the quorum",
            refused.len(),
            refused.last()
        );
        // Each round holds at most the limit, and a round without a quorum
        // lasts a heartbeat interval; the burst arrives well within a few.
        assert!(
            refused.len() >= BURST / 2,
            "member {member}: {} of {BURST} refused with {READS_WAITING_MAX} allowed to wait",
            refused.len()
        );
        assert!(without_quorum >= 1, "member {member}: no read was let wait");
    }

    for id in stopped {
        cluster.signal(*id, "CONT");
    }
    for member in [leader, asked] {
        let client =
            lode_client::Client::with_options([cluster.address_of(member)], cluster.options()).expect("a client");
        let entry = support::wait_until("a linearizable read once the quorum is back", || async {
            client.kv(NAMESPACE).get_entry("held").await.ok().flatten()
        })
        .await;
        assert_eq!(entry.value, b"before");
    }
}
