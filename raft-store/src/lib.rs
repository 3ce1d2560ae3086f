//! Lode's replicated state: the command model, its deterministic apply, and
//! openraft log and state-machine storage over a small storage-engine trait.
//!
//! This crate knows nothing of the network. Everything that reaches it comes
//! as a [`Command`] inside a Raft log entry, and everything it decides is a
//! pure function of the stored state, the command and the command's log id.

pub mod applied_index;
pub mod apply;
pub mod auth;
pub mod backup;
pub mod command;
pub mod engine;
pub mod entry;
pub mod error;
pub mod injected_bugs;
pub mod keys;
/// Every request and storage limit, shared with the SDK.
pub use lode_types::limits;
pub mod log_bytes;
pub mod log_durability;
pub mod log_store;
pub mod merge_patch;
pub mod observer;
pub mod queue;
pub mod reader;
pub(crate) mod recent_entries;
pub mod recovery;
pub mod runtime;
pub mod snapshot;
pub mod state_machine;
pub(crate) mod trimmed_events;
pub mod type_config;

pub use command::{
    Command, CommandOutcome, CommandV1, Encoding, OpId, Operation, OperationResult, Proposal, ProposalOutcome,
    Rejection,
};
pub use engine::{memory::MemoryEngine, rocks::RocksEngine, selected::SelectedEngine, Engine};
pub use entry::{SourceId, StoredEntry};
pub use error::EngineError;
pub use log_store::LogStore;
pub use reader::StateReader;
pub use state_machine::StateMachineStore;
pub use type_config::{Member, NodeId, TypeConfig};
