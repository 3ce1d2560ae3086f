//! The State API over HTTP: `POST /state/v1/<function>` with the seed's
//! JSON parameters and results, so any language (or curl) can call it.
//! Bearer token as for KV Connect.
//!
//! Results: `set` and `update` answer `{old_value, new_value}` (and
//! `errors` when an op failed), `get` and `delete` the value itself (`null`
//! when absent), `list` an array of values, `list_groups` `{groups}`.
//! Failures answer `{"error": {"code", "message"}}` with the code of
//! Lode's error kind.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use lode_client::state::UpdateOp;
use lode_client::LodeError;
use serde::Deserialize;
use serde_json::{json, Value};

use super::caller::Caller;
use super::{events, Gateway};

fn answer(status: StatusCode, body: Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn refused(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    answer(status, json!({ "error": { "code": code, "message": message.into() } }))
}

fn failure(error: LodeError) -> Response {
    let code = match &error {
        LodeError::Invalid(_) => "invalid",
        LodeError::NotFound(_) => "not_found",
        LodeError::Unauthorized => "unauthorized",
        LodeError::Forbidden { .. } => "forbidden",
        LodeError::Timeout(_) => "timeout",
        LodeError::AmbiguousMutation { .. } => "ambiguous_mutation",
        LodeError::QuotaExceeded { .. } | LodeError::DiskFull { .. } => "quota_exceeded",
        _ => "unavailable",
    };
    let status = match code {
        "invalid" => StatusCode::BAD_REQUEST,
        "not_found" => StatusCode::NOT_FOUND,
        "unauthorized" => StatusCode::UNAUTHORIZED,
        "forbidden" => StatusCode::FORBIDDEN,
        "quota_exceeded" => StatusCode::INSUFFICIENT_STORAGE,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    refused(status, code, error.to_string())
}

#[derive(Deserialize)]
struct KeyParameters {
    scope: String,
    key: String,
}

#[derive(Deserialize)]
struct SetParameters {
    scope: String,
    key: String,
    value: Option<Value>,
    /// The seed's backward-compatible alias of `value`.
    data: Option<Value>,
}

#[derive(Deserialize)]
struct UpdateParameters {
    scope: String,
    key: String,
    ops: Vec<UpdateOp>,
}

#[derive(Deserialize)]
struct ScopeParameters {
    scope: String,
}

fn parameters<T: serde::de::DeserializeOwned>(function: &str, body: &[u8]) -> Result<T, LodeError> {
    // Read as one JSON value first: every string is checked as UTF-8 and
    // every number as in range, in unknown parameters too, which decoding
    // straight into `T` would skip unchecked.
    let invalid = |error: serde_json::Error| LodeError::Invalid(format!("state::{function} parameters: {error}"));
    let value: Value = serde_json::from_slice(body).map_err(invalid)?;
    serde_json::from_value(value).map_err(invalid)
}

fn change(change: lode_client::state::StateChange) -> Response {
    let mut body = json!({ "old_value": change.old_value, "new_value": change.new_value });
    if !change.errors.is_empty() {
        body["errors"] = json!(change.errors);
    }
    answer(StatusCode::OK, body)
}

/// One State API call, decoded from its function name and JSON parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum StateCall {
    Set {
        scope: String,
        key: String,
        value: Value,
    },
    Update {
        scope: String,
        key: String,
        ops: Vec<UpdateOp>,
    },
    Get {
        scope: String,
        key: String,
    },
    Delete {
        scope: String,
        key: String,
    },
    List {
        scope: String,
    },
    ListGroups,
}

/// Decodes `POST /state/v1/{function}`'s body: `Invalid` names the
/// parameter at fault, `NotFound` an unknown function. Public for its
/// fuzz target.
pub fn decode_call(function: &str, body: &[u8]) -> Result<StateCall, LodeError> {
    Ok(match function {
        "set" => {
            let call: SetParameters = parameters("set", body)?;
            let value = call
                .value
                .or(call.data)
                .ok_or_else(|| LodeError::Invalid("state::set needs `value` (or its alias `data`)".to_owned()))?;
            StateCall::Set {
                scope: call.scope,
                key: call.key,
                value,
            }
        }
        "update" => {
            let call: UpdateParameters = parameters("update", body)?;
            StateCall::Update {
                scope: call.scope,
                key: call.key,
                ops: call.ops,
            }
        }
        "get" | "delete" => {
            let call: KeyParameters = parameters(function, body)?;
            let (scope, key) = (call.scope, call.key);
            if function == "get" {
                StateCall::Get { scope, key }
            } else {
                StateCall::Delete { scope, key }
            }
        }
        "list" => StateCall::List {
            scope: parameters::<ScopeParameters>("list", body)?.scope,
        },
        "list_groups" => StateCall::ListGroups,
        other => {
            return Err(LodeError::NotFound(format!(
                "no function state::{other}; the functions are set, get, delete, update, list, list_groups"
            )))
        }
    })
}

/// `POST /state/v1/{function}`.
pub(super) async fn call(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    Path(function): Path<String>,
    body: Bytes,
) -> Response {
    let state = match gateway.callers.clients(&caller) {
        Ok(clients) => clients.cluster.state(),
        Err(error) => return failure(error),
    };
    let call = match decode_call(&function, &body) {
        Ok(call) => call,
        Err(error) => return failure(error),
    };
    let result = match call {
        StateCall::Set { scope, key, value } => state.set(&scope, &key, value).await.map(change),
        StateCall::Update { scope, key, ops } => state.update(&scope, &key, &ops).await.map(change),
        StateCall::Get { scope, key } => state.get(&scope, &key).await.map(|value| answer(StatusCode::OK, value)),
        StateCall::Delete { scope, key } => state
            .delete(&scope, &key)
            .await
            .map(|value| answer(StatusCode::OK, value)),
        StateCall::List { scope } => state
            .list(&scope)
            .await
            .map(|values| answer(StatusCode::OK, Value::Array(values))),
        StateCall::ListGroups => state
            .list_groups()
            .await
            .map(|groups| answer(StatusCode::OK, json!({ "groups": groups }))),
    };
    result.unwrap_or_else(failure)
}

/// The query of `GET /state/v1/triggers`.
#[derive(Deserialize)]
pub(super) struct TriggerQuery {
    scope: Option<String>,
    key: Option<String>,
    /// Comma-separated `created`, `updated`, `deleted`.
    kinds: Option<String>,
    /// A JSON pointer whose value must differ between old and new.
    changed: Option<String>,
    /// `INDEX.SEQUENCE` to resume after (or the `Last-Event-ID` header).
    after: Option<String>,
}

/// `GET /state/v1/triggers`: State API changes as server-sent events
/// (`id` is the position to resume after, `data` the seed's event
/// payload), from this member's change feed.
pub(super) async fn triggers(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    axum::extract::Query(query): axum::extract::Query<TriggerQuery>,
) -> Response {
    use lode_client::protocol::ChangeKind;
    let after = match events::resume_position(&headers, query.after) {
        Ok(after) => after,
        Err(error) => return failure(error),
    };
    let mut kinds = Vec::new();
    for kind in query
        .kinds
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .filter(|kind| !kind.is_empty())
    {
        kinds.push(match kind {
            "created" => ChangeKind::Created,
            "updated" => ChangeKind::Updated,
            "deleted" => ChangeKind::Deleted,
            other => {
                return failure(LodeError::Invalid(format!(
                    "kinds holds {other:?}; use created, updated, deleted"
                )))
            }
        });
    }
    let clients = match gateway.callers.clients(&caller) {
        Ok(clients) => clients,
        Err(error) => return failure(error),
    };
    let mut trigger = clients.local.state().trigger().after(after).kinds(kinds);
    if let Some(scope) = query.scope {
        trigger = trigger.scope(scope);
    }
    if let Some(key) = query.key {
        trigger = trigger.key(key);
    }
    if let Some(pointer) = query.changed {
        trigger = trigger.field_changed(pointer);
    }
    events::stream(TriggerFrames(trigger), gateway.stopping.clone(), |error| {
        let code = if error.is_compacted() {
            "compacted"
        } else {
            "unavailable"
        };
        json!({ "code": code, "message": error.to_string() })
    })
}

/// A trigger's events as SSE frames: `id` is the position to resume
/// after, `data` the seed's event payload.
struct TriggerFrames(lode_client::state::Trigger);

impl events::EventBatches for TriggerFrames {
    async fn next_frames(&mut self) -> Result<String, LodeError> {
        let events = self.0.next_batch().await?;
        Ok(events
            .iter()
            .map(|event| {
                events::frame(
                    &events::position_text(event.position),
                    "state",
                    &event.to_json().to_string(),
                )
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_json_throughout_even_where_unknown() {
        let not_utf_8 = b"{\"scope\":\"app\",\"key\":\"k\",\"ignored\":\"\xff\"}";
        let out_of_range = br#"{"scope":"app","key":"k","ignored":1e400}"#;
        for body in [&not_utf_8[..], out_of_range] {
            let refused = decode_call("get", body);
            assert!(
                matches!(&refused, Err(LodeError::Invalid(message)) if message.starts_with("state::get parameters")),
                "{refused:?}"
            );
        }
        assert_eq!(
            decode_call("get", br#"{"scope":"app","key":"k","ignored":"x"}"#).ok(),
            Some(StateCall::Get {
                scope: "app".to_owned(),
                key: "k".to_owned()
            })
        );
    }
}
