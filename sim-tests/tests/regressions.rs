//! Scenarios that once failed, written out fault by fault so that they keep
//! their shape when the seed-to-scenario mapping changes.

use std::time::Duration;

use lode_sim_tests::scenario::Fault;
use lode_sim_tests::{run, FaultMix, Scenario};

fn at(milliseconds: u64, fault: Fault) -> (Duration, Fault) {
    (Duration::from_millis(milliseconds), fault)
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
    let report = run(&scenario);
    assert!(
        report.violations.is_empty(),
        "{}",
        lode_sim_tests::simulation::describe_violations(&report.violations)
    );
}
