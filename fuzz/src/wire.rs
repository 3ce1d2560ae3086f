//! The rpc ports' frames (requests on the client and peer ports, answers
//! read by the SDK and by members) and the Raft messages the peer port's
//! `raft` call carries as bincode payloads.

use lode_client::protocol::{LodeServiceRequest, LodeServiceResponse};
use lode_client::rpc::{ClientFrame, FrameCodec, ServerFrame};
use lode_raft_store::{NodeId, TypeConfig};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;

use crate::binary_round_trip;

/// Small enough that inputs reach the "frame over the limit" path.
const FRAME_BYTES_MAX: usize = 64 << 10;

/// The frames a byte stream holds, as the codec cuts them: each at most
/// the limit, and together never more than the stream.
fn frames(data: &[u8]) -> Vec<BytesMut> {
    let mut codec = FrameCodec::new(FRAME_BYTES_MAX);
    let mut buffer = BytesMut::from(data);
    let mut frames = Vec::new();
    while let Ok(Some(frame)) = codec.decode(&mut buffer) {
        assert!(frame.len() <= FRAME_BYTES_MAX, "a frame over the limit was cut");
        frames.push(frame);
    }
    let framed: usize = frames.iter().map(|frame| frame.len() + 4).sum();
    assert!(
        framed + buffer.len() <= data.len(),
        "frames hold more bytes than arrived"
    );
    frames
}

/// A connection's bytes as a server reads them: frames, each a call or a
/// cancel.
pub fn client_frames(data: &[u8]) {
    for frame in frames(data) {
        binary_round_trip::<ClientFrame<LodeServiceRequest>>(&frame);
    }
}

/// A connection's bytes as the SDK or a member reads a server's answers.
pub fn server_frames(data: &[u8]) {
    for frame in frames(data) {
        binary_round_trip::<ServerFrame<LodeServiceResponse>>(&frame);
    }
}

/// A `raft` call's payload (its kind chosen by the first byte) and the
/// answers members decode from their peers.
pub fn raft_payloads(data: &[u8]) {
    let Some((kind, payload)) = data.split_first() else {
        return;
    };
    type Fatal = openraft::error::RaftError<NodeId, openraft::error::Infallible>;
    type SnapshotFatal = openraft::error::RaftError<NodeId, openraft::error::InstallSnapshotError>;
    match kind % 6 {
        0 => drop(binary_round_trip::<openraft::raft::AppendEntriesRequest<TypeConfig>>(
            payload,
        )),
        1 => drop(binary_round_trip::<openraft::raft::VoteRequest<NodeId>>(payload)),
        2 => drop(binary_round_trip::<openraft::raft::InstallSnapshotRequest<TypeConfig>>(
            payload,
        )),
        3 => drop(binary_round_trip::<
            Result<openraft::raft::AppendEntriesResponse<NodeId>, Fatal>,
        >(payload)),
        4 => drop(binary_round_trip::<Result<openraft::raft::VoteResponse<NodeId>, Fatal>>(payload)),
        _ => drop(binary_round_trip::<
            Result<openraft::raft::InstallSnapshotResponse<NodeId>, SnapshotFatal>,
        >(payload)),
    }
}
