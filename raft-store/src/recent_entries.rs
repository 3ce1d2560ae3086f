//! The newest log entries, kept in memory as they were appended.
//!
//! openraft 0.9 reads every entry back right after appending it: once per
//! follower to replicate it, and once more, on its core task, to apply it.
//! Served from the engine, each of those reads is a RocksDB scan and a
//! decode of bytes this member encoded a moment before. Served from here,
//! it is a copy of the entries' commands, which share their buffers.
//!
//! Invariants, each kept under the one lock:
//! - the entries held are contiguous, and the last of them is the last
//!   entry of the log: every append goes through here once it is written
//!   (a follower's synced, a leader's own synced in the background),
//!   and a truncation or purge drops its entries here before it reaches
//!   the disk, so nothing is held that the log does not hold;
//! - a read is answered from here only when every entry it asks for is
//!   held; otherwise the caller reads the engine, as without this cache.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::Entry;

use crate::type_config::TypeConfig;

/// Most entries held. openraft reads back only the entries still in
/// flight (the proposer keeps a few proposals so); a follower far behind
/// reads the engine.
pub const RECENT_ENTRIES_MAX: usize = 64;
/// Most encoded bytes of the entries held; an entry larger than this
/// alone empties the cache instead of joining it.
pub const RECENT_ENTRIES_BYTES_MAX: usize = 8 << 20;
const _: () = assert!(crate::limits::REQUEST_BYTES_MAX < RECENT_ENTRIES_BYTES_MAX);

/// The newest entries of one log; clones share them.
#[derive(Clone, Default)]
pub struct RecentEntries {
    held: Arc<Mutex<Held>>,
}

#[derive(Default)]
struct Held {
    /// Each entry with its encoded length.
    entries: VecDeque<(Entry<TypeConfig>, usize)>,
    bytes: usize,
}

impl Held {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(entry, _)| entry.log_id.index)
    }

    fn last_index(&self) -> Option<u64> {
        self.entries.back().map(|(entry, _)| entry.log_id.index)
    }

    fn pop_back(&mut self) {
        if let Some((_, bytes)) = self.entries.pop_back() {
            self.bytes -= bytes;
        }
    }

    fn pop_front(&mut self) {
        if let Some((_, bytes)) = self.entries.pop_front() {
            self.bytes -= bytes;
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// Drops every entry at or after `index`.
    fn cut_from(&mut self, index: u64) {
        while self.last_index().is_some_and(|last| last >= index) {
            self.pop_back();
        }
    }

    fn push(&mut self, entry: Entry<TypeConfig>, bytes: usize) {
        let index = entry.log_id.index;
        self.cut_from(index);
        if self.last_index().is_some_and(|last| last + 1 != index) || bytes > RECENT_ENTRIES_BYTES_MAX {
            // Not contiguous with what is held (the log below `index` was
            // never seen here), or too large to hold: start again empty,
            // which breaks no invariant.
            self.clear();
            if bytes > RECENT_ENTRIES_BYTES_MAX {
                return;
            }
        }
        self.entries.push_back((entry, bytes));
        self.bytes += bytes;
        while self.entries.len() > RECENT_ENTRIES_MAX || self.bytes > RECENT_ENTRIES_BYTES_MAX {
            self.pop_front();
        }
    }
}

impl RecentEntries {
    fn held(&self) -> MutexGuard<'_, Held> {
        // A panic while the lock was held left at worst fewer entries than
        // allowed, never wrong ones: every change removes before it adds.
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Entries just written to the log, in order, each with its encoded
    /// length. An entry at an index already held replaces it and every
    /// entry after it, as an append after a conflict does on disk.
    pub fn appended(&self, entries: Vec<(Entry<TypeConfig>, usize)>) {
        let mut held = self.held();
        for (entry, bytes) in entries {
            held.push(entry, bytes);
        }
    }

    /// The log is about to lose every entry at or after `index`.
    pub fn truncating(&self, index: u64) {
        self.held().cut_from(index);
    }

    /// The log is about to lose every entry at or before `index`.
    pub fn purging(&self, index: u64) {
        let mut held = self.held();
        while held.first_index().is_some_and(|first| first <= index) {
            held.pop_front();
        }
    }

    /// The log is about to be written other than by an append.
    pub fn forget(&self) {
        self.held().clear();
    }

    /// The entries from `start` to `end` (exclusive; the last entry when
    /// `None`), at most `count_max` of them, if every one is held.
    pub fn read(&self, start: u64, end: Option<u64>, count_max: usize) -> Option<Vec<Entry<TypeConfig>>> {
        let held = self.held();
        let (first, last) = (held.first_index()?, held.last_index()?);
        let end = match end {
            Some(end) if start >= end => return Some(Vec::new()),
            // An end past the last entry held asks for entries the log may
            // hold on disk before they reach this cache: the engine answers.
            Some(end) if end > last + 1 => return None,
            Some(end) => end,
            None => last + 1,
        };
        if start < first || start > last {
            return None;
        }
        let skip = usize::try_from(start - first).ok()?;
        let count = usize::try_from(end.saturating_sub(start)).ok()?.min(count_max);
        Some(
            held.entries
                .iter()
                .skip(skip)
                .take(count)
                .map(|(entry, _)| entry.clone())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::*;

    fn entry(term: u64, index: u64) -> (Entry<TypeConfig>, usize) {
        let log_id = LogId::new(CommittedLeaderId::new(term, 1), index);
        (
            Entry {
                log_id,
                payload: EntryPayload::Blank,
            },
            100,
        )
    }

    fn indexes(entries: Option<Vec<Entry<TypeConfig>>>) -> Option<Vec<(u64, u64)>> {
        entries.map(|entries| {
            entries
                .iter()
                .map(|entry| (entry.log_id.leader_id.term, entry.log_id.index))
                .collect()
        })
    }

    #[test]
    fn reads_only_what_is_held_whole() {
        let recent = RecentEntries::default();
        assert_eq!(indexes(recent.read(1, None, 10)), None, "nothing held");
        recent.appended((5..=8).map(|index| entry(1, index)).collect());
        assert_eq!(indexes(recent.read(6, Some(8), 10)), Some(vec![(1, 6), (1, 7)]));
        assert_eq!(indexes(recent.read(7, None, 10)), Some(vec![(1, 7), (1, 8)]));
        assert_eq!(indexes(recent.read(5, None, 2)), Some(vec![(1, 5), (1, 6)]));
        assert_eq!(indexes(recent.read(4, Some(6), 10)), None, "index 4 is not held");
        assert_eq!(
            indexes(recent.read(7, Some(10), 10)),
            None,
            "index 9 may be on disk only"
        );
        assert_eq!(indexes(recent.read(9, None, 10)), None, "past the last held");
        assert_eq!(indexes(recent.read(6, Some(6), 10)), Some(vec![]));
    }

    #[test]
    fn an_append_over_held_entries_replaces_them_and_all_after() {
        let recent = RecentEntries::default();
        recent.appended((1..=6).map(|index| entry(1, index)).collect());
        recent.appended(vec![entry(2, 4)]);
        assert_eq!(
            indexes(recent.read(1, None, 10)),
            Some(vec![(1, 1), (1, 2), (1, 3), (2, 4)])
        );
        recent.truncating(3);
        assert_eq!(indexes(recent.read(1, None, 10)), Some(vec![(1, 1), (1, 2)]));
        recent.purging(1);
        assert_eq!(indexes(recent.read(1, None, 10)), None, "index 1 was purged");
        assert_eq!(indexes(recent.read(2, None, 10)), Some(vec![(1, 2)]));
    }

    #[test]
    fn a_gap_or_an_oversized_entry_starts_the_cache_again() {
        let recent = RecentEntries::default();
        recent.appended((1..=3).map(|index| entry(1, index)).collect());
        recent.appended(vec![entry(1, 7)]);
        assert_eq!(indexes(recent.read(3, None, 10)), None, "3 came before a gap");
        assert_eq!(indexes(recent.read(7, None, 10)), Some(vec![(1, 7)]));
        let (large, _) = entry(1, 8);
        recent.appended(vec![(large, RECENT_ENTRIES_BYTES_MAX + 1)]);
        assert_eq!(
            indexes(recent.read(7, None, 10)),
            None,
            "an oversized entry is never held"
        );
        recent.appended(vec![entry(1, 9)]);
        assert_eq!(indexes(recent.read(9, None, 10)), Some(vec![(1, 9)]));
    }

    #[test]
    fn holds_at_most_its_count_and_bytes() {
        let recent = RecentEntries::default();
        let count = RECENT_ENTRIES_MAX as u64 + 10;
        recent.appended((1..=count).map(|index| entry(1, index)).collect());
        assert_eq!(indexes(recent.read(10, None, usize::MAX)), None);
        let held = recent.read(11, None, usize::MAX).map(|entries| entries.len());
        assert_eq!(held, Some(RECENT_ENTRIES_MAX));
        let half = RECENT_ENTRIES_BYTES_MAX / 2 + 1;
        let (first, _) = entry(1, count + 1);
        let (second, _) = entry(1, count + 2);
        recent.appended(vec![(first, half), (second, half)]);
        assert_eq!(indexes(recent.read(count + 1, None, 10)), None, "over the byte limit");
        assert_eq!(indexes(recent.read(count + 2, None, 10)), Some(vec![(1, count + 2)]));
    }
}
