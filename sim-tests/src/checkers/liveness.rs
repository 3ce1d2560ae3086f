//! Once faults stop, a leader is elected and a write succeeds within
//! [`LIVENESS_BOUND`] of simulated time.

use std::time::Duration;

use crate::scenario::LIVENESS_BOUND;

pub fn check(recovery: Option<Duration>) -> Result<(), String> {
    match recovery {
        Some(recovery) if recovery <= LIVENESS_BOUND => Ok(()),
        Some(recovery) => Err(format!(
            "the first write after the heal succeeded after {recovery:?}, over the {LIVENESS_BOUND:?} bound"
        )),
        None => Err("no write succeeded after the heal".to_owned()),
    }
}
