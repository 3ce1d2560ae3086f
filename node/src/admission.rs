//! A member that holds no cluster state (no log entry, no vote) takes part
//! in Raft only once admitted. Without this, a voter whose data directory
//! was wiped would restart with the same id and cluster id, and vote and
//! acknowledge entries as the voter it was, having lost what it had
//! acknowledged before: a quorum counting it could lose committed writes.
//!
//! Until admitted, such a member answers every Raft message with
//! `not_admitted`. Admission (`admit`, on the peer port) comes from:
//! - the founder, to the founders it found holding no state, right before
//!   it initializes the cluster (and never when a founder holds state: the
//!   cluster exists, and a wiped founder is readmitted like any member);
//! - the leader, to a new member right before adding it as a learner;
//! - the leader, to a member that answered `not_admitted`: a voter is first
//!   made a learner (`readmit_lost_members`), then admitted, and the leader
//!   promotes it once it has caught up (`promotion.rs`). A founder that was
//!   not up at the founding takes the same path; the founder remembers
//!   which founders those were, so that its log does not report them as
//!   members that lost their data (another leader cannot tell them apart).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lode_client::protocol::ClusterId;
use lode_client::LodeError;
use openraft::ServerState;

use crate::network::PeerConnections;
use crate::shared::Shared;

/// How often the leader looks for members that answered `not_admitted`.
const READMISSION_CHECK_MS: u64 = 200;
/// Time limit of one `admit` call.
pub const ADMIT_TIMEOUT_MS: u64 = 2_000;

/// Whether this member may take part in Raft.
pub struct Admission {
    admitted: AtomicBool,
}

impl Admission {
    /// A member holding state (a log entry or a vote) is admitted already.
    pub fn new(holds_state: bool) -> Self {
        Self {
            admitted: AtomicBool::new(holds_state),
        }
    }

    pub fn admit(&self) {
        if !self.admitted.swap(true, Ordering::AcqRel) {
            tracing::info!("admitted to the cluster; taking part in Raft");
        }
    }

    /// Refuses a Raft message while this member is not admitted.
    pub fn check(&self, member: u64) -> Result<(), LodeError> {
        if self.admitted.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(LodeError::NotAdmitted { member })
    }
}

/// The members whose Raft messages came back `not_admitted`, noted by the
/// network and taken by the leader's readmission task.
#[derive(Default)]
pub struct LostMembers {
    pending: Mutex<BTreeSet<u64>>,
    /// On the founder: the founders that had not answered when it founded
    /// the cluster. Their first `not_admitted` is expected (they start
    /// late, as a StatefulSet's pods do one by one), not a loss of data.
    late_founders: Mutex<BTreeSet<u64>>,
}

impl LostMembers {
    fn late_founders(&self) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
        // Every change under this lock is one insert or remove: a panic
        // leaves the set consistent.
        self.late_founders
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the founders that were not admitted at the founding.
    pub fn note_late_founders(&self, founders: impl IntoIterator<Item = u64>) {
        self.late_founders().extend(founders);
    }

    /// Whether `member` is a founder that was not up at the founding and
    /// has not been admitted since.
    pub fn is_late_founder(&self, member: u64) -> bool {
        self.late_founders().contains(&member)
    }

    /// `member` was admitted: a later `not_admitted` from it is a loss.
    pub fn admitted(&self, member: u64) {
        self.late_founders().remove(&member);
    }

    pub fn note(&self, member: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if pending.insert(member) {
            tracing::debug!(member, "a member answered that it holds no state");
        }
    }

    fn take(&self) -> BTreeSet<u64> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

/// Asks the member at `address` (its peer port) to take part in Raft.
pub async fn admit(peers: &PeerConnections, address: &str, cluster: ClusterId) -> Result<(), LodeError> {
    let timeout = Duration::from_millis(ADMIT_TIMEOUT_MS);
    peers
        .get(address)
        .request(timeout, |client, context| async move {
            client.admit(context, cluster).await
        })
        .await
}

/// On the leader: makes each member that answered `not_admitted` a learner
/// (if it was a voter) and admits it. Runs for the member's life.
pub async fn readmit_lost_members(shared: Arc<Shared>, service: crate::service::NodeService) {
    let mut interval = tokio::time::interval(Duration::from_millis(READMISSION_CHECK_MS));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let lost = shared.lost_members.take();
        if lost.is_empty() || shared.raft.metrics().borrow().state != ServerState::Leader {
            continue;
        }
        for member in lost {
            match service.readmit(member).await {
                Ok(()) => {}
                Err(error) => tracing::info!(member, %error, "readmitting a member failed; trying again"),
            }
        }
    }
}

/// A member's data is from before its removal from its cluster.
#[derive(Debug, thiserror::Error)]
#[error(
    "member {id} was removed from cluster {cluster}, and this data directory is from before its removal: \
     move it away, start the member with an empty data directory and add it again \
     (`lode cluster add`), or start it with --rejoin-when-removed"
)]
pub struct Removed {
    pub id: u64,
    pub cluster: ClusterId,
}

/// How long each other member has to answer whether this one was removed.
const REMOVAL_CHECK_TIMEOUT_MS: u64 = 1_000;

/// Before Raft starts, on a member holding state: refuses to start when
/// its cluster's leader (asked through any member it knows, concurrently)
/// no longer lists it, or its own last membership does not: it was
/// removed, and its old data must not take part again. When no leader
/// answers (the whole cluster restarting), it starts.
pub async fn refuse_if_removed(
    id: u64,
    membership: &openraft::Membership<u64, lode_raft_store::Member>,
    peers: &PeerConnections,
    cluster: ClusterId,
) -> Result<(), Removed> {
    let removed = || Removed { id, cluster };
    if membership.get_node(&id).is_none() {
        return Err(removed());
    }
    let timeout = Duration::from_millis(REMOVAL_CHECK_TIMEOUT_MS);
    let asks = membership
        .nodes()
        .filter(|(other, _)| **other != id)
        .map(|(_, member)| async move {
            let answer = peers
                .get(&member.peer_address)
                .call(timeout, |client, context| async move {
                    client.cluster_status(context).await
                })
                .await;
            match answer {
                // Only a leader's own answer: a member cut off from it answers
                // with its own view, which may predate this member's addition.
                Ok(Ok(status)) if status.cluster_id == Some(cluster) && status.leader == Some(status.answered_by) => {
                    Some(status.members.iter().any(|member| member.id == id))
                }
                _ => None,
            }
        });
    let answers: Vec<bool> = futures::future::join_all(asks).await.into_iter().flatten().collect();
    if answers.contains(&false) {
        return Err(removed());
    }
    Ok(())
}
