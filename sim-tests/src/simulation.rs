//! One simulated run: a turmoil world with the cluster's members as hosts
//! (the real node code on in-memory engines), the workload's clients, an
//! operator for membership changes and a verifier, driven step by step
//! while the scenario's faults are applied; then the checkers.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use lode_client::facade;
use lode_client::protocol::MemberAddresses;
use lode_client::Client;
use lode_node::cluster_identity::founding_cluster_id;
use lode_node::config::{Membership, NodeConfig, Storage, CLUSTER_NAME_DEFAULT};
use lode_node::node::{Listeners, Node};
use lode_raft_store::injected_bugs;
use lode_raft_store::{MemoryEngine, SelectedEngine, StateReader, TypeConfig};
use lode_types::ChangeEvent;
use openraft::{Raft, ServerState};

use crate::auth_workload::{self, AuthPlan};
use crate::bulk_workload;
use crate::checkers;
use crate::client_host::{ClientHost, CLIENT_HOST};
use crate::environment;
use crate::history::{self, Call, History, Known, Outcome, QueueEvent, SharedHistory};
use crate::queue_workload::{self, QueuePlan};
use crate::scenario::{Fault, FaultMix, Scenario, LIVENESS_BOUND};
use crate::step_trace::StepTrace;
use crate::trace::Fnv;
use crate::workload::{self, KvClientPlan, LockClientPlan, NAMESPACE};

/// The port every member serves clients on, inside its own simulated host.
pub const PORT: u16 = 7000;
/// How long a leader's background sync of its log takes: within the range
/// of a message's latency (1 to 10 ms), so a follower's acknowledgement
/// sometimes comes back before the leader's own copy is on disk, and a
/// crash can fall in between.
const LOG_SYNC_DELAY: Duration = Duration::from_millis(5);
/// The port every member serves its peers on.
pub const PEER_PORT: u16 = 7001;
/// The history's client number of the verifier.
pub const VERIFIER: usize = 1000;
/// The client number of the operator (membership changes).
pub const OPERATOR: usize = 1001;
/// The client numbers of the grantor (the admin changing the tenant's
/// role) and the tenant.
pub const GRANTOR: usize = 1002;
pub const TENANT: usize = 1003;
/// The client number of the bulk writer (storage runs only).
pub const BULK_WRITER: usize = 1004;
/// Lock clients are clients from this number on.
pub const LOCK_CLIENT_FIRST: usize = 100;
/// Watchers are clients `WATCHER_FIRST + member id`.
pub const WATCHER_FIRST: usize = 200;
/// Queue producers and consumers are clients from these numbers on.
pub const QUEUE_PRODUCER_FIRST: usize = 300;
pub const QUEUE_CONSUMER_FIRST: usize = 400;
/// How long after the workload the run may take before it counts as stuck.
pub const SETTLE_TIME_MAX: Duration = Duration::from_secs(60);

/// What a checker found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The checker's name (its file under `checkers/`).
    pub checker: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}: {}", self.checker, self.detail)
    }
}

/// Every violation on lines of its own, as a failing test prints them.
pub fn describe_violations(violations: &[Violation]) -> String {
    violations.iter().map(|violation| format!("{violation}\n")).collect()
}

/// A member's final state, read after the cluster converged.
#[derive(Clone, Debug)]
pub struct ReplicaState {
    pub id: u64,
    pub applied_index: u64,
    pub digest: u64,
    /// The whole change log, oldest first.
    pub changes: Vec<ChangeEvent>,
    /// Whether the change log had been trimmed (then "every write is in
    /// it" cannot be checked).
    pub changes_trimmed: bool,
}

/// Everything one run produced.
#[derive(Debug)]
pub struct RunReport {
    pub seed: u64,
    pub mix: crate::scenario::FaultMix,
    /// A digest of the history, the faults applied and the final replica
    /// states: two runs of one seed must agree on it.
    pub trace_digest: u64,
    pub violations: Vec<Violation>,
    pub history: History,
    pub replicas: Vec<ReplicaState>,
    /// From the last heal to the first successful write.
    pub recovery: Option<Duration>,
    pub faults_applied: Vec<String>,
    pub simulated: Duration,
}

impl RunReport {
    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        format!(
            "LODE_SIM_SEED={} LODE_SIM_MIX={} cargo test -p lode-sim-tests --test seeds replay -- --nocapture",
            self.seed, self.mix
        )
    }
}

/// A running member's handles, for fault decisions and the final checks.
#[derive(Clone)]
struct Running {
    raft: Raft<TypeConfig>,
    reader: StateReader<SelectedEngine>,
}

struct Member {
    id: u64,
    log: MemoryEngine,
    state: MemoryEngine,
    running: Rc<RefCell<Option<Running>>>,
    /// Set when the member's Raft stopped by itself (a storage error): the
    /// process would exit, so the driver stops it.
    exited: Rc<Cell<bool>>,
}

fn host(id: u64) -> String {
    format!("n{id}")
}

fn address(id: u64) -> String {
    format!("n{id}:{PORT}")
}

fn peer_address(id: u64) -> String {
    format!("n{id}:{PEER_PORT}")
}

/// What the verifier found, shared with the driver.
#[derive(Default)]
struct Verification {
    recovery: Option<Duration>,
    replicas: Vec<ReplicaState>,
    problems: Vec<Violation>,
    done: bool,
}

/// Runs `scenario` and checks its history.
pub fn run(scenario: &Scenario) -> RunReport {
    run_traced(scenario, None)
}

/// Runs `scenario`, fingerprinting every step into `steps` when given.
pub fn run_traced(scenario: &Scenario, steps: Option<&mut StepTrace>) -> RunReport {
    environment::install();
    crate::logging::init();
    lode_raft_store::runtime::seed_thread_rng(scenario.seed);
    injected_bugs::disable_all();
    injected_bugs::set_local_clock(facade::now_micros);
    for bug in &scenario.bugs {
        injected_bugs::enable(*bug);
    }
    let report = run_enabled(scenario, steps);
    injected_bugs::disable_all();
    report
}

fn run_enabled(scenario: &Scenario, mut steps: Option<&mut StepTrace>) -> RunReport {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(scenario.workload + SETTLE_TIME_MAX + Duration::from_secs(30))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(10))
        .repair_rate(0.05)
        .tcp_capacity(4096)
        .rng_seed(scenario.seed)
        .build();

    let founders: BTreeMap<u64, String> = (1..=scenario.members).map(|id| (id, peer_address(id))).collect();
    let cluster_id = founding_cluster_id(CLUSTER_NAME_DEFAULT, &founders);
    let members: Vec<Rc<Member>> = scenario
        .member_ids()
        .into_iter()
        .map(|id| {
            Rc::new(Member {
                id,
                log: MemoryEngine::new().with_sync_delay(LOG_SYNC_DELAY),
                state: MemoryEngine::new(),
                running: Rc::new(RefCell::new(None)),
                exited: Rc::new(Cell::new(false)),
            })
        })
        .collect();
    for member in &members {
        let membership = if founders.contains_key(&member.id) {
            Membership::Bootstrap(founders.clone())
        } else {
            Membership::Existing
        };
        let advertise = MemberAddresses {
            peer: peer_address(member.id),
            client: address(member.id),
        };
        let mut config = NodeConfig::new(member.id, advertise, "/simulated", membership);
        config.cluster_id = (!founders.contains_key(&member.id)).then_some(cluster_id);
        config.storage = Storage::Memory {
            log: member.log.clone(),
            state: member.state.clone(),
        };
        config.snapshot_logs_max = scenario.snapshot_logs_max;
        config.bootstrap_token = Some(workload::root_token());
        config.forward_timeout_ms = 2_000;
        config.read_wait_ms_max = 2_000;
        // Promoted within the run, so the runs also see learners become voters.
        config.promote_caught_up_ms = 1_000;
        config.clock_offset_micros = scenario
            .clock_offsets_ms
            .get(member.id as usize - 1)
            .copied()
            .unwrap_or(0)
            * 1000;
        let (running, exited) = (member.running.clone(), member.exited.clone());
        sim.host(host(member.id), move || {
            let config = config.clone();
            let (running, exited) = (running.clone(), exited.clone());
            async move {
                let listeners = Listeners {
                    client: facade::bind(&format!("0.0.0.0:{PORT}")).await?,
                    peer: facade::bind(&format!("0.0.0.0:{PEER_PORT}")).await?,
                };
                let node = match Node::start(config, listeners).await {
                    Ok(node) => node,
                    // As `lode node` would: the process exits, and the
                    // driver stops the host until the next restart (a
                    // member that never starts again fails convergence).
                    Err(error) => {
                        tracing::info!(%error, "the member could not start; it exits");
                        exited.set(true);
                        return std::future::pending::<turmoil::Result>().await;
                    }
                };
                *running.borrow_mut() = Some(Running {
                    raft: node.raft().clone(),
                    reader: node.reader(),
                });
                // The node lives until the host crashes (the runtime drops
                // it), or until its Raft stops by itself, when `lode node`
                // would exit: the driver then stops the host.
                let cause = node.raft_stopped().await;
                tracing::info!(%cause, "raft stopped; the member exits");
                exited.set(true);
                std::future::pending::<turmoil::Result>().await
            }
        });
    }

    let history: SharedHistory = Rc::new(RefCell::new(History::default()));
    let mut clients = ClientHost::default();
    let endpoints: Vec<String> = (1..=scenario.members).chain(scenario.spare).map(address).collect();
    for client in 0..scenario.kv_clients {
        let plan = KvClientPlan {
            client,
            seed: scenario.seed.wrapping_mul(31).wrapping_add(client as u64 + 1),
            keys: scenario.keys,
            until: scenario.workload,
            read_only: false,
        };
        let (endpoints, history) = (endpoints.clone(), history.clone());
        history.borrow_mut().activity.register(client);
        clients.add(format!("c{client}"), async move {
            workload::run_kv_client(plan, endpoints, history.clone()).await;
            history::finished(&history, client);
            Ok(())
        });
    }
    // One watcher per founding member: it only reads, and only from that
    // member, as a configuration watcher colocated with a member does. A
    // member that serves a stale read is caught by its own watcher.
    for id in 1..=scenario.members {
        let client = WATCHER_FIRST + id as usize;
        let plan = KvClientPlan {
            client,
            seed: scenario.seed.wrapping_mul(41).wrapping_add(id),
            keys: scenario.keys,
            until: scenario.workload,
            read_only: true,
        };
        let history = history.clone();
        history.borrow_mut().activity.register(client);
        clients.add(format!("w{id}"), async move {
            workload::run_kv_client(plan, vec![address(id)], history.clone()).await;
            history::finished(&history, client);
            Ok(())
        });
    }
    for index in 0..scenario.lock_clients {
        let client = LOCK_CLIENT_FIRST + index;
        let plan = LockClientPlan {
            client,
            seed: scenario.seed.wrapping_mul(37).wrapping_add(client as u64),
            lease_ttl: scenario.lease_ttl,
            until: scenario.workload,
        };
        let (endpoints, history) = (endpoints.clone(), history.clone());
        history.borrow_mut().activity.register(client);
        clients.add(format!("l{index}"), async move {
            workload::run_lock_client(plan, endpoints, history.clone()).await;
            history::finished(&history, client);
            Ok(())
        });
    }

    for index in 0..scenario.queue_clients {
        for (role, first) in [("p", QUEUE_PRODUCER_FIRST), ("q", QUEUE_CONSUMER_FIRST)] {
            let client = first + index;
            let plan = QueuePlan {
                client,
                seed: scenario.seed.wrapping_mul(43).wrapping_add(client as u64),
                until: scenario.workload,
            };
            let (endpoints, history) = (endpoints.clone(), history.clone());
            history.borrow_mut().activity.register(client);
            clients.add(format!("{role}{index}"), async move {
                let recorded = history.clone();
                match (role, index) {
                    ("p", _) => queue_workload::run_producer(plan, endpoints, history).await,
                    // The second consumer goes through the SDK's listener.
                    (_, 0) => queue_workload::run_consumer(plan, endpoints, history).await,
                    _ => queue_workload::run_listener(plan, endpoints, history).await,
                }
                history::finished(&recorded, client);
                Ok(())
            });
        }
    }

    if scenario.mix == FaultMix::Storage {
        let (endpoints, history) = (endpoints.clone(), history.clone());
        let (seed, until) = (scenario.seed, scenario.workload);
        history.borrow_mut().activity.register(BULK_WRITER);
        clients.add("bulk", async move {
            bulk_workload::run_bulk_writer(BULK_WRITER, seed, until, endpoints, history.clone()).await;
            history::finished(&history, BULK_WRITER);
            Ok(())
        });
    }

    {
        let plan = AuthPlan {
            grantor: GRANTOR,
            tenant: TENANT,
            seed: scenario.seed.wrapping_mul(47),
            until: scenario.workload,
        };
        let ready = Rc::new(Cell::new(false));
        for (name, client) in [("grantor", GRANTOR), ("tenant", TENANT)] {
            let (plan, endpoints, history, ready) = (plan.clone(), endpoints.clone(), history.clone(), ready.clone());
            history.borrow_mut().activity.register(client);
            clients.add(name, async move {
                if client == GRANTOR {
                    auth_workload::run_grantor(plan, endpoints, history.clone(), ready).await;
                } else {
                    auth_workload::run_tenant(plan, endpoints, history.clone(), ready).await;
                }
                history::finished(&history, client);
                Ok(())
            });
        }
    }

    let operator_queue: Rc<RefCell<VecDeque<Fault>>> = Rc::new(RefCell::new(VecDeque::new()));
    {
        let (queue, endpoints, until) = (operator_queue.clone(), endpoints.clone(), scenario.workload);
        history.borrow_mut().activity.register(OPERATOR);
        clients.add("operator", run_operator(queue, endpoints, until, history.clone()));
    }

    let verification = Rc::new(RefCell::new(Verification::default()));
    {
        let context = VerifierContext {
            endpoints: endpoints.clone(),
            history: history.clone(),
            members: members.clone(),
            keys: scenario.keys,
            seed: scenario.seed,
            healed_at: scenario.workload,
            verification: verification.clone(),
        };
        clients.add("verifier", verify(context));
    }
    clients.install(&mut sim);
    let mut host_names: Vec<String> = members.iter().map(|member| host(member.id)).collect();
    host_names.push(CLIENT_HOST.to_owned());

    let mut faults: VecDeque<(Duration, Fault)> = scenario.faults.iter().cloned().collect();
    for heal in [
        Fault::DiskFreed,
        Fault::HealNetwork,
        Fault::ReleaseHeld,
        Fault::LinkFailures { per_mille: 0 },
        Fault::MaxLatency { milliseconds: 10 },
        Fault::RestartAll,
    ] {
        faults.push_back((scenario.workload, heal));
    }
    // A fault's heal may fall after the workload's end; the end heals it.
    faults.make_contiguous().sort_by_key(|(at, _)| *at);
    let mut driver = Driver {
        members: members.clone(),
        crashed: BTreeSet::new(),
        hosts: host_names,
        cut: BTreeSet::new(),
        held: Vec::new(),
        applied: Vec::new(),
        operator: operator_queue,
        slowed: None,
    };
    let mut violations = Vec::new();
    loop {
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(error) => {
                violations.push(Violation {
                    checker: "simulation",
                    detail: format!("the simulation stopped: {error}"),
                });
                break;
            }
        }
        if let Some(steps) = steps.as_deref_mut() {
            steps.record(&sim, &history.borrow());
        }
        driver.stop_exited(&mut sim);
        let now = sim.elapsed();
        while faults.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((at, fault)) = faults.pop_front() {
                driver.apply(&mut sim, at, fault);
            }
        }
        if now > scenario.workload + SETTLE_TIME_MAX {
            violations.push(Violation {
                checker: "liveness",
                detail: format!(
                    "the run had not settled {SETTLE_TIME_MAX:?} after the workload ended; still going at {now:?}:\n{}",
                    history.borrow().activity.describe_unfinished(now)
                ),
            });
            break;
        }
    }
    let simulated = sim.elapsed();
    drop(sim);

    let verification = std::mem::take(&mut *verification.borrow_mut());
    violations.extend(verification.problems);
    let history = history.borrow().clone();
    if verification.done {
        violations.extend(checkers::run_all(
            &history,
            &verification.replicas,
            verification.recovery,
        ));
    }
    let mut digest = Fnv::new();
    digest.write_debug(&history.operations);
    digest.write_debug(&history.grants);
    digest.write_debug(&history.fenced_writes);
    digest.write_debug(&history.queue);
    digest.write_debug(&history.role_changes);
    digest.write_debug(&history.tenant_writes);
    digest.write_debug(&history.bulk_writes);
    digest.write_debug(&driver.applied);
    for replica in &verification.replicas {
        digest.write_debug(&(replica.id, replica.applied_index, replica.digest));
    }
    RunReport {
        seed: scenario.seed,
        mix: scenario.mix,
        trace_digest: digest.finish(),
        violations,
        history,
        replicas: verification.replicas,
        recovery: verification.recovery,
        faults_applied: driver.applied,
        simulated,
    }
}

/// Applies faults to the world from outside the hosts.
struct Driver {
    members: Vec<Rc<Member>>,
    crashed: BTreeSet<u64>,
    /// Every host of the world, members and clients.
    hosts: Vec<String>,
    /// Links cut by partition faults, as directed (from, to) member pairs.
    cut: BTreeSet<(u64, u64)>,
    held: Vec<(u64, u64)>,
    applied: Vec<String>,
    operator: Rc<RefCell<VecDeque<Fault>>>,
    /// The leader whose disk turned slow, and the followers it was cut
    /// from, until [`Fault::CrashSlowLeader`].
    slowed: Option<(u64, Vec<u64>)>,
}

impl Driver {
    /// Applies every cut link (directed member pairs) to the world.
    fn restore_partitions(&self, sim: &mut turmoil::Sim<'_>) {
        for (from, to) in &self.cut {
            sim.partition_oneway(host(*from), host(*to));
        }
    }

    fn ids(&self) -> Vec<u64> {
        self.members.iter().map(|member| member.id).collect()
    }

    /// The member that leads in the highest term among running members.
    fn leader(&self) -> Option<u64> {
        self.members
            .iter()
            .filter_map(|member| {
                let running = member.running.borrow();
                let metrics = running.as_ref()?.raft.metrics().borrow().clone();
                (metrics.state == ServerState::Leader).then_some((metrics.current_term, member.id))
            })
            .max()
            .map(|(_, id)| id)
    }

    /// Stops a member the way a power cut does: the member sends nothing
    /// more, not even the resets its closing sockets would send (peers
    /// notice by timeouts), and loses what it had not synced.
    ///
    /// Cutting the member's links around the crash also keeps the run a
    /// function of its seed: the runtime drops its tasks in an order that
    /// depends on process-wide task ids, and each segment those drops would
    /// send draws a latency from the world's generator.
    fn crash(&mut self, sim: &mut turmoil::Sim<'_>, id: u64) {
        if !self.crashed.insert(id) {
            return;
        }
        let crashing = host(id);
        for other in self.hosts.iter().filter(|other| **other != crashing) {
            sim.partition(crashing.as_str(), other.as_str());
        }
        sim.crash(crashing.as_str());
        for other in self.hosts.iter().filter(|other| **other != crashing) {
            sim.repair(crashing.as_str(), other.as_str());
        }
        self.restore_partitions(sim);
        if let Some(member) = self.member(id) {
            member.exited.set(false);
            *member.running.borrow_mut() = None;
            member.log.crash();
            member.state.crash();
        }
    }

    /// Stops every member whose Raft stopped by itself, as its process
    /// would have exited; it stays down until the next restart.
    fn stop_exited(&mut self, sim: &mut turmoil::Sim<'_>) {
        let exited: Vec<u64> = self
            .members
            .iter()
            .filter(|member| member.exited.get())
            .map(|member| member.id)
            .collect();
        for id in exited {
            self.crash(sim, id);
            self.applied
                .push(format!("{:>6} ms member {id} exited", sim.elapsed().as_millis()));
        }
    }

    /// Whether the voters other than `id` are a quorum of the newest
    /// membership a running member holds. The membership mix removes a
    /// founder after adding a spare; when the spare is still a learner
    /// then, two voters remain, and losing one's disk would be a lost
    /// quorum, which only `--force-new-cluster` recovers.
    fn wipe_keeps_quorum(&self, id: u64) -> bool {
        let newest = self
            .members
            .iter()
            .filter_map(|member| {
                let running = member.running.borrow();
                let metrics = running.as_ref()?.raft.metrics().borrow().clone();
                let membership = metrics.membership_config;
                Some((
                    *membership.log_id(),
                    membership.membership().voter_ids().collect::<BTreeSet<u64>>(),
                ))
            })
            .max();
        let Some((_, voters)) = newest else {
            return false;
        };
        let intact = voters.iter().filter(|voter| **voter != id).count();
        intact > voters.len() / 2
    }

    /// The voters other than `leader` that hold least of its log, as many
    /// as make a quorum with it: least matched first, then lowest id.
    fn laggiest_followers(&self, leader: u64) -> Vec<u64> {
        let Some(member) = self.member(leader) else {
            return Vec::new();
        };
        let running = member.running.borrow();
        let Some(running) = running.as_ref() else {
            return Vec::new();
        };
        let metrics = running.raft.metrics().borrow().clone();
        let voters: Vec<u64> = metrics.membership_config.membership().voter_ids().collect();
        let matched = |id: u64| {
            let replication = metrics.replication.as_ref();
            replication.and_then(|replication| replication.get(&id).copied().flatten().map(|log_id| log_id.index))
        };
        let mut followers: Vec<(Option<u64>, u64)> = voters
            .iter()
            .filter(|id| **id != leader)
            .map(|id| (matched(*id), *id))
            .collect();
        followers.sort_unstable();
        followers
            .into_iter()
            .take(voters.len().saturating_sub(1) / 2)
            .map(|(_, id)| id)
            .collect()
    }

    fn member(&self, id: u64) -> Option<&Rc<Member>> {
        self.members.iter().find(|member| member.id == id)
    }

    fn fill_volume(&self, id: u64) {
        if let Some(member) = self.member(id) {
            member.log.set_full(true);
            member.state.set_full(true);
        }
    }

    fn apply(&mut self, sim: &mut turmoil::Sim<'_>, at: Duration, fault: Fault) {
        let ids = self.ids();
        let mut description = format!("{:>6} ms {fault:?}", at.as_millis());
        match fault {
            Fault::Partition { side } => {
                for a in &side {
                    for b in ids.iter().filter(|id| !side.contains(id)) {
                        self.cut.insert((*a, *b));
                        self.cut.insert((*b, *a));
                    }
                }
                self.restore_partitions(sim);
            }
            Fault::PartitionOneWay { from, to } => {
                self.cut.insert((from, to));
                self.restore_partitions(sim);
            }
            Fault::IsolateLeader => {
                if let Some(leader) = self.leader() {
                    for other in ids.iter().filter(|id| **id != leader) {
                        self.cut.insert((leader, *other));
                        self.cut.insert((*other, leader));
                    }
                    self.restore_partitions(sim);
                }
            }
            Fault::HealNetwork => {
                for (a, b) in std::mem::take(&mut self.cut) {
                    sim.repair_oneway(host(a), host(b));
                }
            }
            Fault::Crash { members } => {
                for id in members {
                    self.crash(sim, id);
                }
            }
            Fault::Wipe { id } => {
                self.crash(sim, id);
                if self.wipe_keeps_quorum(id) {
                    if let Some(member) = self.member(id) {
                        member.log.wipe();
                        member.state.wipe();
                    }
                } else {
                    description.push_str(" (a crash only: the other voters are no quorum)");
                }
            }
            Fault::CrashLeader => {
                if let Some(leader) = self.leader() {
                    self.crash(sim, leader);
                }
            }
            Fault::SlowLeaderDisk { sync_ms } => {
                if let Some(leader) = self.leader() {
                    let cut = self.laggiest_followers(leader);
                    for follower in &cut {
                        self.cut.insert((leader, *follower));
                        self.cut.insert((*follower, leader));
                    }
                    self.restore_partitions(sim);
                    if let Some(member) = self.member(leader) {
                        member.log.set_sync_delay(Duration::from_millis(sync_ms));
                    }
                    description.push_str(&format!(" (member {leader}, cut from {cut:?})"));
                    self.slowed = Some((leader, cut));
                }
            }
            Fault::CrashSlowLeader => {
                if let Some((leader, cut)) = self.slowed.take() {
                    let reached: Vec<u64> = ids.iter().copied().filter(|id| !cut.contains(id)).collect();
                    for id in &reached {
                        self.crash(sim, *id);
                    }
                    for follower in &cut {
                        for (from, to) in [(leader, *follower), (*follower, leader)] {
                            self.cut.remove(&(from, to));
                            sim.repair_oneway(host(from), host(to));
                        }
                    }
                    if let Some(member) = self.member(leader) {
                        member.log.set_sync_delay(LOG_SYNC_DELAY);
                    }
                    self.crashed.remove(&leader);
                    sim.bounce(host(leader));
                    description.push_str(&format!(" (stopped {reached:?}, member {leader} started again)"));
                }
            }
            Fault::RestartAll => {
                for id in std::mem::take(&mut self.crashed) {
                    sim.bounce(host(id));
                }
            }
            Fault::MaxLatency { milliseconds } => sim.set_max_message_latency(Duration::from_millis(milliseconds)),
            Fault::LinkFailures { per_mille } => sim.set_fail_rate(f64::from(per_mille) / 1000.0),
            Fault::Hold { a, b } => {
                sim.hold(host(a), host(b));
                self.held.push((a, b));
            }
            Fault::ReleaseHeld => {
                for (a, b) in std::mem::take(&mut self.held) {
                    sim.release(host(a), host(b));
                }
            }
            Fault::AddMember { .. } | Fault::RemoveMember { .. } => self.operator.borrow_mut().push_back(fault),
            Fault::DiskFull { id } => self.fill_volume(id),
            Fault::DiskFullLeader => {
                if let Some(leader) = self.leader() {
                    self.fill_volume(leader);
                }
            }
            Fault::DiskFreed => {
                for member in &self.members {
                    member.log.set_full(false);
                    member.state.set_full(false);
                }
                for id in std::mem::take(&mut self.crashed) {
                    sim.bounce(host(id));
                }
            }
        }
        self.applied.push(description);
    }
}

/// Carries out membership changes the driver queues, through the SDK.
async fn run_operator(
    queue: Rc<RefCell<VecDeque<Fault>>>,
    endpoints: Vec<String>,
    until: Duration,
    history: SharedHistory,
) -> turmoil::Result {
    let client = Client::with_options(endpoints, workload::client_options())?;
    loop {
        let next = queue.borrow_mut().pop_front();
        // A failed change is retried by no one: the run goes on with the
        // membership it has, which is a fault too.
        let changed = match next {
            Some(Fault::AddMember { id }) => {
                history::calling(&history, OPERATOR, format!("add member {id}"));
                client.add_member(id, peer_address(id)).await
            }
            Some(Fault::RemoveMember { id }) => {
                history::calling(&history, OPERATOR, format!("remove member {id}"));
                client.remove_member(id).await
            }
            Some(_) => continue,
            None if crate::now() > until => {
                history::finished(&history, OPERATOR);
                return Ok(());
            }
            None => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        match changed {
            Ok(status) => history::answered(&history, OPERATOR, format!("members {:?}", status.members.len())),
            Err(error) => {
                tracing::info!(%error, "a membership change failed");
                history::answered(&history, OPERATOR, format!("failed: {error}"));
            }
        }
    }
}

struct VerifierContext {
    endpoints: Vec<String>,
    history: SharedHistory,
    members: Vec<Rc<Member>>,
    keys: usize,
    seed: u64,
    healed_at: Duration,
    verification: Rc<RefCell<Verification>>,
}

impl VerifierContext {
    fn problem(&self, checker: &'static str, detail: String) {
        self.verification
            .borrow_mut()
            .problems
            .push(Violation { checker, detail });
    }
}

/// After the faults heal: liveness (a write succeeds within the bound),
/// convergence (every voter applies the same log), the replicas' final
/// state, and a last linearizable read of every key.
async fn verify(context: VerifierContext) -> turmoil::Result {
    let verified = verify_steps(&context).await;
    history::finished(&context.history, VERIFIER);
    verified
}

async fn verify_steps(context: &VerifierContext) -> turmoil::Result {
    let client = Client::with_options(context.endpoints.clone(), workload::client_options())?;
    let kv = client.kv(NAMESPACE);
    while crate::now() < context.healed_at {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let healed = crate::now();
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        let value = format!("liveness.{attempt}");
        let slot = history::invoke(
            &context.history,
            VERIFIER,
            Call::Set {
                key: "liveness".to_owned(),
                value: value.clone(),
            },
        );
        let result = kv.set("liveness").bytes(&value).send().await;
        if let Err(error) = &result {
            tracing::info!(%error, attempt, "a liveness write failed");
        }
        let written = result.is_ok();
        history::complete(
            &context.history,
            slot,
            match result {
                Ok(version) => Outcome::Written { version },
                Err(_) => Outcome::Unknown,
            },
        );
        if written {
            context.verification.borrow_mut().recovery = Some(crate::now() - healed);
            break;
        }
        if crate::now() - healed > LIVENESS_BOUND * 3 {
            context.problem(
                "liveness",
                format!("no write succeeded within {:?} of the heal", LIVENESS_BOUND * 3),
            );
            return Ok(());
        }
    }
    loop {
        let unfinished = context.history.borrow().activity.unfinished_clients();
        if unfinished.is_empty() {
            break;
        }
        let names: Vec<String> = unfinished.into_iter().map(crate::activity::actor_name).collect();
        let waiting = format!("waiting for {} to finish", names.join(", "));
        if context.history.borrow().activity.last_call(VERIFIER) != Some(waiting.as_str()) {
            history::calling(&context.history, VERIFIER, waiting);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let Some(voters) = converge(context).await else {
        return Ok(());
    };
    let mut replicas = Vec::new();
    for member in context.members.iter().filter(|member| voters.contains(&member.id)) {
        let Some(running) = member.running.borrow().clone() else {
            continue;
        };
        match replica_state(member.id, &running.reader) {
            Ok(replica) => replicas.push(replica),
            Err(error) => context.problem("convergence", format!("reading member {}: {error}", member.id)),
        }
    }
    context.verification.borrow_mut().replicas = replicas;
    let final_keys = (0..context.keys)
        .map(|index| format!("k{index}"))
        .chain(["liveness".to_owned()]);
    for key in final_keys {
        let slot = history::invoke(&context.history, VERIFIER, Call::Get { key: key.clone() });
        let outcome = match kv.get_entry(&key).await {
            Ok(entry) => {
                Outcome::Read(entry.map(|entry| (String::from_utf8_lossy(&entry.value).into_owned(), entry.version)))
            }
            Err(error) => {
                context.problem("liveness", format!("the final read of {key:?} failed: {error}"));
                Outcome::Failed
            }
        };
        history::complete(&context.history, slot, outcome);
    }
    let bulk_writes = context.history.borrow().bulk_writes.clone();
    history::calling(&context.history, VERIFIER, "reading the bulk values back");
    match bulk_workload::check_bulk_values(&client, context.seed, &bulk_writes).await {
        Ok(problems) => {
            for problem in problems {
                context.problem("acknowledged_writes", problem);
            }
        }
        Err(problem) => {
            context.problem("liveness", problem);
            return Ok(());
        }
    }
    history::calling(&context.history, VERIFIER, "reading the final queue state");
    if let Err(problem) = final_queue_state(&client, &context.history).await {
        context.problem("liveness", problem);
        return Ok(());
    }
    context.verification.borrow_mut().done = true;
    Ok(())
}

/// Records, for every message that may have been enqueued, whether its
/// undelivered key holds it, and claims whatever is still in the queue.
async fn final_queue_state(client: &Client, history: &SharedHistory) -> Result<(), String> {
    let payloads: Vec<String> = history
        .borrow()
        .queue
        .iter()
        .filter_map(|event| match event {
            QueueEvent::Enqueued { payload, known } if *known != Known::Refused => Some(payload.clone()),
            _ => None,
        })
        .collect();
    let dead_letters = client.kv(lode_types::DENO_NAMESPACE);
    for payload in payloads {
        let key = queue_workload::undelivered_key(&payload);
        let stored = dead_letters
            .get(&key)
            .await
            .map_err(|error| format!("the final read of {key:?} failed: {error}"))?;
        let written = stored.is_some_and(|value| value == payload.as_bytes());
        let _ = history::record_queue(history, QueueEvent::DeadLetter { payload, written });
    }
    let queue = client.queue();
    for _ in 0..LEFTOVERS_READ_MAX {
        match queue.claim().await {
            Ok(Some(delivery)) => {
                let payload = String::from_utf8_lossy(&delivery.payload).into_owned();
                let _ = history::record_queue(history, QueueEvent::Leftover { payload });
            }
            Ok(None) => return Ok(()),
            Err(error) => return Err(format!("the final claim failed: {error}")),
        }
    }
    Ok(())
}

/// Messages the verifier claims at most when looking for leftovers.
const LEFTOVERS_READ_MAX: usize = 100;

/// Waits until every voter runs and has applied the same index, twice in a
/// row; returns the voters.
async fn converge(context: &VerifierContext) -> Option<BTreeSet<u64>> {
    let started = crate::now();
    let mut previous: Option<(BTreeSet<u64>, u64)> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (current, seen) = convergence_sample(&context.members);
        history::calling(&context.history, VERIFIER, format!("converging: {seen}"));
        if current.is_some() && current == previous {
            return current.map(|(voters, _)| voters);
        }
        previous = current;
        if crate::now() - started > SETTLE_TIME_MAX / 2 {
            context.problem(
                "convergence",
                format!(
                    "the voters did not apply the same log within {:?}; last seen: {seen}",
                    SETTLE_TIME_MAX / 2
                ),
            );
            return None;
        }
    }
}

/// The voters and the index they all applied, when every voter runs and
/// has applied the leader's last log entry; and what was seen, in words.
fn convergence_sample(members: &[Rc<Member>]) -> (Option<(BTreeSet<u64>, u64)>, String) {
    let leader_metrics = members.iter().find_map(|member| {
        let running = member.running.borrow();
        let metrics = running.as_ref()?.raft.metrics().borrow().clone();
        (metrics.state == ServerState::Leader).then_some((member.id, metrics))
    });
    let Some((leader, metrics)) = leader_metrics else {
        return (None, "no leader".to_owned());
    };
    let voters: BTreeSet<u64> = metrics.membership_config.membership().voter_ids().collect();
    let applied: Vec<(u64, Option<u64>)> = voters
        .iter()
        .map(|id| {
            let member = members.iter().find(|member| member.id == *id);
            let index = member.and_then(|member| Some(member.running.borrow().as_ref()?.reader.applied_index()));
            (*id, index)
        })
        .collect();
    let last_log = metrics.last_log_index.unwrap_or(0);
    let described: Vec<String> = applied
        .iter()
        .map(|(id, index)| match index {
            Some(index) => format!("n{id} {index}"),
            None => format!("n{id} down"),
        })
        .collect();
    let seen = format!(
        "leader n{leader}, last log {last_log}, applied: {}",
        described.join(", ")
    );
    let indexes: BTreeSet<Option<u64>> = applied.into_iter().map(|(_, index)| index).collect();
    let current = match indexes.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(index)] if *index == last_log => Some((voters, *index)),
        _ => None,
    };
    (current, seen)
}

fn replica_state(id: u64, reader: &StateReader<SelectedEngine>) -> Result<ReplicaState, String> {
    let applied_index = reader.applied_index();
    let digest = reader.state_digest().map_err(|error| error.to_string())?;
    let mut changes = Vec::new();
    let mut after = (0, 0);
    let mut changes_trimmed = false;
    loop {
        match reader.changes(after, 1000, "").map_err(|error| error.to_string())? {
            Ok(page) => {
                let done = page.resume_after == after;
                after = page.resume_after;
                changes.extend(page.events);
                if done {
                    break;
                }
            }
            Err(_) => {
                changes_trimmed = true;
                break;
            }
        }
    }
    Ok(ReplicaState {
        id,
        applied_index,
        digest,
        changes,
        changes_trimmed,
    })
}
