//! Builders the storage tests share.

use lode_raft_store::command::{Command, CommandV1, Encoding, Operation};

/// A command that sets `key-{index}` of `namespace` to `index`'s bytes,
/// stamped with `index` as its time.
pub fn set_command(namespace: &str, index: u64) -> Command {
    Command::V1(CommandV1 {
        op_id: None,
        time_micros: index,
        operations: vec![Operation::Set {
            namespace: namespace.to_owned(),
            key: format!("key-{index}").into_bytes(),
            value: index.to_be_bytes().to_vec(),
            encoding: Encoding::Bytes,
            expires_at_micros: None,
            precondition: None,
            fence: None,
            session: None,
        }],
    })
}
