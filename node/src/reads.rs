//! Linearizable reads by read index, with concurrent reads coalesced into
//! one quorum round.
//!
//! openraft 0.9 sends a heartbeat round per `get_read_log_id` call. Here one
//! task runs rounds back to back: every read that arrived before a round
//! starts shares that round's result; a read arriving during a round waits
//! for the next one, because a round that began before the read cannot prove
//! that no newer leader existed when the read began.

use lode_client::LodeError;
use lode_raft_store::injected_bugs::{self, InjectedBug};
use lode_raft_store::TypeConfig;
use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::Raft;
use tokio::sync::{mpsc, oneshot};

/// Most reads waiting for a round unless configured otherwise
/// (`NodeConfig::reads_waiting_max`); beyond it callers get `unavailable`.
pub const READS_WAITING_MAX_DEFAULT: usize = 65_536;

type Waiter = oneshot::Sender<Result<u64, LodeError>>;

/// A handle to the coalescing task.
#[derive(Clone)]
pub struct ReadIndex {
    requests: mpsc::Sender<Waiter>,
    waiting_max: usize,
}

/// Maps openraft's leadership errors onto the wire's error kinds.
pub fn leader_error(error: RaftError<u64, CheckIsLeaderError<u64, lode_raft_store::Member>>) -> LodeError {
    match error {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward)) => crate::leadership::not_leader(forward),
        // openraft's own text for this error spells out the whole membership,
        // addresses included; the members that did answer are what a caller
        // can act on.
        RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(quorum)) => LodeError::Unavailable(format!(
            "no quorum confirmed the leader in time; members that answered: {:?}",
            quorum.got
        )),
        RaftError::Fatal(fatal) => LodeError::Unavailable(format!("raft stopped: {fatal}")),
    }
}

/// The refusal of a read past the waiting reads' limit, on a leader or a
/// follower.
pub fn too_many_waiting(waiting_max: usize) -> LodeError {
    LodeError::Unavailable(format!(
        "{waiting_max} linearizable reads already wait for a read-index round (reads_waiting_max = {waiting_max})"
    ))
}

/// The injected bug's shortcut: a member that believes it leads answers
/// from its applied state without asking a quorum.
fn believed_leader_applied(raft: &Raft<TypeConfig>) -> Option<u64> {
    let metrics = raft.metrics();
    let metrics = metrics.borrow();
    (metrics.state == openraft::ServerState::Leader)
        .then(|| metrics.last_applied.map(|log_id| log_id.index).unwrap_or(0))
}

/// The last log index this member held when it first served a read as
/// leader of the current term.
///
/// openraft 0.9 lets a leader that restarts within its term lead again at
/// once, and its read index is then the larger of its term's first entry
/// and the commit index it recovered, which can be older than writes it
/// acknowledged before the restart: the deterministic simulation caught
/// such a leader serving a value deleted just before it crashed. Every
/// write this member acknowledged is in its log, so waiting for the log
/// held at the start of its leadership closes the gap; for a newly elected
/// leader the floor is its blank entry, which openraft waits for anyway.
#[derive(Default)]
struct TermFloor {
    term: Option<u64>,
    index: u64,
}

impl TermFloor {
    fn index(&mut self, raft: &Raft<TypeConfig>) -> u64 {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        if self.term != Some(metrics.current_term) {
            self.term = Some(metrics.current_term);
            self.index = metrics.last_log_index.unwrap_or(0);
        }
        self.index
    }
}

impl ReadIndex {
    /// Starts the coalescing task for `raft`, with room for `waiting_max`
    /// reads waiting for a round (at least one).
    pub fn start(raft: Raft<TypeConfig>, waiting_max: usize) -> Self {
        let waiting_max = waiting_max.max(1);
        let (requests, mut receiver) = mpsc::channel::<Waiter>(waiting_max);
        tokio::spawn(async move {
            let mut term_floor = TermFloor::default();
            while let Some(first) = receiver.recv().await {
                let mut waiters = vec![first];
                while let Ok(waiter) = receiver.try_recv() {
                    waiters.push(waiter);
                }
                if injected_bugs::enabled(InjectedBug::StaleLeaderReads) {
                    if let Some(applied) = believed_leader_applied(&raft) {
                        for waiter in waiters {
                            let _ = waiter.send(Ok(applied));
                        }
                        continue;
                    }
                }
                let result = match raft.get_read_log_id().await {
                    Ok((read_log_id, _applied)) => {
                        let read_index = read_log_id.map(|log_id| log_id.index).unwrap_or(0);
                        Ok(read_index.max(term_floor.index(&raft)))
                    }
                    Err(error) => Err(leader_error(error)),
                };
                for waiter in waiters {
                    // A waiter that gave up (timed out) has dropped its end.
                    let _ = waiter.send(result.clone());
                }
            }
        });
        Self { requests, waiting_max }
    }

    /// The index a linearizable read must wait for, confirmed by a quorum
    /// round that started after this call.
    pub async fn read_index(&self) -> Result<u64, LodeError> {
        let (sender, receiver) = oneshot::channel();
        self.requests
            .try_send(sender)
            .map_err(|_| too_many_waiting(self.waiting_max))?;
        receiver
            .await
            .map_err(|_| LodeError::Unavailable("the read-index task stopped".to_owned()))?
    }
}
