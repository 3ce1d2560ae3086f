//! Conversions between the wire types of lode-client and the command types
//! of lode-raft-store. The two crates cannot share types (one must not pull
//! in the network, the other not the storage), so they meet here.

use lode_client::protocol::{self as wire};
use lode_client::LodeError;
use lode_raft_store::command::{self as store, Command, CommandV1, OpId};
use lode_raft_store::StoredEntry;

pub fn encoding_to_store(encoding: &wire::Encoding) -> store::Encoding {
    match encoding {
        wire::Encoding::Bytes => store::Encoding::Bytes,
        wire::Encoding::Json => store::Encoding::Json,
        wire::Encoding::Msgpack => store::Encoding::Msgpack,
        wire::Encoding::Custom(name) => store::Encoding::Custom(name.clone()),
    }
}

pub fn encoding_to_wire(encoding: &store::Encoding) -> wire::Encoding {
    match encoding {
        store::Encoding::Bytes => wire::Encoding::Bytes,
        store::Encoding::Json => wire::Encoding::Json,
        store::Encoding::Msgpack => wire::Encoding::Msgpack,
        store::Encoding::Custom(name) => wire::Encoding::Custom(name.clone()),
    }
}

/// Builds the command for a write request, stamped with the leader's time.
pub fn command(request: &wire::WriteRequest, time_micros: u64) -> Command {
    let operations = request
        .operations
        .iter()
        .map(|operation| match operation {
            wire::Operation::Set {
                namespace,
                key,
                value,
                encoding,
                expires_at_micros,
            } => store::Operation::Set {
                namespace: namespace.clone(),
                key: key.clone(),
                value: value.clone(),
                encoding: encoding_to_store(encoding),
                expires_at_micros: *expires_at_micros,
            },
            wire::Operation::Delete { namespace, key } => store::Operation::Delete {
                namespace: namespace.clone(),
                key: key.clone(),
            },
        })
        .collect();
    Command::V1(CommandV1 {
        op_id: Some(OpId(request.op_id)),
        time_micros,
        operations,
    })
}

pub fn result_to_wire(result: &store::OperationResult) -> Result<wire::OperationResult, LodeError> {
    match result {
        store::OperationResult::Set { version } => Ok(wire::OperationResult::Set { version: *version }),
        store::OperationResult::Delete { removed_live_entry } => Ok(wire::OperationResult::Delete {
            removed_live_entry: *removed_live_entry,
        }),
        store::OperationResult::SweepExpired { .. } => Err(LodeError::Invalid(
            "sweep results are internal and never answer a client".to_owned(),
        )),
    }
}

pub fn rejection_to_wire(rejection: store::Rejection) -> LodeError {
    match rejection {
        store::Rejection::Invalid(message) => LodeError::Invalid(message),
    }
}

pub fn entry_to_wire(key: Vec<u8>, entry: StoredEntry) -> wire::Entry {
    wire::Entry {
        key,
        value: entry.value,
        encoding: encoding_to_wire(&entry.encoding),
        version: entry.version,
        expires_at_micros: entry.expires_at_micros,
        source_term: entry.source.term,
        source_index: entry.source.index,
    }
}

#[cfg(test)]
mod tests {
    use lode_client::limits as client;
    use lode_raft_store::limits as server;

    #[test]
    fn a_full_raft_append_fits_in_one_frame() {
        use crate::node::RAFT_PAYLOAD_ENTRIES_MAX;
        use crate::proposer::PROPOSAL_BYTES_MAX;
        // The largest proposal is the byte limit plus one write that started
        // below it, plus encoding overhead per command.
        let proposal_max = PROPOSAL_BYTES_MAX + server::WRITE_BYTES_MAX + 64 * 1024;
        let append_max = RAFT_PAYLOAD_ENTRIES_MAX as usize * proposal_max;
        assert!(append_max < lode_client::connection::FRAME_BYTES_MAX, "{append_max}");
    }

    #[test]
    fn client_and_server_limits_agree() {
        assert_eq!(client::NAMESPACE_BYTES_MAX, server::NAMESPACE_BYTES_MAX);
        assert_eq!(client::KEY_BYTES_MAX, server::KEY_BYTES_MAX);
        assert_eq!(client::VALUE_BYTES_MAX, server::VALUE_BYTES_MAX);
        assert_eq!(client::OPERATIONS_PER_WRITE_MAX, server::OPERATIONS_PER_WRITE_MAX);
        assert_eq!(client::WRITE_BYTES_MAX, server::WRITE_BYTES_MAX);
    }
}
