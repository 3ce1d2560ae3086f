//! Where a request that needs the leader goes: this member's view of the
//! leader, and openraft's "forward to the leader" turned into the hint the
//! SDK follows. The service forwards with this view once
//! (`NodeService::on_leader`); the SDK follows the hint otherwise.

use lode_client::error::LeaderHint;
use lode_client::LodeError;
use lode_raft_store::{Member, TypeConfig};
use openraft::error::ForwardToLeader;
use openraft::Raft;

/// The leader as this member knows it: where to forward to (its peer
/// port), and the hint a client follows (its client port).
#[derive(Clone, Debug)]
pub struct Leader {
    pub id: u64,
    pub member: Member,
}

impl Leader {
    /// The hint for the SDK; none while the leader's client address is
    /// unpublished.
    pub fn hint(&self) -> Option<LeaderHint> {
        (!self.member.client_address.is_empty()).then(|| LeaderHint {
            id: self.id,
            address: self.member.client_address.clone(),
        })
    }
}

/// The leader, when member `id` (running `raft`) knows it and is not it.
pub fn leader_elsewhere(raft: &Raft<TypeConfig>, id: u64) -> Option<Leader> {
    // Borrowed, not cloned: this runs for every call a follower forwards.
    let metrics = raft.metrics();
    let metrics = metrics.borrow();
    let leader = metrics.current_leader?;
    if leader == id {
        return None;
    }
    let member = metrics.membership_config.membership().get_node(&leader)?.clone();
    Some(Leader { id: leader, member })
}

/// The leader openraft names, when it names one.
pub fn named_leader(forward: &ForwardToLeader<u64, Member>) -> Option<Leader> {
    match (forward.leader_id, &forward.leader_node) {
        (Some(id), Some(member)) => Some(Leader {
            id,
            member: member.clone(),
        }),
        _ => None,
    }
}

/// `not_leader`, with the leader openraft names when it names one.
pub fn not_leader(forward: ForwardToLeader<u64, Member>) -> LodeError {
    LodeError::NotLeader {
        hint: named_leader(&forward).and_then(|leader| leader.hint()),
    }
}
