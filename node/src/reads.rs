//! Linearizable reads by read index, with concurrent reads coalesced into
//! one quorum round.
//!
//! openraft 0.9 sends a heartbeat round per `get_read_log_id` call. Here one
//! task runs rounds back to back: every read that arrived before a round
//! starts shares that round's result; a read arriving during a round waits
//! for the next one, because a round that began before the read cannot prove
//! that no newer leader existed when the read began.

use lode_client::error::LeaderHint;
use lode_client::LodeError;
use lode_raft_store::TypeConfig;
use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::Raft;
use tokio::sync::{mpsc, oneshot};

/// Most reads waiting for a round; beyond it callers get `unavailable`.
pub const READS_WAITING_MAX: usize = 65_536;

type Waiter = oneshot::Sender<Result<u64, LodeError>>;

/// A handle to the coalescing task.
#[derive(Clone)]
pub struct ReadIndex {
    requests: mpsc::Sender<Waiter>,
}

/// Maps openraft's leadership errors onto the wire's error kinds.
pub fn leader_error(error: RaftError<u64, CheckIsLeaderError<u64, openraft::BasicNode>>) -> LodeError {
    match error {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward)) => LodeError::NotLeader {
            hint: match (forward.leader_id, forward.leader_node) {
                (Some(id), Some(node)) => Some(LeaderHint { id, address: node.addr }),
                _ => None,
            },
        },
        RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(quorum)) => {
            LodeError::Unavailable(format!("no quorum confirmed the leader: {quorum}"))
        }
        RaftError::Fatal(fatal) => LodeError::Unavailable(format!("raft stopped: {fatal}")),
    }
}

impl ReadIndex {
    /// Starts the coalescing task for `raft`.
    pub fn start(raft: Raft<TypeConfig>) -> Self {
        let (requests, mut receiver) = mpsc::channel::<Waiter>(READS_WAITING_MAX);
        tokio::spawn(async move {
            while let Some(first) = receiver.recv().await {
                let mut waiters = vec![first];
                while let Ok(waiter) = receiver.try_recv() {
                    waiters.push(waiter);
                }
                let result = match raft.get_read_log_id().await {
                    Ok((read_log_id, _applied)) => Ok(read_log_id.map(|log_id| log_id.index).unwrap_or(0)),
                    Err(error) => Err(leader_error(error)),
                };
                for waiter in waiters {
                    // A waiter that gave up (timed out) has dropped its end.
                    let _ = waiter.send(result.clone());
                }
            }
        });
        Self { requests }
    }

    /// The index a linearizable read must wait for, confirmed by a quorum
    /// round that started after this call.
    pub async fn read_index(&self) -> Result<u64, LodeError> {
        let (sender, receiver) = oneshot::channel();
        self.requests.try_send(sender).map_err(|_| {
            LodeError::Unavailable(format!("over {READS_WAITING_MAX} reads waiting (reads_waiting_max)"))
        })?;
        receiver
            .await
            .map_err(|_| LodeError::Unavailable("the read-index task stopped".to_owned()))?
    }
}
