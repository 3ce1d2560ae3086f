//! Deterministic apply: the state change one command makes, computed from
//! the stored state, the command and its log id alone.
//!
//! Nothing here reads a clock, randomness or the environment. Every
//! time-based decision uses the command's time, so two replicas that apply
//! the same log hold byte-identical state.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::{Command, CommandOutcome, CommandV1, Operation, OperationResult, Rejection};
use crate::engine::{Engine, Space, WriteBatch};
use crate::entry::{SourceId, StoredEntry};
use crate::error::{decode, encode, EngineError};
use crate::keys;
use crate::limits::{DEDUP_PRUNE_PER_APPLY_MAX, DEDUP_RETENTION_MICROS};

/// Where a command sits in the log.
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

/// Entries read or written by the command so far, so that a later operation
/// in the same command sees an earlier one's effect.
struct Overlay<'a, E: Engine> {
    engine: &'a E,
    entries: BTreeMap<Vec<u8>, Option<StoredEntry>>,
}

impl<'a, E: Engine> Overlay<'a, E> {
    fn get(&mut self, entry_key: &[u8]) -> Result<Option<StoredEntry>, EngineError> {
        if let Some(entry) = self.entries.get(entry_key) {
            return Ok(entry.clone());
        }
        let stored = match self.engine.get(Space::Entries, entry_key)? {
            Some(bytes) => Some(decode::<StoredEntry>("entry", &bytes)?),
            None => None,
        };
        self.entries.insert(entry_key.to_vec(), stored.clone());
        Ok(stored)
    }

    fn put(&mut self, batch: &mut WriteBatch, entry_key: Vec<u8>, entry: StoredEntry) -> Result<(), EngineError> {
        let previous = self.get(&entry_key)?;
        if let Some(expires_at) = previous.as_ref().and_then(|previous| previous.expires_at_micros) {
            batch.delete(Space::Expiry, keys::expiry_key(expires_at, &entry_key));
        }
        if let Some(expires_at) = entry.expires_at_micros {
            batch.put(Space::Expiry, keys::expiry_key(expires_at, &entry_key), Vec::new());
        }
        batch.put(Space::Entries, entry_key.clone(), encode("entry", &entry)?);
        self.entries.insert(entry_key, Some(entry));
        Ok(())
    }

    fn remove(&mut self, batch: &mut WriteBatch, entry_key: Vec<u8>) -> Result<Option<StoredEntry>, EngineError> {
        let previous = self.get(&entry_key)?;
        if let Some(previous) = &previous {
            if let Some(expires_at) = previous.expires_at_micros {
                batch.delete(Space::Expiry, keys::expiry_key(expires_at, &entry_key));
            }
            batch.delete(Space::Entries, entry_key.clone());
        }
        self.entries.insert(entry_key, None);
        Ok(previous)
    }
}

/// Applies one command at `position` with the state machine's clock at
/// `time_micros` (already `max(command time, last applied time)`), adding
/// its writes to `batch`.
pub fn apply_command<E: Engine>(
    engine: &E,
    batch: &mut WriteBatch,
    command: &Command,
    position: Position,
    time_micros: u64,
) -> Result<CommandOutcome, EngineError> {
    let Command::V1(CommandV1 { op_id, operations, .. }) = command;
    if let Some(op_id) = op_id {
        if let Some(bytes) = engine.get(Space::Dedup, &op_id.0.to_be_bytes())? {
            let record: DedupRecord = decode("dedup record", &bytes)?;
            let mut outcome = record.outcome;
            outcome.deduplicated = true;
            return Ok(outcome);
        }
    }
    prune_dedup(engine, batch, time_micros)?;

    let result = match command.validate() {
        Err(message) => Err(Rejection::Invalid(message)),
        Ok(()) => {
            // Operations write into a scratch batch first, so a rejection
            // part-way through leaves nothing behind.
            let mut scratch = WriteBatch::default();
            let result = apply_operations(engine, &mut scratch, operations, position, time_micros)?;
            if result.is_ok() {
                batch.ops.extend(scratch.ops);
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
    if let Some(op_id) = op_id {
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
    }
    Ok(outcome)
}

fn apply_operations<E: Engine>(
    engine: &E,
    batch: &mut WriteBatch,
    operations: &[Operation],
    position: Position,
    now_micros: u64,
) -> Result<Result<Vec<OperationResult>, Rejection>, EngineError> {
    let mut overlay = Overlay {
        engine,
        entries: BTreeMap::new(),
    };
    let source = SourceId {
        term: position.term,
        index: position.index,
    };
    let mut results = Vec::with_capacity(operations.len());
    for operation in operations {
        let result = match operation {
            Operation::Set {
                namespace,
                key,
                value,
                encoding,
                expires_at_micros,
            } => {
                let entry = StoredEntry {
                    value: value.clone(),
                    encoding: encoding.clone(),
                    version: position.index,
                    expires_at_micros: *expires_at_micros,
                    source,
                };
                overlay.put(batch, keys::entry_key(namespace, key), entry)?;
                OperationResult::Set {
                    version: position.index,
                }
            }
            Operation::Delete { namespace, key } => {
                let previous = overlay.remove(batch, keys::entry_key(namespace, key))?;
                let removed_live_entry = previous.is_some_and(|entry| entry.is_live_at(now_micros));
                OperationResult::Delete { removed_live_entry }
            }
            Operation::SweepExpired { entries_max } => {
                let removed = sweep(engine, &mut overlay, batch, *entries_max, now_micros)?;
                OperationResult::SweepExpired { removed }
            }
        };
        results.push(result);
    }
    Ok(Ok(results))
}

/// Removes entries whose expiry is at or before `now_micros`, oldest expiry
/// first, at most `entries_max`.
fn sweep<E: Engine>(
    engine: &E,
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    entries_max: u32,
    now_micros: u64,
) -> Result<u32, EngineError> {
    let end = now_micros.saturating_add(1).to_be_bytes();
    let due = engine.scan(Space::Expiry, &[], Some(&end), entries_max as usize)?;
    let mut removed = 0;
    for (index_key, _) in due {
        let (expires_at, entry_key) = keys::split_expiry_key(&index_key)
            .ok_or_else(|| EngineError::corrupt("expiry index key", "shorter than 8 bytes"))?;
        match overlay.get(entry_key)? {
            Some(entry) if entry.expires_at_micros == Some(expires_at) => {
                overlay.remove(batch, entry_key.to_vec())?;
                removed += 1;
            }
            // The entry was rewritten or removed earlier in this command;
            // only the index key is left to drop.
            _ => batch.delete(Space::Expiry, index_key.clone()),
        }
    }
    Ok(removed)
}

/// Drops a bounded number of dedup records older than the retention window.
fn prune_dedup<E: Engine>(engine: &E, batch: &mut WriteBatch, now_micros: u64) -> Result<(), EngineError> {
    let Some(cutoff) = now_micros.checked_sub(DEDUP_RETENTION_MICROS) else {
        return Ok(());
    };
    let end = cutoff.to_be_bytes();
    for (time_key, _) in engine.scan(Space::DedupByTime, &[], Some(&end), DEDUP_PRUNE_PER_APPLY_MAX)? {
        let op_id = time_key
            .get(8..24)
            .ok_or_else(|| EngineError::corrupt("dedup time key", "shorter than 24 bytes"))?
            .to_vec();
        batch.delete(Space::Dedup, op_id);
        batch.delete(Space::DedupByTime, time_key);
    }
    Ok(())
}
