//! Dedup by op id: a command whose op id has an outcome recorded within
//! the proposal's retention (by an earlier entry, or by an earlier command
//! of this one) answers that outcome and applies nothing; older records
//! answer nothing.
//!
//! Apply never deletes a record. Every `dedup_prune_every_entries`th entry
//! moves the state's forgotten-before time (`meta::DEDUP_FORGOTTEN_BEFORE`)
//! up to its time less its retention, and no record older than that time
//! answers again, whatever the retention of a later proposal. The engine
//! drops such records as it compacts, but only those older than the
//! forgotten-before time of the snapshot on disk
//! ([`crate::engine::Engine::forget_dedup_records_before`]): no state a
//! member can go back to (after a crash, from that snapshot) reads them, so
//! whether one is still on disk changes only disk use, never an answer.
//!
//! A record is compact: it never holds a whole value. Each value its
//! answer carried (a State update's old and new JSON, a taken value, a
//! claimed message's payload) is kept as a digest and a place to look: the
//! entry's key and the log index whose change events hold it. A repeat
//! finds the value again (live, in the change log, or in the claimed
//! message) and checks it against the digest; when it is gone, the repeat
//! answers [`Rejection::AnswerCompacted`] and still applies nothing.

use serde::{Deserialize, Serialize};

use super::overlay::Overlay;
use crate::command::{ChangeEvent, CommandOutcome, Encoding, MessageId, OpId, Operation, OperationResult, Rejection};
use crate::engine::{Engine, Space, WriteBatch};
use crate::error::{decode, encode, EngineError};
use crate::keys::{self, meta};
use crate::limits::DEDUP_PRUNE_EVERY_ENTRIES;

/// Values up to this size are kept in the record itself: a digest and a
/// place would weigh more.
const INLINE_VALUE_BYTES_MAX: usize = 48;

/// Change events of one log index looked at to find a value again; one
/// entry's events are bounded by its size, this bounds the search.
const REBUILD_EVENTS_EXAMINED_MAX: usize = 65_536;

/// A stored dedup record: the outcome to return for a repeated op id. Its
/// time stays the third field: [`record_time_micros`] reads it alone.
#[derive(Serialize, Deserialize)]
struct DedupRecord {
    index: u64,
    term: u64,
    time_micros: u64,
    result: Result<Vec<RecordedResult>, Rejection>,
}

/// One operation's result as a record keeps it.
#[derive(Serialize, Deserialize)]
enum RecordedResult {
    /// A result that carries no value, kept as it was.
    Whole(OperationResult),
    StateUpdated {
        #[serde(with = "serde_bytes")]
        entry_key: Vec<u8>,
        version: Option<u64>,
        old_value: Option<ValueReference>,
        new_value: ValueReference,
        #[serde(with = "serde_bytes")]
        errors_json: Vec<u8>,
    },
    Taken {
        #[serde(with = "serde_bytes")]
        entry_key: Vec<u8>,
        old_value: Option<ValueReference>,
        encoding: Option<Encoding>,
    },
    Claimed {
        id: MessageId,
        attempt: u32,
        encoding: Encoding,
        payload: ValueReference,
    },
}

/// A value an answer carried.
#[derive(Serialize, Deserialize)]
enum ValueReference {
    Inline(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Found under the result's key, live or among the change events of
    /// log index `at_index`, and recognised by its SHA-256.
    Stored {
        at_index: u64,
        digest: [u8; 32],
    },
}

/// The fields a stored record starts with, as [`DedupRecord`] encodes them.
#[derive(Deserialize)]
struct RecordHead {
    _index: u64,
    _term: u64,
    time_micros: u64,
}

/// The time of a stored dedup record, read without decoding its outcome;
/// `None` for bytes that are not a record. The engine's compaction reads it
/// to drop forgotten records.
pub(crate) fn record_time_micros(bytes: &[u8]) -> Option<u64> {
    decode::<RecordHead>("dedup record", bytes)
        .ok()
        .map(|head| head.time_micros)
}

fn digest(value: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, value).as_ref());
    out
}

impl ValueReference {
    fn new(value: &[u8], at_index: u64) -> Self {
        if value.len() <= INLINE_VALUE_BYTES_MAX {
            ValueReference::Inline(value.to_vec())
        } else {
            ValueReference::Stored {
                at_index,
                digest: digest(value),
            }
        }
    }
}

/// The outcome recorded for `op_id` at or after `cutoff_micros` (the
/// command's time less the retention, or the forgotten-before time if that
/// is later), if any, with its values found again. An older record still
/// on disk answers nothing.
pub(super) fn recorded_outcome<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    op_id: OpId,
    cutoff_micros: u64,
) -> Result<Option<CommandOutcome>, EngineError> {
    if let Some(outcome) = overlay.outcomes.get(&op_id) {
        return Ok(Some(outcome.clone()));
    }
    let Some(bytes) = overlay.engine.get(Space::Dedup, &op_id.0.to_be_bytes())? else {
        return Ok(None);
    };
    let record = decode::<DedupRecord>("dedup record", &bytes)?;
    if record.time_micros < cutoff_micros {
        return Ok(None);
    }
    let result = match record.result {
        Ok(results) => rebuild_results(overlay, record.index, results)?,
        Err(rejection) => Err(rejection),
    };
    Ok(Some(CommandOutcome {
        index: record.index,
        term: record.term,
        time_micros: record.time_micros,
        result,
        deduplicated: true,
    }))
}

/// Records `outcome` of the command of `operations` as the answer to
/// `op_id` for later repeats.
pub(super) fn record<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    op_id: OpId,
    operations: &[Operation],
    outcome: &CommandOutcome,
) -> Result<(), EngineError> {
    let result = match &outcome.result {
        Ok(results) => {
            let mut recorded = Vec::with_capacity(results.len());
            for (operation, result) in operations.iter().zip(results) {
                recorded.push(compact(overlay, operation, result, outcome.index)?);
            }
            Ok(recorded)
        }
        Err(rejection) => Err(rejection.clone()),
    };
    let record = DedupRecord {
        index: outcome.index,
        term: outcome.term,
        time_micros: outcome.time_micros,
        result,
    };
    batch.put(
        Space::Dedup,
        op_id.0.to_be_bytes().to_vec(),
        encode("dedup record", &record)?,
    );
    overlay.outcomes.insert(op_id, outcome.clone());
    Ok(())
}

/// The record of one result: values replaced by references. `index` is
/// the command's log index, whose change events hold the values it wrote
/// and removed.
fn compact<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    operation: &Operation,
    result: &OperationResult,
    index: u64,
) -> Result<RecordedResult, EngineError> {
    let entry_key = match operation {
        Operation::StateUpdate { namespace, key, .. } | Operation::Take { namespace, key } => {
            keys::entry_key(namespace, key)
        }
        _ => Vec::new(),
    };
    Ok(match result {
        OperationResult::StateUpdated {
            version,
            old_value,
            new_value,
            errors_json,
        } => {
            // An update whose every op failed wrote nothing: its value is the
            // live one, written at that entry's version.
            let at_index = match version {
                Some(version) => *version,
                None => overlay.get(&entry_key)?.map_or(index, |entry| entry.version),
            };
            RecordedResult::StateUpdated {
                version: *version,
                old_value: old_value.as_deref().map(|value| ValueReference::new(value, at_index)),
                new_value: ValueReference::new(new_value, at_index),
                errors_json: errors_json.clone(),
                entry_key,
            }
        }
        OperationResult::Taken { old_value, encoding } => RecordedResult::Taken {
            old_value: old_value.as_deref().map(|value| ValueReference::new(value, index)),
            encoding: encoding.clone(),
            entry_key,
        },
        OperationResult::Claimed {
            delivery: Some(delivery),
        } => RecordedResult::Claimed {
            id: delivery.id,
            attempt: delivery.attempt,
            encoding: delivery.encoding.clone(),
            payload: ValueReference::new(&delivery.payload, index),
        },
        other => RecordedResult::Whole(other.clone()),
    })
}

/// The results of a record with their values found again, or
/// `AnswerCompacted` when one of them is gone.
fn rebuild_results<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    index: u64,
    recorded: Vec<RecordedResult>,
) -> Result<Result<Vec<OperationResult>, Rejection>, EngineError> {
    let mut results = Vec::with_capacity(recorded.len());
    for result in recorded {
        match rebuild(overlay, result)? {
            Some(result) => results.push(result),
            None => {
                let trimmed_through = super::change_log::trimmed_through(overlay.engine)?.unwrap_or((0, 0));
                return Ok(Err(Rejection::AnswerCompacted { index, trimmed_through }));
            }
        }
    }
    Ok(Ok(results))
}

/// One result with its values found again; `None` when one is gone.
fn rebuild<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    recorded: RecordedResult,
) -> Result<Option<OperationResult>, EngineError> {
    Ok(match recorded {
        RecordedResult::Whole(result) => Some(result),
        RecordedResult::StateUpdated {
            entry_key,
            version,
            old_value,
            new_value,
            errors_json,
        } => {
            let old_value = match old_value {
                Some(reference) => match find_value(overlay, &entry_key, reference)? {
                    Some(value) => Some(value),
                    None => return Ok(None),
                },
                None => None,
            };
            find_value(overlay, &entry_key, new_value)?.map(|new_value| OperationResult::StateUpdated {
                version,
                old_value,
                new_value,
                errors_json,
            })
        }
        RecordedResult::Taken {
            entry_key,
            old_value,
            encoding,
        } => match old_value {
            Some(reference) => find_value(overlay, &entry_key, reference)?.map(|value| OperationResult::Taken {
                old_value: Some(value),
                encoding,
            }),
            None => Some(OperationResult::Taken {
                old_value: None,
                encoding,
            }),
        },
        RecordedResult::Claimed {
            id,
            attempt,
            encoding,
            payload,
        } => find_claimed_payload(overlay, id, payload)?.map(|payload| OperationResult::Claimed {
            delivery: Some(crate::command::QueueDelivery {
                id,
                payload,
                encoding,
                attempt,
            }),
        }),
    })
}

/// A referenced value: the live value of `entry_key`, or an old or new
/// value of one of its change events at the referenced index, whichever
/// has the digest.
fn find_value<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    entry_key: &[u8],
    reference: ValueReference,
) -> Result<Option<Vec<u8>>, EngineError> {
    let (at_index, wanted) = match reference {
        ValueReference::Inline(value) => return Ok(Some(value)),
        ValueReference::Stored { at_index, digest } => (at_index, digest),
    };
    if let Some(entry) = overlay.get(entry_key)? {
        if digest(&entry.value) == wanted {
            return Ok(Some(entry.value));
        }
    }
    let Some((namespace, key)) = keys::split_entry_key(entry_key) else {
        return Ok(None);
    };
    // Trimmed events may still be stored on one member and dropped on
    // another: apply must not see them.
    let start = keys::change_key(at_index, 0)
        .to_vec()
        .max(super::change_log::first_live_key(overlay.engine)?);
    let end = keys::change_key(at_index.saturating_add(1), 0);
    if start.as_slice() >= end.as_slice() {
        return Ok(None);
    }
    let events = overlay
        .engine
        .scan(Space::ChangeLog, &start, Some(&end), REBUILD_EVENTS_EXAMINED_MAX)?;
    for (_, bytes) in events {
        let event: ChangeEvent = decode("change event", &bytes)?;
        if event.namespace != namespace || event.key != key {
            continue;
        }
        for value in [event.new_value, event.old_value].into_iter().flatten() {
            if digest(&value) == wanted {
                return Ok(Some(value));
            }
        }
    }
    Ok(None)
}

/// A claimed message's payload, while the message is still claimed (a
/// payload never changes while its message lives).
fn find_claimed_payload<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    id: MessageId,
    reference: ValueReference,
) -> Result<Option<Vec<u8>>, EngineError> {
    let wanted = match reference {
        ValueReference::Inline(value) => return Ok(Some(value)),
        ValueReference::Stored { digest, .. } => digest,
    };
    Ok(super::queue::claimed_payload(overlay, id)?.filter(|payload| digest(payload) == wanted))
}

/// The time before which no dedup record answers (0 before the first
/// move).
pub(crate) fn forgotten_before<E: Engine>(engine: &E) -> Result<u64, EngineError> {
    match engine.get(Space::StateMeta, meta::DEDUP_FORGOTTEN_BEFORE)? {
        Some(bytes) => decode("dedup forgotten-before time", &bytes),
        None => Ok(0),
    }
}

/// On every `dedup_prune_every_entries`th entry, moves the forgotten-before
/// time up to `now_micros` less the retention; it never moves back, so a
/// later proposal with a longer retention finds no record older than it.
pub(super) fn forget_expired(
    batch: &mut WriteBatch,
    index: u64,
    now_micros: u64,
    retention_micros: u64,
    forgotten_before_micros: u64,
) -> Result<(), EngineError> {
    if !index.is_multiple_of(DEDUP_PRUNE_EVERY_ENTRIES) {
        return Ok(());
    }
    let Some(cutoff) = now_micros.checked_sub(retention_micros) else {
        return Ok(());
    };
    if cutoff > forgotten_before_micros {
        batch.put(
            Space::StateMeta,
            meta::DEDUP_FORGOTTEN_BEFORE.to_vec(),
            encode("dedup forgotten-before time", &cutoff)?,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_of_a_record_is_read_from_its_head() {
        let record = DedupRecord {
            index: 7,
            term: 2,
            time_micros: 123_456,
            result: Err(Rejection::Invalid("no".to_owned())),
        };
        let bytes = encode("dedup record", &record).expect("encodes");
        assert_eq!(record_time_micros(&bytes), Some(123_456));
        assert_eq!(record_time_micros(&bytes[..20]), None, "too short to hold a time");
    }
}
