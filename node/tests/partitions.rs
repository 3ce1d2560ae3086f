//! Network partitions between real `lode node` processes: each member runs
//! in a network namespace of its own, wired by a veth pair to a bridge in
//! the test's namespace (the tests run as root), and faults are nftables
//! rules inside the members' namespaces: an isolated leader, a
//! minority/majority split, a member bridging two sides that cannot see
//! each other, a flapping link, one-way loss and a lossy link (`numgen`
//! drops; `tc netem` is not in this kernel). A recorded get/set/CAS and
//! lease workload runs throughout, and the simulation's checkers judge the
//! history. Namespaces, links and processes go when the test ends, failed
//! or not.

mod support;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lode_sim_tests::history::{History, SharedHistory};
use lode_sim_tests::workload::{self, KvClientPlan, LockClientPlan};
use support::{run_checked, verdict, Member, TestCluster};

const CLIENT_PORT: u16 = 7100;
const PEER_PORT: u16 = 7200;
const KEYS: usize = 3;

/// The members' namespaces, their links and the bridge between them.
struct Network {
    prefix: String,
    subnet: String,
    count: u64,
}

fn ip(arguments: &[&str]) {
    run_checked(
        &format!("ip {}", arguments.join(" ")),
        Command::new("ip").args(arguments),
    );
}

impl Network {
    /// Namespaces `<prefix>-<id>` at `10.213.<n>.<id>`, and the bridge at
    /// `.254`, which is how the test's clients reach the members.
    fn create(count: u64) -> Self {
        static CREATED: AtomicU32 = AtomicU32::new(0);
        let serial = CREATED.fetch_add(1, Ordering::SeqCst);
        let tag = (std::process::id() + serial * 7919) % 10_000;
        let network = Network {
            prefix: format!("lp{tag}"),
            subnet: format!("10.213.{}", (std::process::id() + serial * 37) % 250),
            count,
        };
        let bridge = network.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&["addr", "add", &format!("{}.254/24", network.subnet), "dev", &bridge]);
        ip(&["link", "set", &bridge, "up"]);
        for id in 1..=count {
            let namespace = network.namespace(id);
            let host_side = format!("{}-h{id}", network.prefix);
            let member_side = format!("{}-m{id}", network.prefix);
            ip(&["netns", "add", &namespace]);
            ip(&["link", "add", &host_side, "type", "veth", "peer", "name", &member_side]);
            ip(&["link", "set", &member_side, "netns", &namespace]);
            ip(&["link", "set", &host_side, "master", &bridge]);
            ip(&["link", "set", &host_side, "up"]);
            let address = format!("{}/24", network.address(id));
            ip(&["-n", &namespace, "addr", "add", &address, "dev", &member_side]);
            ip(&["-n", &namespace, "link", "set", &member_side, "up"]);
            ip(&["-n", &namespace, "link", "set", "lo", "up"]);
            network.nft(id, &["add", "table", "inet", "faults"]);
            for (chain, hook) in [("in", "input"), ("out", "output")] {
                let spec = format!("{{ type filter hook {hook} priority 0; policy accept; }}");
                network.nft(id, &["add", "chain", "inet", "faults", chain, &spec]);
            }
        }
        network
    }

    fn bridge(&self) -> String {
        format!("{}-br", self.prefix)
    }

    fn namespace(&self, id: u64) -> String {
        format!("{}-{id}", self.prefix)
    }

    fn address(&self, id: u64) -> String {
        format!("{}.{id}", self.subnet)
    }

    fn nft(&self, id: u64, arguments: &[&str]) {
        run_checked(
            &format!("nft {} in member {id}'s namespace", arguments.join(" ")),
            Command::new("ip")
                .args(["netns", "exec", &self.namespace(id), "nft"])
                .args(arguments),
        );
    }

    /// Drops what `from` sends to `to`, at `to`, with `percent` chance.
    fn drop_from(&self, from: u64, to: u64, percent: u32) {
        let source = self.address(from);
        let rule = if percent >= 100 {
            format!("ip saddr {source} drop")
        } else {
            format!("ip saddr {source} numgen random mod 100 < {percent} drop")
        };
        let mut arguments = vec!["add", "rule", "inet", "faults", "in"];
        arguments.extend(rule.split(' '));
        self.nft(to, &arguments);
    }

    /// Nothing passes between `a` and `b`, either way.
    fn cut(&self, a: u64, b: u64) {
        self.drop_from(a, b, 100);
        self.drop_from(b, a, 100);
    }

    /// Members in different groups cannot reach each other; a member in no
    /// group reaches everyone.
    fn partition(&self, groups: &[&[u64]]) {
        for (index, group) in groups.iter().enumerate() {
            for other in &groups[index + 1..] {
                for a in group.iter() {
                    for b in other.iter() {
                        self.cut(*a, *b);
                    }
                }
            }
        }
    }

    fn heal(&self) {
        for id in 1..=self.count {
            for chain in ["in", "out"] {
                self.nft(id, &["flush", "chain", "inet", "faults", chain]);
            }
        }
    }

    /// Starts the members in their namespaces as a cluster of `count`
    /// founders.
    fn start_cluster(&self) -> TestCluster {
        let directory = tempfile::tempdir().expect("temporary directory");
        let peers: Vec<String> = (1..=self.count)
            .map(|id| format!("{id}={}:{PEER_PORT}", self.address(id)))
            .collect();
        let mut members = BTreeMap::new();
        for id in 1..=self.count {
            let member = Member {
                id,
                address: format!("{}:{CLIENT_PORT}", self.address(id)),
                peer_address: format!("{}:{PEER_PORT}", self.address(id)),
                http: None,
                data_dir: directory.path().join(format!("node-{id}")),
                log_path: directory.path().join(format!("node-{id}.log")),
                process: None,
            };
            let log = std::fs::File::create(&member.log_path).expect("member log");
            // `ip netns exec` execs the member, so the child is the member.
            let process = Command::new("ip")
                .args(["netns", "exec", &self.namespace(id)])
                .arg(env!("CARGO_BIN_EXE_lode"))
                .args(["node", "--id", &id.to_string(), "--insecure"])
                .args(["--listen", &member.address, "--peer-listen", &member.peer_address])
                .arg("--data-dir")
                .arg(&member.data_dir)
                .args(["--peers", &peers.join(","), "--snapshot-logs-max", "200"])
                .env("LODE_LOG", "info,openraft=warn,openraft::replication=off")
                .env("NO_COLOR", "1")
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .expect("spawn a member in its namespace");
            members.insert(
                id,
                Member {
                    process: Some(process),
                    ..member
                },
            );
        }
        TestCluster {
            directory,
            members,
            snapshot_logs_max: 200,
            founding_flags: Vec::new(),
            common_flags: Vec::new(),
            tls_dir: None,
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for id in 1..=self.count {
            let _ = Command::new("ip").args(["netns", "del", &self.namespace(id)]).status();
        }
        let _ = Command::new("ip").args(["link", "del", &self.bridge()]).status();
    }
}

/// One fault, held for a while (or, flapping, applied and healed every
/// `FLAP` while held), then healed.
struct Fault {
    name: String,
    apply: Box<dyn Fn(&Network)>,
    flapping: bool,
    /// When not empty: these members must elect one of themselves while
    /// the fault holds (proof that the fault took effect).
    elects_among: Vec<u64>,
}

const FLAP: Duration = Duration::from_millis(300);

fn fault(name: impl Into<String>, apply: impl Fn(&Network) + 'static) -> Fault {
    Fault {
        name: name.into(),
        apply: Box::new(apply),
        flapping: false,
        elects_among: Vec::new(),
    }
}

/// A fault after which `group` must elect one of its own.
fn electing(group: Vec<u64>, step: Fault) -> Fault {
    Fault {
        elects_among: group,
        ..step
    }
}

/// Waits until a member of `group` names a leader in `group`.
async fn wait_for_leader_among(cluster: &TestCluster, group: &[u64], within: Duration) -> u64 {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        for id in group {
            if let Ok(status) = cluster.client_of(*id).node_status().await {
                if let Some(leader) = status.leader.filter(|leader| group.contains(leader)) {
                    return leader;
                }
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{group:?} elected none of their own within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn flapping(name: impl Into<String>, apply: impl Fn(&Network) + 'static) -> Fault {
    Fault {
        flapping: true,
        ..fault(name, apply)
    }
}

/// Holds `step` for `hold` (longer, if its election takes longer), then
/// heals.
async fn hold_fault(network: &Network, cluster: &TestCluster, step: &Fault, hold: Duration) {
    if !step.flapping {
        let until = tokio::time::Instant::now() + hold;
        (step.apply)(network);
        if !step.elects_among.is_empty() {
            let leader = wait_for_leader_among(cluster, &step.elects_among, Duration::from_secs(15)).await;
            eprintln!("  {leader} leads {:?}", step.elects_among);
        }
        tokio::time::sleep_until(until).await;
    } else {
        let until = tokio::time::Instant::now() + hold;
        while tokio::time::Instant::now() < until {
            (step.apply)(network);
            tokio::time::sleep(FLAP).await;
            network.heal();
            tokio::time::sleep(FLAP).await;
        }
    }
    network.heal();
}

/// A fault, planned when its turn comes from the leader of the moment and
/// the other members.
type PlannedFault = fn(u64, &[u64]) -> Fault;

/// The workload while `faults` take turns (each held `hold`, then healed
/// for as long), then the final reads and the checkers' verdicts.
async fn judge_under_faults(count: u64, faults: &[PlannedFault], hold: Duration) {
    let network = Network::create(count);
    let cluster = network.start_cluster();
    cluster.wait_for_leader().await;
    let workload_time = (hold * 2) * faults.len() as u32 + Duration::from_secs(1);
    let history: SharedHistory = Rc::new(RefCell::new(History::default()));
    let local = tokio::task::LocalSet::new();
    let mut clients = Vec::new();
    for client in 0..3 {
        let plan = KvClientPlan {
            client,
            seed: 0x9a27 + client as u64,
            keys: KEYS,
            until: workload_time,
            read_only: false,
        };
        clients.push(local.spawn_local(workload::run_kv_client(plan, cluster.endpoints(), history.clone())));
    }
    for client in 3..5 {
        let plan = LockClientPlan {
            client,
            seed: 0x10c + client as u64,
            lease_ttl: Duration::from_millis(1_500),
            until: workload_time,
        };
        clients.push(local.spawn_local(workload::run_lock_client(plan, cluster.endpoints(), history.clone())));
    }
    local
        .run_until(async {
            let started = Instant::now();
            for plan in faults {
                let leader = cluster.wait_for_leader().await;
                let others: Vec<u64> = (1..=count).filter(|id| *id != leader).collect();
                let step = plan(leader, &others);
                eprintln!("{:?}: {}", started.elapsed(), step.name);
                hold_fault(&network, &cluster, &step, hold).await;
                tokio::time::sleep(hold).await;
            }
            for client in clients {
                client.await.expect("client task");
            }
        })
        .await;
    check_history(&cluster, &history).await;
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError", "Timeout", "timeout"]);
}

/// Every checker over the history, and enough of it to judge.
async fn check_history(cluster: &TestCluster, history: &SharedHistory) {
    let history = verdict::judge(cluster, history, KEYS).await;
    let acknowledged = verdict::acknowledged(&history);
    eprintln!(
        "{} operations, {acknowledged} acknowledged writes, {} lease grants",
        history.operations.len(),
        history.grants.len()
    );
    assert!(
        acknowledged >= 30,
        "too few writes were acknowledged to judge: {acknowledged}"
    );
    assert!(
        history.grants.len() >= 2,
        "too few leases were granted to judge fencing"
    );
}

/// The leader cut off from every other member, who elect one of their own.
fn isolate_leader(leader: u64, others: &[u64]) -> Fault {
    let group = others.to_vec();
    let name = format!("isolate the leader {leader} from {group:?}");
    electing(
        others.to_vec(),
        fault(name, move |network| network.partition(&[&[leader], &group])),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn three_members_partitioned_in_network_namespaces_keep_the_history_linearizable() {
    let faults: [PlannedFault; 4] = [
        isolate_leader,
        |leader, others| {
            let (cut, kept) = (others[0], others[1]);
            fault(format!("cut follower {cut} off"), move |network| {
                network.partition(&[&[cut], &[leader, kept]]);
            })
        },
        |leader, others| {
            let group = others.to_vec();
            let name = format!("drop what the leader {leader} sends to {group:?} (one way)");
            electing(
                others.to_vec(),
                fault(name, move |network| {
                    for follower in &group {
                        network.drop_from(leader, *follower, 100);
                    }
                }),
            )
        },
        |_, _| {
            fault("lose 30% of packets between every pair", |network| {
                for (a, b) in [(1, 2), (1, 3), (2, 3)] {
                    network.drop_from(a, b, 30);
                    network.drop_from(b, a, 30);
                }
            })
        },
    ];
    judge_under_faults(3, &faults, Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn five_members_under_splits_bridges_and_flapping_links_keep_the_history_linearizable() {
    let faults: [PlannedFault; 4] = [
        |leader, others| {
            let (with_leader, majority) = (others[0], others[1..].to_vec());
            let name = format!("a minority {{{leader}, {with_leader}}} with the leader, the majority {majority:?}");
            electing(
                majority.clone(),
                fault(name, move |network| {
                    network.partition(&[&[leader, with_leader], &majority])
                }),
            )
        },
        |leader, others| {
            let (left, right) = ([others[0], others[1]], [others[2], others[3]]);
            let name = format!("the leader {leader} bridges {left:?} and {right:?}, which cannot see each other");
            fault(name, move |network| network.partition(&[&left, &right]))
        },
        |leader, others| {
            let group = others.to_vec();
            let name = format!("the leader {leader}'s links flap every 300 ms");
            flapping(name, move |network| network.partition(&[&[leader], &group]))
        },
        isolate_leader,
    ];
    judge_under_faults(5, &faults, Duration::from_secs(3)).await;
}
