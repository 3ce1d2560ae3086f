//! The request limits the SDK checks before sending anything; the server
//! and the state machine check the very same ones (`lode-types`).

pub use lode_types::limits::*;
