//! The guarded operator example against a real member (RocksDB on disk,
//! TCP): two candidates, the leader paused past its lease with SIGSTOP;
//! the other takes over, and the paused one's write after it resumes is
//! refused by the store with `lease_lost`.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lode_client::{LeaderElection, LodeError};
use lode_node::embedded::Lode;

/// A running copy of the example and the lines it printed.
struct Candidate {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Candidate {
    fn start(endpoint: &str, name: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_guarded-operator"))
            .args([
                "--endpoints",
                endpoint,
                "--name",
                name,
                "--ttl-ms",
                "2000",
                "--work-ms",
                "2500",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the example");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line starting with `prefix`; returns the number after
    /// its `token=`.
    fn wait_for(&mut self, prefix: &str) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(remaining) {
                Ok(line) => line,
                Err(_) => panic!("no line {prefix:?}; printed {:?}", self.seen),
            };
            self.seen.push(line.clone());
            if line.starts_with(prefix) {
                let token = line.rsplit_once("token=").map(|(_, token)| token).unwrap_or_default();
                return token.parse().unwrap_or_else(|_| panic!("no token in {line:?}"));
            }
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal}");
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_is_replaced_and_its_late_write_refused() {
    let directory = tempfile::tempdir().expect("tempdir");
    let lode = Lode::open_embedded(directory.path().join("store")).await.expect("open");
    let endpoint = lode.address().to_owned();

    let mut first = Candidate::start(&endpoint, "operator-a");
    let first_token = first.wait_for("leading");
    let mut second = Candidate::start(&endpoint, "operator-b");
    // Paused in the middle of a reconcile, its write not yet sent.
    first.wait_for("reconciling");
    first.signal("STOP");

    let second_token = second.wait_for("leading");
    assert!(
        second_token > first_token,
        "a new grant: {second_token} after {first_token}"
    );
    assert_eq!(second.wait_for("wrote status"), second_token);

    first.signal("CONT");
    assert_eq!(first.wait_for("write refused: lease_lost"), first_token);
    assert_eq!(first.wait_for("lost leadership"), first_token);
    assert!(
        !first
            .seen
            .iter()
            .skip_while(|line| !line.starts_with("reconciling"))
            .any(|line| line.starts_with("wrote status")),
        "the paused leader wrote after it was replaced: {:?}",
        first.seen
    );
    let status: serde_json::Value = lode
        .kv("operator")
        .get_typed("status")
        .await
        .expect("read")
        .expect("status");
    assert_eq!(
        status["token"], second_token,
        "the status is the new leader's: {status}"
    );

    // Stepping down on SIGTERM releases the lease: the other takes over
    // without waiting out the lease's term.
    second.signal("TERM");
    assert_eq!(second.wait_for("resigned"), second_token);
    let third_token = first.wait_for("leading");
    assert!(third_token > second_token);
    assert_eq!(first.wait_for("wrote status"), third_token);
    drop((first, second));
    lode.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_candidate_leads_past_its_term_and_learns_at_once_when_its_lease_is_gone() {
    let directory = tempfile::tempdir().expect("tempdir");
    let lode = Lode::open_embedded(directory.path().join("store")).await.expect("open");
    let kv = lode.kv("operator");
    let ttl = Duration::from_millis(600);
    let first = LeaderElection::new(kv.clone(), "leader", "a", ttl).expect("election");
    let second = LeaderElection::new(kv.clone(), "leader", "b", ttl).expect("election");
    let leading = first.campaign().await.expect("a leads");
    // Three terms later, renewals have kept it: the other never wins.
    let contest = tokio::time::timeout(ttl * 3, second.campaign()).await;
    assert!(contest.is_err(), "b was elected while a renewed its lease");
    assert!(leading.is_leading());
    leading
        .cas_fenced(&kv, "status")
        .bytes("from a")
        .expect_absent()
        .commit()
        .await
        .expect("a writes while it leads");

    // The lease taken from under it (released by an operator): the next
    // renewal says so, and `lost` resolves within a renewal period.
    let mut watch = leading.watch();
    assert!(kv.release("leader", "a", leading.token()).await.expect("release"));
    tokio::time::timeout(ttl, leading.lost())
        .await
        .expect("loss reported within a term");
    assert!(!leading.is_leading());
    watch.wait_for(|leading| !*leading).await.expect("the watch says lost");
    let taken_over = second.campaign().await.expect("b leads");
    assert!(taken_over.token() > leading.token());
    let version = kv.exists("status").await.expect("exists").expect("status").version;
    let refused = leading
        .cas_fenced(&kv, "status")
        .bytes("late")
        .expect_version(version)
        .commit()
        .await;
    assert!(matches!(refused, Err(LodeError::LeaseLost)), "{refused:?}");

    // Resigning releases at once; the next campaign needs no wait.
    let token = taken_over.token();
    assert!(taken_over.resign().await.expect("resign"));
    let again = tokio::time::timeout(ttl, first.campaign())
        .await
        .expect("no wait")
        .expect("a leads again");
    assert!(again.token() > token);
    drop(again);
    lode.close().await;
}

#[tokio::test]
async fn an_election_refuses_a_term_too_short_to_renew() {
    let directory = tempfile::tempdir().expect("tempdir");
    let lode = Lode::open_embedded(directory.path().join("store")).await.expect("open");
    let error =
        LeaderElection::new(lode.kv("operator"), "leader", "a", Duration::from_millis(100)).expect_err("too short");
    assert!(
        matches!(&error, LodeError::Invalid(message) if message.contains("election_ttl_ms_min")),
        "{error}"
    );
    lode.close().await;
}
