//! Queue operations: enqueue, claim for one delivery attempt, finish
//! (delivered, retried per the backoff schedule, or dead-lettered to the
//! message's undelivered keys in the same batch), and requeue of claims
//! whose listener went quiet. Where messages live is `crate::queue`.
//!
//! Every step is a log command applied here, so a message's state survives
//! leader changes and restarts, and delivery is at least once: a claim that
//! never finishes becomes a failed attempt when its visibility runs out.

use serde::{Deserialize, Serialize};

use super::context::ApplyContext;
use super::overlay::Overlay;
use crate::command::{Encoding, EnqueueOptions, FinishedAs, MessageId, QueueDelivery};
use crate::engine::{Engine, Space};
use crate::entry::StoredEntry;
use crate::error::{decode, encode, EngineError};
use crate::keys;
use crate::limits::QUEUE_DELAY_MS_MAX;
use crate::queue::{id_bytes, split_timed_key, timed_key, ReadyFloor, CLAIMED, OVERDUE, READY};

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

/// A queue record written by this entry (plain bytes, never expiring).
fn record<E: Engine>(context: &ApplyContext<'_, E>, value: Vec<u8>) -> StoredEntry {
    context.stored(value, Encoding::Bytes, None, None)
}

/// Stores a new message, due at its delivery time (at once if that has
/// passed, at most `queue_delay_ms_max` from now).
pub(super) fn enqueue<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    payload: &[u8],
    encoding: &Encoding,
    options: &EnqueueOptions,
) -> Result<MessageId, EngineError> {
    let now_micros = context.now_micros();
    let id = MessageId {
        index: context.version(),
        sequence: context.next_message_sequence(),
    };
    let latest = now_micros.saturating_add(QUEUE_DELAY_MS_MAX.saturating_mul(1000));
    let deliver_at = options.deliver_at_micros.clamp(now_micros, latest);
    let message = StoredMessage {
        payload: payload.to_vec(),
        encoding: encoding.clone(),
        options: options.clone(),
        deliveries: 0,
    };
    let stored = record(context, encode("queue message", &message)?);
    context.put(timed_key(READY, deliver_at, id), stored)?;
    Ok(id)
}

/// The first ready message due by `now_micros` that the current command
/// may take, as this entry sees it: the engine's keys from the ready floor
/// on and this entry's own writes, in order. Moves the floor to the first
/// message found, or to the end of the search when none is.
///
/// Claims share log entries, so one entry may take several messages. A
/// message an earlier command of the entry put here (enqueued, or due again
/// after a failed delivery) is passed over and left for a later entry:
/// taking it would write its key twice in one entry, and the claim is then
/// as if it came before that command.
fn first_due<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    now_micros: u64,
) -> Result<Option<(Vec<u8>, StoredEntry)>, EngineError> {
    let start = context.ready_floor().start();
    let end = keys::entry_key(READY, &now_micros.saturating_add(1).to_be_bytes());
    if start >= end {
        return Ok(None);
    }
    let touched = context.written_between(&start, &end);
    // Each key this entry touched may hide one stored key from the scan;
    // past them, the first stored key is present and free to take.
    let mut candidates: Vec<Vec<u8>> = context
        .engine()
        .scan(Space::Entries, &start, Some(&end), touched.len() + 1)?
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    candidates.extend(touched);
    candidates.sort();
    candidates.dedup();
    let mut first_present = None;
    let mut taken = None;
    for key in candidates {
        let Some(entry) = context.get(&key)? else {
            continue;
        };
        first_present.get_or_insert_with(|| key.clone());
        if !context.written_by_earlier_command(&key) {
            taken = Some((key, entry));
            break;
        }
    }
    context.move_ready_floor(ReadyFloor::at(first_present.unwrap_or(end)));
    Ok(taken)
}

/// A message's payload while it is claimed, as this entry sees it.
pub(super) fn claimed_payload<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    id: MessageId,
) -> Result<Option<Vec<u8>>, EngineError> {
    let Some(entry) = overlay.get(&keys::entry_key(CLAIMED, &id_bytes(id)))? else {
        return Ok(None);
    };
    let claimed: ClaimedMessage = decode("claimed queue message", &entry.value)?;
    Ok(Some(claimed.message.payload))
}

/// Takes the next due message for one delivery attempt.
pub(super) fn claim<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    visibility_ms: u32,
) -> Result<Option<QueueDelivery>, EngineError> {
    let now_micros = context.now_micros();
    let Some((ready_key, entry)) = first_due(context, now_micros)? else {
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
    context.remove(ready_key)?;
    let claimed = ClaimedMessage {
        message,
        visible_again_at_micros: visible_again_at,
    };
    let stored = record(context, encode("claimed queue message", &claimed)?);
    context.put(keys::entry_key(CLAIMED, &id_bytes(id)), stored)?;
    let overdue = record(context, Vec::new());
    context.put(timed_key(OVERDUE, visible_again_at, id), overdue)?;
    Ok(Some(delivery))
}

/// Ends a claimed delivery: `attempt` names the delivery (`None`: whichever
/// is claimed).
pub(super) fn finish<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    id: MessageId,
    attempt: Option<u32>,
    delivered: bool,
) -> Result<FinishedAs, EngineError> {
    let claimed_key = keys::entry_key(CLAIMED, &id_bytes(id));
    // A claim made by an earlier command of this entry is not this finish's
    // to end: the finish is as if it came before that claim (no client
    // learns of a claim before its entry is applied).
    if context.written_by_earlier_command(&claimed_key) {
        return Ok(FinishedAs::NotClaimed);
    }
    let Some(entry) = context.get(&claimed_key)? else {
        return Ok(FinishedAs::NotClaimed);
    };
    let claimed: ClaimedMessage = decode("claimed queue message", &entry.value)?;
    if attempt.is_some_and(|attempt| attempt != claimed.message.deliveries) {
        return Ok(FinishedAs::NotClaimed);
    }
    context.remove(claimed_key)?;
    context.remove(timed_key(OVERDUE, claimed.visible_again_at_micros, id))?;
    if delivered {
        return Ok(FinishedAs::Delivered);
    }
    failed(context, id, claimed.message)
}

/// A failed delivery: due again after the schedule's next delay, or, when
/// the schedule is spent, written to the undelivered keys and dropped.
fn failed<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    id: MessageId,
    message: StoredMessage,
) -> Result<FinishedAs, EngineError> {
    let schedule = message.options.schedule_ms();
    let retry_delay = usize::try_from(message.deliveries)
        .ok()
        .and_then(|deliveries| deliveries.checked_sub(1))
        .and_then(|spent| schedule.get(spent).copied());
    if let Some(delay_ms) = retry_delay {
        let deliver_at = context.now_micros().saturating_add(u64::from(delay_ms) * 1000);
        let stored = record(context, encode("queue message", &message)?);
        context.put(timed_key(READY, deliver_at, id), stored)?;
        return Ok(FinishedAs::Retrying {
            deliver_at_micros: deliver_at,
        });
    }
    for key in &message.options.keys_if_undelivered {
        let entry = context.stored(message.payload.clone(), message.encoding.clone(), None, None);
        context.put(keys::entry_key(lode_types::DENO_NAMESPACE, key), entry)?;
    }
    Ok(FinishedAs::DeadLettered)
}

/// Ends, as failed, up to `messages_max` claims whose visibility ran out.
pub(super) fn requeue_overdue<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    messages_max: u32,
) -> Result<u32, EngineError> {
    let start = keys::namespace_prefix(OVERDUE);
    let end = keys::entry_key(OVERDUE, &context.now_micros().saturating_add(1).to_be_bytes());
    let overdue = context
        .engine()
        .scan(Space::Entries, &start, Some(&end), messages_max as usize)?;
    let mut requeued = 0;
    for (overdue_key, _) in overdue {
        let (_, id) = split_timed_key(&overdue_key)?;
        let dropped = crate::injected_bugs::enabled(crate::injected_bugs::InjectedBug::DropOverdueClaims);
        if finish(context, id, None, dropped)? != FinishedAs::NotClaimed {
            requeued += 1;
        }
    }
    Ok(requeued)
}
