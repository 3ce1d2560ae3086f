//! Scenarios that once failed, written out fault by fault so that they keep
//! their shape when the seed-to-scenario mapping changes.

use std::time::Duration;

use lode_sim_tests::scenario::Fault;
use lode_sim_tests::{run, FaultMix, Scenario};

fn at(milliseconds: u64, fault: Fault) -> (Duration, Fault) {
    (Duration::from_millis(milliseconds), fault)
}

fn assert_passes(scenario: &Scenario) {
    let report = run(scenario);
    assert!(
        report.violations.is_empty(),
        "{}",
        lode_sim_tests::simulation::describe_violations(&report.violations)
    );
}

/// A leader isolated long enough to be replaced catches up by snapshot
/// install; its proposals from before were never answered by openraft, and
/// once it led again it never wrote (no write for 30 s after the heal).
#[test]
fn a_leader_that_caught_up_by_snapshot_writes_again() {
    let mut scenario = Scenario::new(2, FaultMix::Partitions);
    scenario.workload = Duration::from_millis(7_000);
    scenario.faults = vec![
        at(834, Fault::Partition { side: vec![1] }),
        at(3_512, Fault::HealNetwork),
        at(3_990, Fault::Partition { side: vec![3] }),
        at(6_955, Fault::HealNetwork),
    ];
    assert_passes(&scenario);
}

/// A follower's volume filled while it saved a snapshot: openraft's state
/// machine worker stopped at the write error, and the log store's purge
/// waited 30 s for that snapshot to reach the disk, holding openraft's core
/// (answering no peer) until the member exited, long after its disk had
/// space again and after the last restart (convergence failed).
#[test]
fn a_member_whose_state_machine_failed_stops_at_once() {
    let mut scenario = Scenario::new(330, FaultMix::Storage);
    scenario.workload = Duration::from_millis(6_288);
    scenario.faults = vec![
        at(734, Fault::DiskFullLeader),
        at(1_274, Fault::DiskFreed),
        at(2_004, Fault::DiskFull { id: 1 }),
        at(4_664, Fault::DiskFreed),
        at(4_892, Fault::DiskFull { id: 3 }),
        at(6_690, Fault::DiskFreed),
    ];
    assert_passes(&scenario);
}

/// A founder removed while the spare was still a learner left two voters;
/// the simulation then wiped one of them, a lost quorum that only
/// `--force-new-cluster` recovers (no write for 60 s). The driver now only
/// crashes a member whose loss would leave no quorum.
#[test]
fn a_lost_disk_that_would_lose_the_quorum_is_only_a_crash() {
    let mut scenario = Scenario::new(876, FaultMix::Membership);
    scenario.workload = Duration::from_millis(5_807);
    scenario.faults = vec![
        at(659, Fault::AddMember { id: 4 }),
        at(1_121, Fault::HealNetwork),
        at(1_447, Fault::RemoveMember { id: 1 }),
        at(3_319, Fault::HealNetwork),
        at(3_986, Fault::Wipe { id: 3 }),
        at(6_848, Fault::RestartAll),
    ];
    assert_passes(&scenario);
}

/// Two abandoned claims ran out while the cluster had no leader; the
/// consumers' claims, retried by the SDK through that time, came back
/// "nothing due" before the next leader's sweep requeued them, so the
/// consumers stopped and the messages were left in the queue. A slow
/// answer now starts the consumers' quiet time again.
#[test]
fn consumers_wait_for_the_sweep_after_a_time_without_a_leader() {
    let mut scenario = Scenario::new(459, FaultMix::Membership);
    scenario.workload = Duration::from_millis(5_619);
    scenario.faults = vec![
        at(592, Fault::AddMember { id: 4 }),
        at(2_309, Fault::HealNetwork),
        at(2_736, Fault::RemoveMember { id: 1 }),
        at(3_888, Fault::HealNetwork),
        at(4_624, Fault::Wipe { id: 3 }),
        at(7_114, Fault::RestartAll),
    ];
    assert_passes(&scenario);
}
