//! The Lode server: one cluster member that serves the wire protocol to
//! clients and peers on one address, runs openraft over the storage in
//! lode-raft-store, and the `lode` command-line tool around it.
//!
//! This is the only crate that knows both the network and the storage.

pub mod bench;
pub mod cli;
pub mod clock;
pub mod convert;
pub mod dev;
pub mod embedded;
pub mod http;
pub mod kv_cli;
pub mod lease_cli;
pub mod network;
pub mod node;
pub mod proposer;
pub mod reads;
pub mod service;

pub use embedded::Lode;
pub use node::{Node, NodeConfig};
