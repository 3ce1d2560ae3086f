//! A test cluster of real `lode node` processes on loopback, with real
//! RocksDB directories and real TCP. Processes are killed when the cluster
//! is dropped; every wait polls a condition with a deadline.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lode_client::{Client, ClientOptions};

pub mod kubernetes;
pub mod verdict;

pub const WAIT_MAX: Duration = Duration::from_secs(60);

/// An unconditional, non-expiring `set` of `value` at `key`.
pub fn plain_set(namespace: &str, key: Vec<u8>, value: Vec<u8>) -> lode_client::protocol::Operation {
    lode_client::protocol::Operation::Set {
        namespace: namespace.to_owned(),
        key,
        value,
        encoding: Default::default(),
        expires_at_micros: None,
        precondition: None,
        fence: None,
        session: None,
    }
}

/// One memory figure of a process's `/proc/<pid>/status`, in KiB: `VmRSS`
/// (resident now) or `VmHWM` (peak resident).
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// Picks a free loopback port by binding port 0, never one this test
/// process handed out before (tests run in parallel, and a member has three
/// ports).
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local address").port();
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// The KV Connect token of test clusters started with HTTP ports.
pub const ACCESS_TOKEN: &str = "test-token";

pub struct Member {
    pub id: u64,
    /// The member's client port.
    pub address: String,
    /// The member's peer port.
    pub peer_address: String,
    /// The member's HTTP port (KV Connect), when the cluster has them.
    pub http: Option<String>,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    pub process: Option<Child>,
}

pub struct TestCluster {
    pub directory: tempfile::TempDir,
    pub members: BTreeMap<u64, Member>,
    pub snapshot_logs_max: u64,
    /// The `--peers` flags the founding members started with.
    pub founding_flags: Vec<String>,
    /// Flags every member starts with (TLS).
    pub common_flags: Vec<String>,
    /// The CA and certificates of a cluster started with TLS.
    pub tls_dir: Option<PathBuf>,
}

/// Runs `lode tls` to make a CA (`ca.pem`) and certificates signed by it
/// in `dir`: `member` (for 127.0.0.1) and `client`.
pub fn make_certificates(dir: &std::path::Path) {
    let lode = |arguments: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_lode"))
            .args(arguments)
            .arg("--dir")
            .arg(dir)
            .output()
            .expect("run lode tls");
        assert!(output.status.success(), "{output:?}");
    };
    lode(&["tls", "ca"]);
    lode(&["tls", "issue", "--name", "member", "--hosts", "127.0.0.1,localhost"]);
    lode(&["tls", "issue", "--name", "client", "--hosts", "127.0.0.1"]);
}

/// The `lode node` flags for TLS with the certificates in `dir`.
pub fn tls_flags(dir: &std::path::Path) -> Vec<String> {
    let path = |name: &str| dir.join(name).display().to_string();
    vec![
        "--tls-ca".to_owned(),
        path("ca.pem"),
        "--tls-cert".to_owned(),
        path("member.pem"),
        "--tls-key".to_owned(),
        path("member-key.pem"),
    ]
}

fn spawn_node(member: &Member, membership: &[String], snapshot_logs_max: u64) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&member.log_path)
        .expect("open node log");
    let http: Vec<&str> = match &member.http {
        Some(address) => vec!["--http", address, "--access-token", ACCESS_TOKEN],
        None => Vec::new(),
    };
    Command::new(env!("CARGO_BIN_EXE_lode"))
        .arg("node")
        .args(["--id", &member.id.to_string(), "--listen", &member.address])
        .args(["--peer-listen", &member.peer_address])
        .arg("--data-dir")
        .arg(&member.data_dir)
        .args(["--snapshot-logs-max", &snapshot_logs_max.to_string()])
        .args(http)
        .args(membership)
        // A member's default log filter, as users run it.
        .env_remove("LODE_LOG")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn lode node")
}

impl TestCluster {
    /// Starts `count` founding members.
    pub fn start(count: u64, snapshot_logs_max: u64) -> Self {
        Self::start_with_flags(count, snapshot_logs_max, &[])
    }

    /// Starts `count` founding members with extra `lode node` flags.
    pub fn start_with_flags(count: u64, snapshot_logs_max: u64, extra: &[&str]) -> Self {
        Self::start_members(count, snapshot_logs_max, extra, false)
    }

    /// Starts `count` founding members, each also serving KV Connect on an
    /// HTTP port of its own, with [`ACCESS_TOKEN`].
    pub fn start_with_http(count: u64, snapshot_logs_max: u64) -> Self {
        Self::start_members(count, snapshot_logs_max, &[], true)
    }

    /// [`Self::start_with_http`] with extra `lode node` flags.
    pub fn start_with_http_and_flags(count: u64, snapshot_logs_max: u64, extra: &[&str]) -> Self {
        Self::start_members(count, snapshot_logs_max, extra, true)
    }

    /// Starts `count` founding members with TLS on every port (and HTTP
    /// ports), with certificates from `lode tls`.
    pub fn start_with_tls(count: u64, snapshot_logs_max: u64) -> Self {
        Self::start_with_tls_and_flags(count, snapshot_logs_max, &[])
    }

    /// [`Self::start_with_tls`] with extra `lode node` flags.
    pub fn start_with_tls_and_flags(count: u64, snapshot_logs_max: u64, extra: &[&str]) -> Self {
        let directory = tempfile::tempdir().expect("temp dir");
        let tls_dir = directory.path().join("tls");
        make_certificates(&tls_dir);
        let flags = tls_flags(&tls_dir);
        let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        flags.extend_from_slice(extra);
        let mut cluster = Self::start_in(directory, count, snapshot_logs_max, &flags, true, None, None);
        cluster.common_flags = flags.iter().map(|flag| (*flag).to_owned()).collect();
        cluster.tls_dir = Some(tls_dir);
        cluster
    }

    fn start_members(count: u64, snapshot_logs_max: u64, extra: &[&str], http: bool) -> Self {
        let directory = tempfile::tempdir().expect("temp dir");
        Self::start_in(directory, count, snapshot_logs_max, extra, http, None, None)
    }

    /// Starts `count` founding members of a new cluster, each member's data
    /// directory written first by `lode snapshot restore backup`.
    pub fn start_restored(backup: &std::path::Path, count: u64, snapshot_logs_max: u64) -> Self {
        let directory = tempfile::tempdir().expect("temp dir");
        Self::start_in(directory, count, snapshot_logs_max, &[], false, Some(backup), None)
    }

    /// Starts the founding members `1..=count` but `late`, which the test
    /// starts later (`restart_as_founder`): a founder that was not up
    /// when the others founded the cluster.
    pub fn start_without(count: u64, snapshot_logs_max: u64, late: u64) -> Self {
        let directory = tempfile::tempdir().expect("temp dir");
        Self::start_in(directory, count, snapshot_logs_max, &[], false, None, Some(late))
    }

    /// Starts `count` founding members whose data directories
    /// (`directory/node-<id>`) the test prepared, e.g. as mount points.
    pub fn start_in_directory(
        directory: tempfile::TempDir,
        count: u64,
        snapshot_logs_max: u64,
        extra: &[&str],
    ) -> Self {
        Self::start_in(directory, count, snapshot_logs_max, extra, false, None, None)
    }

    /// Starts `count` members on copies of the data directories
    /// `source/node-<id>` (kept as they are, so a test can start on data
    /// written earlier), as restarts: no membership flags.
    pub fn start_on_copies(source: &std::path::Path, count: u64, snapshot_logs_max: u64) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let directory = tempfile::tempdir().expect("temp dir");
        let mut members = BTreeMap::new();
        for id in 1..=count {
            let mut member = Self::member(&directory, id);
            let from = source.join(format!("node-{id}"));
            run_checked(
                "copy a data directory",
                Command::new("cp").arg("-r").arg(&from).arg(&member.data_dir),
            );
            std::fs::set_permissions(&member.data_dir, std::fs::Permissions::from_mode(0o700))
                .expect("data directory permissions");
            member.process = Some(spawn_node(&member, &[], snapshot_logs_max));
            members.insert(id, member);
        }
        Self {
            directory,
            members,
            snapshot_logs_max,
            founding_flags: Vec::new(),
            common_flags: Vec::new(),
            tls_dir: None,
        }
    }

    fn start_in(
        directory: tempfile::TempDir,
        count: u64,
        snapshot_logs_max: u64,
        extra: &[&str],
        http: bool,
        restore_from: Option<&std::path::Path>,
        late: Option<u64>,
    ) -> Self {
        let mut members = BTreeMap::new();
        for id in 1..=count {
            let mut member = Self::member(&directory, id);
            if http {
                member.http = Some(format!("127.0.0.1:{}", free_port()));
            }
            members.insert(id, member);
        }
        let peers: Vec<String> = members
            .values()
            .map(|member| format!("{}={}", member.id, member.peer_address))
            .collect();
        let mut membership = vec!["--peers".to_owned(), peers.join(",")];
        membership.extend(extra.iter().map(|flag| (*flag).to_owned()));
        for member in members.values_mut() {
            if let Some(backup) = restore_from {
                let output = Command::new(env!("CARGO_BIN_EXE_lode"))
                    .args(["snapshot", "restore"])
                    .arg(backup)
                    .arg("--data-dir")
                    .arg(&member.data_dir)
                    .args(["--id", &member.id.to_string(), "--peers", &peers.join(",")])
                    .output()
                    .expect("run lode snapshot restore");
                assert!(output.status.success(), "restore of member {}: {output:?}", member.id);
            }
            if late != Some(member.id) {
                member.process = Some(spawn_node(member, &membership, snapshot_logs_max));
            }
        }
        Self {
            directory,
            members,
            snapshot_logs_max,
            founding_flags: membership,
            common_flags: Vec::new(),
            tls_dir: None,
        }
    }

    fn member(directory: &tempfile::TempDir, id: u64) -> Member {
        Member {
            id,
            address: format!("127.0.0.1:{}", free_port()),
            peer_address: format!("127.0.0.1:{}", free_port()),
            http: None,
            data_dir: directory.path().join(format!("node-{id}")),
            log_path: directory.path().join(format!("node-{id}.log")),
            process: None,
        }
    }

    /// The cluster's id, as `lode cluster status --json` reports it.
    pub fn cluster_id(&self) -> String {
        let output = self.lode(&["cluster", "status", "--json"]);
        assert!(output.status.success(), "{output:?}");
        let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("status JSON");
        status["cluster_id"].as_str().expect("a cluster id").to_owned()
    }

    /// Starts a new member that waits to be added (`cluster add`) to this
    /// cluster; returns its peer address.
    pub fn start_spare(&mut self, id: u64) -> String {
        let flags = vec!["--cluster-id".to_owned(), self.cluster_id()];
        self.start_spare_with(id, &flags)
    }

    /// Starts a new member with `flags` (and the cluster's own); returns its
    /// peer address.
    pub fn start_spare_with(&mut self, id: u64, flags: &[String]) -> String {
        let mut flags = flags.to_vec();
        flags.extend(self.common_flags.iter().cloned());
        let mut member = Self::member(&self.directory, id);
        // A spare of a cluster with HTTP ports gets one too.
        if self.members.values().any(|member| member.http.is_some()) {
            member.http = Some(format!("127.0.0.1:{}", free_port()));
        }
        member.process = Some(spawn_node(&member, &flags, self.snapshot_logs_max));
        let address = member.peer_address.clone();
        self.members.insert(id, member);
        address
    }

    /// Starts a new member with `--join seed` (a peer address); returns
    /// its peer address.
    pub fn start_joining(&mut self, id: u64, seed: &str) -> String {
        self.start_spare_with(id, &["--join".to_owned(), seed.to_owned()])
    }

    /// The KV Connect URL of member `id`.
    pub fn kv_connect_url(&self, id: u64) -> String {
        let http = self.members[&id].http.as_ref().expect("the cluster serves HTTP");
        let scheme = if self.tls_dir.is_some() { "https" } else { "http" };
        format!("{scheme}://{http}")
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .values()
            .filter(|member| member.process.is_some())
            .map(|member| member.address.clone())
            .collect()
    }

    /// SDK options that reach this cluster (its CA when it runs TLS).
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            tls: self
                .tls_dir
                .as_ref()
                .map(|dir| lode_client::tls::ClientTls::from_files(&dir.join("ca.pem"), None).expect("the cluster CA")),
            ..ClientOptions::default()
        }
    }

    pub fn client(&self) -> Client {
        Client::with_options(self.endpoints(), self.options()).expect("client")
    }

    /// The client address of member `id`.
    pub fn address_of(&self, id: u64) -> String {
        self.members[&id].address.clone()
    }

    /// A client that talks to one member only and gives up quickly.
    pub fn client_of(&self, id: u64) -> Client {
        let options = ClientOptions {
            call_timeout: Duration::from_secs(2),
            attempt_timeout: Duration::from_secs(1),
            ..self.options()
        };
        Client::with_options([self.members[&id].address.clone()], options).expect("client")
    }

    pub fn running(&self) -> Vec<u64> {
        self.members
            .values()
            .filter(|member| member.process.is_some())
            .map(|member| member.id)
            .collect()
    }

    /// A running member other than `leader`.
    pub fn a_follower(&self, leader: u64) -> u64 {
        self.running().into_iter().find(|id| *id != leader).expect("a follower")
    }

    /// SIGKILL: no shutdown, no flush.
    pub fn kill(&mut self, id: u64) {
        let member = self.members.get_mut(&id).expect("member");
        if let Some(mut process) = member.process.take() {
            process.kill().expect("kill");
            process.wait().expect("wait");
        }
    }

    /// Sends SIGTERM to member `id` and waits for it to exit on its own,
    /// successfully; returns how long it took.
    pub fn stop_gracefully(&mut self, id: u64) -> Duration {
        self.signal(id, "TERM");
        let started = std::time::Instant::now();
        let status = self.wait_for_exit(id);
        assert!(status.success(), "member {id} exited with {status} after SIGTERM");
        started.elapsed()
    }

    /// Waits for member `id` to exit by itself; returns its exit status.
    pub fn wait_for_exit(&mut self, id: u64) -> std::process::ExitStatus {
        let started = std::time::Instant::now();
        let mut process = self
            .members
            .get_mut(&id)
            .and_then(|member| member.process.take())
            .expect("a running member");
        loop {
            if let Some(status) = process.try_wait().expect("poll the member") {
                return status;
            }
            assert!(started.elapsed() < WAIT_MAX, "member {id} did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends a signal (`STOP`, `CONT`, `TERM`) to a running member.
    pub fn signal(&self, id: u64, signal: &str) {
        let process = self.members[&id].process.as_ref().expect("member is running");
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &process.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} failed");
        if signal == "STOP" {
            // kill returns once the signal is queued; a request sent before
            // the member actually stops would still be answered.
            let stat = format!("/proc/{}/stat", process.id());
            let stopped = || {
                std::fs::read_to_string(&stat)
                    .ok()
                    .and_then(|stat| stat.rsplit(')').next().map(|rest| rest.trim_start().starts_with('T')))
                    .unwrap_or(false)
            };
            let deadline = std::time::Instant::now() + WAIT_MAX;
            while !stopped() {
                assert!(std::time::Instant::now() < deadline, "member {id} did not stop");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Restarts a member from its data directory, with no membership flags.
    pub fn restart(&mut self, id: u64) {
        self.restart_with(id, &[]);
    }

    /// Restarts a founding member with the `--peers` flags it first had, as
    /// a service manager would: it must not initialize a cluster again.
    pub fn restart_as_founder(&mut self, id: u64) {
        let flags = self.founding_flags.clone();
        self.restart_with(id, &flags);
    }

    /// Restarts a member with `--join seed`, as its service manager would.
    pub fn restart_with_join(&mut self, id: u64, seed: &str) {
        self.restart_with(id, &["--join".to_owned(), seed.to_owned()]);
    }

    /// Restarts a member with extra `lode node` flags.
    pub fn restart_with_flags(&mut self, id: u64, flags: &[&str]) {
        let flags: Vec<String> = flags.iter().map(|flag| (*flag).to_owned()).collect();
        self.restart_with(id, &flags);
    }

    fn restart_with(&mut self, id: u64, flags: &[String]) {
        let mut flags = flags.to_vec();
        if !flags.iter().any(|flag| flag == "--tls-ca") {
            flags.extend(self.common_flags.iter().cloned());
        }
        let flags = &flags;
        let snapshot_logs_max = self.snapshot_logs_max;
        let member = self.members.get_mut(&id).expect("member");
        assert!(member.process.is_none(), "member {id} is still running");
        member.process = Some(spawn_node(member, flags, snapshot_logs_max));
    }

    /// Runs the `lode` command-line tool against this cluster.
    pub fn lode(&self, arguments: &[&str]) -> std::process::Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lode"));
        command
            .args(arguments)
            .env("LODE_ENDPOINTS", self.endpoints().join(","));
        if let Some(dir) = &self.tls_dir {
            command.env("LODE_TLS_CA", dir.join("ca.pem"));
        }
        command.output().expect("run lode")
    }

    /// Waits until every running member reports the same leader, which is
    /// itself running.
    pub async fn wait_for_leader(&self) -> u64 {
        let running = self.running();
        let deadline = tokio::time::Instant::now() + WAIT_MAX;
        loop {
            let mut seen = Vec::new();
            for id in &running {
                seen.push((*id, self.client_of(*id).node_status().await.map(|status| status.leader)));
            }
            let leaders: std::collections::BTreeSet<Option<u64>> =
                seen.iter().map(|(_, leader)| leader.clone().ok().flatten()).collect();
            if let [Some(leader)] = leaders.iter().copied().collect::<Vec<_>>().as_slice() {
                if running.contains(leader) && self.addresses_published(*leader, &running).await {
                    return *leader;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                for id in self.members.keys() {
                    let log = self.log_text(*id);
                    if let Ok(directory) = std::env::var("LODE_TEST_LOGS") {
                        let _ = std::fs::write(format!("{directory}/member-{id}.log"), &log);
                        let _ = Command::new("cp")
                            .arg("-r")
                            .arg(&self.members[id].data_dir)
                            .arg(format!("{directory}/data-{id}"))
                            .status();
                    }
                    let tail: Vec<&str> = log.lines().rev().take(40).collect();
                    eprintln!("--- member {id}, last log lines (newest first):\n{}", tail.join("\n"));
                    let panics: Vec<&str> = log
                        .lines()
                        .enumerate()
                        .filter(|(_, line)| line.contains("panicked"))
                        .take(3)
                        .flat_map(|(number, _)| log.lines().skip(number).take(8))
                        .collect();
                    eprintln!("--- member {id}, panics:\n{}", panics.join("\n"));
                }
                panic!("timed out waiting for a leader all running members agree on; leaders seen: {seen:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the leader's membership records the client address of every
    /// running member in it (founders publish theirs once they run).
    async fn addresses_published(&self, leader: u64, running: &[u64]) -> bool {
        let Ok(status) = self.client_of(leader).node_status().await else {
            return false;
        };
        status
            .members
            .iter()
            .filter(|member| running.contains(&member.id))
            .all(|member| member.address == self.members[&member.id].address)
    }

    /// Waits until member `id` has applied `position`.
    pub async fn wait_applied(&self, id: u64, position: u64) {
        let client = self.client_of(id);
        wait_until(&format!("member {id} to apply {position}"), || async {
            let status = client.node_status().await.ok()?;
            (status.applied_index >= position).then_some(())
        })
        .await
    }

    /// Lines of a member's log at ERROR level.
    pub fn error_lines(&self, id: u64) -> Vec<String> {
        let text = std::fs::read_to_string(&self.members[&id].log_path).unwrap_or_default();
        text.lines()
            .filter(|line| line.contains("ERROR"))
            .map(str::to_owned)
            .collect()
    }

    /// Fails the test when any member logged an ERROR line.
    pub fn assert_no_errors(&self) {
        self.assert_no_errors_except(&[]);
    }

    /// Fails the test when any member logged an ERROR line that contains
    /// none of `expected` (errors a test provokes on purpose, such as a
    /// killed peer being unreachable).
    pub fn assert_no_errors_except(&self, expected: &[&str]) {
        for id in self.members.keys() {
            let errors: Vec<String> = self
                .error_lines(*id)
                .into_iter()
                .filter(|line| !expected.iter().any(|pattern| line.contains(pattern)))
                .collect();
            assert!(errors.is_empty(), "member {id} logged unexpected errors: {errors:#?}");
        }
    }

    pub fn log_text(&self, id: u64) -> String {
        std::fs::read_to_string(&self.members[&id].log_path).unwrap_or_default()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for member in self.members.values_mut() {
            if let Some(mut process) = member.process.take() {
                // A stopped process still dies of SIGKILL; CONT first keeps
                // the order of events in its log readable.
                let _ = Command::new("kill").args(["-CONT", &process.id().to_string()]).status();
                let _ = process.kill();
                let _ = process.wait();
            }
        }
    }
}

/// Polls `condition` until it yields a value, failing after `WAIT_MAX`.
/// Waits until the cluster's status shows member `id` as a voter.
pub async fn wait_for_voter(client: &lode_client::Client, id: u64) {
    wait_until(&format!("member {id} to become a voter"), || async {
        let status = client.cluster_status().await.ok()?;
        status
            .members
            .iter()
            .any(|member| member.id == id && member.voter)
            .then_some(())
    })
    .await;
}

pub async fn wait_until<T, F, Fut>(what: &str, mut condition: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    loop {
        if let Some(value) = condition().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `command` and fails the test, with its output, unless it succeeds.
pub fn run_checked(what: &str, command: &mut Command) {
    let output = command.output().unwrap_or_else(|error| panic!("{what}: {error}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One HTTP/1.1 POST over a fresh connection: (status, body bytes).
pub fn post_bytes(address: &str, path: &str, token: Option<&str>, content_type: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let content = format!("Content-Type: {content_type}\r\nContent-Length: {}\r\n", body.len());
    request(address, "POST", path, token, &content, body)
}

/// One HTTP/1.1 GET over a fresh connection: (status, body text).
pub fn get(address: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let (status, body) = request(address, "GET", path, token, "", b"");
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn request(address: &str, method: &str, path: &str, token: Option<&str>, content: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let authorization = token.map_or(String::new(), |token| format!("Authorization: Bearer {token}\r\n"));
    let head =
        format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\n{authorization}{content}Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).expect("write");
    stream.write_all(body).expect("write");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read");
    let head_end = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("a header end");
    let head = String::from_utf8_lossy(&response[..head_end]);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    (status, response[head_end + 4..].to_vec())
}

/// The status line and headers of a GET, read without waiting for its
/// body (for streams that never end).
pub fn get_head(address: &str, path: &str, token: Option<&str>) -> String {
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let authorization = token.map_or(String::new(), |token| format!("Authorization: Bearer {token}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n{authorization}\r\n");
    stream.write_all(request.as_bytes()).expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("read the head");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// The (id, data) of the first `count` events of a server-sent-events
/// stream at `path`, asked with `token` (and `Last-Event-ID` when given). Lines of the
/// chunked encoding other than `id:` and `data:` are passed over.
pub fn server_sent_events(
    address: &str,
    path: &str,
    token: &str,
    last_event_id: Option<&str>,
    count: usize,
) -> Vec<(String, serde_json::Value)> {
    use std::io::BufRead;
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let resume = last_event_id.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n{resume}\r\n");
    stream.write_all(request.as_bytes()).expect("write");
    let mut events = Vec::new();
    let mut id = String::new();
    for line in std::io::BufReader::new(stream).lines() {
        let line = line.expect("read a line");
        if let Some(value) = line.strip_prefix("id: ") {
            id = value.to_owned();
        }
        if let Some(data) = line.strip_prefix("data: ") {
            let data = serde_json::from_str(data).expect("JSON data");
            events.push((std::mem::take(&mut id), data));
            if events.len() == count {
                break;
            }
        }
    }
    events
}

/// One HTTP/1.1 POST over a fresh connection: (status, body text).
pub fn post(address: &str, path: &str, token: Option<&str>, content_type: &str, body: &[u8]) -> (u16, String) {
    let (status, body) = post_bytes(address, path, token, content_type, body);
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A cluster started with a bootstrap token, and an admin client holding it.
pub struct Secured {
    pub cluster: TestCluster,
    pub root: Client,
    pub root_token: lode_client::protocol::AccessToken,
    pub _directory: tempfile::TempDir,
}

/// A fresh first admin's token, written to `root.token` in `directory`:
/// the file's path (for `--bootstrap-token-file`) and the token.
pub fn bootstrap_token_file(directory: &std::path::Path) -> (String, lode_client::protocol::AccessToken) {
    let token = lode_client::auth::new_token();
    let path = directory.join("root.token");
    std::fs::write(&path, token.to_text()).expect("token file");
    (
        path.to_string_lossy().into_owned(),
        lode_client::protocol::AccessToken(token.to_text()),
    )
}

/// A client of `endpoints` that presents `token`.
pub fn client_with(
    cluster: &TestCluster,
    endpoints: Vec<String>,
    token: &lode_client::protocol::AccessToken,
) -> Client {
    let options = ClientOptions {
        token: Some(token.clone()),
        ..cluster.options()
    };
    Client::with_options(endpoints, options).expect("client")
}

/// Three members (with HTTP ports) holding one bootstrap token; waits
/// until authentication is on (an anonymous call is refused).
pub async fn secured() -> Secured {
    secured_with(&[]).await
}

/// [`secured`], with more flags for every member.
pub async fn secured_with(flags: &[&str]) -> Secured {
    let directory = tempfile::tempdir().expect("temporary directory");
    let (path, root_token) = bootstrap_token_file(directory.path());
    let mut all = vec!["--bootstrap-token-file", &path];
    all.extend_from_slice(flags);
    let cluster = TestCluster::start_with_http_and_flags(3, 10_000, &all);
    cluster.wait_for_leader().await;
    let anonymous = cluster.client();
    wait_until("authentication to turn on", || async {
        match anonymous.kv("config").get("k").await {
            Err(error) if error.is_unauthorized() => Some(()),
            _ => None,
        }
    })
    .await;
    let root = client_with(&cluster, cluster.endpoints(), &root_token);
    Secured {
        cluster,
        root,
        root_token,
        _directory: directory,
    }
}

/// A user holding one role (of its own name) with `grants`, and its token.
pub async fn user_with(root: &Client, name: &str, grants: &[&str]) -> lode_client::auth::IssuedToken {
    let auth = root.auth();
    auth.put_user(name).await.expect("user");
    let grants = grants
        .iter()
        .map(|grant| lode_types::auth::Grant::parse(grant).expect("grant"))
        .collect();
    auth.put_role(name, grants).await.expect("role");
    auth.bind_role(name, name).await.expect("bind");
    auth.issue_token(name, None).await.expect("token")
}
