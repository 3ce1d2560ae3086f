//! The Lode server: one cluster member that serves the wire protocol to
//! clients and peers on one address, runs openraft over the storage in
//! lode-raft-store. The `lode` command-line tool (`src/cli/`) is the
//! binary's own, declared by `main.rs`.
//!
//! This is the only crate that knows both the network and the storage.

pub mod accept;
pub mod admission;
pub mod auth;
pub mod backup;
pub mod clock;
pub mod cluster_identity;
pub mod config;
pub mod convert;
pub mod embedded;
pub mod follower_reads;
pub mod handoff;
pub mod http;
pub mod leadership;
pub mod log_size_snapshots;
pub mod metrics;
pub mod network;
pub mod node;
mod ports;
pub mod process_metrics;
pub mod promotion;
pub mod proposer;
pub mod quorum_recovery;
pub mod reads;
pub mod service;
pub mod shared;
pub mod storage_quota;
pub mod tls;

pub use config::NodeConfig;
pub use embedded::Lode;
pub use node::Node;
