//! The leader promotes learners to voters once they keep up: a learner
//! whose acknowledged log trails the leader's by at most
//! `promote_lag_entries_max` for `promote_caught_up_ms` in a row becomes a
//! voter, one learner at a time. A member added by `lode cluster add` (or
//! `--join`) thus never counts towards a quorum before it holds the log,
//! and one that never catches up is never promoted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::time::Instant;

use crate::shared::Shared;

/// How often the leader looks at its learners' progress.
const PROMOTION_CHECK_MS: u64 = 200;

/// Runs for the member's life; acts only while it leads as a voter.
pub async fn promote_learners(shared: Arc<Shared>, service: crate::service::NodeService) {
    let mut caught_up_since: BTreeMap<u64, Instant> = BTreeMap::new();
    let mut interval = tokio::time::interval(Duration::from_millis(PROMOTION_CHECK_MS));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(learners) = learners_progress(&shared) else {
            caught_up_since.clear();
            continue;
        };
        let now = Instant::now();
        caught_up_since.retain(|id, _| learners.get(id) == Some(&true));
        for (id, caught_up) in &learners {
            if *caught_up {
                caught_up_since.entry(*id).or_insert(now);
            }
        }
        let wait = Duration::from_millis(shared.config.promote_caught_up_ms);
        let Some(ready) = caught_up_since
            .iter()
            .find(|(_, since)| now.duration_since(**since) >= wait)
            .map(|(id, _)| *id)
        else {
            continue;
        };
        match service.promote_learner(ready).await {
            Ok(()) => tracing::info!(member = ready, "learner caught up; promoted to voter"),
            Err(error) => tracing::info!(member = ready, %error, "promoting a learner failed; trying again"),
        }
        caught_up_since.remove(&ready);
    }
}

/// Each learner and whether it is within the lag bound now, while this
/// member leads as a voter; `None` otherwise.
fn learners_progress(shared: &Shared) -> Option<BTreeMap<u64, bool>> {
    let metrics = shared.raft.metrics().borrow().clone();
    if metrics.state != ServerState::Leader {
        return None;
    }
    let membership = metrics.membership_config.membership();
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    if !voters.contains(&shared.id) {
        return None;
    }
    let replication = metrics.replication.as_ref()?;
    let last = metrics.last_log_index.unwrap_or(0);
    let lag_max = shared.config.promote_lag_entries_max;
    Some(
        membership
            .nodes()
            .map(|(id, _)| *id)
            .filter(|id| !voters.contains(id))
            .map(|id| {
                let matched = replication.get(&id).copied().flatten().map(|log_id| log_id.index);
                (
                    id,
                    matched.is_some_and(|matched| last.saturating_sub(matched) <= lag_max),
                )
            })
            .collect(),
    )
}
