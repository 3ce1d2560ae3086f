//! Queue messages in the state machine: enqueue, claim for one delivery
//! attempt, finish (delivered, retried per the backoff schedule, or
//! dead-lettered to the message's undelivered keys), and requeue of claims
//! whose listener went quiet.
//!
//! Every step is a log command applied here, so a message's state survives
//! leader changes and restarts, and delivery is at least once: a claim that
//! never finishes becomes a failed attempt when its visibility runs out.
//!
//! Messages are entries of three internal namespaces (NUL-prefixed, so no
//! change events and no user scan sees them): `ready`, keyed by delivery
//! time then id so the next due message is the first key; `claimed`, keyed
//! by id; and `overdue`, keyed by the time a claim's visibility ends then
//! id, so requeueing reads the oldest first.

use serde::{Deserialize, Serialize};

use crate::apply::Overlay;
use crate::command::{Encoding, EnqueueOptions, FinishedAs, MessageId, QueueDelivery};
use crate::engine::{Engine, Space, WriteBatch};
use crate::entry::{SourceId, StoredEntry};
use crate::error::{decode, encode, EngineError};
use crate::keys;
use crate::limits::QUEUE_DELAY_MS_MAX;

const READY: &str = "\0queue\0ready";
const CLAIMED: &str = "\0queue\0claimed";
const OVERDUE: &str = "\0queue\0overdue";

/// How many stored ready messages a claim looks at past ones this entry
/// already removed.
const CLAIM_EXAMINED_MAX: usize = 64;

#[derive(Serialize, Deserialize)]
struct StoredMessage {
    #[serde(with = "serde_bytes")]
    payload: Vec<u8>,
    encoding: Encoding,
    options: EnqueueOptions,
    /// Deliveries made so far.
    deliveries: u32,
}

#[derive(Serialize, Deserialize)]
struct ClaimedMessage {
    message: StoredMessage,
    visible_again_at_micros: u64,
}

fn id_bytes(id: MessageId) -> [u8; 12] {
    keys::change_key(id.index, id.sequence)
}

fn id_from_bytes(bytes: &[u8]) -> Option<MessageId> {
    let index = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    let sequence = u32::from_be_bytes(bytes.get(8..12)?.try_into().ok()?);
    Some(MessageId { index, sequence })
}

/// The time and id of a stored `ready` or `overdue` key.
fn split_timed_key(stored_key: &[u8]) -> Result<(u64, MessageId), EngineError> {
    let (_, suffix) =
        keys::split_entry_key(stored_key).ok_or_else(|| EngineError::corrupt("queue key", "no namespace"))?;
    let at = suffix.get(..8).and_then(|bytes| <[u8; 8]>::try_from(bytes).ok());
    match (at, suffix.get(8..).and_then(id_from_bytes)) {
        (Some(at), Some(id)) => Ok((u64::from_be_bytes(at), id)),
        _ => Err(EngineError::corrupt("queue key", "shorter than 20 bytes")),
    }
}

fn timed_key(namespace: &str, at_micros: u64, id: MessageId) -> Vec<u8> {
    let mut key = at_micros.to_be_bytes().to_vec();
    key.extend_from_slice(&id_bytes(id));
    keys::entry_key(namespace, &key)
}

fn record(value: Vec<u8>, source: SourceId) -> StoredEntry {
    StoredEntry {
        value,
        encoding: Encoding::Bytes,
        version: source.index,
        expires_at_micros: None,
        source,
        session: None,
    }
}

/// Stores a new message, due at its delivery time (at once if that has
/// passed, at most `queue_delay_ms_max` from now).
pub(crate) fn enqueue<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    payload: &[u8],
    encoding: &Encoding,
    options: &EnqueueOptions,
    now_micros: u64,
    source: SourceId,
) -> Result<MessageId, EngineError> {
    let id = MessageId {
        index: source.index,
        sequence: overlay.next_message_sequence(),
    };
    let latest = now_micros.saturating_add(QUEUE_DELAY_MS_MAX.saturating_mul(1000));
    let deliver_at = options.deliver_at_micros.clamp(now_micros, latest);
    let message = StoredMessage {
        payload: payload.to_vec(),
        encoding: encoding.clone(),
        options: options.clone(),
        deliveries: 0,
    };
    overlay.put(
        batch,
        timed_key(READY, deliver_at, id),
        record(encode("queue message", &message)?, source),
    )?;
    Ok(id)
}

/// The first present entry of a namespace before `end_key`, as this entry
/// sees it: the engine's keys and this entry's own writes, in order.
fn first_present<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    namespace: &str,
    end_key: &[u8],
) -> Result<Option<(Vec<u8>, StoredEntry)>, EngineError> {
    let start = keys::namespace_prefix(namespace);
    let end = keys::entry_key(namespace, end_key);
    let mut candidates: Vec<Vec<u8>> = overlay
        .engine()
        .scan(Space::Entries, &start, Some(&end), CLAIM_EXAMINED_MAX)?
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    candidates.extend(overlay.written_between(&start, &end));
    candidates.sort();
    candidates.dedup();
    for key in candidates {
        if let Some(entry) = overlay.get(&key)? {
            return Ok(Some((key, entry)));
        }
    }
    Ok(None)
}

/// Takes the next due message for one delivery attempt.
pub(crate) fn claim<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    visibility_ms: u32,
    now_micros: u64,
    source: SourceId,
) -> Result<Option<QueueDelivery>, EngineError> {
    let due_end = now_micros.saturating_add(1).to_be_bytes();
    let Some((ready_key, entry)) = first_present(overlay, READY, &due_end)? else {
        return Ok(None);
    };
    let (_, id) = split_timed_key(&ready_key)?;
    let mut message: StoredMessage = decode("queue message", &entry.value)?;
    message.deliveries = message.deliveries.saturating_add(1);
    let visible_again_at = now_micros.saturating_add(u64::from(visibility_ms) * 1000);
    let delivery = QueueDelivery {
        id,
        payload: message.payload.clone(),
        encoding: message.encoding.clone(),
        attempt: message.deliveries,
    };
    overlay.remove(batch, ready_key)?;
    let claimed = ClaimedMessage {
        message,
        visible_again_at_micros: visible_again_at,
    };
    overlay.put(
        batch,
        keys::entry_key(CLAIMED, &id_bytes(id)),
        record(encode("claimed queue message", &claimed)?, source),
    )?;
    overlay.put(
        batch,
        timed_key(OVERDUE, visible_again_at, id),
        record(Vec::new(), source),
    )?;
    Ok(Some(delivery))
}

/// Ends a claimed delivery: `attempt` names the delivery (`None`: whichever
/// is claimed).
pub(crate) fn finish<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    id: MessageId,
    attempt: Option<u32>,
    delivered: bool,
    now_micros: u64,
    source: SourceId,
) -> Result<FinishedAs, EngineError> {
    let claimed_key = keys::entry_key(CLAIMED, &id_bytes(id));
    let Some(entry) = overlay.get(&claimed_key)? else {
        return Ok(FinishedAs::NotClaimed);
    };
    let claimed: ClaimedMessage = decode("claimed queue message", &entry.value)?;
    if attempt.is_some_and(|attempt| attempt != claimed.message.deliveries) {
        return Ok(FinishedAs::NotClaimed);
    }
    overlay.remove(batch, claimed_key)?;
    overlay.remove(batch, timed_key(OVERDUE, claimed.visible_again_at_micros, id))?;
    if delivered {
        return Ok(FinishedAs::Delivered);
    }
    failed(overlay, batch, id, claimed.message, now_micros, source)
}

/// A failed delivery: due again after the schedule's next delay, or, when
/// the schedule is spent, written to the undelivered keys and dropped.
fn failed<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    id: MessageId,
    message: StoredMessage,
    now_micros: u64,
    source: SourceId,
) -> Result<FinishedAs, EngineError> {
    let schedule = message.options.schedule_ms();
    let retry_delay = usize::try_from(message.deliveries)
        .ok()
        .and_then(|deliveries| deliveries.checked_sub(1))
        .and_then(|spent| schedule.get(spent).copied());
    if let Some(delay_ms) = retry_delay {
        let deliver_at = now_micros.saturating_add(u64::from(delay_ms) * 1000);
        overlay.put(
            batch,
            timed_key(READY, deliver_at, id),
            record(encode("queue message", &message)?, source),
        )?;
        return Ok(FinishedAs::Retrying {
            deliver_at_micros: deliver_at,
        });
    }
    for key in &message.options.keys_if_undelivered {
        let entry = StoredEntry {
            value: message.payload.clone(),
            encoding: message.encoding.clone(),
            version: source.index,
            expires_at_micros: None,
            source,
            session: None,
        };
        overlay.put(batch, keys::entry_key(lode_types::DENO_NAMESPACE, key), entry)?;
    }
    Ok(FinishedAs::DeadLettered)
}

/// Ends, as failed, up to `messages_max` claims whose visibility ran out.
pub(crate) fn requeue_overdue<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    messages_max: u32,
    now_micros: u64,
    source: SourceId,
) -> Result<u32, EngineError> {
    let start = keys::namespace_prefix(OVERDUE);
    let end = keys::entry_key(OVERDUE, &now_micros.saturating_add(1).to_be_bytes());
    let overdue = overlay
        .engine()
        .scan(Space::Entries, &start, Some(&end), messages_max as usize)?;
    let mut requeued = 0;
    for (overdue_key, _) in overdue {
        let (_, id) = split_timed_key(&overdue_key)?;
        let dropped = crate::injected_bugs::enabled(crate::injected_bugs::InjectedBug::DropOverdueClaims);
        if finish(overlay, batch, id, None, dropped, now_micros, source)? != FinishedAs::NotClaimed {
            requeued += 1;
        }
    }
    Ok(requeued)
}

/// When the next ready message is due, if any.
pub fn next_due_micros<E: Engine>(engine: &E) -> Result<Option<u64>, EngineError> {
    let start = keys::namespace_prefix(READY);
    let end = keys::prefix_end(&start);
    let first = engine.scan(Space::Entries, &start, end.as_deref(), 1)?;
    first
        .first()
        .map(|(key, _)| split_timed_key(key).map(|(at, _)| at))
        .transpose()
}

/// Whether a claim's visibility has run out by `now_micros`.
pub fn has_overdue<E: Engine>(engine: &E, now_micros: u64) -> Result<bool, EngineError> {
    let start = keys::namespace_prefix(OVERDUE);
    let end = keys::entry_key(OVERDUE, &now_micros.saturating_add(1).to_be_bytes());
    Ok(!engine.scan(Space::Entries, &start, Some(&end), 1)?.is_empty())
}
