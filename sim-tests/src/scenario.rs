//! Everything about a run that is chosen before it starts, derived from one
//! seed: cluster size, clients, timings, and the schedule of faults for the
//! chosen fault mix.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use lode_raft_store::injected_bugs::InjectedBug;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// A family of faults a run draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultMix {
    /// Full partitions (minority or majority sides), one-way partitions and
    /// an isolated leader, each healed after a while.
    Partitions,
    /// Crashes of a member, of the leader, or of a majority at once, each
    /// followed by a restart from what the member had synced; lagging
    /// members catch up by snapshot. Also a leader whose disk turns slow,
    /// stopped with the followers that hold its newest entries
    /// ([`Fault::SlowLeaderDisk`], [`Fault::CrashSlowLeader`]).
    Crashes,
    /// Message delay, held links and random link failures (loss).
    Network,
    /// Members added and removed under load, with a crash or partition in
    /// between.
    Membership,
    /// A volume that fills (on a follower or the leader: its member stops
    /// and is restarted once space returns), a lost disk and a long crash,
    /// while a bulk writer grows the state to several MiB, so that catching
    /// up means installing a large snapshot.
    Storage,
}

impl FaultMix {
    pub const ALL: [FaultMix; 5] = [
        FaultMix::Partitions,
        FaultMix::Crashes,
        FaultMix::Network,
        FaultMix::Membership,
        FaultMix::Storage,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultMix::Partitions => "partitions",
            FaultMix::Crashes => "crashes",
            FaultMix::Network => "network",
            FaultMix::Membership => "membership",
            FaultMix::Storage => "storage",
        }
    }
}

impl fmt::Display for FaultMix {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

impl FromStr for FaultMix {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        FaultMix::ALL.into_iter().find(|mix| mix.name() == name).ok_or_else(|| {
            format!("unknown fault mix {name:?}; one of partitions, crashes, network, membership, storage")
        })
    }
}

/// One fault action at a point of simulated time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Cuts every link between `side` and the other members, both ways.
    Partition {
        side: Vec<u64>,
    },
    /// Drops messages from `from` to `to` only.
    PartitionOneWay {
        from: u64,
        to: u64,
    },
    /// Cuts the current leader off from every other member (clients still
    /// reach it).
    IsolateLeader,
    /// Restores every link between members.
    HealNetwork,
    /// Stops the members at once; they lose what they had not synced.
    Crash {
        members: Vec<u64>,
    },
    /// Stops the current leader the same way.
    CrashLeader,
    /// The current leader's disk turns slow: each background sync of its
    /// log takes `sync_ms`. The leader is also cut off, both ways, from
    /// the followers that hold least of its log, as many as make a quorum
    /// with it, so only the other followers receive its newest entries.
    SlowLeaderDisk {
        sync_ms: u64,
    },
    /// Stops the leader whose disk turned slow and every follower it still
    /// reached, then starts the leader again at once, its disk fast again
    /// and its links healed. It lost the entries it had not synced; with
    /// the followers it was cut from it is a quorum whose logs lack them,
    /// so any of those entries a client heard of must have been kept
    /// elsewhere (none may have been acknowledged).
    CrashSlowLeader,
    /// Starts every stopped member again from its synced state.
    RestartAll,
    /// Sets the largest one-way message delay.
    MaxLatency {
        milliseconds: u64,
    },
    /// Makes links fail at random (in thousandths per tick), and repair.
    LinkFailures {
        per_mille: u32,
    },
    /// Holds (queues) messages between two members, then releases them.
    Hold {
        a: u64,
        b: u64,
    },
    ReleaseHeld,
    /// Adds the spare member as a learner; the leader promotes it to voter
    /// once it keeps up.
    AddMember {
        id: u64,
    },
    /// Stops a member and loses its disk; it restarts empty with the
    /// next `RestartAll` and must be readmitted as a learner.
    Wipe {
        id: u64,
    },
    /// Removes a member from the voters.
    RemoveMember {
        id: u64,
    },
    /// Fills the member's volume: its writes fail, its Raft stops on the
    /// first one, and it exits (the driver stops it) as `lode node` does.
    DiskFull {
        id: u64,
    },
    /// Fills the current leader's volume the same way.
    DiskFullLeader,
    /// Gives every full volume its space back and restarts the members that
    /// exited, as their supervisor would.
    DiskFreed,
}

/// The parameters of one run.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub mix: FaultMix,
    /// Founding members, 3 or 5.
    pub members: u64,
    /// A member that starts outside the cluster (membership runs only).
    pub spare: Option<u64>,
    pub kv_clients: usize,
    pub lock_clients: usize,
    /// Queue producers and consumers (as many of each).
    pub queue_clients: usize,
    pub keys: usize,
    pub lease_ttl: Duration,
    /// Each member's clock offset (index: id − 1): members' clocks
    /// disagree, as real ones do.
    pub clock_offsets_ms: Vec<i64>,
    /// Applied entries between snapshots: small, so lagging members get
    /// snapshots instead of log.
    pub snapshot_logs_max: u64,
    /// Clients stop starting operations at this simulated time.
    pub workload: Duration,
    pub faults: Vec<(Duration, Fault)>,
    pub bugs: Vec<InjectedBug>,
}

/// The seeds a test runs: `LODE_SIM_SEEDS` of them (default
/// `default_count`) from `LODE_SIM_FIRST_SEED` (default `default_first`).
pub fn seed_window(default_first: u64, default_count: u64) -> std::ops::Range<u64> {
    let variable = |name: &str| std::env::var(name).ok().and_then(|value| value.parse::<u64>().ok());
    let first = variable("LODE_SIM_FIRST_SEED").unwrap_or(default_first);
    first..first + variable("LODE_SIM_SEEDS").unwrap_or(default_count)
}

/// The largest clock offset of a member, either way.
pub const CLOCK_OFFSET_MS_MAX: i64 = 250;

/// A write must succeed within this long after the last fault healed.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(10);

impl Scenario {
    /// The scenario of `seed` under `mix`.
    pub fn new(seed: u64, mix: FaultMix) -> Self {
        let mut random = StdRng::seed_from_u64(seed ^ 0x005e_ed0f_5ce0_a710);
        let members = if random.gen_bool(0.7) { 3 } else { 5 };
        let spare = (mix == FaultMix::Membership).then_some(members + 1);
        let workload = Duration::from_millis(random.gen_range(4_000..7_000));
        let mut scenario = Scenario {
            seed,
            mix,
            members,
            spare,
            kv_clients: random.gen_range(2..=4),
            lock_clients: random.gen_range(2..=3),
            keys: random.gen_range(2..=4),
            lease_ttl: Duration::from_millis(random.gen_range(300..800)),
            clock_offsets_ms: (0..=members)
                .map(|_| random.gen_range(-CLOCK_OFFSET_MS_MAX..=CLOCK_OFFSET_MS_MAX))
                .collect(),
            snapshot_logs_max: random.gen_range(40..200),
            workload,
            faults: Vec::new(),
            bugs: Vec::new(),
            queue_clients: 0,
        };
        scenario.faults = scenario.schedule(&mut random);
        // Drawn last, so the draws above (and the seeds' earlier scenarios)
        // are unchanged.
        scenario.queue_clients = random.gen_range(1..=2);
        scenario
    }

    /// The same scenario with `bug` switched on.
    pub fn with_bug(mut self, bug: InjectedBug) -> Self {
        self.bugs.push(bug);
        self
    }

    /// Every member id, spare included.
    pub fn member_ids(&self) -> Vec<u64> {
        (1..=self.members).chain(self.spare).collect()
    }

    fn schedule(&self, random: &mut StdRng) -> Vec<(Duration, Fault)> {
        let founders: Vec<u64> = (1..=self.members).collect();
        let mut faults = Vec::new();
        let mut at = Duration::from_millis(random.gen_range(500..1_500));
        let mut removed: Option<u64> = None;
        let mut added = false;
        let mut wiped = false;
        while at < self.workload {
            let mut hold_for = Duration::from_millis(random.gen_range(300..3_000));
            let (fault, heal) = match self.mix {
                FaultMix::Partitions => match random.gen_range(0..4) {
                    0 => {
                        let mut shuffled = founders.clone();
                        shuffled.shuffle(random);
                        let size = random.gen_range(1..=founders.len() / 2);
                        let mut side = shuffled[..size].to_vec();
                        side.sort_unstable();
                        (Fault::Partition { side }, Fault::HealNetwork)
                    }
                    1 => {
                        let from = *founders.choose(random).unwrap_or(&1);
                        let others: Vec<u64> = founders.iter().copied().filter(|id| *id != from).collect();
                        let to = *others.choose(random).unwrap_or(&from);
                        (Fault::PartitionOneWay { from, to }, Fault::HealNetwork)
                    }
                    _ => (Fault::IsolateLeader, Fault::HealNetwork),
                },
                FaultMix::Crashes => match random.gen_range(0..5) {
                    0 => (
                        Fault::Crash {
                            members: vec![*founders.choose(random).unwrap_or(&1)],
                        },
                        Fault::RestartAll,
                    ),
                    1 => {
                        let mut shuffled = founders.clone();
                        shuffled.shuffle(random);
                        let mut members = shuffled[..founders.len() / 2 + 1].to_vec();
                        members.sort_unstable();
                        (Fault::Crash { members }, Fault::RestartAll)
                    }
                    2 => {
                        // Long enough for several writes to finish, were
                        // they answered before the leader's sync.
                        let crash_after = Duration::from_millis(random.gen_range(100..300));
                        faults.push((at + crash_after, Fault::CrashSlowLeader));
                        // The others stay down until the restarted leader
                        // (which first waits a second for them to say
                        // whether it was removed) and the followers it was
                        // cut from have had time to elect a leader.
                        hold_for = crash_after + Duration::from_millis(random.gen_range(3_000..4_000));
                        let sync_ms = crash_after.as_millis() as u64 * 2;
                        (Fault::SlowLeaderDisk { sync_ms }, Fault::RestartAll)
                    }
                    _ => (Fault::CrashLeader, Fault::RestartAll),
                },
                FaultMix::Network => match random.gen_range(0..3) {
                    0 => (
                        Fault::MaxLatency {
                            milliseconds: random.gen_range(20..300),
                        },
                        Fault::MaxLatency { milliseconds: 10 },
                    ),
                    1 => (
                        Fault::LinkFailures {
                            per_mille: random.gen_range(1..10),
                        },
                        Fault::LinkFailures { per_mille: 0 },
                    ),
                    _ => {
                        let mut pair = founders.clone();
                        pair.shuffle(random);
                        (Fault::Hold { a: pair[0], b: pair[1] }, Fault::ReleaseHeld)
                    }
                },
                FaultMix::Storage => {
                    let id = *founders.choose(random).unwrap_or(&1);
                    match random.gen_range(0..4) {
                        0 => (Fault::DiskFull { id }, Fault::DiskFreed),
                        1 => (Fault::DiskFullLeader, Fault::DiskFreed),
                        // One lost disk a run, as in the membership mix.
                        2 if !wiped => {
                            wiped = true;
                            (Fault::Wipe { id }, Fault::RestartAll)
                        }
                        _ => (Fault::Crash { members: vec![id] }, Fault::RestartAll),
                    }
                }
                FaultMix::Membership => {
                    let spare = self.spare.unwrap_or(self.members + 1);
                    match (added, removed) {
                        (false, _) => {
                            added = true;
                            (Fault::AddMember { id: spare }, Fault::HealNetwork)
                        }
                        (true, None) => {
                            let id = *founders.choose(random).unwrap_or(&1);
                            removed = Some(id);
                            (Fault::RemoveMember { id }, Fault::HealNetwork)
                        }
                        (true, Some(id)) => {
                            if random.gen_bool(0.5) {
                                // Back in: it catches up by snapshot.
                                removed = None;
                                (Fault::AddMember { id }, Fault::HealNetwork)
                            } else if wiped || random.gen_bool(0.5) {
                                (Fault::CrashLeader, Fault::RestartAll)
                            } else {
                                // A member replaced with an empty disk, once
                                // a run: a second loss before the first
                                // member caught up would be a lost quorum,
                                // which only --force-new-cluster recovers.
                                wiped = true;
                                let others: Vec<u64> = founders.iter().copied().filter(|other| *other != id).collect();
                                let wiped = *others.choose(random).unwrap_or(&1);
                                (Fault::Wipe { id: wiped }, Fault::RestartAll)
                            }
                        }
                    }
                }
            };
            faults.push((at, fault));
            faults.push((at + hold_for, heal));
            at += hold_for + Duration::from_millis(random.gen_range(100..1_000));
        }
        faults
    }
}
