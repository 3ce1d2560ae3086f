//! The change log: every change of a live value an entry made, recorded
//! under (log index, sequence), and trimmed from the oldest end back to the
//! proposal's retention once it is over it by a slack (1/64 of the limit),
//! remembering the last position trimmed so that a reader asking for older
//! events learns they are gone.
//!
//! A trim only moves that position: it deletes nothing. Every reader starts
//! past it ([`first_live_key`]), so an event at or before it is gone for
//! every reader on every member whether or not its bytes are still on disk.
//! The engine drops them later, whole table files at a time, once the
//! position is durable: after a sync every 256 applied entries
//! (`trimmed_events.rs`) and at snapshots
//! ([`crate::engine::Engine::forget_change_events_through`]). Deleting
//! them key by key put a deletion of the oldest events into every table
//! file of the newest ones, so every compaction of the family spanned the
//! whole log and rewrote every live event (`docs/performance.md`).

use crate::command::{ChangeEvent, ChangeKind, Encoding, Retention};
use crate::engine::{Engine, Space, WriteBatch};
use crate::error::{decode, encode, EngineError};
use crate::keys::{self, meta};
use crate::limits::{CHANGE_TRIM_PER_APPLY_MAX, CHANGE_TRIM_SLACK_DIVISOR, CHANGE_TRIM_SLACK_EVENTS_MAX};

/// A change event before it has its position.
pub(super) struct Change {
    pub(super) namespace: String,
    pub(super) key: Vec<u8>,
    pub(super) kind: ChangeKind,
    pub(super) old_value: Option<Vec<u8>>,
    pub(super) new_value: Option<Vec<u8>>,
    pub(super) encoding: Encoding,
    pub(super) version: u64,
}

/// The namespace and key of a stored entry key, when it belongs to a user
/// namespace (Lode's own records start with NUL and emit no changes).
pub(super) fn user_key(entry_key: &[u8]) -> Option<(String, Vec<u8>)> {
    keys::split_entry_key(entry_key).filter(|(namespace, _)| !namespace.starts_with('\0'))
}

/// The last trimmed position, if the log was ever trimmed: events at or
/// before it are gone.
pub(crate) fn trimmed_through<E: Engine>(engine: &E) -> Result<Option<(u64, u32)>, EngineError> {
    match engine.get(Space::StateMeta, meta::CHANGE_TRIMMED_THROUGH)? {
        Some(bytes) => Ok(Some(decode("change log trim", &bytes)?)),
        None => Ok(None),
    }
}

/// The first change log key a reader may read: the one just past the
/// trimmed-through position (its bytes may still be stored below it).
pub(crate) fn first_live_key<E: Engine>(engine: &E) -> Result<Vec<u8>, EngineError> {
    Ok(match trimmed_through(engine)? {
        Some((index, sequence)) => key_after(index, sequence),
        None => Vec::new(),
    })
}

/// The first key of `space` a reader may read: past the trimmed-through
/// position in the change log, the very first elsewhere.
pub(crate) fn first_readable_key<E: Engine>(engine: &E, space: Space) -> Result<Vec<u8>, EngineError> {
    match space {
        Space::ChangeLog => first_live_key(engine),
        _ => Ok(Vec::new()),
    }
}

/// The smallest key after the event at (`index`, `sequence`).
fn key_after(index: u64, sequence: u32) -> Vec<u8> {
    let mut key = keys::change_key(index, sequence).to_vec();
    key.push(0);
    key
}

pub(crate) fn read_counter<E: Engine>(engine: &E, key: &[u8]) -> Result<u64, EngineError> {
    match engine.get(Space::StateMeta, key)? {
        Some(bytes) => decode("change log counter", &bytes),
        None => Ok(0),
    }
}

/// Appends an entry's change events to the change log, then trims the
/// oldest events (a bounded number per entry) while the log is over its
/// event or byte limit, remembering the last position trimmed so that a
/// reader asking for older events learns they are gone.
pub(super) fn record_changes<E: Engine>(
    engine: &E,
    batch: &mut WriteBatch,
    changes: Vec<Change>,
    index: u64,
    retention: &Retention,
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
    let (count, bytes) = trim_oldest(engine, batch, (count, bytes), retention)?;
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

/// Once the log is over the retention's event or byte limit by its slack,
/// trims the oldest events (at most `change_trim_per_apply_max`) while it
/// is over the limit, by moving the trimmed-through position past them;
/// answers the new count and bytes.
///
/// The oldest events are walked once, in place, outside the block cache:
/// only their sizes count. Scans sized by the events over the limit read
/// them one at a time, each behind a new seek, whenever the bytes were the
/// limit that ran over (values of a few KiB), and their blocks pushed the
/// ones apply's point reads come back to out of the cache: the members
/// spent 6% more CPU per 4 KiB put (`docs/performance.md`, twenty-fourth
/// round).
fn trim_oldest<E: Engine>(
    engine: &E,
    batch: &mut WriteBatch,
    (mut count, mut bytes): (u64, u64),
    retention: &Retention,
) -> Result<(u64, u64), EngineError> {
    let over = |count: u64, bytes: u64| count > retention.change_events_max || bytes > retention.change_bytes_max;
    let slack_events = (retention.change_events_max / CHANGE_TRIM_SLACK_DIVISOR).min(CHANGE_TRIM_SLACK_EVENTS_MAX);
    let slack_bytes = retention.change_bytes_max / CHANGE_TRIM_SLACK_DIVISOR;
    let over_slack = count > retention.change_events_max.saturating_add(slack_events)
        || bytes > retention.change_bytes_max.saturating_add(slack_bytes);
    if !over_slack {
        return Ok((count, bytes));
    }
    let mut trimmed_through = None;
    let mut trimmed = 0;
    // Events before the first live key may still be stored; they were
    // trimmed.
    engine.walk(Space::ChangeLog, &first_live_key(engine)?, &mut |key, value| {
        count = count.saturating_sub(1);
        bytes = bytes.saturating_sub(value.len() as u64);
        trimmed += 1;
        trimmed_through = keys::split_change_key(key);
        over(count, bytes) && trimmed < CHANGE_TRIM_PER_APPLY_MAX
    })?;
    if let Some(through) = trimmed_through {
        batch.put(
            Space::StateMeta,
            meta::CHANGE_TRIMMED_THROUGH.to_vec(),
            encode("change log trim", &through)?,
        );
    }
    Ok((count, bytes))
}
