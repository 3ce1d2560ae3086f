//! What clients did and saw during a run, in the order the simulation's
//! single thread observed it. The checkers read nothing else (besides the
//! replicas' final state), so a history is the whole evidence of a run.

use std::cell::RefCell;
use std::rc::Rc;

/// A point in the run's total order of client events. Events happen on one
/// thread, so "completed before invoked" is exact, not approximate.
pub type Tick = u64;

/// A key-value call a client made.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    Get {
        key: String,
    },
    Set {
        key: String,
        value: String,
    },
    /// Set only while the key's version is `expected` (`None`: absent).
    Cas {
        key: String,
        expected: Option<u64>,
        value: String,
    },
    Delete {
        key: String,
    },
}

impl Call {
    pub fn key(&self) -> &str {
        match self {
            Call::Get { key } | Call::Set { key, .. } | Call::Cas { key, .. } | Call::Delete { key } => key,
        }
    }

    /// The value the call writes, if it writes one.
    pub fn written_value(&self) -> Option<&str> {
        match self {
            Call::Set { value, .. } | Call::Cas { value, .. } => Some(value),
            Call::Get { .. } | Call::Delete { .. } => None,
        }
    }
}

/// How a call ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A read's answer: the value and its version, or absent.
    Read(Option<(String, u64)>),
    /// A write applied at this version (log index).
    Written { version: u64 },
    /// A conditional write refused: the key's version was `current`
    /// (`None`: absent) instead of the expected one.
    Conflict { current: Option<u64> },
    /// A delete applied; whether a live value was there.
    Deleted { existed: bool },
    /// The call may or may not have taken effect (timeout, lost answer).
    Unknown,
    /// The call certainly had no effect (a read that failed).
    Failed,
}

/// One client call from invocation to completion.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Operation {
    pub client: usize,
    pub call: Call,
    pub invoked: Tick,
    /// Simulated time at invocation, for reading a failing history against
    /// the faults.
    pub invoked_at: std::time::Duration,
    /// `None` while pending or when the outcome is unknown: the call may
    /// take effect at any later point.
    pub completed: Option<Tick>,
    pub outcome: Outcome,
}

/// A lease acquisition that was granted.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Grant {
    pub client: usize,
    pub token: u64,
    pub invoked: Tick,
    pub completed: Tick,
}

/// A write fenced by a lease token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FencedWrite {
    pub client: usize,
    pub token: u64,
    pub value: String,
    pub invoked: Tick,
    pub completed: Option<Tick>,
    /// `Written` when accepted, `Failed` when refused (a lost lease or a
    /// changed version), `Unknown` when the answer never came.
    pub outcome: Outcome,
}

/// How a queue call ended, as far as its caller knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Known {
    Acknowledged,
    /// Certainly not applied.
    Refused,
    /// May or may not have been applied.
    Unknown,
}

/// What queue clients did and saw; payloads name messages (each is unique).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueEvent {
    /// Recorded when the enqueue is sent (as `Unknown`), and updated when
    /// its answer comes: a consumer may claim the message before that.
    Enqueued { payload: String, known: Known },
    /// A consumer received this delivery of the message from a claim sent
    /// at `invoked` (the answer may come late: the claim was granted
    /// between the two).
    Claimed {
        payload: String,
        attempt: u32,
        invoked: Tick,
    },
    /// A consumer ended a delivery; `answer` is the cluster's, when it came
    /// (at `completed`).
    Finished {
        completed: Tick,
        payload: String,
        attempt: u32,
        delivered: bool,
        answer: Option<lode_client::queue::FinishedAs>,
    },
    /// Read at the end of the run: whether the message's undelivered key
    /// holds its payload.
    DeadLetter { payload: String, written: bool },
    /// Claimed at the end of the run, after consumers had drained the
    /// queue: a message that was still there.
    Leftover { payload: String },
}

/// Everything recorded during one run.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub operations: Vec<Operation>,
    pub grants: Vec<Grant>,
    pub fenced_writes: Vec<FencedWrite>,
    /// The tenant role's grants as the grantor changed them, each at the
    /// log index it applied at.
    pub role_changes: Vec<RoleChange>,
    /// The tenant's writes and how they ended.
    pub tenant_writes: Vec<TenantWrite>,
    /// Queue events in the order they happened.
    pub queue: Vec<QueueEvent>,
    /// The bulk writer's writes (storage runs only), in order.
    pub bulk_writes: Vec<crate::bulk_workload::BulkWrite>,
    /// What each actor last did: diagnostics for a run that does not
    /// settle, read by no checker.
    pub activity: crate::activity::Activity,
    pub(crate) next_tick: Tick,
}

impl History {
    /// The next point in the total order.
    pub fn tick(&mut self) -> Tick {
        self.next_tick += 1;
        self.next_tick
    }

    /// Every value any client tried to write, read back or not.
    pub fn written_values(&self) -> impl Iterator<Item = &str> {
        self.operations
            .iter()
            .filter_map(|operation| operation.call.written_value())
            .chain(self.fenced_writes.iter().map(|write| write.value.as_str()))
    }
}

/// One acknowledged change of the tenant role: from log index `index` on,
/// it may write the guarded namespace or not.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RoleChange {
    pub index: u64,
    pub writes_guarded: bool,
}

/// A write of the tenant's that touched the guarded namespace (a set, or a
/// copy into it), and how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TenantWrite {
    pub value: String,
    pub copy: bool,
    pub outcome: TenantOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TenantOutcome {
    /// Applied at this log index.
    Applied {
        index: u64,
    },
    Forbidden,
    /// Refused for another reason; certainly not applied.
    Refused,
    Unknown,
}

/// The history shared by every client of one simulation (one thread).
pub type SharedHistory = Rc<RefCell<History>>;

/// Records an invocation and returns its slot, to be completed later.
pub fn invoke(history: &SharedHistory, client: usize, call: Call) -> usize {
    let mut history = history.borrow_mut();
    history.activity.calling(client, format!("{call:?}"), crate::now());
    let invoked = history.tick();
    history.operations.push(Operation {
        client,
        call,
        invoked,
        invoked_at: crate::now(),
        completed: None,
        outcome: Outcome::Unknown,
    });
    history.operations.len() - 1
}

/// Records a queue event; returns its slot.
pub fn record_queue(history: &SharedHistory, event: QueueEvent) -> usize {
    let mut history = history.borrow_mut();
    history.queue.push(event);
    history.queue.len() - 1
}

/// Records the answer to the enqueue recorded in `slot`.
pub fn answer_enqueue(history: &SharedHistory, slot: usize, answer: Known) {
    if let Some(QueueEvent::Enqueued { known, .. }) = history.borrow_mut().queue.get_mut(slot) {
        *known = answer;
    }
}

/// Records how the operation in `slot` ended.
pub fn complete(history: &SharedHistory, slot: usize, outcome: Outcome) {
    let mut history = history.borrow_mut();
    let completed = (outcome != Outcome::Unknown).then(|| history.tick());
    let operation = &mut history.operations[slot];
    operation.completed = completed;
    let client = operation.client;
    history.activity.answered(client, format!("{outcome:?}"), crate::now());
    history.operations[slot].outcome = outcome;
}

/// Records that `client` begins `call` (for the activity report only).
pub fn calling(history: &SharedHistory, client: usize, call: impl Into<String>) {
    history.borrow_mut().activity.calling(client, call.into(), crate::now());
}

/// Records the answer to `client`'s last call (for the activity report only).
pub fn answered(history: &SharedHistory, client: usize, answer: impl Into<String>) {
    history
        .borrow_mut()
        .activity
        .answered(client, answer.into(), crate::now());
}

/// Records that `client` has finished its part of the run.
pub fn finished(history: &SharedHistory, client: usize) {
    history.borrow_mut().activity.finished(client, crate::now());
}
