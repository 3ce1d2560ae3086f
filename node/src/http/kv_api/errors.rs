//! Failures as the KV JSON API answers them: `{"error": {"kind", "message",
//! …}}` with the kind of Lode's one error set and an HTTP status that fits
//! it. A kind's details ride beside it: the current version of a version
//! conflict, the recovery of an ambiguous mutation, the positions of a
//! stale read or a compacted change feed.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use lode_client::{LodeError, MutationRecovery};
use serde_json::{json, Value};

use super::super::events::position_text;
use super::wire::{WireOpId, WireU64};

/// The error kind's name, its status and its details.
fn describe(error: &LodeError) -> (&'static str, StatusCode, Value) {
    match error {
        LodeError::Invalid(_) => ("invalid", StatusCode::BAD_REQUEST, json!({})),
        LodeError::NotFound(_) => ("not_found", StatusCode::NOT_FOUND, json!({})),
        LodeError::VersionConflict { current } => (
            "version_conflict",
            StatusCode::CONFLICT,
            json!({ "current_version": current.map(WireU64) }),
        ),
        LodeError::ChecksFailed { indexes } => (
            "version_conflict",
            StatusCode::CONFLICT,
            json!({ "failed_checks": indexes }),
        ),
        LodeError::LeaseLost => ("lease_lost", StatusCode::CONFLICT, json!({})),
        LodeError::Stale { applied, wanted } => (
            "stale",
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "applied": WireU64(*applied), "wanted": WireU64(*wanted) }),
        ),
        LodeError::Unsupported(_) => ("unsupported", StatusCode::NOT_IMPLEMENTED, json!({})),
        LodeError::AmbiguousMutation { recovery, .. } => (
            "ambiguous_mutation",
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "recovery": recovery_json(recovery) }),
        ),
        LodeError::Unauthorized => ("unauthorized", StatusCode::UNAUTHORIZED, json!({})),
        LodeError::Forbidden { .. } => ("forbidden", StatusCode::FORBIDDEN, json!({})),
        LodeError::Timeout(_) => ("timeout", StatusCode::GATEWAY_TIMEOUT, json!({})),
        LodeError::Compacted {
            requested,
            trimmed_through,
        } => (
            "compacted",
            StatusCode::GONE,
            json!({
                "requested": position_text(*requested),
                "trimmed_through": position_text(*trimmed_through),
            }),
        ),
        LodeError::QuotaExceeded {
            quota_bytes,
            used_bytes,
        } => (
            "quota_exceeded",
            StatusCode::INSUFFICIENT_STORAGE,
            json!({ "quota_bytes": WireU64(*quota_bytes), "used_bytes": WireU64(*used_bytes) }),
        ),
        LodeError::DiskFull {
            member,
            free_bytes,
            reserve_bytes,
        } => (
            "quota_exceeded",
            StatusCode::INSUFFICIENT_STORAGE,
            json!({
                "member": WireU64(*member),
                "free_bytes": WireU64(*free_bytes),
                "reserve_bytes": WireU64(*reserve_bytes),
            }),
        ),
        // The gateway follows leaders itself; one it could not reach in
        // time, like a member not yet admitted, is unavailable to a caller.
        LodeError::NotLeader { .. } | LodeError::Unavailable(_) | LodeError::NotAdmitted { .. } => {
            ("unavailable", StatusCode::SERVICE_UNAVAILABLE, json!({}))
        }
    }
}

fn recovery_json(recovery: &MutationRecovery) -> Value {
    match recovery {
        MutationRecovery::RetrySameOperation { op_id } => {
            json!({ "action": "retry_same_operation", "op_id": WireOpId(*op_id) })
        }
        MutationRecovery::RepeatPrepared => json!({ "action": "repeat_prepared" }),
        MutationRecovery::WaitOutLeaseTtl { ttl_micros } => {
            json!({ "action": "wait_out_lease_ttl", "ttl_micros": WireU64(*ttl_micros) })
        }
    }
}

/// The error's JSON body: `{"kind", "message", …details}`.
pub(super) fn error_json(error: &LodeError) -> Value {
    let (kind, _, mut body) = describe(error);
    body["kind"] = json!(kind);
    body["message"] = json!(error.to_string());
    body
}

/// The error as an HTTP answer.
pub(super) fn failure(error: LodeError) -> Response {
    let (_, status, _) = describe(&error);
    respond(status, error_json(&error))
}

/// A caller the port's token check refused, with the check's message.
pub(super) fn unauthorized(message: &str) -> Response {
    let mut body = error_json(&LodeError::Unauthorized);
    body["message"] = json!(message);
    respond(StatusCode::UNAUTHORIZED, body)
}

fn respond(status: StatusCode, error: Value) -> Response {
    let body = json!({ "error": error });
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}
