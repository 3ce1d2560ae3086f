//! A leader stopped politely (SIGTERM) hands its leadership to a voter that
//! holds its whole log, so a rolling restart costs a round trip instead of
//! an election timeout.
//!
//! openraft 0.9 has no leadership transfer, so this is Raft's TimeoutNow
//! built from its parts: the leader holds new commands back
//! (`Proposer::hold`), waits until a voter has acknowledged its last entry,
//! and asks that voter to `campaign` at once. The old leader grants it the
//! vote (its log is not longer than the candidate's, and its own vote is
//! older than the leader lease), which with the candidate's own vote is a
//! quorum of three. In a larger cluster the other voters refuse until their
//! lease from the old leader runs out (`election_timeout_max`), which is
//! still sooner than waiting for an election timeout after it. Commands
//! held back go to Raft once the leadership has moved and are forwarded
//! from there. A handoff gives up after `HANDOFF_MS_MAX`; the member then
//! stops as it would have without one.

use std::time::Duration;

use lode_client::LodeError;
use openraft::ServerState;
use tokio::time::Instant;

use crate::shared::Shared;

/// The longest a stopping leader spends handing off its leadership.
pub const HANDOFF_MS_MAX: u64 = 2_000;
/// Past the leader lease, for the clocks' granularity.
const LEASE_MARGIN_MS: u64 = 20;
/// How often the handoff looks at replication progress.
const HANDOFF_POLL_MS: u64 = 5;

/// On the leader of a cluster with other voters: hands the leadership to
/// the most caught-up voter, within `HANDOFF_MS_MAX`. Does nothing on a
/// follower.
pub async fn hand_off_leadership(shared: &Shared) {
    if !leads(shared) || crate::shared::voter_ids(&shared.raft).len() < 2 {
        return;
    }
    let started = Instant::now();
    let deadline = started + Duration::from_millis(HANDOFF_MS_MAX);
    let Ok(_changing) = tokio::time::timeout_at(deadline, shared.membership_changes.lock()).await else {
        tracing::warn!("a membership change kept the leadership from being handed off");
        return;
    };
    wait_out_own_lease(shared, deadline).await;
    let _held = shared.proposer.hold();
    let Some((successor, address)) = caught_up_voter(shared, deadline).await else {
        tracing::warn!("no voter caught up in time; stopping without handing off the leadership");
        return;
    };
    let Some(cluster) = shared.cluster.get() else {
        return;
    };
    let connection = shared.peers.get(&address);
    let remaining = deadline.saturating_duration_since(Instant::now());
    let asked = connection
        .call(remaining, |client, context| async move {
            client.campaign(context, cluster).await
        })
        .await;
    if let Err(error) = asked
        .map_err(|failure| failure.into_error(&address))
        .and_then(|answer| answer)
    {
        tracing::warn!(%error, successor, "asking a voter to take over the leadership failed");
        return;
    }
    while Instant::now() < deadline {
        let metrics = shared.raft.metrics().borrow().clone();
        if metrics.current_leader.is_some_and(|leader| leader != shared.id) {
            let elapsed_ms = started.elapsed().as_millis();
            tracing::info!(successor, leader = ?metrics.current_leader, elapsed_ms, "leadership handed off");
            return;
        }
        tokio::time::sleep(Duration::from_millis(HANDOFF_POLL_MS)).await;
    }
    tracing::warn!(successor, "the leadership did not move in time; stopping anyway");
}

/// A voter (not this member) that acknowledged this leader's last entry
/// once no proposal is in flight, and its peer address; `None` if there is
/// none by `deadline` or this member stops leading.
async fn caught_up_voter(shared: &Shared, deadline: Instant) -> Option<(u64, String)> {
    while Instant::now() < deadline {
        let metrics = shared.raft.metrics().borrow().clone();
        if metrics.state != ServerState::Leader {
            return None;
        }
        let membership = metrics.membership_config.membership();
        let last = metrics.last_log_index;
        let successor = metrics.replication.as_ref().and_then(|replication| {
            membership
                .voter_ids()
                .filter(|voter| *voter != shared.id)
                .filter_map(|voter| Some((voter, replication.get(&voter).copied().flatten()?.index)))
                .max_by_key(|(_, matched)| *matched)
        });
        if let Some((voter, matched)) = successor {
            if shared.proposer.proposals_in_flight() == 0 && Some(matched) == last {
                let address = membership.get_node(&voter)?.peer_address.clone();
                return Some((voter, address));
            }
        }
        tokio::time::sleep(Duration::from_millis(HANDOFF_POLL_MS)).await;
    }
    None
}

/// Until this leader's own vote is older than the leader lease: until
/// then it would refuse the successor's vote request like any voter.
async fn wait_out_own_lease(shared: &Shared, deadline: Instant) {
    let lease = Duration::from_millis(shared.config.election_timeout_ms_max() + LEASE_MARGIN_MS);
    let since = shared
        .leading_since
        .lock()
        .ok()
        .and_then(|since| since.map(|(_, at)| at))
        .unwrap_or_else(Instant::now);
    tokio::time::sleep_until((since + lease).min(deadline)).await;
}

fn leads(shared: &Shared) -> bool {
    shared.raft.metrics().borrow().state == ServerState::Leader
}

/// On the voter a stopping leader chose: starts an election now.
pub async fn campaign(shared: &Shared) -> Result<(), LodeError> {
    if !crate::shared::voter_ids(&shared.raft).contains(&shared.id) {
        return Err(LodeError::Invalid("this member is not a voter".to_owned()));
    }
    shared
        .raft
        .trigger()
        .elect()
        .await
        .map_err(|fatal| LodeError::Unavailable(format!("raft stopped: {fatal}")))?;
    tracing::info!("the leader is stepping down; campaigning to succeed it");
    Ok(())
}
