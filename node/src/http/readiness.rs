//! Liveness and readiness on the HTTP port.
//!
//! `/health` says the process serves HTTP, whatever the cluster's state, so
//! a supervisor restarts only a member that stopped answering. `/ready`
//! says this member can serve now: it is a voter, it knows a leader that
//! answers it (a leader: one a quorum acknowledged lately), and it has
//! applied within `ready_lag_entries_max` of the leader's applied index. A
//! learner, a member installing a snapshot or far behind, and one cut off
//! from its leader are not ready. `/ready?verbose` lists every check.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use lode_client::protocol::ClusterStatus;

use super::kv_connect::text;
use super::Gateway;

/// How far behind the leader's applied index a ready member may be, by
/// default.
pub const READY_LAG_ENTRIES_MAX_DEFAULT: u64 = 1_000;
/// Longest time a leader may go without a quorum's acknowledgement and
/// still be ready: a few election timeouts of the defaults.
pub const READY_QUORUM_ACK_MS_MAX: u64 = 2_000;
/// How long readiness waits for the leader's answer.
const READY_LEADER_WAIT: Duration = Duration::from_secs(2);

/// `GET /health`: the process is up.
pub(super) async fn health() -> Response {
    text(StatusCode::OK, "ok\n")
}

#[derive(serde::Deserialize)]
pub(super) struct ReadyQuery {
    verbose: Option<String>,
}

/// One check of readiness: whether it passed and what was seen.
struct Check {
    name: &'static str,
    passed: bool,
    seen: String,
}

/// `GET /ready`, `GET /ready?verbose`.
pub(super) async fn ready(State(gateway): State<Arc<Gateway>>, Query(query): Query<ReadyQuery>) -> Response {
    let checks = checks(&gateway).await;
    let ready = checks.iter().all(|check| check.passed);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = String::new();
    if query.verbose.is_some() {
        for check in &checks {
            let mark = if check.passed { '+' } else { '-' };
            body.push_str(&format!("[{mark}] {}: {}\n", check.name, check.seen));
        }
    }
    match checks.iter().find(|check| !check.passed) {
        None => body.push_str("ready\n"),
        Some(failed) => body.push_str(&format!("not ready: {}\n", failed.seen)),
    }
    text(status, body)
}

async fn checks(gateway: &Gateway) -> Vec<Check> {
    let client = &gateway.callers.own().local;
    let own = match client.node_status().await {
        Ok(own) => own,
        Err(error) => {
            return vec![Check {
                name: "member",
                passed: false,
                seen: format!("the member does not answer: {error}"),
            }]
        }
    };
    let mut checks = vec![voter_check(&own)];
    let Some(leader) = own.leader else {
        checks.push(Check {
            name: "leader",
            passed: false,
            seen: format!("member {} knows no leader", own.answered_by),
        });
        return checks;
    };
    if leader == own.answered_by {
        checks.push(leading_check(&own));
        checks.push(lag_check(&own, own.applied_index, gateway.ready_lag_entries_max));
        return checks;
    }
    let answered = tokio::time::timeout(READY_LEADER_WAIT, client.leader_status()).await;
    match answered {
        Ok(Ok(status)) if status.answered_by == leader => {
            checks.push(Check {
                name: "leader",
                passed: true,
                seen: format!("member {leader} leads term {} and answers", status.term),
            });
            checks.push(lag_check(&own, status.applied_index, gateway.ready_lag_entries_max));
        }
        other => {
            let why = match other {
                Err(_) => format!("did not answer within {} ms", READY_LEADER_WAIT.as_millis()),
                Ok(Err(error)) => format!("cannot be asked: {error}"),
                Ok(Ok(status)) => format!("cannot be reached (member {} answered instead)", status.answered_by),
            };
            checks.push(Check {
                name: "leader",
                passed: false,
                seen: format!("leader {leader} {why}: this member may be cut off"),
            });
        }
    }
    checks
}

fn voter_check(own: &ClusterStatus) -> Check {
    let voter = own
        .members
        .iter()
        .any(|member| member.id == own.answered_by && member.voter);
    Check {
        name: "voter",
        passed: voter,
        seen: if voter {
            format!("member {} is a voter", own.answered_by)
        } else {
            format!(
                "member {} is not a voter (a learner, or not yet added)",
                own.answered_by
            )
        },
    }
}

fn leading_check(own: &ClusterStatus) -> Check {
    match own.quorum_ack_ms {
        Some(age) if age <= READY_QUORUM_ACK_MS_MAX => Check {
            name: "leader",
            passed: true,
            seen: format!(
                "this member leads term {}; a quorum acknowledged it {age} ms ago",
                own.term
            ),
        },
        age => Check {
            name: "leader",
            passed: false,
            seen: format!(
                "this member leads term {} but no quorum acknowledged it within {READY_QUORUM_ACK_MS_MAX} ms \
                 (last: {}; ready_quorum_ack_ms_max)",
                own.term,
                age.map_or("never".to_owned(), |age| format!("{age} ms ago"))
            ),
        },
    }
}

fn lag_check(own: &ClusterStatus, leader_applied: u64, lag_max: u64) -> Check {
    let lag = leader_applied.saturating_sub(own.applied_index);
    Check {
        name: "caught up",
        passed: lag <= lag_max,
        seen: format!(
            "applied {} of the leader's {leader_applied}: {lag} behind (ready_lag_entries_max = {lag_max})",
            own.applied_index
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(applied_index: u64, quorum_ack_ms: Option<u64>) -> ClusterStatus {
        ClusterStatus {
            cluster_id: None,
            answered_by: 2,
            leader: Some(2),
            term: 3,
            members: Vec::new(),
            applied_index,
            last_log_index: Some(applied_index),
            snapshot_index: None,
            purged_index: None,
            expired_awaiting_sweep: 0,
            quorum_ack_ms,
        }
    }

    #[test]
    fn a_member_behind_by_more_than_the_limit_is_not_caught_up() {
        let behind = lag_check(&status(100, None), 1_200, 1_000);
        assert!(!behind.passed);
        assert!(behind.seen.contains("1100 behind"), "{}", behind.seen);
        assert!(lag_check(&status(200, None), 1_200, 1_000).passed);
        // A follower ahead of the answer it got is caught up.
        assert!(lag_check(&status(1_300, None), 1_200, 0).passed);
    }

    #[test]
    fn a_leader_no_quorum_acknowledged_lately_is_not_ready() {
        assert!(leading_check(&status(1, Some(100))).passed);
        let stale = leading_check(&status(1, Some(READY_QUORUM_ACK_MS_MAX + 1)));
        assert!(!stale.passed && stale.seen.contains("no quorum"), "{}", stale.seen);
        assert!(!leading_check(&status(1, None)).passed);
    }
}
