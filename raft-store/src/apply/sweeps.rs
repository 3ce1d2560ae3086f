//! The leader's housekeeping: sweeps of expired entries, so every replica
//! removes them at the same log position, and requeues of queue claims
//! whose visibility ran out (`super::queue`).

use super::context::ApplyContext;
use super::Applied;
use crate::command::OperationResult;
use crate::engine::{Engine, Space};
use crate::error::EngineError;
use crate::keys;

/// Removes entries whose expiry is at or before the command's time, oldest
/// expiry first, at most `entries_max`.
pub(super) fn sweep_expired<E: Engine>(context: &mut ApplyContext<'_, E>, entries_max: u32) -> Applied {
    let end = context.now_micros().saturating_add(1).to_be_bytes();
    let due = context
        .engine()
        .scan(Space::Expiry, &[], Some(&end), entries_max as usize)?;
    let mut removed = 0;
    for (index_key, _) in due {
        let (expires_at, entry_key) = keys::split_expiry_key(&index_key)
            .ok_or_else(|| EngineError::corrupt("expiry index key", "shorter than 8 bytes"))?;
        match context.get(entry_key)? {
            Some(entry) if entry.expires_at_micros == Some(expires_at) => {
                context.remove(entry_key.to_vec())?;
                removed += 1;
            }
            // The entry was rewritten or removed earlier in this entry; only
            // the index key is left to drop.
            _ => context.delete_raw(Space::Expiry, index_key.clone()),
        }
    }
    Ok(Ok(OperationResult::SweepExpired { removed }))
}

pub(super) fn requeue_overdue<E: Engine>(context: &mut ApplyContext<'_, E>, messages_max: u32) -> Applied {
    Ok(Ok(OperationResult::Requeued {
        requeued: super::queue::requeue_overdue(context, messages_max)?,
    }))
}
