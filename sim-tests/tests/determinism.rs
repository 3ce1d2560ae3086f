//! A run is a function of its seed: two runs of one seed produce the same
//! trace digest (history, faults and final replica states), and different
//! seeds produce different runs.

use lode_sim_tests::{run, FaultMix, Scenario};

#[test]
fn one_seed_replays_to_the_same_trace() {
    let mut distinct = std::collections::BTreeSet::new();
    for mix in FaultMix::ALL {
        for seed in [7, 8] {
            let scenario = Scenario::new(seed, mix);
            let first = run(&scenario);
            let second = run(&scenario);
            assert_eq!(
                first.trace_digest,
                second.trace_digest,
                "seed {seed} ({mix}) replayed differently: {} then {} operations",
                first.history.operations.len(),
                second.history.operations.len()
            );
            assert!(first.violations.is_empty(), "{:#?}", first.violations);
            distinct.insert(first.trace_digest);
        }
    }
    assert_eq!(
        distinct.len(),
        2 * FaultMix::ALL.len(),
        "different seeds gave the same trace"
    );
}
