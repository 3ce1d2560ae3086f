//! KV Connect's metadata exchange and its two request-response data path
//! calls, `snapshot_read` and `atomic_write`.
//!
//! The metadata names two endpoints on this port: `/kv/strong` (reads go
//! through the leader's read index, never stale) and `/kv/eventual` (this
//! member's applied state). Failures the client should retry are 5xx with
//! a plain-text reason; bad requests are 4xx naming the field and limit.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use denokv_proto::datapath as pb;
use lode_client::protocol::{AccessToken, Consistency, Query, QueryResult, ReadRequest, WriteRequest};
use lode_client::{Client, LodeError};
use lode_types::auth::TokenParts;
use lode_types::DENO_NAMESPACE;
use prost::Message;

use super::caller::{Caller, Clients};
use super::{deno, Gateway};

/// Protocol versions this port speaks.
const PROTOCOL_VERSIONS: [u64; 3] = [1, 2, 3];
/// How long the metadata a client receives stays valid, in seconds.
const METADATA_TTL_SECONDS: u64 = 3600;
/// The database id every client of a Lode cluster sees: a cluster is one
/// database.
const DATABASE_ID: &str = "4c6f6465-0000-4000-8000-000000000001";
/// Largest request body the data path reads, in bytes: the largest atomic
/// write (819,200 bytes of keys and values) with protobuf framing.
pub(super) const BODY_BYTES_MAX: usize = 1 << 20;

/// A plain-text answer, as KV Connect wants for every failure.
pub(super) fn text(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.into(),
    )
        .into_response()
}

pub(super) fn protobuf(message: &impl Message) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        message.encode_to_vec(),
    )
        .into_response()
}

/// A request refused before it reached the cluster: a status and the
/// reason, answered as plain text.
pub(super) struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl Refusal {
    /// Why the request was refused.
    pub(super) fn message(&self) -> &str {
        &self.message
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        text(self.status, self.message)
    }
}

/// A data path request that passed what every call checks: the token, the
/// endpoint and the protobuf body.
pub(super) struct Admitted<M> {
    /// The caller's clients.
    pub clients: Arc<Clients>,
    pub consistency: Consistency,
    pub strong: bool,
    pub message: M,
}

/// Checks a data path request: the endpoint and the body (the token was
/// checked before the body was read, by `require_token`).
pub(super) fn admit<M: Message + Default>(
    gateway: &Gateway,
    caller: &Caller,
    consistency: &str,
    body: &[u8],
) -> Result<Admitted<M>, Refusal> {
    let (consistency, strong) = endpoint(consistency)?;
    let clients = gateway
        .callers
        .clients(caller)
        .map_err(|error| Refusal::new(StatusCode::SERVICE_UNAVAILABLE, format!("unavailable, retry: {error}")))?;
    let message = M::decode(body).map_err(|error| {
        let what = std::any::type_name::<M>().rsplit("::").next().unwrap_or("request");
        Refusal::new(StatusCode::BAD_REQUEST, format!("invalid {what}: {error}"))
    })?;
    Ok(Admitted {
        clients,
        consistency,
        strong,
        message,
    })
}

/// The consistency an endpoint reads with, and whether it is strong.
fn endpoint(consistency: &str) -> Result<(Consistency, bool), Refusal> {
    match consistency {
        "strong" => Ok((Consistency::Linearizable, true)),
        "eventual" => Ok((Consistency::Eventual, false)),
        other => Err(Refusal::new(
            StatusCode::NOT_FOUND,
            format!("no endpoint {other:?}: the endpoints are /kv/strong and /kv/eventual"),
        )),
    }
}

/// The client of `clients` an endpoint reads with.
pub(super) fn reading_client(clients: &Clients, strong: bool) -> &Client {
    if strong {
        &clients.cluster
    } else {
        &clients.local
    }
}

/// The HTTP answer to a failed cluster call.
pub(super) fn failure(error: LodeError) -> Response {
    match error {
        LodeError::Invalid(message) => text(StatusCode::BAD_REQUEST, format!("invalid request: {message}")),
        LodeError::Unauthorized => text(StatusCode::UNAUTHORIZED, "unauthorized"),
        forbidden @ LodeError::Forbidden { .. } => text(StatusCode::FORBIDDEN, forbidden.to_string()),
        // Not a 5xx: Deno's client would retry it, and it is no transient.
        quota @ (LodeError::QuotaExceeded { .. } | LodeError::DiskFull { .. }) => {
            text(StatusCode::BAD_REQUEST, quota.to_string())
        }
        other => {
            tracing::debug!(error = %other, "KV Connect call failed; the client retries");
            text(StatusCode::SERVICE_UNAVAILABLE, format!("unavailable, retry: {other}"))
        }
    }
}

fn iso8601_utc(seconds_since_epoch: u64) -> String {
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let days = (seconds_since_epoch / 86_400) as i64;
    let second_of_day = seconds_since_epoch % 86_400;
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// The highest protocol version both sides speak, from the metadata
/// exchange's body. No body means version 1. Public for its fuzz target.
pub fn negotiate(body: &[u8]) -> Result<u64, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(1);
    }
    let request: serde_json::Value =
        serde_json::from_slice(body).map_err(|error| format!("the request body is not JSON: {error}"))?;
    let versions = request
        .get("supportedVersions")
        .and_then(|versions| versions.as_array())
        .ok_or("the request body needs `supportedVersions`, an array of protocol versions")?;
    versions
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .filter(|version| PROTOCOL_VERSIONS.contains(version))
        .max()
        .ok_or_else(|| format!("no protocol version in common: this server speaks {PROTOCOL_VERSIONS:?}"))
}

/// The token a KV Connect client uses after the metadata exchange, and
/// when it expires (seconds since the epoch): for a user, a session token
/// of its own, derived from the presented one and dying with it; on a
/// cluster without users, the shared token.
async fn session_token(gateway: &Gateway, caller: &Caller) -> Result<(AccessToken, u64), Response> {
    let now_seconds = lode_client::facade::now_micros() / 1_000_000;
    let presented = match caller {
        Caller::Shared => {
            let token = gateway.callers.shared_token();
            let token = token.ok_or_else(|| text(StatusCode::UNAUTHORIZED, "unauthorized: no token"))?;
            return Ok((token, now_seconds + METADATA_TTL_SECONDS));
        }
        Caller::User(token) => token,
    };
    let parent = TokenParts::parse(&presented.0)
        .map_err(|message| text(StatusCode::UNAUTHORIZED, format!("unauthorized: {message}")))?;
    let ttl = std::time::Duration::from_secs(METADATA_TTL_SECONDS);
    match gateway
        .callers
        .own()
        .cluster
        .auth()
        .issue_session_token(&parent, ttl)
        .await
    {
        Ok((issued, expires_at_micros)) => Ok((issued.token, expires_at_micros / 1_000_000)),
        Err(LodeError::NotFound(_)) => Err(text(StatusCode::UNAUTHORIZED, "unauthorized: the token is not valid")),
        Err(error) => Err(failure(error)),
    }
}

/// `POST /`: the metadata exchange. The endpoints are this member's
/// advertised HTTP address, whatever the request's `Host` says.
pub(super) async fn metadata_exchange(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    super::metrics::count(&gateway, "metadata");
    let version = match negotiate(&body) {
        Ok(version) => version,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let base = format!("{}://{}", gateway.scheme, gateway.advertise);
    let (token, expires_at) = match session_token(&gateway, &caller).await {
        Ok(issued) => issued,
        Err(response) => return response,
    };
    let metadata = serde_json::json!({
        "version": version,
        "databaseId": DATABASE_ID,
        "endpoints": [
            { "url": format!("{base}/kv/strong"), "consistency": "strong" },
            { "url": format!("{base}/kv/eventual"), "consistency": "eventual" },
        ],
        "token": token.0,
        "expiresAt": iso8601_utc(expires_at),
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        metadata.to_string(),
    )
        .into_response()
}

/// `POST /kv/{consistency}/snapshot_read`: every range from one view.
pub(super) async fn snapshot_read(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    Path(consistency): Path<String>,
    body: Bytes,
) -> Response {
    super::metrics::count(&gateway, "snapshot_read");
    let Admitted {
        clients,
        consistency,
        strong,
        message: read,
    } = match admit::<pb::SnapshotRead>(&gateway, &caller, &consistency, &body) {
        Ok(admitted) => admitted,
        Err(refused) => return refused.into_response(),
    };
    let ranges = match deno::read_ranges(&read) {
        Ok(ranges) => ranges,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let request = ReadRequest {
        query: Query::Ranges {
            namespace: DENO_NAMESPACE.to_owned(),
            ranges,
        },
        consistency,
    };
    let client = reading_client(&clients, strong);
    let ranges = match client.read(request).await.map(|response| response.result) {
        Ok(QueryResult::Ranges(ranges)) => ranges,
        Ok(other) => {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("the node answered a range read with {other:?}"),
            )
        }
        Err(error) => return failure(error),
    };
    protobuf(&pb::SnapshotReadOutput {
        ranges: ranges
            .into_iter()
            .map(|entries| pb::ReadRangeOutput {
                values: entries.into_iter().map(deno::entry_to_deno).collect(),
            })
            .collect(),
        read_disabled: false,
        read_is_strongly_consistent: strong,
        status: pb::SnapshotReadStatus::SrSuccess as i32,
    })
}

/// `POST /kv/{consistency}/atomic_write`: checks, mutations and enqueues,
/// all or nothing, through the leader.
pub(super) async fn atomic_write(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    Path(consistency): Path<String>,
    body: Bytes,
) -> Response {
    super::metrics::count(&gateway, "atomic_write");
    let (write, clients) = match admit::<pb::AtomicWrite>(&gateway, &caller, &consistency, &body) {
        Ok(admitted) => (admitted.message, admitted.clients),
        Err(refused) => return refused.into_response(),
    };
    let now_ms = lode_client::facade::now_micros() / 1000;
    let delay_limit_ms = now_ms.saturating_add(lode_types::limits::QUEUE_DELAY_MS_MAX);
    if let Some(index) = write
        .enqueues
        .iter()
        .position(|enqueue| u64::try_from(enqueue.deadline_ms).unwrap_or(0) > delay_limit_ms)
    {
        return text(
            StatusCode::BAD_REQUEST,
            format!(
                "enqueues[{index}].deadline_ms is more than queue_delay_ms_max = {} ms away",
                lode_types::limits::QUEUE_DELAY_MS_MAX
            ),
        );
    }
    let operations = match deno::write_operations(&write) {
        Ok(operations) => operations,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let outcome = if operations.is_empty() {
        // Nothing to write: the commit still answers with a versionstamp,
        // the position a strong read is served at.
        let request = ReadRequest {
            query: Query::Ranges {
                namespace: DENO_NAMESPACE.to_owned(),
                ranges: Vec::new(),
            },
            consistency: Consistency::Linearizable,
        };
        clients.cluster.read(request).await.map(|response| response.position)
    } else {
        let request = WriteRequest {
            op_id: lode_client::sdk::new_op_id(),
            operations,
        };
        clients.cluster.write(request).await.map(|response| response.position)
    };
    let output = match outcome {
        Ok(position) => pb::AtomicWriteOutput {
            status: pb::AtomicWriteStatus::AwSuccess as i32,
            versionstamp: deno::versionstamp(position),
            failed_checks: Vec::new(),
        },
        Err(LodeError::ChecksFailed { indexes }) => pb::AtomicWriteOutput {
            status: pb::AtomicWriteStatus::AwCheckFailure as i32,
            versionstamp: Vec::new(),
            failed_checks: indexes,
        },
        // The write may or may not have applied. KV Connect clients retry a
        // 5xx with a fresh request, which could apply it twice; "unspecified"
        // tells them not to retry and to report the failure instead.
        Err(error @ LodeError::AmbiguousMutation { .. }) => {
            tracing::warn!(%error, "a KV Connect write has an unknown outcome");
            pb::AtomicWriteOutput {
                status: pb::AtomicWriteStatus::AwUnspecified as i32,
                versionstamp: Vec::new(),
                failed_checks: Vec::new(),
            }
        }
        Err(error) => return failure(error),
    };
    protobuf(&output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_times_are_utc_iso8601() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601_utc(1_796_083_199), "2026-11-30T23:59:59Z");
    }

    #[test]
    fn the_highest_common_version_wins() {
        assert_eq!(negotiate(b""), Ok(1));
        assert_eq!(negotiate(br#"{"supportedVersions":[1,2,3]}"#), Ok(3));
        assert_eq!(negotiate(br#"{"supportedVersions":[2]}"#), Ok(2));
        assert!(negotiate(br#"{"supportedVersions":[9]}"#)
            .expect_err("no common version")
            .contains("no protocol version in common"));
        assert!(negotiate(b"{").expect_err("not json").contains("not JSON"));
    }
}
