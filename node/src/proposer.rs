//! Groups concurrent client commands into one Raft log entry.
//!
//! openraft 0.9 appends (and fsyncs) each proposed entry on its own, so one
//! command per entry would cap writes at one fsync each. The proposer
//! collects the commands that arrive while earlier proposals are in flight
//! and proposes them together: one append, one fsync, one replication round
//! for all of them. Two commands that write the same key never share an
//! entry (a version, the entry's index, must name one value of a key), and a
//! command whose keys are not known before apply (a sweep) goes alone. A
//! command that finds nothing in flight and nothing waiting is proposed
//! from its caller's task: a lone writer's put then crosses no task of the
//! proposer's on its way to Raft and back.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lode_client::error::MutationRecovery;
use lode_client::LodeError;
use lode_raft_store::command::{Command, CommandOutcome, CommandV1, OpId, Operation, Proposal, Retention};
use lode_raft_store::{Member, TypeConfig};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{Raft, ServerState};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use crate::clock::MemberClock;

/// Most commands in one log entry.
pub const PROPOSAL_COMMANDS_MAX: usize = 512;
/// Encoded bytes after which a log entry takes no more commands (one
/// command may carry it past, by at most `request_bytes_max`).
pub const PROPOSAL_BYTES_MAX: usize = 2 << 20;
/// Most proposals appended but not yet applied; more in flight means smaller
/// groups, fewer means less pipelining.
pub const PROPOSALS_IN_FLIGHT_MAX: usize = 4;
/// Times the proposer lets other tasks run, while earlier proposals are
/// in flight, for commands to gather into the next entry.
pub const GATHER_YIELDS_MAX: usize = 4;
/// Commands waiting past which the proposer proposes at once.
pub const GATHER_COMMANDS_MIN: usize = 8;
/// Most commands waiting for a proposal; beyond it writers get `unavailable`.
pub const COMMANDS_WAITING_MAX: usize = 65_536;
/// Most encoded bytes of commands waiting for a proposal; beyond it writers
/// get `unavailable`.
pub const COMMANDS_WAITING_BYTES_MAX: usize = 256 << 20;
/// The unit the waiting bytes are counted in.
const WAITING_BYTES_UNIT: usize = 1024;
const _: () = assert!(COMMANDS_WAITING_BYTES_MAX / WAITING_BYTES_UNIT <= u32::MAX as usize);
const _: () = assert!(lode_types::limits::REQUEST_BYTES_MAX < COMMANDS_WAITING_BYTES_MAX);
/// How often a waiting proposal checks that this member still leads in the
/// term it was proposed in.
pub const LEADERSHIP_CHECK_INTERVAL: Duration = Duration::from_millis(100);

type Reply = oneshot::Sender<Result<CommandOutcome, LodeError>>;

struct Waiting {
    command: Command,
    /// `None`: the command's keys are unknown before apply; it goes alone.
    keys: Option<Vec<Vec<u8>>>,
    /// The command's encoded length.
    bytes: usize,
    /// Its share of `commands_waiting_bytes_max`, given back once it is
    /// proposed.
    _memory: Option<tokio::sync::OwnedSemaphorePermit>,
    reply: Reply,
}

/// A handle to the proposing task of one node.
#[derive(Clone)]
pub struct Proposer {
    raft: Raft<TypeConfig>,
    retention: Retention,
    waiting: mpsc::Sender<Waiting>,
    waiting_bytes: Arc<Semaphore>,
    clock: MemberClock,
    last_stamp_micros: Arc<AtomicU64>,
    /// While true, commands wait instead of being proposed (a leader
    /// handing off its leadership).
    held: Arc<watch::Sender<bool>>,
    /// Proposals handed to Raft and not yet answered.
    proposing: Arc<AtomicUsize>,
}

/// Holds the proposer's commands back while it lives; they go on (to this
/// member's Raft, which forwards them once it no longer leads) when it is
/// dropped.
pub struct Hold {
    held: Arc<watch::Sender<bool>>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.held.send_replace(false);
    }
}

/// Counts a proposal as in flight while it lives.
struct Proposing(Arc<AtomicUsize>);

impl Proposing {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count.clone())
    }
}

impl Drop for Proposing {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Maps openraft's write errors onto the wire's error kinds.
pub fn write_error(error: RaftError<u64, ClientWriteError<u64, Member>>) -> LodeError {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => crate::leadership::not_leader(forward),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(error)) => LodeError::Invalid(error.to_string()),
        RaftError::Fatal(fatal) => LodeError::Unavailable(format!("raft stopped: {fatal}")),
    }
}

impl Proposer {
    /// Starts the proposing task for `raft`.
    pub fn start(raft: Raft<TypeConfig>, retention: Retention, clock: MemberClock) -> Self {
        let (waiting, receiver) = mpsc::channel(COMMANDS_WAITING_MAX);
        let held = Arc::new(watch::Sender::new(false));
        let proposing = Arc::new(AtomicUsize::new(0));
        let state = RunState {
            held: held.subscribe(),
            proposing: proposing.clone(),
        };
        tokio::spawn(run(raft.clone(), receiver, retention, state));
        Self {
            raft,
            retention,
            waiting,
            waiting_bytes: Arc::new(Semaphore::new(COMMANDS_WAITING_BYTES_MAX / WAITING_BYTES_UNIT)),
            clock,
            last_stamp_micros: Arc::new(AtomicU64::new(0)),
            held,
            proposing,
        }
    }

    /// Holds commands back until the returned guard is dropped.
    pub fn hold(&self) -> Hold {
        self.held.send_replace(true);
        Hold {
            held: self.held.clone(),
        }
    }

    /// Proposals handed to Raft and not yet answered.
    pub fn proposals_in_flight(&self) -> usize {
        self.proposing.load(Ordering::Acquire)
    }

    /// Counts a proposal of one command as in flight if a command now
    /// would be proposed alone anyway: no proposal in flight, none waiting
    /// and commands not held back. Only one caller at a time finds the
    /// proposer so; the others queue behind its proposal and gather. A
    /// command queued meanwhile is concurrent with this one, so either may
    /// go first.
    fn start_alone(&self) -> Option<Proposing> {
        if *self.held.borrow() || self.waiting.capacity() != self.waiting.max_capacity() {
            return None;
        }
        self.proposing
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Proposing(self.proposing.clone()))
    }

    /// The leader's time for a new command: `max(now, last stamped + 1)`.
    fn stamp(&self) -> u64 {
        let now = self.clock.now_micros();
        let previous = self
            .last_stamp_micros
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(now.max(last + 1)))
            .unwrap_or(0);
        now.max(previous + 1)
    }

    /// Proposes the command of `operations` (with `op_id` when a client
    /// sent one), stamped with the leader's time, and waits for its outcome
    /// once applied.
    pub async fn propose(&self, op_id: Option<OpId>, operations: Vec<Operation>) -> Result<CommandOutcome, LodeError> {
        self.propose_checked(op_id, operations, None).await
    }

    /// [`Proposer::propose`] for a caller whose grants were checked at
    /// `grants_revision`, if they were.
    pub async fn propose_checked(
        &self,
        op_id: Option<OpId>,
        operations: Vec<Operation>,
        grants_revision: Option<u64>,
    ) -> Result<CommandOutcome, LodeError> {
        let body = CommandV1 {
            op_id,
            time_micros: self.stamp(),
            operations,
        };
        let command = match grants_revision {
            None => Command::V1(body),
            Some(grants_revision) => Command::V2 {
                command: body,
                grants_revision,
            },
        };
        let bytes = command.encoded_bytes();
        let request_bytes_max = lode_types::limits::REQUEST_BYTES_MAX;
        if bytes > request_bytes_max {
            return Err(LodeError::Invalid(format!(
                "a write of {bytes} encoded bytes is over {request_bytes_max} (request_bytes_max)"
            )));
        }
        if let Some(proposing) = self.start_alone() {
            // Nothing to gather it with: proposed from the caller's task,
            // without the hand-offs to the proposing task, to the
            // proposal's own task and back. Boxed, because inline Raft's
            // write future would grow every call's future past
            // `call_future_bytes_max` (`service.rs`).
            let mut outcomes = Box::pin(propose_entry(&self.raft, vec![command], self.retention)).await;
            drop(proposing);
            return outcomes.pop().unwrap_or_else(|| Err(outcome_mismatch()));
        }
        // Only a queued command's keys are needed: they decide its group.
        let keys = command.written_keys();
        let units = bytes.div_ceil(WAITING_BYTES_UNIT).max(1) as u32;
        let memory = self.waiting_bytes.clone().try_acquire_many_owned(units).map_err(|_| {
            LodeError::Unavailable(format!(
                "over {COMMANDS_WAITING_BYTES_MAX} bytes of writes waiting (commands_waiting_bytes_max)"
            ))
        })?;
        let (reply, outcome) = oneshot::channel();
        let waiting = Waiting {
            command,
            keys,
            bytes,
            _memory: Some(memory),
            reply,
        };
        self.waiting.try_send(waiting).map_err(|_| {
            LodeError::Unavailable(format!(
                "over {COMMANDS_WAITING_MAX} writes waiting (commands_waiting_max)"
            ))
        })?;
        outcome
            .await
            .map_err(|_| LodeError::Unavailable("the proposer stopped".to_owned()))?
    }
}

/// Takes from `queue` the commands that can share one entry, in order,
/// leaving the rest (in order) for the next entry.
fn take_group(queue: &mut VecDeque<Waiting>) -> Vec<Waiting> {
    let mut group: Vec<Waiting> = Vec::new();
    let mut keys_taken: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut op_ids_taken: BTreeSet<OpId> = BTreeSet::new();
    let mut bytes_taken = 0;
    let mut deferred = VecDeque::new();
    while let Some(waiting) = queue.pop_front() {
        if group.len() >= PROPOSAL_COMMANDS_MAX || bytes_taken >= PROPOSAL_BYTES_MAX {
            deferred.push_back(waiting);
            continue;
        }
        let fits = match &waiting.keys {
            None => group.is_empty(),
            Some(keys) => {
                let alone_in_group = group.first().is_some_and(|first| first.keys.is_none());
                let op_id_free = waiting
                    .command
                    .op_id()
                    .is_none_or(|op_id| !op_ids_taken.contains(&op_id));
                !alone_in_group && op_id_free && keys.iter().all(|key| !keys_taken.contains(key))
            }
        };
        if !fits {
            deferred.push_back(waiting);
            continue;
        }
        if let Some(keys) = &waiting.keys {
            keys_taken.extend(keys.iter().cloned());
        }
        if let Some(op_id) = waiting.command.op_id() {
            op_ids_taken.insert(op_id);
        }
        bytes_taken += waiting.bytes;
        group.push(waiting);
    }
    *queue = deferred;
    group
}

/// Moves the commands that have arrived into `queue`, up to two entries'
/// worth.
fn drain(receiver: &mut mpsc::Receiver<Waiting>, queue: &mut VecDeque<Waiting>) {
    while queue.len() < PROPOSAL_COMMANDS_MAX * 2 {
        match receiver.try_recv() {
            Ok(waiting) => queue.push_back(waiting),
            Err(_) => break,
        }
    }
}

/// What the proposing task shares with its handle.
struct RunState {
    held: watch::Receiver<bool>,
    proposing: Arc<AtomicUsize>,
}

async fn run(raft: Raft<TypeConfig>, mut receiver: mpsc::Receiver<Waiting>, retention: Retention, mut state: RunState) {
    let in_flight = Arc::new(Semaphore::new(PROPOSALS_IN_FLIGHT_MAX));
    let mut queue: VecDeque<Waiting> = VecDeque::new();
    loop {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        if queue.is_empty() {
            match receiver.recv().await {
                Some(waiting) => queue.push_back(waiting),
                None => return,
            }
        }
        drain(&mut receiver, &mut queue);
        // While other proposals are in flight this one adds no latency
        // by letting the tasks that are decoding writers' requests run
        // first: their commands join it instead of each taking an entry
        // (an append, a sync and a replication round) of its own.
        let mut yields = 0;
        while yields < GATHER_YIELDS_MAX
            && queue.len() < GATHER_COMMANDS_MIN
            && state.proposing.load(Ordering::Acquire) > 0
        {
            tokio::task::yield_now().await;
            drain(&mut receiver, &mut queue);
            yields += 1;
        }
        while *state.held.borrow_and_update() {
            if state.held.changed().await.is_err() {
                return;
            }
        }
        let group = take_group(&mut queue);
        let raft = raft.clone();
        let proposing = Proposing::start(&state.proposing);
        tokio::spawn(async move {
            let _proposing = proposing;
            let (commands, replies): (Vec<Command>, Vec<Reply>) = group
                .into_iter()
                .map(|waiting| (waiting.command, waiting.reply))
                .unzip();
            let outcomes = propose_entry(&raft, commands, retention).await;
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                // A writer that gave up has dropped its receiver.
                let _ = reply.send(outcome);
            }
            drop(permit);
        });
    }
}

/// Proposes `commands` as one entry and answers each one's outcome, in
/// order, once the entry applies or this member stops leading.
async fn propose_entry(
    raft: &Raft<TypeConfig>,
    commands: Vec<Command>,
    retention: Retention,
) -> Vec<Result<CommandOutcome, LodeError>> {
    let count = commands.len();
    let op_ids: Vec<Option<OpId>> = commands.iter().map(Command::op_id).collect();
    let term = raft.metrics().borrow().current_term;
    let written = tokio::select! {
        biased;
        written = raft.client_write(Proposal { commands: commands.into(), retention }) => written,
        () = leadership_lost(raft, term) => {
            // openraft answers a proposal when its entry applies or is
            // truncated, but not when a snapshot install replaces the log
            // it was in: without this the proposal, and its in-flight slot,
            // would wait forever. The entry may still commit under the next
            // leader.
            return op_ids.into_iter().map(|op_id| Err(abandoned(op_id))).collect();
        }
    };
    match written {
        Ok(response) if response.data.outcomes.len() == count => response.data.outcomes.into_iter().map(Ok).collect(),
        Ok(response) => {
            tracing::error!(
                commands = count,
                outcomes = response.data.outcomes.len(),
                "applied proposal answered a different number of outcomes"
            );
            (0..count).map(|_| Err(outcome_mismatch())).collect()
        }
        Err(error) => {
            let error = write_error(error);
            (0..count).map(|_| Err(error.clone())).collect()
        }
    }
}

/// The answer to a command whose entry applied with a different number of
/// outcomes than it had commands.
fn outcome_mismatch() -> LodeError {
    LodeError::Unavailable("proposal outcome mismatch".to_owned())
}

/// Returns once this member no longer leads in `term`. Polls, because a
/// metrics watch wakes its waiters in random order, which the deterministic
/// simulation cannot replay.
async fn leadership_lost(raft: &Raft<TypeConfig>, term: u64) {
    loop {
        tokio::time::sleep(LEADERSHIP_CHECK_INTERVAL).await;
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        if metrics.current_term != term || metrics.state != ServerState::Leader {
            return;
        }
    }
}

/// The answer to a command whose proposal lost its leader before an outcome.
fn abandoned(op_id: Option<OpId>) -> LodeError {
    let detail = "the leader lost leadership before the proposal's outcome was known".to_owned();
    match op_id {
        Some(op_id) => LodeError::AmbiguousMutation {
            recovery: MutationRecovery::RetrySameOperation { op_id: op_id.0 },
            detail,
        },
        None => LodeError::Unavailable(detail),
    }
}

#[cfg(test)]
mod tests {
    use lode_raft_store::command::{CommandV1, Encoding, Operation};

    use super::*;

    fn waiting(
        op_id: Option<u128>,
        operations: Vec<Operation>,
    ) -> (Waiting, oneshot::Receiver<Result<CommandOutcome, LodeError>>) {
        let command = Command::V1(CommandV1 {
            op_id: op_id.map(OpId),
            time_micros: 0,
            operations,
        });
        let (reply, receiver) = oneshot::channel();
        let keys = command.written_keys();
        let bytes = command.encoded_bytes();
        let waiting = Waiting {
            command,
            keys,
            bytes,
            _memory: None,
            reply,
        };
        (waiting, receiver)
    }

    fn set(key: &str) -> Operation {
        Operation::Set {
            namespace: "ns".to_owned(),
            key: key.as_bytes().to_vec(),
            value: Vec::new(),
            encoding: Encoding::Bytes,
            expires_at_micros: None,
            precondition: None,
            fence: None,
            session: None,
        }
    }

    fn sweep() -> Operation {
        Operation::SweepExpired { entries_max: 10 }
    }

    fn op_ids(group: &[Waiting]) -> Vec<Option<u128>> {
        group
            .iter()
            .map(|waiting| waiting.command.op_id().map(|op_id| op_id.0))
            .collect()
    }

    #[test]
    fn groups_never_share_a_key_or_an_op_id_and_sweeps_go_alone() {
        let mut queue = VecDeque::new();
        let mut receivers = Vec::new();
        for (op_id, operations) in [
            (Some(1), vec![set("a")]),
            (Some(2), vec![set("b"), set("c")]),
            (Some(3), vec![set("c")]),
            (Some(1), vec![set("d")]),
            (None, vec![sweep()]),
            (Some(4), vec![set("e")]),
        ] {
            let (item, receiver) = waiting(op_id, operations);
            queue.push_back(item);
            receivers.push(receiver);
        }
        // "c" is taken by 2 and op id 1 by the first; the sweep needs an empty group.
        assert_eq!(op_ids(&take_group(&mut queue)), vec![Some(1), Some(2), Some(4)]);
        assert_eq!(op_ids(&take_group(&mut queue)), vec![Some(3), Some(1)]);
        assert_eq!(op_ids(&take_group(&mut queue)), vec![None]);
        assert!(queue.is_empty());
    }

    #[test]
    fn a_group_stops_taking_commands_at_the_byte_limit() {
        let mut queue = VecDeque::new();
        let mut receivers = Vec::new();
        let big = |index: usize| Operation::Set {
            namespace: "ns".to_owned(),
            key: format!("key-{index}").into_bytes(),
            value: vec![0; 600_000],
            encoding: Encoding::Bytes,
            expires_at_micros: None,
            precondition: None,
            fence: None,
            session: None,
        };
        for index in 0..6 {
            let (item, receiver) = waiting(Some(index), vec![big(index as usize)]);
            queue.push_back(item);
            receivers.push(receiver);
        }
        // 4 x 600 kB passes 2 MiB: the fourth is the last one taken.
        assert_eq!(take_group(&mut queue).len(), 4);
        assert_eq!(take_group(&mut queue).len(), 2);
    }

    #[test]
    fn a_group_holds_at_most_the_limit() {
        let mut queue = VecDeque::new();
        let mut receivers = Vec::new();
        for index in 0..PROPOSAL_COMMANDS_MAX + 3 {
            let (item, receiver) = waiting(Some(index as u128), vec![set(&format!("key-{index}"))]);
            queue.push_back(item);
            receivers.push(receiver);
        }
        assert_eq!(take_group(&mut queue).len(), PROPOSAL_COMMANDS_MAX);
        assert_eq!(take_group(&mut queue).len(), 3);
    }

    /// A group is bounded by what its commands weigh encoded, not by the
    /// bytes of their keys and values: writes of many tiny operations
    /// weigh several times their payload, and grouped by payload an entry
    /// of them came to ~8 MiB, so 16 entries overflowed a peer frame.
    #[test]
    fn a_group_is_bounded_by_its_encoded_size() {
        let mut queue = VecDeque::new();
        let mut receivers = Vec::new();
        for writer in 0..400 {
            let operations = (0..1000).map(|index| set(&format!("{writer:03}-{index:04}"))).collect();
            let (waiting, receiver) = waiting(Some(writer), operations);
            queue.push_back(waiting);
            receivers.push(receiver);
        }
        let largest = queue.iter().map(|waiting| waiting.bytes).max().unwrap_or(0);
        let group = take_group(&mut queue);
        let encoded: usize = group.iter().map(|waiting| waiting.command.encoded_bytes()).sum();
        assert!(group.len() > 1);
        assert!(
            encoded <= PROPOSAL_BYTES_MAX + largest,
            "{} commands encode to {encoded} bytes",
            group.len()
        );
    }
}
