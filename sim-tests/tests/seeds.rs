//! Fixed seeds per fault mix (the CI set), and `replay` for one seed.
//!
//! `LODE_SIM_SEEDS=N` runs N seeds per mix instead of the CI count (a
//! soak); `LODE_SIM_FIRST_SEED` moves the window. A failing seed prints the
//! command that replays it.

use std::time::Instant;

use lode_sim_tests::scenario::seed_window;
use lode_sim_tests::{run, FaultMix, Scenario};

/// Seeds per fault mix in CI.
const CI_SEEDS: u64 = 200;

fn run_mix(mix: FaultMix) {
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut operations = 0;
    let mut unknown = 0;
    let mut faults = 0;
    let mut messages = 0;
    let mut deliveries = 0;
    let mut recoveries = Vec::new();
    let seeds = seed_window(0, CI_SEEDS);
    for seed in seeds.clone() {
        let report = run(&Scenario::new(seed, mix));
        operations += report.history.operations.len();
        unknown += report
            .history
            .operations
            .iter()
            .filter(|operation| operation.outcome == lode_sim_tests::history::Outcome::Unknown)
            .count();
        faults += report.faults_applied.len();
        for event in &report.history.queue {
            match event {
                lode_sim_tests::history::QueueEvent::Enqueued { .. } => messages += 1,
                lode_sim_tests::history::QueueEvent::Claimed { .. } => deliveries += 1,
                _ => {}
            }
        }
        recoveries.extend(report.recovery);
        if !report.violations.is_empty() {
            eprintln!(
                "seed {seed} ({mix}) failed:\n{}",
                lode_sim_tests::simulation::describe_violations(&report.violations)
            );
            eprintln!("replay with: {}", report.replay_command());
            failures.push(seed);
        }
    }
    recoveries.sort();
    let percentile = |share: usize| {
        recoveries
            .get(recoveries.len() * share / 100)
            .copied()
            .unwrap_or_default()
    };
    eprintln!(
        "{mix}: {} seeds, {operations} operations ({unknown} with unknown outcome), {messages} queue messages \
         ({deliveries} deliveries), {faults} faults, \
         first write after the heal: p50 {:?}, p99 {:?}, max {:?}; {:.1} s",
        seeds.end - seeds.start,
        percentile(50),
        percentile(99),
        recoveries.last().copied().unwrap_or_default(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{mix}: failing seeds {failures:?}");
}

#[test]
fn partitions() {
    run_mix(FaultMix::Partitions);
}

#[test]
fn crashes() {
    run_mix(FaultMix::Crashes);
}

#[test]
fn network() {
    run_mix(FaultMix::Network);
}

#[test]
fn membership() {
    run_mix(FaultMix::Membership);
}

#[test]
fn storage() {
    run_mix(FaultMix::Storage);
}

/// Replays `LODE_SIM_SEED` under `LODE_SIM_MIX` (default: seed 0, crashes)
/// and prints its history and faults.
#[test]
fn replay() {
    let seed = std::env::var("LODE_SIM_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(0);
    let mix: FaultMix = std::env::var("LODE_SIM_MIX")
        .ok()
        .map(|mix| mix.parse().unwrap_or_else(|error: String| panic!("{error}")))
        .unwrap_or(FaultMix::Crashes);
    let report = run(&Scenario::new(seed, mix));
    if std::env::var("LODE_SIM_SEED").is_ok() {
        for fault in &report.faults_applied {
            eprintln!("fault {fault}");
        }
        for operation in &report.history.operations {
            eprintln!("{operation:?}");
        }
        for write in &report.history.fenced_writes {
            eprintln!("{write:?}");
        }
        for event in &report.history.queue {
            eprintln!("{event:?}");
        }
    }
    eprintln!(
        "seed {seed} ({mix}): trace digest {:016x}, {} operations, simulated {:?}, recovery {:?}",
        report.trace_digest,
        report.history.operations.len(),
        report.simulated,
        report.recovery
    );
    assert!(
        report.violations.is_empty(),
        "{}",
        lode_sim_tests::simulation::describe_violations(&report.violations)
    );
}
