//! The harness proves itself: each known bug, switched on, makes some
//! seed of its fault mix fail, and that seed passes with the bug off. A
//! bug no seed catches means the checkers or the faults went blind.

use lode_raft_store::injected_bugs::InjectedBug;
use lode_sim_tests::{run, FaultMix, Scenario};

/// Seeds tried per bug before the test gives up.
const SEEDS_MAX: u64 = 24;

/// The first violation of a run, if any, as "checker: detail". The run has
/// a thread of its own: a bug may trip one of openraft's own assertions (a
/// lost acknowledged append does), and that panic ends the run, which
/// counts as caught just as a checker's violation does.
fn first_violation(scenario: Scenario) -> Option<String> {
    let run = std::thread::spawn(move || {
        let report = run(&scenario);
        report
            .violations
            .first()
            .map(|violation| format!("{}: {}", violation.checker, violation.detail))
    });
    match run.join() {
        Ok(violation) => violation,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
                .unwrap_or_default();
            Some(format!("the run panicked: {message}"))
        }
    }
}

fn caught(bug: InjectedBug, mix: FaultMix) {
    for seed in 0..SEEDS_MAX {
        if let Some(violation) = first_violation(Scenario::new(seed, mix).with_bug(bug)) {
            eprintln!("{bug:?} caught by seed {seed} ({mix}): {violation}");
            let control = first_violation(Scenario::new(seed, mix));
            assert!(
                control.is_none(),
                "seed {seed} ({mix}) fails without the bug too: {control:?}"
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
