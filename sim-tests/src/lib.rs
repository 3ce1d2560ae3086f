//! Deterministic simulation of whole Lode clusters, and the checkers that
//! judge what clients saw.
//!
//! A run puts the real node code (Raft, proposer, apply, reads, the wire
//! protocol) of every member into one turmoil world on one thread: the
//! in-memory engines stand in for disks (a crash loses what was not
//! synced), turmoil's network for TCP, its clock for time, and a seeded
//! generator for every random draw. A run is a function of its seed, so
//! any failure replays with the command its report prints.
//!
//! The checkers (`checkers/`, one file each) read only the recorded
//! history and the replicas' final state; the real-process test in
//! `node/tests/linearizability.rs` feeds the same checkers a history
//! recorded against real processes.

pub mod activity;
pub mod auth_workload;
pub mod bulk_workload;
pub mod checkers;
pub mod client_host;
pub mod environment;
pub mod history;
mod logging;
pub mod queue_workload;
pub mod scenario;
pub mod simulation;
pub mod step_trace;
pub mod trace;
pub mod workload;

use std::time::Duration;

pub use history::History;
pub use scenario::{FaultMix, Scenario};
pub use simulation::{run, run_traced, ReplicaState, RunReport, Violation};

/// Simulated time since the run began, as the current host sees it.
pub fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}
