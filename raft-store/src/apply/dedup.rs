//! Dedup by op id: a command whose op id has an outcome recorded (by an
//! earlier entry, or by an earlier command of this one) answers that
//! outcome and applies nothing; records older than the proposal's
//! retention are pruned a bounded number at a time.

use serde::{Deserialize, Serialize};

use super::overlay::Overlay;
use crate::command::{CommandOutcome, OpId};
use crate::engine::{Engine, Space, WriteBatch};
use crate::error::{decode, encode, EngineError};
use crate::keys::{self, meta};
use crate::limits::DEDUP_PRUNE_PER_APPLY_MAX;

/// A stored dedup record: the outcome to return for a repeated op id.
#[derive(Serialize, Deserialize)]
struct DedupRecord {
    time_micros: u64,
    outcome: CommandOutcome,
}

/// The outcome recorded for `op_id`, if any.
pub(super) fn recorded_outcome<E: Engine>(
    overlay: &Overlay<'_, E>,
    op_id: OpId,
) -> Result<Option<CommandOutcome>, EngineError> {
    if let Some(outcome) = overlay.outcomes.get(&op_id) {
        return Ok(Some(outcome.clone()));
    }
    match overlay.engine.get(Space::Dedup, &op_id.0.to_be_bytes())? {
        Some(bytes) => Ok(Some(decode::<DedupRecord>("dedup record", &bytes)?.outcome)),
        None => Ok(None),
    }
}

/// Records `outcome` as the answer to `op_id` for later repeats.
pub(super) fn record<E: Engine>(
    overlay: &mut Overlay<'_, E>,
    batch: &mut WriteBatch,
    op_id: OpId,
    outcome: &CommandOutcome,
) -> Result<(), EngineError> {
    let record = DedupRecord {
        time_micros: outcome.time_micros,
        outcome: outcome.clone(),
    };
    batch.put(
        Space::Dedup,
        op_id.0.to_be_bytes().to_vec(),
        encode("dedup record", &record)?,
    );
    batch.put(
        Space::DedupByTime,
        keys::dedup_time_key(outcome.time_micros, op_id.0).to_vec(),
        Vec::new(),
    );
    overlay.outcomes.insert(op_id, outcome.clone());
    Ok(())
}

/// Drops a bounded number of dedup records older than the retention window.
pub(super) fn prune<E: Engine>(
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
