//! Which of the Raft log's entries are on disk, for a leader that syncs its
//! own appends in the background.
//!
//! openraft 0.9 replicates an entry only after the leader's append of it
//! reports flushed. Were the leader's append synced before it reported, a
//! single client's write would wait for two syncs one after the other: the
//! leader's, then a follower's. So the leader's appends of its own entries
//! report as soon as they are written, a background task syncs them
//! ([`crate::log_store`]), and the followers' syncs run meanwhile, as
//! etcd's leader does. openraft may then count the leader's copy in a
//! commit quorum before it is on disk. Two rules keep that harmless:
//! - apply waits until the log holds the entry on disk
//!   ([`LogDurability::wait_until_durable`]), so no client hears of an entry
//!   a crash could still take from the leader;
//! - no follower is told a commit index beyond what the leader holds on
//!   disk ([`LogDurability::commit_to_send`]), so no follower applies one
//!   either.
//!
//! An entry applied anywhere is then on disk on every member of the quorum
//! that committed it, which is all Raft needs. An entry committed in
//! openraft's view and lost with the leader's machine was never applied or
//! acknowledged anywhere; its client retries it with the same op id.
//!
//! Followers' appends are synced before they report, so on a follower every
//! entry is always durable and nothing here waits.

use std::collections::VecDeque;
use std::time::Duration;

use openraft::LogId;
use tokio::sync::watch;

use crate::type_config::NodeId;

/// What is not yet on disk. Shared by the log store's clones, the state
/// machine and the network of one member.
#[derive(Debug)]
pub struct LogDurability {
    progress: watch::Sender<Progress>,
}

#[derive(Debug, Default, Clone)]
struct Progress {
    /// Appends written but not yet synced, oldest first: each one's
    /// sequence number and first index. A leader appends in index order,
    /// so the first one's index bounds what is on disk.
    unsynced: VecDeque<(u64, u64)>,
    /// The sequence number the next unsynced append gets.
    next_sequence: u64,
    /// Why a background sync failed, once one did: from then on nothing
    /// more is known to reach the disk.
    failed: Option<String>,
}

impl Progress {
    fn covers(&self, index: u64) -> bool {
        self.unsynced.front().is_none_or(|(_, first)| index < *first)
            || crate::injected_bugs::enabled(crate::injected_bugs::InjectedBug::CommitBeforeLeaderSync)
    }
}

/// The background sync failed, so the entry waited for may never be on
/// disk; the member must stop.
#[derive(Debug, thiserror::Error)]
#[error("syncing the Raft log failed ({cause}), so log index {index} is not known to be on disk")]
pub struct NotDurable {
    pub index: u64,
    pub cause: String,
}

impl Default for LogDurability {
    fn default() -> Self {
        Self {
            progress: watch::Sender::new(Progress::default()),
        }
    }
}

impl LogDurability {
    /// Records an append written without a sync, whose first entry is at
    /// `first_index`; returns its sequence number for [`Self::synced_up_to`].
    pub(crate) fn written_unsynced(&self, first_index: u64) -> u64 {
        let mut sequence = 0;
        // Waiters are not woken: an append makes nothing newly durable, so
        // every one of them would only look and wait again.
        self.progress.send_if_modified(|progress| {
            sequence = progress.next_sequence;
            progress.next_sequence += 1;
            debug_assert!(
                progress.unsynced.back().is_none_or(|(_, first)| *first < first_index),
                "an unsynced append at {first_index} below an earlier one"
            );
            progress.unsynced.push_back((sequence, first_index));
            false
        });
        sequence
    }

    /// The sequence number of the newest unsynced append, if any: a sync
    /// begun now covers it and every older one.
    pub(crate) fn newest_unsynced(&self) -> Option<u64> {
        self.progress.borrow().unsynced.back().map(|(sequence, _)| *sequence)
    }

    /// A sync begun after the append numbered `sequence` was written has
    /// finished: that append and every older one are on disk.
    pub(crate) fn synced_up_to(&self, sequence: u64) {
        self.progress.send_modify(|progress| {
            while progress.unsynced.front().is_some_and(|(oldest, _)| *oldest <= sequence) {
                progress.unsynced.pop_front();
            }
        });
    }

    /// A synced write to the log finished: it made every earlier write
    /// durable too, as a sync of a write-ahead log does.
    pub(crate) fn all_synced(&self) {
        self.progress.send_if_modified(|progress| {
            let changed = !progress.unsynced.is_empty();
            progress.unsynced.clear();
            changed
        });
    }

    /// A background sync failed with `cause`; apply reports it when it
    /// stops the member.
    pub(crate) fn sync_failed(&self, cause: String) {
        self.progress.send_modify(|progress| progress.failed = Some(cause));
    }

    /// Whether the entry at `index` (and every one before it) is on disk.
    pub fn is_durable(&self, index: u64) -> bool {
        self.progress.borrow().covers(index)
    }

    /// Waits until the entry at `index` is on disk. Apply calls it before
    /// it applies the entry.
    pub async fn wait_until_durable(&self, index: u64) -> Result<(), NotDurable> {
        // The common case, a follower's entries or a sync long done,
        // without a subscription.
        if self.is_durable(index) {
            return Ok(());
        }
        let mut progress = self.progress.subscribe();
        let waited = progress
            .wait_for(|progress| progress.covers(index) || progress.failed.is_some())
            .await
            .map(|progress| match progress.covers(index) {
                true => None,
                false => progress.failed.clone(),
            });
        match waited {
            Ok(None) => Ok(()),
            Ok(Some(cause)) => Err(NotDurable { index, cause }),
            // The sender lives in `self`, so the wait ends only by a change.
            Err(_) => Err(NotDurable {
                index,
                cause: "the log store is gone".to_owned(),
            }),
        }
    }

    /// The commit index a leader may tell a follower, given openraft's
    /// `commit`: `commit` itself once the leader holds it on disk. A
    /// message without entries waits for that up to `wait`, as it carries
    /// nothing else; one with entries does not, as those should reach the
    /// follower while the leader syncs. When the leader does not hold it
    /// yet, the message tells no commit index (`None`), which a follower
    /// takes as no news: its own commit index never goes back.
    pub async fn commit_to_send(&self, commit: Option<LogId<NodeId>>, wait: Duration) -> Option<LogId<NodeId>> {
        let commit = commit?;
        let index_of_commit = commit.index;
        if self.is_durable(index_of_commit) {
            return Some(commit);
        }
        if wait.is_zero() {
            return None;
        }
        match tokio::time::timeout(wait, self.wait_until_durable(index_of_commit)).await {
            Ok(Ok(())) => Some(commit),
            Ok(Err(_)) | Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use openraft::testing::log_id;

    use super::LogDurability;

    #[test]
    fn an_unsynced_append_holds_back_its_indexes_until_a_sync_covers_it() {
        let durability = LogDurability::default();
        assert!(
            durability.is_durable(100),
            "nothing unsynced, yet something is held back"
        );
        let first = durability.written_unsynced(5);
        let second = durability.written_unsynced(8);
        assert!(durability.is_durable(4));
        assert!(!durability.is_durable(5));
        assert!(!durability.is_durable(9));
        // A sync begun after the first append only.
        durability.synced_up_to(first);
        assert!(durability.is_durable(7));
        assert!(!durability.is_durable(8));
        assert_eq!(durability.newest_unsynced(), Some(second));
        // A synced write covers every earlier one.
        durability.all_synced();
        assert!(durability.is_durable(u64::MAX));
        assert_eq!(durability.newest_unsynced(), None);
        // A sync that began before that synced write ends after it: it
        // releases nothing written since.
        let third = durability.written_unsynced(20);
        durability.synced_up_to(second);
        assert!(!durability.is_durable(20));
        durability.synced_up_to(third);
        assert!(durability.is_durable(20));
    }

    #[tokio::test]
    async fn waiting_ends_at_the_sync_or_fails_with_it() {
        let durability = Arc::new(LogDurability::default());
        let sequence = durability.written_unsynced(3);
        let waiter = tokio::spawn({
            let durability = durability.clone();
            async move { durability.wait_until_durable(3).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the wait ended before the sync");
        durability.synced_up_to(sequence);
        assert!(waiter.await.is_ok_and(|waited| waited.is_ok()));

        durability.written_unsynced(4);
        durability.sync_failed("the disk is gone".to_owned());
        let failed = durability.wait_until_durable(4).await;
        assert!(failed.is_err_and(|error| {
            let message = error.to_string();
            message.contains("log index 4") && message.contains("the disk is gone")
        }));
        // What was on disk before stays so.
        assert!(durability.wait_until_durable(3).await.is_ok());
    }

    #[tokio::test]
    async fn a_commit_index_beyond_the_disk_is_not_sent() {
        let durability = Arc::new(LogDurability::default());
        let sequence = durability.written_unsynced(10);
        let on_disk = Some(log_id(2, 1, 9));
        let beyond = Some(log_id(2, 1, 10));
        assert_eq!(durability.commit_to_send(on_disk, Duration::ZERO).await, on_disk);
        assert_eq!(durability.commit_to_send(beyond, Duration::ZERO).await, None);
        assert_eq!(durability.commit_to_send(None, Duration::ZERO).await, None);
        // A message without entries waits for the sync, within its bound.
        assert_eq!(
            durability.commit_to_send(beyond, Duration::from_millis(5)).await,
            None,
            "sent a commit index the leader does not hold on disk"
        );
        let sending = tokio::spawn({
            let durability = durability.clone();
            async move { durability.commit_to_send(beyond, Duration::from_secs(1)).await }
        });
        tokio::task::yield_now().await;
        durability.synced_up_to(sequence);
        assert_eq!(sending.await.ok().flatten(), beyond);
    }
}
