//! Local reads of the state machine, for the node's read paths.
//!
//! A reader sees whatever this replica has applied; the node decides whether
//! that is fresh enough (read index, position barrier, or eventual).

use std::sync::Arc;
use std::time::Duration;

use crate::applied_index::AppliedIndex;
use crate::command::{ChangeEvent, Selector};
use crate::engine::{Engine, RangeRead, Space};
use crate::entry::StoredEntry;
use crate::error::{decode, EngineError};
use crate::keys;
use crate::limits::{
    CHANGES_PAGE_EVENTS_MAX, NAMESPACES_EXAMINED_MAX, NAMESPACES_LISTED_MAX, RANGES_READ_BYTES_MAX, RANGE_ENTRIES_MAX,
    SCAN_EXAMINED_ENTRIES_MAX, SCAN_PAGE_BYTES_MAX, SCAN_PAGE_ENTRIES_MAX,
};
use lode_types::KeyRange;

/// A read handle on one replica's state. Clones share the engine.
pub struct StateReader<E: Engine> {
    engine: Arc<E>,
    applied: AppliedIndex,
    /// Counts the applies that may have changed the auth state (an auth
    /// change, a restored snapshot).
    auth_version: AppliedIndex,
    /// Where the search for the next due queue message starts.
    ready_floor: crate::queue::PublishedReadyFloor,
}

impl<E: Engine> Clone for StateReader<E> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
            applied: self.applied.clone(),
            auth_version: self.auth_version.clone(),
            ready_floor: self.ready_floor.clone(),
        }
    }
}

/// Change events read from the change log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ChangesPage {
    pub events: Vec<ChangeEvent>,
    /// The last position examined: where the next read continues, even when
    /// the prefix filtered every examined event out.
    pub resume_after: (u64, u32),
}

/// Events after the requested position were trimmed from the change log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    pub requested: (u64, u32),
    /// The last position trimmed; reading after it is possible.
    pub trimmed_through: (u64, u32),
}

/// One page of the keys written under a session.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SessionKeysPage {
    /// (namespace, key) pairs in order.
    pub keys: Vec<(String, Vec<u8>)>,
    /// Where the next page starts; `None` once done.
    pub resume_after: Option<Vec<u8>>,
}

/// A live lease as the state machine holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInfo {
    pub holder: String,
    /// The log index of the grant.
    pub token: u64,
    pub expires_at_micros: u64,
}

/// Keys (without the namespace) and their entries, in walk order.
pub type KeyedEntries = Vec<(Vec<u8>, StoredEntry)>;

/// One page of a scan.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ScanPage {
    /// Keys (without the namespace) and their live entries, in key order.
    pub entries: Vec<(Vec<u8>, StoredEntry)>,
    /// The last key examined when the range may hold more.
    pub resume_after: Option<Vec<u8>>,
}

/// The applied position did not reach the requested one in time.
#[derive(Debug, thiserror::Error)]
#[error("applied index {applied} did not reach {wanted} in time")]
pub struct NotCaughtUp {
    pub applied: u64,
    pub wanted: u64,
}

impl<E: Engine> StateReader<E> {
    pub(crate) fn new(
        engine: Arc<E>,
        applied: AppliedIndex,
        auth_version: AppliedIndex,
        ready_floor: crate::queue::PublishedReadyFloor,
    ) -> Self {
        Self {
            engine,
            applied,
            auth_version,
            ready_floor,
        }
    }

    /// A number that moves whenever the auth state may have changed, so a
    /// cache of [`Self::auth_state`] knows when to read it again.
    pub fn auth_version(&self) -> u64 {
        self.auth_version.get()
    }

    /// Every user, role and token this replica has applied.
    pub fn auth_state(&self) -> Result<crate::auth::AuthState, EngineError> {
        crate::auth::AuthState::load(self.engine.as_ref())
    }

    /// A digest of everything this replica's state machine holds (entries,
    /// indexes, dedup records, change log, apply meta). Two replicas that
    /// applied the same log prefix have equal digests; the simulation
    /// compares them after faults heal. Reads the whole state: an
    /// operator's and a test's tool, not a request path.
    pub fn state_digest(&self) -> Result<u64, EngineError> {
        // FNV-1a: stable across processes and platforms, unlike std's hasher.
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0100_0000_01b3;
        fn feed(digest: &mut u64, bytes: &[u8]) {
            for byte in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
                *digest = (*digest ^ u64::from(*byte)).wrapping_mul(PRIME);
            }
        }
        const PAGE_PAIRS: usize = 1024;
        let mut digest = OFFSET;
        for space in Space::ALL {
            if matches!(space, Space::Log | Space::RaftMeta) {
                continue;
            }
            feed(&mut digest, space.name().as_bytes());
            // Trimmed events are gone for readers, whether or not this
            // member's engine has dropped their bytes yet.
            let mut start = crate::apply::change_log::first_readable_key(self.engine.as_ref(), space)?;
            loop {
                let page = self.engine.scan(space, &start, None, PAGE_PAIRS)?;
                for (key, value) in &page {
                    feed(&mut digest, key);
                    feed(&mut digest, value);
                }
                match page.last() {
                    Some((key, _)) if page.len() == PAGE_PAIRS => {
                        start = key.clone();
                        start.push(0);
                    }
                    _ => break,
                }
            }
        }
        Ok(digest)
    }

    /// The events and bytes the change log keeps.
    pub fn change_log_size(&self) -> Result<(u64, u64), EngineError> {
        use crate::apply::change_log::read_counter;
        use crate::keys::meta;
        Ok((
            read_counter(self.engine.as_ref(), meta::CHANGE_COUNT)?,
            read_counter(self.engine.as_ref(), meta::CHANGE_BYTES)?,
        ))
    }

    /// The log index of the last entry applied on this replica.
    pub fn applied_index(&self) -> u64 {
        self.applied.get()
    }

    /// Waits until this replica has applied `index`, for at most `timeout`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<u64, NotCaughtUp> {
        match tokio::time::timeout(timeout, self.applied.wait_for(index)).await {
            Ok(reached) => Ok(reached),
            _ => Err(NotCaughtUp {
                applied: self.applied_index(),
                wanted: index,
            }),
        }
    }

    /// The live entry at `key`, as of `now_micros`: an expired entry reads
    /// as absent.
    pub fn get_entry(&self, namespace: &str, key: &[u8], now_micros: u64) -> Result<Option<StoredEntry>, EngineError> {
        let Some(bytes) = self.engine.get(Space::Entries, &keys::entry_key(namespace, key))? else {
            return Ok(None);
        };
        let entry: StoredEntry = decode("entry", &bytes)?;
        Ok(entry.is_live_at(now_micros).then_some(entry))
    }

    /// The live entries at `keys` (in the order given), read from one
    /// consistent view.
    pub fn get_many(
        &self,
        namespace: &str,
        keys: &[Vec<u8>],
        now_micros: u64,
    ) -> Result<Vec<Option<StoredEntry>>, EngineError> {
        let stored_keys: Vec<Vec<u8>> = keys.iter().map(|key| keys::entry_key(namespace, key)).collect();
        self.engine
            .get_many(Space::Entries, &stored_keys)?
            .into_iter()
            .map(|bytes| match bytes {
                Some(bytes) => {
                    let entry: StoredEntry = decode("entry", &bytes)?;
                    Ok(entry.is_live_at(now_micros).then_some(entry))
                }
                None => Ok(None),
            })
            .collect()
    }

    /// One page of live selected entries in key order, after the key
    /// `after` when given. A page holds at most `limit` entries and examines
    /// at most `scan_examined_entries_max` stored ones; `resume_after` is
    /// where the next page starts, `None` once the range is done. Keys are
    /// returned in strictly increasing order across pages, so a walk never
    /// returns a key twice nor skips one that existed throughout.
    pub fn scan(
        &self,
        namespace: &str,
        selector: &Selector,
        after: Option<&[u8]>,
        limit: usize,
        now_micros: u64,
    ) -> Result<ScanPage, EngineError> {
        let limit = limit.clamp(1, SCAN_PAGE_ENTRIES_MAX);
        let (mut start, end) = crate::command::stored_range(selector, namespace);
        if let Some(after) = after {
            let mut resume = keys::entry_key(namespace, after);
            resume.push(0);
            start = start.max(resume);
        }
        let mut page = ScanPage::default();
        let mut examined = 0;
        let mut page_bytes = 0;
        loop {
            let chunk = self.engine.scan(Space::Entries, &start, end.as_deref(), limit)?;
            let exhausted = chunk.len() < limit;
            for (stored_key, bytes) in chunk {
                examined += 1;
                let (_, key) = keys::split_entry_key(&stored_key)
                    .ok_or_else(|| EngineError::corrupt("entry key", "no namespace prefix"))?;
                let entry: StoredEntry = decode("entry", &bytes)?;
                if selector.matches(&key) && entry.is_live_at(now_micros) {
                    page_bytes += key.len() + entry.value.len();
                    page.entries.push((key.clone(), entry));
                }
                start = stored_key;
                start.push(0);
                let full = page.entries.len() == limit || page_bytes >= SCAN_PAGE_BYTES_MAX;
                if full || examined == SCAN_EXAMINED_ENTRIES_MAX {
                    page.resume_after = Some(key);
                    return Ok(page);
                }
            }
            if exhausted {
                return Ok(page);
            }
        }
    }

    /// The live entries of several key ranges of a namespace, all read from
    /// one consistent view: one list of (key, entry) per range, in the
    /// range's walk order. A range examines at most
    /// `scan_examined_entries_max` stored entries, so one crowded with
    /// expired entries awaiting their sweep may come back short. `None`
    /// when the ranges hold more than `ranges_read_bytes_max` bytes of keys
    /// and values.
    pub fn read_ranges(
        &self,
        namespace: &str,
        ranges: &[KeyRange],
        now_micros: u64,
    ) -> Result<Option<Vec<KeyedEntries>>, EngineError> {
        let reads: Vec<RangeRead> = ranges
            .iter()
            .map(|range| RangeRead {
                start: keys::entry_key(namespace, &range.start),
                end: keys::entry_key(namespace, &range.end),
                reverse: range.reverse,
                limit: (range.limit as usize).min(RANGE_ENTRIES_MAX),
                examined_max: SCAN_EXAMINED_ENTRIES_MAX,
            })
            .collect();
        // Past the byte limit nothing more is kept, so the read holds at
        // most the limit and one entry before it is refused.
        let bytes_kept = std::cell::Cell::new(0usize);
        let keep = |stored_key: &[u8], value: &[u8]| {
            if bytes_kept.get() > RANGES_READ_BYTES_MAX {
                return false;
            }
            let live = decode::<StoredEntry>("entry", value).is_ok_and(|entry| entry.is_live_at(now_micros));
            if live {
                bytes_kept.set(bytes_kept.get() + stored_key.len() + value.len());
            }
            live
        };
        let read = self.engine.read_ranges(Space::Entries, &reads, &keep)?;
        if bytes_kept.get() > RANGES_READ_BYTES_MAX {
            return Ok(None);
        }
        read.into_iter()
            .map(|pairs| {
                pairs
                    .into_iter()
                    .map(|(stored_key, bytes)| {
                        let (_, key) = keys::split_entry_key(&stored_key)
                            .ok_or_else(|| EngineError::corrupt("entry key", "no namespace prefix"))?;
                        Ok((key, decode::<StoredEntry>("entry", &bytes)?))
                    })
                    .collect()
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// When the next queue message is due, if any message waits.
    pub fn next_queue_due_micros(&self) -> Result<Option<u64>, EngineError> {
        crate::queue::next_due_micros(self.engine.as_ref(), &self.ready_floor)
    }

    /// Whether a claimed queue delivery's visibility has run out.
    pub fn has_overdue_deliveries(&self, now_micros: u64) -> Result<bool, EngineError> {
        crate::queue::has_overdue(self.engine.as_ref(), now_micros)
    }

    /// Namespaces that start with `prefix` and hold at least one live entry,
    /// in stored order (shorter names first). `None` when there are more
    /// than `namespaces_listed_max`, or the listing looked at
    /// `namespaces_examined_max` namespaces before its end: a listing is
    /// whole or refused, never cut short.
    pub fn namespaces(&self, prefix: &str, now_micros: u64) -> Result<Option<Vec<String>>, EngineError> {
        let mut names = Vec::new();
        let mut start: Vec<u8> = Vec::new();
        for _ in 0..NAMESPACES_EXAMINED_MAX {
            let Some((stored_key, _)) = self.engine.scan(Space::Entries, &start, None, 1)?.pop() else {
                return Ok(Some(names));
            };
            let (namespace, _) = keys::split_entry_key(&stored_key)
                .ok_or_else(|| EngineError::corrupt("entry key", "no namespace prefix"))?;
            // Lode's own records live in namespaces that start with NUL.
            if namespace.starts_with(prefix) && !namespace.starts_with('\0') {
                let live = self.scan(&namespace, &Selector::All, None, 1, now_micros)?;
                if !live.entries.is_empty() {
                    if names.len() == NAMESPACES_LISTED_MAX {
                        return Ok(None);
                    }
                    names.push(namespace.clone());
                }
            }
            match keys::prefix_end(&keys::namespace_prefix(&namespace)) {
                Some(next) => start = next,
                None => return Ok(Some(names)),
            }
        }
        Ok(None)
    }

    /// One page of the (namespace, key) pairs written under `session`, in
    /// order, after the stored pair `after` (as `resume_after` returned it).
    pub fn session_keys(
        &self,
        session: &crate::command::SessionLink,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<SessionKeysPage, EngineError> {
        let page = self.scan(&keys::session_namespace(session), &Selector::All, after, limit, 0)?;
        let mut keys = Vec::with_capacity(page.entries.len());
        for (stored_key, _) in page.entries {
            let pair = keys::split_entry_key(&stored_key)
                .ok_or_else(|| EngineError::corrupt("session index key", "no namespace prefix"))?;
            keys.push(pair);
        }
        Ok(SessionKeysPage {
            keys,
            resume_after: page.resume_after,
        })
    }

    /// Change events after position `after` (log index, sequence), in commit
    /// order: at most `limit` of them, looking at most at
    /// `changes_examined_max` events, keeping those whose namespace starts
    /// with `namespace_prefix`. `Err(Compacted)` when events after `after`
    /// were already trimmed, so a reader never misses one silently.
    pub fn changes(
        &self,
        after: (u64, u32),
        limit: usize,
        namespace_prefix: &str,
    ) -> Result<Result<ChangesPage, Compacted>, EngineError> {
        // Events at or before this position may still be stored: the scan
        // below must start past it.
        if let Some(trimmed_through) = crate::apply::change_log::trimmed_through(self.engine.as_ref())? {
            if after < trimmed_through {
                return Ok(Err(Compacted {
                    requested: after,
                    trimmed_through,
                }));
            }
        }
        let mut start = keys::change_key(after.0, after.1).to_vec();
        start.push(0);
        let limit = limit.clamp(1, CHANGES_PAGE_EVENTS_MAX);
        let mut page = ChangesPage {
            events: Vec::new(),
            resume_after: after,
        };
        // Walked in place, up to the event that fills the page: a scan of
        // the events a page may examine read and copied up to 10,000 of
        // them for a reader catching up, whatever the page's limit.
        let mut examined = 0;
        let mut failure = Ok(());
        self.engine.walk(Space::ChangeLog, &start, &mut |key, value| {
            examined += 1;
            match add_to_page(&mut page, key, value, namespace_prefix) {
                Ok(()) => page.events.len() < limit && examined < SCAN_EXAMINED_ENTRIES_MAX,
                Err(error) => {
                    failure = Err(error);
                    false
                }
            }
        })?;
        failure?;
        Ok(Ok(page))
    }

    /// The live lease at (`namespace`, `key`): its holder, token and expiry.
    pub fn lease(&self, namespace: &str, key: &[u8], now_micros: u64) -> Result<Option<LeaseInfo>, EngineError> {
        Ok(self
            .get_entry(&keys::lease_namespace(namespace), key, now_micros)?
            .map(|lease| LeaseInfo {
                holder: String::from_utf8_lossy(&lease.value).into_owned(),
                token: lease.version,
                expires_at_micros: lease.expires_at_micros.unwrap_or(u64::MAX),
            }))
    }

    /// How many stored entries have expired by `now_micros` and wait for a
    /// sweep to remove them, counting at most `count_max`.
    pub fn expired_awaiting_sweep(&self, now_micros: u64, count_max: usize) -> Result<usize, EngineError> {
        let end = now_micros.saturating_add(1).to_be_bytes();
        Ok(self.engine.scan(Space::Expiry, &[], Some(&end), count_max)?.len())
    }
}

/// Moves `page` past the stored change event `key`/`value`, and keeps the
/// event when its namespace starts with `namespace_prefix`.
fn add_to_page(page: &mut ChangesPage, key: &[u8], value: &[u8], namespace_prefix: &str) -> Result<(), EngineError> {
    let position =
        keys::split_change_key(key).ok_or_else(|| EngineError::corrupt("change log key", "shorter than 12 bytes"))?;
    let event: ChangeEvent = decode("change event", value)?;
    // Checked after reading back: the key and the event agree.
    if event.position() != position {
        return Err(EngineError::corrupt(
            "change event",
            format!("key {position:?} holds {:?}", event.position()),
        ));
    }
    page.resume_after = position;
    if event.namespace.starts_with(namespace_prefix) {
        page.events.push(event);
    }
    Ok(())
}
