//! Drops the change events a trim passed soon after the trim, rather than
//! at the next snapshot: under load a snapshot comes every 10,000 entries,
//! tens of seconds apart, and the events written meanwhile (about 170 MiB
//! of them at 10,000 puts a second) would stay on disk until then.
//!
//! The state's write-ahead log is synced before the engine drops anything,
//! so every state a member can go back to after a power cut has moved the
//! trimmed-through position at least that far and reads none of what was
//! dropped (`apply/change_log.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::apply::change_log::trimmed_through;
use crate::engine::Engine;
use crate::error::EngineError;

/// Applied entries between two looks at the trimmed-through position: a
/// look is one point read, a drop one sync of the state's write-ahead log.
const ENTRIES_BETWEEN_LOOKS: u64 = 256;

/// The state machine's side of dropping trimmed events.
#[derive(Debug, Default)]
pub(crate) struct TrimmedEvents {
    entries_since_look: u64,
    /// The position of the last drop asked of the engine.
    dropped_through: Option<(u64, u32)>,
    /// A drop runs on a blocking thread: at most one at a time.
    dropping: Arc<AtomicBool>,
}

impl TrimmedEvents {
    /// Called after each apply of `entries` entries, once they are written.
    pub(crate) fn applied<E: Engine>(&mut self, engine: &Arc<E>, entries: u64) -> Result<(), EngineError> {
        self.entries_since_look += entries;
        if self.entries_since_look < ENTRIES_BETWEEN_LOOKS {
            return Ok(());
        }
        self.entries_since_look = 0;
        let Some(through) = trimmed_through(engine.as_ref())? else {
            return Ok(());
        };
        if Some(through) <= self.dropped_through {
            return Ok(());
        }
        if !engine.blocks_on_disk() {
            // The in-memory engine: at once, so a simulation stays on its
            // one thread.
            sync_then_drop(engine.as_ref(), through)?;
            self.dropped_through = Some(through);
            return Ok(());
        }
        if self.dropping.swap(true, Ordering::AcqRel) {
            // The drop still running covers less; a later look asks again.
            return Ok(());
        }
        self.dropped_through = Some(through);
        let (engine, dropping) = (engine.clone(), self.dropping.clone());
        tokio::task::spawn_blocking(move || {
            if let Err(error) = sync_then_drop(engine.as_ref(), through) {
                // The next look retries once the position moves; a failing
                // disk fails the next apply's write anyway.
                tracing::warn!(%error, "could not sync the state before dropping trimmed change events");
            }
            dropping.store(false, Ordering::Release);
        });
        Ok(())
    }
}

/// Makes every write so far durable, the one that moved the position to
/// `through` included, then lets the engine drop the events behind it.
fn sync_then_drop<E: Engine>(engine: &E, through: (u64, u32)) -> Result<(), EngineError> {
    engine.sync_writes()?;
    engine.forget_change_events_through(through);
    Ok(())
}
