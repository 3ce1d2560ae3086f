//! A StatefulSet emulated with real processes: `lode node` started with the
//! exact arguments and environment of the production-3 overlay's pods
//! (hostnames `lode-0`, `lode-1`, ...), each pod's ports moved to loopback
//! ports of its own and its peer DNS names resolved there
//! (`LODE_RESOLVE_OVERRIDE`), its Secrets and volume as directories. Then,
//! in turn: scale to 5, back to 3 with `lode cluster scale`, restart a
//! member on its volume, replace one with an empty volume, scale up onto a
//! removed member's retained volume, restart every member in turn, and
//! shrink below the founders and grow back onto a founder's old volume.
//! After each step: one leader, one cluster id, every acknowledged write
//! present on every running member.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lode_client::protocol::{AccessToken, ClusterId};
use lode_client::tls::ClientTls;
use lode_client::{Client, ClientOptions, Consistency};
use support::kubernetes::{render, MemberTemplate};
use support::{free_port, wait_until};

/// Ordinals the emulation may run: five members and one spare.
const ORDINALS: u64 = 6;
const NAMESPACE: &str = "lode";

struct Pod {
    ports: [u16; 3],
    volume: PathBuf,
    log: PathBuf,
    process: Option<Child>,
}

struct Emulation {
    directory: tempfile::TempDir,
    template: MemberTemplate,
    pods: BTreeMap<u64, Pod>,
    token: AccessToken,
    /// Every write acknowledged so far: key, value, position.
    acknowledged: Vec<(String, String, u64)>,
}

/// A pod's DNS name for one of its ports.
fn dns(ordinal: u64, port: u16) -> String {
    format!("lode-{ordinal}.lode-peers.{NAMESPACE}.svc:{port}")
}

impl Emulation {
    fn new() -> Self {
        let directory = tempfile::tempdir().expect("temporary directory");
        let template = MemberTemplate::of(&render("overlays/production-3"));
        assert_eq!(template.namespace, NAMESPACE);
        let secrets = directory.path().join("secrets");
        make_secrets(&secrets);
        let token_text = std::fs::read_to_string(secrets.join("lode-bootstrap-token/token")).expect("token");
        let pods = (0..ORDINALS)
            .map(|ordinal| {
                let pod = Pod {
                    ports: [free_port(), free_port(), free_port()],
                    volume: directory.path().join(format!("volumes/data-lode-{ordinal}")),
                    log: directory.path().join(format!("lode-{ordinal}.log")),
                    process: None,
                };
                (ordinal, pod)
            })
            .collect();
        let emulation = Self {
            directory,
            template,
            pods,
            token: AccessToken(token_text.trim().to_owned()),
            acknowledged: Vec::new(),
        };
        // This process follows leader hints, which name pods by DNS too.
        let installed = lode_client::facade::install(Box::new(
            lode_client::facade::SystemEnvironment::with_resolve_overrides(&emulation.pod_names(None))
                .expect("overrides"),
        ));
        assert!(installed, "the resolver override is installed before any dial");
        emulation
    }

    /// `LODE_RESOLVE_OVERRIDE` for a process: every pod's DNS names, and the
    /// client Service's peer port at `service` (a ready member).
    fn pod_names(&self, service: Option<u64>) -> String {
        let mut pairs = Vec::new();
        for (ordinal, pod) in &self.pods {
            for (port, local) in [7000, 7001, 7002].into_iter().zip(pod.ports) {
                pairs.push(format!("{}=127.0.0.1:{local}", dns(*ordinal, port)));
            }
        }
        if let Some(service) = service {
            pairs.push(format!(
                "lode.{NAMESPACE}.svc:7001=127.0.0.1:{}",
                self.pods[&service].ports[1]
            ));
        }
        pairs.join(",")
    }

    /// The pod's arguments, its addresses and files moved into this test.
    fn arguments(&self, ordinal: u64) -> Vec<String> {
        let pod = &self.pods[&ordinal];
        let secrets = self.directory.path().join("secrets");
        let moved: Vec<String> = self
            .template
            .arguments()
            .into_iter()
            .map(|argument| {
                argument
                    .replace("0.0.0.0:7000", &format!("127.0.0.1:{}", pod.ports[0]))
                    .replace("0.0.0.0:7001", &format!("127.0.0.1:{}", pod.ports[1]))
                    .replace("0.0.0.0:7002", &format!("127.0.0.1:{}", pod.ports[2]))
                    .replace("/etc/lode/tls/", &format!("{}/lode-tls/", secrets.display()))
                    .replace(
                        "/etc/lode/bootstrap/",
                        &format!("{}/lode-bootstrap-token/", secrets.display()),
                    )
                    .replace("/var/lib/lode", &pod.volume.display().to_string())
            })
            .collect();
        for argument in &moved {
            assert!(
                !argument.contains("0.0.0.0") && !argument.contains("/etc/") && !argument.contains("/var/lib"),
                "the emulation does not know where {argument:?} goes"
            );
        }
        moved
    }

    /// Starts pod `ordinal` on its volume; the client Service sends its
    /// peer port to `service`.
    fn start(&mut self, ordinal: u64, service: u64) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.pods[&ordinal].log)
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_lode"))
            .args(self.arguments(ordinal))
            .envs(self.template.environment())
            .env("HOSTNAME", format!("lode-{ordinal}"))
            .env("LODE_RESOLVE_OVERRIDE", self.pod_names(Some(service)))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn lode node");
        self.pods.get_mut(&ordinal).expect("pod").process = Some(child);
    }

    /// SIGTERM, as the kubelet stops a pod, and waits for the exit.
    fn stop(&mut self, ordinal: u64) {
        let mut child = self
            .pods
            .get_mut(&ordinal)
            .and_then(|pod| pod.process.take())
            .expect("running");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let exit = child.wait().expect("wait");
        assert!(exit.success(), "lode-{ordinal} exited with {exit}");
    }

    fn kill(&mut self, ordinal: u64) {
        let mut child = self
            .pods
            .get_mut(&ordinal)
            .and_then(|pod| pod.process.take())
            .expect("running");
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }

    fn running(&self) -> Vec<u64> {
        self.pods
            .iter()
            .filter(|(_, pod)| pod.process.is_some())
            .map(|(ordinal, _)| *ordinal)
            .collect()
    }

    fn options(&self) -> ClientOptions {
        let ca = self.directory.path().join("secrets/lode-tls/ca.crt");
        ClientOptions {
            tls: Some(ClientTls::from_files(&ca, None).expect("client TLS")),
            token: Some(self.token.clone()),
            call_timeout: Duration::from_secs(20),
            ..ClientOptions::default()
        }
    }

    /// A client of the running pods (by loopback address, as the client
    /// Service would spread them).
    fn client(&self) -> Client {
        let endpoints = self
            .running()
            .into_iter()
            .map(|ordinal| format!("127.0.0.1:{}", self.pods[&ordinal].ports[0]));
        Client::with_options(endpoints, self.options()).expect("client")
    }

    /// A client of pod `ordinal` alone.
    fn client_of(&self, ordinal: u64) -> Client {
        let endpoint = format!("127.0.0.1:{}", self.pods[&ordinal].ports[0]);
        Client::with_options([endpoint], self.options()).expect("client")
    }

    fn log_text(&self, ordinal: u64) -> String {
        std::fs::read_to_string(&self.pods[&ordinal].log).unwrap_or_default()
    }

    /// Writes `count` entries named after `step`, each retried until
    /// acknowledged, and records them.
    async fn write(&mut self, step: &str, count: usize) {
        let kv = self.client().kv("emulation");
        for index in 0..count {
            let key = format!("{step}-{index}");
            let value = format!("value of {key}");
            let position = wait_until(&format!("the write of {key}"), || async {
                kv.set(&key).bytes(&value).send().await.ok()
            })
            .await;
            self.acknowledged.push((key, value, position));
        }
    }

    /// One leader all running members agree on, one cluster id, and every
    /// acknowledged write on every running member.
    async fn assert_healthy(&self, step: &str) {
        let running = self.running();
        let (leader, cluster) = wait_until(&format!("{step}: one leader and one cluster id"), || async {
            let mut seen = std::collections::BTreeSet::new();
            for ordinal in &running {
                let status = self.client_of(*ordinal).node_status().await.ok()?;
                seen.insert((status.leader?, status.cluster_id?));
            }
            let [(leader, cluster)]: [(u64, ClusterId); 1] = seen.into_iter().collect::<Vec<_>>().try_into().ok()?;
            running.contains(&(leader - 1)).then_some((leader, cluster))
        })
        .await;
        let last = self.acknowledged.last().map_or(0, |(_, _, position)| *position);
        for ordinal in &running {
            let kv = self
                .client_of(*ordinal)
                .kv("emulation")
                .with_consistency(Consistency::AtLeast(last));
            for (key, value, _) in &self.acknowledged {
                let read = wait_until(&format!("{step}: lode-{ordinal} to serve {key}"), || async {
                    kv.get(key).await.ok()
                })
                .await;
                assert_eq!(
                    read.as_deref(),
                    Some(value.as_bytes()),
                    "{step}: lode-{ordinal} lost {key}"
                );
            }
        }
        eprintln!(
            "{step}: leader {leader}, cluster {cluster}, {} writes on {running:?}",
            self.acknowledged.len()
        );
    }

    /// Waits until the members are exactly `voters` (by id), all voters.
    async fn wait_for_members(&self, step: &str, voters: &[u64]) {
        let client = self.client();
        wait_until(&format!("{step}: members {voters:?}, all voters"), || async {
            let status = client.cluster_status().await.ok()?;
            let members: Vec<(u64, bool)> = status.members.iter().map(|member| (member.id, member.voter)).collect();
            let wanted: Vec<(u64, bool)> = voters.iter().map(|id| (*id, true)).collect();
            (members == wanted).then_some(())
        })
        .await;
    }

    fn lode(&self, arguments: &[&str]) -> std::process::Output {
        let secrets = self.directory.path().join("secrets");
        let endpoint = format!("127.0.0.1:{}", self.pods[&self.running()[0]].ports[0]);
        Command::new(env!("CARGO_BIN_EXE_lode"))
            .args(arguments)
            .args(["--endpoints", &endpoint, "--tls-ca"])
            .arg(secrets.join("lode-tls/ca.crt"))
            .arg("--token-file")
            .arg(secrets.join("lode-bootstrap-token/token"))
            .env("LODE_RESOLVE_OVERRIDE", self.pod_names(None))
            .output()
            .expect("run lode")
    }
}

impl Drop for Emulation {
    fn drop(&mut self) {
        for pod in self.pods.values_mut() {
            if let Some(mut child) = pod.process.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The Secrets the manifests mount: `lode-tls` (a CA and one certificate
/// for every member's DNS name and the client Service's, made as
/// `k8s/README.md` says) and `lode-bootstrap-token`.
fn make_secrets(secrets: &Path) {
    let tls = secrets.join("lode-tls");
    std::fs::create_dir_all(&tls).expect("secret directory");
    let lode = |arguments: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_lode"))
            .args(arguments)
            .arg("--dir")
            .arg(&tls)
            .output()
            .expect("run lode tls");
        assert!(output.status.success(), "{output:?}");
    };
    lode(&["tls", "ca"]);
    let hosts = format!("*.lode-peers.{NAMESPACE}.svc,lode.{NAMESPACE}.svc,127.0.0.1");
    lode(&["tls", "issue", "--name", "member", "--hosts", &hosts]);
    for (from, to) in [
        ("ca.pem", "ca.crt"),
        ("member.pem", "tls.crt"),
        ("member-key.pem", "tls.key"),
    ] {
        std::fs::rename(tls.join(from), tls.join(to)).expect("secret key");
    }
    let bootstrap = secrets.join("lode-bootstrap-token");
    std::fs::create_dir_all(&bootstrap).expect("secret directory");
    let output = Command::new(env!("CARGO_BIN_EXE_lode"))
        .args(["auth", "new-token", "--out"])
        .arg(bootstrap.join("token"))
        .output()
        .expect("run lode auth new-token");
    assert!(output.status.success(), "{output:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_scales_restarts_and_replaces_members_without_losing_a_write() {
    let mut emulation = Emulation::new();
    for ordinal in 0..3 {
        emulation.start(ordinal, 0);
    }
    emulation.write("founded", 10).await;
    emulation.wait_for_members("founded", &[1, 2, 3]).await;
    emulation.assert_healthy("founded").await;

    // Scale up: two learners join through the client Service, promoted.
    emulation.start(3, 0);
    emulation.start(4, 1);
    emulation.write("scaling-up", 10).await;
    emulation.wait_for_members("scaled to 5", &[1, 2, 3, 4, 5]).await;
    emulation.assert_healthy("scaled to 5").await;

    // Scale down: refused below one member, then members 5 and 4 removed
    // before their pods go (their volumes stay).
    let refused = emulation.lode(&["cluster", "scale", "--replicas", "0"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--replicas must be at least 1"));
    let scaled = emulation.lode(&["cluster", "scale", "--replicas", "3"]);
    assert!(scaled.status.success(), "{scaled:?}");
    let said = String::from_utf8_lossy(&scaled.stderr);
    assert!(
        said.find("removed member 5") < said.find("removed member 4"),
        "highest first: {said}"
    );
    emulation.wait_for_members("scaled to 3", &[1, 2, 3]).await;
    emulation.stop(4);
    emulation.stop(3);
    emulation.write("scaled-down", 10).await;
    emulation.assert_healthy("scaled to 3").await;

    // A member restarted on its own volume (SIGKILL: a node lost).
    emulation.kill(1);
    emulation.write("member-2-down", 5).await;
    emulation.start(1, 0);
    emulation.wait_for_members("restarted", &[1, 2, 3]).await;
    emulation.assert_healthy("member 2 restarted").await;

    // A member replaced with an empty volume: readmitted as a learner,
    // promoted once it caught up.
    emulation.stop(2);
    std::fs::remove_dir_all(&emulation.pods[&2].volume).expect("wipe the volume");
    emulation.start(2, 0);
    emulation.write("replaced", 10).await;
    wait_until("the replaced member to be readmitted", || async {
        emulation.log_text(2).contains("admitted to the cluster").then_some(())
    })
    .await;
    emulation.wait_for_members("replaced", &[1, 2, 3]).await;
    emulation.assert_healthy("member 3 replaced").await;

    // Scale up onto the volume member 4 was removed with: it deletes that
    // data and joins as a new learner instead of rejoining with it.
    emulation.start(3, 1);
    emulation.write("volume-reused", 10).await;
    emulation.wait_for_members("volume reused", &[1, 2, 3, 4]).await;
    assert!(
        emulation.log_text(3).contains("deleting it and joining again"),
        "member 4 started over: {}",
        emulation.log_text(3)
    );
    emulation.assert_healthy("member 4 back on a reused volume").await;

    // A rolling restart of every member, as a StatefulSet update does
    // (highest ordinal first), each back and caught up before the next.
    for ordinal in [3, 2, 1, 0] {
        emulation.stop(ordinal);
        emulation.write(&format!("rolling-{ordinal}"), 5).await;
        emulation.start(ordinal, if ordinal == 0 { 1 } else { 0 });
        emulation.wait_for_members("rolling", &[1, 2, 3, 4]).await;
        emulation.assert_healthy(&format!("lode-{ordinal} restarted")).await;
    }
    // Shrunk below its founders and grown again: founder 3's volume is
    // from before its removal; it deletes it and joins as a new learner.
    let scaled = emulation.lode(&["cluster", "scale", "--replicas", "2"]);
    assert!(scaled.status.success(), "{scaled:?}");
    emulation.wait_for_members("scaled to 2", &[1, 2]).await;
    emulation.stop(3);
    emulation.stop(2);
    emulation.write("scaled-to-2", 5).await;
    emulation.assert_healthy("scaled to 2").await;
    emulation.start(2, 0);
    emulation.wait_for_members("founder back", &[1, 2, 3]).await;
    assert!(emulation.log_text(2).contains("deleting it and joining again"));
    emulation.assert_healthy("founder 3 back on its old volume").await;

    for ordinal in emulation.running() {
        let errors: Vec<String> = emulation
            .log_text(ordinal)
            .lines()
            .filter(|line| line.contains("\"level\":\"ERROR\""))
            .map(str::to_owned)
            .collect();
        assert!(errors.is_empty(), "lode-{ordinal} logged errors: {errors:?}");
    }
}
