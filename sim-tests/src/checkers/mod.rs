//! The checkers, one file each, named after what they check. Each reads the
//! history and, where it needs them, the replicas' final states, and
//! returns what it found wrong.

pub mod acknowledged_writes;
pub mod applied_once;
pub mod convergence;
pub mod fencing;
pub mod linearizability;
pub mod liveness;
pub mod permissions;
pub mod phantom_values;
pub mod queue_delivery;
pub mod versions;

use std::time::Duration;

use crate::history::History;
use crate::simulation::{ReplicaState, Violation};

/// Runs every checker on a finished run.
pub fn run_all(history: &History, replicas: &[ReplicaState], recovery: Option<Duration>) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut note = |checker: &'static str, result: Result<(), String>| {
        if let Err(detail) = result {
            violations.push(Violation { checker, detail });
        }
    };
    note("linearizability", linearizability::check(history));
    note("acknowledged_writes", acknowledged_writes::check(history, replicas));
    note("phantom_values", phantom_values::check(history, replicas));
    note("fencing", fencing::check(history, replicas));
    note("versions", versions::check(history, replicas));
    note("applied_once", applied_once::check(replicas));
    note("convergence", convergence::check(replicas));
    note("liveness", liveness::check(recovery));
    note("queue_delivery", queue_delivery::check(history));
    note("permissions", permissions::check(history, replicas));
    violations
}
