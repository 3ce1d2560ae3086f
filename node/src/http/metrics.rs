//! Prometheus metrics on the HTTP port: this member's Raft position and
//! the port's request counts.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::kv_connect::text;
use super::Gateway;

/// Requests served per KV Connect call.
pub struct Counters {
    calls: BTreeMap<&'static str, AtomicU64>,
}

/// The calls counted, fixed so that counting never allocates or locks.
const CALLS: [&str; 4] = ["metadata", "snapshot_read", "atomic_write", "watch"];

impl Counters {
    pub(super) fn count(&self, call: &'static str) {
        if let Some(counter) = self.calls.get(call) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            calls: CALLS.into_iter().map(|call| (call, AtomicU64::new(0))).collect(),
        }
    }
}

/// `GET /metrics`: Prometheus text format; with `--metrics-role`, only for
/// a caller whose user holds the role.
pub(super) async fn metrics(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if let Some(role) = &gateway.metrics_role {
        match gateway.callers.identify(&headers) {
            Err(refusal) => return refusal.into_response(),
            Ok(caller) if !gateway.callers.holds_role(&caller, role) => {
                return text(
                    StatusCode::FORBIDDEN,
                    format!("forbidden: /metrics needs a user holding role {role:?}\n"),
                )
            }
            Ok(_) => {}
        }
    }
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: u64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
    };
    if let Ok(status) = gateway.callers.own().local.node_status().await {
        gauge("lode_member_id", "This member's id.", status.answered_by);
        gauge("lode_raft_term", "The current Raft term.", status.term);
        gauge(
            "lode_raft_leader",
            "The leader's member id (0: none known).",
            status.leader.unwrap_or(0),
        );
        gauge(
            "lode_raft_applied_index",
            "The last log index applied to the state machine.",
            status.applied_index,
        );
        gauge(
            "lode_raft_last_log_index",
            "The last log index in this member's log.",
            status.last_log_index.unwrap_or(0),
        );
        gauge(
            "lode_raft_snapshot_index",
            "The last log index the latest snapshot covers.",
            status.snapshot_index.unwrap_or(0),
        );
        gauge(
            "lode_expired_awaiting_sweep",
            "Expired entries not yet swept.",
            status.expired_awaiting_sweep,
        );
    }
    let _ = writeln!(
        out,
        "# HELP lode_kv_connect_requests_total KV Connect requests received, by call.\n# TYPE lode_kv_connect_requests_total counter"
    );
    for (call, counter) in &gateway.counters.calls {
        let _ = writeln!(
            out,
            "lode_kv_connect_requests_total{{call=\"{call}\"}} {}",
            counter.load(Ordering::Relaxed)
        );
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        out,
    )
        .into_response()
}
