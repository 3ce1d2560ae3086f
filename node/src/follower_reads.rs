//! Linearizable reads on a follower, served from its own state: the leader
//! answers a read index (`read_index` on its peer port: its commit index,
//! once a quorum round that began after the call confirmed its
//! leadership), and the follower serves the read once it has applied that
//! far, as etcd's followers do. The leader reads nothing and encodes no
//! answer for it.
//!
//! Reads coalesce here as on the leader (`reads.rs`): every read that
//! arrived before a call to the leader starts shares that call's index; a
//! read arriving during a call waits for the next one, because an index
//! asked before the read began could miss a write acknowledged before it.
//!
//! The reads waiting for the next call are bounded as the leader's are
//! (`NodeConfig::reads_waiting_max`), past which they are refused at once.
//!
//! A leader that does not know the call (an older version ends the
//! connection on it) gets whole reads, as before, for the rest of its term
//! or [`READ_INDEX_RETRY_MS`], whichever ends first: a connection that
//! failed for another reason costs no more than that.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lode_client::connection::CallFailure;
use lode_client::LodeError;
use lode_raft_store::injected_bugs::{self, InjectedBug};
use tokio::sync::oneshot;

use crate::leadership::Leader;
use crate::shared::Shared;

/// How far behind the leader's read index a follower may be and still
/// serve a read itself, waiting to apply the rest: a follower further
/// behind is catching up (from a snapshot, or after a partition), and
/// sends its reads to the leader whole rather than hold them until then.
pub const FOLLOWER_READ_LAG_ENTRIES_MAX: u64 = 1_000;

/// How long a follower sends its reads whole to a leader that did not
/// answer a read-index call (in the same term), before it asks again.
pub const READ_INDEX_RETRY_MS: u64 = 30_000;

/// How a round ended for the reads that shared it.
#[derive(Clone, Debug)]
pub enum FollowerIndex {
    /// Serve the read here once this member has applied this far.
    Applied(u64),
    /// The leader does not serve read indexes, or leadership moved: the
    /// read takes the route to the leader as a whole.
    Whole,
}

type Waiter = oneshot::Sender<Result<FollowerIndex, LodeError>>;

#[derive(Default)]
struct Rounds {
    /// Reads waiting for the next call to the leader.
    waiting: Vec<Waiter>,
    /// Whether a task is running calls (it ends once no read waits).
    running: bool,
    /// The leader (id and term) that did not answer the call, and until
    /// when reads go to it whole.
    refused: Option<(u64, u64, tokio::time::Instant)>,
    /// The index the last round answered; only the injected bug
    /// `FollowerReadReusesIndex` reads it.
    previous: Option<u64>,
}

/// The follower's read-index rounds, shared by its reads.
#[derive(Default)]
pub struct FollowerReads {
    rounds: Mutex<Rounds>,
}

impl FollowerReads {
    fn rounds(&self) -> MutexGuard<'_, Rounds> {
        // Every change under this lock is one assignment, push or take: a
        // panic leaves it consistent.
        self.rounds.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The index a linearizable read on this follower must wait for, asked
    /// of the leader by a call that starts after this one.
    pub async fn index(shared: &Arc<Shared>, leader: &Leader) -> Result<FollowerIndex, LodeError> {
        let (sender, receiver) = oneshot::channel();
        {
            let mut rounds = shared.follower_reads.rounds();
            // The term is looked up only when a refusal is on record.
            if rounds.refused.is_some_and(|(id, refused_term, until)| {
                id == leader.id
                    && tokio::time::Instant::now() < until
                    && refused_term == shared.raft.metrics().borrow().current_term
            }) {
                return Ok(FollowerIndex::Whole);
            }
            if let (true, Some(previous)) = (rounds.running, rounds.previous) {
                if injected_bugs::enabled(InjectedBug::FollowerReadReusesIndex) {
                    return Ok(FollowerIndex::Applied(previous));
                }
            }
            let waiting_max = shared.config.reads_waiting_max;
            if rounds.waiting.len() >= waiting_max {
                return Err(crate::reads::too_many_waiting(waiting_max));
            }
            rounds.waiting.push(sender);
            if !rounds.running {
                rounds.running = true;
                tokio::spawn(run_rounds(shared.clone()));
            }
        }
        receiver
            .await
            .map_err(|_| LodeError::Unavailable("the follower's read-index task stopped".to_owned()))?
    }
}

/// Calls the leader for the waiting reads, one call per batch, until no
/// read waits.
async fn run_rounds(shared: Arc<Shared>) {
    loop {
        let batch = {
            let mut rounds = shared.follower_reads.rounds();
            if rounds.waiting.is_empty() {
                rounds.running = false;
                return;
            }
            std::mem::take(&mut rounds.waiting)
        };
        let outcome = one_round(&shared).await;
        if let Ok(FollowerIndex::Applied(index)) = &outcome {
            // Kept for the injected bug alone: a lock per round otherwise.
            if injected_bugs::enabled(InjectedBug::FollowerReadReusesIndex) {
                shared.follower_reads.rounds().previous = Some(*index);
            }
        }
        for waiter in batch {
            let _ = waiter.send(outcome.clone());
        }
    }
}

/// One call to the current leader.
async fn one_round(shared: &Shared) -> Result<FollowerIndex, LodeError> {
    let term = shared.raft.metrics().borrow().current_term;
    let Some(leader) = crate::leadership::leader_elsewhere(&shared.raft, shared.id) else {
        // Leadership moved here, or no leader is known: the reads take the
        // route of any other (`NodeService::on_leader`).
        return Ok(FollowerIndex::Whole);
    };
    let Some(cluster) = shared.cluster.get() else {
        return Ok(FollowerIndex::Whole);
    };
    let address = &leader.member.peer_address;
    let timeout = Duration::from_millis(shared.config.forward_timeout_ms);
    let asked = shared
        .peers
        .get(address)
        .call(timeout, |client, context| async move {
            client.read_index(context, cluster).await
        })
        .await;
    match asked {
        Ok(index) => index.map(FollowerIndex::Applied),
        Err(CallFailure::Transport(detail)) => {
            tracing::info!(
                leader = leader.id,
                term,
                %detail,
                "the leader did not answer a read-index call; reads go to it whole for a while"
            );
            let until = tokio::time::Instant::now() + Duration::from_millis(READ_INDEX_RETRY_MS);
            shared.follower_reads.rounds().refused = Some((leader.id, term, until));
            Ok(FollowerIndex::Whole)
        }
        Err(CallFailure::Dial(_)) => Err(LodeError::NotLeader { hint: leader.hint() }),
        Err(failure) => Err(failure.into_error(address)),
    }
}
