//! The harness proves itself: each known bug, switched on, makes some
//! seed of its fault mix fail, and that seed passes with the bug off. A
//! bug no seed catches means the checkers or the faults went blind.

use lode_raft_store::injected_bugs::InjectedBug;
use lode_sim_tests::{run, FaultMix, Scenario};

/// Seeds tried per bug before the test gives up.
const SEEDS_MAX: u64 = 24;
/// Seeds tried for a bug that needs a rarer coincidence of faults.
const SEEDS_MAX_RARE: u64 = 80;

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
    caught_within(bug, mix, SEEDS_MAX);
}

fn caught_within(bug: InjectedBug, mix: FaultMix, seeds_max: u64) {
    for seed in 0..seeds_max {
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
    panic!("{bug:?} went unnoticed in {seeds_max} seeds of {mix}");
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
fn entries_applied_before_the_leaders_background_sync_are_caught() {
    // Mostly by the slow leader disk: a crash at a random moment rarely
    // falls between a leader's apply and its sync.
    caught(InjectedBug::CommitBeforeLeaderSync, FaultMix::Crashes);
}

#[test]
fn a_restarted_leader_resuming_its_term_is_caught() {
    // It takes a crash between a leader's append and its sync, a follower
    // holding that append, and the leader back before another is elected.
    caught_within(
        InjectedBug::ResumeLeadingAfterRestart,
        FaultMix::Crashes,
        SEEDS_MAX_RARE,
    );
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

#[test]
fn a_follower_reading_before_it_applied_the_read_index_is_caught() {
    caught(InjectedBug::FollowerReadBeforeApply, FaultMix::Network);
}

#[test]
fn a_follower_read_given_an_index_asked_before_it_began_is_caught() {
    caught(InjectedBug::FollowerReadReusesIndex, FaultMix::Network);
}
