//! `/metrics` on the HTTP port: the member's metrics (`crate::metrics`)
//! in the OpenMetrics text format, open or for one role.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::kv_connect::text;
use super::Gateway;
use crate::metrics::Metrics;

/// The metrics an HTTP port serves: its member's, or, for a port without
/// one, its own alone.
pub trait MetricsSource: Send + Sync {
    fn metrics(&self) -> &Metrics;
    /// Reads the gauges that are set when a scrape asks.
    fn refresh(&self);
}

impl std::fmt::Debug for dyn MetricsSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("MetricsSource")
    }
}

/// A port's own metrics, with no member behind them.
pub(super) struct PortOnly(pub(super) Metrics);

impl MetricsSource for PortOnly {
    fn metrics(&self) -> &Metrics {
        &self.0
    }

    fn refresh(&self) {}
}

/// Counts one KV Connect call.
pub(super) fn count(gateway: &Gateway, call: &'static str) {
    let labels = crate::metrics::CallLabels { call };
    gateway
        .metrics
        .metrics()
        .kv_connect_requests
        .get_or_create(&labels)
        .inc();
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
    gateway.metrics.refresh();
    let out = gateway.metrics.metrics().encode();
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
}
