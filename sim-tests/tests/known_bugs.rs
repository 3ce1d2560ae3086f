//! The harness proves itself: each known bug, switched on, makes some
//! seed of its fault mix fail, and that seed passes with the bug off. A
//! bug no seed catches means the checkers or the faults went blind.

use lode_raft_store::injected_bugs::InjectedBug;
use lode_sim_tests::{run, FaultMix, Scenario};

/// Seeds tried per bug before the test gives up.
const SEEDS_MAX: u64 = 24;

fn caught(bug: InjectedBug, mix: FaultMix) {
    for seed in 0..SEEDS_MAX {
        let report = run(&Scenario::new(seed, mix).with_bug(bug));
        if let Some(violation) = report.violations.first() {
            eprintln!(
                "{bug:?} caught by seed {seed} ({mix}) in {}: {}",
                violation.checker, violation.detail
            );
            let control = run(&Scenario::new(seed, mix));
            assert!(
                control.violations.is_empty(),
                "seed {seed} ({mix}) fails without the bug too: {:#?}",
                control.violations
            );
            return;
        }
    }
    panic!("{bug:?} went unnoticed in {SEEDS_MAX} seeds of {mix}");
}

#[test]
fn a_deposed_leader_serving_reads_locally_is_caught() {
    caught(InjectedBug::StaleLeaderReads, FaultMix::Partitions);
}

#[test]
fn appends_acknowledged_before_sync_are_caught() {
    caught(InjectedBug::AcknowledgeBeforeSync, FaultMix::Crashes);
}

#[test]
fn apply_skipping_the_dedup_table_is_caught() {
    caught(InjectedBug::SkipDedup, FaultMix::Network);
}

#[test]
fn leases_judged_by_the_local_clock_are_caught() {
    caught(InjectedBug::LeaseJudgedByLocalClock, FaultMix::Crashes);
}

#[test]
fn overdue_claims_dropped_instead_of_retried_are_caught() {
    caught(InjectedBug::DropOverdueClaims, FaultMix::Network);
}

#[test]
fn a_copy_checked_on_its_source_only_is_caught() {
    caught(InjectedBug::SkipCopyDestinationCheck, FaultMix::Partitions);
}

#[test]
fn apply_ignoring_the_grants_revision_is_caught() {
    caught(InjectedBug::IgnoreGrantsRevision, FaultMix::Network);
}
