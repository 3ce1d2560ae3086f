//! Deterministic apply: the state change one log entry makes, computed from
//! the stored state, the entry's commands and its log id alone.
//!
//! Nothing here reads a clock, randomness or the environment. Every
//! time-based decision uses the command's time, so two replicas that apply
//! the same log hold byte-identical state.
//!
//! One entry carries a [`Proposal`]: commands from different clients that
//! the leader grouped so that one fsync commits them all. Each command is
//! atomic on its own and sees the effects of the commands before it. All of
//! an entry's writes, and `last_applied`, go to disk in one batch.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::command::{
    ChangeEvent, ChangeKind, Command, CommandOutcome, CommandV1, Encoding, OpId, Operation, OperationResult,
    Precondition, Proposal, Rejection, Selector, SessionLink,
};
use crate::engine::{Engine, Space, WriteBatch};
use crate::entry::{SourceId, StoredEntry};
use crate::error::{decode, encode, EngineError};
use crate::injected_bugs::{self, InjectedBug};
use crate::keys::{self, meta};
use crate::limits::{CHANGE_TRIM_PER_APPLY_MAX, DEDUP_PRUNE_PER_APPLY_MAX};
use crate::queue;

/// Where an entry sits in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub term: u64,
    pub index: u64,
}

/// A stored dedup record: the outcome to return for a repeated op id.
#[derive(Serialize, Deserialize)]
struct DedupRecord {
    time_micros: u64,
    outcome: CommandOutcome,
}

/// The state as the entry being applied sees it: the engine, plus what the
/// entry's earlier commands wrote (`settled`), plus what the current command
/// has written so far (`pending`, dropped if the command is rejected).
pub(crate) struct Overlay<'a, E: Engine> {
    engine: &'a E,
    settled: BTreeMap<Vec<u8>, Option<StoredEntry>>,
    pending: BTreeMap<Vec<u8>, Option<StoredEntry>>,
    /// Entry keys written by settled commands: a key is written at most once
    /// per log entry, so that a version names exactly one value.
    written: BTreeSet<Vec<u8>>,
    /// Op ids of settled commands, with their outcomes.
    outcomes: BTreeMap<OpId, CommandOutcome>,
    /// The current command's time: what "live" means for change events.
    now_micros: u64,
    /// Change events of the current command, and of the settled ones.
    pending_changes: Vec<Change>,
    settled_changes: Vec<Change>,
    /// Queue messages this entry enqueued so far: the next one's sequence.
    enqueued: u32,
}

/// A change event before it has its position.
struct Change {
    namespace: String,
    key: Vec<u8>,
    kind: ChangeKind,
    old_value: Option<Vec<u8>>,
    new_value: Option<Vec<u8>>,
    encoding: Encoding,
    version: u64,
}

/// The namespace and key of a stored entry key, when it belongs to a user
/// namespace (Lode's own records start with NUL and emit no changes).
fn user_key(entry_key: &[u8]) -> Option<(String, Vec<u8>)> {
    keys::split_entry_key(entry_key).filter(|(namespace, _)| !namespace.starts_with('\0'))
}

impl<'a, E: Engine> Overlay<'a, E> {
    fn new(engine: &'a E) -> Self {
        Self {
            engine,
            settled: BTreeMap::new(),
            pending: BTreeMap::new(),
            written: BTreeSet::new(),
            outcomes: BTreeMap::new(),
            now_micros: 0,
            pending_changes: Vec::new(),
            settled_changes: Vec::new(),
            enqueued: 0,
        }
    }

    /// The sequence of the next message this entry enqueues: ids stay
    /// unique even for commands the entry refuses.
    pub(crate) fn next_message_sequence(&mut self) -> u32 {
        let sequence = self.enqueued;
        self.enqueued = self.enqueued.saturating_add(1);
        sequence
    }

    pub(crate) fn engine(&self) -> &'a E {
        self.engine
    }

    /// Keys in `[start, end)` that this entry has read or written.
    pub(crate) fn written_between(&self, start: &[u8], end: &[u8]) -> Vec<Vec<u8>> {
        let range = (
            std::ops::Bound::Included(start.to_vec()),
            std::ops::Bound::Excluded(end.to_vec()),
        );
        self.pending
            .range(range.clone())
            .chain(self.settled.range(range))
            .map(|(key, _)| key.clone())
            .collect()
    }

    pub(crate) fn get(&mut self, entry_key: &[u8]) -> Result<Option<StoredEntry>, EngineError> {
        if let Some(entry) = self.pending.get(entry_key).or_else(|| self.settled.get(entry_key)) {
            return Ok(entry.clone());
        }
        let stored = match self.engine.get(Space::Entries, entry_key)? {
            Some(bytes) => Some(decode::<StoredEntry>("entry", &bytes)?),
            None => None,
        };
        // Caching an engine read in `settled` is safe: it is what every
        // command of this entry would read.
        self.settled.insert(entry_key.to_vec(), stored.clone());
        Ok(stored)
    }

    pub(crate) fn put(
        &mut self,
        batch: &mut WriteBatch,
        entry_key: Vec<u8>,
        entry: StoredEntry,
    ) -> Result<(), EngineError> {
        let previous = self.get(&entry_key)?;
        if let Some((namespace, key)) = user_key(&entry_key) {
            let live_previous = previous
                .as_ref()
                .filter(|previous| previous.is_live_at(self.now_micros));
            // An expiry change keeps value and version: not a change of value.
            let value_changed =
                live_previous.is_none_or(|previous| previous.version != entry.version || previous.value != entry.value);
            if value_changed {
                self.pending_changes.push(Change {
                    namespace,
                    key,
                    kind: if live_previous.is_some() {
                        ChangeKind::Updated
                    } else {
                        ChangeKind::Created
                    },
                    old_value: live_previous.map(|previous| previous.value.clone()),
                    new_value: Some(entry.value.clone()),
                    encoding: entry.encoding.clone(),
                    version: entry.version,
                });
            }
        }
        if let Some(expires_at) = previous.as_ref().and_then(|previous| previous.expires_at_micros) {
            batch.delete(Space::Expiry, keys::expiry_key(expires_at, &entry_key));
        }
        if let Some(expires_at) = entry.expires_at_micros {
            batch.put(Space::Expiry, keys::expiry_key(expires_at, &entry_key), Vec::new());
        }
        batch.put(Space::Entries, entry_key.clone(), encode("entry", &entry)?);
        self.pending.insert(entry_key, Some(entry));
        Ok(())
    }

    pub(crate) fn remove(
        &mut self,
        batch: &mut WriteBatch,
        entry_key: Vec<u8>,
    ) -> Result<Option<StoredEntry>, EngineError> {
        let previous = self.get(&entry_key)?;
        let live_previous = previous
            .as_ref()
            .filter(|previous| previous.is_live_at(self.now_micros));
        if let (Some((namespace, key)), Some(live_previous)) = (user_key(&entry_key), live_previous) {
            self.pending_changes.push(Change {
                namespace,
                key,
                kind: ChangeKind::Deleted,
                old_value: Some(live_previous.value.clone()),
                new_value: None,
                encoding: live_previous.encoding.clone(),
                version: live_previous.version,
            });
        }
        if let Some(previous) = &previous {
            if let Some(expires_at) = previous.expires_at_micros {
                batch.delete(Space::Expiry, keys::expiry_key(expires_at, &entry_key));
            }
            batch.delete(Space::Entries, entry_key.clone());
        }
        self.pending.insert(entry_key, None);
        Ok(previous)
    }

    /// The first key the pending command writes that an earlier command of
    /// the entry already wrote.
    fn rewritten_key(&self) -> Option<&Vec<u8>> {
        self.pending.keys().find(|key| self.written.contains(*key))
    }

    fn settle(&mut self) {
        for (key, entry) in std::mem::take(&mut self.pending) {
            self.written.insert(key.clone());
            self.settled.insert(key, entry);
        }
        let changes = std::mem::take(&mut self.pending_changes);
        self.settled_changes.extend(changes);
    }

    fn discard(&mut self) {
        self.pending.clear();
        self.pending_changes.clear();
    }

    fn dedup_outcome(&self, op_id: OpId) -> Result<Option<CommandOutcome>, EngineError> {
        if let Some(outcome) = self.outcomes.get(&op_id) {
            return Ok(Some(outcome.clone()));
        }
        match self.engine.get(Space::Dedup, &op_id.0.to_be_bytes())? {
            Some(bytes) => Ok(Some(decode::<DedupRecord>("dedup record", &bytes)?.outcome)),
            None => Ok(None),
        }
    }
}

/// Applies one entry's proposal at `position`. `clock_micros` is the last
/// applied time; the returned outcomes carry each command's time, and the
/// last of them is the new clock.
pub fn apply_proposal<E: Engine>(
    engine: &E,
    batch: &mut WriteBatch,
    proposal: &Proposal,
    position: Position,
    clock_micros: u64,
) -> Result<(Vec<CommandOutcome>, u64), EngineError> {
    let mut overlay = Overlay::new(engine);
    let mut clock = clock_micros;
    let mut outcomes = Vec::with_capacity(proposal.commands.len());
    for command in &proposal.commands {
        let Command::V1(v1) = command;
        clock = clock.max(v1.time_micros);
        overlay.now_micros = clock;
        outcomes.push(apply_command(&mut overlay, batch, v1, position, clock)?);
    }
    if !proposal.commands.is_empty() {
        prune_dedup(engine, batch, clock, proposal.retention.dedup_micros)?;
    }
    let changes = std::mem::take(&mut overlay.settled_changes);
    record_changes(engine, batch, changes, position.index, &proposal.retention)?;
    Ok((outcomes, clock))
}

fn apply_command<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    command: &CommandV1,
    position: Position,
    time_micros: u64,
) -> Result<CommandOutcome, EngineError> {
    if let Some(op_id) = command
        .op_id
        .filter(|_| !injected_bugs::enabled(InjectedBug::SkipDedup))
    {
        if let Some(mut outcome) = overlay.dedup_outcome(op_id)? {
            outcome.deduplicated = true;
            return Ok(outcome);
        }
    }
    let result = match command.validate() {
        Err(message) => Err(Rejection::Invalid(message)),
        Ok(()) => {
            // Operations write into a scratch batch first, so a rejection
            // part-way through leaves nothing behind.
            let mut scratch = WriteBatch::default();
            let result = match failed_checks(overlay, &command.operations, time_micros)? {
                Some(indexes) => Ok(Err(Rejection::ChecksFailed { indexes })),
                None => apply_operations(overlay, &mut scratch, &command.operations, position, time_micros),
            }?;
            let result = match (result, overlay.rewritten_key()) {
                (Ok(_), Some(key)) => Err(Rejection::Invalid(format!(
                    "key {key:?} is written by two commands of log entry {}; the leader must not group them",
                    position.index
                ))),
                (result, _) => result,
            };
            if result.is_ok() {
                batch.ops.extend(scratch.ops);
                overlay.settle();
            } else {
                overlay.discard();
            }
            result
        }
    };
    let outcome = CommandOutcome {
        index: position.index,
        term: position.term,
        time_micros,
        result,
        deduplicated: false,
    };
    if let Some(op_id) = command.op_id {
        let record = DedupRecord {
            time_micros,
            outcome: outcome.clone(),
        };
        batch.put(
            Space::Dedup,
            op_id.0.to_be_bytes().to_vec(),
            encode("dedup record", &record)?,
        );
        batch.put(
            Space::DedupByTime,
            keys::dedup_time_key(time_micros, op_id.0).to_vec(),
            Vec::new(),
        );
        overlay.outcomes.insert(op_id, outcome.clone());
    }
    Ok(outcome)
}

fn apply_operations<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    operations: &[Operation],
    position: Position,
    now_micros: u64,
) -> Result<Result<Vec<OperationResult>, Rejection>, EngineError> {
    let mut results = Vec::with_capacity(operations.len());
    for operation in operations {
        match apply_operation(overlay, batch, operation, position, now_micros)? {
            Ok(result) => results.push(result),
            Err(rejection) => return Ok(Err(rejection)),
        }
    }
    Ok(Ok(results))
}

/// The indexes (among the command's checks) of the checks that do not hold
/// in the state before the command, or `None` when all hold.
fn failed_checks<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    operations: &[Operation],
    now_micros: u64,
) -> Result<Option<Vec<u32>>, EngineError> {
    let mut failed = Vec::new();
    let checks = operations.iter().filter_map(|operation| match operation {
        Operation::Check {
            namespace,
            key,
            precondition,
        } => Some((namespace, key, precondition)),
        _ => None,
    });
    for (index, (namespace, key, precondition)) in (0u32..).zip(checks) {
        let current = live(overlay, &keys::entry_key(namespace, key), now_micros)?.map(|entry| entry.version);
        if !precondition_holds(*precondition, current) {
            failed.push(index);
        }
    }
    Ok((!failed.is_empty()).then_some(failed))
}

fn precondition_holds(precondition: Precondition, current: Option<u64>) -> bool {
    match precondition {
        Precondition::Version(expected) => current == Some(expected),
        Precondition::Absent => current.is_none(),
    }
}

/// The live entry at a key, if any.
fn live<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    entry_key: &[u8],
    now_micros: u64,
) -> Result<Option<StoredEntry>, EngineError> {
    Ok(overlay.get(entry_key)?.filter(|entry| entry.is_live_at(now_micros)))
}

fn not_found(namespace: &str, key: &[u8]) -> Rejection {
    Rejection::NotFound(format!(
        "no live entry at key {} in namespace {namespace:?}",
        crate::keys::display_key(key)
    ))
}

fn apply_operation<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    operation: &Operation,
    position: Position,
    now_micros: u64,
) -> Result<Result<OperationResult, Rejection>, EngineError> {
    let source = SourceId {
        term: position.term,
        index: position.index,
    };
    let version = position.index;
    let result = match operation {
        Operation::Set {
            namespace,
            key,
            value,
            encoding,
            expires_at_micros,
            precondition,
            fence,
            session,
        } => {
            if let Some(fence) = fence {
                let lease_key = keys::entry_key(&keys::lease_namespace(&fence.namespace), &fence.key);
                let held = live(overlay, &lease_key, injected_bugs::lease_time(now_micros))?
                    .is_some_and(|lease| lease.version == fence.token);
                if !held {
                    return Ok(Err(Rejection::LeaseLost(format!(
                        "lease {} in namespace {:?} is not held with token {}",
                        keys::display_key(&fence.key),
                        fence.namespace,
                        fence.token
                    ))));
                }
            }
            let entry_key = keys::entry_key(namespace, key);
            if let Some(precondition) = precondition {
                let current = live(overlay, &entry_key, now_micros)?.map(|entry| entry.version);
                if !precondition_holds(*precondition, current) {
                    return Ok(Err(Rejection::VersionConflict {
                        key: key.clone(),
                        current,
                    }));
                }
            }
            let entry = StoredEntry {
                value: value.clone(),
                encoding: encoding.clone(),
                version,
                expires_at_micros: *expires_at_micros,
                source,
                session: session.clone(),
            };
            overlay.put(batch, entry_key, entry)?;
            record_session(overlay, batch, session.as_ref(), namespace, key, version, source)?;
            OperationResult::Set { version }
        }
        Operation::Delete {
            namespace,
            key,
            session,
        } => {
            record_session(overlay, batch, session.as_ref(), namespace, key, version, source)?;
            let previous = overlay.remove(batch, keys::entry_key(namespace, key))?;
            let removed_live_entry = previous.is_some_and(|entry| entry.is_live_at(now_micros));
            OperationResult::Delete { removed_live_entry }
        }
        Operation::SweepExpired { entries_max } => {
            let removed = sweep(overlay, batch, *entries_max, now_micros)?;
            OperationResult::SweepExpired { removed }
        }
        Operation::Expire {
            namespace,
            key,
            expires_at_micros,
        } => {
            let entry_key = keys::entry_key(namespace, key);
            let Some(mut entry) = live(overlay, &entry_key, now_micros)? else {
                return Ok(Err(not_found(namespace, key)));
            };
            entry.expires_at_micros = *expires_at_micros;
            let unchanged = entry.version;
            overlay.put(batch, entry_key, entry)?;
            OperationResult::Expire { version: unchanged }
        }
        Operation::Patch {
            namespace,
            key,
            patch,
            session,
        } => {
            let entry_key = keys::entry_key(namespace, key);
            let Some(entry) = live(overlay, &entry_key, now_micros)? else {
                return Ok(Err(not_found(namespace, key)));
            };
            let value = match crate::merge_patch::apply(&entry.encoding, &entry.value, patch) {
                Ok(value) => value,
                Err(message) => return Ok(Err(Rejection::Invalid(message))),
            };
            let patched = StoredEntry {
                value,
                version,
                source,
                session: session.clone(),
                ..entry
            };
            overlay.put(batch, entry_key, patched)?;
            record_session(overlay, batch, session.as_ref(), namespace, key, version, source)?;
            OperationResult::Patch { version }
        }
        Operation::Copy {
            namespace,
            key,
            to_namespace,
            to_key,
            remove_source,
        } => {
            let source_key = keys::entry_key(namespace, key);
            let Some(entry) = live(overlay, &source_key, now_micros)? else {
                return Ok(Err(not_found(namespace, key)));
            };
            let destination_key = keys::entry_key(to_namespace, to_key);
            let copied = StoredEntry {
                version,
                source,
                ..entry
            };
            overlay.put(batch, destination_key.clone(), copied)?;
            if *remove_source && source_key != destination_key {
                overlay.remove(batch, source_key)?;
            }
            OperationResult::Copy { version }
        }
        Operation::AcquireLease {
            namespace,
            key,
            holder,
            ttl_micros,
        } => {
            let lease_key = keys::entry_key(&keys::lease_namespace(namespace), key);
            if let Some(live_lease) = live(overlay, &lease_key, injected_bugs::lease_time(now_micros))? {
                return Ok(Err(Rejection::VersionConflict {
                    key: key.clone(),
                    current: Some(live_lease.version),
                }));
            }
            let expires_at_micros = now_micros.saturating_add(*ttl_micros);
            let lease = StoredEntry {
                value: holder.as_bytes().to_vec(),
                encoding: Encoding::Bytes,
                version,
                expires_at_micros: Some(expires_at_micros),
                source,
                session: None,
            };
            overlay.put(batch, lease_key, lease)?;
            OperationResult::AcquireLease {
                token: version,
                ttl_micros: *ttl_micros,
                expires_at_micros,
            }
        }
        Operation::RenewLease {
            namespace,
            key,
            holder,
            token,
            ttl_micros,
        } => {
            let lease_key = keys::entry_key(&keys::lease_namespace(namespace), key);
            let Some(mut lease) = live(overlay, &lease_key, injected_bugs::lease_time(now_micros))?
                .filter(|lease| lease.version == *token && lease.value == holder.as_bytes())
            else {
                return Ok(Err(Rejection::LeaseLost(format!(
                    "lease {} in namespace {namespace:?} is not held by {holder:?} with token {token}",
                    keys::display_key(key)
                ))));
            };
            let expires_at_micros = now_micros.saturating_add(*ttl_micros);
            lease.expires_at_micros = Some(expires_at_micros);
            overlay.put(batch, lease_key, lease)?;
            OperationResult::RenewLease {
                token: *token,
                ttl_micros: *ttl_micros,
                expires_at_micros,
            }
        }
        Operation::ReleaseLease {
            namespace,
            key,
            holder,
            token,
        } => {
            let lease_key = keys::entry_key(&keys::lease_namespace(namespace), key);
            let held = live(overlay, &lease_key, injected_bugs::lease_time(now_micros))?
                .is_some_and(|lease| lease.version == *token && lease.value == holder.as_bytes());
            if held {
                overlay.remove(batch, lease_key)?;
            }
            OperationResult::ReleaseLease { released: held }
        }
        // Judged before the command's writes, in `failed_checks`.
        Operation::Check { .. } => OperationResult::Check,
        Operation::Enqueue {
            payload,
            encoding,
            options,
        } => OperationResult::Enqueued {
            id: queue::enqueue(overlay, batch, payload, encoding, options, now_micros, source)?,
        },
        Operation::ClaimMessage { visibility_ms } => OperationResult::Claimed {
            delivery: queue::claim(overlay, batch, *visibility_ms, now_micros, source)?,
        },
        Operation::FinishMessage { id, attempt, delivered } => OperationResult::Finished {
            finished: queue::finish(overlay, batch, *id, Some(*attempt), *delivered, now_micros, source)?,
        },
        Operation::RequeueOverdue { messages_max } => OperationResult::Requeued {
            requeued: queue::requeue_overdue(overlay, batch, *messages_max, now_micros, source)?,
        },
        Operation::Counter {
            namespace,
            key,
            kind,
            operand,
        } => {
            let entry_key = keys::entry_key(namespace, key);
            let value = match live(overlay, &entry_key, now_micros)? {
                None => *operand,
                Some(entry) => {
                    let stored = match (&entry.encoding, <[u8; 8]>::try_from(entry.value.as_slice())) {
                        (Encoding::Le64, Ok(bytes)) => u64::from_le_bytes(bytes),
                        _ => {
                            return Ok(Err(Rejection::Invalid(format!(
                                "cannot {} key {} of namespace {namespace:?}: its value is not a 64-bit unsigned integer (Le64)",
                                kind.name(),
                                keys::display_key(key)
                            ))))
                        }
                    };
                    kind.combine(stored, *operand)
                }
            };
            let entry = StoredEntry {
                value: value.to_le_bytes().to_vec(),
                encoding: Encoding::Le64,
                version,
                expires_at_micros: None,
                source,
                session: None,
            };
            overlay.put(batch, entry_key, entry)?;
            OperationResult::Counter { version, value }
        }
        Operation::StateUpdate {
            namespace,
            key,
            ops_json,
        } => {
            let entry_key = keys::entry_key(namespace, key);
            let current = live(overlay, &entry_key, now_micros)?;
            let old_value = match &current {
                None => None,
                Some(entry) if entry.encoding == Encoding::Json => {
                    match serde_json::from_slice::<serde_json::Value>(&entry.value) {
                        Ok(value) => Some(value),
                        Err(error) => {
                            return Ok(Err(Rejection::Invalid(format!(
                                "key {} of namespace {namespace:?} does not hold valid JSON: {error}",
                                keys::display_key(key)
                            ))))
                        }
                    }
                }
                Some(entry) => {
                    return Ok(Err(Rejection::Invalid(format!(
                        "key {} of namespace {namespace:?} holds a {:?} value; a state update needs JSON",
                        keys::display_key(key),
                        entry.encoding
                    ))))
                }
            };
            let ops = match lode_types::state_update::parse_ops(ops_json) {
                Ok(ops) => ops,
                Err(message) => return Ok(Err(Rejection::Invalid(message))),
            };
            let outcome = lode_types::state_update::apply(old_value.as_ref(), &ops);
            let encode_json = |value: &serde_json::Value| {
                serde_json::to_vec(value).map_err(|error| EngineError::corrupt("state value", error))
            };
            let new_value = encode_json(&outcome.new_value)?;
            let written = outcome.errors.len() < ops.len();
            if written {
                if let Err(message) = crate::limits::check_value(&new_value) {
                    return Ok(Err(Rejection::Invalid(format!("the updated {message}"))));
                }
                let entry = StoredEntry {
                    value: new_value.clone(),
                    encoding: Encoding::Json,
                    version,
                    expires_at_micros: None,
                    source,
                    session: None,
                };
                overlay.put(batch, entry_key, entry)?;
            }
            OperationResult::StateUpdated {
                version: written.then_some(version),
                old_value: current.map(|entry| entry.value),
                new_value,
                errors_json: serde_json::to_vec(&outcome.errors)
                    .map_err(|error| EngineError::corrupt("state update errors", error))?,
            }
        }
        Operation::Take { namespace, key } => {
            let entry_key = keys::entry_key(namespace, key);
            let current = live(overlay, &entry_key, now_micros)?;
            overlay.remove(batch, entry_key)?;
            OperationResult::Taken {
                encoding: current.as_ref().map(|entry| entry.encoding.clone()),
                old_value: current.map(|entry| entry.value),
            }
        }
        Operation::SumV8 {
            namespace,
            key,
            operand,
            min,
            max,
            clamp,
        } => {
            let entry_key = keys::entry_key(namespace, key);
            let current = live(overlay, &entry_key, now_micros)?;
            let stored = current.as_ref().map(|entry| (&entry.encoding, entry.value.as_slice()));
            let (value, encoding) =
                match lode_types::v8_number::sum(stored, operand, min.as_deref(), max.as_deref(), *clamp) {
                    Ok(result) => result,
                    Err(message) => {
                        return Ok(Err(Rejection::Invalid(format!(
                            "sum at key {} of namespace {namespace:?}: {message}",
                            keys::display_key(key)
                        ))))
                    }
                };
            let entry = StoredEntry {
                value,
                encoding,
                version,
                expires_at_micros: None,
                source,
                session: None,
            };
            overlay.put(batch, entry_key, entry)?;
            OperationResult::SumV8 { version }
        }
        Operation::DeleteRange {
            namespace,
            selector,
            after,
            entries_max,
        } => delete_range(
            overlay,
            batch,
            namespace,
            selector,
            after.as_deref(),
            *entries_max,
            now_micros,
        )?,
    };
    Ok(Ok(result))
}

/// Records that `session` wrote `key` of `namespace`, so the keys a session
/// wrote can be listed; the record's version is the write's.
fn record_session<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    session: Option<&SessionLink>,
    namespace: &str,
    key: &[u8],
    version: u64,
    source: SourceId,
) -> Result<(), EngineError> {
    let Some(session) = session else {
        return Ok(());
    };
    let record = StoredEntry {
        value: Vec::new(),
        encoding: Encoding::Bytes,
        version,
        expires_at_micros: None,
        source,
        session: Some(session.clone()),
    };
    overlay.put(batch, keys::session_index_key(session, namespace, key), record)
}

/// Removes the selected entries among the next `entries_max` of the range.
fn delete_range<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    namespace: &str,
    selector: &Selector,
    after: Option<&[u8]>,
    entries_max: u32,
    now_micros: u64,
) -> Result<OperationResult, EngineError> {
    let (mut start, end) = crate::command::stored_range(selector, namespace);
    if let Some(after) = after {
        let mut resume = keys::entry_key(namespace, after);
        resume.push(0);
        start = start.max(resume);
    }
    let examined = overlay
        .engine
        .scan(Space::Entries, &start, end.as_deref(), entries_max as usize)?;
    let full_page = examined.len() == entries_max as usize;
    let mut removed = 0;
    let mut last_key = None;
    for (stored_key, _) in examined {
        let Some((_, key)) = keys::split_entry_key(&stored_key) else {
            return Err(EngineError::corrupt("entry key", "no namespace prefix"));
        };
        if selector.matches(&key) {
            if let Some(previous) = overlay.remove(batch, stored_key)? {
                removed += u32::from(previous.is_live_at(now_micros));
            }
        }
        last_key = Some(key);
    }
    Ok(OperationResult::DeleteRange {
        removed,
        resume_after: if full_page { last_key } else { None },
    })
}

/// Removes entries whose expiry is at or before `now_micros`, oldest expiry
/// first, at most `entries_max`.
fn sweep<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    entries_max: u32,
    now_micros: u64,
) -> Result<u32, EngineError> {
    let end = now_micros.saturating_add(1).to_be_bytes();
    let due = overlay
        .engine
        .scan(Space::Expiry, &[], Some(&end), entries_max as usize)?;
    let mut removed = 0;
    for (index_key, _) in due {
        let (expires_at, entry_key) = keys::split_expiry_key(&index_key)
            .ok_or_else(|| EngineError::corrupt("expiry index key", "shorter than 8 bytes"))?;
        match overlay.get(entry_key)? {
            Some(entry) if entry.expires_at_micros == Some(expires_at) => {
                overlay.remove(batch, entry_key.to_vec())?;
                removed += 1;
            }
            // The entry was rewritten or removed earlier in this entry; only
            // the index key is left to drop.
            _ => batch.delete(Space::Expiry, index_key.clone()),
        }
    }
    Ok(removed)
}

fn read_counter<E: Engine>(engine: &E, key: &[u8]) -> Result<u64, EngineError> {
    match engine.get(Space::StateMeta, key)? {
        Some(bytes) => decode("change log counter", &bytes),
        None => Ok(0),
    }
}

/// Appends an entry's change events to the change log, then trims the
/// oldest events (a bounded number per entry) while the log is over its
/// event or byte limit, remembering the last position trimmed so that a
/// reader asking for older events learns they are gone.
fn record_changes<E: Engine>(
    engine: &E,
    batch: &mut WriteBatch,
    changes: Vec<Change>,
    index: u64,
    retention: &crate::command::Retention,
) -> Result<(), EngineError> {
    if changes.is_empty() {
        return Ok(());
    }
    let mut count = read_counter(engine, meta::CHANGE_COUNT)?;
    let mut bytes = read_counter(engine, meta::CHANGE_BYTES)?;
    for (sequence, change) in changes.into_iter().enumerate() {
        let event = ChangeEvent {
            index,
            sequence: u32::try_from(sequence).unwrap_or(u32::MAX),
            namespace: change.namespace,
            key: change.key,
            kind: change.kind,
            old_value: change.old_value,
            new_value: change.new_value,
            encoding: change.encoding,
            version: change.version,
        };
        let encoded = encode("change event", &event)?;
        count += 1;
        bytes += encoded.len() as u64;
        batch.put(
            Space::ChangeLog,
            keys::change_key(event.index, event.sequence).to_vec(),
            encoded,
        );
    }
    let over = |count: u64, bytes: u64| count > retention.change_events_max || bytes > retention.change_bytes_max;
    if over(count, bytes) {
        // Start after the last trimmed event: the head of the log is a run
        // of deletions an iterator would otherwise step over every time.
        let mut start = match engine.get(Space::StateMeta, meta::CHANGE_TRIMMED_THROUGH)? {
            Some(bytes) => {
                let (index, sequence): (u64, u32) = decode("change log trim", &bytes)?;
                let mut start = keys::change_key(index, sequence).to_vec();
                start.push(0);
                start
            }
            None => Vec::new(),
        };
        let mut trimmed_through = None;
        let mut trimmed = 0;
        while over(count, bytes) && trimmed < CHANGE_TRIM_PER_APPLY_MAX {
            // Read only about as many as must go; bytes over the limit are
            // trimmed in small steps.
            let wanted = count.saturating_sub(retention.change_events_max).clamp(1, 256) as usize;
            let oldest = engine.scan(Space::ChangeLog, &start, None, wanted)?;
            if oldest.is_empty() {
                break;
            }
            for (key, value) in oldest {
                if !over(count, bytes) {
                    break;
                }
                count -= 1;
                bytes = bytes.saturating_sub(value.len() as u64);
                trimmed += 1;
                trimmed_through = keys::split_change_key(&key);
                start = key.clone();
                start.push(0);
                batch.delete(Space::ChangeLog, key);
            }
        }
        if let Some(through) = trimmed_through {
            batch.put(
                Space::StateMeta,
                meta::CHANGE_TRIMMED_THROUGH.to_vec(),
                encode("change log trim", &through)?,
            );
        }
    }
    batch.put(
        Space::StateMeta,
        meta::CHANGE_COUNT.to_vec(),
        encode("change log counter", &count)?,
    );
    batch.put(
        Space::StateMeta,
        meta::CHANGE_BYTES.to_vec(),
        encode("change log counter", &bytes)?,
    );
    Ok(())
}

/// Drops a bounded number of dedup records older than the retention window.
fn prune_dedup<E: Engine>(
    engine: &E,
    batch: &mut WriteBatch,
    now_micros: u64,
    retention_micros: u64,
) -> Result<(), EngineError> {
    let Some(cutoff) = now_micros.checked_sub(retention_micros) else {
        return Ok(());
    };
    let end = cutoff.to_be_bytes();
    // Start after the last pruned record, past the deletions at the head.
    let start = engine
        .get(Space::StateMeta, meta::DEDUP_PRUNED_THROUGH)?
        .map(|mut key| {
            key.push(0);
            key
        });
    let due = engine.scan(
        Space::DedupByTime,
        start.as_deref().unwrap_or(&[]),
        Some(&end),
        DEDUP_PRUNE_PER_APPLY_MAX,
    )?;
    let mut pruned_through = None;
    for (time_key, _) in due {
        let op_id = time_key
            .get(8..24)
            .ok_or_else(|| EngineError::corrupt("dedup time key", "shorter than 24 bytes"))?
            .to_vec();
        batch.delete(Space::Dedup, op_id);
        batch.delete(Space::DedupByTime, time_key.clone());
        pruned_through = Some(time_key);
    }
    if let Some(through) = pruned_through {
        batch.put(Space::StateMeta, meta::DEDUP_PRUNED_THROUGH.to_vec(), through);
    }
    Ok(())
}
