//! A leader stopped with SIGTERM hands its leadership to a caught-up voter:
//! a rolling restart of every member keeps writes going, with every
//! acknowledged write kept. Real processes, real RocksDB, real signals.
//! The longest write pause of each step is printed (run with
//! `--nocapture` to see it), beside a SIGKILL failover's.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lode_client::Client;
use support::{wait_until, TestCluster};

const NAMESPACE: &str = "handoff";
/// Bounds the writer whatever happens to the test.
const WRITES_MAX: u64 = 200_000;

/// Writes `w-0`, `w-1`, … one at a time until told to stop, recording
/// when each write finished and how long it took.
struct Writer {
    done: Arc<Mutex<Vec<(Instant, Duration)>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl Writer {
    fn start(client: Client) -> Self {
        let done = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (recorded, stopping) = (done.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let kv = client.kv(NAMESPACE);
            let mut count = 0;
            while count < WRITES_MAX && !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                let started = Instant::now();
                kv.set(format!("w-{count}"))
                    .bytes(format!("value-{count}"))
                    .send()
                    .await
                    .unwrap_or_else(|error| panic!("write {count} failed: {error}"));
                recorded
                    .lock()
                    .expect("record")
                    .push((Instant::now(), started.elapsed()));
                count += 1;
            }
            count
        });
        Self { done, stop, task }
    }

    /// The longest write that finished since `since`, and how many did.
    fn longest_since(&self, since: Instant) -> (Duration, usize) {
        let done = self.done.lock().expect("records");
        let recent: Vec<Duration> = done
            .iter()
            .filter(|(finished, _)| *finished >= since)
            .map(|(_, took)| *took)
            .collect();
        (recent.iter().copied().max().unwrap_or_default(), recent.len())
    }

    /// Waits until `count` more writes finished after `since`.
    async fn wait_for_writes(&self, since: Instant, count: usize) {
        wait_until("writes to go on", || async {
            (self.longest_since(since).1 >= count).then_some(())
        })
        .await;
    }

    async fn finish(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.expect("the writer")
    }
}

fn is_ready(cluster: &TestCluster, id: u64) -> bool {
    let http = cluster.members[&id].http.as_ref().expect("an HTTP port");
    std::net::TcpStream::connect(http).is_ok() && support::get(http, "/ready", None).0 == 200
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_with_sigterm_hands_off_the_leadership_and_keeps_every_write() {
    let mut cluster = TestCluster::start_with_http(3, 10_000);
    cluster.wait_for_leader().await;
    let writer = Writer::start(cluster.client());
    writer.wait_for_writes(Instant::now(), 50).await;

    let mut handed_off = 0;
    for id in [1, 2, 3] {
        let leader = cluster.wait_for_leader().await;
        let started = Instant::now();
        cluster.stop_gracefully(id);
        if id == leader {
            let log = cluster.log_text(id);
            assert!(
                log.contains("leadership handed off"),
                "member {id} stopped without a handoff"
            );
            handed_off += 1;
        }
        cluster.restart(id);
        wait_until(&format!("member {id} to be ready again"), || async {
            is_ready(&cluster, id).then_some(())
        })
        .await;
        writer.wait_for_writes(started, 50).await;
        let (longest, count) = writer.longest_since(started);
        let role = if id == leader { "leader" } else { "follower" };
        eprintln!("rolling restart of member {id} ({role}): longest write {longest:?} of {count}");
    }
    assert!(handed_off >= 1, "no leader was stopped during the rolling restart");

    // The same pause with SIGKILL, for comparison.
    let leader = cluster.wait_for_leader().await;
    let started = Instant::now();
    cluster.kill(leader);
    writer.wait_for_writes(Instant::now(), 50).await;
    cluster.restart(leader);
    let (longest, count) = writer.longest_since(started);
    eprintln!("SIGKILL of the leader (member {leader}): longest write {longest:?} of {count}");

    let written = writer.finish().await;
    let kv = cluster.client().kv(NAMESPACE);
    for key in 0..written {
        let entry = kv
            .get(format!("w-{key}"))
            .await
            .expect("read")
            .expect("an acknowledged write");
        assert_eq!(entry, format!("value-{key}").into_bytes());
    }
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError"]);
}
