//! Where a request that needs the leader goes: this member's view of the
//! leader, and openraft's "forward to the leader" turned into the hint the
//! SDK follows. The service forwards with this view once
//! (`NodeService::on_leader`); the SDK follows the hint otherwise.

use lode_client::error::LeaderHint;
use lode_client::LodeError;
use openraft::error::ForwardToLeader;
use openraft::BasicNode;

use crate::shared::Shared;

/// The leader's id and address, when this member knows them and is not it.
pub fn leader_elsewhere(shared: &Shared) -> Option<LeaderHint> {
    let metrics = shared.raft.metrics().borrow().clone();
    let leader = metrics.current_leader?;
    if leader == shared.id {
        return None;
    }
    let node = metrics.membership_config.membership().get_node(&leader)?.clone();
    Some(LeaderHint {
        id: leader,
        address: node.addr,
    })
}

/// `not_leader`, with the leader openraft names when it names one.
pub fn not_leader(forward: ForwardToLeader<u64, BasicNode>) -> LodeError {
    LodeError::NotLeader {
        hint: match (forward.leader_id, forward.leader_node) {
            (Some(id), Some(node)) => Some(LeaderHint { id, address: node.addr }),
            _ => None,
        },
    }
}
