//! A run is a function of its seed: replays of one seed produce the same
//! trace digest (history, faults and final replica states), and different
//! seeds produce different runs.
//!
//! Every replay also records a step trace; when two replays differ, the
//! failure names the first simulation step at which they did and shows the
//! messages in flight and turmoil's events around it.
//! `LODE_SIM_REPLAYS=N` replays each seed N times instead of twice, and
//! `LODE_SIM_SEEDS=N` (from `LODE_SIM_FIRST_SEED`) replays N seeds per mix
//! instead of 7 and 8: soaks for nondeterminism, which has taken hundreds
//! of replays to show.

use lode_sim_tests::scenario::seed_window;
use lode_sim_tests::step_trace::{capture_network_events, StepTrace};
use lode_sim_tests::{run_traced, FaultMix, RunReport, Scenario};

fn replays() -> usize {
    std::env::var("LODE_SIM_REPLAYS")
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(2)
        .max(2)
}

fn traced(scenario: &Scenario) -> (StepTrace, RunReport) {
    let mut steps = StepTrace::new();
    let report = run_traced(scenario, Some(&mut steps));
    (steps, report)
}

#[test]
fn one_seed_replays_to_the_same_trace() {
    let _capture = capture_network_events();
    let seeds = seed_window(7, 2);
    let mut distinct = std::collections::BTreeSet::new();
    for mix in FaultMix::ALL {
        for seed in seeds.clone() {
            let scenario = Scenario::new(seed, mix);
            let (first_steps, first) = traced(&scenario);
            assert!(
                first.violations.is_empty(),
                "{}",
                lode_sim_tests::simulation::describe_violations(&first.violations)
            );
            for replay in 1..replays() {
                let (steps, report) = traced(&scenario);
                assert!(
                    report.trace_digest == first.trace_digest,
                    "seed {seed} ({mix}) replay {replay} differs from the first run: {}",
                    first_steps
                        .describe_divergence(&steps)
                        .unwrap_or_else(|| "every step agrees; the final replica states differ".to_owned())
                );
            }
            distinct.insert(first.trace_digest);
        }
    }
    assert_eq!(
        distinct.len(),
        seeds.count() * FaultMix::ALL.len(),
        "different seeds gave the same trace"
    );
}
